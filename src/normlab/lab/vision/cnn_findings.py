"""003's statements about BatchNorm in image CNNs, decided on a small CNN on 8×8 digits:
``normlab vision``'s findings.

Each is a :class:`~normlab.lab.verdict.finding.Finding` fixed here, before any run: one
repetition is one seed (its own split, init and batch order, every arm trained on it, so the
values are paired), ``v`` a contrast of the arms' validation losses after ``eval()``, decided
by the engine's rule (the mean over the seeds, its 95 % Student-t interval against δ). Around
the rule, two registered guards (``Plan.design`` publishes both with the finding):

- a **control**: every arm the finding reads trains, its validation error well under chance
  (0.9) over the seeds; where it does not, the setting cannot show the statement and the
  finding is *not testable here*;
- the **rate check** of the standard for rivals (``study.decide.rivals``, docs/study.md#one-
  standard-for-rivals): the finding decided again on the same seeds with every arm at the
  shared rate ×0.3 and ×3; a check that decides the opposite (holds where it does not hold, or
  the reverse) makes it *not testable here*; a check whose control fails decides nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from normlab.lab.numerics.measuring import part
from normlab.lab.study.decide.rivals import ANCHOR, CHECK, OPPOSITE
from normlab.lab.verdict import Word
from normlab.lab.verdict.finding import Finding
from normlab.lab.vision.net import Arm, Outcome, Recipe

SEEDS = 14  # seeds per arm: sized from a pilot's CPU time (docs/vision.md#the-design)
LARGE, SMALL = 64, 4  # the batches: the article's "large" image batch, a micro-batch
DELTA = 0.1  # ln of a loss ratio: a 10.5 % relative change of the validation loss
MARGIN = 0.1  # "as good as": BatchNorm's loss at most e^0.1 = 1.105× LayerNorm's
LOSS_CAP = 10.0  # nats: a diverged run's validation loss (and any above it) counts as this
CHANCE, TRAINS = 0.9, 0.5  # chance error of 10 digits; the control: error below 0.9 − 0.5
UNIT = "seed (its own split, init and batch order; every arm trains on it)"


def loss(o: Outcome) -> float:
    """The run's validation loss, bounded (``LOSS_CAP``)."""
    return min(o.val_loss, LOSS_CAP)


def _ratio(a: Outcome, b: Outcome) -> float:
    return math.log(loss(a) / loss(b))


@dataclass(frozen=True)
class VisionFinding:
    """A finding, the arms it reads (at the shared rate) and its per-seed values: ``value``
    maps each part to ``v`` from the seed's outcomes of ``arms`` (in their order, at one rate)."""

    finding: Finding
    arms: tuple[Arm, ...]
    value: Callable[..., dict[str, float]] = field(compare=False)


def _l(recipe: Recipe) -> str:
    return (
        f"L = a run's validation cross-entropy after eval() (capped at {LOSS_CAP:g} nats), "
        f"{recipe.words()}"
    )


def fits(recipe: Recipe) -> VisionFinding:
    """003 §二, §七: BatchNorm works in image CNNs (at a large batch)."""
    arms = tuple(Arm(n, LARGE) for n in ("BatchNorm", "LayerNorm", "none"))
    finding = Finding(
        "batchnorm-fits-cnns",
        f"BatchNorm works in image CNNs: at a batch of {LARGE} it trains a small CNN to a lower "
        "validation loss than no norm, and one at least as low as LayerNorm's.",
        "003 §二, §七",
        (
            part(
                "better than none",
                f"ln(L_none / L_BatchNorm) at B={LARGE}; {_l(recipe)}",
                delta=DELTA,
                why="a 10.5 % lower validation loss: less is within the run-to-run spread of "
                "one recipe",
            ),
            part(
                "as good as LayerNorm",
                f"ln(L_LayerNorm / L_BatchNorm) + {MARGIN:g} at B={LARGE} (above 0 where "
                f"BatchNorm's loss is under e^{MARGIN:g} = {math.exp(MARGIN):.3f}× "
                f"LayerNorm's: the margin of 'at least as good' shifted into v); "
                f"{_l(recipe)}",
                delta=0.0,
                why=f"non-inferiority: the margin ({MARGIN:g}, as δ elsewhere) is in v, so the "
                "interval is held against 0",
            ),
        ),
        unit=UNIT,
    )

    def value(bn: Outcome, ln: Outcome, none: Outcome) -> dict[str, float]:
        return {
            "better than none": _ratio(none, bn),
            "as good as LayerNorm": _ratio(ln, bn) + MARGIN,
        }

    return VisionFinding(finding, arms, value)


def shrinks(recipe: Recipe) -> VisionFinding:
    """003 §二: BatchNorm's edge rests on large batches (stable statistics)."""
    arms = tuple(Arm(n, b) for b in (LARGE, SMALL) for n in ("BatchNorm", "LayerNorm"))
    finding = Finding(
        "batchnorm-needs-large-batches",
        f"BatchNorm's edge over LayerNorm in a CNN rests on large batches: at a batch of {SMALL} "
        f"its validation loss relative to LayerNorm's is worse than at {LARGE}.",
        "003 §二",
        (
            part(
                f"worse at B={SMALL}",
                f"ln(L_BatchNorm / L_LayerNorm) at B={SMALL} − the same at B={LARGE}; "
                f"{_l(recipe)} (the same epochs and step per sample at both batches)",
                delta=DELTA,
                why="BatchNorm's loss relative to LayerNorm's 10.5 % worse at the small batch",
            ),
        ),
        unit=UNIT,
    )

    def value(bn64: Outcome, ln64: Outcome, bn4: Outcome, ln4: Outcome) -> dict[str, float]:
        return {f"worse at B={SMALL}": _ratio(bn4, ln4) - _ratio(bn64, ln64)}

    return VisionFinding(finding, arms, value)


def control(arms: Sequence[Arm]) -> Finding:
    """Every arm of ``arms`` trains: its validation error well under chance."""
    parts = tuple(
        part(
            arm.label,
            f"validation error after eval() − {CHANCE:g} (chance)",
            "<0",
            TRAINS,
            why=f"the arm trains: error under {CHANCE - TRAINS:.1f}",
        )
        for arm in arms
    )
    return Finding("control", "Every arm the finding reads trains.", "", parts, unit=UNIT)


@dataclass(frozen=True)
class Plan:
    """The registered design: the recipe, the seeds per arm and the rate check's factors."""

    recipe: Recipe = Recipe()
    seeds: int = SEEDS
    factors: tuple[float, ...] = CHECK

    def findings(self) -> tuple[VisionFinding, ...]:
        return (fits(self.recipe), shrinks(self.recipe))

    def arms(self) -> tuple[Arm, ...]:
        """Every run's arm, at the shared rate and each check's, each once."""
        base = dict.fromkeys(a for f in self.findings() for a in f.arms)
        return tuple(Arm(a.norm, a.batch, r) for r in (1.0, *self.factors) for a in base)

    def design(self, f: VisionFinding) -> dict:
        """Everything that decides ``f``: the finding's parts, its control, the recipe, the
        seeds and the rate check (its fingerprint is registered before the data)."""
        return f.finding.design() | {
            "control": control(f.arms).design(),
            "recipe": asdict(self.recipe),
            "seeds": self.seeds,
            "rate_check": {"factors": list(self.factors), "rule": ANCHOR},
        }

    def designs(self) -> dict[str, dict]:
        return {f.finding.name: self.design(f) for f in self.findings()}


def _decide_at(f: VisionFinding, runs, seeds, factor: float) -> tuple[dict, dict]:
    """``f`` and its control decided on the runs at ``factor`` × the shared rate."""
    at = [Arm(a.norm, a.batch, factor) for a in f.arms]
    per_seed = [f.value(*(runs[a, s] for a in at)) for s in seeds]
    values = {label: [v[label] for v in per_seed] for label, _ in f.finding.parts}
    errors = {
        a.label: [runs[b, s].val_error - CHANCE for s in seeds]
        for a, b in zip(f.arms, at, strict=True)
    }
    return f.finding.decide(values), control(f.arms).decide(errors)


def decide(f: VisionFinding, runs: Mapping[tuple[Arm, int], Outcome], seeds, factors) -> dict:
    """``f``'s verdict from ``runs`` (``(arm, seed) -> Outcome``): decided at the shared rate,
    then the control and the rate checks applied; the checks and the control are kept beside
    it, and ``why`` says what overturned it."""
    shown, ctrl = _decide_at(f, runs, seeds, 1.0)
    out = shown | {"control": ctrl, "rate_checks": []}
    if ctrl["verdict"] != Word.HOLDS:
        out["why"] = (
            f"control {ctrl['verdict']}: not every arm is shown to train; the setting cannot "
            "show the statement"
        )
        out["verdict"] = Word.NOT_TESTABLE
    for factor in factors:
        check, check_ctrl = _decide_at(f, runs, seeds, factor)
        said = Word.NOT_TESTABLE if check_ctrl["verdict"] != Word.HOLDS else check["verdict"]
        out["rate_checks"].append(
            {"factor": factor, "verdict": said, "parts": check["parts"], "control": check_ctrl}
        )
        if out["verdict"] in OPPOSITE and said == OPPOSITE[out["verdict"]]:
            out["why"] = (
                f"the verdict depends on the learning rate: at the shared rate {shown['verdict']}; "
                f"at lr ×{factor:g} {said} ({ANCHOR})"
            )
            out["verdict"] = Word.NOT_TESTABLE
    return out
