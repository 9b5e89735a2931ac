"""The config fields as the lab reads them (``TrainConfig``'s and ``TransformerConfig``'s): the
fields a study spec may not set and why, the fields ``normlab train`` has no option for, and the
one coercer of a field's value, from a spec's TOML or from a word of the command line, to the
field's type. The library's configs know none of this; everything else about a field is its
type, default and help text (``normlab.models.config.setting``)."""

from __future__ import annotations

import math
import types
import typing
from typing import Any

from normlab.lab.kit.reading import INT_MAX, bounded_int, finite_float

# field -> why a spec may not set it
NOT_IN_SPEC = {
    "vocab_size": "the data's vocabulary (the lab's tokens are bytes)",
    "seed": "the study sets each run's seed (normlab study --seed)",
    "threads": "the study sets the threads (normlab study --threads, --workers)",
}
# The fields normlab train has no option for: the model's whole config, the data's vocabulary.
NO_OPTION = ("model", "vocab_size")


class Expected(ValueError):
    """A value not of its field's type; the message says what was expected ("an int")."""


def coerce(hint: Any, v: Any, *, text: bool = False) -> Any:
    """``v`` as a value of the field type ``hint``, else :class:`Expected`: ``v`` as TOML read
    it, or with ``text`` a word of the command line (a number read by the lab's bounded parsers,
    whose ``ValueError`` says what was expected and what came). A ``Literal`` field's value is
    only typed here: the config's ``check_fields`` checks it against the choices, once for
    both."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):  # X | None: TOML has no null, "none" does
        (inner,) = (a for a in args if a is not type(None))
        return None if text and v.lower() == "none" else coerce(inner, v, text=text)
    if origin is typing.Literal:
        return coerce(type(args[0]), v, text=text)
    if origin is tuple:  # TOML only: argparse gives a tuple's items one by one (nargs)
        if args[-1] is Ellipsis:
            if not isinstance(v, list):
                raise Expected(f"a list of {_name(args[0])}s")
            return tuple(coerce(args[0], x) for x in v)
        if not isinstance(v, list) or len(v) != len(args):
            raise Expected(f"a list of {len(args)} {_name(args[0])}s")
        return tuple(coerce(a, x) for a, x in zip(args, v, strict=True))
    if text and hint is not str:
        parse = {int: bounded_int(-INT_MAX - 1), float: finite_float}.get(hint)
        v = parse(v) if parse else {"true": True, "false": False}.get(v.lower(), v)
    if hint not in _SCALARS:
        raise TypeError(f"no TOML form for the field type {hint!r}")
    expected, ok = _SCALARS[hint]
    if not ok(v):
        raise Expected(expected)
    return float(v) if hint is float else v  # 1 and 1.0 must give the same config, and run key


# A scalar field type -> what its value must be, and the check of a value.
_SCALARS = {
    bool: ("true or false", lambda v: isinstance(v, bool)),
    int: ("an int", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    float: (
        "a number",
        lambda v: isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v),
    ),
    str: ("a string", lambda v: isinstance(v, str)),
}


def _name(hint: Any) -> str:
    return {int: "int", float: "number", str: "string", bool: "bool"}.get(hint, str(hint))
