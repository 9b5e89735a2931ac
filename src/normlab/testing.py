"""Tolerances and the error bound every kernel is tested with (used by tests and benchmarks).

A kernel passes when it is (1) close to the same-dtype reference within ``TOLERANCES[dtype]`` and
(2) no less accurate than eager PyTorch at that dtype: measured against a float64 truth,
``max|kernel - truth| <= 2 * max|eager - truth| + atol``.
"""

from __future__ import annotations

import torch
from torch import Tensor

# One row per dtype; rtol is about one unit in the last place of the dtype (a different but
# correct rounding of the same math), atol covers outputs near zero.
TOLERANCES: dict[torch.dtype, dict[str, float]] = {
    torch.float64: {"atol": 1e-10, "rtol": 1e-10},
    torch.float32: {"atol": 1e-5, "rtol": 1e-5},
    torch.float16: {"atol": 1e-3, "rtol": 1e-3},
    torch.bfloat16: {"atol": 8e-3, "rtol": 1.6e-2},
}


def max_abs_error(actual: Tensor, truth: Tensor) -> float:
    """``max|actual - truth|`` in float64, NaN-aware (a NaN where the truth is finite is inf)."""
    if actual.numel() == 0:
        return 0.0
    diff = (actual.double() - truth.double()).abs()
    both_nan = actual.isnan() & truth.isnan()
    diff = torch.where(both_nan, torch.zeros_like(diff), diff.nan_to_num(nan=float("inf")))
    return diff.max().item()


def assert_kernel_close(actual: Tensor, expected: Tensor, truth: Tensor, name: str = "") -> None:
    """Check ``actual`` (a kernel's output) against ``expected`` (the same-dtype reference) and
    ``truth`` (the float64 reference) with the tolerance table and the 2x-eager error bound."""
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        raise AssertionError(
            f"{name}: got {actual.dtype} {tuple(actual.shape)}, "
            f"expected {expected.dtype} {tuple(expected.shape)}"
        )
    tol = TOLERANCES[actual.dtype]
    torch.testing.assert_close(
        actual, expected, **tol, equal_nan=True, msg=lambda m: f"{name}: {m}"
    )
    k_err, e_err = max_abs_error(actual, truth), max_abs_error(expected, truth)
    if not k_err <= 2 * e_err + tol["atol"]:
        raise AssertionError(
            f"{name}: kernel error {k_err:.3e} > 2 x eager error {e_err:.3e} + atol {tol['atol']}"
        )
