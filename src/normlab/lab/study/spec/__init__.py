"""A spec file or built-in preset read into a ``Study`` (its arms, runs and claims)."""

from normlab.lab.study.spec.design import SEED_STRIDE, Run, Study
from normlab.lab.study.spec.parse import (
    SpecError,
    builtin_names,
    builtin_text,
    load_builtin,
    load_spec,
    parse_spec,
)

__all__ = [
    "builtin_names",
    "builtin_text",
    "load_builtin",
    "load_spec",
    "parse_spec",
    "Run",
    "SEED_STRIDE",
    "SpecError",
    "Study",
]
