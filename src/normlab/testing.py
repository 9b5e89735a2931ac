"""Tolerances and the error bound every kernel is tested with (used by tests and benchmarks).

A kernel passes when it is (1) close to the same-dtype reference within ``TOLERANCES[dtype]`` and
(2) no less accurate than eager PyTorch at that dtype: measured against a float64 truth,
``max|kernel - truth| <= 2 * max|eager - truth| + atol``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

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

# The memory-efficient backward (``memory_efficient=True``) recovers xhat from the output y,
# so xhat carries y's rounding (a unit of y's dtype, plus |beta|/|gamma| of them for
# LayerNorm, at most RECOMPUTE_MAX_BIAS_RATIO by normlab.reference.recompute_ok's rule) where
# the default backward has it exact from the input. dweight sums M such products, whose
# roundings add up like a random walk where eager's stay one rounding of the result: its
# gradients are held to 4x the table's tolerances (of y's dtype where that is looser) and to
# 3x eager's error (+ atol) instead of 2x. Outputs are unchanged.
RECOMPUTE_TOLERANCES: dict[torch.dtype, dict[str, float]] = {
    dtype: {k: 4 * v for k, v in tol.items()} for dtype, tol in TOLERANCES.items()
}
RECOMPUTE_BOUND = 3.0


def recompute_tolerances(saved_dtype: torch.dtype) -> dict[torch.dtype, dict[str, float]]:
    """RECOMPUTE_TOLERANCES for gradients recomputed from an output of ``saved_dtype``: each
    gradient dtype's row, or ``saved_dtype``'s where that is looser (an FP32 dweight computed
    from a bfloat16 y carries bfloat16's rounding)."""
    out = RECOMPUTE_TOLERANCES[saved_dtype]
    return {
        dtype: {k: max(v, out[k]) for k, v in tol.items()}
        for dtype, tol in RECOMPUTE_TOLERANCES.items()
    }


def max_abs_error(actual: Tensor, truth: Tensor) -> float:
    """``max|actual - truth|`` in float64, NaN-aware (a NaN where the truth is finite is inf)."""
    if actual.numel() == 0:
        return 0.0
    diff = (actual.double() - truth.double()).abs()
    both_nan = actual.isnan() & truth.isnan()
    diff = torch.where(both_nan, torch.zeros_like(diff), diff.nan_to_num(nan=float("inf")))
    return diff.max().item()


def assert_kernel_close(
    actual: Tensor,
    expected: Tensor,
    truth: Tensor,
    name: str = "",
    *,
    tolerances: dict[torch.dtype, dict[str, float]] = TOLERANCES,
    bound: float = 2.0,
) -> None:
    """Check ``actual`` (a kernel's output) against ``expected`` (the same-dtype reference) and
    ``truth`` (the float64 reference) with the tolerance table and the 2x-eager error bound
    (``RECOMPUTE_TOLERANCES`` and ``RECOMPUTE_BOUND`` for memory-efficient gradients)."""
    if actual.dtype != expected.dtype or actual.shape != expected.shape:
        raise AssertionError(
            f"{name}: got {actual.dtype} {tuple(actual.shape)}, "
            f"expected {expected.dtype} {tuple(expected.shape)}"
        )
    tol = tolerances[actual.dtype]
    torch.testing.assert_close(
        actual, expected, **tol, equal_nan=True, msg=lambda m: f"{name}: {m}"
    )
    k_err, e_err = max_abs_error(actual, truth), max_abs_error(expected, truth)
    if not k_err <= bound * e_err + tol["atol"]:
        raise AssertionError(
            f"{name}: kernel error {k_err:.3e} > {bound:g} x eager error {e_err:.3e} "
            f"+ atol {tol['atol']}"
        )


def saved_tensor_bytes(
    forward: Callable[[], Tensor], exclude: Iterable[Tensor] = ()
) -> tuple[int, Tensor]:
    """``(bytes, out)``: what autograd keeps for backward while ``forward()`` runs, counting each
    distinct storage once (a norm's output saved by the norm and by the next linear layer is one
    tensor in memory) and leaving out the storages of ``exclude`` (the parameters: kept anyway).

    Deterministic: it counts what is saved, whatever the allocator does."""
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[tuple[str, int], int] = {}

    def pack(t: Tensor) -> Tensor:
        st = t.untyped_storage()
        if st.data_ptr() not in skip and st.nbytes():
            seen[(str(t.device), st.data_ptr())] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = forward()
    return sum(seen.values()), out
