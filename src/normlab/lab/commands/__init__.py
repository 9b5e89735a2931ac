"""One module per ``normlab`` command, each only ``add_arguments(parser)`` and
``run(args) -> int``: parsed arguments become an options dataclass, the engine runs, the result
becomes an exit status. This package and ``normlab.lab.cli`` are the only places that import
``argparse``; engines never import them."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from normlab.lab.kit.reading import (
    bounded_int,
    finite_float,
    non_negative_int,
    path_arg,
    positive_int,
)
from normlab.lab.kit.threads import MAX_THREADS


def arg_type(check: Callable[[str], Any], name: str) -> Callable[[str], Any]:
    """``check`` (a validator of ``normlab.lab.kit.reading`` raising ``ValueError``) as an argparse
    type, whose message argparse prints as it is; ``name`` is what argparse calls the type."""

    def parse(text: str) -> Any:
        try:
            return check(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = name
    return parse


POSITIVE_INT = arg_type(positive_int, "an int >= 1")
NON_NEGATIVE_INT = arg_type(non_negative_int, "an int >= 0")
FLOAT = arg_type(finite_float, "a number")  # nan, inf and 1e400 are refused
# A study's seed block S: its runs' seeds 10000*S + i must stay in int64.
SEED_BLOCK = arg_type(bounded_int(0, 10**14), "an int in [0, 10**14]")
# Every path option: "" (a script's unset variable) and control characters are refused.
PATH = arg_type(path_arg, "a path")


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an int in [``low``, ``high``]."""
    return arg_type(bounded_int(low, high), f"an int in [{low}, {high}]")


# Every --threads option: torch threads (0: torch's default), bounded as set_threads bounds them.
THREADS = int_in(0, MAX_THREADS)

Options = TypeVar("Options")


def options_of(cls: type[Options], args: argparse.Namespace, **given: Any) -> Options:
    """The options dataclass ``cls`` of a command: each field the parsed option of its name, but
    those ``given``."""
    names = [f.name for f in dataclasses.fields(cls) if f.name not in given]
    return cls(**{name: getattr(args, name) for name in names}, **given)
