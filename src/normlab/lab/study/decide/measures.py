"""What a rule can measure on one run: ``MEASURES`` maps a name to its ``Measure``: its
description, a function ``(RunResult, probed matrix) -> float | None`` (None: the run lacks
it; a rule does not drop such a seed but bounds its value, see ``stats``) and what an arm's config
needs for its runs to have it (``measure_needs``: the spec loader checks it).

Losses score a diverged run as a uniform guess (ln V); the ``*_end`` measures read the probe
taken at the latest step, after the last update when ``probe_steps`` includes it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from normlab.lab.study.decide.measure_needs import (
    AT_INIT,
    CURVE,
    DROP,
    DURING,
    LENGTHS,
    SERVING,
    SLICE,
    TRAIN_MODE,
    TRAINED,
    TWICE_DURING,
    Measure,
    Measured,
    early,
)
from normlab.lab.study.decide.probe_measures import (
    FIRST_STEPS,
    UPDATE_WINDOW,
    at_init,
    branch_ratio,
    finite,
    input_grad_min,
    input_grad_ratio,
    log_grad_ratio,
    log_grad_spread,
    log_grad_trend,
    log_ln_input_growth_first,
    log_max_over_min,
    log_update,
    over_training,
    value_of,
    values,
)
from normlab.lab.train.result import RunResult

# What H is, as the rule texts say it.
H_TEXT = (
    "H = the unigram cross-entropy of the validation bytes under the training bytes' "
    "frequencies (add-one smoothed): the validation loss of a model that learned only byte "
    "frequencies"
)


def _loss(name: str) -> Measured:
    def measure(res: RunResult, matrix: str | None) -> float | None:
        if res.status == "diverged":
            return math.log(res.config["model"]["vocab_size"])  # a uniform guess
        return finite(res.summary.get(name))

    return measure


def _summary(name: str) -> Measured:
    def measure(res: RunResult, matrix: str | None) -> float | None:
        return None if res.status != "ok" else finite(res.summary.get(name))

    return measure


def _end(fn: Callable[[dict], float]) -> Measured:
    """A measure of the probe at the latest step (after the last update when ``probe_steps`` has
    it): ``fn(probe)``; none where the model was probed at init alone."""
    return over_training(lambda during: fn(during[-1]))


def _drift(fn: Callable[[dict, dict], float]) -> Measured:
    """A measure of what training moved: ``fn(probe at the latest step, probe at step 0)``."""

    def measure(res: RunResult, matrix: str | None) -> float | None:
        probes = res.probes
        if "0" not in probes or len(probes) < 2:
            return None
        return _end(lambda end: fn(end, probes["0"]))(res, matrix)

    return measure


def _gap(a: str, b: str, size: bool = False) -> Measured:
    """summary[a] − summary[b] of a run that finished (None where either is missing); ``size``:
    its absolute value, a "differs" read per model, so gaps of opposite sign in different seeds
    do not cancel."""

    def measure(res: RunResult, matrix: str | None) -> float | None:
        x, y = _summary(a)(res, None), _summary(b)(res, None)
        if x is None or y is None:
            return None
        return abs(x - y) if size else x - y

    return measure


def _abs_gap_short(res: RunResult, matrix: str | None) -> float | None:
    """The same |eval − train mode| gap on the validation sequences cut to the shortest of the
    run's ``eval_lengths``: served at a length it was not trained at."""
    at, train_at = (res.summary.get(k) for k in ("val_loss_at", "val_loss_train_mode_at"))
    if res.status != "ok" or not at or not train_at:
        return None
    return value_of(lambda n: abs(at[n] - train_at[n]), min(at, key=int))


def _deep_cos(p: dict) -> float:
    cos = values(p, "residual_cos")
    return statistics.fmean(cos[-max(1, len(cos) // 4) :])


def _resid_growth(p: dict) -> float:
    rms = values(p, "residual_rms")
    return math.log(rms[-1] / rms[0])


MATCHED_TRAIN_LOSS = 1.75  # nats/byte: a training loss every small-corpus arm passes (block 0)


def _gap_at_matched_train_loss(res: RunResult, matrix: str | None) -> float | None:
    """val − train loss where the training loss (eval mode, on the training bytes) first reaches
    ``MATCHED_TRAIN_LOSS``, linear between the validations around it: the gap at equal fit."""
    if res.status != "ok":
        return None
    evals = [e for e in res.evals if "train_loss" in e]
    for a, b in zip(evals, evals[1:], strict=False):
        ta, tb = a["train_loss"], b["train_loss"]
        if ta > MATCHED_TRAIN_LOSS >= tb:
            w = (ta - MATCHED_TRAIN_LOSS) / (ta - tb)
            return finite(a["val_loss"] + w * (b["val_loss"] - a["val_loss"]) - MATCHED_TRAIN_LOSS)
    return None


def _early_stopping_gain(res: RunResult, matrix: str | None) -> float | None:
    """Final validation loss − the lowest of any validation: what stopping at the best one saves
    (None without validations along the way: the last alone has nothing to compare with)."""
    if res.status != "ok" or len(res.evals) < 2:
        return None
    return finite(res.evals[-1]["val_loss"] - min(e["val_loss"] for e in res.evals))


def _block_drop_mean(res: RunResult, matrix: str | None) -> float | None:
    if res.status != "ok":
        return None
    return value_of(statistics.fmean, res.summary.get("block_drop_loss"))


# The serving measures (TrainConfig.eval_serving; normlab.lab.train.serving), each read from the
# run's summary under its own name: name -> what it is.
_SERVING = {
    "batchmate_shift_train": "mean ‖Δlogits‖ / ‖logits‖ of a sequence when all its batch-mates "
    "change, train mode (batch statistics)",
    "batchmate_shift_eval": "mean ‖Δlogits‖ / ‖logits‖ of a sequence when all its batch-mates "
    "change, eval mode (running statistics)",
    "forgot_eval_gap": "validation loss at batch 1 in train mode − in eval mode, the same bytes "
    "(model.eval() forgotten)",
    "padding_gap_train": "a whole sequence's loss with its batch-mates cut short and right-padded "
    "− with them whole, train mode",
    "padding_gap_eval": "a whole sequence's loss with its batch-mates cut short and right-padded "
    "− with them whole, eval mode",
}

# name -> what it is, how it is read from a run, what the run needs for it
MEASURES: dict[str, Measure] = {
    "final_val_loss": Measure(
        "final validation loss (nats/byte; diverged = ln V)",
        _loss("final_val_loss"),
        (TRAINED,),
    ),
    "final_val_loss_train_mode": Measure(
        "final validation loss in train mode (batch statistics; diverged = ln V)",
        _loss("final_val_loss_train_mode"),
        (TRAINED, TRAIN_MODE),
    ),
    "abs_train_eval_gap": Measure(
        "|final val loss in eval mode − in train mode| (running vs batch statistics)",
        _gap("final_val_loss", "final_val_loss_train_mode", size=True),
        (TRAINED, TRAIN_MODE),
    ),
    "abs_train_eval_gap_short": Measure(
        "the same gap on the validation sequences cut to the run's shortest eval_lengths (served "
        "at a length it was not trained at)",
        _abs_gap_short,
        (TRAINED, TRAIN_MODE, LENGTHS),
    ),
    **{name: Measure(text, _summary(name), (TRAINED, SERVING)) for name, text in _SERVING.items()},
    "log_logit_rms_drift": Measure(
        "ln(RMS of the output logits at the last probe / at step 0): the output scale's drift",
        _drift(lambda end, init: math.log(end["logit_rms"] / init["logit_rms"])),
        (AT_INIT, DURING),
    ),
    "log_resid_growth_drift": Measure(
        "ln(the stream's growth across the blocks at the last probe / at step 0), the growth "
        "of the residual RMS that training brings",
        _drift(lambda end, init: _resid_growth(end) - _resid_growth(init)),
        (AT_INIT, DURING),
    ),
    "norm_weight_mean": Measure(
        "mean |gain| of the norms after training", _summary("norm_weight_mean"), (TRAINED,)
    ),
    "log_grad_ratio": Measure(
        "ln(‖∇‖ of the last block / the first), at init", log_grad_ratio, (AT_INIT,)
    ),
    "log_grad_trend": Measure(
        "ln(last/first) of the least-squares line through ln ‖∇‖ over the blocks, at init",
        log_grad_trend,
        (AT_INIT,),
    ),
    "log_grad_spread": Measure(
        "ln(max/min over blocks of ‖∇‖), at init", log_grad_spread, (AT_INIT,)
    ),
    "attn_branch_ratio": Measure(
        "Var f / Var(x + f) of the attention sublayers at init, mean over blocks (f: what the "
        "branch adds to its skip x)",
        branch_ratio("attn"),
        (AT_INIT,),
    ),
    "mlp_branch_ratio": Measure(
        "Var f / Var(x + f) of the MLP sublayers at init, mean over blocks",
        branch_ratio("mlp"),
        (AT_INIT,),
    ),
    # the probe at the latest step (``_end``)
    "log_attn_logit_max_end": Measure(
        "ln(largest attention logit over the layers), end of training",
        _end(lambda p: math.log(max(values(p, "attn_logit_max")))),
        (DURING,),
    ),
    "log_logit_rms_end": Measure(
        "ln(RMS of the output logits), end of training",
        _end(lambda p: math.log(p["logit_rms"])),
        (DURING,),
    ),
    "log_resid_growth_end": Measure(
        "ln(residual RMS after the last block / after the first), end of training",
        _end(_resid_growth),
        (DURING,),
    ),
    "log_massive_end": Measure(
        "ln(max over blocks of max|h| / median|h|), end of training",
        _end(lambda p: math.log(max(values(p, "massive")))),
        (DURING,),
    ),
    "log_grad_spread_end": Measure(
        "ln(max/min over blocks of the block gradient norm), end of training",
        _end(lambda p: log_max_over_min(values(p, "grad_norm_block"))),
        (DURING,),
    ),
    "deep_cos_end": Measure(
        "mean cosine between consecutive blocks' outputs over the last quarter of blocks, end "
        "of training (near 1: the deep blocks change the stream little)",
        _end(_deep_cos),
        (DURING,),
    ),
    # the output's range (000 §8.1: a final norm keeps it stable; probes at several steps)
    "log_logit_absmax_end": Measure(
        "ln(largest |logit| on the probe batch), end of training: the output's range",
        _end(lambda p: math.log(p["logit_absmax"])),
        (DURING,),
    ),
    "log_logit_absmax_drift": Measure(
        "ln(largest |logit| at the last probe / at step 0): how much training grew the output's "
        "range",
        _drift(lambda end, init: math.log(end["logit_absmax"] / init["logit_absmax"])),
        (AT_INIT, DURING),
    ),
    "log_logit_rms_spread": Measure(
        "ln(max / min of the logits' RMS over the probes taken during training, steps ≥ 1): how "
        "much the output scale moves while the model trains",
        over_training(lambda ps: log_max_over_min([float(p["logit_rms"]) for p in ps])),
        (TWICE_DURING,),
    ),
    # 000 §5.2's gradient ∂loss/∂x_l of each block's input x_l (Probes.input_grad_norm)
    "log_input_grad_min": Measure(
        "ln(min over blocks 1 … L−1 of ‖∂loss/∂x_l‖ / ‖∂loss/∂x_{L−1}‖) at init: how far the "
        "gradient falls on its way back from the last block's input (x_0, the embedding "
        "output, left out)",
        at_init(input_grad_min),
        (AT_INIT,),
    ),
    "log_input_grad_min_train": Measure(
        "the same, mean over the probes taken during training (steps ≥ 1)",
        over_training(lambda ps: statistics.fmean(input_grad_min(p) for p in ps)),
        (DURING,),
    ),
    "log_input_grad_ratio": Measure(
        "ln(‖∂loss/∂x_1‖ / ‖∂loss/∂x_{L−1}‖) at init: the gradient's change from the last block's "
        "input back to the first block's output (< 0: it vanishes, > 0: it grows)",
        at_init(input_grad_ratio),
        (AT_INIT,),
    ),
    "log_input_grad_ratio_train": Measure(
        "the same, mean over the probes taken during training (steps ≥ 1)",
        over_training(lambda ps: statistics.fmean(input_grad_ratio(p) for p in ps)),
        (DURING,),
    ),
    # DeepNet's early training (the probes of the first steps)
    "log_update_early": Measure(
        f"ln of the largest model update RMS(F(x, θ_t) − F(x, θ_0)) of the output logits on the "
        f"probe batch, over the probes at steps 1 … {UPDATE_WINDOW} (DeepNet's update bound)",
        log_update(UPDATE_WINDOW),
        (AT_INIT, early(UPDATE_WINDOW)),
    ),
    "log_update_first20": Measure(
        f"ln of the largest model update RMS(F(x, θ_t) − F(x, θ_0)) of the output logits on the "
        f"probe batch over steps 1 … {FIRST_STEPS} (DeepNet's blow-up is in the first steps)",
        log_update(FIRST_STEPS),
        (AT_INIT, early(FIRST_STEPS)),
    ),
    "log_ln_input_growth_first20": Measure(
        f"ln(largest mean RMS of the LayerNorm inputs x + f over steps 1 … {FIRST_STEPS} / at "
        "init; the residual sums, the LayerNorm's input under Post-LN and DeepNorm)",
        log_ln_input_growth_first,
        (AT_INIT, early(FIRST_STEPS)),
    ),
    # read from what a run computes on demand (TrainConfig.block_drop_batches, train_slice)
    "gap_at_matched_train_loss": Measure(
        f"val − train loss where the loss on the training bytes first reaches "
        f"{MATCHED_TRAIN_LOSS:g} nats/byte (eval mode, linear between validations; needs "
        "train_slice and eval_interval): the gap at equal fit",
        _gap_at_matched_train_loss,
        (TRAINED, SLICE, CURVE),
    ),
    "early_stopping_gain": Measure(
        "final val loss − the lowest val loss of any validation (needs eval_interval): what "
        "stopping at the best validation saves, 0 unless the model overfits late",
        _early_stopping_gain,
        (TRAINED, CURVE),
    ),
    "block_drop_mean": Measure(
        "mean over blocks of the validation loss increase when that one block is skipped (needs "
        "block_drop_batches): how much work each block does",
        _block_drop_mean,
        (TRAINED, DROP),
    ),
    "train_val_gap": Measure(
        "final val loss − final loss on the training bytes (eval mode; needs train_slice): the "
        "generalization gap",
        _gap("final_val_loss", "final_train_loss"),
        (TRAINED, SLICE),
    ),
}
