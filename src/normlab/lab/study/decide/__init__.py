"""Claims, their rules (``RULES``, one table of kinds) and the measures they read, decided
through the verdict engine."""

from normlab.lab.study.decide.claims import Claim, by_design
from normlab.lab.study.decide.looks import decide_all
from normlab.lab.study.decide.measure_needs import unmet
from normlab.lab.study.decide.measures import H_TEXT, MEASURES
from normlab.lab.study.decide.rules import RULES, control_kinds
from normlab.lab.study.decide.rules_compound import AnyOf, Controlled
from normlab.lab.study.decide.rules_contrast import Contrast
from normlab.lab.study.decide.rules_protocol import compound_parts
from normlab.lab.study.decide.stats import Context, Results
from normlab.lab.study.decide.sweeps import sweep_name

__all__ = [
    "AnyOf",
    "by_design",
    "Claim",
    "compound_parts",
    "Context",
    "Contrast",
    "control_kinds",
    "Controlled",
    "decide_all",
    "H_TEXT",
    "MEASURES",
    "Results",
    "RULES",
    "sweep_name",
    "unmet",
]
