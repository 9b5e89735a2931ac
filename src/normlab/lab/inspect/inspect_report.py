"""``normlab inspect``'s report: ``report.md`` and ``report.html`` (one document, the lab's kit:
:mod:`normlab.lab.kit.doc`), ``inspect.json`` (the result, typed), ``inspect-findings.json`` (the
findings, as ``normlab numerics`` publishes its own) and the plots under ``plots/``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from normlab.lab.inspect import summary_words
from normlab.lab.inspect.inspect_plots import PLOTS
from normlab.lab.inspect.summary_words import num, pct
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
        f"({', '.join(m.norm_classes)}, eps {', '.join(num(e) for e in eps)}); "
        f"{s.tokens:,} tokens in {s.chunks} chunks of {s.chunk}: {s.source}, read with "
        f"{s.tokenizer}; run in FP32, eval mode; {r.seconds.get('total', 0):.0f} s.",
        muted=True,
    )


# Each table as header -> its cell of one row's item.
FINDING_COLUMNS = {
    "statement (source)": lambda f: (f["statement"], " ", d.Muted(f"({f['source']})")),
    "verdict": lambda f: badge(f["verdict"]),
    "v per part: mean [95 % CI], n": lambda f: "; ".join(
        f"{p['part']}: {interval_text(p)}" for p in f["parts"]
    ),
}
LAYER_COLUMNS = {
    "layer": lambda s: s.layer,
    "max |x|": lambda s: num(s.max_abs),
    "FP16 x² overflows (rows)": lambda s: pct(s.square_overflow["FP16"]),
    "FP16 statistic overflows (rows)": lambda s: pct(s.stat_overflow["FP16"]),
    "smallest statistic": lambda s: num(s.min_stat),
    "near-constant rows": lambda s: pct(s.near_constant),
    "|mean|/RMS median / p90": lambda s: f"{num(s.mean_share_median)} / {num(s.mean_share_p90)}",
    "max |x| / median |x|": lambda s: num(s.massive),
    "gain min / median / max": lambda s: (
        f"{num(s.gain_min)} / {num(s.gain_median)} / {num(s.gain_max)}"
    ),
    "gains near 0": lambda s: pct(s.gain_near_zero),
}
REPLAY_COLUMNS = {
    "layer": lambda x: x.layer,
    "norm": lambda x: x.op + ("" if x.own else " (variant)"),
    "format": lambda x: x.format,
    "implementation": lambda x: x.impl,
    "worst row error": lambda x: num(x.worst),
    "median": lambda x: num(x.median),
    "failing rows": lambda x: str(x.failures),
}
CHANGES = {"swap": "swap: the variant's statistics", "train": "train mode (dropout)"}


def _changes_table(r) -> d.Table:
    task = "1 − ρ (similarity ranks)" if r.model.kind == "embedding" else "top-1 changed"
    columns = {
        "change": lambda c: CHANGES[c.name],
        "mean 1 − cos": lambda c: num(sum(c.direction) / len(c.direction)),
        "worst chunk's cos": lambda c: num(1 - max(c.direction)),
        f"mean {task}": lambda c: num(sum(c.task) / len(c.direction)),
        "output identical": lambda c: "yes" if c.identical else "no",
    }
    return d.column_table(columns, r.changes)


def document(r, figures: dict[str, bytes]) -> d.Document:
    fig = lambda name, title: d.Figure(title, figures[name], f"{FIGURES}/{name}.png")  # noqa: E731
    doc = d.Document(f"normlab inspect: {r.model.name}")
    doc.add(
        d.Heading(1, doc.title),
        _intro(r),
        d.Heading(2, "What its norms say", "hazards"),
        d.Items(tuple((d.Strong(lead), " ", rest) for lead, rest in summary_words.hazards(r))),
        d.Heading(2, "The articles' statements at real scale", "findings"),
        d.Paragraph(
            f"Each statement decided by the verdict engine over the {r.sample.chunks} text "
            "chunks (one chunk, one repetition; δ fixed before the run); the rules and every "
            "reason are under The findings below."
        ),
        d.column_table(FINDING_COLUMNS, r.findings, cls="summary"),
        d.Heading(2, "Per layer", "layers"),
        fig("range-vs-fp16", "Norm inputs against FP16's limit"),
        fig("mean-share", "The mean's share of each row"),
        fig("residual-stream", "The residual stream's size"),
        d.column_table(LAYER_COLUMNS, r.layers),
        d.Heading(2, "The replay: error by format", "replay"),
        d.Paragraph(
            "The recorded inputs rounded to each format and run through the naive code (every "
            "step in the format), FP32 statistics (normlab's reference, the layer's cast "
            "order) and normlab's kernels, against float64 of the same rounded inputs; the "
            "variant is the other norm on the same inputs with the layer's gain. A row's error "
            "is max|y − t| / max|t|; a row fails on inf/NaN, an output flushed to 0, or 10 %."
        ),
        fig("error-by-format", "Worst row error by layer and format (the layer's own norm)"),
        d.Details(
            "Every layer, norm, format and implementation",
            (d.column_table(REPLAY_COLUMNS, r.replay),),
        ),
        d.Heading(2, "Swap and train mode", "changes"),
        _changes_table(r),
        d.Heading(2, "The findings", "rules"),
        *(
            b
            for f in r.findings
            for b in finding_blocks(f, (f["name"], " ", badge(f["verdict"])), num, muted=True)
        ),
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
        f"allowed. The small eps of the eps findings: {num(r.eps_small)}."
    )


def write(r, out: Path) -> dict[str, Path]:
    """Write every file of the report under ``out``; their paths by kind."""
    figures = {name: draw(r) for name, draw in PLOTS.items()}
    (out / FIGURES).mkdir(exist_ok=True)
    paths = {name: out / FIGURES / f"{name}.png" for name in figures}
    for name, png in figures.items():
        write_file(paths[name], png)
    paths["md"], paths["html"] = write_page(document(r, figures), out / "report", toc_after=4)
    paths |= {"json": out / "inspect.json", "findings": out / "inspect-findings.json"}
    write_json(paths["json"], dataclasses.asdict(r), indent=1, ensure_ascii=False)
    write_json(paths["findings"], r.findings, indent=1, ensure_ascii=False)
    return paths
