"""No verdict written by hand: every page's generated blocks are what ``normlab study
--coverage`` writes from the published data today, and no verdict word of ``docs/*.md`` or the
README stands outside a block, except the few uses ``pages.EXEMPT`` lists."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from normlab.lab.study.published import blocks, pages
from normlab.lab.study.published.blocks import BlockError, Data

ROOT = Path(__file__).resolve().parents[4]
DOCS = ROOT / "docs"
DATA = Data.read(DOCS)


def test_every_page_is_what_the_command_writes_today():
    assert not pages.stale(DOCS), (
        "a page's verdicts differ from the published data: run `normlab study --coverage` from "
        "the repository's root"
    )


def test_no_verdict_word_stands_outside_a_generated_block():
    found, unused = pages.loose_words(DOCS)
    assert not found, "verdict words typed by hand (put them in a block):\n" + "\n".join(
        map(str, found)
    )
    assert not unused, f"exemptions no page needs any more (remove them): {unused}"


def test_the_pages_that_show_verdicts_take_them_from_blocks():
    for page in ("paper.md", "stability.md", "presets.md", "study.md", "advise.md", "numerics.md"):
        assert "<!-- from-data " in (DOCS / page).read_text(), page
    readme = (ROOT / "README.md").read_text()
    first_table = readme[readme.index("## Answers for a model builder") : readme.index("## Quick")]
    assert "<!-- from-data answers -->" in first_table


@pytest.mark.parametrize(
    "text, words",
    [
        ("The claim **holds** at d=64.", ["holds"]),
        ("| x | does not hold | y |", ["does not hold"]),
        ("inconclusive, and not testable here; mixed", ["inconclusive", "not testable", "mixed"]),
        ("<!-- from-data verdict quick:x -->**holds**<!-- /from-data --> at d=64", []),
        ("the pool holds 512 MB; rank 0 holds the lock; it holds `h`", []),
        ('a claim is "holds" iff', []),
        ("in mixed precision, and mixed-precision training", []),
        ("```\nholds\n```\n`holds`", []),
    ],
)
def test_a_verdict_word_is_found_unless_it_is_in_a_block_or_plainly_no_verdict(text, words):
    assert [w.word for w in pages.loose("page.md", text)] == words


def test_an_exempt_section_ends_at_the_next_heading():
    text = "## Glossary\n\n- **holds**: ...\n```\n# a comment\n```\n## Other\n\nIt holds.\n"
    used: set = set()
    (found,) = pages.loose("study.md", text, used)
    assert (found.line, found.word) == (9, "holds") and ("study.md", "## Glossary") in used


def _docs_copy(tmp_path: Path, page: str) -> Path:
    docs = tmp_path / "docs"
    shutil.copytree(DOCS / "data", docs / "data")
    for where in DATA.cat.findings.values():
        shutil.copy(DOCS / where["data"], docs / where["data"])
    (docs / "page.md").write_text(page)
    return docs


def _set_verdict(docs: Path, where: str, name: str, word: str) -> None:
    path = docs / "data" / where / "claims.json"
    doc = json.loads(path.read_text())
    next(c for c in doc["claims"] if c["name"] == name)["verdict"] = word
    path.write_text(json.dumps(doc))


def test_republishing_a_claim_changes_its_blocks_and_the_page_is_stale_until_written(tmp_path):
    page = (
        "Quick's padding: <!-- from-data verdict quick:batchnorm-padding-B4 -->"
        "<!-- /from-data -->.\n\n<!-- from-data claims quick batchnorm-padding-B4 -->\n"
        "<!-- /from-data -->\n"
    )
    docs = _docs_copy(tmp_path, page)
    _set_verdict(docs, "quick", "batchnorm-padding-B4", "holds")
    assert pages.write(docs) == [docs / "page.md"] and not pages.stale(docs)
    assert "-->**holds**" in (docs / "page.md").read_text()
    _set_verdict(docs, "quick", "batchnorm-padding-B4", "inconclusive")
    assert list(pages.stale(docs)) == [docs / "page.md"]
    pages.write(docs)
    text = (docs / "page.md").read_text()
    assert "-->**inconclusive**" in text and "| **inconclusive**" in text
    assert "**holds**" not in text


def test_a_statement_block_follows_the_headline_rule(tmp_path):
    """The README's kind: a statement's headline as ``headline.status`` forms it from the
    data (000 §2's one claim, quick's batch-16 contrast)."""
    docs = _docs_copy(tmp_path, "<!-- from-data statement 000-2a --><!-- /from-data -->\n")
    shown = {"holds": "-->**holds**", "does not hold": "-->**does not hold**"}
    shown["inconclusive"] = "-->inconclusive<"  # not decided: why, not a headline in bold
    where = DATA.pub.rows["quick"]["batchnorm-worse-than-layernorm"].where  # the row shown
    for word, said in shown.items():
        _set_verdict(docs, where, "batchnorm-worse-than-layernorm", word)
        pages.write(docs)
        assert said in (docs / "page.md").read_text(), word


def test_a_later_rounds_rows_replace_its_presets_in_the_comparison():
    table = blocks.across(DATA, [])
    rows = [r for r in table.splitlines() if r.startswith("| final-norm-needed |")]
    # each preset's row from its latest round (paper-round3 over paper's block 0, ...)
    latest = {
        preset: DATA.dirs[found["final-norm-needed"].where]["seed_block"]
        for preset, found in DATA.pub.rows.items()
        if "final-norm-needed" in found
    }
    assert [r.split(" | ")[1] for r in rows] == [
        f"{p} (--seed {b})" for p, b in sorted(latest.items())
    ]
    assert latest["paper"] != 0  # the block-0 row replaced


def test_the_agreement_block_compares_the_published_rounds_it_names():
    got = blocks.agreement(DATA, ["quick-round4", "quick-round7"])
    assert got.startswith("Agreement: of the 1 claim that one of these studies decides")
    assert "| post-ln-better-shallow | quick (--seed 13) |" in got
    with pytest.raises(BlockError, match="expected agreement DIR DIR"):
        blocks.agreement(DATA, ["quick-round6"])
    with pytest.raises(BlockError, match="no docs/data/nowhere"):
        blocks.agreement(DATA, ["quick-round6", "nowhere"])


def test_a_part_and_a_finding_are_read_from_the_data():
    entry = DATA.claim("paper-round3:final-norm-needed")
    part = next(p for p in entry["parts"] if p["part"] == "the model is worse")
    got = blocks.verdict(DATA, ["paper-round3:final-norm-needed", "the", "model", "is", "worse"])
    assert got == f"**{part['verdict']}**"
    finding = DATA.finding("numerics:rmsnorm-on-sphere")
    assert blocks.verdict(DATA, ["numerics:rmsnorm-on-sphere"]) == f"**{finding['verdict']}**"


@pytest.mark.parametrize(
    "block, error",
    [
        ("<!-- from-data nothing -->x<!-- /from-data -->", "unknown block kind"),
        ("<!-- from-data verdict quick:no-such-claim --><!-- /from-data -->", "no claim"),
        ("<!-- from-data claims nowhere -->\n<!-- /from-data -->", "no docs/data/nowhere"),
        ("<!-- from-data verdict quick:final-norm-needed nope --><!-- /from-data -->", "no part"),
        ("<!-- from-data statement 999-x --><!-- /from-data -->", "no such statement"),
    ],
)
def test_a_block_naming_what_is_not_published_is_an_error_naming_the_page(block, error):
    with pytest.raises(BlockError, match=error) as e:
        pages.fill(block, DATA, "page.md")
    assert str(e.value).startswith("page.md: ")


def test_a_block_shown_as_an_example_in_a_fenced_code_block_is_left_as_written():
    example = (
        "```markdown\n<!-- from-data verdict quick:rmsnorm-faster -->x<!-- /from-data -->\n```\n"
    )
    text = example + "<!-- from-data verdict quick:rmsnorm-faster -->x<!-- /from-data -->\n"
    assert pages.fill(text, DATA).startswith(example)
    assert "x<!--" not in pages.fill(text, DATA)[len(example) :]


def test_an_inline_block_in_a_table_row_escapes_its_bars(monkeypatch):
    monkeypatch.setitem(pages.KINDS, "bars", lambda data, args: "max|dx|")
    block = "<!-- from-data bars --><!-- /from-data -->"
    assert (
        pages.fill(f"| a | {block} |", DATA)
        == "| a | <!-- from-data bars -->max\\|dx\\|<!-- /from-data --> |"
    )
    assert (
        pages.fill(f"In prose {block}.", DATA)
        == "In prose <!-- from-data bars -->max|dx|<!-- /from-data -->."
    )


def test_the_command_fills_the_pages_and_refuses_a_block_naming_nothing(tmp_path, capsys):
    from normlab.lab.cli import main

    docs = _docs_copy(
        tmp_path, "<!-- from-data verdict deep:deepnorm-beats-post-100 -->x<!-- /from-data -->\n"
    )
    assert main(["study", "--coverage", str(docs)]) == 0
    assert str(docs / "page.md") in capsys.readouterr().out
    assert "x<!--" not in (docs / "page.md").read_text()
    (docs / "page.md").write_text("<!-- from-data verdict deep:gone --><!-- /from-data -->\n")
    assert main(["study", "--coverage", str(docs)]) == 2
    assert "page.md" in capsys.readouterr().err
