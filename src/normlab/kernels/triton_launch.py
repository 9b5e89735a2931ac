"""Host launchers for the Triton norm kernels: views, block-size table, grids, partial sums.

``norm_fwd``/``norm_bwd`` take tensors of shape ``(..., N)`` and return freshly allocated
outputs; they know nothing of autograd (``normlab.kernels.triton_ops`` wires them up).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import torch
from torch import Tensor

from normlab.kernels.triton_gpu import CASTING_CODES, _norm_bwd_kernel, _norm_fwd_kernel


@dataclass(frozen=True)
class LaunchConfig:
    """How one kernel launch tiles the ``(M, N)`` problem."""

    block_m: int  # rows per program (per tile in the backward)
    block_n: int  # columns per block: the whole row, or the chunk of the looped path
    num_warps: int
    looped: bool  # stream the row in block_n chunks instead of holding it in registers


# Rows up to this many elements are held in registers; longer rows take the looped path.
# The backward keeps ~4 row-sized FP32 arrays live (h, dy, dweight and dbias sums), so its limit
# is lower than the forward's, which keeps ~2.
MAX_FUSED_FWD = 32768
MAX_FUSED_BWD = 16384
LOOP_BLOCK = 4096  # chunk of the looped path: 16 KB of FP32 per row in flight

# (largest BLOCK_N, warps). Warps grow with the row so each thread holds 8-64 elements: enough
# for 16-byte vector loads, not so many that registers spill.
_WARPS = ((1024, 4), (4096, 8), (1 << 62, 16))
# Small rows share a program so that each one moves at least this many elements; otherwise a
# 1K-wide row is a tiny program and the launch grid, not the memory, sets the pace.
_TILE_FWD = 4096
_TILE_BWD = 2048
_MAX_BLOCK_M = 64


def _warps(block_n: int, block_m: int) -> int:
    return next(w for limit, w in _WARPS if block_m * block_n <= limit)


def pick_config(n: int, *, backward: bool = False) -> LaunchConfig:
    """Block sizes and warps for rows of ``n`` elements, from the table above."""
    limit = MAX_FUSED_BWD if backward else MAX_FUSED_FWD
    block_n = triton_next_pow2(n)
    if block_n > limit:
        return LaunchConfig(1, LOOP_BLOCK, _warps(LOOP_BLOCK, 1), looped=True)
    tile = _TILE_BWD if backward else _TILE_FWD
    block_m = max(1, min(_MAX_BLOCK_M, tile // block_n))
    return LaunchConfig(block_m, block_n, _warps(block_n, block_m), looped=False)


def triton_next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


@functools.lru_cache(maxsize=None)
def _persistent_programs(device: torch.device) -> int:
    """Backward grid size: enough programs to fill every SM twice, so one that stalls on memory
    leaves another resident. The CPU interpreter runs programs one after another: a few suffice."""
    if device.type == "cuda":
        return 2 * torch.cuda.get_device_properties(device).multi_processor_count
    return int(os.environ.get("NORMLAB_TRITON_PROGRAMS", "4"))


def as_rows(t: Tensor) -> Tensor:
    """``t`` as an ``(M, N)`` view with unit column stride; copies only when no such view exists
    (a transposed last dimension, or leading dims that do not collapse)."""
    n = t.shape[-1]
    rows = t.reshape(-1, n)
    if rows.stride(-1) != 1 and n > 1:
        rows = rows.contiguous()
    return rows


def _row_stride(rows: Tensor) -> int:
    # One row (or an N=1 column) may report any stride; give the kernel the honest one.
    return rows.stride(0) if rows.shape[0] > 1 else rows.shape[-1]


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
) -> tuple[Tensor, Tensor | None, Tensor, Tensor]:
    """Forward launch. Returns ``(y, h, mean, rstd)``: ``y`` shaped like ``x`` in ``out_dtype``,
    ``h = x + residual`` in ``residual.dtype`` (None without a residual), FP32 ``(M,)`` stats
    (``mean`` is zeros for RMSNorm)."""
    n = x.shape[-1]
    x2 = as_rows(x)  # (M, N)
    m = x2.shape[0]
    y = torch.empty(x.shape, dtype=out_dtype, device=x.device)
    h = None if residual is None else torch.empty(x.shape, dtype=residual.dtype, device=x.device)
    mean = torch.zeros(m, dtype=torch.float32, device=x.device)
    rstd = torch.empty(m, dtype=torch.float32, device=x.device)
    if m == 0:
        return y, h, mean, rstd
    r2 = x2 if residual is None else as_rows(residual)
    h2 = x2 if h is None else h.view(-1, n)  # the kernel reads h's dtype from this pointer
    cfg = config or pick_config(n)
    grid = (triton.cdiv(m, cfg.block_m),)
    _norm_fwd_kernel[grid](
        x2, r2, h2, x2 if weight is None else weight, x2 if bias is None else bias,
        y.view(-1, n), mean, rstd,
        _row_stride(x2), _row_stride(r2), n, n,
        m, n, float(eps), float(offset),
        IS_RMS=is_rms, HAS_RES=residual is not None, HAS_W=weight is not None,
        HAS_B=bias is not None, CASTING=CASTING_CODES[casting], EPS_INSIDE=eps_inside,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, LOOPED=cfg.looped, num_warps=cfg.num_warps,
    )  # fmt: skip
    return y, h, mean, rstd


def norm_bwd(
    dy: Tensor,
    dh_out: Tensor | None,
    h: Tensor,
    weight: Tensor | None,
    mean: Tensor,
    rstd: Tensor,
    *,
    is_rms: bool,
    has_bias: bool,
    offset: float = 0.0,
    casting: str = "llama",
    eps_inside: bool = True,
    config: LaunchConfig | None = None,
) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """Backward launch. ``h`` is the normalized input (``x``, or the ``h`` the forward wrote),
    ``dh_out`` the incoming gradient of the returned ``h`` (or None). Returns
    ``(dh, dweight, dbias)``: ``dh`` in ``h.dtype`` shaped like ``h``, ``dweight`` in
    ``weight.dtype``, ``dbias`` FP32 (None when absent)."""
    n = h.shape[-1]
    h2, dy2 = as_rows(h), as_rows(dy)  # (M, N)
    m = h2.shape[0]
    dh = torch.empty(h.shape, dtype=h.dtype, device=h.device)
    cfg = config or pick_config(n, backward=True)
    n_prog = max(1, min(triton.cdiv(m, cfg.block_m), _persistent_programs(h.device)))
    # (G, N) FP32 partial sums, one row per program; the looped path accumulates in place.
    alloc = torch.zeros if cfg.looped else torch.empty
    dw_part = alloc((n_prog, n), dtype=torch.float32, device=h.device) if weight is not None else None
    db_part = alloc((n_prog, n), dtype=torch.float32, device=h.device) if has_bias else None
    if m > 0:
        dho2 = dy2 if dh_out is None else as_rows(dh_out)
        _norm_bwd_kernel[(n_prog,)](
            h2, h2 if weight is None else weight, mean, rstd, dy2, dho2, dh.view(-1, n),
            h2 if dw_part is None else dw_part, h2 if db_part is None else db_part,
            _row_stride(h2), _row_stride(dy2), _row_stride(dho2), n,
            m, n, 0.0, float(offset),
            IS_RMS=is_rms, HAS_W=weight is not None, HAS_B=has_bias, HAS_DHO=dh_out is not None,
            CASTING=CASTING_CODES[casting], EPS_INSIDE=eps_inside,
            BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, LOOPED=cfg.looped, num_warps=cfg.num_warps,
        )  # fmt: skip
    elif dw_part is not None or db_part is not None:
        dw_part = None if dw_part is None else dw_part.zero_()
        db_part = None if db_part is None else db_part.zero_()
    # Second step of the reduction: G x N, small next to the M x N the kernel streamed.
    dw = None if dw_part is None else dw_part.sum(0).to(weight.dtype)
    db = None if db_part is None else db_part.sum(0)
    return dh, dw, db
