"""numerics.html on the study report's document model: bold where the tables mark bold, every
table in its own scroll box, the shared page CSS (no sweep: a made-up result)."""

from normlab.lab.kit import doc
from normlab.lab.numerics import report, tables
from normlab.lab.numerics.sweep import NumericsResult


def test_numerics_html_renders_bold_and_keeps_its_tables_in_scroll_boxes(monkeypatch):
    # The findings' table writes its verdicts for Markdown; the page must not show the marks.
    rows = [["a-finding", "**does not hold**", "part", "holds", "+1 [+0.5, +2], n=3", "0.1"]]
    monkeypatch.setattr(tables, "table_rows", lambda findings, rules: rows)
    verdict = {
        "name": "a-finding",
        "statement": "a statement",
        "source": "000 §1",
        "verdict": "does not hold",
        "rule": "a rule",
        "parts": [{"part": "part", "verdict": "holds", "why": "why"}],
        "unit": "draw",
        "means": {"a mean": 0.5},
    }
    result = NumericsResult(
        records=[],
        backends=["reference"],
        skipped={},
        grid={"dtypes": ["float16"], "rows": 8},
        device="cpu",
        seconds=1.0,
        findings=["a finding"],
        verdicts=[verdict],
    )
    page = doc.to_html(report.document(result), toc_after=report.toc_after(result))
    assert "**" not in page
    assert "<td><b>does not hold</b></td>" in page and "<i>a statement</i>" in page
    assert page.count("<table") == page.count('<div class="scroll"><table') >= 3
    assert doc.PAGE_CSS in page and '<nav class="toc">' in page
    assert '<h2 id="statements">The articles&#x27; statements, decided</h2>' in page
