"""``DIR/report.html`` (self-contained: plots embedded), ``DIR/report.md`` and
``DIR/claims.json`` (the same verdicts, effects, intervals and n, for programs).

Order: the claim table with verdicts, then per claim its rule, numbers and plots, then the arms
and their seeds, and the environment. Every string that comes from configs, results or the data
goes through ``html.escape``.
"""

from __future__ import annotations

import json
import statistics
from html import escape
from pathlib import Path
from typing import Any

from normlab.lab.render import CSS, html_table, img, md_table, write_atomic
from normlab.lab.study.claims import (
    FAILS,
    HOLDS,
    LEVEL,
    UNSURE,
    UNTESTABLE,
    Claim,
    Verdict,
)
from normlab.lab.study.measures import MEASURES

_COLORS = {HOLDS: "#1a7f37", FAILS: "#cf222e", UNTESTABLE: "#57606a"}


def _badge(status: str) -> str:
    color = _COLORS.get(status, "#9a6700")
    return f'<span class="v" style="background:{color}">{escape(status)}</span>'


def _effect(v: Verdict) -> str:
    """ "effect [lo, hi], n=k" of a verdict, or of each part of a compound one."""
    if v.parts:
        return "; ".join(f"{name}: {_effect(p)}" for name, p in v.parts)
    return v.estimate.text() if v.estimate else "–"


def _delta(claim: Claim) -> str:
    rules = [r for _, r in claim.rule.parts()]
    return ", ".join(dict.fromkeys(f"{r.delta:.3g}" for r in rules))


def _mde(v: Verdict) -> str:
    ests = [p.estimate for _, p in v.parts] if v.parts else [v.estimate]
    return ", ".join(f"{e.mde:.3g}" if e and e.mde is not None else "–" for e in ests)


def scope(preset, claim: Claim) -> list[dict[str, Any]]:
    """The sizes a claim was tested at, one entry per distinct shape of its arms (a verdict holds
    at these sizes, not beyond): width, blocks, T, B, steps, tokens seen = steps × B × T (the
    planned budget: a stalled run stops earlier), init."""
    configs = {r.name: r.config for r in preset.arms}
    shapes: dict[tuple, dict[str, Any]] = {}
    for arm in claim.arms:
        c = configs[arm]
        m = c.model
        key = (m.dim, m.n_layers, c.seq_len, c.batch_size, c.steps, m.init)
        entry = shapes.setdefault(
            key,
            {
                "d": m.dim,
                "blocks": m.n_layers,
                "T": c.seq_len,
                "B": c.batch_size,
                "steps": c.steps,
                "tokens": c.steps * c.batch_size * c.seq_len,
                "init": m.init,
                "arms": [],
            },
        )
        entry["arms"].append(arm)
    return list(shapes.values())


def _tokens(n: int) -> str:
    return f"{n / 1e6:.3g} M" if n >= 1e6 else f"{n / 1e3:.3g} K" if n >= 1e3 else str(n)


def size(preset, claim: Claim) -> str:
    """The model sizes a claim was tested at: its arms' distinct shapes, in words."""
    return "; ".join(
        f"d={s['d']} L={s['blocks']} T={s['T']} B={s['B']} {s['steps']} steps "
        f"({_tokens(s['tokens'])} tokens) init={s['init']}"
        for s in scope(preset, claim)
    )


def _outcomes(v: Verdict) -> str:
    """ "k of n seeds diverged, j stalled" of a verdict ("–" for a timing claim)."""
    return v.seeds.text() if v.seeds else "–"


def family(verdicts) -> dict[str, Any]:
    """How many claims were decided, at what error rate, within and across claims."""
    n = len(verdicts)
    counts = {
        s: sum(v.status == s for _, v in verdicts) for s in (HOLDS, FAILS, UNSURE, UNTESTABLE)
    }
    alpha = 1 - LEVEL
    text = (
        f"{n} claims: {counts[HOLDS]} hold, {counts[FAILS]} do not hold, {counts[UNSURE]} "
        f"inconclusive, {counts[UNTESTABLE]} not testable here. Each claim is decided at "
        f"{LEVEL:.0%}: the chance that it is called 'holds', or 'does not hold', when that is "
        f"false is at most {alpha:.0%} (within a compound claim family-wise over its parts, by "
        f"Holm's step-down; a claim's controls must hold as well). Across the {n} claims there "
        f"is no correction: by chance alone, up to {alpha * n:.2g} of them (n × {alpha:.0%}) "
        "may be decided wrongly."
    )
    return {
        "claims": n,
        "counts": counts,
        "level": LEVEL,
        "within_claim": f"family-wise {alpha:.0%} (Holm across the parts of a compound claim)",
        "across_claims": "no correction",
        "expected_false_decisions_at_most": alpha * n,
        "text": text,
    }


TABLE_HEADER = [
    "claim",
    "verdict",
    "effect [95 % interval], n",
    "δ",
    "detectable at n",
    "seeds diverged/stalled",
    "controls",
    "tested at",
]


def _controls(v: Verdict) -> str:
    """What each control showed, beside the verdict it conditions (a part's: under its label)."""

    def one(label: str, c: Verdict) -> str:
        return f"{label}: {c.status}" + (f" ({c.estimate.text()})" if c.estimate else "")

    items = [one(label, c) for label, c in v.controls]
    items += [f"[{name}] {one(label, c)}" for name, p in v.parts for label, c in p.controls]
    return "; ".join(items) or "–"


def _row(preset, c: Claim, v: Verdict) -> list[str]:
    return [_effect(v), _delta(c), _mde(v), _outcomes(v), _controls(v), size(preset, c)]


def format_table(preset, verdicts) -> str:
    """The claim table as Markdown (also printed at the end of a study)."""
    rows = [
        [f"**{c.name}**: {c.statement}", f"**{v.status}**", *_row(preset, c, v)]
        for c, v in verdicts
    ]
    return md_table(TABLE_HEADER, rows)


def claims_json(preset, verdicts, meta: dict) -> dict[str, Any]:
    return {
        "preset": preset.name,
        "seed_block": meta.get("seed_block", 0),
        "plateau_h": meta.get("plateau_h"),
        "family": family(verdicts),
        "claims": [
            {
                "name": c.name,
                "statement": c.statement,
                "source": c.source,
                "rule": c.describe(),
                "seeds": c.seeds,
                "size": size(preset, c),
                "scope": scope(preset, c),
                **v.to_dict(),
            }
            for c, v in verdicts
        ],
    }


def _details(v: Verdict) -> list[str]:
    """What a verdict's section says beyond its result: seeds, correction, controls."""
    out = []
    if v.seeds:
        out.append(f"Seeds: {v.seeds.text()}.")
    if v.correction:
        out.append(f"Correction: {v.correction}.")
    for label, c in v.controls:
        out.append(f"Control '{label}': {c.status} ({c.why}).")
    return out


def _plots(claim: Claim, verdict: Verdict, results, timings, plot_dir: Path):
    from normlab.lab.study.plots import PLOTS

    out = []
    for kind in claim.plots:
        title, fn = PLOTS[kind]
        png = fn(results, claim, verdict, timings)
        if png is not None:
            fname = f"{claim.name}-{kind}.png"
            (plot_dir / fname).write_bytes(png)
            out.append((title, fname, png))
    return out


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return "–" if x is None else str(x)


def _describe_model(cfg: dict) -> str:
    m = cfg["model"]
    return (
        f"{m['arch']} {m['placement']}-{m['norm']} d={m['dim']} L={m['n_layers']} "
        f"T={cfg['seq_len']} B={cfg['batch_size']} steps={cfg['steps']} lr={cfg['lr']:g} "
        f"warmup={cfg['warmup_steps']} init={m['init']}"
    )


def _arm_rows(preset, results) -> list[list[str]]:
    """One row per arm: seeds, outcome and the mean of the main numbers over its seeds."""
    rows = []
    for r in preset.arms:
        runs = list(results.get(r.name, {}).values())
        ok = [x for x in runs if x["status"] == "ok"]

        def mean(key: str, runs=ok) -> str:
            xs = [x["summary"].get(key) for x in runs]
            xs = [x for x in xs if isinstance(x, int | float)]
            if not xs:
                return "–"
            m = statistics.fmean(xs)
            return _fmt(m) if len(xs) < 2 else f"{_fmt(m)} ± {_fmt(statistics.stdev(xs))}"

        stalled = sorted(x["stopped_step"] for x in ok if x.get("stopped_step"))
        stopped = f" ({len(stalled)} stalled at step {stalled[0]})" if stalled else ""
        rows.append(
            [
                r.name,
                _describe_model(r.config.to_dict()),
                f"{len(runs)}/{preset.seeds(r.name)}",
                f"{len(runs) - len(ok)}{stopped}",
                mean("final_val_loss"),
                _branch_ratios(runs),
                mean("step_ms"),
                mean("cpu_s"),
            ]
        )
    return rows


def _branch_ratios(runs: list[dict]) -> str:
    """ "attn / mlp": the branch share of the variance at init, mean over the arm's seeds."""
    means = []
    for key in ("attn_branch_ratio", "mlp_branch_ratio"):
        xs = [v for v in (MEASURES[key][1](r, None) for r in runs) if v is not None]
        means.append(f"{statistics.fmean(xs):.2f}" if xs else None)
    return "–" if None in means else " / ".join(means)


ARM_HEADER = [
    "arm", "model", "seeds", "diverged", "final val loss",
    "Var f / Var(x+f) at init (attn / mlp)", "ms/step", "CPU s",
]  # fmt: skip


def write_reports(
    out: Path,
    preset,
    results: dict,
    verdicts,
    meta: dict,
    *,
    lead_md: str = "",
    lead_html: str = "",
) -> None:
    """The three files; ``lead_md``/``lead_html`` (``normlab advise``'s advice) open the
    reports, right after their title."""
    plot_dir = out / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)
    timings = meta.get("timings") or {}
    plots = {c.name: _plots(c, v, results, timings, plot_dir) for c, v in verdicts}
    html = _html(out, preset, results, verdicts, meta, plots, lead_html)
    write_atomic(out / "report.html", html)
    write_atomic(out / "report.md", _markdown(preset, results, verdicts, meta, plots, lead_md))
    write_atomic(
        out / "claims.json",
        json.dumps(claims_json(preset, verdicts, meta), indent=1, ensure_ascii=False),
    )


def _plateau(meta) -> str:
    h = meta.get("plateau_h")
    if h is None:
        return ""
    return (
        f"H = {h:.3f} nats/byte: the unigram cross-entropy of the validation bytes under the "
        "training bytes' frequencies, the bar of the 'fails'/'trains' rules."
    )


def _summary_line(preset, results, meta) -> str:
    n = sum(map(len, results.values()))
    cpu = [x["summary"].get("cpu_s") for arm in results.values() for x in arm.values()]
    cpu_s = f" ({sum(cpu):.0f} CPU s in the runs)" if cpu and None not in cpu else ""
    reused = meta.get("reused_runs") or 0
    again = f"; {reused} run(s) reused from an earlier invocation (--resume)" if reused else ""
    return (
        f"{preset.description}. {n}/{len(preset.runs())} runs (seed block "
        f"{meta.get('seed_block', 0)}), {meta['wall_s']:.0f} s wall{cpu_s}{again}, finished "
        f"{meta['finished']}."
    )


def _html(out: Path, preset, results, verdicts, meta, plots, lead: str = "") -> str:
    e = escape
    rows = [
        [f"<a href='#{e(c.name)}'><b>{e(c.name)}</b></a>: {e(c.statement)}", _badge(v.status)]
        + [e(x) for x in _row(preset, c, v)]
        for c, v in verdicts
    ]
    h = [
        f"<h1>normlab study — <code>{e(preset.name)}</code></h1>",
        f"<p class='muted'>{e(_summary_line(preset, results, meta))}</p>",
        *([lead] if lead else []),
        "<h2>Claims</h2>",
        html_table(TABLE_HEADER, rows, raw=True),
        f"<p>{e(family(verdicts)['text'])} {e(_plateau(meta))}</p>",
        "<p class='muted'>Effects are means over paired seeds (timings: over interleaved rounds "
        "of the serial phase) with 95 % Student-t intervals; δ is the smallest effect that "
        "matters, fixed before the runs; 'detectable at n' is the effect this many seeds "
        "finds with 80 % power.</p>",
    ]
    if (out / "numerics.html").exists():
        h.append(
            "<p><b>Numerics</b>: <a href='numerics.html'>precision and overflow of the "
            "norms in FP16/BF16/FP32</a>.</p>"
        )
    else:
        h.append(
            "<p class='muted'><b>Numerics</b>: not run — <code>normlab numerics --out "
            f"{e(str(out))}</code> adds a precision page linked here.</p>"
        )
    for c, v in verdicts:
        h.append(
            f"<section id='{e(c.name)}'><h2>{e(c.name)} {_badge(v.status)}</h2>"
            f"<p>{e(c.statement)} <span class='muted'>({e(c.source)})</span></p>"
            f"<p><b>Tested at:</b> {e(size(preset, c))}; {c.seeds} seed(s) per arm.</p>"
            f"<p><b>Rule (fixed before the runs):</b> {e(c.describe())}</p>"
            f"<p><b>Result:</b> {e(v.why)}.</p>"
        )
        h += [f"<p class='muted'>{e(x)}</p>" for x in _details(v)]
        means = [[k, _fmt(x)] for k, x in v.means.items()]
        h.append(html_table(["mean over the paired seeds", "value"], means))
        for title, _, png in plots[c.name]:
            h.append(f"<h4>{e(title)}</h4>{img(title, png)}")
        h.append("</section>")
    h += [
        "<section><h2>Arms</h2>",
        html_table(ARM_HEADER, _arm_rows(preset, results)),
        "<h3>Configs</h3>",
    ]
    for r in preset.arms:
        h.append(
            f"<details><summary>{e(r.name)}</summary>"
            f"<pre>{e(json.dumps(r.config.to_dict(), indent=1))}</pre></details>"
        )
    env = {**meta["environment"], **{f"corpus {k}": x for k, x in meta["corpus"].items()}}
    h += [
        "<h2>Environment</h2>",
        html_table(["", ""], [[k, _fmt(x)] for k, x in env.items()]),
        "</section>",
    ]
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>normlab study: "
        f"{e(preset.name)}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(h)
        + "\n</body></html>\n"
    )


def _markdown(preset, results, verdicts, meta, plots, lead: str = "") -> str:
    env, corpus = meta["environment"], meta["corpus"]
    md = [
        f"# normlab study: {preset.name}",
        "",
        _summary_line(preset, results, meta),
        f"On {env['cpu']} ({env['threads']} threads, {env['workers']} worker(s)); torch "
        f"{env['torch']}, numba {env['numba']}; corpus {corpus['source']} sha256 "
        f"{corpus['sha256'][:16]}….",
        "",
        *([lead, ""] if lead else []),
        "## Claims",
        "",
        format_table(preset, verdicts),
        "",
        family(verdicts)["text"] + " " + _plateau(meta),
        "",
        "Effects are means over paired seeds (timings: over interleaved rounds of the serial "
        "phase) with 95 % Student-t intervals; δ is the smallest effect that matters, fixed "
        "before the runs; 'detectable at n' is the effect this many seeds finds with 80 % "
        "power.",
        "",
    ]
    for c, v in verdicts:
        md += [
            f"## {c.name}: {v.status}",
            "",
            f"{c.statement} ({c.source})",
            "",
            f"Tested at: {size(preset, c)}; {c.seeds} seed(s) per arm.",
            "",
            f"Rule: {c.describe()}",
            "",
            f"Result: {v.why}.",
            "",
            *[x for d in _details(v) for x in (d, "")],
            md_table(
                ["mean over the paired seeds", "value"], [[k, _fmt(x)] for k, x in v.means.items()]
            ),
            "",
        ]
        md += [f"![{title}](plots/{fname})" for title, fname, _ in plots[c.name]] + [""]
    md += ["## Arms", "", md_table(ARM_HEADER, _arm_rows(preset, results))]
    return "\n".join(md) + "\n"
