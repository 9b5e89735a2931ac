"""What a study is made of: arms (``Run``: a name and a ``TrainConfig``), the claims over them
(``normlab.lab.study.claims``), together a ``Preset``, and the training runs it expands to
(``Task``: an arm under one seed). Presets are written as spec files (``spec.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from normlab.lab.study.claims import Claim
    from normlab.lab.train.trainer import TrainConfig


SEED_STRIDE = 10_000  # run seed = SEED_STRIDE * S + i: studies with different --seed share none


@dataclass(frozen=True)
class Run:
    """An arm of the study: one recipe, trained once per seed its claims ask for."""

    name: str
    config: TrainConfig


@dataclass(frozen=True)
class Task:
    """One training run: an arm under one seed."""

    arm: str
    index: int  # the seed's index within the arm (what pairs runs across arms)
    config: TrainConfig

    @property
    def label(self) -> str:
        return f"{self.arm}#{self.index}"


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    runs: tuple[Run, ...]
    claims: tuple[Claim, ...]

    def __post_init__(self) -> None:
        names = [r.name for r in self.runs]
        if len(set(names)) != len(names):
            raise ValueError(f"preset {self.name}: duplicate run names")
        for c in self.claims:
            missing = set(c.arms) - set(names)
            if missing:
                raise ValueError(f"claim {c.name!r} needs runs not in the preset: {missing}")

    def seeds(self, arm: str) -> int:
        """How many seeds ``arm`` is trained under: what its most demanding claim asks for."""
        return max((c.seeds for c in self.claims if arm in c.arms and not c.timed), default=1)

    def tasks(self, seed_block: int = 0) -> list[Task]:
        """Every run of the study: each arm under seeds ``SEED_STRIDE * seed_block + i``."""
        base = SEED_STRIDE * seed_block
        return [
            Task(r.name, i, r.config.replace(seed=base + i))
            for r in self.runs
            for i in range(self.seeds(r.name))
        ]
