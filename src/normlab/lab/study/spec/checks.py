"""The value checks a spec's loaders share: each fails with one ``SpecError`` whose message is
``FILE: key.path: what was expected``; a key is shown escaped (``key_at``) and a value as TOML
writes it (``show``), so a message is one line whatever the spec holds."""

from __future__ import annotations

import difflib
import json
import re
import typing
from typing import Any

from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.limits import MAX_SEEDS
from normlab.lab.train.fields import Expected, coerce


class SpecError(UsageError, ValueError):
    """A study spec that cannot run; the message is ``FILE: key.path: what was expected``."""


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,100}")


def key_at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not _PLAIN_KEY.fullmatch(key):  # a quoted TOML key: escaped, so a message is one line
        key = json.dumps(key if len(key) <= 60 else key[:60] + "...")
    return f"{path}.{key}" if path else key


def did_you_mean(v: Any, known: typing.Iterable[str], otherwise: str = "") -> str:
    """The hint "did you mean 'x'?" for the known name closest to ``v``, else ``otherwise``."""
    close = difflib.get_close_matches(str(v), list(known), n=1)
    return f"did you mean {close[0]!r}?" if close else otherwise


def show(v: Any) -> str:
    """A value as it is written in TOML, for messages."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):  # escaped: a message is one line, whatever the value holds
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, list):
        return "[" + ", ".join(show(x) for x in v) + "]"
    return repr(v)


class Checks:
    """The shapes of a spec's values (tables, keys, strings, numbers, config values), each
    failing at its key path in ``source``."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, msg: str) -> typing.NoReturn:
        raise SpecError(f"{self.source}: {path}: {msg}" if path else f"{self.source}: {msg}")

    def table(self, v: Any, path: str) -> dict:
        if not isinstance(v, dict):
            self.fail(path, f"expected a table, got {show(v)}")
        return v

    def tables(self, v: Any, path: str, toml: str) -> list[dict]:
        if not isinstance(v, list) or not v:
            self.fail(path, f"expected one or more {toml} tables")
        return [self.table(x, key_at(path, i)) for i, x in enumerate(v)]

    def keys(self, d: dict, path: str, allowed, required=(), *, misplaced=None) -> None:
        """``d`` has only ``allowed`` keys and every ``required`` one; ``misplaced(key, path,
        allowed)``, where ``d`` holds a config's fields, fails first on a key of the wrong
        table or one a spec cannot set."""
        for k in d:
            if misplaced:
                misplaced(k, path, allowed)
            if k not in allowed:
                hint = did_you_mean(k, allowed, "expected one of: " + ", ".join(allowed))
                self.fail(key_at(path, k), f"unknown key; {hint}")
        for k in required:
            if k not in d:
                self.fail(key_at(path, k), "missing (required)")

    def string(self, v: Any, path: str) -> str:
        if not isinstance(v, str) or not v:
            self.fail(path, f"expected a non-empty string, got {show(v)}")
        return v

    def coerced(self, hint: Any, v: Any, path: str) -> Any:
        """``v`` as a config field of type ``hint`` takes it (``coerce``)."""
        try:
            return coerce(hint, v)
        except Expected as e:
            self.fail(path, f"expected {e}, got {show(v)}")

    def plain(self, d: dict, key: str, path: str) -> str:
        """``d[key]``, a string ("" where it is not set)."""
        v = d.get(key, "")
        if not isinstance(v, str):
            self.fail(key_at(path, key), f"expected a string, got {show(v)}")
        return v

    def number(self, v: Any, path: str, *, low: float | None = None) -> float:
        x = self.coerced(float, v, path)
        if low is not None and x < low:
            self.fail(path, f"expected a number >= {low:g}, got {show(v)}")
        return x

    def flag(self, d: dict, key: str, path: str) -> bool:
        """``d[key]``, a boolean (false where it is not set)."""
        v = d.get(key, False)
        if not isinstance(v, bool):
            self.fail(key_at(path, key), f"expected true or false, got {show(v)}")
        return v

    def count(self, v: Any, path: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            self.fail(path, f"expected an int >= 1, got {show(v)}")
        if v > MAX_SEEDS:
            self.fail(path, f"{v:,} is more than the {MAX_SEEDS:,} the lab allows")
        return v
