"""The value checks a study spec's loaders share (``spec.py``, ``spec_claims.py``): a mistake is
one ``SpecError`` whose message is ``FILE: key.path: what was expected``; a key is shown escaped
and a value as TOML writes it, so a message is one line whatever the spec holds."""

from __future__ import annotations

import json
import math
import re
import types
import typing
from typing import Any

from normlab.lab.errors import UsageError


class SpecError(UsageError, ValueError):
    """A study spec that cannot run; the message is ``FILE: key.path: what was expected``."""


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,100}")


def _at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not _PLAIN_KEY.fullmatch(key):  # a quoted TOML key: escaped, so a message is one line
        key = json.dumps(key if len(key) <= 60 else key[:60] + "...")
    return f"{path}.{key}" if path else key


def _show(v: Any) -> str:
    """A value as it is written in TOML, for messages."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):  # escaped: a message is one line, whatever the value holds
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, list):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    return repr(v)


class _Expected(Exception):
    """A value of the wrong type; the message says what was expected."""


def _coerce(hint: Any, v: Any) -> Any:
    """``v`` (as TOML read it) as a value of the field type ``hint``, or ``_Expected``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):  # X | None: TOML has no null, so X
        (inner,) = (a for a in args if a is not type(None))
        return _coerce(inner, v)
    if origin is tuple:
        if args[-1] is Ellipsis:
            if not isinstance(v, list):
                raise _Expected(f"a list of {_name(args[0])}s")
            return tuple(_coerce(args[0], x) for x in v)
        if not isinstance(v, list) or len(v) != len(args):
            raise _Expected(f"a list of {len(args)} {_name(args[0])}s")
        return tuple(_coerce(a, x) for a, x in zip(args, v, strict=True))
    if hint is bool:
        if not isinstance(v, bool):
            raise _Expected("true or false")
        return v
    if hint is int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise _Expected("an int")
        return v
    if hint is float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise _Expected("a number")
        return float(v)  # 1 and 1.0 must give the same config, and the same run key
    if hint is str:
        if not isinstance(v, str):
            raise _Expected("a string")
        return v
    raise TypeError(f"no TOML form for the field type {hint!r}")


def _name(hint: Any) -> str:
    return {int: "int", float: "number", str: "string", bool: "bool"}.get(hint, str(hint))
