"""The rules a claim is decided by: ``RULES``, the one table of their kinds (a dataclass each).

Every rule has one shape, stated before the runs: **what it measures per seed** (a value ``v``,
paired across the arms it compares: seed ``i`` gives every arm the same data order and, where
the shapes agree, the same initial weights), then the statistic and the decision of
``normlab.lab.study.decide.stats``. A timing claim is the same contrast over interleaved timing
rounds of the serial phase instead of seeds.

A new kind of rule is a dataclass that follows ``rules_protocol.Rule``, in the module of its
family (``rules_contrast``, ``rules_timing``, ``rules_lr_sensitivity``, ``rules_compound``) or a
new one, and a row of ``RULES``: the spec loader builds it from its fields (a field's
``metadata["spec"]`` names how its TOML value is checked, see ``spec.claims``), and the report,
plots and pilot read it through the ``Rule`` protocol only: a kind says its own words
(``subject()``, ``formula_words()``, ...), ``OnePartRule`` holds what a kind need not say.
"""

from __future__ import annotations

from normlab.lab.study.decide.rules_compound import AllOf, AnyOf
from normlab.lab.study.decide.rules_contrast import Contrast, Fails, Trains
from normlab.lab.study.decide.rules_lr_sensitivity import LRSensitivity
from normlab.lab.study.decide.rules_timing import Timing

# The kinds a spec's ``rule = "..."`` names, in the order its messages list them.
RULES: dict[str, type] = {
    "contrast": Contrast,
    "all_of": AllOf,
    "any_of": AnyOf,
    "fails": Fails,
    "trains": Trains,
    "timing": Timing,
    "lr_sensitivity": LRSensitivity,
}


def control_kinds() -> list[str]:
    """The kinds of ``RULES`` a control may be stated in."""
    return [k for k, r in RULES.items() if getattr(r, "CONTROL", False)]
