"""Claims are data: a statement, where it comes from, the rule that decides it, and its plots.

Each rule says *before* the runs what it will look at and which numbers make the claim hold,
not hold, or stay inconclusive; ``decide`` only applies it. A rule names the runs it needs, so
adding a claim to a preset never touches the runner. Results are the dicts of
``RunResult.to_dict()``; a missing or diverged run is handled by each rule, never a crash.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

HOLDS, FAILS, UNSURE = "holds", "does not hold", "inconclusive"

Results = Mapping[str, dict[str, Any]]


@dataclass(frozen=True)
class Verdict:
    status: str  # HOLDS | FAILS | UNSURE
    numbers: dict[str, float | str | None]
    why: str


def metric(res: dict[str, Any] | None, name: str) -> float | None:
    """A number from a run: a summary field (``final_val_loss``, ``step_ms``, ``norm_ms``, …).
    ``None`` when the run is missing, diverged or lacks it."""
    if res is None or res.get("status") != "ok":
        return None
    v = res.get("summary", {}).get(name)
    return v if isinstance(v, int | float) and math.isfinite(v) else None


def grad_profile(res: dict[str, Any] | None, matrix: str | None, step: int = 0) -> list[float]:
    """Per-block gradient norms from the probe at ``step`` (a matrix, or whole blocks)."""
    probe = (res or {}).get("probes", {}).get(str(step)) or {}
    if matrix is None:
        prof = probe.get("grad_norm_block") or []
    else:
        prof = (probe.get("grad_norm") or {}).get(matrix) or []
    return [float(v) for v in prof if v is not None]


def _ratio(prof: list[float]) -> float | None:
    return prof[-1] / prof[0] if len(prof) >= 2 and prof[0] > 0 else None


def _spread(prof: list[float]) -> float | None:
    return max(prof) / min(prof) if len(prof) >= 2 and min(prof) > 0 else None


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def _missing(results: Results, runs: tuple[str, ...]) -> Verdict | None:
    gone = [r for r in runs if r not in results]
    return Verdict(UNSURE, {}, f"runs missing: {', '.join(gone)}") if gone else None


@dataclass(frozen=True)
class GrowsTowardOutput:
    """The at-init gradient norm grows from the first block to the last (ratio > 1) at every
    depth, and the ratio grows with depth. ``runs`` are ordered by increasing depth."""

    runs: tuple[str, ...]
    matrix: str | None = None

    def needs(self) -> tuple[str, ...]:
        return self.runs

    def describe(self) -> str:
        what = f"‖∇{self.matrix}‖" if self.matrix else "the block's gradient norm"
        return (
            f"ratio = {what} of the last block / the first, probed at init, in "
            f"{', '.join(self.runs)}. "
            "Holds if ratio > 1 at every depth and the deepest ratio exceeds the shallowest; "
            "does not hold if ratio ≤ 1 at the deepest depth or the deepest ≤ the shallowest; "
            "otherwise inconclusive."
        )

    def decide(self, results: Results, ctx: dict) -> Verdict:
        if v := _missing(results, self.runs):
            return v
        ratios = [_ratio(grad_profile(results[r], self.matrix)) for r in self.runs]
        nums = {f"ratio[{r}]": _r(x) for r, x in zip(self.runs, ratios, strict=True)}
        if any(x is None for x in ratios):
            return Verdict(UNSURE, nums, "a probe is missing")
        if all(x > 1 for x in ratios) and ratios[-1] > ratios[0]:
            return Verdict(HOLDS, nums, "grows toward the output, more when deeper")
        if ratios[-1] <= 1 or ratios[-1] <= ratios[0]:
            return Verdict(FAILS, nums, "no growth toward the output at the deepest depth")
        return Verdict(UNSURE, nums, "grows when deep but not at every depth")


@dataclass(frozen=True)
class MoreEven:
    """At init, the per-block gradient norms of ``even[i]`` vary less (max/min over blocks) than
    those of ``uneven[i]``, pairwise (same depth)."""

    even: tuple[str, ...]
    uneven: tuple[str, ...]
    matrix: str | None = None

    def needs(self) -> tuple[str, ...]:
        return self.even + self.uneven

    def describe(self) -> str:
        pairs = ", ".join(f"{a} vs {b}" for a, b in zip(self.even, self.uneven, strict=True))
        return (
            "spread = max/min over blocks of the at-init gradient norm"
            f"{f' of {self.matrix}' if self.matrix else ''}; pairs {pairs}. Holds if the first "
            "of each pair has the smaller spread at every depth; does not hold if it has the "
            "larger one at every depth; otherwise inconclusive."
        )

    def decide(self, results: Results, ctx: dict) -> Verdict:
        if v := _missing(results, self.needs()):
            return v
        nums, wins = {}, []
        for a, b in zip(self.even, self.uneven, strict=True):
            sa, sb = (_spread(grad_profile(results[r], self.matrix)) for r in (a, b))
            nums[f"spread[{a}]"], nums[f"spread[{b}]"] = _r(sa), _r(sb)
            if sa is None or sb is None:
                return Verdict(UNSURE, nums, "a probe is missing")
            wins.append(sa < sb)
        if all(wins):
            return Verdict(HOLDS, nums, "more even at every depth")
        if not any(wins):
            return Verdict(FAILS, nums, "less even at every depth")
        return Verdict(UNSURE, nums, "more even at some depths only")


@dataclass(frozen=True)
class FailsWhereOthersTrain:
    """``fails`` fails while every run in ``trains`` trains; ``control`` (the same recipe at a
    small depth) must train, so the failure is the depth's doing.

    A run *fails* if it diverged or its final validation loss ≥ H − ``stall_margin``, where H is
    the corpus's unigram entropy (the loss of knowing only byte frequencies); it *trains* if its
    validation loss ≤ H − ``train_margin``.
    """

    fails: str
    trains: tuple[str, ...]
    control: str | None = None
    stall_margin: float = 0.05
    train_margin: float = 0.3

    def needs(self) -> tuple[str, ...]:
        return (self.fails, *self.trains) + ((self.control,) if self.control else ())

    def describe(self) -> str:
        ctl = f" and {self.control} trains (the same recipe, shallow)" if self.control else ""
        return (
            f"fails = diverged or final val loss ≥ H − {self.stall_margin}; trains = val loss "
            f"≤ H − {self.train_margin} (H: unigram entropy of the corpus). Holds if "
            f"{self.fails} fails while {', '.join(self.trains)} train{ctl}; does not hold if "
            f"{self.fails} trains; otherwise inconclusive."
        )

    def decide(self, results: Results, ctx: dict) -> Verdict:
        if v := _missing(results, self.needs()):
            return v
        h = ctx["unigram_entropy"]

        def state(run: str) -> str:
            res = results[run]
            val = metric(res, "final_val_loss")
            if res.get("status") == "diverged" or val is None or val >= h - self.stall_margin:
                return "fails"
            return "trains" if val <= h - self.train_margin else "between"

        nums: dict[str, Any] = {"H": _r(h)}
        for r in self.needs():
            res = results[r]
            nums[r] = (
                "diverged" if res.get("status") == "diverged" else _r(metric(res, "final_val_loss"))
            )
        states = {r: state(r) for r in self.needs()}
        if states[self.fails] == "trains":
            return Verdict(FAILS, nums, f"{self.fails} trains")
        others_ok = all(states[r] == "trains" for r in self.trains)
        control_ok = self.control is None or states[self.control] == "trains"
        if states[self.fails] == "fails" and others_ok and control_ok:
            return Verdict(HOLDS, nums, f"{self.fails} fails, the others train")
        bad = [r for r in self.needs()[1:] if states[r] != "trains"]
        return Verdict(UNSURE, nums, f"{self.fails} {states[self.fails]}; not training: {bad}")


@dataclass(frozen=True)
class Contrast:
    """``value = Σ coef · metric(run)`` over ``terms`` ``(coef, run, metric)``, compared with a
    threshold ``t = max(min_effect, 2 · noise)``, where noise = |Δ final val loss| between the
    two ``noise`` runs (the same recipe under two seeds).

    ``expect``: ``">0"`` holds if value ≥ t, does not hold if value ≤ 0, else inconclusive;
    ``"<0"`` mirrors it; ``"≈0"`` holds if |value| ≤ t, does not hold if |value| > 2t;
    ``"≠0"`` holds if |value| ≥ t, else does not hold. ``ratio=True`` compares
    ``metric(a) / metric(b) − 1`` of the two terms instead (for timings).
    """

    terms: tuple[tuple[float, str, str], ...]
    expect: str
    min_effect: float
    noise: tuple[str, str] | None = None
    ratio: bool = False
    extra: tuple[tuple[str, str], ...] = ()  # (run, metric) shown with the verdict

    def needs(self) -> tuple[str, ...]:
        runs = [r for _, r, _ in self.terms] + list(self.noise or ()) + [r for r, _ in self.extra]
        return tuple(dict.fromkeys(runs))

    def _formula(self) -> str:
        if self.ratio:
            (_, a, m), (_, b, _) = self.terms
            return f"{m}[{a}] / {m}[{b}] − 1"
        return " ".join(f"{'+' if c > 0 else '−'} {abs(c):g}·{m}[{r}]" for c, r, m in self.terms)

    def describe(self) -> str:
        t = f"t = max({self.min_effect:g}, 2·noise)" if self.noise else f"t = {self.min_effect:g}"
        rule = {
            ">0": "holds if value ≥ t; does not hold if value ≤ 0; otherwise inconclusive",
            "<0": "holds if value ≤ −t; does not hold if value ≥ 0; otherwise inconclusive",
            "≈0": "holds if |value| ≤ t; does not hold if |value| > 2t; otherwise inconclusive",
            "≠0": "holds if |value| ≥ t; otherwise does not hold",
        }[self.expect]
        noise = f" (noise: |Δ val loss| of {' vs '.join(self.noise)})" if self.noise else ""
        return f"value = {self._formula().lstrip('+ ')}; {t}{noise}; {rule}."

    def decide(self, results: Results, ctx: dict) -> Verdict:
        if v := _missing(results, self.needs()):
            return v
        vals = [metric(results[r], m) for _, r, m in self.terms]
        nums: dict[str, Any] = {
            f"{m}[{r}]": _r(v) for (_, r, m), v in zip(self.terms, vals, strict=True)
        }
        for r, m in self.extra:
            nums[f"{m}[{r}]"] = _r(metric(results[r], m))
        t = self.min_effect
        if self.noise:
            a, b = (metric(results[r], "final_val_loss") for r in self.noise)
            if a is None or b is None:
                return Verdict(UNSURE, nums, "a noise run is missing or diverged")
            nums["noise"] = _r(abs(a - b))
            t = max(t, 2 * abs(a - b))
        nums["threshold"] = _r(t)
        if any(v is None for v in vals):
            return self._with_divergence(results, nums)
        value = (
            vals[0] / vals[1] - 1
            if self.ratio
            else sum(c * v for (c, _, _), v in zip(self.terms, vals, strict=True))
        )
        nums["value"] = _r(value)
        sign = -1 if self.expect == "<0" else 1
        if self.expect in (">0", "<0"):
            if sign * value >= t:
                return Verdict(HOLDS, nums, f"value {value:+.4f} beyond ±{t:.4f}")
            if sign * value <= 0:
                return Verdict(FAILS, nums, f"value {value:+.4f} has the wrong sign")
            return Verdict(UNSURE, nums, f"value {value:+.4f} within the threshold {t:.4f}")
        if self.expect == "≈0":
            if abs(value) <= t:
                return Verdict(HOLDS, nums, f"|value| {abs(value):.4f} ≤ {t:.4f}")
            if abs(value) > 2 * t:
                return Verdict(FAILS, nums, f"|value| {abs(value):.4f} > 2·{t:.4f}")
            return Verdict(UNSURE, nums, f"|value| {abs(value):.4f} between t and 2t")
        ok = abs(value) >= t
        return Verdict(HOLDS if ok else FAILS, nums, f"|value| {abs(value):.4f} vs {t:.4f}")

    def _with_divergence(self, results: Results, nums: dict) -> Verdict:
        """A diverged run is infinitely worse: decisive for a one-run-worse claim, else not."""
        div = [(c, r) for c, r, _ in self.terms if results[r].get("status") == "diverged"]
        for _, r in div:
            nums[f"status[{r}]"] = "diverged"
        if (
            len(self.terms) == 2
            and len(div) == 1
            and not self.ratio
            and self.expect in (">0", "<0")
        ):
            worse_positive = div[0][0] > 0  # diverged run enters with +: value = +inf
            holds = worse_positive == (self.expect == ">0")
            return Verdict(HOLDS if holds else FAILS, nums, f"{div[0][1]} diverged")
        return Verdict(UNSURE, nums, "a run diverged or lacks the metric")


@dataclass(frozen=True)
class Claim:
    """One claim of the articles, tested by one rule on named runs."""

    name: str
    statement: str
    source: str
    rule: Any  # GrowsTowardOutput | MoreEven | FailsWhereOthersTrain | Contrast
    plots: tuple[str, ...] = ("loss",)

    @property
    def runs(self) -> tuple[str, ...]:
        return self.rule.needs()

    def decide(self, results: Results, ctx: dict) -> Verdict:
        return self.rule.decide(results, ctx)
