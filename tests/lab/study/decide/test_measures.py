"""The per-run measures the rules read: at init, and at the end of training."""

import math
from dataclasses import replace

import pytest

from normlab.lab.study.decide.measures import MEASURES
from normlab.lab.study.spec.parse import load_builtin
from normlab.lab.train.result import RunResult


def run(status="ok", **probes_by_step):
    return RunResult({"model": {"vocab_size": 256}}, status, summary={"final_val_loss": 2.0},
                     probes={str(k[1:]): v for k, v in probes_by_step.items()})  # fmt: skip


END = {
    "attn_logit_max": [2.0, 8.0, 4.0],
    "logit_rms": 3.0,
    "residual_rms": [1.0, 2.0, 4.0],
    "massive": [10.0, 50.0, 20.0],
    "grad_norm_block": [1.0, 0.5, 2.0],
    "residual_cos": [0.5, 0.9, 0.95, 0.99],
}


@pytest.mark.parametrize(
    "name, want",
    [
        ("log_attn_logit_max_end", math.log(8)),
        ("log_logit_rms_end", math.log(3)),
        ("log_resid_growth_end", math.log(4)),
        ("log_massive_end", math.log(50)),
        ("log_grad_spread_end", math.log(4)),
        ("deep_cos_end", 0.99),  # the last quarter of 4 consecutive-block cosines: the last one
    ],
)
def test_end_measures_read_the_latest_probe(name, want):
    r = run(s0={k: None for k in END} | {"logit_rms": 100.0}, s200=END, s50={"logit_rms": 9.0})
    assert MEASURES[name].read(r, None) == pytest.approx(want)
    assert MEASURES[name].read(run("diverged", s200=END), None) is None
    assert MEASURES[name].read(run(s200={}), None) is None  # not probed: no value, no crash


def test_logit_drift_is_the_log_ratio_of_the_last_probe_to_step_0():
    drift = MEASURES["log_logit_rms_drift"].read
    assert drift(run(s0={"logit_rms": 2.0}, s200={"logit_rms": 6.0}), None) == pytest.approx(
        math.log(3)
    )
    assert drift(run(s0={"logit_rms": 2.0}), None) is None  # probed at init only
    assert drift(run(s200={"logit_rms": 6.0}), None) is None  # no step-0 probe
    assert drift(run("diverged", s0={"logit_rms": 2.0}, s200={"logit_rms": 6.0}), None) is None


def test_the_train_eval_gap_is_read_as_its_size_per_model():
    gap = MEASURES["abs_train_eval_gap"].read
    r = run()
    for train_mode, want in ((2.3, 0.3), (1.7, 0.3), (2.0, 0.0)):
        r.summary = {"final_val_loss": 2.0, "final_val_loss_train_mode": train_mode}
        assert gap(r, None) == pytest.approx(want)  # gaps of either sign count alike
    assert gap(run(), None) is None  # no train-mode validation
    assert gap(run("diverged"), None) is None


def test_the_short_gap_reads_the_shortest_served_length():
    gap = MEASURES["abs_train_eval_gap_short"].read
    at = {"val_loss_at": {"16": 2.5, "32": 2.2}, "val_loss_train_mode_at": {"16": 2.1, "32": 2.1}}
    res = RunResult({}, summary=at)
    assert gap(res, None) == pytest.approx(0.4)  # |2.5 − 2.1| at 16, the shorter length
    assert gap(RunResult({}), None) is None
    assert gap(replace(res, status="diverged"), None) is None


@pytest.mark.parametrize(
    "name",
    [
        "batchmate_shift_train",
        "batchmate_shift_eval",
        "forgot_eval_gap",
        "padding_gap_train",
        "padding_gap_eval",
    ],
)
def test_the_serving_measures_read_the_summary(name):
    res = run()
    assert MEASURES[name].read(res, None) is None  # a run without eval_serving lacks them
    res.summary[name] = 0.25
    assert MEASURES[name].read(res, None) == 0.25
    assert MEASURES[name].read(replace(res, status="diverged"), None) is None


def test_losses_score_a_diverged_run_as_a_uniform_guess():
    assert MEASURES["final_val_loss"].read(run("diverged"), None) == pytest.approx(math.log(256))


def test_the_stability_preset_sweeps_every_variant_over_the_same_learning_rates():
    p = load_builtin("stability")
    xavier = ("pre", "sandwich", "qk-pre", "deepnorm")  # DeepNorm: DeepNet's own init
    default = ("post-default", "pre-default", "deepnorm-default")  # where Post-LN trains
    variants = [f"{v}-d{d}" for d in (32, 64) for v in xavier + default]
    points = [r for r in p.arms if ".lr" not in r.name]  # a rate check's arms are not the grid
    lrs = {v: [r.config.lr for r in points if r.name.rsplit("-lr", 1)[0] == v] for v in variants}
    ref = lrs["pre-d64"]
    assert all(v == ref and len(v) >= 6 and max(v) / min(v) >= 100 for v in lrs.values())
    sweeps = [
        c for c in p.claims if type(c.rule).__name__ == "AllOf"
        and all(type(getattr(r, "rule", r)).__name__ == "LRSensitivity" for _, r in c.rule.parts())
    ]  # fmt: skip
    assert len(sweeps) == 5 and all(len(c.rule.parts()) == 2 for c in sweeps)  # one per width
    # Each width's comparison is testable only where both of its sweeps train somewhere.
    assert all(len(r.controls) == 2 for c in sweeps for _, r in c.rule.parts())
    assert all(c.seeds >= 2 for c in p.claims)
    cfg = {r.name: r.config for r in p.arms}
    assert cfg["qk-pre-d64-lr0.001"].model.qk_norm
    assert cfg["lns-pre-d64-lr0.001"].model.depth_scaled_norm
    pre = cfg["pre-d64-lr0.001"]
    assert pre.probe_steps[-1] == pre.steps  # probed at the end
    assert pre.warmup_steps > 0 and pre.schedule == "cosine"  # Wortsman et al.'s protocol


def test_log_grad_trend_fits_every_block_and_matches_the_ratio_on_a_straight_line():
    import math

    from normlab.lab.study.decide.measures import MEASURES

    def run(profile):
        return RunResult({}, probes={"0": {"grad_norm": {"m": profile}}})

    trend, ratio = MEASURES["log_grad_trend"].read, MEASURES["log_grad_ratio"].read
    line = [math.exp(0.1 * i) for i in range(6)]
    assert trend(run(line), "m") == pytest.approx(ratio(run(line), "m")) == pytest.approx(0.5)
    bumpy = [1.0, 5.0, 1.0, 5.0, 1.0, 5.0]  # the ends alone say x5; the line, much less
    assert ratio(run(bumpy), "m") == pytest.approx(math.log(5))
    assert 0 < trend(run(bumpy), "m") < 0.6 * math.log(5)
    assert trend(run([1.0]), "m") is None and trend(run([1.0, 0.0]), "m") is None


def test_the_model_update_is_the_largest_output_change_in_the_first_100_steps():
    update = MEASURES["log_update_early"].read
    r = run(s0={}, s25={"output_change": 2.0}, s100={"output_change": 5.0},
            s400={"output_change": 50.0})  # fmt: skip
    assert update(r, None) == pytest.approx(math.log(5))  # step 400 is past the window
    assert update(run(s0={}, s400={"output_change": 50.0}), None) is None  # none early
    assert update(run(s25={"output_change": 2.0}), None) is None  # no reference at init
    assert update(run("diverged", s0={}, s25={"output_change": 2.0}), None) is None


def test_block_drop_and_generalization_gap_read_the_summary():
    drop, gap = MEASURES["block_drop_mean"].read, MEASURES["train_val_gap"].read
    r = run()
    r.summary = {"final_val_loss": 2.0, "final_train_loss": 1.5,
                    "block_drop_loss": [0.1, 0.3, 0.2]}  # fmt: skip
    assert drop(r, None) == pytest.approx(0.2) and gap(r, None) == pytest.approx(0.5)
    assert drop(run(), None) is None and gap(run(), None) is None  # not asked for: no value
    r.status = "diverged"
    assert drop(r, None) is None and gap(r, None) is None


def test_deepnets_measures_read_steps_1_to_20_against_init():
    update, grows = (
        MEASURES[k].read for k in ("log_update_first20", "log_ln_input_growth_first20")
    )
    sums = lambda a, m: {"sum_rms": {"attn": a, "mlp": m}}  # noqa: E731
    r = run(s0=sums([1.0, 1.0], [1.0, 1.0]),
            s1={"output_change": 2.0} | sums([2.0, 2.0], [2.0, 2.0]),
            s20={"output_change": 3.0} | sums([1.0, 3.0], [1.0, 3.0]),
            s25={"output_change": 9.0} | sums([9.0, 9.0], [9.0, 9.0]))  # fmt: skip
    assert update(r, None) == pytest.approx(math.log(3))  # step 25 is past the window
    assert grows(r, None) == pytest.approx(math.log(2))  # the mean over every sublayer
    assert update(run(s0={}, s25={"output_change": 9.0}), None) is None  # nothing in 1 … 20
    assert grows(run(s1=sums([2.0], [2.0])), None) is None  # no reference at init
    assert grows(run(s0=sums([None], [1.0]), s1=sums([2.0], [2.0])), None) is None


def test_the_gap_at_matched_training_loss_interpolates_where_the_fit_first_reaches_the_bar():
    from normlab.lab.study.decide.measures import MATCHED_TRAIN_LOSS as L

    gap = MEASURES["gap_at_matched_train_loss"].read
    r = run()
    r.evals = [{"step": 50, "train_loss": L + 0.5, "val_loss": L + 0.6},
                  {"step": 100, "train_loss": L - 0.5, "val_loss": L + 0.2},
                  {"step": 150, "train_loss": L + 0.1, "val_loss": L + 0.9}]  # fmt: skip
    assert gap(r, None) == pytest.approx(0.4)  # half-way: val L + 0.4 at train L
    r.evals = r.evals[:1]  # never reached: no value, rather than the gap at another fit
    assert gap(r, None) is None
    assert gap(run(), None) is None


def test_early_stopping_gain_is_the_last_validation_over_the_best():
    gain = MEASURES["early_stopping_gain"].read
    r = run()
    r.evals = [{"step": 50, "val_loss": 2.0}, {"step": 100, "val_loss": 1.7},
               {"step": 150, "val_loss": 1.9}]  # fmt: skip
    assert gain(r, None) == pytest.approx(0.2)
    r.evals = r.evals[:2]  # still improving at the end: nothing to save
    assert gain(r, None) == 0.0
    r.evals = r.evals[:1]  # the final validation alone: no curve to stop early on
    assert gain(r, None) is None
    r.status = "diverged"
    assert gain(r, None) is None


def test_the_streams_growth_during_training_is_end_over_init():
    drift = MEASURES["log_resid_growth_drift"].read
    r = run(s0={"residual_rms": [1.0, 2.0]}, s200={"residual_rms": [1.0, 6.0]})
    assert drift(r, None) == pytest.approx(math.log(3))
    assert drift(run(s200={"residual_rms": [1.0, 6.0]}), None) is None
