"""Where the time of a small LayerNorm call goes: torch's native op against a Python floor.

    python benchmarks/bench_overhead.py [--repeat 9]

At the lab's sizes ((1024, 64), (1024, 256)) a norm call is mostly fixed cost. This script
times, interleaved in one process (so load drift hits all alike), forward+backward with
gradients for ``x``, ``weight`` and ``bias``:

- ``eager``: ``F.layer_norm`` (torch's C++ kernel and C++ autograd node);
- ``floor``: a ``torch.autograd.Function`` that allocates and saves what normlab's does
  (``y``, mean, rstd; ``dx``, ``dweight``, ``dbias``) and computes nothing: what any op written
  in Python pays before its kernels run;
- ``launchers``: the same Function calling normlab's Numba launchers (no validation, no
  backend dispatch);
- ``normlab``: ``normlab.layer_norm``, the public path;
- ``kernels``: the forward and backward Numba kernels alone, on preallocated outputs.

``eager - floor`` is the time a Python-implemented op has for launching and running its kernels
if it is to be no slower than torch. ``faults`` columns: minor page faults per call of ``eager``
and ``normlab`` (``getrusage``), fresh pages that ``malloc`` handed out; run with
``NORMLAB_BUFFER_POOL_MB=0`` to see normlab's without its recycled output buffers.
"""

import argparse
import resource
import sys

import torch
import torch.nn.functional as F
from torch import Tensor

import normlab
from normlab.kernels.numba import backward as B
from normlab.kernels.numba import kernels as K
from normlab.kernels.numba import launch as L
from normlab.kernels.numba.weights import f32_vector
from normlab.lab.bench.bandwidth import time_ms

SHAPES = ((1, 64), (1024, 64), (1024, 256))


class Floor(torch.autograd.Function):
    """Allocations and saves of normlab's LayerNorm Function, no computation."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        m, n = x.shape
        y = torch.empty(m, n, dtype=x.dtype)
        mean, rstd = torch.empty(m, dtype=torch.float32), torch.empty(m, dtype=torch.float32)
        ctx.save_for_backward(x, weight, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, _, _ = ctx.saved_tensors
        n = x.shape[1]
        dw, db = torch.empty(n, dtype=torch.float32), torch.empty(n, dtype=torch.float32)
        return torch.empty_like(x), dw.to(weight.dtype), db.to(weight.dtype)


class Launchers(torch.autograd.Function):
    """normlab's Numba launchers in a bare Function (float32/bfloat16, 2-D, no residual)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        y, _, mean, rstd = L.ln_fwd(x, weight, bias, None, 1e-5)
        ctx.save_for_backward(x, weight, mean, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = L.ln_bwd(dy, None, x, weight, mean, rstd, True)
        return dx, dw.to(weight.dtype), db.to(weight.dtype)


def kernels_only(x: Tensor, w: Tensor, b: Tensor, dy: Tensor):
    """A call running the forward and backward kernels of normlab's LayerNorm on preallocated
    outputs, with the launchers' thread choice: what the launchers add is the rest."""
    m, n = x.shape
    x, w, b = x.detach(), w.detach(), b.detach()
    y, _, mean, rstd = L.ln_fwd(x, w, b, None, 1e-5)
    dx = torch.empty_like(x)
    wf, bf = f32_vector(w, n), f32_vector(b, n, missing=0.0)  # the float32 vectors the kernels read
    dw, db = torch.empty(n), torch.empty(n)
    fc, bc = L._launch("ln_fwd", x, None), L._launch("ln_bwd", x, None)  # the launchers' choices
    (nch, per), (bch, bper) = L._chunks(m, fc), L._chunks(m, bc)
    tag, xp = L._TAG[x.dtype], x.data_ptr()
    fwd = (m, n, xp, n, xp, n, xp, y.data_ptr(), wf.data_ptr(), bf.data_ptr(), mean.data_ptr(),
           rstd.data_ptr(), 1e-5, False, tag, tag)  # fmt: skip
    bwd = (m, n, dy.data_ptr(), n, xp, n, xp, n, wf.data_ptr(), mean.data_ptr(),
           rstd.data_ptr(), dx.data_ptr(), False, tag, tag, L._store_tag(dx, wf))  # fmt: skip

    alive = (x, y, mean, rstd, wf, bf, dy, dx)  # the kernels get addresses, not tensors

    def run():
        L._run(K.ln_fwd, K.ln_fwd_par, fc, m, n, nch, per, fc.pipelined, fwd)
        outs = (dw.data_ptr(), db.data_ptr())
        L._run(B.ln_bwd, B.ln_bwd_par, bc, m, n, bch, bper, bc.pipelined, n, bwd, *outs)
        return alive

    return run


def faults_per_call(fn, calls: int = 100) -> float:
    fn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def time_case(dtype: torch.dtype, m: int, n: int, repeat: int) -> dict[str, float]:
    """Microseconds per forward+backward of each contender on one ``(m, n)`` input, and the page
    faults per call of ``eager`` and ``normlab``."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(m, n, dtype=dtype, generator=g).requires_grad_()
    w = (1 + 0.1 * torch.randn(n, dtype=dtype, generator=g)).requires_grad_()
    b = (0.1 * torch.randn(n, dtype=dtype, generator=g)).requires_grad_()
    dy = torch.randn(m, n, dtype=dtype, generator=g)

    def grad(f):
        return lambda: torch.autograd.grad(f(), (x, w, b), dy)

    fns = {
        "eager": grad(lambda: F.layer_norm(x, (n,), w, b, 1e-5)),
        "floor": grad(lambda: Floor.apply(x, w, b)),
        "kernels": kernels_only(x, w, b, dy),
        "launchers": grad(lambda: Launchers.apply(x, w, b)),
        "normlab": grad(lambda: normlab.layer_norm(x, w, b, 1e-5, backend="numba")),
    }
    out = {k: 1e3 * v for k, v in time_ms(fns, repeat).items()}
    for k in ("eager", "normlab"):
        out[f"faults {k}"] = faults_per_call(fns[k])
    return out


COLUMNS = ("eager", "floor", "kernels", "launchers", "normlab")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=9)
    args = p.parse_args()
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}, {threads} threads; LayerNorm forward+backward, us\n")
    print(f"| dtype | shape | {' | '.join(COLUMNS)} | eager - floor | normlab / eager | "
          "faults eager | faults normlab |")  # fmt: skip
    print("|---" * (len(COLUMNS) + 6) + "|")
    for dtype in (torch.float32, torch.bfloat16):
        for m, n in SHAPES:
            us = time_case(dtype, m, n, args.repeat)
            cells = [str(dtype).removeprefix("torch."), f"{m}x{n}"]
            cells += [f"{us[k]:.0f}" for k in COLUMNS]
            cells += [f"{us['eager'] - us['floor']:.0f}", f"{us['normlab'] / us['eager']:.2f}"]
            cells += [f"{us['faults eager']:.0f}", f"{us['faults normlab']:.0f}"]
            print(f"| {' | '.join(cells)} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
