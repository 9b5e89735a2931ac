"""The tuner's cache: one JSON file per CPU model and normlab version under the user's cache
directory, ``<cache>/normlab/tune/`` (``NORMLAB_TUNE_DIR`` overrides), holding one
:class:`Tuned` per key.

Safe when processes tune at once: a writer takes an exclusive lock on ``<file>.lock`` (POSIX
``flock``; elsewhere none), reads the file again, adds its entries and replaces the file
atomically (a temporary file in the same directory, then ``os.replace``), so a reader sees the
old file or the new one, never a torn one, and no writer drops another's keys. A file that
cannot be read or does not hold what this module writes is ignored with a warning (and
replaced by the next write).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from normlab.kernels.numba.choices import Launch, cpu_count, cpu_info

FORMAT = 1


@dataclass(frozen=True)
class Timed:
    """One candidate as the tuner timed it: seconds per call in each round."""

    launch: Launch
    seconds: tuple[float, ...]


@dataclass(frozen=True)
class Tuned:
    """The tuner's result for one key: its pick, every candidate's timings and, where the first
    look moved away from the old choice, the second look at the two (old first)."""

    key: str
    pick: Launch
    timed: tuple[Timed, ...]
    budget_s: float
    second: tuple[Timed, ...] = ()


def cache_file() -> Path:
    """This machine's cache file: ``<dir>/<cpu model>-<cpus>cpu-<hash>-normlab-<version>.json``
    (the hash of the model name and flags tells apart CPUs a model name shares)."""
    from normlab.kernels.numba import user_cache

    # the package above is imported before any of its kernels (an import of it would climb a
    # layer: tests/test_architecture.py)
    version = getattr(sys.modules.get("normlab"), "__version__", "unknown")

    model, flags = cpu_info()
    base = Path(os.environ.get("NORMLAB_TUNE_DIR") or user_cache() / "tune")
    slug = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-")[:60] or "cpu"
    digest = hashlib.sha1(f"{model}|{' '.join(sorted(flags))}".encode()).hexdigest()[:8]
    return base / f"{slug}-{cpu_count()}cpu-{digest}-normlab-{version}.json"


_FIELDS = {f.name for f in fields(Launch)}


def _launch(d) -> Launch:
    if not isinstance(d, dict) or not {"pipelined"} <= set(d) <= _FIELDS:
        raise ValueError(f"not a launch choice: {d!r}")
    return Launch(**d)


def _tuned(k: str, d) -> Tuned:
    if not isinstance(d, dict):
        raise ValueError(f"entry {k!r} is not an object")

    def looked(ts) -> tuple[Timed, ...]:
        return tuple(Timed(_launch(t["launch"]), tuple(float(s) for s in t["seconds"])) for t in ts)

    second = looked(d.get("second", ()))
    return Tuned(k, _launch(d["pick"]), looked(d["timed"]), float(d["budget_s"]), second)


def load(path: Path) -> dict[str, Tuned]:
    """The entries of the cache file at ``path`` ({} if there is none); a file that cannot be
    read or parsed is ignored with a warning."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"not a format-{FORMAT} tuning cache")
        return {k: _tuned(k, v) for k, v in data["entries"].items()}
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        warnings.warn(
            f"normlab: the kernel tuning cache {path} is unreadable or corrupt "
            f"({type(e).__name__}: {e}); ignoring it (the next tuning replaces it)",
            stacklevel=2,
        )
        return {}


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on ``<path>.lock`` while the block runs (none without ``fcntl``)."""
    try:
        import fcntl
    except ImportError:  # Windows: os.replace alone still never leaves a torn file
        yield
        return
    with open(path.with_name(path.name + ".lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _entry(t: Tuned) -> dict:
    d = asdict(t)
    del d["key"]  # the entry's name
    return d


def store(path: Path, entries: dict[str, Tuned]) -> None:
    """Add ``entries`` to the cache file at ``path`` (merged with what other processes wrote)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _locked(path):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the reader already warned about a corrupt file
            merged = {**load(path), **entries}
        data = {
            "format": FORMAT,
            "cpu": cpu_info()[0],
            "cpus": cpu_count(),
            "entries": {k: _entry(t) for k, t in merged.items()},
        }
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
