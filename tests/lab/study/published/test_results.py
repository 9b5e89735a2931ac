"""The results page (docs/results.md, .html, img/results-forest.png): what ``normlab study
--coverage`` writes today from the published data, every decided claim on the forest plot, and
the README showing the answers."""

from __future__ import annotations

import re
from pathlib import Path

from normlab.lab.kit import doc as d
from normlab.lab.study.published import answers, compare, coverage, forest, headline, results

ROOT = Path(__file__).resolve().parents[4]
DOCS = ROOT / "docs"
BASE64 = re.compile(r"base64,[A-Za-z0-9+/=]+")


def test_the_results_page_is_what_the_command_writes_today():
    doc = results.document(DOCS)
    stale = "docs/results.* are stale: run `normlab study --coverage` from the repository's root"
    assert (DOCS / "results.md").read_text() == d.to_markdown(doc), stale
    html = BASE64.sub("", d.to_html(doc, toc_after=2))
    assert BASE64.sub("", (DOCS / "results.html").read_text()) == html, stale
    assert (DOCS / results.FOREST).read_bytes()[:4] == b"\x89PNG"


def test_every_decided_statement_is_on_the_page_in_words_with_its_verdict():
    md = (DOCS / "results.md").read_text()
    cat = coverage.load()
    pub = coverage.Published.read(DOCS, cat)
    for s in cat.statements:
        if headline.status(s, pub).status in coverage.HEADLINES:
            row = next(r for r in md.splitlines() if r.startswith(f"| {s.statement} ("))
            assert f"**{headline.status(s, pub).status}**" in row


def test_every_decided_claim_is_on_the_forest_plot():
    cat = coverage.load()
    pub = coverage.Published.read(DOCS, cat)
    drawn = forest.effects(cat, pub, answers.designs(DOCS))  # what results.document draws
    plotted = {e.label.split(" / ")[0] for e in drawn}
    for preset, rows in coverage.published(DOCS).items():  # a later round's rows replace
        for c in (r.entry for r in rows.values()):
            if c["verdict"] in ("holds", "does not hold"):
                assert f"{preset} {c['name']}" in plotted, c["name"]


def test_a_claim_that_expects_a_negative_effect_is_drawn_in_its_direction():
    import dataclasses

    cat = coverage.load()
    pub = coverage.Published.read(DOCS, cat)
    row = pub.rows["paper"]["mix-ln-beats-pre"]
    entry = dict(row.entry, verdict="holds")  # expects < 0
    one = dataclasses.replace(
        pub, rows={"paper": {"mix-ln-beats-pre": coverage.Row(entry, row.where)}}
    )
    (e,) = forest.effects(cat, one, answers.designs(DOCS))
    (est,) = compare.effects(entry).values()
    # flipped, so that "holds" lies right of the δ band whatever the claim's direction
    assert e.sign == -1 and (e.effect, e.lo, e.hi) == (-est.effect, -est.hi, -est.lo)


def test_article_sections_read_as_digits_on_the_plot():
    assert forest._digits("003 §十一.1") == "003 §11.1"
    assert forest._digits("003 §九") == "003 §9" and forest._digits("000 §5.3") == "000 §5.3"


def test_the_readme_links_the_answers_first_then_the_results_page_and_its_html():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", readme)
    assert links and links[0] == "docs/answers.md"
    assert {"docs/results.md", "docs/results.html"} <= set(links)
    assert "docs/img/results-forest.png" in readme


def test_study_md_says_a_verdict_early_and_keeps_the_reports_glossary():
    from normlab.lab.study.report.claim_text import GLOSSARY

    lines = (DOCS / "study.md").read_text().splitlines()
    first = next(i for i, ln in enumerate(lines) if "**holds**" in ln or "**does not hold**" in ln)
    assert first < 60
    text = "\n".join(lines)
    glossary = text[text.index("## Glossary") : text.index("## How a verdict is decided")]
    assert [ln for ln in glossary.splitlines() if ln.startswith("- ")] == [
        f"- **{term}**: {meaning}" for term, meaning in GLOSSARY
    ]


def test_every_part_of_a_compound_claim_shows_its_own_verdict_and_unit():
    """A statement decided by a compound claim shows each part with its verdict word and unit
    (not the first part alone beside the claim's verdict)."""
    md = (DOCS / "results.md").read_text()
    row = next(r for r in md.splitlines() if r.startswith("| In Post-Norm the gradient passes"))
    cell = row.split(" | ")[2]
    preset, name = re.match(r"(\w+) `([^`]+)`", cell).groups()  # the claim the cell shows
    c = coverage.Published.read(DOCS, coverage.load()).claim(f"{preset}:{name}")
    for p in c["parts"]:
        assert re.search(
            rf"{re.escape(p['part'])}: [^;]* ln ratio, n=\d+ \*\*{p['verdict']}\*\*", cell
        )


def test_the_legend_explains_delta_the_units_the_bar_presets_and_articles():
    md = (DOCS / "results.md").read_text()
    top = md[: md.index("| statement")]
    for word in ("**δ**", "**the bar**", "**nats/byte**", "**ln ratio**", "**presets**"):
        assert word in top, word
    for key, info in coverage.load().articles.items():
        assert f"`{key}` {info['title']} ({info['english']})" in top
    for preset in coverage.Published.read(DOCS, coverage.load()).rows:
        assert f"`{preset}` d=" in top
