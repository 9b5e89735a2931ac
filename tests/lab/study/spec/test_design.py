"""A study's arms, claims and runs: names checked, seeds per arm from its claims, seed blocks."""

import pytest

from normlab.lab.study.decide.claims import Claim
from normlab.lab.study.decide.rules_contrast import Trains
from normlab.lab.study.spec.design import SEED_STRIDE, Arm, Run, Study
from normlab.lab.train.trainer import TrainConfig
from normlab.models import TransformerConfig

CFG = TrainConfig(model=TransformerConfig(256, 16, 1, 2), steps=3)


def _claim(name: str, arm: str, seeds: int) -> Claim:
    return Claim(name, "a statement", "a source", Trains(arm, seeds=seeds))


def test_runs_expand_each_arm_over_the_seeds_its_most_demanding_claim_asks():
    study = Study(
        "s",
        "d",
        (Arm("a", CFG), Arm("b", CFG.replace(lr=2e-3)), Arm("unused", CFG)),
        (_claim("c1", "a", 2), _claim("c2", "a", 4), _claim("c3", "b", 3)),
    )
    assert [study.seeds(a) for a in ("a", "b", "unused")] == [4, 3, 1]
    runs = study.runs(2)
    assert [r.label for r in runs] == [f"a#{i}" for i in range(4)] + [
        f"b#{i}" for i in range(3)
    ] + ["unused#0"]
    assert [r.config.seed for r in runs[:4]] == [2 * SEED_STRIDE + i for i in range(4)]
    assert runs[4].config.lr == 2e-3 and isinstance(runs[0], Run)


def test_seed_blocks_share_no_seed():
    study = Study("s", "d", (Arm("a", CFG),), (_claim("c", "a", 5),))
    seeds = [{r.config.seed for r in study.runs(b)} for b in range(3)]
    assert not (seeds[0] & seeds[1]) and not (seeds[1] & seeds[2])


def test_a_study_refuses_duplicate_arms_and_claims_on_missing_arms():
    with pytest.raises(ValueError, match="duplicate arm"):
        Study("s", "d", (Arm("a", CFG), Arm("a", CFG)), ())
    with pytest.raises(ValueError, match="needs arms not in the study"):
        Study("s", "d", (Arm("a", CFG),), (_claim("c", "ghost", 2),))
