"""``normlab inspect``'s report: ``report.md`` and ``report.html`` (one document, the lab's kit:
:mod:`normlab.lab.kit.doc`), ``inspect.json`` (the result, typed), ``inspect-findings.json`` (the
findings, as ``normlab numerics`` publishes its own) and the plots under ``plots/``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from normlab.lab.inspect import summary_words
from normlab.lab.inspect.inspect_plots import PLOTS
from normlab.lab.kit import doc as d
from normlab.lab.kit.io import write_file, write_json, write_page
from normlab.lab.numerics.tables import finding_blocks
from normlab.lab.study.report import badge
from normlab.lab.verdict.finding import interval_text

FIGURES = "plots"


def _intro(r) -> d.Paragraph:
    m, s = r.model, r.sample
    eps = sorted({x.eps for x in r.layers})
    return d.Paragraph(
        f"{m.family} ({m.arch}), {m.params:,} parameters, {m.norms} norm layers "
        f"({', '.join(m.norm_classes)}, eps {', '.join(summary_words.num(e) for e in eps)}); "
        f"{s.tokens:,} tokens in {s.chunks} chunks of {s.chunk}: {s.source}, read with "
        f"{s.tokenizer}; run in FP32, eval mode; {r.seconds.get('total', 0):.0f} s.",
        muted=True,
    )


def _findings_table(r) -> d.Table:
    rows = []
    for f in r.findings:
        parts = "; ".join(f"{p['part']}: {interval_text(p)}" for p in f["parts"])
        rows.append(
            ((f["statement"], " ", d.Muted(f"({f['source']})")), badge(f["verdict"]), parts)
        )
    return d.Table(
        ("statement (source)", "verdict", "v per part: mean [95 % CI], n"), tuple(rows), "summary"
    )


def _layer_table(r) -> d.Table:
    num, pct = summary_words.num, summary_words.pct
    rows = tuple(
        (
            s.layer,
            num(s.max_abs),
            pct(s.square_overflow["FP16"]),
            pct(s.stat_overflow["FP16"]),
            num(s.min_stat),
            pct(s.near_constant),
            f"{num(s.mean_share_median)} / {num(s.mean_share_p90)}",
            num(s.massive),
            f"{num(s.gain_min)} / {num(s.gain_median)} / {num(s.gain_max)}",
            "–" if s.gain_near_zero is None else pct(s.gain_near_zero),
        )
        for s in r.layers
    )
    header = (
        "layer",
        "max |x|",
        "FP16 x² overflows (rows)",
        "FP16 statistic overflows (rows)",
        "smallest statistic",
        "near-constant rows",
        "|mean|/RMS median / p90",
        "max |x| / median |x|",
        "gain min / median / max",
        "gains near 0",
    )
    return d.Table(header, rows)


def _replay_table(r) -> d.Table:
    num = summary_words.num
    rows = tuple(
        (
            x.layer,
            x.op + ("" if x.own else " (variant)"),
            x.format,
            x.impl,
            num(x.worst),
            num(x.median),
            str(x.failures),
        )
        for x in r.replay
    )
    header = (
        "layer",
        "norm",
        "format",
        "implementation",
        "worst row error",
        "median",
        "failing rows",
    )
    return d.Table(header, rows)


def _changes_table(r) -> d.Table:
    num = summary_words.num
    rows = tuple(
        (
            "swap: the variant's statistics" if c.name == "swap" else "train mode (dropout)",
            num(sum(c.direction) / len(c.direction)),
            num(1 - max(c.direction)),
            num(sum(c.task) / len(c.direction)),
            "yes" if c.identical else "no",
        )
        for c in r.changes
    )
    task = "1 − ρ (similarity ranks)" if r.model.kind == "embedding" else "top-1 changed"
    header = ("change", "mean 1 − cos", "worst chunk's cos", f"mean {task}", "output identical")
    return d.Table(header, rows)


def _finding_blocks(r) -> list:
    out = []
    for f in r.findings:
        heading = (f["name"], " ", badge(f["verdict"]))
        out += finding_blocks(f, heading, summary_words.num, muted=True)
    return out


def document(r, figures: dict[str, bytes]) -> d.Document:
    fig = lambda name, title: d.Figure(title, figures[name], f"{FIGURES}/{name}.png")  # noqa: E731
    m = r.model
    doc = d.Document(f"normlab inspect: {m.name}")
    doc.add(
        d.Heading(1, f"normlab inspect: {m.name}"),
        _intro(r),
        d.Heading(2, "What its norms say", "hazards"),
        d.Items(tuple((d.Strong(lead), " ", rest) for lead, rest in summary_words.hazards(r))),
        d.Heading(2, "The articles' statements at real scale", "findings"),
        d.Paragraph(
            f"Each statement decided by the verdict engine over the {r.sample.chunks} text "
            "chunks (one chunk, one repetition; δ fixed before the run); the rules and every "
            "reason are under The findings below."
        ),
        _findings_table(r),
        d.Heading(2, "Per layer", "layers"),
        fig("range-vs-fp16", "Norm inputs against FP16's limit"),
        fig("mean-share", "The mean's share of each row"),
        fig("residual-stream", "The residual stream's size"),
        _layer_table(r),
        d.Heading(2, "The replay: error by format", "replay"),
        d.Paragraph(
            "The recorded inputs rounded to each format and run through the naive code (every "
            "step in the format), FP32 statistics (normlab's reference, the layer's cast "
            "order) and normlab's kernels, against float64 of the same rounded inputs; the "
            "variant is the other norm on the same inputs with the layer's gain. A row's error "
            "is max|y − t| / max|t|; a row fails on inf/NaN, an output flushed to 0, or 10 %."
        ),
        fig("error-by-format", "Worst row error by layer and format (the layer's own norm)"),
        d.Details("Every layer, norm, format and implementation", (_replay_table(r),)),
        d.Heading(2, "Swap and train mode", "changes"),
        _changes_table(r),
        d.Heading(2, "The findings", "rules"),
        *_finding_blocks(r),
        d.Heading(2, "How this was measured", "how"),
        d.Paragraph(_how(r)),
    )
    return doc


def _how(r) -> str:
    m, mach = r.model, r.machine
    stages = ", ".join(f"{k} {v:.1f} s" for k, v in r.seconds.items())
    return (
        f"torch {mach.get('torch')}, transformers {mach.get('transformers')}, "
        f"{mach.get('threads')} threads on {mach.get('cpu')} (load average {mach.get('load')} "
        f"at the start); {stages}. Sized before loading: "
        f"about {m.need_bytes / 2**20:,.0f} MiB needed of {m.limit_bytes / 2**20:,.0f} MiB "
        f"allowed. The small eps of the eps findings: {summary_words.num(r.eps_small)}."
    )


def write(r, out: Path) -> dict[str, Path]:
    """Write every file of the report under ``out``; their paths by kind."""
    figures = {name: draw(r) for name, draw in PLOTS.items()}
    (out / FIGURES).mkdir(exist_ok=True)
    paths = {name: out / FIGURES / f"{name}.png" for name in figures}
    for name, png in figures.items():
        write_file(paths[name], png)
    md, html = write_page(document(r, figures), out / "report", toc_after=4)
    paths |= {"md": md, "html": html}
    paths |= {"json": out / "inspect.json", "findings": out / "inspect-findings.json"}
    write_json(paths["json"], dataclasses.asdict(r), indent=1, ensure_ascii=False)
    write_json(paths["findings"], r.findings, indent=1, ensure_ascii=False)
    return paths
