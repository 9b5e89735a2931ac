"""The results page (docs/results.md, .html, img/results-forest.png): what ``normlab study
--coverage`` writes today from the published data, every decided claim on the forest plot, and
the README showing the answers."""

from __future__ import annotations

import re
from pathlib import Path

from normlab.lab.kit import doc as d
from normlab.lab.study.published import coverage, results

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
        if coverage.status(s, pub).status in coverage.HEADLINES:
            row = next(r for r in md.splitlines() if r.startswith(f"| {s.statement} |"))
            assert f"**{coverage.status(s, pub).status}**" in row


def test_every_decided_claim_is_on_the_forest_plot():
    plotted = {e.label.split(" / ")[0] for e in results.forest_effects(DOCS)}
    for preset, claims in coverage.published(DOCS).items():  # a later round's rows replace
        for c in claims.values():
            if c["verdict"] in ("holds", "does not hold"):
                assert f"{preset} {c['name']}" in plotted, c["name"]


def test_a_claim_that_expects_a_negative_effect_is_drawn_in_its_direction():
    import dataclasses

    cat = coverage.load()
    pub = coverage.Published.read(DOCS, cat)
    entry = dict(pub.claims["paper"]["mix-ln-beats-pre"], verdict="holds")  # expects < 0
    one = dataclasses.replace(pub, claims={"paper": {"mix-ln-beats-pre": entry}})
    (e,) = results._effects(cat, one, results._designs(DOCS, pub))
    (est,) = results.effects(entry).values()
    # flipped, so that "holds" lies right of the δ band whatever the claim's direction
    assert e.sign == -1 and (e.effect, e.lo, e.hi) == (-est.effect, -est.hi, -est.lo)


def test_article_sections_read_as_digits_on_the_plot():
    assert results._digits("003 §十一.1") == "003 §11.1"
    assert results._digits("003 §九") == "003 §9" and results._digits("000 §5.3") == "000 §5.3"


def test_the_readme_links_the_results_page_first_and_shows_answers():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", readme)
    assert links and links[0] == "docs/results.md"
    assert "docs/img/results-forest.png" in readme
    assert readme.count("**holds**") + readme.count("**does not hold**") >= 5


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


# The README's answers (its statement -> the statement of statements.toml it stands for).
README_ROWS = {
    "RMSNorm's re-scaling alone keeps LayerNorm's quality (000 §4.1)": "000-4.1",
    "LayerNorm takes two passes and 4 more operations per element (000 §3.3)": "000-3.3",
    "RMSNorm, computing no mean, is numerically more stable (000 §7.2)": "000-7.2b",
    "Pre-Norm's un-normalized residual path dilutes its depth (000 §5.3)": "000-5.3c",
    "BatchNorm works poorly in NLP: worse than LayerNorm at batch 16 (000 §2)": "000-2a",
    "DeepNorm trains a 1000-layer Transformer (000 §6.3)": "000-6.3a",
}


def test_the_readmes_answers_are_todays_headlines():
    readme = (ROOT / "README.md").read_text()
    cat = coverage.load()
    pub = coverage.Published.read(DOCS, cat)
    ids = {s.id: s for s in cat.statements}
    for text, sid in README_ROWS.items():
        row = next(r for r in readme.splitlines() if r.startswith(f"| {text} |"))
        verdict = row.split("|")[2].strip().strip("*")
        assert verdict == coverage.status(ids[sid], pub).status, text
