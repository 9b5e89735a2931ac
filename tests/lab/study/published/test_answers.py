"""Answers for a model builder (docs/answers.md, the README's first table): each answer is what
its statements' published verdicts say and no more, read at every size; the deciding number
comes from the largest size; republished data changes the answer, and the page is stale until
written again."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

from normlab.lab.kit import doc as d
from normlab.lab.study.published import answers, answers_page, coverage, headline
from normlab.lab.study.published.answers import Aspect
from normlab.lab.verdict import Word

ROOT = Path(__file__).resolve().parents[4]
DOCS = ROOT / "docs"
BASE64 = re.compile(r"base64,[A-Za-z0-9+/=]+")
# The choices the issue asks for, each one line of the README's first table.
CHOICES = ("norm-kind", "placement", "final-norm", "weight-decay", "precision", "eps",
           "batchnorm", "warmup", "qk-norm")  # fmt: skip


def _pub(docs: Path = DOCS) -> coverage.Published:
    return coverage.Published.read(docs, coverage.load())


def test_the_answers_page_is_what_the_command_writes_today():
    doc = answers_page.document(DOCS)
    stale = "docs/answers.* are stale: run `normlab study --coverage` from the repository's root"
    assert (DOCS / "answers.md").read_text() == d.to_markdown(doc), stale
    html = BASE64.sub("", d.to_html(doc, toc_after=2))
    assert BASE64.sub("", (DOCS / "answers.html").read_text()) == html, stale


def test_every_choice_the_issue_names_is_answered():
    assert tuple(c.id for c in answers.load()) == CHOICES


def _words_at_sizes(a: Aspect, pub) -> dict[str, set[str]]:
    """Each size's verdicts, read straight from the published claims and finding parts the
    aspect rests on (not through ``headline``): size in words -> the words said there."""
    s = answers.statement_of(a)
    out: dict[str, set[str]] = {}
    for e in headline.evidence(s, pub):
        if not e.counted:
            continue
        if e.kind == "claim":
            word = pub.claim(e.ref)["verdict"]
        else:
            parts = [p["verdict"] for p in pub.finding(e.ref)["parts"]
                     if not s.parts or p["part"] in s.parts]  # fmt: skip
            word = parts[0] if len(set(parts)) == 1 else e.word
        out.setdefault(answers.size_words(e.size), set()).add(word)
    return out


def check(a: Aspect, pub, designs: dict | None = None) -> str:
    """The answer of ``a`` says each size's verdict, the reading of the words it says and no
    other, and "undecided", "not testable here", "depends on size" or "exploratory" exactly
    where the headline is so. Returns the answer."""
    dec = answers.decide(a, pub)
    text = answers.answer(a, dec, _shown(a, pub, designs))
    sizes = _words_at_sizes(a, pub)
    said = {w for ws in sizes.values() for w in ws}
    if not (a.parts or a.claims):
        assert dec == headline.status(answers.statement_of(a), pub)
    if dec.status in (Word.HOLDS, Word.DOES_NOT_HOLD):
        assert said == {dec.status}, (a.what, said)
    for size, words in sizes.items():
        if len(words) == 1 and dec.status in (*coverage.HEADLINES, Word.INCONCLUSIVE):
            (word,) = words
            assert re.search(rf"\*\*{word}\*\* at [^;]*{re.escape(size)}", text), (a.what, text)
    for word, reading in ((Word.HOLDS, a.holds), (Word.DOES_NOT_HOLD, a.does_not_hold)):
        shown = re.search(rf"(^|: |; ){re.escape(reading)} — \*\*{word}\*\*", text)
        assert bool(shown) == any(word == w for _, w in dec.sizes), (a.what, text)
    lead = {
        Word.INCONCLUSIVE: "**undecided**",
        Word.DEPENDS: "**depends on size**",
        Word.MIXED: "**mixed**",
        Word.NOT_TESTABLE: f"**{Word.NOT_TESTABLE}**",
    }
    if dec.status in lead:
        assert text.startswith(lead[dec.status]), text
    assert ("exploratory" in text) == bool(dec.exploratory), text
    return text


def _shown(a: Aspect, pub, designs: dict | None = None):
    """The evidence ``a``'s answer shows; ``designs``: ``answers.designs`` of ``pub``, if read
    already (it parses every published spec: a test over every aspect reads it once)."""
    return answers.deciding(a, pub, answers.designs(pub.docs) if designs is None else designs)


def test_every_published_answer_says_its_verdicts_and_no_more():
    pub = _pub()
    designs = answers.designs(pub.docs)
    page = (DOCS / "answers.md").read_text()
    for choice in answers.load():
        for a in choice.aspects:
            text = check(a, pub, designs)
            # the page shows it as formed (bold and code as Markdown writes them)
            assert text.replace("**", "") in page.replace("**", ""), a.what


def test_the_deciding_number_is_from_the_largest_size_tested():
    pub = _pub()
    designs = answers.designs(pub.docs)
    for a in (a for c in answers.load() for a in c.aspects):
        found = headline.evidence(answers.statement_of(a), pub)
        pool = [e for e in found if e.counted] or found
        shown = _shown(a, pub, designs)
        if not pool:
            assert shown is None
            continue
        assert answers.size_key(shown.size) == max(answers.size_key(e.size) for e in pool)
        assert shown.ref in {e.ref for e in pool}


def test_the_readme_leads_with_the_answers_one_line_a_choice():
    readme = (ROOT / "README.md").read_text()
    first = readme[: readme.index("## Quick start")]
    assert "<!-- from-data answers -->" in first
    block = first[first.index("<!-- from-data answers") : first.index("<!-- /from-data -->")]
    rows = [r for r in block.splitlines() if r.startswith("| [")]
    assert [re.search(r"answers\.md#([\w-]+)", r).group(1) for r in rows] == list(CHOICES)
    assert readme.splitlines().index("<!-- from-data answers -->") < 40  # the first screen
    pub = _pub()
    designs = answers.designs(pub.docs)
    for choice, row in zip(answers.load(), rows, strict=True):
        for a in choice.aspects:
            assert answers.answer(a, answers.decide(a, pub), _shown(a, pub, designs)) in row


# --------------------------------------------------------------------------------------------
# the answer follows the data


def _docs_copy(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    shutil.copytree(DOCS / "data", docs / "data")
    for where in coverage.load().findings.values():
        shutil.copy(DOCS / where["data"], docs / where["data"])
    return docs


def _set(docs: Path, where: str, name: str, word: str) -> None:
    path = docs / "data" / where / "claims.json"
    doc = json.loads(path.read_text())
    c = next(c for c in doc["claims"] if c["name"] == name)
    c["verdict"] = word
    for p in c.get("parts") or []:
        p["verdict"] = word
    path.write_text(json.dumps(doc))


def _aspect(choice: str, what: str) -> Aspect:
    found = next(c for c in answers.load() if c.id == choice)
    return next(a for a in found.aspects if a.what == what)


def test_the_answer_changes_with_the_published_verdicts(tmp_path):
    """BatchNorm's quality rests on one quick claim: each word it may take reads as it should."""
    docs = _docs_copy(tmp_path)
    a = _aspect("batchnorm", "quality")
    where = coverage.published(docs)["quick"]["batchnorm-worse-than-layernorm"].where
    for word, expect in (
        (Word.HOLDS, a.holds),
        (Word.DOES_NOT_HOLD, a.does_not_hold),
        (Word.INCONCLUSIVE, "**undecided**"),
        (Word.NOT_TESTABLE, f"**{Word.NOT_TESTABLE}**"),
    ):
        _set(docs, where, "batchnorm-worse-than-layernorm", word)
        text = check(a, _pub(docs))
        assert expect in text, (word, text)


def test_sizes_that_disagree_depend_on_size_each_with_its_reading(tmp_path):
    """Final norm: quick and stability do not hold at d=64; where paper's d=128 claim held, the
    answer depends on size and reads each size."""
    docs = _docs_copy(tmp_path)
    a = _aspect("final-norm", "needed")
    for name in ("final-norm-needed",):
        _set(docs, "paper", name, Word.HOLDS)
        path = docs / "data" / "paper" / "claims.json"
        doc = json.loads(path.read_text())
        doc["claims"] = [c for c in doc["claims"] if c["name"] == name]
        path.write_text(json.dumps(doc))
        for later in (docs / "data").glob("paper-round*"):
            shutil.rmtree(later)
    text = check(a, _pub(docs))
    assert text.startswith("**depends on size**")
    assert f"{a.holds} — **holds** at d=128, 6 blocks" in text
    assert f"{a.does_not_hold} — **does not hold** at d=64, 4 blocks" in text


def test_an_exploratory_headline_says_so(monkeypatch):
    from normlab.lab.study.published.registry import Standing

    a = _aspect("warmup", "deep Post-LN")
    monkeypatch.setattr(
        coverage.Published, "standing", lambda self, ref: Standing(False, "fixed after")
    )
    assert "exploratory" in check(a, _pub())


def test_an_aspect_may_read_only_its_statements_parts():
    cat = coverage.load()
    bad = Aspect("x", "h", "n", statement="001-implementation-a", parts=("LayerNorm FP16",))
    with pytest.raises(ValueError, match="are not 001-implementation-a's"):
        answers._check(bad, cat)
    both = dataclasses.replace(bad, parts=(), claims=("quick:norm-needed",))
    with pytest.raises(ValueError, match="not both"):
        answers._check(both, cat)
