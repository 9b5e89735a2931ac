"""A document's shape, to its leaves: each value a file gives the lab is checked against the
shape its readers take before any of them reads it (docs/refusals.md), so a tampered file is
one line naming the key, never a traceback or a string iterated character by character.

A schema: ``str`` or ``bool`` (that type), :class:`Num` or :class:`Int` (a bounded number),
:class:`Choice` (one of some values), :class:`Maybe` (null or a schema), :class:`Either` (one
of some schemas), ``[S]`` (a list of S), a dict (an object: ``"key": S`` required, ``"key?": S``
absent or null, ``"*": S`` every other key; without ``"*"`` other keys are left as they are), or
:data:`ANY` (what :func:`normlab.lab.kit.reading.check_tree` let through).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from normlab.lab.kit.reading import ReadError, key_path, shown

ANY = object()


@dataclass(frozen=True)
class Num:
    """A finite number (an int or a float, not a bool) in [``low``, ``high``]."""

    low: float = -math.inf
    high: float = math.inf

    def ok(self, v: Any) -> bool:
        real = isinstance(v, int | float) and not isinstance(v, bool)
        return real and math.isfinite(v) and self.low <= v <= self.high

    def __str__(self) -> str:
        bounds = [f">= {self.low:g}"] * (self.low > -math.inf) + [f"<= {self.high:g}"] * (
            self.high < math.inf
        )
        return "a number" + (f" {' and '.join(bounds)}" if bounds else "")


@dataclass(frozen=True)
class Int(Num):
    """An int (not a bool) in [``low``, ``high``]."""

    def ok(self, v: Any) -> bool:
        return isinstance(v, int) and super().ok(v)

    def __str__(self) -> str:
        return "an int" + super().__str__().removeprefix("a number")


@dataclass(frozen=True)
class Choice:
    values: tuple

    def __str__(self) -> str:
        return "one of " + ", ".join(json.dumps(v) for v in self.values)


@dataclass(frozen=True)
class Maybe:
    schema: Any


class Either:
    """A value of one of ``schemas``."""

    def __init__(self, *schemas: Any):
        self.schemas = schemas

    def __str__(self) -> str:
        return " or ".join(_what(s) for s in self.schemas)


# A JSON scalar: a finite number, null, a string or true/false.
SCALAR = Either(Maybe(Num()), str, bool)


def _what(schema: Any) -> str:
    if isinstance(schema, Maybe):
        return f"{_what(schema.schema)} or null"
    if isinstance(schema, dict):
        return "a JSON object"
    if isinstance(schema, list):
        return f"a list of {_what(schema[0]).removeprefix('a ').removeprefix('an ')}s"
    return {str: "a string", bool: "true or false"}.get(schema) or str(schema)


def check_shape(doc: Any, schema: Any, source: str) -> Any:
    """``doc`` (parsed JSON) if it has ``schema``'s shape to its leaves (a file's values are
    checked before anything reads them: a string where a list belongs is not iterated
    character by character); else a :class:`ReadError` naming ``source`` and the key."""
    _shape(doc, schema, source, "")
    return doc


def _shape(v: Any, schema: Any, source: str, at: str) -> None:
    if schema is ANY:
        return
    if isinstance(schema, Maybe):
        if v is not None:
            _shape(v, schema.schema, source, at)
        return
    if isinstance(schema, Either):
        for s in schema.schemas:
            try:
                return _shape(v, s, source, at)
            except ReadError:
                continue
        _wrong(source, at, str(schema), v)
    if isinstance(schema, dict):
        if not isinstance(v, dict):
            _wrong(source, at, "a JSON object", v)
        for key, sub in schema.items():
            name, optional = key.removesuffix("?"), key.endswith("?")
            if key == "*":
                for k, x in v.items():
                    if k not in schema and f"{k}?" not in schema:
                        _shape(x, sub, source, key_path(at, k))
            elif name not in v or (optional and v[name] is None):
                if not optional:
                    raise ReadError(f"{source}: {key_path(at, name)}: missing")
            else:
                _shape(v[name], sub, source, key_path(at, name))
    elif isinstance(schema, list):
        if not isinstance(v, list):
            _wrong(source, at, "a list", v)
        for i, x in enumerate(v):
            _shape(x, schema[0], source, f"{at}[{i}]")
    elif isinstance(schema, Choice):
        if not any(v == c and type(v) is type(c) for c in schema.values):
            _wrong(source, at, str(schema), v)
    elif isinstance(schema, Num):
        if not schema.ok(v):
            _wrong(source, at, str(schema), v)
    elif not isinstance(v, schema) or (schema is not bool and isinstance(v, bool)):
        _wrong(source, at, _what(schema), v)


def _wrong(source: str, at: str, expected: str, v: Any) -> None:
    big = isinstance(v, dict | list) and len(v) > 8  # not serialised whole for a message
    got = {dict: "an object", list: "a list"}[type(v)] if big else shown(v)
    raise ReadError(f"{source}: {at or 'the document'}: expected {expected}, got {got}")
