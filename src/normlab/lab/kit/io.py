"""How the lab writes: one process per output directory (an advisory lock held for the life of
``normlab study``, ``advise`` and ``train``), and every output file whole (a temp name unique to
the process, fsync, rename), never through a symlink and never over a backup.

``results.jsonl`` and ``metrics.jsonl`` are appended instead (one ``write`` per line, on a
descriptor opened with ``O_NOFOLLOW``): a crash mid-line leaves a torn last line, which
``--resume`` sets aside (``normlab.lab.study.run.store``).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import re
import secrets
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from normlab.lab.kit import doc as d
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.reading import printable

LOCK_FILE = ".normlab.lock"
TMP_SUFFIX = ".normlab-tmp"  # what a writer killed before its rename leaves; swept by the lock
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

# How the lab writes a time: study.json, a findings file's start, the registry.
UTC = "%Y-%m-%dT%H:%M:%SZ"


def utc(t: float | None = None) -> str:
    """``t`` (seconds since the epoch; None: now) as :data:`UTC` writes it."""
    return time.strftime(UTC, time.gmtime(t))


def out_dir(path: str | os.PathLike, flag: str = "--out") -> Path:
    """Create the output directory now, before any work whose results it would hold."""
    out = Path(path)
    no_symlink(out)  # an --out linked to another study's directory is not written through
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot create the directory ({e.strerror or e})") from e
    return out


# --------------------------------------------------------------------------------------------
# the writer


@contextlib.contextmanager
def atomic_writer(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file whose contents replace ``path`` whole when the block ends without an
    exception: written under a temp name unique to this process, fsynced, renamed over
    ``path`` (a symlink there is replaced, not followed), the directory fsynced. On an exception
    the temp file is removed and ``path`` is left as it was."""
    path = Path(path)
    no_symlink(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TMP_SUFFIX}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def write_file(path: str | os.PathLike, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` whole (:func:`atomic_writer`)."""
    with atomic_writer(path) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


def write_json(path: str | os.PathLike, doc, end: str = "", **dumps) -> None:
    """``doc`` as JSON in ``path`` (:func:`write_file`), then ``end``; a NaN or an infinity in
    it is a ``ValueError`` naming the file, never ``NaN``/``Infinity`` in the file (not JSON:
    the lab's own reader refuses it)."""
    try:
        text = json.dumps(doc, allow_nan=False, **dumps)
    except ValueError as e:
        raise ValueError(f"{path}: {e} (nothing written)") from None
    write_file(path, text + end)


def write_page(doc: d.Document, stem: Path, *, toc_after: int) -> list[Path]:
    """``doc`` as ``stem.md`` and ``stem.html`` (the table of contents after its first
    ``toc_after`` blocks: :func:`normlab.lab.kit.doc.to_html`); their paths, in that order."""
    paths = [stem.with_suffix(".md"), stem.with_suffix(".html")]
    write_file(paths[0], d.to_markdown(doc))
    write_file(paths[1], d.to_html(doc, toc_after=toc_after))
    return paths


def no_symlink(path: str | os.PathLike) -> None:
    """A :class:`UsageError` if the directory ``path`` is a symlink: the lab writes into the
    directory it was given, never into the one a link there points to."""
    if os.path.islink(os.path.normpath(os.fspath(path))):  # "link/" is the link too
        raise UsageError(f"{printable(str(path))} is a symlink; the lab does not write through one")


def sub_dir(parent: str | os.PathLike, name: str) -> Path:
    """``parent/name``, created if missing; a symlink (or a file) there is a
    :class:`UsageError`, not followed."""
    path = Path(parent) / name
    no_symlink(path)
    try:
        path.mkdir(exist_ok=True)
    except FileExistsError:
        raise UsageError(
            f"{printable(str(path))} is not a directory; the lab writes into one there"
        ) from None
    no_symlink(path)  # made a link between the two checks: still refused
    return path


def fsync_dir(path: str | os.PathLike) -> None:
    """Make a rename or a new file in ``path`` durable (a no-op where directories cannot be
    opened)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.fsync(fd)
    os.close(fd)


def open_append(path: str | os.PathLike) -> int:
    """A descriptor appending to ``path`` (created if missing), never through a symlink (at
    ``path`` or its directory)."""
    no_symlink(Path(path).parent)
    try:
        return os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | _NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError:
        no_symlink(path)  # the refusal to name, rather than the open's ELOOP
        raise


def set_aside(folder: str | os.PathLike, names, stem: str) -> Path | None:
    """Move those of the entries ``names`` of ``folder`` that exist (files, directories, links:
    moved as they are, not followed) into a new directory ``folder/stem-<time>[-n]``, a name
    nothing has: a backup is never overwritten, even by a second move in the same second.
    Returns it, or None when none of ``names`` exists."""
    folder = Path(folder)
    present = [n for n in names if os.path.lexists(folder / n)]
    if not present:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for n in range(10_000):
        new = folder / f"{stem}-{stamp}{f'-{n}' if n else ''}"
        try:
            new.mkdir()  # fails if ``new`` exists: no overwrite
        except FileExistsError:
            continue
        for name in present:  # into an empty directory: nothing there to replace
            os.rename(folder / name, new / name)
        fsync_dir(new)
        fsync_dir(folder)
        return new
    raise OSError(f"no free backup name in {folder}")


def unused_name(path: str | os.PathLike) -> Path:
    """``path``, or ``stem.1.suffix``, ``stem.2.suffix``... : the first that does not exist."""
    path = Path(path)
    names = (path.with_suffix(f".{n}{path.suffix}") if n else path for n in itertools.count())
    return next(p for p in names if not os.path.lexists(p))


# --------------------------------------------------------------------------------------------
# one process per output directory


def job_rank() -> tuple[int, int]:
    """(rank, world size) of this process: torchrun's ``RANK`` and ``WORLD_SIZE``, or (0, 1)
    for a process that is not one of several (``WORLD_SIZE`` unset or 1), whatever ``RANK`` a
    shell left set. A :class:`UsageError` for values that are no job's."""
    env = {k: os.environ.get(k, "") for k in ("RANK", "WORLD_SIZE")}
    if env["WORLD_SIZE"] in ("", "1"):
        return 0, 1
    try:
        rank, world = int(env["RANK"] or "0"), int(env["WORLD_SIZE"])
    except ValueError:
        rank, world = -1, 0
    if not 0 <= rank < world <= 1 << 20:
        shown = ", ".join(f"{k}={printable(v, 20)!r}" for k, v in env.items())
        raise UsageError(f"{shown}: not a torchrun job's (0 <= RANK < WORLD_SIZE)")
    return rank, world


def is_main_process() -> bool:
    """Whether this process writes the job's files, and so holds its --out: rank 0 of a
    torchrun job, or a process that is not one of several (:func:`job_rank`)."""
    return job_rank()[0] == 0


@contextlib.contextmanager
def hold(out: str | os.PathLike, command: str, flag: str = "--out") -> Iterator[None]:
    """Hold ``out``'s lock file for the block: an exclusive ``flock``, so the kernel releases it
    when this process ends however it ends. A directory another process holds is a
    :class:`UsageError` naming its PID, raised before anything in ``out`` is changed. Once held,
    the temp files of writers killed before their rename are removed."""
    path = Path(out) / LOCK_FILE
    shown = printable(str(out))
    try:
        # O_NONBLOCK: a FIFO planted at the lock's name must not block the open.
        flags = os.O_RDWR | os.O_CREAT | _NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        reason = e.strerror or e
        raise UsageError(f"{flag} {shown}: cannot open its lock file {LOCK_FILE} ({reason})") from e
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UsageError(
                f"{flag} {shown}: its lock file {LOCK_FILE} is not a regular file; remove it"
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"{flag} {shown} is in use by {_holder(fd)}; wait for it to end or choose "
                f"another {flag}"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {command}\n".encode(), 0)
        _sweep_temps(Path(out))
        yield
    finally:
        os.close(fd)  # releases the lock (the kernel does the same if the process dies)


def _holder(fd: int) -> str:
    """Who holds the lock, as its file says (``PID COMMAND``, written by :func:`hold`); the
    file is anyone's to write, so only a number and a command's name are shown."""
    holder = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
    if len(holder) >= 2 and holder[0].isdigit() and holder[1].isidentifier():
        return f"normlab {holder[1][:20]} (PID {holder[0][:12]})"
    return "a process"


# What atomic_writer names its temp files: .NAME.<pid>.<8 hex digits>.normlab-tmp
_TMP_NAME = re.compile(r"\..+\.(\d+)\.[0-9a-f]{8}" + re.escape(TMP_SUFFIX))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0  # another user's process (or a PID this system cannot have)
    return True


def _sweep_temps(out: Path) -> None:
    """Remove the temp files of writers that died before their rename: only names the writer
    makes, only those of a process that no longer runs (not a live writer's), and not below a
    directory with its own lock file (another command's --out, swept by that command)."""
    for root, dirs, files in os.walk(out, followlinks=False):
        if Path(root) != out and LOCK_FILE in files:
            dirs.clear()
            continue
        for name in files:
            m = _TMP_NAME.fullmatch(name)
            if m and not _alive(int(m[1])):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(root, name))
