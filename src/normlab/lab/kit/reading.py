"""How the lab reads a file or a value someone else may have written (docs/refusals.md): one
bounded reader for JSON and TOML, used wherever the lab reads one (a spec, ``--set``, a Hugging
Face ``config.json``, ``results.jsonl``, ``study.json``, ``claims.json``, a saved config), and
the checks of a value read from the command line.

A document is checked whole after parsing: nesting at most :data:`MAX_DEPTH` deep, numbers
finite and ints within 64 bits, strings at most :data:`MAX_STRING` characters. A parser's own
failures on hostile text (``RecursionError`` on deep nesting, ``ValueError`` on an int of 5,000
digits) become the same one-line :class:`UsageError`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import stat
import sys
from collections.abc import Callable
from typing import Any

from normlab.lab.kit.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

MAX_DEPTH = 32  # a spec nests 5 deep (claims.parts.controls...); a study.json about as much
MAX_STRING = 1 << 20  # characters of one string value (study.json stores a spec of <= 1 MiB)
MAX_FILE = 256 << 20  # bytes of a file the lab reads whole (a big results.jsonl is ~10 MB)
INT_MAX = 2**63 - 1  # what torch and the dataclasses' arithmetic take
_INT_DIGITS = 20  # a JSON int longer than this cannot fit in 64 bits: refused before int()


class ReadError(UsageError, ValueError):
    """A file or value that cannot be read as the lab's data; the message names where."""


def printable(text: str, limit: int = 80) -> str:
    """``text`` fit for one line of a terminal or Markdown: control characters (ESC, newline)
    escaped as ``\\x1b``, ``\\n``, cut to ``limit`` characters."""
    short = text if len(text) <= limit else text[:limit] + "..."
    if short.isprintable():
        return short
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in short)


def shown(v: Any) -> str:
    """A JSON value for a one-line message: as JSON, escaped, cut short."""
    return printable(json.dumps(v), 40)


def _control(text: str, newlines: bool) -> str | None:
    """The first character of ``text`` a terminal would act on (ESC, a carriage return, a
    newline unless ``newlines``), or None."""
    if text.isprintable():
        return None
    return next((c for c in text if not c.isprintable() and not (newlines and c in "\n\t")), None)


def check_text(text: str, what: str, limit: int, *, newlines: bool = True) -> str:
    """``text`` if it has no control characters (newlines and tabs allowed with ``newlines``)
    and at most ``limit`` characters; else a ``ValueError`` naming ``what``."""
    if len(text) > limit:
        raise ValueError(f"{what}: {len(text):,} characters; at most {limit:,} are allowed")
    if (bad := _control(text, newlines)) is not None:
        raise ValueError(f"{what}: the control character {bad!r} is not allowed")
    return text


def key_path(at: str, key: str) -> str:
    """Where the value of ``key`` in the object at ``at`` sits (``at.key``; ``key`` at the top),
    the key escaped and cut short."""
    return f"{at}.{printable(key, 40)}" if at else printable(key, 40)


def _values(doc: Any):
    """``(value, depth, path)`` for every value of ``doc``, depth first (a path: ``a.b[2]``); a
    dict comes before its values, so a check of its keys runs before anything below them."""
    stack: list[tuple[Any, int, str]] = [(doc, 0, "")]
    while stack:
        v, depth, where = stack.pop()
        yield v, depth, where
        if isinstance(v, dict):
            stack.extend((x, depth + 1, key_path(where, k)) for k, x in v.items())
        elif isinstance(v, list | tuple):
            stack.extend((x, depth + 1, f"{where}[{i}]") for i, x in enumerate(v))


def check_strings(doc: Any, source: str) -> Any:
    """``doc`` if no key holds a control character and no string value one other than a newline
    or a tab: what a spec says reaches terminals, ``study.json`` and Markdown. A
    :class:`ReadError` saying where otherwise."""
    for v, _, where in _values(doc):
        if isinstance(v, str) and (bad := _control(v, True)) is not None:
            raise ReadError(
                f"{source}: {where or 'a value'}: the control character {bad!r} is not allowed"
            )
        for k in v if isinstance(v, dict) else ():
            if (bad := _control(k, False)) is not None:
                key = json.dumps(k)[:60]
                raise ReadError(
                    f"{source}: the key {key}: the control character {bad!r} is not allowed"
                )
    return doc


def check_tree(doc: Any, source: str) -> Any:
    """``doc`` (parsed JSON or TOML) if it is nested at most :data:`MAX_DEPTH` deep, its numbers
    finite and its ints within 64 bits, its strings and keys at most :data:`MAX_STRING`
    characters; else a :class:`ReadError` saying where."""
    for v, depth, where in _values(doc):
        at = f"{source}: {printable(where, 60) if where else 'the document'}"
        if depth > MAX_DEPTH:
            raise ReadError(f"{at}: nested more than {MAX_DEPTH} deep")
        if isinstance(v, int) and not -INT_MAX - 1 <= v <= INT_MAX:  # a bool is in range
            raise ReadError(f"{at}: the int {_cut(v)} does not fit in 64 bits")
        if isinstance(v, float) and not math.isfinite(v):
            raise ReadError(f"{at}: {v} is not a finite number")
        if isinstance(v, str) and len(v) > MAX_STRING:
            raise ReadError(f"{at}: a string of {len(v):,} characters (at most {MAX_STRING:,})")
        for k in v if isinstance(v, dict) else ():
            if not isinstance(k, str) or len(k) > MAX_STRING:
                raise ReadError(f"{at}: a key of {len(str(k)):,} characters")
    return doc


def _cut(v: int) -> str:
    s = str(v) if v.bit_length() < 1000 else f"of {v.bit_length():,} bits"
    return s if len(s) <= 30 else s[:12] + "..." + s[-6:]


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > _INT_DIGITS:
        raise ValueError(f"the int {text[:12]}... ({len(text):,} digits) does not fit in 64 bits")
    return int(text)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def loads_json(text: str, source: str) -> Any:
    """``text`` as checked JSON (:func:`check_tree`); ``NaN``/``Infinity``, ints beyond 64 bits
    and numbers beyond float range are refused. A :class:`ReadError` naming ``source``."""
    json_loads = functools.partial(
        json.loads, parse_int=_parse_int, parse_constant=_refuse_constant, parse_float=_float
    )
    return _loads(json_loads, text, source, "not valid JSON ({})")


def _float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"the number {text[:20]} is beyond float range")
    return v


def loads_toml(text: str, source: str) -> dict:
    """``text`` as checked TOML (:func:`check_tree`; ``inf`` and ``nan`` are refused)."""
    return _loads(tomllib.loads, text, source, "not valid TOML: {}")


def _loads(parse, text: str, source: str, invalid: str) -> Any:
    """``parse(text)`` checked (:func:`check_tree`); the parser's failure, a deep nesting's
    included, as a :class:`ReadError` (``invalid`` with the parser's message)."""
    try:
        doc = parse(text)
    except RecursionError:
        raise ReadError(f"{source}: nested more than {MAX_DEPTH} deep") from None
    except ValueError as e:  # JSONDecodeError and TOMLDecodeError are ones
        raise ReadError(f"{source}: {invalid.format(printable(str(e), 120))}") from None
    return check_tree(doc, source)


def read_bytes(path: str | os.PathLike, what: str | None = None, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path``: a directory, FIFO or device is refused before it
    is read, a file over ``limit`` bytes (default :data:`MAX_FILE`) too, and no more than
    ``limit`` bytes are read even if the file grows meanwhile."""
    what = what or printable(str(path), 200)
    limit = MAX_FILE if limit is None else limit
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused below).
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise ReadError(f"{what}: no such file") from None
    except OSError as e:
        raise ReadError(f"{what}: cannot read it ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ReadError(f"{what}: not a regular file")
        if st.st_size > limit:
            raise ReadError(f"{what}: {st.st_size:,} bytes; the lab reads at most {limit:,}")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    except OSError as e:
        raise ReadError(f"{what}: cannot read it ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ReadError(f"{what}: more than {limit:,} bytes; the lab reads at most {limit:,}")
    return data


def read_text(
    path: str | os.PathLike,
    what: str | None = None,
    limit: int | None = None,
    errors: str = "strict",
) -> str:
    """The UTF-8 text of the regular file ``path`` (:func:`read_bytes`)."""
    what = what or printable(str(path), 200)
    try:
        return read_bytes(path, what, limit).decode("utf-8", errors)
    except UnicodeDecodeError as e:
        raise ReadError(f"{what}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def read_json(path: str | os.PathLike, what: str | None = None) -> Any:
    """:func:`read_text` then :func:`loads_json`."""
    what = what or printable(str(path), 200)
    return loads_json(read_text(path, what), what)


# --------------------------------------------------------------------------------------------
# values from the command line


def bounded_int(low: int, high: int = INT_MAX):
    """An argparse type: an int in [``low``, ``high``]; the digits are counted before ``int()``
    so ``10**400`` is refused as fast as ``-1``."""
    if high < INT_MAX:
        what = f"an int in [{low:,}, {high:,}]"
    else:
        what = "an int within 64 bits" if low == -INT_MAX - 1 else f"an int >= {low}"

    def parse(text: str) -> int:
        t = str(text).strip()
        if len(t.lstrip("+-")) > _INT_DIGITS or not t.lstrip("+-").isdigit():
            raise ValueError(f"expected {what}, got {printable(t, 30)!r}")
        v = int(t)
        if not low <= v <= high:
            raise ValueError(f"expected {what}, got {v:,}")
        return v

    parse.__name__ = "int"
    return parse


# ``text`` as an int >= 1 (>= 0); ``ValueError`` with the user's value otherwise.
positive_int, non_negative_int = bounded_int(1), bounded_int(0)


def checked(what: str, parse: Callable[[Any], Any], value: Any) -> Any:
    """``parse(value)`` for an engine's option ``what`` (a parser above), its ``ValueError`` a
    :class:`UsageError` naming the option."""
    try:
        return parse(value)
    except ValueError as e:
        raise UsageError(f"{what}: {e}") from None


def finite_float(text: str) -> float:
    """An argparse type: a finite float (``nan``, ``inf`` and ``1e400`` are refused)."""
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"expected a number, got {printable(str(text), 30)!r}") from None
    if not math.isfinite(v):
        raise ValueError(f"expected a finite number, got {printable(str(text), 30)}")
    return v


finite_float.__name__ = "float"


MAX_PATH = 4096  # characters of a path option (Linux's PATH_MAX)


def path_arg(text: str) -> str:
    """An argparse type: a path. Not empty (a script's ``--redecide "$DIR"`` with DIR unset must
    not fall back to a default or mean the current directory), no control character (a path is
    echoed in messages and written into reports), at most :data:`MAX_PATH` characters."""
    if not text:
        raise ValueError("expected a path, got an empty string")
    if len(text) > MAX_PATH:
        raise ValueError(f"expected a path, got {len(text):,} characters (at most {MAX_PATH:,})")
    if (bad := _control(text, False)) is not None:
        raise ValueError(f"the control character {bad!r} is not allowed in a path")
    return text


path_arg.__name__ = "path"
