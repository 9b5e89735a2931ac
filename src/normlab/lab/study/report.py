"""``DIR/report.html`` (self-contained: plots embedded), ``DIR/report.md`` and
``DIR/claims.json`` (the same verdicts, effects, intervals and n, for programs).

The report is built once as a document (``normlab.lab.doc``) and rendered to HTML and Markdown.
Order: the summary (one row per claim: title and source, the verdict, one sentence of what was
seen, the scope), how verdicts are decided (what every rule shares, said once), then per claim
its plots, its parts, controls and seeds and its rule in words, the machinery folded away; then
the arms, their configs and the environment, folded.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from normlab.lab import doc as d
from normlab.lab.io import write_file
from normlab.lab.render import md_table
from normlab.lab.study import words
from normlab.lab.study.claims import Claim
from normlab.lab.study.claims_page import REPORT_LINK
from normlab.lab.study.measures import H_TEXT, MEASURES
from normlab.lab.study.stats import Verdict
from normlab.lab.verdict import BOUND_TEXT, CLAIM_WORDS, EXPECT, LEVEL, POWER, Word

_COLORS = {
    Word.HOLDS: "#1a7f37",
    Word.DOES_NOT_HOLD: "#cf222e",
    Word.INCONCLUSIVE: "#9a6700",
    Word.NOT_TESTABLE: "#57606a",
}
HOW = "how-verdicts-are-decided"  # the anchor of the section every claim links to


def badge(status: str) -> d.Badge:
    return d.Badge(status, _COLORS.get(status, "#57606a"))


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


def size(preset, claim: Claim) -> str:
    """The model sizes a claim was tested at: its arms' distinct shapes, in words."""
    return "; ".join(
        f"d={s['d']} L={s['blocks']} T={s['T']} B={s['B']} {s['steps']} steps "
        f"({words.tokens(s['tokens'])} tokens) init={s['init']}"
        for s in scope(preset, claim)
    )


def family(verdicts) -> dict[str, Any]:
    """How many claims were decided, at what error rate, within and across claims."""
    n = len(verdicts)
    counts = {s: sum(v.status == s for _, v in verdicts) for s in CLAIM_WORDS}
    held, failed = counts[Word.HOLDS], counts[Word.DOES_NOT_HOLD]
    alpha = 1 - LEVEL
    text = (
        f"{n} claims: {held} hold, {failed} do not hold, {counts[Word.INCONCLUSIVE]} "
        f"inconclusive, {counts[Word.NOT_TESTABLE]} not testable here. Each claim is decided at "
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


def format_table(preset, verdicts, plateau_h: float | None = None) -> str:
    """The summary as a Markdown table: what a study prints at its end."""
    rows = [
        [f"**{c.name}**", f"**{v.status}**", words.sentence(c, v, plateau_h)] for c, v in verdicts
    ]
    return md_table(["claim", "verdict", "what was seen"], rows)


# --------------------------------------------------------------------------------------------
# the document


def _plots(claim: Claim, verdict: Verdict, results, timings, plot_dir: Path) -> list[d.Figure]:
    from normlab.lab.study.plots import PLOTS

    out = []
    for kind in claim.plots:
        title, fn = PLOTS[kind]
        png = fn(results, claim, verdict, timings)
        if png is not None:
            fname = f"{claim.name}-{kind}.png"
            write_file(plot_dir / fname, png)
            out.append(d.Figure(title, png, f"plots/{fname}"))
    return out


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return "–" if x is None else str(x)


def _summary(preset, verdicts, meta) -> list[d.Block]:
    h = meta.get("plateau_h")
    rows = tuple(
        (
            # the statement in words leads; the claim's id links to its section
            (
                c.statement,
                " ",
                d.Link(c.name, f"#{c.name}"),
                " ",
                d.Muted(words.short_source(c.source)),
            ),
            (badge(v.status),),
            (
                words.sentence(c, v, h),
                " ",
                d.Muted(words.short_scope(scope(preset, c))),
            ),
        )
        for c, v in verdicts
    )
    return [
        d.Heading(2, "Summary", "summary"),
        d.Table(("statement (claim)", "verdict", "what the lab saw (scope)"), rows, cls="summary"),
        d.Paragraph(
            (
                REPORT_LINK,
                " The words used here (δ, n, interval, Holm, not testable here): ",
                d.Link("glossary", "#glossary"),
                ".",
            ),
            muted=True,
        ),
    ]


def _how(verdicts, meta) -> list[d.Block]:
    """What every rule shares, said once."""
    fam = family(verdicts)
    h = meta.get("plateau_h")
    alpha = 1 - LEVEL
    items = [
        "Pairing: seed i gives every arm the same data order and, where the shapes agree, the "
        "same initial weights, so arms are compared seed by seed: a rule computes one value v "
        "per seed from the runs of that seed.",
        f"Seeds are never dropped silently: {BOUND_TEXT}.",
        f"The statistic: the mean of v over the n paired seeds with a {LEVEL:.0%} Student-t "
        f"interval (scipy.stats), and the detectable effect at n: the true effect n seeds find "
        f"with {POWER:.0%} power. δ is the smallest effect that matters, fixed before the runs. "
        "A rule whose seeds have heavy tails (a BatchNorm model that blows up in eval mode) says "
        "so in its spec and uses the 20 % trimmed mean with Yuen's interval instead, or, where "
        "even that is moved by the tails, the median with its distribution-free interval (the "
        "order statistics the sign test inverts).",
        f"The decision, by what the claim expects. Directed (>0 or <0): {EXPECT['>0']}. "
        f"Differs (≠0): {EXPECT['≠0']}. As good as (≈0): {EXPECT['≈0']}.",
        f"Compound claims correct their looks by Holm's step-down: with m parts not yet "
        f"confirmed, each is tested with its interval at 1 − {alpha:.0%}/m; those that reach the "
        "decision are confirmed, m shrinks, and the rest are tested again. 'All of' holds iff "
        "every part holds (each at 95 %) and does not hold iff some part does not after Holm; "
        "'any of' is the reverse. A part that reaches a decision alone but not after the "
        "correction is inconclusive, and says so.",
        "Controls: 'X fails' means something only where a recipe trains in the same setting. "
        f"If a claim's control does not hold, the verdict is '{Word.NOT_TESTABLE}' with the "
        "control's result as the reason, never 'does not hold'. So is a claim the study runs "
        "too few seeds for to have any interval (one; a median under 6): no outcome of its "
        "runs could decide it.",
        "Timing claims are decided over fresh processes of a serial phase after the training "
        "(one after the other, nothing else of the study running; in each, interleaved ABBA "
        "rounds, the process's value the median of its rounds), not over seeds: the 20 % "
        "trimmed mean over processes with Yuen's interval, so the interval covers run-to-run "
        "variation and a stalled process moves neither.",
        f"Error rates: {fam['text']}",
        "Scope: every verdict holds at the size it was found at (width d, blocks, tokens seen "
        "= steps × B × T), not beyond.",
    ]
    if h is not None:
        items.insert(
            4, f"H = {h:.3f} nats/byte, the plateau bar of the 'fails'/'trains' rules: {H_TEXT}."
        )
    glossary = tuple((d.Strong(t), ": ", *d.from_markdown(x)) for t, x in words.GLOSSARY)
    return [
        d.Heading(2, "How verdicts are decided", HOW),
        d.Items(tuple(items)),
        d.Heading(2, "Glossary", "glossary"),
        d.Items(glossary),
    ]


def _estimate_row(label: str, rule, v: Verdict) -> tuple:
    e = v.estimate
    return (
        label or "–",
        (badge(v.status),),
        words.interval(e),
        str(e.n) if e else "–",
        f"{rule.delta:.3g}",
        f"{e.mde:.3g}" if e and e.mde is not None else "–",
        v.correction or "–",
    )


PARTS_HEADER = ("part", "verdict", "effect [95 % interval]", "n", "δ", "detectable at n", "Holm")


def _claim(preset, c: Claim, v: Verdict, figures: list[d.Figure], h) -> d.Section:
    rules = words.rules_of(c.rule)
    parts = v.parts or (("", v),)
    blocks: list[d.Block] = [
        d.Heading(2, (c.name, " ", badge(v.status)), c.name),
        d.Paragraph((c.statement, " ", d.Muted(f"— {c.source}"))),
        d.Paragraph((d.Strong("Seen:"), " ", words.sentence(c, v, h))),
        *figures,
        d.Table(
            PARTS_HEADER,
            tuple(
                _estimate_row(label, rule, pv)
                for (label, rule), (_, pv) in zip(rules, parts, strict=True)
            ),
        ),
    ]
    controls = list(v.controls) + [
        (f"[{n}] {lab}", cv) for n, p in v.parts for lab, cv in p.controls
    ]
    if controls:
        rows = tuple(
            (label, (badge(cv.status),), words.interval(cv.estimate), _seeds(cv))
            for label, cv in controls
        )
        blocks.append(d.Table(("control", "verdict", "effect [95 % interval]", "seeds"), rows))
    seeds = v.seeds.text() if v.seeds else "decided over timing rounds, not seeds"
    blocks.append(
        d.Paragraph(
            (
                d.Strong("Seeds:"),
                f" {seeds}; {c.seeds} per arm. ",
                d.Strong("Tested at:"),
                f" {words.compact_size(scope(preset, c))}.",
            )
        )
    )
    lines, text = words.rule_words(c)
    blocks += [
        d.Paragraph(
            (
                d.Strong("Rule (fixed before the runs):"),
                f" {text} ",
                d.Link("How verdicts are decided", f"#{HOW}"),
            )
        ),  # fmt: skip
        d.Items(tuple(lines)),
    ]
    why = [("claim", v.why)] + [(f"[{n}]", p.why) for n, p in v.parts]
    why += [(f"control '{label}'", cv.why) for label, cv in controls]
    means = tuple((k, _fmt(x)) for k, x in v.means.items())
    blocks.append(
        d.Details(
            "The numbers behind the verdict",
            (
                d.Table(("what", "why"), tuple(why)),
                d.Table(("mean over the paired seeds", "value"), means),
                *([d.Paragraph(f"Correction: {v.correction}.")] if v.correction else []),
            ),
        )
    )
    return d.Section(c.name, tuple(blocks))


def _seeds(v: Verdict) -> str:
    return v.seeds.text() if v.seeds else "–"


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


ARM_HEADER = (
    "arm", "model", "seeds", "diverged", "final val loss",
    "Var f / Var(x+f) at init (attn / mlp)", "ms/step", "CPU s",
)  # fmt: skip


def _summary_line(preset, results, meta) -> str:
    n = sum(map(len, results.values()))
    cpu = [x["summary"].get("cpu_s") for arm in results.values() for x in arm.values()]
    cpu_s = f" ({sum(cpu):.0f} CPU s in the runs)" if cpu and None not in cpu else ""
    reused = meta.get("reused_runs") or 0
    again = f"; {reused} run(s) reused from an earlier invocation (--resume)" if reused else ""
    decided = meta.get("decided_again")
    decided = (
        f" Decided again from its results on {decided} with "
        f"{meta.get('decided_with', 'its spec')} (nothing retrained)."
        if decided
        else ""
    )
    return (
        f"{preset.description}. {n}/{len(preset.runs())} runs (seed block "
        f"{meta.get('seed_block', 0)}), {meta['wall_s']:.0f} s wall{cpu_s}{again}, finished "
        f"{meta['finished']}.{decided}"
    )


def _machinery(out: Path, preset, results, meta) -> list[d.Block]:
    env = {**meta["environment"], **{f"corpus {k}": x for k, x in meta["corpus"].items()}}
    configs = tuple(
        d.Details(r.name, (d.Pre(json.dumps(r.config.to_dict(), indent=1), "json"),))
        for r in preset.arms
    )
    if (out / "numerics.html").exists():
        numerics: d.Inline = (
            d.Strong("Numerics:"),
            " ",
            d.Link("precision and overflow of the norms in FP16/BF16/FP32", "numerics.html"),
        )
    else:
        numerics = (
            d.Strong("Numerics:"),
            " not run — ",
            d.Code(f"normlab numerics --out {out}"),
            " adds a precision page linked here.",
        )
    return [
        d.Heading(2, "Arms, configs and environment", "arms"),
        d.Paragraph(numerics, muted=True),
        d.Details(
            "Arms: seeds, outcomes and mean numbers",
            (d.Table(ARM_HEADER, tuple(tuple(r) for r in _arm_rows(preset, results))),),
        ),
        d.Details("Configs", configs),
        d.Details("Environment", (d.Table(("", ""), tuple((k, _fmt(x)) for k, x in env.items())),)),
    ]


def build(out: Path, preset, results, verdicts, meta, figures, lead: d.Raw | None = None):
    """The report as a document: summary first, the shared explanation once, then the claims."""
    h = meta.get("plateau_h")
    doc = d.Document(f"normlab study: {preset.name}")
    env = meta["environment"]
    doc.add(
        d.Heading(1, ("normlab study: ", d.Code(preset.name))),
        d.Paragraph(
            f"{_summary_line(preset, results, meta)} On {env['cpu']} ({env['threads']} threads, "
            f"{env['workers']} worker(s)); torch {env['torch']}, numba {env['numba']}.",
            muted=True,
        ),
    )
    if lead is not None:
        doc.add(lead)
    doc.add(*_summary(preset, verdicts, meta), *_how(verdicts, meta))
    doc.add(d.Heading(2, "Claims", "claims"))
    for c, v in verdicts:
        doc.add(_claim(preset, c, v, figures[c.name], h))
    doc.add(*_machinery(out, preset, results, meta))
    return doc


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
    figures = {c.name: _plots(c, v, results, timings, plot_dir) for c, v in verdicts}
    lead = d.Raw(lead_html, lead_md) if lead_md or lead_html else None
    doc = build(out, preset, results, verdicts, meta, figures, lead)
    # The contents stand after the title, the meta line, any lead and the summary (heading,
    # table, the link to the coverage table).
    write_file(out / "report.html", d.to_html(doc, toc_after=5 + (lead is not None)))
    write_file(out / "report.md", d.to_markdown(doc))
    write_file(
        out / "claims.json",
        json.dumps(claims_json(preset, verdicts, meta), indent=1, ensure_ascii=False),
    )
