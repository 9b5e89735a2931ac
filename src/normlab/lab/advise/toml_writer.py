"""A minimal TOML writer (``tomllib`` reads TOML but does not write it, and the lab adds no
dependency for it): tables, arrays of tables, strings, numbers, booleans, arrays and inline
tables, with comments for the reader of the file.

The document is plain data, so ``tomllib.loads(dumps(doc)) == doc``. A table's sub-tables are
written as ``[a.b]`` sections and its lists of tables as ``[[a.b]]`` arrays of tables; inside an
element of an array of tables everything is written inline (``model = { norm = "layernorm" }``).
Comments are kept apart from the data, keyed by path: ``comments[("base",)]`` goes above the
``[base]`` header, ``comments[("arms", 0)]`` above the first ``[[arms]]``, and
``comments[("base", "lr")]`` at the end of the ``lr = ...`` line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

KeyPath = tuple[str | int, ...]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def dumps(
    doc: Mapping[str, Any], *, header: str = "", comments: Mapping[KeyPath, str] | None = None
) -> str:
    """``doc`` as a TOML document, led by ``header`` (each of its lines made a comment)."""
    out: list[str] = _comment_lines(header)
    if out:
        out.append("")
    _table(out, (), doc, comments or {})
    return "\n".join(out).strip("\n") + "\n"


def value(v: Any) -> str:
    """The TOML form of a value (a table in it written inline)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)  # Python's shortest round-trip form is valid TOML (1e-05, 0.001, inf, nan)
    if isinstance(v, str):
        # JSON's escapes are those of a TOML basic string, but for DEL, which TOML forbids.
        return json.dumps(v, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, list | tuple):
        return "[" + ", ".join(map(value, v)) + "]"
    if isinstance(v, Mapping):
        if not v:
            return "{}"
        return "{ " + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML form for {v!r}")


def key(k: str) -> str:
    """A key, bare where TOML allows it, else quoted."""
    return k if _BARE_KEY.fullmatch(k) else value(k)


def _is_table_array(v: Any) -> bool:
    return isinstance(v, list | tuple) and bool(v) and all(isinstance(x, Mapping) for x in v)


def _comment_lines(text: str) -> list[str]:
    return [f"# {line}".rstrip() for line in text.splitlines()]


def _pairs(out: list[str], path: KeyPath, items, comments: Mapping[KeyPath, str]) -> None:
    for k, v in items:
        line = f"{key(k)} = {value(v)}"
        if note := comments.get((*path, k)):
            if "\n" in note:
                raise ValueError(f"a comment at the end of a line is one line: {note!r}")
            line += f"  # {note}"
        out.append(line)


def _header(out: list[str], path: KeyPath, name: str, comments: Mapping[KeyPath, str]) -> None:
    out.append("")
    out += _comment_lines(comments.get(path, ""))
    out.append(name)


def _table(out: list[str], path: KeyPath, table: Mapping[str, Any], comments) -> None:
    """A table's keys, then its sub-tables, then its arrays of tables (TOML's order: a key
    after a header would belong to that header's table)."""
    subtables = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    arrays = {k: v for k, v in table.items() if _is_table_array(v)}
    _pairs(out, path, [(k, v) for k, v in table.items() if k not in subtables | arrays], comments)
    for k, sub in subtables.items():
        _header(out, (*path, k), f"[{_dotted((*path, k))}]", comments)
        _table(out, (*path, k), sub, comments)
    for k, elements in arrays.items():
        for i, element in enumerate(elements):
            _header(out, (*path, k, i), f"[[{_dotted((*path, k))}]]", comments)
            _pairs(out, (*path, k, i), element.items(), comments)


def _dotted(path: KeyPath) -> str:
    return ".".join(key(str(k)) for k in path)
