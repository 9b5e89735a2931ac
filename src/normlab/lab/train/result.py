"""``RunResult``: what one training run produced, kept strict JSON (no NaN or Inf).

It crosses a process (a worker, a Ray task) and a file (``results.jsonl``) as ``to_dict``'s
dict; the driver rebuilds it with ``from_dict`` where it receives or reads one, so everything
after reads fields, never keys."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
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

    @classmethod
    def from_dict(cls, d: Any, where: str) -> RunResult:
        """The result ``to_dict`` wrote; a field missing or of the wrong JSON type is a
        ``ValueError`` naming ``where`` (the file or the run) and the field."""
        if (problem := result_problem(d)) is not None:
            raise ValueError(f"{where}: {problem}")
        return cls(**{f.name: d[f.name] for f in dataclasses.fields(cls) if f.name in d})


# Each field's JSON type; the steps may be absent (a result written before they were added).
_TYPES = dict(
    config=dict, status=str, reason=str, history=dict, evals=list, probes=dict, summary=dict
)
_STEPS = ("diverged_step", "stopped_step")


def result_problem(d: Any) -> str | None:
    """What keeps ``d`` (parsed JSON) from being a ``RunResult.to_dict()``, or None."""
    if not isinstance(d, Mapping):
        return "result: expected a JSON object"
    for name, kind in _TYPES.items():
        if not isinstance(d.get(name), kind):
            return f"result.{name}: expected a JSON {'object' if kind is dict else kind.__name__}"
    for name in _STEPS:
        if isinstance(d.get(name), bool) or not isinstance(d.get(name), int | None):
            return f"result.{name}: expected an int or null"
    return None


def finite(x: Any) -> Any:
    """NaN/Inf -> None, so results stay strict JSON."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [finite(v) for v in x]
    return x
