"""Learning-rate sensitivity (Wortsman et al. 2023): the metric, the rule and its spec form."""

import math

import pytest

from normlab.lab.study.decide.rules_lr_sensitivity import LRSensitivity
from normlab.lab.study.decide.stats import Context
from normlab.lab.study.decide.sweeps import sensitivity, sweep_name
from normlab.lab.study.spec.parse import SpecError, parse_spec
from normlab.lab.train.result import RunResult
from normlab.lab.verdict import Word

V = 256


def res(val=None, status="ok"):
    config = {"model": {"vocab_size": V}, "lr": 0.0}
    return RunResult(config, status, summary={"final_val_loss": val})


def test_sensitivity_is_the_mean_excess_over_the_best_capped_at_a_uniform_guess():
    assert sensitivity([2.0, 2.0, 2.0], 5.5) == 0.0
    assert sensitivity([2.0, 2.5, 3.5], 5.5) == pytest.approx((0 + 0.5 + 1.5) / 3)
    assert sensitivity([2.0, 9.0], 5.5) == pytest.approx(3.5 / 2)  # capped at ln V


def test_the_rule_compares_two_sweeps_seed_by_seed():
    rule = LRSensitivity(("s1", "s2", "s3"), ("u1", "u2", "u3"), delta=0.1, seeds=3)
    results = {
        **{f"s{k}": {i: res(2.0 + 0.1 * (k == 3)) for i in range(3)} for k in (1, 2, 3)},
        "u1": {i: res(2.0) for i in range(3)},
        "u2": {i: res(2.6 + 0.01 * i) for i in range(3)},
        "u3": {i: res(status="diverged") for i in range(3)},
    }
    v = rule.decide(results, Context())
    s_stable = 0.1 / 3
    s_unstable = [(0.6 + 0.01 * i + math.log(V) - 2.0) / 3 for i in range(3)]
    assert v.estimate.values == pytest.approx([u - s_stable for u in s_unstable])
    assert v.status == Word.HOLDS and v.estimate.n == 3
    flipped = LRSensitivity(rule.unstable, rule.stable, delta=0.1, seeds=3)
    assert flipped.decide(results, Context()).status == Word.DOES_NOT_HOLD
    with pytest.raises(ValueError, match="two learning rates"):
        LRSensitivity(("a",), ("b", "c"), delta=0.1, seeds=3)


SPEC = """
name = "lr"
[base]
steps = 4
batch_size = 2
seq_len = 8
[base.model]
dim = 8
n_layers = 2
n_heads = 2
max_seq_len = 8
[[arms]]
name = "{placement}-lr{lr:g}"
axes = { placement = ["pre", "post"], lr = [1e-3, 1e-2, 1e-1] }
[[claims]]
name = "pre-robust"
statement = "Pre-LN is less sensitive to the learning rate than Post-LN."
rule = "lr_sensitivity"
stable = "pre-lr*"
unstable = ["post-lr*"]
delta = 0.05
seeds = 2
plots = ["lr"]
"""


def test_a_spec_names_its_sweeps_by_glob():
    preset = parse_spec(SPEC, "lr.toml")
    rule = preset.claims[0].rule
    assert rule.stable == ("pre-lr0.001", "pre-lr0.01", "pre-lr0.1")
    assert rule.unstable == ("post-lr0.001", "post-lr0.01", "post-lr0.1")
    with pytest.raises(SpecError, match=r"lr.toml: claims\[0\].stable"):
        parse_spec(SPEC.replace('stable = "pre-lr*"', 'stable = "sandwich-*"'), "lr.toml")


def test_the_cap_is_the_loss_at_init():
    from normlab.lab.study.decide.sweeps import init_loss

    def run(val, first=None, status="ok"):
        r = res(val, status)
        if first is not None:
            r.history = {"loss": [first, first - 0.5]}
        return r

    assert init_loss([run(2.0, first=4.0), run(2.5, first=4.0)]) == 4.0
    assert init_loss([run(2.0, first=9.0)]) == pytest.approx(math.log(V))  # at most ln V
    assert init_loss([run(2.0)]) == pytest.approx(math.log(V))  # no history: ln V
    # A diverged run scores the loss at init, not a uniform guess's.
    rule = LRSensitivity(("s1", "s2"), ("u1", "u2"), delta=0.1, seeds=2)
    results = {
        "s1": {i: run(2.0, first=4.0) for i in range(2)},
        "s2": {i: run(2.0, first=4.0) for i in range(2)},
        "u1": {i: run(2.0, first=4.0) for i in range(2)},
        "u2": {i: run(None, first=4.0, status="diverged") for i in range(2)},
    }
    assert rule.decide(results, Context()).estimate.values == pytest.approx(
        [1.0, 1.0]
    )  # (4 − 2) / 2


def test_a_sweep_is_named_by_its_arms_without_the_learning_rate():
    assert sweep_name(["pre-d64-lr0.001", "pre-d64-lr0.01"]) == "pre-d64"
    assert sweep_name(["pre-d64-lr0.001", "post-d64-lr0.01"]) == "pre-d64-lr0.001 …"
    assert sweep_name(["a", "b"]) == "a …"
