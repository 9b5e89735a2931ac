"""``DIR/report.html`` (self-contained: plots embedded as base64 PNGs) and ``DIR/report.md``.

Order: the claim table with verdicts, then per claim its rule, numbers and plots, then the runs,
their configs and the environment. Every string that comes from configs, results or the data
goes through ``html.escape``.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from normlab.lab.render import CSS, img, write_atomic
from normlab.lab.study.claims import FAILS, HOLDS, Claim, Verdict

_COLORS = {HOLDS: "#1a7f37", FAILS: "#cf222e"}


def decide_all(preset, results: dict[str, dict], unigram_entropy: float):
    ctx = {"unigram_entropy": unigram_entropy}
    return [(c, c.decide(results, ctx)) for c in preset.claims]


def _badge(status: str) -> str:
    color = _COLORS.get(status, "#9a6700")
    return f'<span class="v" style="background:{color}">{escape(status)}</span>'


def _nums(v: Verdict) -> str:
    return ", ".join(f"{k} = {x}" for k, x in v.numbers.items())


def format_table(preset, verdicts: list[tuple[Claim, Verdict]]) -> str:
    """The claim table as Markdown (also printed at the end of a study)."""
    lines = [f"| claim | verdict | numbers ({preset.name} preset) |", "|---|---|---|"]
    for c, v in verdicts:
        stmt = c.statement.replace("|", "\\|")
        lines.append(f"| **{c.name}**: {stmt} | **{v.status}** | {_nums(v).replace('|', '/')} |")
    return "\n".join(lines)


def _plots(claim: Claim, results: dict, plot_dir: Path) -> list[tuple[str, str, bytes]]:
    from normlab.lab.study.plots import PLOTS

    out = []
    for kind in claim.plots:
        title, fn = PLOTS[kind]
        kw = {"matrix": getattr(claim.rule, "matrix", None)} if kind == "grad_blocks" else {}
        png = fn(results, claim.runs, **kw)
        if png is not None:
            fname = f"{claim.name}-{kind}.png"
            (plot_dir / fname).write_bytes(png)
            out.append((title, fname, png))
    return out


_RUN_COLS = (
    ("status", lambda r: r["status"]),
    ("final val loss", lambda r: r["summary"].get("final_val_loss")),
    ("val loss (train mode)", lambda r: r["summary"].get("final_val_loss_train_mode")),
    ("train loss (last 10%)", lambda r: r["summary"].get("train_loss_last")),
    ("ms/step", lambda r: r["summary"].get("step_ms")),
    ("norm ms", lambda r: r["summary"].get("norm_ms")),
    ("tokens/s", lambda r: r["summary"].get("tokens_per_s")),
    ("params", lambda r: r["summary"].get("n_params")),
    ("wall s", lambda r: r["summary"].get("wall_s")),
    ("CPU s", lambda r: r["summary"].get("cpu_s")),
)


def _fmt(x: Any) -> str:
    if isinstance(x, float):
        return f"{x:.4g}"
    return "–" if x is None else str(x)


def _cpu(results: dict) -> str:
    """ " (N CPU s in the runs)", when the runs recorded it: the cost on a busy machine."""
    cpu = [r["summary"].get("cpu_s") for r in results.values()]
    return f" ({sum(cpu):.0f} CPU s in the runs)" if cpu and None not in cpu else ""


def _reused(meta: dict) -> str:
    n = meta.get("reused_runs") or 0
    return f"; {n} run(s) reused from an earlier invocation (--resume)" if n else ""


def _describe_model(cfg: dict) -> str:
    m = cfg["model"]
    return (f"{m['arch']} {m['placement']}-{m['norm']} d={m['dim']} L={m['n_layers']} "
            f"T={cfg['seq_len']} B={cfg['batch_size']} steps={cfg['steps']} lr={cfg['lr']:g} "
            f"warmup={cfg['warmup_steps']} init={m['init']}")  # fmt: skip


def write_reports(out: Path, preset, results: dict, verdicts, meta: dict) -> None:
    plot_dir = out / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)
    plots = {c.name: _plots(c, results, plot_dir) for c, _ in verdicts}
    write_atomic(out / "report.html", _html(out, preset, results, verdicts, meta, plots))
    write_atomic(out / "report.md", _markdown(preset, results, verdicts, meta, plots))


def _html(out: Path, preset, results, verdicts, meta, plots) -> str:
    e = escape
    h = [f"<!doctype html><html><head><meta charset='utf-8'><title>normlab study: "
         f"{e(preset.name)}</title><style>{CSS}</style></head><body>",
         f"<h1>normlab study — <code>{e(preset.name)}</code></h1>",
         f"<p class='muted'>{e(preset.description)}. {len(results)}/{len(preset.runs)} runs, "
         f"{meta['wall_s']:.0f} s wall{_cpu(results)}{_reused(meta)}, finished "
         f"{e(meta['finished'])}.</p>",
         "<h2>Claims</h2><table><tr><th>claim</th><th>source</th><th>verdict</th>"
         "<th>numbers</th></tr>"]  # fmt: skip
    for c, v in verdicts:
        h.append(
            f"<tr><td><a href='#{e(c.name)}'><b>{e(c.name)}</b></a>: {e(c.statement)}</td>"
            f"<td>{e(c.source)}</td><td>{_badge(v.status)}</td><td>{e(_nums(v))}</td></tr>"
        )
    h.append("</table>")
    # Numerics: `normlab numerics --out DIR` writes DIR/numerics.html; link it when present.
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
        h.append(f"<section id='{e(c.name)}'><h2>{e(c.name)} {_badge(v.status)}</h2>"
                 f"<p>{e(c.statement)} <span class='muted'>({e(c.source)})</span></p>"
                 f"<p><b>Rule (fixed before the runs):</b> {e(c.rule.describe())}</p>"
                 f"<p><b>Result:</b> {e(v.why)}.</p><table>")  # fmt: skip
        h += [f"<tr><td>{e(k)}</td><td>{e(_fmt(x))}</td></tr>" for k, x in v.numbers.items()]
        h.append("</table>")
        for title, _, png in plots[c.name]:
            h.append(f"<h4>{e(title)}</h4>{img(title, png)}")
        h.append("</section>")
    h.append("<section><h2>Runs</h2><table><tr><th>run</th><th>model</th>")
    h += [f"<th>{e(col)}</th>" for col, _ in _RUN_COLS] + ["</tr>"]
    for name, r in results.items():
        h.append(f"<tr><td>{e(name)}</td><td>{e(_describe_model(r['config']))}</td>")
        h += [f"<td>{e(_fmt(fn(r)))}</td>" for _, fn in _RUN_COLS] + ["</tr>"]
    h.append("</table><h3>Configs</h3>")
    for name, r in results.items():
        h.append(f"<details><summary>{e(name)}</summary>"
                 f"<pre>{e(json.dumps(r['config'], indent=1))}</pre></details>")  # fmt: skip
    env = {**meta["environment"], **{f"corpus {k}": x for k, x in meta["corpus"].items()}}
    h.append("<h2>Environment</h2><table>")
    h += [f"<tr><td>{e(k)}</td><td>{e(_fmt(x))}</td></tr>" for k, x in env.items()]
    h.append("</table></section></body></html>")
    return "\n".join(h)


def _markdown(preset, results, verdicts, meta, plots) -> str:
    env, corpus = meta["environment"], meta["corpus"]
    md = [f"# normlab study: {preset.name}", "",
          f"{preset.description}. {len(results)}/{len(preset.runs)} runs in "
          f"{meta['wall_s']:.0f} s wall{_cpu(results)}{_reused(meta)} on "
          f"{env['cpu']} ({env['threads']} threads, "
          f"{env['workers']} worker(s)); torch {env['torch']}, numba {env['numba']}; corpus "
          f"{corpus['source']} sha256 {corpus['sha256'][:16]}….", "", "## Claims", "",
          format_table(preset, verdicts), ""]  # fmt: skip
    for c, v in verdicts:
        md += [f"## {c.name}: {v.status}", "", f"{c.statement} ({c.source})", "",
               f"Rule: {c.rule.describe()}", "", f"Result: {v.why}. {_nums(v)}", ""]  # fmt: skip
        md += [f"![{title}](plots/{fname})" for title, fname, _ in plots[c.name]] + [""]
    md += ["## Runs", "", "| run | model | " + " | ".join(c for c, _ in _RUN_COLS) + " |",
           "|---|---|" + "---|" * len(_RUN_COLS)]  # fmt: skip
    for name, r in results.items():
        cells = " | ".join(_fmt(fn(r)) for _, fn in _RUN_COLS)
        md.append(f"| {name} | {_describe_model(r['config'])} | {cells} |")
    return "\n".join(md) + "\n"
