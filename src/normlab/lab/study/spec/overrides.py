"""``normlab study --set KEY=VALUE``: a value of a spec's document changed before it is
checked (``parse.parse_spec`` applies them)."""

from __future__ import annotations

import re
import typing
from typing import Any

from normlab.lab.kit.reading import ReadError, check_strings, check_tree, printable, tomllib
from normlab.lab.study.spec.checks import SpecError, key_at

_SEGMENT = re.compile(r"([A-Za-z0-9_-]+)((?:\[\d+\])*)")


def parse_override(text: str, source: str = "--set") -> tuple[list[str | int], Any]:
    """``KEY=VALUE`` as its path and value. ``KEY`` is a dotted path into the spec document
    (``base.steps``, ``base.model.dim``, ``arms[1].lr`` or ``arms.1.lr``); ``VALUE`` a TOML
    value (``50``, ``1e-3``, ``true``, ``[0.9, 0.95]``, ``"pre"``), else the text as a string
    (``rmsnorm``)."""
    at = f"{source}: --set {printable(text)}"
    key, eq, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not eq or not key:
        raise SpecError(f"{at}: expected KEY=VALUE, e.g. base.steps=50")
    path: list[str | int] = []
    for part in key.split("."):
        m = _SEGMENT.fullmatch(part)
        if m is None:
            raise SpecError(
                f"{at}: {printable(part)!r} is not a key; expected a dotted path like "
                "base.model.dim or arms[0].lr"
            )
        name, indices = m.groups()
        path.append(int(name) if name.isdigit() else name)
        path += [int(i) for i in re.findall(r"\d+", indices)]
    try:
        doc = tomllib.loads(f"v = {value}")
        parsed = doc["v"] if list(doc) == ["v"] else value
    except tomllib.TOMLDecodeError:
        parsed = value
    except RecursionError:  # 800 nested brackets: tomllib recurses once per level
        raise SpecError(f"{at}: nested too deep") from None
    try:
        check_strings(check_tree(parsed, f"{source}: --set {printable(key)}"), source)
    except ReadError as e:
        raise SpecError(str(e)) from None
    return path, parsed


def apply_overrides(doc: dict, overrides: typing.Sequence[str], source: str) -> None:
    """Set each ``KEY=VALUE`` of ``overrides`` in the spec document ``doc`` (in order; tables
    on the way are created), before the document is checked: a key the spec format does not
    know is then the same ``SpecError`` the file would give."""
    for text in overrides:
        path, value = parse_override(text, source)
        shown = f"--set {printable(text)}"
        node: Any = doc
        where = ""
        for i, key in enumerate(path):
            if isinstance(key, int):
                if not isinstance(node, list) or not 0 <= key < len(node):
                    what = f"a list of {len(node)}" if isinstance(node, list) else "not a list"
                    raise SpecError(f"{source}: {where or 'the spec'}: {shown}: {what}")
            elif not isinstance(node, dict):
                raise SpecError(f"{source}: {where}: {shown}: {where} is not a table")
            if i == len(path) - 1:
                node[key] = value
            else:
                node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
            where = key_at(where, key)
