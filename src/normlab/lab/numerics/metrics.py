"""Error measures of ``normlab numerics``: an output in a low-precision dtype against a float64
truth. Kept apart from the sweep so tests can check the definitions on hand-made tensors.

The arithmetic is NumPy float64: single-threaded and cheap per call, which matters when a sweep
scores thousands of small tensors on a busy machine.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor


def ulp(t: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """The spacing of ``dtype`` at ``|t|`` (float64): ``2^floor(log2|t|) * eps`` for normal
    values; below the smallest normal (zero included) the fixed subnormal spacing
    ``tiny * eps``, the gap between neighbouring subnormals."""
    fi = torch.finfo(dtype)
    a = np.abs(t)
    _, e = np.frexp(a)  # a = m * 2^e, m in [0.5, 1)
    return np.where(a < fi.tiny, fi.tiny * fi.eps, np.ldexp(fi.eps, e - 1))


def _stats(v: np.ndarray) -> tuple[float | None, float | None]:
    return (float(v.max()), float(v.mean())) if v.size else (None, None)


def error_metrics(actual: Tensor, truth: Tensor) -> dict:
    """Errors of ``actual`` (its dtype is the output dtype) against ``truth`` (float64), both
    ``(..., N)``; a 1-D tensor (``dweight``) is one row.

    - scored elements: truth finite and ``|t| <= finfo.max`` (``n``; the rest are
      ``unrepresentable``) and, for the error statistics, a finite output;
    - ``nonfinite``: inf/NaN outputs where the truth is representable;
    - ``zeroed``: outputs exactly 0 where the truth is at least 1 % of the row's largest
      ``|t|`` (the signature of an overflowed statistic: ``x * rsqrt(inf) = 0``);
    - ``max_rel``/``mean_rel``: ``|a - t| / max_row|t|``, normwise per row, so an output that
      cancels to ~0 in ``x̂·w + b`` does not read as a 100 % error (a row whose truth is all
      zero, e.g. LayerNorm's ``dweight`` on constant rows, uses 1: the absolute error);
    - ``max_ulp``/``mean_ulp``: ``|a - t| / ulp(t)`` elementwise (see :func:`ulp`);
    - ``row_ulp``: ``max_row|a - t| / ulp(max_row|t|)`` (``ulp(1)`` for an all-zero row), the
      largest over rows: the error in ulps at the scale of the row;
    - ``max_abs``/``truth_max_abs``: largest finite ``|a|`` and largest finite ``|t|``.
    """
    fi = torch.finfo(actual.dtype)
    n = actual.shape[-1]
    a = actual.detach().double().cpu().numpy().reshape(-1, n)  # (rows, N)
    t = truth.detach().double().cpu().numpy().reshape(-1, n)
    with np.errstate(invalid="ignore", over="ignore"):
        ta, a_fin, t_fin = np.abs(t), np.isfinite(a), np.isfinite(t)
        rep = t_fin & (ta <= fi.max)
        fin = rep & a_fin
        err = np.where(fin, np.abs(a - t), 0.0)
        row_max = np.where(rep, ta, 0.0).max(-1, keepdims=True)  # (rows, 1)
        scale = np.where(row_max > 0, row_max, 1.0)  # an all-zero truth row: absolute error
        max_rel, mean_rel = _stats((err / scale)[fin])
        max_ulp, mean_ulp = _stats(err[fin] / ulp(t[fin], actual.dtype))
        row_ulp = float((err.max(-1, keepdims=True) / ulp(scale, actual.dtype)).max())
        zeroed = fin & (ta >= 0.01 * row_max) & (t != 0) & (a == 0)
    return {
        "n": int(rep.sum()),
        "unrepresentable": int((~rep).sum()),
        "nonfinite": int((rep & ~a_fin).sum()),
        "zeroed": int(zeroed.sum()),
        "max_rel": max_rel,
        "mean_rel": mean_rel,
        "max_ulp": max_ulp,
        "mean_ulp": mean_ulp,
        "row_ulp": row_ulp,
        "max_abs": float(np.abs(a[a_fin]).max()) if a_fin.any() else None,
        "truth_max_abs": float(ta[t_fin].max()) if t_fin.any() else None,
    }
