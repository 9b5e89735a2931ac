"""What a study spec's loaders share (``spec.py``, ``spec_claims.py``): a mistake is one
``SpecError`` whose message is ``FILE: key.path: what was expected``; a key is shown escaped and
a value as TOML writes it, so a message is one line whatever the spec holds. A value is typed by
the lab's one coercer of config values, ``normlab.lab.train.fields.coerce``."""

from __future__ import annotations

import json
import re
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
