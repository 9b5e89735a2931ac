"""``Timing``: a speed claim, decided over the fresh processes of the serial timing phase
(``normlab.lab.study.run.timing``) instead of seeds."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from normlab.lab.study.decide.rules_protocol import ARM, DELTA, OnePartRule
from normlab.lab.study.decide.stats import Context, Results
from normlab.lab.verdict import EXPECT, LEVEL, Verdict, decide, statistic

# what -> what it is (the serial timing phase, ``normlab.lab.study.run.timing``)
TIMINGS = {
    "norm_ms": "the norms alone at the models' shapes, forward+backward, ms per step",
    "step_ms": "a whole training step, ms",
    "torch_norm_ms": "PyTorch's own F.rms_norm/F.layer_norm at the same shapes, ms per step",
}


@dataclass(frozen=True)
class Timing(OnePartRule):
    """Per unit of the serial timing phase: ``v = 1 − ms[fast] / ms[slow]`` of ``what``
    (``"norm_ms"``: the norms alone at the models' shapes with normlab's kernels, forward+backward
    per step; ``"torch_norm_ms"``: the same with PyTorch's own ops; ``"step_ms"``: a whole
    training step), the fraction of the time ``fast`` saves. The unit is a fresh process (the
    median of its rounds) where the timings say which process timed each round, else a round."""

    fast: str = field(metadata=ARM)
    slow: str = field(metadata=ARM)
    delta: float = field(metadata=DELTA)
    what: str = field(default="norm_ms", metadata={"spec": "choice", "choices": TIMINGS})
    processes: int = 8  # fresh processes of the timing phase: the unit of the interval
    seeds: ClassVar[int] = 1  # the arms are timed, not trained: one run each builds them
    rate: ClassVar[str] = "timed"  # the learning rate does not enter a time per step
    timed: ClassVar[bool] = True
    trim: ClassVar[float] = 0.2  # a stalled process moves neither the estimate nor the interval
    unit: ClassVar[str] = "timing processes"

    def __post_init__(self) -> None:
        if self.what not in TIMINGS:
            raise ValueError(f"what must be one of {tuple(TIMINGS)}, got {self.what!r}")
        if not self.delta >= 0:
            raise ValueError(f"delta must be >= 0, got {self.delta}")
        if type(self.processes) is not int or self.processes < 1:  # a bool is not a count
            raise ValueError(f"processes must be an int >= 1, got {self.processes!r}")

    def arms(self) -> tuple[str, ...]:
        return (self.fast, self.slow)

    def describe(self) -> str:
        return (
            f"per fresh process of the serial timing phase (nothing else of the study running, "
            f"the processes one after the other, the arms interleaved in each), v = 1 − "
            f"{self.what}[{self.fast}] / {self.what}[{self.slow}], the median of the process's "
            f"rounds; 20 % trimmed mean over processes with Yuen's {LEVEL:.0%} interval, so the "
            f"interval covers run-to-run variation and a stalled process moves neither "
            f"(a study timed in one process: over its rounds); {EXPECT['>0']} "
            f"(δ = {self.delta:.3g})."
        )

    def subject(self) -> str:
        return f"{self.fast} vs {self.slow}"

    def formula_words(self) -> str:
        return f"1 − {self.what}[{self.fast}] / {self.what}[{self.slow}] per timing process"

    def measure_words(self) -> list[str]:
        return [f"{self.what}: {TIMINGS[self.what]}"]

    def statistic_words(self) -> str:
        return (
            f" Over fresh processes (each the median of its rounds): the 20 % trimmed mean "
            f"with Yuen's {LEVEL:.0%} interval."
        )

    def sizes(self, mde: float, delta: float) -> tuple[str, str]:
        return f"{mde:.1%}", f"{delta:.0%}"  # a fraction of the time: in per cent

    def result_words(self, est: Any) -> str | None:
        if est is None or est.effect is None:
            return None
        what = TIMINGS[self.what].split(",")[0].split(" at ")[0]
        pct = lambda x: f"{x:+.1%}".replace("-", "−")  # noqa: E731
        return (
            f"{self.fast} saves {pct(est.effect)} [{pct(est.lo)}, {pct(est.hi)}] of "
            f"{self.slow}'s time ({what}), {est.n} timing units"
        )

    def units(self, timings: Mapping[str, Any]) -> list[float]:
        """``v`` per process (the median of its rounds), or per round where the timings do not
        say which process timed it."""
        a, b = (timings.get(arm, {}).get(self.what) or [] for arm in self.arms())
        procs = timings.get(self.fast, {}).get("process") or range(len(a))  # none: each round
        by: dict[int, list[float]] = {}
        for p, x, y in zip(procs, a, b, strict=False):
            if y > 0:
                by.setdefault(p, []).append(1 - x / y)
        return [statistics.median(xs) for _, xs in sorted(by.items())]

    def medians(self, timings: Mapping[str, Any]) -> dict[str, float | None]:
        """Per arm the median round of ``what``, of the other norm timing and of the step, and
        the norms' share of a training step."""
        beside = "norm_ms" if self.what == "torch_norm_ms" else "torch_norm_ms"
        means: dict[str, float | None] = {}
        for arm in self.arms():
            t = timings.get(arm, {})
            for key in (self.what, beside, "step_ms"):
                xs = t.get(key) or []
                means[f"{key}[{arm}]"] = statistics.median(xs) if xs else None
            if t.get("norm_ms") and t.get("step_ms"):  # the norms' share of a training step
                means[f"norm share[{arm}]"] = statistics.median(
                    n / s for n, s in zip(t["norm_ms"], t["step_ms"], strict=True)
                )
        return means

    def decide(self, results: Results, ctx: Context) -> Verdict:
        est = statistic(self.trim).estimate(self.units(ctx.timings), ctx.interval_level)
        status, why = decide(">0", est, self.delta)
        return Verdict(status, why, est, means=self.medians(ctx.timings))
