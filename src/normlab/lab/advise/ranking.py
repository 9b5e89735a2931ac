"""Which recipe did best at the twin's scale, on quality, stability and speed: the advice's
findings as data, read from the study's results and verdicts (``decide_all``), with no prose.
``advice.py`` writes them out.

The claims are found by their names (``twin.claim_name``); the seeds are paired exactly as the
claims pair them. Arms are named by their arm names (``"recipe"`` and each ``Alt.arm``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from normlab.lab.advise.twin import Twin, claim_name
from normlab.lab.study.decide import MEASURES, Context, Contrast
from normlab.lab.study.decide.rules_contrast import Fails
from normlab.lab.study.run import StudyResult
from normlab.lab.verdict import Estimate, Mean

_LOSS = MEASURES["final_val_loss"].read
FAILS_MARGIN = Fails.__dataclass_fields__["margin"].default  # 0.05 nats/byte
NONE = "–"  # the status of a claim the study does not have


@dataclass(frozen=True)
class ArmMean:
    """An arm's mean over its finished seeds (n of them), and its paired difference from the
    recipe's (None for the recipe)."""

    arm: str
    mean: float | None
    n: int
    vs_recipe: Estimate | None


@dataclass(frozen=True)
class ArmQuality(ArmMean):
    """An arm's final validation loss at the recipe's learning rate; ``vs_recipe``: loss(arm) −
    loss(recipe), paired."""

    as_good: str  # the status of "the recipe is at least as good as it" (NONE: the recipe)
    beats: str  # the status of "it beats the recipe"


@dataclass(frozen=True)
class Ranked:
    """A dimension's arms, the recipe first; ``best`` is read from them."""

    arms: tuple[ArmMean, ...]

    @property
    def best(self):
        """The arm of the lowest mean; on a tie the recipe, as an alternative is "best" only by
        doing better. None where no arm has a mean."""
        done = [a for a in self.arms if a.mean is not None]
        return min(done, key=lambda a: (a.mean, a.arm != "recipe", a.arm), default=None)


@dataclass(frozen=True)
class Quality(Ranked):
    arms: tuple[ArmQuality, ...]  # the recipe first, then the alternatives in twin.alts' order
    # H, the loss of predicting bytes by their frequencies (None: not known), and the arms
    # whose mean loss did not get below H by the lab's "fails" margin: they learned nothing
    # past byte frequencies, and are ranked on nothing
    plateau_h: float | None = None
    unlearned: tuple[str, ...] = ()

    @property
    def best(self):
        return Ranked(tuple(a for a in self.arms if a.arm not in self.unlearned)).best


@dataclass(frozen=True)
class ArmStability(ArmMean):
    """The LR sensitivity of an arm's learning-rate sweep, over the seeds whose sweep finished;
    ``vs_recipe``: the "recipe stabler" claim's estimate."""

    best_lr: tuple[float, float] | None  # (lr, mean loss) of the sweep's best arm
    recipe_stabler: str  # the status of "the recipe is less sensitive" (NONE: the recipe)
    alt_stabler: str  # the status of "the alternative is less sensitive"


@dataclass(frozen=True)
class Stability(Ranked):
    arms: tuple[ArmStability, ...]  # the recipe first, then the swept alternatives


@dataclass(frozen=True)
class ArmSpeed:
    """The medians of an arm's timing rounds (None: not timed)."""

    norm: str  # "RMSNorm" | "LayerNorm"
    arm: str
    norm_ms: float | None
    torch_norm_ms: float | None
    step_ms: float | None


@dataclass(frozen=True)
class Speed:
    arms: tuple[ArmSpeed, ...]  # RMSNorm's arm, then LayerNorm's
    faster: str | None  # "RMSNorm" | "LayerNorm" where the norms' timing resolves it, else None
    norm_saving: Estimate | None  # RMSNorm's saving in the norms' time (a fraction)
    step_saving: Estimate | None  # and in a whole step's
    norm_status: str  # the statuses of the two timing claims
    step_status: str


@dataclass(frozen=True)
class Ranking:
    quality: Quality
    stability: Stability | None  # None: no sweeps at this scale
    speed: Speed | None  # None: the study has no timing claim


class Decided(dict):
    """The study's (claim, verdict) pairs by claim name: what each answers (``twin.claim_name``)."""

    def status(self, kind: str, arm: str = "") -> str:
        """The status of the claim, NONE where the study has no such claim."""
        got = self.get(claim_name(kind, arm))
        return got[1].status if got else NONE


def rank(twin: Twin, result: StudyResult) -> Ranking:
    decided = Decided((c.name, (c, v)) for c, v in result.verdicts)
    return Ranking(
        quality(twin, result.results, decided, result.meta.plateau_h),
        stability(twin, result.results, decided),
        speed(result.meta.timings, decided),
    )


def _mean(xs: list[float]) -> tuple[float | None, int]:
    return (statistics.fmean(xs) if xs else None), len(xs)


def mean_loss(results, arm: str) -> tuple[float | None, int]:
    return _mean([x for r in results.get(arm, {}).values() if (x := _LOSS(r, None)) is not None])


def paired(results, a: str, b: str) -> Estimate:
    """loss(a) − loss(b) over the seeds both have, as the claims pair them."""
    c = Contrast(((1, a, "final_val_loss"), (-1, b, "final_val_loss")), "≠0", 0.0, 1)
    return Mean().estimate(c.values(results, Context()))


def quality(twin: Twin, results, decided: Decided, plateau_h: float | None = None) -> Quality:
    arms = [ArmQuality("recipe", *mean_loss(results, "recipe"), None, NONE, NONE)]
    for a in twin.alts:
        est = paired(results, a.arm, "recipe")
        status = decided.status("as_good", a.arm), decided.status("beats", a.arm)
        arms.append(ArmQuality(a.arm, *mean_loss(results, a.arm), est, *status))
    # the "fails" rule's margin: a mean loss above H − it learned nothing past byte frequencies
    bar = None if plateau_h is None else plateau_h - FAILS_MARGIN
    unlearned = tuple(
        a.arm for a in arms if bar is not None and a.mean is not None and a.mean > bar
    )
    return Quality(tuple(arms), plateau_h, unlearned)


def stability(twin: Twin, results, decided: Decided) -> Stability | None:
    swept = [a.arm for a in twin.alts if a.swept]
    if not swept:
        return None

    def arm(name: str, rule, sweep, vs_recipe: Estimate | None, *status: str) -> ArmStability:
        sens = _mean([s_i for s_i, _ in rule.per_seed(results, sweep).values()])
        return ArmStability(name, *sens, vs_recipe, _best_lr(results, sweep), *status)

    # Each sweep as the "recipe stabler" claims have it: the recipe's is their stable one.
    claims = {a: decided[claim_name("stabler", a)] for a in swept}
    first = claims[swept[0]][0].rule
    arms = [arm("recipe", first, first.stable, None, NONE, NONE)]
    for a, (claim, v) in claims.items():
        status = v.status, decided.status("stabler_alt", a)
        arms.append(arm(a, claim.rule, claim.rule.unstable, v.estimate, *status))
    return Stability(tuple(arms))


def _best_lr(results, sweep) -> tuple[float, float] | None:
    """(lr, mean loss) of the sweep's arm with the lowest mean final loss (the first on a tie)."""
    means = [(arm, m) for arm in sweep if (m := mean_loss(results, arm)[0]) is not None]
    if not means:
        return None
    arm, m = min(means, key=lambda x: x[1])
    return next(iter(results[arm].values())).config["lr"], m


def speed(timings: dict, decided: Decided) -> Speed | None:
    """RMSNorm's arm against LayerNorm's in the serial timing phase."""
    norm = decided.get(claim_name("faster"))
    if not norm:
        return None
    step = decided.get(claim_name("faster_step"))
    arms = []
    for arm, what in ((norm[0].rule.fast, "RMSNorm"), (norm[0].rule.slow, "LayerNorm")):
        t = timings.get(arm) or {}
        med = [
            statistics.median(t[k]) if t.get(k) else None
            for k in ("norm_ms", "torch_norm_ms", "step_ms")
        ]
        arms.append(ArmSpeed(what, arm, *med))
    e, faster = norm[1].estimate, None
    if e is not None and e.effect is not None:
        faster = "RMSNorm" if e.lo > 0 else "LayerNorm" if e.hi < 0 else None
    step_estimate, step_status = (step[1].estimate, step[1].status) if step else (None, NONE)
    return Speed(tuple(arms), faster, e, step_estimate, norm[1].status, step_status)
