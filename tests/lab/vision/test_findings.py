"""The vision findings' rules on synthetic per-seed losses: holds, does not hold, inconclusive;
the control and the rate check of the standard for rivals."""

import json
import math

import pytest

from normlab.lab.study.published.register import planned
from normlab.lab.study.spec.fingerprint import fingerprint
from normlab.lab.verdict import Word
from normlab.lab.vision.cnn_findings import LOSS_CAP, Plan, decide
from normlab.lab.vision.net import Arm, Outcome

PLAN = Plan()
SEEDS = list(range(8))
WOBBLE = [0.01, -0.01, 0.02, -0.02, 0.0, 0.01, -0.01, 0.0]  # per seed, in ln(loss)


def runs_of(loss, error=lambda arm: 0.05, wobble=WOBBLE):
    """Every arm of the plan on SEEDS: ``loss(arm)`` times e^wobble[seed] for BatchNorm (so
    the contrasts vary over the seeds), the error ``error(arm)``."""
    out = {}
    for arm in PLAN.arms():
        for s in SEEDS:
            w = wobble[s] if arm.norm == "BatchNorm" else 0.0
            out[arm, s] = Outcome(arm, s, loss(arm) * math.exp(w), error(arm), 1.0)
    return out


def table(values):
    """``loss(arm)`` from {(norm, batch): loss}, the same at every rate."""
    return lambda arm: values[arm.norm, arm.batch]


FITS, SHRINKS = PLAN.findings()
GOOD = {("BatchNorm", 64): 0.1, ("LayerNorm", 64): 0.2, ("none", 64): 0.4}
GOOD |= {("BatchNorm", 4): 0.2, ("LayerNorm", 4): 0.2}  # the edge gone at batch 4


def test_batchnorm_better_than_none_and_layernorm_holds():
    out = decide(FITS, runs_of(table(GOOD)), SEEDS, PLAN.factors)
    assert out["verdict"] == Word.HOLDS
    assert [p["verdict"] for p in out["parts"]] == [Word.HOLDS, Word.HOLDS]
    assert out["control"]["verdict"] == Word.HOLDS
    assert [c["verdict"] for c in out["rate_checks"]] == [Word.HOLDS, Word.HOLDS]


def test_batchnorm_no_better_than_none_does_not_hold():
    same = GOOD | {("none", 64): 0.1}
    out = decide(FITS, runs_of(table(same)), SEEDS, PLAN.factors)
    assert out["verdict"] == Word.DOES_NOT_HOLD
    assert out["parts"][0]["verdict"] == Word.DOES_NOT_HOLD


def test_batchnorm_worse_than_layernorm_by_more_than_the_margin_does_not_hold():
    worse = GOOD | {("LayerNorm", 64): 0.05}  # BatchNorm's loss 2× LayerNorm's
    out = decide(FITS, runs_of(table(worse)), SEEDS, PLAN.factors)
    assert out["parts"][1]["verdict"] == Word.DOES_NOT_HOLD
    assert out["verdict"] == Word.DOES_NOT_HOLD


def test_an_effect_at_the_edge_with_noisy_seeds_is_inconclusive():
    edge = GOOD | {("none", 64): 0.1 * math.exp(0.1)}
    noisy = [0.3, -0.3, 0.2, -0.2, 0.1, -0.1, 0.25, -0.25]
    out = decide(FITS, runs_of(table(edge), wobble=noisy), SEEDS, PLAN.factors)
    assert out["parts"][0]["verdict"] == Word.INCONCLUSIVE


@pytest.mark.parametrize(
    "at4, word",
    [
        ({("BatchNorm", 4): 0.2, ("LayerNorm", 4): 0.2}, Word.HOLDS),  # the edge gone
        ({("BatchNorm", 4): 0.1, ("LayerNorm", 4): 0.2}, Word.DOES_NOT_HOLD),  # the edge kept
    ],
)
def test_the_small_batch_contrast(at4, word):
    out = decide(SHRINKS, runs_of(table(GOOD | at4)), SEEDS, PLAN.factors)
    assert out["verdict"] == word


def test_an_arm_that_does_not_train_makes_it_not_testable():
    chance = lambda arm: 0.9 if arm.norm == "none" else 0.05  # noqa: E731
    out = decide(FITS, runs_of(table(GOOD), error=chance), SEEDS, PLAN.factors)
    assert out["verdict"] == Word.NOT_TESTABLE and "control" in out["why"]
    assert out["parts"][0]["verdict"] == Word.HOLDS  # its own result, kept beside


def test_a_rate_check_that_decides_the_opposite_makes_it_not_testable():
    def loss(arm):  # at ×3, no norm does as well as BatchNorm
        return 0.1 if (arm.norm, arm.factor) == ("none", 3.0) else GOOD[arm.norm, arm.batch]

    out = decide(FITS, runs_of(loss), SEEDS, PLAN.factors)
    assert out["verdict"] == Word.NOT_TESTABLE
    assert "depends on the learning rate" in out["why"] and "×3" in out["why"]


def test_a_rate_check_whose_control_fails_decides_nothing():
    def loss(arm):
        return 0.1 if (arm.norm, arm.factor) == ("none", 3.0) else GOOD[arm.norm, arm.batch]

    diverged = lambda arm: 0.9 if arm.factor == 3.0 else 0.05  # noqa: E731
    out = decide(FITS, runs_of(loss, error=diverged), SEEDS, PLAN.factors)
    assert out["verdict"] == Word.HOLDS
    assert out["rate_checks"][1]["verdict"] == Word.NOT_TESTABLE


def test_a_diverged_loss_is_capped_and_the_rule_still_decides():
    diverged = GOOD | {("none", 64): math.inf}
    out = decide(FITS, runs_of(table(diverged)), SEEDS, PLAN.factors)
    assert out["parts"][0]["effect"] == pytest.approx(math.log(LOSS_CAP / 0.1), abs=0.02)
    json.dumps(out, allow_nan=False)  # a findings file holds finite numbers only


def test_the_design_is_registered_from_the_code_before_any_data():
    designs = planned("vision")
    assert set(designs) == {"batchnorm-fits-cnns", "batchnorm-needs-large-batches"}
    d = designs["batchnorm-fits-cnns"]
    assert d["seeds"] == PLAN.seeds and d["rate_check"]["factors"] == [0.3, 3.0]
    assert [p["delta"] for p in d["parts"]] == [0.1, 0.0]
    assert fingerprint(d) == fingerprint(Plan().design(FITS))  # stable
    assert fingerprint(Plan(seeds=3).design(FITS)) != fingerprint(d)


def test_every_arm_of_the_plan_once_at_each_rate():
    arms = PLAN.arms()
    assert len(arms) == len(set(arms)) == 15
    assert Arm("none", 4) not in arms  # no finding reads it
