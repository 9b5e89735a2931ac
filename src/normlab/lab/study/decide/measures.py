"""What a rule can measure on one run: ``MEASURES`` maps a name to its description and a function
``(RunResult dict, probed matrix) -> float | None`` (None: the run lacks it; a rule does not
drop such a seed but bounds its value, see ``stats``).

Losses score a diverged run as a uniform guess (ln V); the ``*_end`` measures read the probe
taken at the latest step, after the last update when ``probe_steps`` includes it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

from normlab.lab.study.decide.probe_measures import (
    FIRST_STEPS,
    MISSING,
    UPDATE_WINDOW,
    at_init,
    finite,
    input_grad_min,
    input_grad_ratio,
    log_ln_input_growth_first,
    log_max_over_min,
    log_update,
    over_training,
    values,
)

# What H is, as the rule texts say it.
H_TEXT = (
    "H = the unigram cross-entropy of the validation bytes under the training bytes' "
    "frequencies (add-one smoothed): the validation loss of a model that learned only byte "
    "frequencies"
)


def _loss(name: str) -> Callable[[dict, str | None], float | None]:
    def measure(res: dict, matrix: str | None) -> float | None:
        if res.get("status") == "diverged":
            return math.log(res["config"]["model"]["vocab_size"])  # a uniform guess
        return finite(res.get("summary", {}).get(name))

    return measure


def _summary(name: str) -> Callable[[dict, str | None], float | None]:
    def measure(res: dict, matrix: str | None) -> float | None:
        return None if res.get("status") != "ok" else finite(res.get("summary", {}).get(name))

    return measure


def grad_profile(res: dict, matrix: str | None) -> list[float]:
    """Per-block gradient norms from the probe at init (a matrix, or whole blocks)."""
    probe = res.get("probes", {}).get("0") or {}
    if matrix is None:
        prof = probe.get("grad_norm_block") or []
    else:
        prof = (probe.get("grad_norm") or {}).get(matrix) or []
    return [float(v) for v in prof if v is not None]


def _log_ratio(res: dict, matrix: str | None) -> float | None:
    prof = grad_profile(res, matrix)
    ok = len(prof) >= 2 and prof[0] > 0 and prof[-1] > 0
    return math.log(prof[-1] / prof[0]) if ok else None


def _log_trend(res: dict, matrix: str | None) -> float | None:
    """ln(last/first) of the least-squares line through ln‖∇‖ over the blocks: the same
    quantity as ``log_grad_ratio``, read from every block instead of the two ends."""
    prof = grad_profile(res, matrix)
    if len(prof) < 2 or min(prof) <= 0:
        return None
    logs = [math.log(v) for v in prof]
    xs = range(len(logs))
    xm, ym = statistics.fmean(xs), statistics.fmean(logs)
    slope = sum((x - xm) * (y - ym) for x, y in zip(xs, logs, strict=True)) / sum(
        (x - xm) ** 2 for x in xs
    )
    return slope * (len(logs) - 1)


def _log_spread(res: dict, matrix: str | None) -> float | None:
    prof = grad_profile(res, matrix)
    return math.log(max(prof) / min(prof)) if len(prof) >= 2 and min(prof) > 0 else None


def _branch_ratio(sublayer: str) -> Callable[[dict, str | None], float | None]:
    def measure(res: dict, matrix: str | None) -> float | None:
        probe = (res.get("probes") or {}).get("0") or {}
        vals = (probe.get("branch_ratio") or {}).get(sublayer) or []
        ok = vals and all(isinstance(v, int | float) for v in vals)
        return finite(statistics.fmean(vals)) if ok else None

    return measure


def _at_end(res: dict) -> dict:
    """The probe taken at the latest step (after the last update when ``probe_steps`` has it)."""
    probes = res.get("probes") or {}
    return probes[max(probes, key=int)] if probes else {}


def _end(fn: Callable[[dict], float]) -> Callable[[dict, str | None], float | None]:
    """A measure of the probe at the latest step: ``fn(probe)``."""

    def measure(res: dict, matrix: str | None) -> float | None:
        if res.get("status") != "ok":
            return None
        try:
            return finite(fn(_at_end(res)))
        except MISSING:
            return None

    return measure


def _drift(fn: Callable[[dict, dict], float]) -> Callable[[dict, str | None], float | None]:
    """A measure of what training moved: ``fn(probe at the latest step, probe at step 0)``."""

    def measure(res: dict, matrix: str | None) -> float | None:
        probes = res.get("probes") or {}
        if "0" not in probes or len(probes) < 2:
            return None
        return _end(lambda end: fn(end, probes["0"]))(res, matrix)

    return measure


def _gap(a: str, b: str, size: bool = False) -> Callable[[dict, str | None], float | None]:
    """summary[a] − summary[b] of a run that finished (None where either is missing); ``size``:
    its absolute value, a "differs" read per model, so gaps of opposite sign in different seeds
    do not cancel."""

    def measure(res: dict, matrix: str | None) -> float | None:
        x, y = _summary(a)(res, None), _summary(b)(res, None)
        if x is None or y is None:
            return None
        return abs(x - y) if size else x - y

    return measure


def _abs_gap_short(res: dict, matrix: str | None) -> float | None:
    """The same |eval − train mode| gap on the validation sequences cut to the shortest of the
    run's ``eval_lengths``: served at a length it was not trained at."""
    at, train_at = (
        res.get("summary", {}).get(k) or {} for k in ("val_loss_at", "val_loss_train_mode_at")
    )
    if res.get("status") != "ok" or not at or not train_at:
        return None
    n = min(at, key=int)
    x, y = finite(at[n]), finite(train_at.get(n))
    return None if x is None or y is None else abs(x - y)


def _grad_spread(p: dict) -> float:
    g = values(p, "grad_norm_block")
    return math.log(max(g) / min(g))


def _deep_cos(p: dict) -> float:
    cos = values(p, "residual_cos")
    return statistics.fmean(cos[-max(1, len(cos) // 4) :])


def _resid_growth(p: dict) -> float:
    rms = values(p, "residual_rms")
    return math.log(rms[-1] / rms[0])


MATCHED_TRAIN_LOSS = 1.75  # nats/byte: a training loss every small-corpus arm passes (block 0)


def _gap_at_matched_train_loss(res: dict, matrix: str | None) -> float | None:
    """val − train loss where the training loss (eval mode, on the training bytes) first reaches
    ``MATCHED_TRAIN_LOSS``, linear between the validations around it: the gap at equal fit."""
    if res.get("status") != "ok":
        return None
    evals = [e for e in res.get("evals") or [] if "train_loss" in e]
    for a, b in zip(evals, evals[1:], strict=False):
        ta, tb = a["train_loss"], b["train_loss"]
        if ta > MATCHED_TRAIN_LOSS >= tb:
            w = (ta - MATCHED_TRAIN_LOSS) / (ta - tb)
            return finite(a["val_loss"] + w * (b["val_loss"] - a["val_loss"]) - MATCHED_TRAIN_LOSS)
    return None


def _block_drop_mean(res: dict, matrix: str | None) -> float | None:
    drops = res.get("summary", {}).get("block_drop_loss") if res.get("status") == "ok" else None
    if not drops or any(not isinstance(v, int | float) for v in drops):
        return None
    return finite(statistics.fmean(drops))


# name -> (what it is, how it is read from a run)
MEASURES: dict[str, tuple[str, Callable[[dict, str | None], float | None]]] = {
    "final_val_loss": (
        "final validation loss (nats/byte; diverged = ln V)",
        _loss("final_val_loss"),
    ),
    "final_val_loss_train_mode": (
        "final validation loss in train mode (batch statistics; diverged = ln V)",
        _loss("final_val_loss_train_mode"),
    ),
    "abs_train_eval_gap": (
        "|final val loss in eval mode − in train mode| (running vs batch statistics)",
        _gap("final_val_loss", "final_val_loss_train_mode", size=True),
    ),
    "abs_train_eval_gap_short": (
        "the same gap on the validation sequences cut to the run's shortest eval_lengths (served "
        "at a length it was not trained at)",
        _abs_gap_short,
    ),
    # The serving measures (TrainConfig.eval_serving; normlab.lab.train.serving).
    "batchmate_shift_train": (
        "mean ‖Δlogits‖ / ‖logits‖ of a sequence when all its batch-mates change, train mode "
        "(batch statistics)",
        _summary("batchmate_shift_train"),
    ),
    "batchmate_shift_eval": (
        "mean ‖Δlogits‖ / ‖logits‖ of a sequence when all its batch-mates change, eval mode "
        "(running statistics)",
        _summary("batchmate_shift_eval"),
    ),
    "forgot_eval_gap": (
        "validation loss at batch 1 in train mode − in eval mode, the same bytes (model.eval() "
        "forgotten)",
        _summary("forgot_eval_gap"),
    ),
    "padding_gap_train": (
        "a whole sequence's loss with its batch-mates cut short and right-padded − with them "
        "whole, train mode",
        _summary("padding_gap_train"),
    ),
    "padding_gap_eval": (
        "a whole sequence's loss with its batch-mates cut short and right-padded − with them "
        "whole, eval mode",
        _summary("padding_gap_eval"),
    ),
    "log_logit_rms_drift": (
        "ln(RMS of the output logits at the last probe / at step 0): the output scale's drift",
        _drift(lambda end, init: math.log(end["logit_rms"] / init["logit_rms"])),
    ),
    "log_resid_growth_drift": (
        "ln(the stream's growth across the blocks at the last probe / at step 0), the growth "
        "of the residual RMS that training brings",
        _drift(lambda end, init: _resid_growth(end) - _resid_growth(init)),
    ),
    "norm_weight_mean": ("mean |gain| of the norms after training", _summary("norm_weight_mean")),
    "log_grad_ratio": ("ln(‖∇‖ of the last block / the first), at init", _log_ratio),
    "log_grad_trend": (
        "ln(last/first) of the least-squares line through ln ‖∇‖ over the blocks, at init",
        _log_trend,
    ),
    "log_grad_spread": ("ln(max/min over blocks of ‖∇‖), at init", _log_spread),
    "attn_branch_ratio": (
        "Var f / Var(x + f) of the attention sublayers at init, mean over blocks (f: what the "
        "branch adds to its skip x)",
        _branch_ratio("attn"),
    ),
    "mlp_branch_ratio": (
        "Var f / Var(x + f) of the MLP sublayers at init, mean over blocks",
        _branch_ratio("mlp"),
    ),
    # the probe at the latest step (``_end``)
    "log_attn_logit_max_end": (
        "ln(largest attention logit over the layers), end of training",
        _end(lambda p: math.log(max(values(p, "attn_logit_max")))),
    ),
    "log_logit_rms_end": (
        "ln(RMS of the output logits), end of training",
        _end(lambda p: math.log(p["logit_rms"])),
    ),
    "log_resid_growth_end": (
        "ln(residual RMS after the last block / after the first), end of training",
        _end(_resid_growth),
    ),
    "log_massive_end": (
        "ln(max over blocks of max|h| / median|h|), end of training",
        _end(lambda p: math.log(max(values(p, "massive")))),
    ),
    "log_grad_spread_end": (
        "ln(max/min over blocks of the block gradient norm), end of training",
        _end(_grad_spread),
    ),
    "deep_cos_end": (
        "mean cosine between consecutive blocks' outputs over the last quarter of blocks, end "
        "of training (near 1: the deep blocks change the stream little)",
        _end(_deep_cos),
    ),
    # the output's range (000 §8.1: a final norm keeps it stable; probes at several steps)
    "log_logit_absmax_end": (
        "ln(largest |logit| on the probe batch), end of training: the output's range",
        _end(lambda p: math.log(p["logit_absmax"])),
    ),
    "log_logit_absmax_drift": (
        "ln(largest |logit| at the last probe / at step 0): how much training grew the output's "
        "range",
        _drift(lambda end, init: math.log(end["logit_absmax"] / init["logit_absmax"])),
    ),
    "log_logit_rms_spread": (
        "ln(max / min of the logits' RMS over the probes taken during training, steps ≥ 1): how "
        "much the output scale moves while the model trains",
        over_training(lambda ps: log_max_over_min([float(p["logit_rms"]) for p in ps])),
    ),
    # 000 §5.2's gradient ∂loss/∂x_l of each block's input x_l (Probes.input_grad_norm)
    "log_input_grad_min": (
        "ln(min over blocks 1 … L−1 of ‖∂loss/∂x_l‖ / ‖∂loss/∂x_{L−1}‖) at init: how far the "
        "gradient falls on its way back from the last block's input (x_0, the embedding "
        "output, left out)",
        at_init(input_grad_min),
    ),
    "log_input_grad_min_train": (
        "the same, mean over the probes taken during training (steps ≥ 1)",
        over_training(lambda ps: statistics.fmean(input_grad_min(p) for p in ps)),
    ),
    "log_input_grad_ratio": (
        "ln(‖∂loss/∂x_1‖ / ‖∂loss/∂x_{L−1}‖) at init: the gradient's change from the last block's "
        "input back to the first block's output (< 0: it vanishes, > 0: it grows)",
        at_init(input_grad_ratio),
    ),
    "log_input_grad_ratio_train": (
        "the same, mean over the probes taken during training (steps ≥ 1)",
        over_training(lambda ps: statistics.fmean(input_grad_ratio(p) for p in ps)),
    ),
    # DeepNet's early training (the probes of the first steps)
    "log_update_early": (
        f"ln of the largest model update RMS(F(x, θ_t) − F(x, θ_0)) of the output logits on the "
        f"probe batch, over the probes at steps 1 … {UPDATE_WINDOW} (DeepNet's update bound)",
        log_update(UPDATE_WINDOW),
    ),
    "log_update_first20": (
        f"ln of the largest model update RMS(F(x, θ_t) − F(x, θ_0)) of the output logits on the "
        f"probe batch over steps 1 … {FIRST_STEPS} (DeepNet's blow-up is in the first steps)",
        log_update(FIRST_STEPS),
    ),
    "log_ln_input_growth_first20": (
        f"ln(largest mean RMS of the LayerNorm inputs x + f over steps 1 … {FIRST_STEPS} / at "
        "init; the residual sums, the LayerNorm's input under Post-LN and DeepNorm)",
        log_ln_input_growth_first,
    ),
    # read from what a run computes on demand (TrainConfig.block_drop_batches, train_slice)
    "gap_at_matched_train_loss": (
        f"val − train loss where the loss on the training bytes first reaches "
        f"{MATCHED_TRAIN_LOSS:g} nats/byte (eval mode, linear between validations; needs "
        "train_slice and eval_interval): the gap at equal fit",
        _gap_at_matched_train_loss,
    ),
    "block_drop_mean": (
        "mean over blocks of the validation loss increase when that one block is skipped (needs "
        "block_drop_batches): how much work each block does",
        _block_drop_mean,
    ),
    "train_val_gap": (
        "final val loss − final loss on the training bytes (eval mode; needs train_slice): the "
        "generalization gap",
        _gap("final_val_loss", "final_train_loss"),
    ),
}
