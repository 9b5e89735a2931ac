"""The primitives every measure reads a run with (``finite``, ``values``, what a missing probe
raises), and the measures of the probes: the gradients and branches at init; over training, the
output's range and 000 §5.2's ∂loss/∂x_l (steps ≥ 1, and at init); DeepNet's early training.
``measures.MEASURES`` names them."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from typing import Any

from normlab.lab.study.decide.measure_needs import Measured
from normlab.lab.train.result import RunResult


def finite(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


MISSING = (KeyError, TypeError, ValueError, ZeroDivisionError)  # a probe missing or not finite


def value_of(fn: Callable[..., float], *args: Any) -> float | None:
    """``fn(*args)`` if it is a finite number; None where what it reads is missing or not finite
    (``MISSING``)."""
    try:
        return finite(fn(*args))
    except MISSING:
        return None


def values(probe: dict, key: str) -> list[float]:
    vals = probe.get(key) or []
    if not vals or any(v is None for v in vals):
        raise ValueError(key)
    return [float(v) for v in vals]


def over_training(fn: Callable[[list[dict]], float]) -> Measured:
    """A measure of the probes taken during training (steps ≥ 1, after an update), in step
    order: ``fn(those probes)``."""

    def measure(res: RunResult, matrix: str | None) -> float | None:
        probes = res.probes if res.status == "ok" else {}
        during = [probes[t] for t in sorted(probes, key=int) if int(t) > 0]
        return value_of(fn, during) if during else None

    return measure


def _stream_grads(p: dict) -> list[float]:
    """‖∂loss/∂x_i‖ of the inputs of blocks 1 … L−1: the residual stream between blocks (block
    0's input is the embedding output, whose size the embedding init sets, not the blocks)."""
    g = values(p, "input_grad_norm")[1:]
    if not g or min(g) <= 0:
        raise ValueError("input_grad_norm")
    return g


def input_grad_min(p: dict) -> float:
    """ln(min over the stream of ‖∂loss/∂x_i‖ / ‖∂loss/∂x_{L−1}‖): how far the gradient falls
    on its way back from the last block's input (0 where it never falls below it)."""
    g = _stream_grads(p)
    return math.log(min(g) / g[-1])


def input_grad_ratio(p: dict) -> float:
    """ln(‖∂loss/∂x_1‖ / ‖∂loss/∂x_{L−1}‖): the gradient's change from the last block's input
    back to the first block's output (< 0: it vanishes on the way, > 0: it grows)."""
    g = _stream_grads(p)
    return math.log(g[0] / g[-1])


def at_init(fn: Callable[[dict], float]) -> Measured:
    def measure(res: RunResult, matrix: str | None) -> float | None:
        probe = res.probes.get("0")
        return value_of(fn, probe) if probe else None

    return measure


def grad_profile(res: RunResult, matrix: str | None) -> list[float]:
    """Per-block gradient norms from the probe at init (a matrix, or whole blocks)."""
    probe = res.probes.get("0") or {}
    if matrix is None:
        prof = probe.get("grad_norm_block") or []
    else:
        prof = (probe.get("grad_norm") or {}).get(matrix) or []
    return [float(v) for v in prof if v is not None]


def log_grad_ratio(res: RunResult, matrix: str | None) -> float | None:
    prof = grad_profile(res, matrix)
    ok = len(prof) >= 2 and prof[0] > 0 and prof[-1] > 0
    return math.log(prof[-1] / prof[0]) if ok else None


def log_grad_trend(res: RunResult, matrix: str | None) -> float | None:
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


def log_grad_spread(res: RunResult, matrix: str | None) -> float | None:
    prof = grad_profile(res, matrix)
    return math.log(max(prof) / min(prof)) if len(prof) >= 2 and min(prof) > 0 else None


def branch_ratio(sublayer: str) -> Measured:
    """Var f / Var(x + f) of the ``sublayer`` branches at init, the mean over the blocks."""
    return at_init(lambda p: statistics.fmean(p["branch_ratio"][sublayer]))


def log_max_over_min(values: list[float]) -> float:
    return math.log(max(values) / min(values))


# DeepNet's measures of early training (Wang et al. 2022): the model update
# ‖F(x, θ_t) − F(x, θ_0)‖ and the LayerNorm inputs, read from the probes a run takes in its first
# steps (``probe_steps``; ``Probes`` records ``output_change`` and ``sum_rms``).
UPDATE_WINDOW = 100  # DeepNet's early training: the model update is read over these first steps
FIRST_STEPS = 20  # DeepNet's blow-up: the model update and the LayerNorm inputs, steps 1 … 20


def _first_steps(res: RunResult, window: int) -> tuple[dict, list[dict]] | None:
    """The probe at init and those at steps 1 … ``window`` (None: a run without them)."""
    probes = res.probes
    early = [p for t, p in probes.items() if 0 < int(t) <= window]
    if res.status != "ok" or "0" not in probes or not early:
        return None
    return probes["0"], early


def log_update(window: int):
    """ln of the largest model update ‖F(θ_t) − F(θ_0)‖ (RMS over the probe batches' logits)
    among the probes at steps 1 … ``window``."""

    def measure(res: RunResult, matrix: str | None) -> float | None:
        got = _first_steps(res, window)
        vals = [p.get("output_change") for p in got[1]] if got else []
        vals = [v for v in vals if isinstance(v, int | float) and v > 0]
        return finite(math.log(max(vals))) if vals else None

    return measure


def _ln_input(p: dict) -> float:
    """The mean RMS of the residual sums x + f over every sublayer of every block."""
    vals = p["sum_rms"]["attn"] + p["sum_rms"]["mlp"]
    return statistics.fmean(float(v) for v in vals)  # a None (a missing value): TypeError


def log_ln_input_growth_first(res: RunResult, matrix: str | None) -> float | None:
    """ln(the largest mean LayerNorm input RMS over steps 1 … 20 / the one at init)."""
    got = _first_steps(res, FIRST_STEPS)
    if got is None:
        return None
    init, early = got
    return value_of(lambda: math.log(max(map(_ln_input, early)) / _ln_input(init)))
