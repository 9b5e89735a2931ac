"""``results.jsonl``: one line per finished run, appended atomically, read back for ``--resume``.

A line is written with a single ``write`` on an ``O_APPEND`` descriptor, then ``fsync``: a study
killed at any moment leaves whole lines only (a torn last line, possible if the machine itself
dies, is skipped on reading). Runs are keyed by a hash of their config and the corpus, so a run
is done once whatever preset or name asked for it.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from normlab.lab.common import UsageError
from normlab.lab.io import open_append
from normlab.lab.train.trainer import TrainConfig, concrete_device

# Fields that change how fast a run goes, not what it computes.
_SPEED_ONLY = ("threads",)
# The device, the precision, the norms' own decay, the corpus slice and the evaluations after
# training (block drop, serving) change the numbers, so they are keyed; but a run at their plain
# values keys without them, as it did before they existed, so earlier studies' results resume.
_KEYED_UNLESS = {
    "device": "cpu",
    "precision": "fp32",
    "norm_weight_decay": None,
    "eval_serving": False,
    "block_drop_batches": 0,
    "train_slice": 0,
}


def run_key(cfg: TrainConfig, corpus_sha256: str) -> str:
    """A run's key: its config (``device="auto"`` resolved to the device here) and corpus."""
    d = {k: v for k, v in cfg.to_dict().items() if k not in _SPEED_ONLY}
    d["device"] = concrete_device(d["device"])
    for k, plain in _KEYED_UNLESS.items():
        if d[k] == plain:
            del d[k]
    blob = json.dumps({"config": d, "corpus": corpus_sha256}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def find_run(records: Iterable[Any], name: str | None, seed_index: int) -> Any:
    """The last of ``records`` that is arm ``name``'s run under seed index ``seed_index`` (None
    if none is): a study's planned runs (``design.Run``), or the lines of a results.jsonl
    (``RunRecord.to_dict()``; a line that is not a record is skipped)."""

    def ident(r: Any) -> tuple:
        if isinstance(r, dict):
            return r.get("name"), r.get("seed_index")
        return getattr(r, "arm", None), getattr(r, "index", None)

    hits = [r for r in records if ident(r) == (name, seed_index)]
    return hits[-1] if hits else None


class ResultStore:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def load(self) -> dict[str, dict[str, Any]]:
        """key -> record, the first complete line of each key (later duplicates are ignored).
        A line that is JSON but not a run's record (no ``key`` or no ``result``: not written by
        the lab, or edited) is a :class:`UsageError` naming it; a line that is not JSON is a
        torn line from a crash mid-write, and skipped."""
        out: dict[str, dict[str, Any]] = {}
        if not self.path.exists():
            return out
        with open(self.path, encoding="utf-8", errors="replace") as f:
            for i, line in enumerate(f, 1):
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a torn line from a crash mid-write
                if not _is_record(rec):
                    raise UsageError(
                        f"{self.path} line {i}: not a run's record (expected a JSON object with "
                        '"key" and a "result" object); fix or remove that line, or start '
                        "without --resume"
                    )
                out.setdefault(rec["key"], rec)
        return out

    def set_aside_torn_line(self) -> Path | None:
        """Move a torn last line (a crash mid-write: no newline at the end) out of the file into
        ``results.jsonl.torn``; returns where it went, or None when the file ends whole."""
        if not self.path.exists():
            return None
        data = self.path.read_bytes()
        if not data or data.endswith(b"\n"):
            return None
        cut = data.rfind(b"\n") + 1
        torn = self.path.with_name(self.path.name + ".torn")
        fd = open_append(torn)
        try:
            os.write(fd, data[cut:] + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        with open(self.path, "r+b") as f:
            f.truncate(cut)
        return torn

    def append(self, record: dict[str, Any]) -> None:
        line = (json.dumps(record, allow_nan=False, separators=(",", ":")) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_append(self.path)
        try:
            self._ensure_line_start(fd)
            n = os.write(fd, line)
            if n != len(line):  # regular files write all or fail; say so if not
                raise OSError(f"short write to {self.path}: {n} of {len(line)} bytes")
            os.fsync(fd)
        finally:
            os.close(fd)

    def _ensure_line_start(self, fd: int) -> None:
        # After a torn write the file may not end in a newline: start a fresh line.
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            os.write(fd, b"\n")


def _is_record(rec: Any) -> bool:
    return (
        isinstance(rec, dict)
        and isinstance(rec.get("key"), str)
        and isinstance(rec.get("result"), dict)
    )
