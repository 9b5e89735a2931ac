"""A statement's headline from its published evidence: one rule for every statement.

Every claim and finding that tests a statement as the article states it is headline evidence,
at whatever size it ran. The evidence is grouped by size (a claim's model width and depth; a
finding is op-level); a claim that is *not testable here* (its control cannot pass there, or it
does not meet the standard for rivals) is listed and not counted. At each size the counted
verdicts combine as the verdict engine's ``headline`` does (holds only if every one holds, does
not hold only if none does, mixed where they disagree, inconclusive while any is); across sizes:

- every size agrees: that verdict, "at sizes …";
- decided sizes disagree: **depends on size**, each size's verdict shown;
- any size undecided: **inconclusive** (a headline never says more than its weakest evidence);
- no counted evidence: **not testable here**.

A statement about a scale the lab does not reach ("many large models") is not testable here
(scale), its small-size evidence listed as related. A headline is **exploratory** when any
evidence it counts is (a design fixed after its data began: ``registry``) or when the
statement's plan was fixed after the data of its evidence began.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from normlab.lab.study.published.coverage import HEADLINES, Published, Statement, scope, split_ref
from normlab.lab.study.published.registry import plan_fingerprint
from normlab.lab.verdict import Word, combine, headline
from normlab.lab.verdict.finding import TARGET

OP_LEVEL = "op level"  # the size of a numerics/bench finding: no model


@dataclass(frozen=True)
class Evidence:
    """One published claim or finding that tests a statement as stated."""

    ref: str  # "<preset>:<claim>" or "numerics:<name>" / "bench:<name>"
    kind: str  # "claim" or "finding"
    word: Word
    size: str  # "d=64 L=4" for a claim; OP_LEVEL for a finding
    exploratory: str  # why it was decided after its data was seen ("" if confirmatory)

    @property
    def counted(self) -> bool:
        return self.word != Word.NOT_TESTABLE


@dataclass(frozen=True)
class Decision:
    status: str  # a Word of HEADLINES, or a key of NOT_DECIDED
    by: str = ""  # what tested it as stated, a key of DECIDED_BY
    counts: tuple[tuple[str, int], ...] = ()  # how many claims/findings said each word
    sizes: tuple[tuple[str, str], ...] = ()  # (size, its verdict), counted sizes in order
    exploratory: str = ""  # why the headline was decided after its data was seen


def size_of(c: dict) -> str:
    """A claim's model size, its shapes merged: ``d=64 L=6/12/24``."""
    return " ".join(scope(c).split()[:2]) or "no size"


def evidence(s: Statement, pub: Published) -> list[Evidence]:
    """Every published claim and finding that tests ``s`` as stated."""
    out = []
    for ref in s.claims:
        if (c := pub.claim(ref)) is not None:
            why = pub.standing(ref).why
            out.append(Evidence(ref, "claim", Word(c["verdict"]), size_of(c), why))
    for ref in s.findings:
        if (f := pub.finding(ref)) is not None:
            why = pub.standing(ref).why
            size = pub.sizes.get(split_ref(ref)[0], OP_LEVEL)  # inspect's: a real model
            out.append(Evidence(ref, "finding", finding_verdict(s, f), size, why))
    return out


def finding_verdict(s: Statement, f: dict) -> Word:
    """The published finding's verdict, or, where the statement names some of its parts, those
    parts' verdicts combined by the finding's own rule (each part as published)."""
    if not s.parts:
        return Word(f["verdict"])
    return combine(TARGET, [p["verdict"] for p in s.parts_of(f)])


def across_sizes(found: list[Evidence]) -> tuple[Word, tuple[tuple[str, str], ...]]:
    """The headline of counted evidence grouped by size, and each size's verdict."""
    sizes: dict[str, list[Word]] = {}
    for e in found:
        if e.counted:
            sizes.setdefault(e.size, []).append(e.word)
    per = tuple((size, headline(words)) for size, words in sizes.items())
    words = {w for _, w in per}
    if not per:
        return Word.NOT_TESTABLE, ()
    if Word.INCONCLUSIVE in words:
        return Word.INCONCLUSIVE, per
    if len(words) == 1:
        return words.pop(), per
    # model sizes that disagree; an op-level finding against a model's claim is another level
    return (Word.MIXED if any(size == OP_LEVEL for size, _ in per) else Word.DEPENDS), per


def plan_changed(s: Statement, pub: Published, found: list[Evidence]) -> str:
    """Why ``s``'s headline was decided after its data was seen by its plan ("" if not): the plan
    in force when its earliest counted data began is not today's."""
    first = min((b for e in found if e.counted and (b := pub.began(e.ref))), default=None)
    if first is None:
        return ""
    entry = pub.registry.in_force("plans", s.id, first)
    if entry is not None and entry.fingerprint == plan_fingerprint(s):
        return ""
    fixed = [e for e in pub.registry.plans.get(s.id, []) if e.fingerprint == plan_fingerprint(s)]
    when = f"fixed on {fixed[-1].registered[:10]}" if fixed else "not registered"
    return f"its test plan was {when}, after its data began ({first[:10]})"


def status(s: Statement, pub: Published) -> Decision:
    """A statement's headline (module docstring), or the first reason it has none."""
    if s.scale:
        return Decision("scale")
    found = evidence(s, pub)
    if found:
        return decide(found, lambda: plan_changed(s, pub, found))
    if s.reason:
        return Decision(s.reason)
    if tests_decide(s):
        return Decision(s.by_test, "test")
    if any(pub.claim(r) or pub.finding(r) for r in s.related):
        return Decision("related-only")
    if s.claims:  # none published: a preset without claims.json, or claims added since
        run = all(split_ref(r)[0] in pub.rows for r in s.claims)
        return Decision("not-run" if run else "prose-only")
    return Decision("pending" if s.findings else "not-studied")


def decide(found: list[Evidence], plan: Callable[[], str] = lambda: "") -> Decision:
    """The headline of published evidence ``found`` (not empty), exploratory where any evidence
    it counts is, or else where ``plan()`` says why (its plan was fixed after its data)."""
    word, sizes = across_sizes(found)
    by = " and ".join(dict.fromkeys(e.kind for e in found if e.counted)) or found[0].kind
    counts = Counter(e.word for e in found)
    why = next((e.exploratory for e in found if e.counted and e.exploratory), "")
    why = why and f"{why} ({next(e.ref for e in found if e.exploratory == why)})"
    why = why or plan()
    return Decision(word, by, tuple(counts.items()), sizes, why if word in HEADLINES else "")


def tests_decide(s: Statement) -> bool:
    """Tests decide a statement about the library itself; where a claim or finding covers it, a
    test on a few fixed seeds is no verdict, and under a `reason` it only shows the definition
    is kept."""
    return bool(s.tests) and not s.claims and not s.findings and not s.reason
