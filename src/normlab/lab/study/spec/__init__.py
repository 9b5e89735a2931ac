"""A spec file or built-in preset read into a ``Study`` (its arms, runs and claims)."""

from normlab.lab.study.spec.design import SEED_STRIDE, Run, Study
from normlab.lab.study.spec.parse import builtin_names, load_builtin, load_spec, parse_spec

__all__ = [
    "builtin_names",
    "load_builtin",
    "load_spec",
    "parse_spec",
    "Run",
    "SEED_STRIDE",
    "Study",
]
