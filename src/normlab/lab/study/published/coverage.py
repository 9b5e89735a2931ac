"""Which statements of the three source articles the lab has decided, and how a statement's
headline is read from the published verdicts (the page itself: ``claims_page``).

The statements are hand-kept data (``statements.toml`` next to this module: one entry per
statement, with the preset claims, numerics/bench finding or library tests that decide it, or
the reason nothing does); the verdicts are what the studies and ``normlab numerics``/``bench``
published (``docs/data/<preset>/claims.json``, ``docs/numerics-findings.json``,
``docs/bench-findings.json``), never retyped. ``normlab study --coverage`` writes the table; the
tests check that the file in the repository is what it writes today, so republishing a study's
``claims.json`` or a findings JSON without regenerating the table fails CI.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from normlab.lab.verdict import Word, combine, headline
from normlab.lab.verdict.finding import TARGET

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

STATEMENTS = "statements.toml"
HEADLINES = (Word.HOLDS, Word.DOES_NOT_HOLD, Word.MIXED)  # a statement decided

# Why a statement is not decided, in the order the summary lists them: key -> (the status
# column's words, the summary's). The first six are computed from the data; the rest are the
# `reason` of an entry.
NOT_DECIDED = {
    Word.INCONCLUSIVE: (
        "inconclusive",
        "inconclusive: some claim or finding that tests it as stated is undecided",
    ),
    Word.NOT_TESTABLE: (
        "not testable here",
        "not testable here: every claim that tests it as stated is not testable here",
    ),
    "related-only": (
        "no claim tests it as stated",
        "no claim tests it as stated: only related evidence (another size or measure)",
    ),
    "prose-only": (
        "verdict published as prose only",
        "its claims are published as prose only (claims.json arrives when rerun)",
    ),
    "not-run": (
        "claims not run yet",
        "its claims were added to a preset after its published study (decided when rerun)",
    ),
    "pending": ("finding not published", "its numerics/bench finding is not published yet"),
    "definitional": ("definitional", "definitional: a definition, formula or code"),
    "advice": ("advice", "advice: a recommendation or caution, nothing to decide"),
    "citation": ("about other work", "about other work: which models use what, who proposed it"),
    "needs-gpu": ("needs a GPU", "needs a GPU"),
    "not-testable-here": ("not testable here", "not testable on this machine, because"),
    "not-studied": ("not studied yet", "not studied yet: a claim could decide it, none does"),
    "no-statement": ("no statement", "no statement: the heading is empty in the article"),
}
REASONS = tuple(NOT_DECIDED)[6:]  # the first six are computed from the data


@dataclass(frozen=True)
class Statement:
    id: str
    article: str
    section: str
    statement: str
    claims: tuple[str, ...] = ()  # "<preset>:<claim>" that test it as the article states it
    related: tuple[str, ...] = ()  # "<preset>:<claim>" at another size or with another measure
    tests: tuple[str, ...] = ()  # "tests/test_x.py::test_name"
    by_test: str = Word.HOLDS  # what the tests passing means for the statement
    findings: tuple[str, ...] = ()  # "numerics:<name>" or "bench:<name>"
    parts: tuple[str, ...] = ()  # the (one) finding's parts the statement is about (default: all)
    reason: str = ""  # a key of REASONS
    why: str = ""
    note: str = ""


@dataclass(frozen=True)
class Catalogue:
    articles: dict[str, dict[str, Any]]  # article -> {"title", "sections": {key: label}}
    reports: dict[str, dict[str, str]]  # preset -> {"report", optionally "unpublished"}
    findings: dict[str, dict[str, str]]  # "numerics"/"bench" -> {"data", "report"}
    beyond: dict[str, str]  # "<preset>:<claim>" -> the later paper it comes from
    statements: tuple[Statement, ...]


@cache
def load() -> Catalogue:
    """The statements file shipped in the package."""
    text = resources.files("normlab.lab.study.published").joinpath(STATEMENTS).read_text("utf-8")
    doc = tomllib.loads(text)
    entries = []
    for e in doc["statements"]:
        e = dict(e)
        found = e.pop("finding", ())
        e["findings"] = (found,) if isinstance(found, str) else tuple(found)
        e.update({k: tuple(e.get(k, ())) for k in ("claims", "related", "tests", "parts")})
        entries.append(Statement(**e))
    return Catalogue(
        doc["articles"], doc["reports"], doc["findings"], doc["beyond"], tuple(entries)
    )


def data_dirs(docs: Path) -> list[tuple[Path, dict]]:
    """Every published study as (its directory, its claims.json), each preset's own directory
    first: a directory named otherwise (``data/paper-round3``) holds claims of that preset run
    again on their own, on a fresh seed block, and its rows replace the preset's."""
    paths = (docs / "data").glob("*/claims.json")
    found = [(p.parent, json.loads(p.read_text("utf-8"))) for p in paths]
    return sorted(found, key=lambda t: (t[1]["preset"], t[0].name != t[1]["preset"], t[0].name))


def published(docs: Path) -> dict[str, dict[str, dict]]:
    """Every published study's verdicts: preset -> claim name -> its entry of claims.json."""
    out: dict[str, dict[str, dict]] = {}
    for _, data in data_dirs(docs):
        out.setdefault(data["preset"], {}).update({c["name"]: c for c in data["claims"]})
    return out


@dataclass(frozen=True)
class Published:
    """Every verdict published as data: the presets' claims and the commands' findings."""

    claims: dict[str, dict[str, dict]]  # preset -> claim name -> claims.json entry
    findings: dict[str, dict[str, dict]]  # "numerics"/"bench" -> finding name -> its entry

    @classmethod
    def read(cls, docs: Path, cat: Catalogue) -> Published:
        findings = {}
        for command, where in cat.findings.items():
            path = docs / where["data"]
            if path.is_file():
                findings[command] = {f["name"]: f for f in json.loads(path.read_text("utf-8"))}
        return cls(published(docs), findings)

    def finding(self, ref: str) -> dict | None:
        command, name = split_ref(ref)
        return self.findings.get(command, {}).get(name)


# --------------------------------------------------------------------------------------------
# one statement


@dataclass(frozen=True)
class Decision:
    status: str  # a Word of HEADLINES, or a key of NOT_DECIDED
    by: str = ""  # what tested it as stated, a key of DECIDED_BY
    counts: tuple[tuple[str, int], ...] = ()  # how many claims/findings said each word


def evidence(s: Statement, pub: Published) -> list[tuple[str, str]]:
    """``(kind, word)`` of every published claim and finding that tests ``s`` as stated."""
    found = [
        ("claim", pub.claims[p][c]["verdict"])
        for p, c in map(split_ref, s.claims)
        if c in pub.claims.get(p, {})
    ]
    for ref in s.findings:
        if (f := pub.finding(ref)) is not None:
            found.append(("finding", finding_verdict(s, f)))
    return found


def status(s: Statement, pub: Published) -> Decision:
    """A statement's headline from what tests it as stated (the engine's ``headline``), or,
    for a statement no claim or finding covers, its tests; otherwise the first reason that
    applies."""
    found = evidence(s, pub)
    if found:
        words = [w for _, w in found]
        by = " and ".join(dict.fromkeys(kind for kind, _ in found))
        counts = tuple((w, words.count(w)) for w in dict.fromkeys(words))
        return Decision(headline(words), by, counts)
    if tests_decide(s):
        return Decision(s.by_test, "test")
    if any(c in pub.claims.get(p, {}) for p, c in map(split_ref, s.related)):
        return Decision("related-only")
    if s.claims:  # none published: a preset without claims.json, or claims added since
        run = all(p in pub.claims for p, _ in map(split_ref, s.claims))
        return Decision("not-run" if run else "prose-only")
    return Decision("pending" if s.findings else s.reason)


def headline_text(s: Statement, pub: Published) -> str:
    """A statement's headline in the words every page shows it in (``pages``): the verdict of
    ``status``, or, for a statement not decided, why not (the status column's short words)."""
    d = status(s, pub)
    return str(d.status) if d.status in HEADLINES else NOT_DECIDED[d.status][0]


def finding_verdict(s: Statement, f: dict) -> str:
    """The published finding's verdict, or, where the statement names some of its parts, those
    parts' verdicts combined by the finding's own rule (each part as published)."""
    if not s.parts:
        return f["verdict"]
    return combine(TARGET, [p["verdict"] for p in f["parts"] if p["part"] in s.parts])


def tests_decide(s: Statement) -> bool:
    """Tests decide a statement about the library itself; where a claim or finding covers it, a
    test on a few fixed seeds is no verdict, and under a `reason` it only shows the definition
    is kept."""
    return bool(s.tests) and not s.claims and not s.findings and not s.reason


def split_ref(ref: str) -> tuple[str, str]:
    preset, _, claim = ref.partition(":")
    return preset, claim


def scope(c: dict) -> str:
    """The sizes a claim was tested at, shapes merged: ``d=64 L=6/12/24 T=64 B=16 …``."""
    keys = {"d": "d", "L": "blocks", "T": "T", "B": "B", "steps": "steps", "init": "init"}
    shapes = c.get("scope", ())
    values = {label: dict.fromkeys(str(s[k]) for s in shapes) for label, k in keys.items()}
    return " ".join(f"{label}={'/'.join(v)}" for label, v in values.items() if v)
