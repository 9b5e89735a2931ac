"""The articles' statements (``statements.toml``) name only what exists, every preset claim is
named by a statement or marked as beyond the articles, every published numerics/bench finding
is named by a statement, and ``docs/claims.md`` is what ``normlab study --coverage`` writes today
(so republishing a study's claims.json or a findings JSON fails here until the table is
regenerated)."""

import ast
import functools
import json
import re
import shutil
from pathlib import Path

import pytest

from normlab.lab.study.published import claims_page, coverage, headline
from normlab.lab.study.published.registry import Registry
from normlab.lab.study.published.replay import published_design
from normlab.lab.study.spec.parse import builtin_names, load_builtin
from normlab.lab.verdict import CLAIM_WORDS, Word

ROOT = Path(__file__).resolve().parents[4]
DOCS = ROOT / "docs"
CAT = coverage.load()
PUBLISHED = coverage.Published.read(DOCS, CAT)
ARTICLE_000 = [str(i) for i in range(1, 10)]
ARTICLE_003 = "一 二 三 四 五 六 七 八 九 十 十一 十二 十三".split()
# Run by the tests only, its claims are the quick preset's at toy size.
NOT_COVERED = ("smoke",)


@functools.cache
def preset_claims(preset: str) -> set[str]:
    return {c.name for c in load_builtin(preset, whole=True).claims}


@functools.cache
def functions_in(path: str) -> set[str]:
    tree = ast.parse((ROOT / path).read_text())
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}


def _claim_exists(ref: str) -> bool:
    preset, _, name = ref.partition(":")
    return preset in builtin_names() and name in preset_claims(preset)


def test_every_section_of_the_three_articles_has_a_statement():
    sections = {a: info["sections"] for a, info in CAT.articles.items()}
    assert list(sections) == ["000", "001", "003"]
    assert sorted({k.split(".")[0] for k in sections["000"]}, key=float) == ARTICLE_000
    assert sorted({k.split(".")[0] for k in sections["003"]}, key=ARTICLE_003.index) == ARTICLE_003
    assert [k for k in sections["003"] if k.startswith("十一.")] == [
        f"十一.{i}" for i in (1, 2, 3, 4)
    ]
    assert [k for k in sections["003"] if k.startswith("十二.")] == [
        f"十二.{i}" for i in range(1, 7)
    ]
    assert len(sections["001"]) == 10  # the opening paragraph and the article's nine headings
    covered = {(s.article, s.section) for s in CAT.statements}
    missing = [(a, k) for a, keys in sections.items() for k in keys if (a, k) not in covered]
    assert not missing, f"sections without a statement: {missing}"


def test_every_entry_names_what_exists_or_a_reason():
    ids = [s.id for s in CAT.statements]
    assert len(ids) == len(set(ids)), "duplicate statement ids"
    for s in CAT.statements:
        assert s.section in CAT.articles[s.article]["sections"], s.id
        assert s.statement.strip(), s.id
        decided = s.claims or s.related or s.tests or s.findings
        assert decided or s.reason, f"{s.id}: decided nowhere, no reason"
        assert not s.reason or (s.reason in coverage.REASONS and s.why), s.id
        assert s.by_test in (Word.HOLDS, Word.DOES_NOT_HOLD), s.id
        assert not set(s.claims) & set(s.related), f"{s.id}: a claim both as stated and related"
        for ref in s.claims + s.related:
            if ref in s.related and ref.partition(":")[0] in CAT.findings:
                assert PUBLISHED.finding(ref), f"{s.id}: no published finding {ref}"
                continue
            assert _claim_exists(ref), f"{s.id}: no preset claim {ref}"
            assert ref.partition(":")[0] in CAT.reports, f"{s.id}: {ref}'s preset has no report"
        for t in s.tests:
            path, _, name = t.partition("::")
            assert (ROOT / path).is_file() and name in functions_in(path), f"{s.id}: no {t}"
        assert not s.parts or s.findings, f"{s.id}: parts of no finding"  # each has them, below
        for ref in s.findings:
            f = PUBLISHED.finding(ref)
            assert f, f"{s.id}: {ref} is not in the published findings' JSON"
            labels = [p["part"] for p in f["parts"]]
            assert set(s.parts) <= set(labels), f"{s.id}: no such part of {ref}"


def test_every_published_finding_is_named_by_a_statement():
    assert set(PUBLISHED.findings) == set(CAT.findings), "a findings JSON is missing from docs/"
    published = {f"{c}:{name}" for c, found in PUBLISHED.findings.items() for name in found}
    assert all(PUBLISHED.findings.values()), "an empty findings JSON"
    named = {ref for s in CAT.statements for ref in s.findings + s.related}
    assert not published - named, f"findings no statement names: {published - named}"
    for where in CAT.findings.values():
        report, _, anchor = where["report"].partition("#")
        assert "](claims.md)" in (DOCS / report).read_text(), f"{report} links to the table"
        assert anchor.replace("-", " ") in _slugs(DOCS / report), where["report"]


def _slugs(path: Path) -> set[str]:
    """The headings of a Markdown file as GitHub's anchors, hyphens read as spaces."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(), flags=re.M)
    slug = lambda h: re.sub(r"[^\w\- ]", "", h.lower()).replace("-", " ")  # noqa: E731
    return {slug(h) for h in headings}


def test_every_preset_claim_is_named_by_a_statement_or_marked_beyond_the_articles():
    named = {ref for s in CAT.statements for ref in s.claims + s.related if _claim_exists(ref)}
    beyond = set(CAT.beyond)
    assert not [ref for ref in beyond if not _claim_exists(ref)], "no such claim"
    assert not named & beyond, f"both named and marked beyond the articles: {named & beyond}"
    for preset in builtin_names():
        if preset in NOT_COVERED:
            continue
        refs = {f"{preset}:{c}" for c in preset_claims(preset)}
        assert not refs - named - beyond, f"claims no statement names: {refs - named - beyond}"
    assert set(CAT.reports) == set(builtin_names()) - set(NOT_COVERED)


def test_published_verdicts_are_the_presets_claims_without_machine_paths():
    files = sorted((DOCS / "data").glob("*/claims.json"))
    assert files, "no published claims.json"
    for path in files:
        text = path.read_text()
        assert not re.search(r"/(home|work|tmp|Users|root|mnt)/|[A-Z]:\\\\", text), path
        data = json.loads(text)
        # its preset's own directory, or a later round of it (docs/data/paper-round3)
        assert path.parent.name.split("-round")[0] == data["preset"]
        names = [c["name"] for c in data["claims"]]
        design = {c.name for c in published_design(DOCS, path.parent.name).claims}
        assert set(names) == design, path  # the design that decided it, stored beside it
        for c in data["claims"]:
            assert c["verdict"] in CLAIM_WORDS, (path, c["name"])


def test_claims_md_is_what_the_command_writes_today():
    assert (DOCS / "claims.md").read_text() == claims_page.render(DOCS), (
        "docs/claims.md is stale: run `normlab study --coverage` from the repository's root"
    )


def test_republishing_a_study_changes_the_table(tmp_path):
    """A paper study's claims.json turns its claims' rows from "prose only" into verdicts."""
    docs = _published_copy(tmp_path)
    for where in (docs / "data").glob("paper*"):  # as before the paper study was first published
        shutil.rmtree(where)
    before = claims_page.render(docs)
    quick = json.loads((DOCS / "data" / "quick" / "claims.json").read_text())
    paper = {**quick, "preset": "paper", "claims": [dict(quick["claims"][0], verdict="holds")]}
    (docs / "data" / "paper").mkdir()
    (docs / "data" / "paper" / "claims.json").write_text(json.dumps(paper))
    after = claims_page.render(docs)
    assert after != before
    name = quick["claims"][0]["name"]
    assert f"paper `{name}`: **holds**" in after
    assert f"paper `{name}`: published as prose only" in before


def test_republishing_a_finding_changes_the_table(tmp_path):
    """A rerun of `normlab numerics` whose finding turns out otherwise changes its rows."""
    docs = _published_copy(tmp_path)
    path = docs / CAT.findings["numerics"]["data"]
    findings = json.loads(path.read_text())
    sphere = next(f for f in findings if f["name"] == "rmsnorm-on-sphere")
    assert sphere["verdict"] == "holds"
    sphere["verdict"] = sphere["parts"][0]["verdict"] = "inconclusive"
    before = claims_page.render(docs)
    path.write_text(json.dumps(findings))
    after = claims_page.render(docs)
    row = lambda md: next(r for r in md.splitlines() if "x / RMS(x) lies on the sphere" in r)  # noqa: E731
    assert "| **holds** at op level |" in row(before)
    assert "| not decided: inconclusive |" in row(after)


def _published_copy(tmp_path: Path) -> Path:
    """A docs/ with only what the table is built from."""
    docs = tmp_path / "docs"
    shutil.copytree(DOCS / "data", docs / "data")
    for where in CAT.findings.values():
        shutil.copy(DOCS / where["data"], docs / where["data"])
    return docs


def _pub(claims: dict, findings: dict | None = None) -> coverage.Published:
    """Published verdicts made in the test: each preset's rows from a directory of its name."""
    rows = {p: {n: coverage.Row(e, p) for n, e in cs.items()} for p, cs in claims.items()}
    return coverage.Published(rows, findings or {}, Registry(), DOCS)


@pytest.mark.parametrize(
    "found, by_test, expected",
    [
        ((), None, "prose-only"),
        (("inconclusive",), None, "inconclusive"),
        (("holds", "holds"), None, "holds"),
        (("holds", "inconclusive"), None, "inconclusive"),  # never more than its weakest part
        (("does not hold", "not testable here"), None, "does not hold"),  # listed, not counted
        (("not testable here", "not testable here"), None, "not testable here"),
        (("holds", "does not hold"), None, "mixed"),
        (("holds", "does not hold", "inconclusive"), None, "mixed"),
        ((), "does not hold", "does not hold"),
    ],
)
def test_decide(found, by_test, expected):
    claims = tuple(f"quick:c{i}" for i in range(len(found))) or ("paper:c",)
    verdicts = {"quick": {f"c{i}": {"verdict": v} for i, v in enumerate(found)}}
    if by_test:
        s = coverage.Statement("x", "000", "1", "s", tests=("t",), by_test=by_test)
    else:
        s = coverage.Statement("x", "000", "1", "s", claims=claims)
    assert headline.status(s, _pub(verdicts)).status == expected


def test_a_related_claim_is_listed_but_never_the_headline():
    """The 1000-layer statement with only its 100-block contrast holding is not decided."""
    verdicts = {"deep": {"at-100": {"verdict": "holds"}, "at-1000": {"verdict": "inconclusive"}}}
    pub = _pub(verdicts)
    s = coverage.Statement("x", "000", "1", "s", claims=("deep:at-1000",), related=("deep:at-100",))
    assert headline.status(s, pub).status == "inconclusive"
    only = coverage.Statement("x", "000", "1", "s", related=("deep:at-100",))
    assert headline.status(only, pub).status == "related-only"
    md = (DOCS / "claims.md").read_text()
    row = next(r for r in md.splitlines() if "DeepNorm can train a 1000-layer" in r)
    assert "**holds**" not in row.split("|")[3] and "*related, not the headline:*" in row


def test_a_claim_added_after_its_presets_published_study_is_not_run_yet():
    pub = _pub({"quick": {"old": {"verdict": "holds"}}})
    new = coverage.Statement("x", "000", "1", "s", claims=("quick:new",))
    assert headline.status(new, pub).status == "not-run"
    # with a claim of a preset that has no claims.json, the older reason stands
    both = coverage.Statement("x", "000", "1", "s", claims=("quick:new", "paper:c"))
    assert headline.status(both, pub).status == "prose-only"


FINDING = {
    "verdict": "does not hold",
    "parts": [{"part": "a", "verdict": "holds"}, {"part": "b", "verdict": "does not hold"}],
}


@pytest.mark.parametrize(
    "claim, parts, tests, expected, by",
    [
        (None, (), (), "does not hold", "finding"),  # the finding's own verdict
        (None, ("a",), (), "holds", "finding"),  # only the parts the statement is about
        (None, ("a", "b"), (), "does not hold", "finding"),
        ("inconclusive", (), (), "inconclusive", "claim and finding"),  # the weakest part
        ("does not hold", (), (), "does not hold", "claim and finding"),
        ("holds", (), (), "mixed", "claim and finding"),  # a model claim and an op-level finding
        (None, ("a",), ("t",), "holds", "finding"),  # a published finding outranks a test
    ],
)
def test_decide_with_a_finding(claim, parts, tests, expected, by):
    claims = {"quick": {"c": {"verdict": claim}}} if claim else {}
    pub = _pub(claims, {"numerics": {"f": FINDING}})
    s = coverage.Statement(
        "x",
        "000",
        "1",
        "s",
        claims=("quick:c",) if claim else (),
        findings=("numerics:f",),
        parts=parts,
        tests=tests,
        by_test="does not hold",
    )
    got = headline.status(s, pub)
    assert (got.status, got.by) == (expected, by)
    unpublished = _pub({})
    assert headline.status(s, unpublished).status == ("prose-only" if claim else "pending")


def test_the_command_writes_the_table_and_rejects_a_wrong_directory(tmp_path, capsys):
    from normlab.lab.cli import main

    docs = _published_copy(tmp_path)
    assert main(["study", "--coverage", str(docs)]) == 0
    assert (docs / "claims.md").read_text() == (DOCS / "claims.md").read_text()
    assert main(["study", "--coverage", str(tmp_path / "nowhere")]) == 2
    assert "--coverage" in capsys.readouterr().err


def test_the_readme_and_every_study_report_link_to_the_table():
    assert "docs/claims.md" in (ROOT / "README.md").read_text()
    for report in {r["report"].partition("#")[0] for r in CAT.reports.values()}:
        assert "(claims.md)" in (DOCS / report).read_text(), report


def test_a_later_rounds_directory_replaces_the_rows_it_ran_again(tmp_path):
    from normlab.lab.study.published.coverage import published

    def write(where, *rows):
        rows = [{"name": n, "verdict": v} for n, v in rows]
        (tmp_path / "data" / where).mkdir(parents=True)
        doc = {"preset": "paper", "claims": rows}
        (tmp_path / "data" / where / "claims.json").write_text(json.dumps(doc))

    write("paper", ("a", "holds"), ("b", "inconclusive"))
    write("paper-round3", ("b", "does not hold"))  # sorts before "paper/" as a path
    got = {n: r.entry["verdict"] for n, r in published(tmp_path)["paper"].items()}
    assert got == {"a": "holds", "b": "does not hold"}


def _sized(verdict: str, d: int) -> dict:
    scope = {"d": d, "blocks": 4, "T": 64, "B": 16, "steps": 200, "init": "xavier"}
    return {"verdict": verdict, "scope": [scope]}


@pytest.mark.parametrize(
    "at64, at128, expected, sizes",
    [
        ("holds", "holds", "holds", ["d=64 L=4", "d=128 L=4"]),  # "holds at sizes ..."
        ("holds", "does not hold", "depends on size", ["d=64 L=4", "d=128 L=4"]),
        ("holds", "inconclusive", "inconclusive", ["d=64 L=4", "d=128 L=4"]),
        ("holds", "not testable here", "holds", ["d=64 L=4"]),  # listed, not counted
        ("not testable here", "not testable here", "not testable here", []),
    ],
)
def test_a_headline_is_formed_over_sizes(at64, at128, expected, sizes):
    pub = _pub({"quick": {"a": _sized(at64, 64)}, "paper": {"b": _sized(at128, 128)}})
    s = coverage.Statement("x", "000", "1", "s", claims=("quick:a", "paper:b"))
    got = headline.status(s, pub)
    assert (got.status, [size for size, _ in got.sizes]) == (expected, sizes)


def test_a_statement_about_a_scale_the_lab_does_not_reach_is_not_testable_here():
    pub = _pub({"quick": {"a": _sized("holds", 64)}})
    s = coverage.Statement("x", "000", "1", "s", related=("quick:a",), scale="many large models")
    assert headline.status(s, pub).status == "scale"


def test_a_plan_changed_after_its_data_makes_the_headline_exploratory_on_the_page(tmp_path):
    """A statement decided by a finding: its plan registered before the finding's data began is
    confirmatory; the same plan registered again after that (a change after the data was seen)
    is exploratory, and claims.md says so in its row and its summary."""
    from normlab.lab.study.published.registry import Entry, plan_fingerprint

    docs = _published_copy(tmp_path)
    shutil.copy(DOCS / "data" / "registry.json", docs / "data" / "registry.json")
    s = next(s for s in CAT.statements if s.findings == ("numerics:rmsnorm-on-sphere",))
    row = lambda md: next(r for r in md.splitlines() if s.statement in r)  # noqa: E731
    reg = Registry.read(docs)
    began = reg.data["numerics"].began
    reg.plans[s.id] = [Entry(plan_fingerprint(s), "2026-01-01T00:00:00Z", "before")]
    reg.write(docs)
    assert "exploratory" not in row(claims_page.render(docs))
    reg.plans[s.id] = [
        Entry("0" * 16, "2026-01-01T00:00:00Z", "before"),  # another plan when the data began
        Entry(plan_fingerprint(s), "2099-01-01T00:00:00Z", "after"),
    ]
    reg.write(docs)
    md = claims_page.render(docs)
    assert (
        f"exploratory: its test plan was fixed on 2099-01-01, after its data began ({began[:10]})"
        in row(md)
    )
    assert "of them exploratory (decided after the data was seen)" in md


def test_a_design_is_confirmatory_only_if_fixed_before_its_data_on_a_fresh_block():
    from normlab.lab.study.published.registry import Data, Entry

    reg = Registry()
    reg.designs["quick:c"] = [
        Entry("a", "2026-01-01T00:00:00Z", "x"),
        Entry("b", "2026-03-01T00:00:00Z", "y"),
    ]
    reg.data["quick-old"] = Data("quick", 5, "2026-02-01T00:00:00Z", "z")  # ran under a
    reg.data["quick-new"] = Data("quick", 6, "2026-04-01T00:00:00Z", "z")  # ran under b
    reg.data["quick-again"] = Data("quick", 5, "2026-04-01T00:00:00Z", "z")  # b on block 5 again
    assert reg.standing("designs", "quick:c", "a", "quick-old").confirmatory
    assert reg.standing("designs", "quick:c", "b", "quick-new").confirmatory
    assert not reg.standing("designs", "quick:c", "b", "quick-old").confirmatory  # changed after
    again = reg.standing("designs", "quick:c", "b", "quick-again")
    assert not again.confirmatory and "earlier run of quick on seed block 5" in again.why
    assert not reg.standing("designs", "quick:c", "a", "nowhere").confirmatory


def test_every_design_and_plan_is_registered_as_it_stands_today():
    """A changed claim design, statement plan or finding design must be registered (normlab
    study --register) in the commit that changes it, before any run of it."""
    from normlab.lab.study.published.register import unregistered

    missing = unregistered(Registry.read(DOCS), DOCS)
    assert not missing, (
        f"run `normlab study --register` and commit docs/data/registry.json: {missing}"
    )


def test_a_later_round_is_read_by_its_number_not_its_spelling():
    names = ["quick-round10", "quick-round9", "quick-round4"]
    assert sorted(names, key=coverage._natural) == ["quick-round4", "quick-round9", "quick-round10"]
    # round 10 (seed block 17) supplies the claim it ran, round 9 the rest
    rows = coverage.published(DOCS)["quick"]
    assert rows["norm-needed-unscaled-init"].where == "quick-round10"
    assert rows["norm-needed"].where == "quick-round9"
