"""Host launchers for the Triton norm kernels: views, launch configs, grids, partial sums.

``norm_fwd``/``norm_bwd`` take tensors of shape ``(..., N)`` and return freshly allocated
outputs; they know nothing of autograd (``normlab.kernels.triton.backend`` wires them up).
"""

from __future__ import annotations

import dataclasses
import functools
import os

import torch
import triton
from torch import Tensor

from normlab.kernels.triton import tuning
from normlab.kernels.triton.kernels import CASTING_CODES, norm_bwd_kernel, norm_fwd_kernel
from normlab.kernels.triton.tuning import LaunchConfig

__all__ = ["LaunchConfig", "as_rows", "norm_bwd", "norm_fwd", "pick_config"]


# Test hooks, None in use: a row longer than MAX_FUSED_* (or LOOP_BLOCK-column chunks) forces
# the looped path at small N, which the interpreter can afford.
MAX_FUSED_FWD: int | None = None
MAX_FUSED_BWD: int | None = None
LOOP_BLOCK: int | None = None


def pick_config(n: int, *, backward: bool = False) -> LaunchConfig:
    """Block sizes, warps and grid for rows of ``n`` elements: the tuning table's row."""
    limit = MAX_FUSED_BWD if backward else MAX_FUSED_FWD
    tune = tuning.row(n, backward)
    if limit is not None and triton.next_power_of_2(n) > limit and not tune.looped:
        tune = tuning.table(backward)[-1]
    cfg = tune.config(n)
    if cfg.looped and LOOP_BLOCK is not None:
        cfg = dataclasses.replace(cfg, block_n=LOOP_BLOCK)
    return cfg


@functools.cache
def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


# A backward program keeps at least this many rows, so the (G, N) partial sums it writes stay a
# small fraction (<= 1/16) of the M x N it streams.
_MIN_ROWS_PER_PROGRAM = 16


def _persistent_programs(device: torch.device, cfg: LaunchConfig, m: int) -> int:
    """Backward grid size: ``programs_per_sm`` programs per SM, fewer where each would keep
    under 16 rows (but one per SM at least). The CPU interpreter runs programs one after
    another: there a few suffice (``NORMLAB_TRITON_PROGRAMS``, default 4)."""
    if device.type != "cuda":
        return int(os.environ.get("NORMLAB_TRITON_PROGRAMS", "4"))
    sms = _sm_count(device)
    return max(sms, min(sms * cfg.programs_per_sm, m // _MIN_ROWS_PER_PROGRAM))


def _interpreted(device: torch.device) -> None:
    """Before a launch on CPU tensors, which only Triton's interpreter runs: its two fixes."""
    if device.type == "cpu":
        from normlab.kernels.triton import interpreter

        interpreter.round_bf16_to_nearest_even()
        interpreter.reduce_sums_with_numpy()


def as_rows(t: Tensor) -> Tensor:
    """``t`` as an ``(M, N)`` view with unit column stride; copies only when no such view exists
    (a transposed last dimension, or leading dims that do not collapse)."""
    n = t.shape[-1]
    rows = t.reshape(-1, n)
    if rows.stride(-1) != 1 and n > 1:
        rows = rows.contiguous()
    return rows


def norm_fwd(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    residual: Tensor | None,
    eps: float,
    *,
    is_rms: bool,
    out_dtype: torch.dtype,
    offset: float = 0.0,
    casting: str = "llama",
    eps_inside: bool = True,
    config: LaunchConfig | None = None,
) -> tuple[Tensor, Tensor | None, Tensor | None, Tensor]:
    """Forward launch. Returns ``(y, h, mean, rstd)``: ``y`` shaped like ``x`` in ``out_dtype``,
    ``h = x + residual`` in ``residual.dtype`` (None without a residual), FP32 ``(M,)`` stats
    (``mean`` is None for RMSNorm)."""
    n = x.shape[-1]
    x2 = as_rows(x)  # (M, N)
    m = x2.shape[0]
    y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    h = None if residual is None else torch.empty(x.shape, dtype=residual.dtype, device=x.device)
    mean = None if is_rms else torch.empty(m, dtype=torch.float32, device=x.device)
    rstd = torch.empty(m, dtype=torch.float32, device=x.device)
    if m == 0:
        return y, h, mean, rstd
    _interpreted(x.device)
    r2 = x2 if residual is None else as_rows(residual)
    h2 = x2 if h is None else h.view(-1, n)  # the kernel reads h's dtype from this pointer
    cfg = config or pick_config(n)
    grid = (triton.cdiv(m, cfg.block_m),)
    norm_fwd_kernel[grid](
        x2,
        r2,
        h2,
        x2 if weight is None else weight,
        x2 if bias is None else bias,
        y.view(-1, n),
        rstd if mean is None else mean,
        rstd,
        x2.stride(0),
        r2.stride(0),
        n,
        n,
        m,
        n,
        float(eps),
        float(offset),
        IS_RMS=is_rms,
        HAS_RES=residual is not None,
        HAS_W=weight is not None,
        HAS_B=bias is not None,
        CASTING=CASTING_CODES[casting],
        EPS_INSIDE=eps_inside,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        LOOPED=cfg.looped,
        num_warps=cfg.num_warps,
    )
    return y, h, mean, rstd


def _partials(device, n_prog: int, n: int, zeroed: bool, weight, has_bias: bool):
    """(G, N) FP32 partial sums of dweight and dbias, one row per program (None where absent);
    ``zeroed`` for the looped path, which accumulates in place."""
    alloc = torch.zeros if zeroed else torch.empty
    part = lambda: alloc((n_prog, n), dtype=torch.float32, device=device)  # noqa: E731
    return (None if weight is None else part()), (part() if has_bias else None)


def norm_bwd(
    dy: Tensor,
    dh_out: Tensor | None,
    h: Tensor,
    weight: Tensor | None,
    mean: Tensor | None,
    rstd: Tensor,
    *,
    is_rms: bool,
    has_bias: bool,
    offset: float = 0.0,
    casting: str = "llama",
    eps_inside: bool = True,
    config: LaunchConfig | None = None,
    bias: Tensor | None = None,
    dh_dtype: torch.dtype | None = None,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Backward launch. ``h`` is the normalized input (``x``, or the ``h`` the forward wrote),
    ``dh_out`` the incoming gradient of the returned ``h`` (or None). Returns
    ``(dh, dweight, dbias)``: ``dh`` in ``h.dtype`` shaped like ``h``, ``dweight`` and ``dbias``
    FP32 (None when absent).

    ``dh_dtype`` given means the memory-efficient backward: ``h`` is then the forward's output
    y, xhat is recovered as ``(y - bias) / gain`` (``mean`` is not read) and ``dh`` comes out
    in ``dh_dtype``."""
    n = h.shape[-1]
    h2, dy2 = as_rows(h), as_rows(dy)  # (M, N)
    m = h2.shape[0]
    from_y = dh_dtype is not None
    dh = torch.empty(h.shape, dtype=dh_dtype if from_y else h.dtype, device=h.device)
    cfg = config or pick_config(n, backward=True)
    n_tiles = triton.cdiv(m, cfg.block_m)
    n_prog = max(1, min(n_tiles, _persistent_programs(h.device, cfg, m)))
    dw_part, db_part = _partials(h.device, n_prog, n, cfg.looped or m == 0, weight, has_bias)
    if m > 0:
        _interpreted(h.device)
        dho2 = dy2 if dh_out is None else as_rows(dh_out)
        # No FMA contraction for LayerNorm: its dh subtracts the row mean of dy * w from each
        # dy * w, and fusing one product into that subtraction leaves its rounding error, times
        # rstd, where the difference is exactly 0 (one-element rows). The kernel is
        # memory-bound; RMSNorm has no such cancellation and keeps the FMAs.
        norm_bwd_kernel[(n_prog,)](
            h2,
            h2 if weight is None else weight,
            h2 if bias is None else bias,
            rstd if mean is None else mean,
            rstd,
            dy2,
            dho2,
            dh.view(-1, n),
            h2 if dw_part is None else dw_part,
            h2 if db_part is None else db_part,
            h2.stride(0),
            dy2.stride(0),
            dho2.stride(0),
            n,
            m,
            n,
            float(offset),
            IS_RMS=is_rms,
            HAS_W=weight is not None,
            HAS_B=has_bias,
            HAS_DHO=dh_out is not None,
            CASTING=CASTING_CODES[casting],
            EPS_INSIDE=eps_inside,
            FROM_Y=from_y,
            BLOCK_M=cfg.block_m,
            BLOCK_N=cfg.block_n,
            LOOPED=cfg.looped,
            PREFETCH=cfg.prefetch and not cfg.looped,
            num_warps=cfg.num_warps,
            enable_fp_fusion=is_rms,
        )
    # Second step of the reduction: G x N, small next to the M x N the kernel streamed.
    dw = None if dw_part is None else dw_part.sum(0)
    db = None if db_part is None else db_part.sum(0)
    return dh, dw, db
