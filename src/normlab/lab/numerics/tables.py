"""The op-level findings as a table and a page's blocks, for the ``numerics`` and ``bench``
reports (the findings are decided by the verdict engine, ``normlab.lab.verdict.finding``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from normlab.lab.kit import doc as d
from normlab.lab.verdict.finding import Finding, interval_text

FINDINGS_HEADER = ["finding", "verdict", "part", "part verdict", "v: mean [95 % CI], n", "δ"]


def table_rows(findings: Sequence[Mapping[str, Any]], rules: Mapping[str, Finding]) -> list:
    """One row per part of every finding (the finding's name and verdict on its first row)."""
    rows = []
    for f in findings:
        deltas = {label: f"{r.delta:.3g}" for label, r in rules[f["name"]].parts}
        for i, p in enumerate(f["parts"]):
            lead = [f["name"], f"**{f['verdict']}**"] if i == 0 else ["", ""]
            rows.append([*lead, p["part"], p["verdict"], interval_text(p), deltas[p["part"]]])
    return rows


def blocks(findings: Sequence[Mapping[str, Any]], rules: Mapping[str, Finding]) -> list:
    """The findings as a page's blocks (``normlab.lab.kit.doc``): the table, then each statement
    with its rule and the why."""
    cells = tuple(tuple(d.from_markdown(str(c)) for c in r) for r in table_rows(findings, rules))
    out: list = [d.Table(tuple(FINDINGS_HEADER), cells, dense=True)]
    for f in findings:
        out += finding_blocks(f, f"{f['name']}: {f['verdict']}", _show)
    return out


def finding_blocks(
    f: Mapping[str, Any], heading: d.Inline, number: Callable[[Any], str], *, muted: bool = False
) -> list:
    """One finding (as ``Finding.decide`` returns it) under ``heading``: its statement, rule and
    parts, then its means, each number written by ``number`` (in a muted paragraph if
    ``muted``)."""
    out = [
        d.Heading(3, heading),
        d.Paragraph((d.Em(f["statement"]), f" ({f['source']}; one repetition = one {f['unit']})")),
        d.Paragraph(f"Rule (fixed before the measurement): {f['rule']}"),
        d.Items(
            tuple((p["part"], ": ", d.Strong(p["verdict"]), f" — {p['why']}") for p in f["parts"])
        ),
    ]
    if f["means"]:
        shown = "; ".join(f"{k} = {number(v)}" for k, v in f["means"].items())
        out.append(d.Paragraph(f"Measured: {shown}.", muted=muted))
    return out


def _show(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)
