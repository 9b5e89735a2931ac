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

import os
import re
import sys
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from normlab.lab.kit.reading import read_text
from normlab.lab.study.published.registry import Registry, Standing
from normlab.lab.study.report.claims_json import read_claims
from normlab.lab.study.spec.fingerprint import claim_design, fingerprint
from normlab.lab.verdict import Word
from normlab.lab.verdict.finding import read_findings

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

STATEMENTS = "statements.toml"
HEADLINES = (Word.HOLDS, Word.DOES_NOT_HOLD, Word.MIXED, Word.DEPENDS)  # a statement decided

# Why a statement is not decided, in the order the summary lists them: key -> (the status
# column's words, the summary's). The first seven are computed from the data and the entry's
# `scale`; the rest (REASONS) are the `reason` of an entry.
NOT_DECIDED = {
    Word.INCONCLUSIVE: (
        "inconclusive",
        "inconclusive: some claim or finding that tests it as stated is undecided",
    ),
    Word.NOT_TESTABLE: (
        "not testable here",
        "not testable here: every claim that tests it as stated is not testable here",
    ),
    "scale": (
        "not testable here (scale)",
        "not testable here (scale): it speaks of a scale the lab does not reach",
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
REASONS = tuple(NOT_DECIDED)[7:]  # the first seven are computed from the data


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
    scale: str = ""  # a scale the statement speaks of that the lab does not reach, in words

    def parts_of(self, finding: dict) -> list[dict]:
        """The published ``finding``'s parts this statement is about (all where it names none)."""
        return [p for p in finding["parts"] if not self.parts or p["part"] in self.parts]


@dataclass(frozen=True)
class Catalogue:
    articles: dict[str, dict[str, Any]]  # article -> {"title", "sections": {key: label}}
    reports: dict[str, dict[str, str]]  # preset -> {"report", optionally "unpublished"}
    findings: dict[str, dict[str, str]]  # "numerics"/"bench" -> {"data", "report"}
    beyond: dict[str, str]  # "<preset>:<claim>" -> the later paper it comes from
    statements: tuple[Statement, ...]

    def statement(self, sid: str) -> Statement | None:
        """The statement whose id is ``sid`` (None where there is none)."""
        return next((s for s in self.statements if s.id == sid), None)


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
    found = [(p.parent, read_claims(p)) for p in paths]  # bounded, checked to the leaves
    return sorted(
        found, key=lambda t: (t[1]["preset"], t[0].name != t[1]["preset"], _natural(t[0].name))
    )


def _natural(name: str) -> list:
    """``name``'s sort key with its numbers read as numbers: round 10 after round 9."""
    return [int(x) if x.isdigit() else x for x in re.split(r"(\d+)", name)]


@dataclass(frozen=True)
class Row:
    """A published claim's verdict and where it came from."""

    entry: dict  # its claims.json entry
    where: str  # the docs/data directory that published it


def published(docs: Path) -> dict[str, dict[str, Row]]:
    """Every published study's verdicts: preset -> claim name -> its row (a later round's
    directory over the preset's own, ``data_dirs``' order)."""
    out: dict[str, dict[str, Row]] = {}
    for where, data in data_dirs(docs):
        rows = {c["name"]: Row(c, where.name) for c in data["claims"]}
        out.setdefault(data["preset"], {}).update(rows)
    return out


@dataclass(frozen=True)
class Published:
    """Every verdict published as data: the presets' claims and the commands' findings, and the
    registry that says when each design and plan was fixed (``registry``)."""

    rows: dict[str, dict[str, Row]]  # preset -> claim name -> its published row
    findings: dict[str, dict[str, dict]]  # "numerics"/"bench" -> finding name -> its entry
    registry: Registry
    docs: Path
    sizes: dict[str, str] = field(default_factory=dict)  # command -> the size its findings hold

    @classmethod
    def read(cls, docs: Path, cat: Catalogue) -> Published:
        paths = {command: docs / where["data"] for command, where in cat.findings.items()}
        findings = {  # bounded, checked to the leaves (a FIFO is refused)
            command: {f["name"]: f for f in read_findings(path)}
            for command, path in paths.items()
            if os.path.lexists(path)
        }
        sizes = {c: where["size"] for c, where in cat.findings.items() if "size" in where}
        return cls(published(docs), findings, Registry.read(docs), docs, sizes)

    @property
    def claims(self) -> dict[str, dict[str, dict]]:
        """preset -> claim name -> its claims.json entry."""
        return {p: {n: r.entry for n, r in rows.items()} for p, rows in self.rows.items()}

    def claim(self, ref: str) -> dict | None:
        preset, name = split_ref(ref)
        row = self.rows.get(preset, {}).get(name)
        return row.entry if row else None

    def finding(self, ref: str) -> dict | None:
        command, name = split_ref(ref)
        return self.findings.get(command, {}).get(name)

    def standing(self, ref: str) -> Standing:
        """Whether the published verdict of ``ref`` (a claim or a finding) is confirmatory."""
        preset, name = split_ref(ref)
        if preset in self.findings:
            design = (self.finding(ref) or {}).get("design")
            if design is None:
                return Standing(False, "its design was not published with it")
            return self.registry.standing("designs", ref, fingerprint(design), self._where(ref))
        row = self.rows[preset][name]
        if row.where not in self.registry.data:  # checked first: no design read for nothing
            return Standing(False, "its data has no registered date")
        study = stored_design(self.docs / "data" / row.where)
        if study is None:
            return Standing(False, "the design that decided it is not stored beside it")
        claim = next(c for c in study.claims if c.name == name)
        fp = fingerprint(claim_design(study, claim))
        return self.registry.standing("designs", ref, fp, row.where)

    def began(self, ref: str) -> str | None:
        """When the data of ``ref``'s published verdict began (None: not registered)."""
        data = self.registry.data.get(self._where(ref))
        return data.began if data else None

    def _where(self, ref: str) -> str:
        """The registry's data key of ``ref``'s published verdict: a finding measured on its own
        (``command:name``), else its findings file's command, or a claim's docs/data directory."""
        preset, name = split_ref(ref)
        if preset in self.findings:
            return ref if ref in self.registry.data else preset
        return self.rows[preset][name].where


@cache
def stored_design(where: Path):
    """The design that decided the published study in ``where``: the spec.toml stored beside
    it (None: none is)."""
    from normlab.lab.study.spec import parse_spec
    from normlab.lab.study.spec.parse import MAX_SPEC_BYTES

    path = where / "spec.toml"
    if not os.path.lexists(path):  # bounded: a FIFO or a directory there is refused
        return None
    text = read_text(path, str(path), limit=MAX_SPEC_BYTES)
    return parse_spec(text, str(path), default_name=where.name)


def split_ref(ref: str) -> tuple[str, str]:
    preset, _, claim = ref.partition(":")
    return preset, claim


def scope(c: dict) -> str:
    """The sizes a claim was tested at, shapes merged: ``d=64 L=6/12/24 T=64 B=16 …``."""
    keys = {"d": "d", "L": "blocks", "T": "T", "B": "B", "steps": "steps", "init": "init"}
    shapes = c.get("scope", ())
    values = {label: dict.fromkeys(str(s[k]) for s in shapes) for label, k in keys.items()}
    return " ".join(f"{label}={'/'.join(v)}" for label, v in values.items() if v)
