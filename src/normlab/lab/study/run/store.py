"""``results.jsonl``: one line per finished run, appended atomically, read back for ``--resume``.

A line is written with a single ``write`` on an ``O_APPEND`` descriptor, then ``fsync``: a study
killed at any moment leaves whole lines only (a torn last line, possible if the machine itself
dies, is skipped on reading). Runs are keyed by a hash of their config (the fields set away from
their defaults) and the corpus, so a run is done once whatever study asked for it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import open_append
from normlab.lab.kit.reading import (
    ReadError,
    check_strings,
    loads_json,
    read_bytes,
    read_text,
)
from normlab.lab.kit.shapes import ANY, Choice, Either, Int, Maybe, Num, check_shape
from normlab.lab.train.result import RunResult, result_problem
from normlab.lab.train.trainer import TrainConfig, concrete_device
from normlab.models import TransformerConfig
from normlab.validation import REAL_MAX

# Fields that change how fast a run goes, not what it computes.
_SPEED_ONLY = ("threads",)


def _defaults(cls: type) -> dict[str, Any]:
    """The default of each field of ``cls`` that has one, as ``to_dict`` writes it."""
    d = {f.name: f.default for f in fields(cls) if f.default is not MISSING}
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


_DEFAULTS = {**_defaults(TrainConfig), "model": _defaults(TransformerConfig)}


def run_key(cfg: TrainConfig, corpus_sha256: str) -> str:
    """A run's key: the fields its config sets away from their defaults (``device="auto"``
    resolved to the device here), and its corpus. A field added with a default leaves every
    earlier run's key as it was."""
    return _key(cfg.to_dict(), corpus_sha256)


def _key(config: dict[str, Any], corpus_sha256: str) -> str:
    d = {**config, "device": concrete_device(config.get("device", "auto"))}
    blob = json.dumps({"config": _changed(d, _DEFAULTS), "corpus": corpus_sha256}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _changed(d: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``d`` away from ``defaults`` (of the model's config: its own such)."""
    return {
        k: _changed(v, defaults[k]) if isinstance(v, dict) and k in defaults else v
        for k, v in d.items()
        if k not in _SPEED_ONLY and defaults.get(k, MISSING) != v
    }


def _rekeyed(rec: dict[str, Any]) -> dict[str, Any]:
    """``rec`` under today's key, recomputed from its stored config and corpus: a line written
    when every field was keyed (before the keys took only the fields set away from their
    defaults) is found by ``--resume`` and ``--redecide`` all the same."""
    config, corpus = rec["result"].get("config"), rec.get("corpus_sha256")
    if isinstance(config, dict) and isinstance(corpus, str):
        rec["key"] = _key(config, corpus)
    return rec


@dataclass(frozen=True)
class RunRecord:
    """A line of ``results.jsonl``: one finished run of a study (``normlab train --config``
    reads it back)."""

    key: str  # run_key(config, corpus)
    name: str  # the arm
    seed_index: int
    seed: int
    preset: str  # the study's name
    corpus_sha256: str
    result: dict[str, Any]  # RunResult.to_dict()


def find_run(records: Iterable[Any], name: str | None, seed_index: int) -> Any:
    """The last of ``records`` that is arm ``name``'s run under seed index ``seed_index`` (None
    if none is): a study's planned runs (``design.Run``), or the lines of a results.jsonl
    (``asdict(RunRecord)``; a line that is not a record is skipped)."""

    def ident(r: Any) -> tuple:
        if isinstance(r, dict):
            return r.get("name"), r.get("seed_index")
        return getattr(r, "arm", None), getattr(r, "index", None)

    return next((r for r in reversed(list(records)) if ident(r) == (name, seed_index)), None)


def results_of(
    records: Mapping[str, dict], runs: Iterable[Any], key: Callable[[Any], str], where: str
) -> dict[str, dict[int, RunResult]]:
    """``arm -> {seed index: result}`` of the ``runs`` (``design.Run``) found in ``records`` (a
    :meth:`ResultStore.load`, the worker's results added) under ``key(run)``, each rebuilt as
    its ``RunResult``: the one place a result read or received becomes typed."""
    out: dict[str, dict[int, RunResult]] = {}
    for r in runs:
        if (rec := records.get(key(r))) is not None:
            res = RunResult.from_dict(rec["result"], f"{where}: run {r.label}")
            out.setdefault(r.arm, {})[r.index] = res
    return out


class ResultStore:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def load(self, *, results: bool = False) -> dict[str, dict[str, Any]]:
        """key -> record, the first complete line of each key (later duplicates are ignored),
        keyed as :func:`run_key` keys today whatever scheme wrote the line (:func:`_rekeyed`).
        A line that is JSON but not a run's record (no ``key`` or no ``result``: not written by
        the lab, or edited) is a :class:`UsageError` naming it, and so is a line that is not
        JSON, unless it is a record cut short (a crash mid-write), which is skipped."""
        out: dict[str, dict[str, Any]] = {}
        if not self.path.exists():
            return out
        text = read_text(self.path, errors="replace")  # a torn line may end mid-character
        for i, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            rec = _parsed(line, f"{self.path} line {i}")
            if rec is None:
                continue  # a write cut short by a crash: the start of a record
            if problem := record_problem(rec, results):
                raise UsageError(
                    f"{self.path} line {i}: not a run's record ({problem}); fix or remove that "
                    "line, or start without --resume"
                )
            out.setdefault(_rekeyed(rec)["key"], rec)
        return out

    def set_aside_torn_line(self) -> Path | None:
        """Make the file end whole before it is continued: a record cut short by a crash (no
        newline at the end) moves to ``results.jsonl.torn`` (returns where it went); a complete
        record written without its newline gets one, and is kept. Anything else at the end is
        a :class:`UsageError` naming its line, and the file is read bounded
        (``normlab.lab.kit.reading.read_bytes``): nothing is changed before both checks."""
        if not os.path.lexists(self.path):
            return None
        data = read_bytes(self.path, f"--resume: {self.path}")
        if not data or data.endswith(b"\n"):
            return None
        cut = data.rfind(b"\n") + 1
        where = f"{self.path} line {data.count(NEWLINE, 0, cut) + 1}"
        rec = _parsed(data[cut:].decode("utf-8", "replace"), where)
        if rec is None:
            torn = self.path.with_name(self.path.name + ".torn")
            _append_line(torn, data[cut:] + b"\n")
            _truncate(self.path, cut)
            return torn
        if problem := record_problem(rec):
            raise UsageError(f"{where}: not a run's record ({problem}); fix or remove that line")
        _append_line(self.path, b"")  # a whole record: only its newline is missing
        return None

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n"
        _append_line(self.path, line.encode())


NEWLINE = b"\n"


def _truncate(path: Path, size: int) -> None:
    """``path`` cut to ``size`` bytes, never through a symlink."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def _append_line(path: Path, line: bytes) -> None:
    """``line`` appended to ``path`` in one ``write`` on a line of its own, then fsynced."""
    fd = open_append(path)
    try:
        # After a torn write the file may not end in a newline: start a fresh line.
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")
        n = os.write(fd, line)
        if n != len(line):  # regular files write all or fail; say so if not
            raise OSError(f"short write to {path}: {n} of {len(line)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)


def _parsed(line: str, where: str) -> Any:
    """``line`` parsed, its strings checked (names and reasons reach terminals and reports); None
    where it is a record cut short by a crash (:func:`_torn`); a :class:`UsageError` if it is
    neither."""
    try:
        return check_strings(loads_json(line, where), where)
    except ReadError as e:
        if _torn(line):
            return None
        raise UsageError(f"{e}; fix or remove that line, or start without --resume") from None


def _torn(line: str) -> bool:
    """Whether ``line`` is the start of a JSON object cut short (what a crash mid-write leaves),
    not garbage: the parser ran out of text (between tokens, inside a string or an escape)
    rather than met a wrong character."""
    if not line.startswith("{"):
        return False
    try:
        json.loads(line)
    except json.JSONDecodeError as e:
        end = len(line.rstrip())
        cut_escape = e.msg.startswith("Invalid \\uXXXX") and e.pos + 6 > end
        return e.pos >= end or e.msg.startswith("Unterminated string") or cut_escape
    except (ValueError, RecursionError):
        return False
    return False


def record_problem(rec: Any, results: bool = True) -> str | None:
    """What keeps ``rec`` (a parsed line) from being a run's record, or None; with ``results``,
    its ``result`` must have the fields the verdicts read, so a line edited by hand (``result:
    {}``, ``summary: [1, 2]``) stops ``--resume`` and ``--redecide`` with its line number
    instead of failing inside the verdicts."""
    res = rec.get("result") if isinstance(rec, dict) else None
    if not isinstance(res, dict) or not isinstance(rec.get("key"), str):
        return 'expected a JSON object with "key" and a "result" object'
    if not results:
        return None
    if (problem := result_problem(res)) is not None:
        return problem
    for k in ("name", "seed_index"):
        if k in rec and not isinstance(rec[k], str if k == "name" else int):
            return f"{k}: expected {'a string' if k == 'name' else 'an int'}"
    try:  # the leaves the verdicts, the plots and the report read
        check_shape(rec, _RECORD, "")
    except ReadError as e:
        return str(e).removeprefix(": ")
    if (big := _largest(res)) > RUN_VALUE_MAX:
        return (
            f"a value of {big:.3g} in its result, beyond what a run computes (at most "
            f"{RUN_VALUE_MAX:.3g}, float32's largest)"
        )
    return None


# A run computes in float32 at most: a larger value in a record was not written by a run (and
# sums of such values overflow the verdicts' and the plots' arithmetic).
RUN_VALUE_MAX = REAL_MAX
_VALUES = Either(Maybe(Num()), [Maybe(Num())])
_RECORD = {
    "key": str,
    "name?": str,
    "seed_index?": Int(0),
    "seed?": Int(),
    "preset?": str,
    "corpus_sha256?": str,
    "result": {
        "config": {"model": {"*": ANY}, "*": ANY},
        "status": Choice(("ok", "diverged")),
        "reason": str,
        "diverged_step?": Int(0),
        "stopped_step?": Int(0),
        "history": {"*": [Maybe(Num())]},
        "evals": [{"*": _VALUES}],
        "probes": {"*": {"*": Either(_VALUES, {"*": _VALUES})}},
        "summary": {"*": Either(_VALUES, str, bool, {"*": _VALUES})},
    },
}


def _largest(doc: Any) -> float:
    """The largest magnitude of a float in ``doc``."""
    stack, big = [doc], 0.0
    while stack:
        v = stack.pop()
        if isinstance(v, float):
            big = max(big, abs(v))
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return big


def saved_config(path: str, run: str | None, seed_index: int):
    """A saved run's ``TrainConfig`` (``normlab train --config``): ``config.json`` (the config
    itself), ``result.json`` (a run result: its ``config``), a line of a study's
    ``results.jsonl`` (its ``result``'s), or that whole file with ``run`` and ``seed_index``
    picking the line."""
    try:
        text = read_text(path, "")
    except ReadError as e:  # no such file, a directory, a FIFO, too big, not UTF-8
        raise UsageError(f"--config {path}: cannot read it ({str(e).removeprefix(': ')})") from None
    try:
        docs = [loads_json(text, f"--config {path}")]
    except ReadError as e:
        if "not valid JSON" not in str(e):
            raise
        # JSON lines: a study's results.jsonl, each line bounded and checked the same way
        docs = []
        for i, ln in enumerate(text.splitlines(), 1):
            if not ln.strip():
                continue
            try:
                docs.append(loads_json(ln, f"line {i}"))
            except ReadError as e:
                raise UsageError(f"--config {path}: not JSON ({e})") from None
    if not docs:
        raise UsageError(f"--config {path}: the file is empty")
    doc = docs[0]
    if len(docs) > 1 or run is not None:  # a study's results: pick the run
        doc = find_run(docs, run, seed_index)
        if doc is None:
            raise UsageError(
                f"--config {path}: no run {run!r} with seed index {seed_index} in it "
                "(a study's results.jsonl: give --run NAME [--seed-index I])"
            )
    doc = doc.get("result", doc) if isinstance(doc, dict) else doc
    doc = doc.get("config", doc) if isinstance(doc, dict) else doc
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
        raise UsageError(
            f"--config {path}: not a run's config (config.json, result.json or a "
            "study's results.jsonl)"
        )
    return TrainConfig.from_dict(doc)
