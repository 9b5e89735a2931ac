"""DeepNet's measures of early training (Wang et al. 2022): the model update
‖F(x, θ_t) − F(x, θ_0)‖ and the LayerNorm inputs, read from the probes a run takes in its first
steps (``probe_steps``; ``Probes`` records ``output_change`` and ``sum_rms``)."""

from __future__ import annotations

import math
import statistics
from typing import Any

UPDATE_WINDOW = 100  # DeepNet's early training: the model update is read over these first steps
FIRST_STEPS = 20  # DeepNet's blow-up: the model update and the LayerNorm inputs, steps 1 … 20


def finite(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def _first_steps(res: dict, window: int) -> tuple[dict, list[dict]] | None:
    """The probe at init and those at steps 1 … ``window`` (None: a run without them)."""
    probes = res.get("probes") or {}
    early = [p for t, p in probes.items() if 0 < int(t) <= window]
    if res.get("status") != "ok" or "0" not in probes or not early:
        return None
    return probes["0"], early


def _log_update(window: int):
    """ln of the largest model update ‖F(θ_t) − F(θ_0)‖ (RMS over the probe batches' logits)
    among the probes at steps 1 … ``window``."""

    def measure(res: dict, matrix: str | None) -> float | None:
        got = _first_steps(res, window)
        vals = [p.get("output_change") for p in got[1]] if got else []
        vals = [v for v in vals if isinstance(v, int | float) and v > 0]
        return finite(math.log(max(vals))) if vals else None

    return measure


def _ln_input(p: dict) -> float:
    """The mean RMS of the residual sums x + f over every sublayer of every block."""
    vals = p["sum_rms"]["attn"] + p["sum_rms"]["mlp"]
    return statistics.fmean(float(v) for v in vals)  # a None (a missing value): TypeError


def _log_ln_input_growth_first(res: dict, matrix: str | None) -> float | None:
    """ln(the largest mean LayerNorm input RMS over steps 1 … 20 / the one at init)."""
    got = _first_steps(res, FIRST_STEPS)
    if got is None:
        return None
    try:
        return finite(math.log(max(_ln_input(p) for p in got[1]) / _ln_input(got[0])))
    except (KeyError, TypeError, ValueError, ZeroDivisionError):  # a probe missing
        return None


EARLY_MEASURES = {
    "log_update_early": (
        f"ln of the largest model update RMS(F(x, θ_t) − F(x, θ_0)) of the output logits on the "
        f"probe batch, over the probes at steps 1 … {UPDATE_WINDOW} (DeepNet's update bound)",
        _log_update(UPDATE_WINDOW),
    ),
    "log_update_first20": (
        f"ln of the largest model update RMS(F(x, θ_t) − F(x, θ_0)) of the output logits on the "
        f"probe batch over steps 1 … {FIRST_STEPS} (DeepNet's blow-up is in the first steps)",
        _log_update(FIRST_STEPS),
    ),
    "log_ln_input_growth_first20": (
        f"ln(largest mean RMS of the LayerNorm inputs x + f over steps 1 … {FIRST_STEPS} / at "
        "init; the residual sums, the LayerNorm's input under Post-LN and DeepNorm)",
        _log_ln_input_growth_first,
    ),
}
