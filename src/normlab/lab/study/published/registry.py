"""When each design and test plan was fixed, and when each published study's data was produced:
the registry (``docs/data/registry.json``), from which a verdict decided after its data was seen
is marked *exploratory* on every page until a fresh seed block confirms it.

- a claim's **design** (``spec.fingerprint``: rule, measures, δ, seeds, controls, rate checks,
  the arms' configs), keyed ``preset:claim``;
- a finding's **design** (``Finding.design()``), keyed ``numerics:name`` / ``bench:name``;
- a statement's **plan** (``plan_fingerprint``: the claims and findings that decide it as
  stated, their parts, the related evidence, the tests, the reason), keyed by the statement's id;
- each published **data** directory: its preset, seed block and when its runs began.

Every fingerprint is registered with the UTC time and the commit at which it was first fixed:
read from the repository's history for what was fixed before the registry existed
(``scripts/registry_from_git.py``), stamped by ``normlab study --register`` after. A verdict is
**confirmatory** when the design that decided it was registered before its data began and no
data of that preset on that seed block came before the registration (a design fitted to a
block is not tested by running that block again); otherwise it is **exploratory**. A statement's
headline is exploratory when its plan was registered after the data of its evidence began, or
when any evidence it counts is.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from normlab.lab.kit.io import write_json
from normlab.lab.kit.reading import read_json
from normlab.lab.kit.shapes import Int, check_shape
from normlab.lab.study.spec.fingerprint import canonical, fingerprint

REGISTRY = "data/registry.json"  # under docs/
_VERSION = {"fingerprint": str, "registered": str, "commit": str}
SHAPE = {
    "designs?": {"*": [_VERSION]},
    "plans?": {"*": [_VERSION]},
    "data?": {"*": {"preset": str, "seed_block": Int(0, 10**14), "began": str, "commit": str}},
}
# What decides a statement's headline. Its related evidence is listed beside the headline and
# never decides it (a claim demoted to related is a change of ``claims``); its note is words.
PLAN_FIELDS = ("claims", "findings", "parts", "tests", "by_test", "reason", "scale")


@dataclass(frozen=True)
class Entry:
    """One version of a design or plan: its fingerprint and when it was first fixed."""

    fingerprint: str
    registered: str  # ISO 8601 UTC, seconds
    commit: str  # the commit that fixed it (or, stamped by --register, the one it was made on)


@dataclass(frozen=True)
class Data:
    """A published study's data: what it ran and when its runs began."""

    preset: str
    seed_block: int
    began: str  # ISO 8601 UTC: no run of it is older
    commit: str  # the commit its runs ran at


@dataclass
class Registry:
    designs: dict[str, list[Entry]] = field(default_factory=dict)  # "preset:claim" -> versions
    plans: dict[str, list[Entry]] = field(default_factory=dict)  # statement id -> versions
    data: dict[str, Data] = field(default_factory=dict)  # docs/data/<dir> -> its data

    # ---- reading and writing

    @classmethod
    def read(cls, docs: Path) -> Registry:
        path = docs / REGISTRY
        if not path.is_file():
            return cls()
        doc = check_shape(read_json(path), SHAPE, str(path))
        versions = lambda d: {k: [Entry(**e) for e in v] for k, v in d.items()}  # noqa: E731
        data = {k: Data(**v) for k, v in doc.get("data", {}).items()}
        return cls(versions(doc.get("designs", {})), versions(doc.get("plans", {})), data)

    def write(self, docs: Path) -> None:
        as_dict = lambda d: {k: [dataclasses.asdict(e) for e in v] for k, v in sorted(d.items())}  # noqa: E731
        doc = {
            "about": "when each design and plan was fixed (normlab study --register)",
            "designs": as_dict(self.designs),
            "plans": as_dict(self.plans),
            "data": {k: dataclasses.asdict(v) for k, v in sorted(self.data.items())},
        }
        write_json(docs / REGISTRY, doc, "\n", indent=1, ensure_ascii=False)

    # ---- stamping

    def stamp(self, table: str, key: str, fp: str, when: str, commit: str) -> bool:
        """Register ``fp`` as the current version of ``key`` unless it is already; True if
        it was new. A version seen before and then changed is registered again when it comes
        back: the registration is when the current version was fixed."""
        versions = getattr(self, table).setdefault(key, [])
        if versions and versions[-1].fingerprint == fp:
            return False
        versions.append(Entry(fp, when, commit))
        return True

    # ---- reading a verdict's standing

    def in_force(self, table: str, key: str, when: str) -> Entry | None:
        """The version of ``key`` in force at ``when`` (the last registered by then)."""
        before = [e for e in getattr(self, table).get(key, []) if e.registered <= when]
        return before[-1] if before else None

    def fresh(self, where: str, since: str) -> bool:
        """Whether no other published data of ``where``'s preset on its seed block began
        before ``since``: a design fixed after a block was seen is not tested on it again."""
        d = self.data[where]
        return all(
            o.began >= since
            for k, o in self.data.items()
            if k != where and (o.preset, o.seed_block) == (d.preset, d.seed_block)
        )

    def standing(self, table: str, key: str, fp: str, where: str | None) -> Standing:
        """Whether the verdict decided by version ``fp`` of ``key`` on the data in ``where``
        (a docs/data directory, or the key of a findings file) is confirmatory: ``fp`` was the
        version in force when that data began, on a seed block not seen before it was fixed."""
        if where is None or where not in self.data:
            return Standing(False, "its data has no registered date")
        d = self.data[where]
        entry = self.in_force(table, key, d.began)
        if entry is None or entry.fingerprint != fp:
            later = [e for e in getattr(self, table).get(key, []) if e.fingerprint == fp]
            e = later[-1] if later else None
            fixed = f"fixed on {e.registered[:10]} ({e.commit[:7]})" if e else "not registered"
            return Standing(False, f"its design was {fixed}, after its data began ({d.began[:10]})")
        if not self.fresh(where, entry.registered):
            why = (
                f"its design was fixed on {entry.registered[:10]} ({entry.commit[:7]}), after "
                f"an earlier run of {d.preset} on seed block {d.seed_block}"
            )
            return Standing(False, why)
        return Standing(True, "")


@dataclass(frozen=True)
class Standing:
    """A verdict's standing: confirmatory, or exploratory and why."""

    confirmatory: bool
    why: str  # what makes it exploratory ("" when confirmatory)


def plan_fingerprint(statement) -> str:
    """The fingerprint of a statement's test plan as data: what decides it and how
    (``PLAN_FIELDS``)."""
    return fingerprint({k: canonical(getattr(statement, k, None)) for k in PLAN_FIELDS})
