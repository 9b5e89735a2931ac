"""What a study is made of: arms (``Arm``: a name and a ``TrainConfig``), the claims over them
(``normlab.lab.study.decide.claims``), together a ``Study``, and the training runs it expands to
(``Run``: an arm under one seed). Studies are written as spec files (``parse.py``); the built-in
presets are spec files too."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from normlab.lab.verdict import statistic
from normlab.lab.verdict.sequential import Design

if TYPE_CHECKING:
    from normlab.lab.study.decide import Claim
    from normlab.lab.train.trainer import TrainConfig


SEED_STRIDE = 10_000  # run seed = SEED_STRIDE * S + i: studies with different --seed share none


@dataclass(frozen=True)
class Arm:
    """An arm of the study: one recipe, trained once per seed its claims ask for."""

    name: str
    config: TrainConfig


@dataclass(frozen=True)
class Run:
    """One training run: an arm under one seed."""

    arm: str
    index: int  # the seed's index within the arm (what pairs runs across arms)
    config: TrainConfig

    @property
    def label(self) -> str:
        return f"{self.arm}#{self.index}"


@dataclass(frozen=True)
class Study:
    """A study: its arms and the claims decided over them (a built-in preset or a user's spec)."""

    name: str
    description: str
    arms: tuple[Arm, ...]
    claims: tuple[Claim, ...]
    overrides: tuple[str, ...] = ()
    """The ``KEY=VALUE`` overrides applied to its spec document (``normlab study --set``)."""
    spec_text: str = field(default="", compare=False, repr=False)
    """The spec's text as it was read, before ``overrides``: with them, what rebuilds this study
    (``study.json`` stores both, so ``--redecide`` decides with the design that ran)."""
    sequential: Design | None = None
    """A group-sequential design (``[sequential]``): each seeded claim is looked at after every
    batch of seeds and stops once it decides; its ``seeds`` are then its cap (the worst case)."""
    left_out: tuple[str, ...] = ()
    """The extended claims its spec does not run (``extended = true`` runs them)."""

    def __post_init__(self) -> None:
        names = [a.name for a in self.arms]
        if len(set(names)) != len(names):
            raise ValueError(f"study {self.name}: duplicate arm names")
        for c in self.claims:
            if missing := set(c.arms) - set(names):
                raise ValueError(f"claim {c.name!r} needs arms not in the study: {missing}")

    def seeds(self, arm: str) -> int:
        """How many seeds ``arm`` is trained under: what its most demanding claim asks for (under
        a sequential design at most: ``normlab.lab.study.decide.looks`` says how many)."""
        return max((c.seeds for c in self.claims if arm in c.arms and not c.timed), default=1)

    def without_interval(self, claim: Claim) -> bool:
        """Whether some part of ``claim`` has too few seeds for any interval of its statistic
        (``Statistic.min_seeds``): not testable here whatever its runs show."""
        return any(
            not rule.timed
            and min(self.seeds(a) for a in rule.arms()) < statistic(rule.trim).min_seeds()
            for _, rule in claim.rule.parts()
        )

    def timing_phase(self) -> tuple[tuple[str, ...], int]:
        """The arms the serial timing phase times (its timing claims'), and the fresh processes
        it takes: the most any of them asks for (no timing claim: none, 0)."""
        timed = [c for c in self.claims if c.timed]
        arms = tuple(dict.fromkeys(a for c in timed for a in c.arms))
        return arms, max((c.rule.processes for c in timed), default=0)

    def runs(self, seed_block: int = 0, need: Mapping[str, int] | None = None) -> list[Run]:
        """Every run of the study: each arm under seeds ``SEED_STRIDE * seed_block + i``, for its
        first ``need[arm]`` seeds (a sequential study's looks so far) or all of them."""
        base = SEED_STRIDE * seed_block
        return [
            Run(a.name, i, a.config.replace(seed=base + i))
            for a in self.arms
            for i in range(self.seeds(a.name) if need is None else need[a.name])
        ]
