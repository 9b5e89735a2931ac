"""``study.json``: what a study records beside its runs (its design, corpus, machine, wall time,
timing rounds and H), as ``StudyMeta``; this module alone reads and writes it.

A study writes it once it is decided (``runner``); ``--redecide`` and the published registry
read it back, checked to the leaves first (:func:`check_study_json`); an advise stopped before
its study finished has none, and rebuilds one from its runs (``advise.redecide_advise``)."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import UTC, write_file, write_json
from normlab.lab.kit.reading import check_strings, read_json, shown
from normlab.lab.kit.shapes import SCALAR, Choice, Either, Int, Maybe, Num, check_shape
from normlab.lab.train.device import DEVICES, PRECISIONS

# Set where a study is decided again, shown in its reports; never written to study.json.
_SHOWN_ONLY = ("untimed", "decided_again", "decided_with")


@dataclass(kw_only=True)
class StudyMeta:
    """A study's ``study.json``, its fields in the order a study writes them; a field an older
    file lacks has its default."""

    preset: str | None = None  # the study's name
    description: str = ""
    seed_block: int = 0
    corpus: dict[str, Any] = field(default_factory=dict)  # Corpus.describe(): its sha256, ...
    environment: dict[str, Any] = field(default_factory=dict)  # the machine, threads, workers
    wall_s: float = 0.0
    train_wall_s: float | None = None
    finished: str = ""
    began: str | None = None  # when its first run began (a resumed study keeps its first)
    failed_runs: list[str] = field(default_factory=list)
    reused_runs: int = 0
    timings: dict[str, Any] = field(default_factory=dict)  # arm -> what -> rounds
    plateau_h: float | None = None  # H of the "fails"/"trains" rules
    # the design --redecide rebuilds (provenance.record)
    spec: str | None = None
    overrides: list[str] = field(default_factory=list)
    run_with: dict[str, Any] = field(default_factory=dict)
    code: dict[str, Any] = field(default_factory=dict)
    untimed: bool = False  # an advise decided before its study finished: nothing timed
    decided_again: str | None = None  # when --redecide decided it, with what design
    decided_with: str | None = None

    @classmethod
    def of(cls, study, corpus, **fields: Any) -> StudyMeta:
        """The record of ``study`` trained on ``corpus`` (its H: the plateau bar)."""
        return cls(preset=study.name, description=study.description, corpus=corpus.describe(),
                   plateau_h=corpus.unigram_val_xent(), **fields)  # fmt: skip

    @classmethod
    def from_dict(cls, doc: Any, where: str, *, complete: bool = True) -> StudyMeta:
        """``doc`` (a parsed study.json) checked (:func:`check_study_json`), as a ``StudyMeta``."""
        check_study_json(doc, where, complete=complete)
        known = {f.name for f in dataclasses.fields(cls)}  # a key it does not read: dropped
        return cls(**{k: v for k, v in doc.items() if k in known and v is not None})

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in _SHOWN_ONLY}

    def write(self, out: Path) -> None:
        write_json(out / "study.json", self.to_dict(), indent=2)


# When a study's first run began, written as it starts: a study killed before it wrote its
# study.json still knows it when resumed (the registry reads it to tell a design fixed before the
# data from one fixed after).
BEGAN_FILE = ".normlab-began"


def first_began(out: Path, now: str) -> str:
    """When the study in ``out`` first began: the earliest of the ``began`` its study.json
    records, its :data:`BEGAN_FILE` and ``now`` (a UTC time)."""
    found = [now]
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        found.append(read_json(out / "study.json")["began"])
    with contextlib.suppress(OSError, ValueError):
        found.append((out / BEGAN_FILE).read_text("ascii").strip())
    return min(t for t in found if _is_utc(t))


def mark_began(out: Path, now: str) -> None:
    """Record ``now`` as the start of the study in ``out``, unless one is recorded."""
    path = out / BEGAN_FILE
    if not path.exists():
        write_file(path, now + "\n")


def _is_utc(t: object) -> bool:
    try:
        time.strptime(t, UTC)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True


def check_study_json(meta: Any, where: str, *, complete: bool = True) -> dict:
    """``meta`` (a parsed ``study.json``) if it has the shape a study writes, where the verdicts
    read it: a finite ``plateau_h``, a ``corpus`` with its ``sha256``, objects where objects
    belong (``complete=False``: the keys present only). A :class:`UsageError` naming the key
    otherwise."""
    if not isinstance(meta, dict):
        raise UsageError(f"{where}: not a study's study.json (expected a JSON object)")
    check_strings(meta, where)  # its name, description and spec reach terminals and reports
    h = meta.get("plateau_h")
    bad_h = isinstance(h, bool) or not isinstance(h, int | float) or not 0 < h < 1e3
    if bad_h and (complete or "plateau_h" in meta):
        raise UsageError(f"{where}: plateau_h: expected a number in (0, 1000), got {shown(h)}")
    corpus = meta.get("corpus")
    bad_corpus = not isinstance(corpus, dict) or not isinstance(corpus.get("sha256"), str)
    if bad_corpus and (complete or "corpus" in meta):
        raise UsageError(f"{where}: corpus: expected an object with the corpus's sha256")
    block = meta.get("seed_block", 0)
    if isinstance(block, bool) or not isinstance(block, int) or not 0 <= block <= 10**14:
        raise UsageError(f"{where}: seed_block: expected an int in [0, 10**14], got {shown(block)}")
    # the rest to its leaves: what the report, the verdicts and the rebuilt study read
    schema = (
        _STUDY_JSON if complete else {k.removesuffix("?") + "?": v for k, v in _STUDY_JSON.items()}
    )
    return check_shape(meta, schema, where)


# What is read of a study.json, to the leaves (a study writes more: the rest is only shown).
_STUDY_JSON = {
    "preset?": str,
    "description?": str,
    "spec?": str,
    "overrides?": [str],
    "environment": {
        **dict.fromkeys(("cpu", "torch", "numba"), str),
        **dict.fromkeys(("threads", "workers"), Either(Int(0), str)),
        "device?": Choice(("cpu", "cuda")),
        "*": Either(SCALAR, [SCALAR]),
    },
    "corpus": {"sha256": str, "*": SCALAR},
    "wall_s": Num(0),
    "train_wall_s?": Num(0),
    "finished": str,
    "failed_runs?": [str],
    "reused_runs?": Int(0),
    "timings?": {"*": {"*": [Maybe(Num())]}},
    "run_with?": {"device?": Choice(DEVICES), "precision?": Choice(PRECISIONS)},
    "code?": {"*": SCALAR},
    **dict.fromkeys(("decided_again?", "decided_with?"), str),
    "untimed?": bool,
}
