"""What a study's rules share besides the verdict engine (``normlab.lab.verdict``, which holds
the statistics, the rule, Holm and a claim's ``Verdict``): the results they read and the context
a rule is decided in.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from normlab.lab.train.result import RunResult
from normlab.lab.verdict import LEVEL
from normlab.lab.verdict.sequential import Look

# arm -> seed index -> the run's result (rebuilt where read: ``run.store.results_of``)
Results = Mapping[str, Mapping[int, RunResult]]

# --------------------------------------------------------------------------------------------
# the context of a decision


@dataclass(frozen=True)
class Context:
    """What a rule is decided with besides the runs."""

    plateau_h: float | None = None  # H: Corpus.unigram_val_xent(), for the rules that read it
    timings: Mapping[str, Any] = field(default_factory=dict)  # arm -> what -> rounds
    level: float = LEVEL  # of every interval
    nominal_level: float | None = None  # the controls' level, under a Holm-corrected part
    look: Look | None = None  # a look of a sequential design: its intervals are repeated ones

    @property
    def interval_level(self) -> float:
        """The level a rule's interval is taken at: ``level`` itself, or under a sequential
        design this look's nominal level for repeated intervals that cover together at
        ``level`` (``normlab.lab.verdict.sequential``)."""
        return self.level if self.look is None else self.look.level(self.level)

    def at(self, level: float) -> Context:
        return dataclasses.replace(self, level=level)

    def nominal(self) -> Context:
        return self.at(self.level if self.nominal_level is None else self.nominal_level)
