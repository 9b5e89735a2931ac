"""The engine of ``normlab demo``: every backend on one tensor, error against a float64 truth,
and time per call. :class:`DemoOptions` in, :func:`run_demo` prints a line per measurement and
returns the rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from normlab.lab.bench.bandwidth import norm_call, seconds_per_call
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.reading import checked, positive_int

DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True)
class DemoOptions:
    rows: int = 4096  # rows of the test tensor
    hidden: int = 1024  # hidden size N
    dtype: str = "bfloat16"


@dataclass(frozen=True)
class DemoRow:
    op: str
    backend: str
    max_abs_err: float
    ms: float


def _check(options: DemoOptions) -> None:
    for what, value in (("rows", options.rows), ("hidden", options.hidden)):
        checked(what, positive_int, value)
    if options.dtype not in DTYPES:
        raise UsageError(f"dtype: expected one of {list(DTYPES)}, got {options.dtype!r}")


def run_demo(options: DemoOptions, log: Callable[[str], None] = print) -> list[DemoRow]:
    """Each op on each available backend that runs on the CPU, on one random tensor; ``log``
    gets the table line by line as it is measured."""
    from normlab import functional as F

    _check(options)
    o = options
    torch.manual_seed(0)
    dtype = getattr(torch, o.dtype)
    x = torch.randn(o.rows, o.hidden, dtype=dtype) * 3 + 1
    w = 1 + 0.1 * torch.randn(o.hidden, dtype=dtype)
    b = 0.1 * torch.randn(o.hidden, dtype=dtype)
    log(f"x: ({o.rows}, {o.hidden}) {o.dtype}; error vs float64, time per call")
    log(f"{'op':<11} {'backend':<10} {'max abs err':>12} {'ms':>8}")
    # A backend that cannot run on x's device (triton on the CPU without TRITON_INTERPRET=1)
    # has nothing to show here.
    backends = [be for be in F.available_backends() if F.get_backend(be).supports(x.device)]
    rows = []
    for op in ("rms_norm", "layer_norm"):  # each as normlab bench calls it
        # float64: the truth
        truth = norm_call(op, o.hidden, "reference")(x.double(), w.double(), b.double(), None)
        for be in backends:
            call = norm_call(op, o.hidden, be)
            err = (call(x, w, b, None).double() - truth).abs().max().item()
            # the call above was the warm-up
            ms = 1e3 * seconds_per_call(lambda call=call: call(x, w, b, None), 5)
            log(f"{op:<11} {be:<10} {err:>12.3e} {ms:>8.2f}")
            rows.append(DemoRow(op, be, err, ms))
    return rows
