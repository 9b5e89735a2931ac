"""``RunResult``: what one training run produced, kept strict JSON (no NaN or Inf)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunResult:
    """What a run produced. Columns of ``history`` are per step; all floats are finite or None."""

    config: dict[str, Any]
    status: str = "ok"  # "ok" | "diverged"
    diverged_step: int | None = None
    stopped_step: int | None = None  # where the stall rule (TrainConfig.stall_step) stopped it
    reason: str = ""
    history: dict[str, list] = field(default_factory=dict)
    evals: list[dict[str, Any]] = field(default_factory=list)
    probes: dict[str, dict] = field(default_factory=dict)  # str(step) -> Probes.collect()
    summary: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return finite(dataclasses.asdict(self))


def finite(x: Any) -> Any:
    """NaN/Inf -> None, so results stay strict JSON."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    return x
