"""The op-level findings as a table and a page's blocks, for the ``numerics`` and ``bench``
reports (the findings are decided by the verdict engine, ``normlab.lab.verdict.finding``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

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
    from normlab.lab.kit import doc as d

    out = [d.dense_table(FINDINGS_HEADER, table_rows(findings, rules))]
    for f in findings:
        out += [
            d.Heading(3, f"{f['name']}: {f['verdict']}"),
            d.Paragraph(
                (d.Em(f["statement"]), f" ({f['source']}; one repetition = one {f['unit']})")
            ),
            d.Paragraph(f"Rule (fixed before the measurement): {f['rule']}"),
            d.Items(tuple(f"{p['part']}: **{p['verdict']}** — {p['why']}" for p in f["parts"])),
        ]
        if f["means"]:
            shown = "; ".join(f"{k} = {_show(v)}" for k, v in f["means"].items())
            out.append(d.Paragraph(f"Measured: {shown}."))
    return out


def _show(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)
