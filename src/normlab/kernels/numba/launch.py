"""Host launchers for the Numba kernels (the contract is in :mod:`normlab.kernels.dispatch`).

A launcher turns torch tensors into the ``(address, row stride, dtype tag)`` triples the kernels
take, allocates the outputs, and runs the kernel on Numba's OpenMP threads: as many as
``torch.get_num_threads()`` (so normlab never runs more threads than torch is configured for),
one for small tensors (the calling thread).

float16 has no Numba type and is not a target of the fast path: its rows are converted to FP32
by torch around the kernels (a fused residual add is then done by the reference, so ``h`` is the
reference's, bit for bit).
"""

from __future__ import annotations

import os
import threading

import numba
import numpy as np
import torch
from torch import Tensor

from normlab.kernels.numba import backward as B
from normlab.kernels.numba import backward_pairs as BP
from normlab.kernels.numba import backward_pairs_rms as BPR
from normlab.kernels.numba import backward_stream as BS
from normlab.kernels.numba import backward_y as BY
from normlab.kernels.numba import buffer_pool, choices, tuner
from normlab.kernels.numba import forward_pairs as FP
from normlab.kernels.numba import forward_stream as FS
from normlab.kernels.numba import kernels as K
from normlab.kernels.numba.bf16 import VW
from normlab.kernels.numba.choices import Launch
from normlab.kernels.numba.weights import f32_vector
from normlab.reference import residual_add

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32
_TAG = {F32: np.float32(0), BF16: np.uint16(0)}  # what the kernels specialize on

# Below this many elements one thread is faster: waking a second one costs more than it saves.
PAR_MIN_ELEMENTS = 1 << 15
# Threading layers whose hand-off is cheap and that are safe to enter from several Python
# threads; with Numba's fallback "workqueue" (a slow hand-off, not thread-safe) the kernels run
# serially.
_FAST_LAYERS = ("omp", "tbb")
_par = {"started": False, "ok": True}  # whether Numba's pool was started, and may be used
_tls = threading.local()  # the Numba thread count last set on this thread
_NP_DTYPE = {F32: np.float32, BF16: np.uint16}  # how pooled bytes are viewed
# The drivers (one-thread ``name``, parallel ``name_par``): plain, on pairs, streamed.
_DRIVERS = {
    "rms_fwd": ((K, "rms_fwd"), (FP, "rms_fwd_pairs"), (FS, "rms_fwd_stream")),
    "ln_fwd": ((K, "ln_fwd"), (FP, "ln_fwd_pairs"), (FS, "ln_fwd_stream")),
    "rms_bwd": ((B, "rms_bwd"), (BPR, "rms_bwd_pairs"), (BS, "rms_bwd_stream")),
    "ln_bwd": ((B, "ln_bwd"), (BP, "ln_bwd_pairs"), (BS, "ln_bwd_stream")),
}


def _arg(t: Tensor) -> tuple[Tensor, int, int]:
    """``(M, N)`` with unit element stride -> (tensor to keep alive, address, row stride >= N)."""
    m, n = t.shape
    rs = t.stride(0) if m > 1 else n
    if rs < n:  # row stride 0 (a broadcast) or overlapping rows: not an (M, stride) array
        t, rs = t.contiguous(), n
    return t, t.data_ptr(), rs


def _empty(shape: tuple[int, int], dtype: torch.dtype) -> Tensor:
    """A new ``(M, N)`` tensor; large ones from the buffer pool."""
    m, n = shape
    npd = _NP_DTYPE.get(dtype)
    if npd is None or m * n * dtype.itemsize < buffer_pool.MIN_BYTES:
        return torch.empty(m, n, dtype=dtype)  # varargs: a tuple argument parses slower
    t = torch.from_numpy(buffer_pool.get(m * n * dtype.itemsize).view(npd).reshape(m, n))
    return t.view(dtype) if dtype == BF16 else t


def _f32(t: Tensor | None) -> Tensor | None:
    return t if t is None or t.dtype != F16 else t.float()


def _chunks(m: int, launch: Launch) -> tuple[int, int]:
    """``(chunks, rows per chunk)``: the unit of parallel work and of the dweight/dbias partial
    sums. They depend on the machine and the launch choice only (not on the thread count), so
    results are bitwise reproducible."""
    nch = min(m, launch.chunks)
    per = -(-m // nch)
    return -(-m // per), per


def _launch(op: str, x: Tensor, launch: Launch | None) -> Launch:
    """The launch choice of a call on rows like ``x``: ``launch``, else the tuner's."""
    if launch is not None:
        return launch
    m, n = x.shape
    dtype = "bfloat16" if x.dtype == BF16 else "float32"
    return tuner.choice(op, dtype, m * n, n, _tuning_calls, _par["ok"])


def _drivers(op: str, pairs: bool, launch: Launch):
    """The (one-thread, parallel) drivers of a call of ``op``."""
    plain, on_pairs, streamed = _DRIVERS[op]
    mod, name = on_pairs if pairs else streamed if launch.stream else plain
    return getattr(mod, name), getattr(mod, name + "_par")


def _after_fork_in_child() -> None:
    # GNU OpenMP aborts a forked child that enters a pool its parent started.
    if _par["started"]:
        _par["ok"] = False


os.register_at_fork(after_in_child=_after_fork_in_child)


def _threads(m: int, n: int, nch: int, share: float = 1.0) -> int:
    """Threads for an ``(m, n)`` call: ``share`` of torch's count, or 1 for small tensors; 0
    where Numba's pool must not be entered: in a forked child of a process that started it and
    with a slow or thread-unsafe threading layer."""
    if not _par["ok"]:
        return 0
    if m * n < PAR_MIN_ELEMENTS:
        return 1
    k = min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS, nch)
    return max(1, int(k * share))


def _run(serial, par, launch: Launch, m: int, n: int, nch: int, *args) -> None:
    """``par(nch, *args)`` over Numba's threads (one thread for small tensors: the OpenMP driver
    then costs little more than a plain call, and compiling only it, not its twin too, shortens
    the cold compile), or its one-thread twin ``serial`` where the pool must not be used."""
    k = _threads(m, n, nch, launch.threads)
    if k == 0:
        serial(nch, *args)
    elif not _par["started"]:
        _start_pool(par, k, nch, args)
    else:
        if getattr(_tls, "threads", None) != k:  # set_num_threads is not free: only on a change
            numba.set_num_threads(k)
            _tls.threads = k
        par(nch, *args)


def _start_pool(par, k: int, nch: int, args) -> None:
    """The first parallel call, which starts Numba's OpenMP pool. With the "omp" layer Numba and
    torch share one OpenMP runtime, and starting it sets the runtime's thread count to Numba's
    default, which torch then reads as its own: a process that had set torch to fewer threads
    (a study worker, one of several on the machine) would oversubscribe the cores with
    spin-waiting threads. So torch's count is put back."""
    torch_threads = torch.get_num_threads()
    numba.set_num_threads(k)
    _tls.threads = k
    par(nch, *args)
    _par["started"] = True
    _par["ok"] = numba.threading_layer() in _FAST_LAYERS
    if torch.get_num_threads() != torch_threads:
        torch.set_num_threads(torch_threads)


def _q_tag(casting: str, h_dtype: torch.dtype) -> np.generic:
    """What the llama/none cast orders round ``x * rstd`` to (nothing for gemma or FP32)."""
    if casting == "gemma" or h_dtype == F32:
        return K.Q_NONE
    return K.Q_F16 if h_dtype == F16 else K.Q_BF16


def _fwd_inputs(x: Tensor, residual: Tensor | None):
    """``(x, r, h, h_keep)``: x and residual as kernel arguments, the ``h`` output (``None``
    without residual: r and h then alias x, which the kernel does not touch). float16 goes
    through FP32, with the residual add done by torch and returned as ``h_keep``."""
    h_keep = None
    if residual is not None and F16 in (x.dtype, residual.dtype):
        h_keep = residual_add(x, residual)
        x, residual = h_keep, None
    xa = _arg(_f32(x))
    if residual is None:
        return xa, xa, None, h_keep
    return xa, _arg(residual), _empty(x.shape, residual.dtype), None


def rms_fwd(x, weight, residual, eps, offset, casting, eps_inside, out_dtype, launch=None):
    """RMSNorm forward launcher: ``(y, h | None, rstd)``."""
    m, n = x.shape
    launch = _launch("rms_fwd", x, launch)
    (xk, xp, xs), (rk, rp, rs), h, h_keep = _fwd_inputs(x, residual)
    y = _empty((m, n), F32 if out_dtype == F16 else out_dtype)
    rstd = torch.empty(m, dtype=F32)
    g = f32_vector(weight, n, offset, casting=casting)
    nch, per = _chunks(m, launch)
    h_dtype = x.dtype if residual is None else residual.dtype
    hp = xp if h is None else h.data_ptr()
    ptrs = (xp, xs, rp, rs, hp, y.data_ptr(), g.data_ptr(), rstd.data_ptr())
    tags = (_TAG[xk.dtype], _TAG[rk.dtype], _TAG[y.dtype], _q_tag(casting, h_dtype))
    pairs = launch.bf16_pairs and h is None and _pairs(n, y, (xk, xp, xs))
    if pairs:
        args = (m, n, xp, xs, y.data_ptr(), rstd.data_ptr(), eps, eps_inside, tags[3])
        args = (g.data_ptr(), (*args, _store_tag(y, g), VW[launch.vector_512]))
    else:
        args = ((m, n, *ptrs, eps, eps_inside, h is not None, *tags, VW[launch.vector_512]),)
    _run(*_drivers("rms_fwd", pairs, launch), launch, m, n, nch, per, launch.pipelined, *args)
    y = y if y.dtype == out_dtype else y.to(out_dtype)
    return y, h if h_keep is None else h_keep, rstd


def ln_fwd(x, weight, bias, residual, eps, launch=None):
    """LayerNorm forward launcher: ``(y, h | None, mean, rstd)``."""
    m, n = x.shape
    launch = _launch("ln_fwd", x, launch)
    (xk, xp, xs), (rk, rp, rs), h, h_keep = _fwd_inputs(x, residual)
    h_dtype = x.dtype if residual is None else residual.dtype
    y = _empty((m, n), rk.dtype)  # h's dtype (float32 for float16)
    mean, rstd = torch.empty(m, dtype=F32), torch.empty(m, dtype=F32)
    w, b = f32_vector(weight, n), f32_vector(bias, n, missing=0.0)
    nch, per = _chunks(m, launch)
    hp = xp if h is None else h.data_ptr()
    ptrs = (xp, xs, rp, rs, hp, y.data_ptr(), w.data_ptr(), b.data_ptr())
    stats = (mean.data_ptr(), rstd.data_ptr())
    pairs = launch.bf16_pairs and h is None and _pairs(n, y, (xk, xp, xs))
    if pairs:
        args = (m, n, xp, xs, y.data_ptr(), *stats, eps, _store_tag(y, w, b), VW[launch.vector_512])
        args = (w.data_ptr(), b.data_ptr(), args)
    else:
        tags = (_TAG[xk.dtype], _TAG[rk.dtype], VW[launch.vector_512])
        args = ((m, n, *ptrs, *stats, eps, h is not None, *tags),)
    _run(*_drivers("ln_fwd", pairs, launch), launch, m, n, nch, per, launch.pipelined, *args)
    y = y if y.dtype == h_dtype else y.to(h_dtype)
    return y, h if h_keep is None else h_keep, mean, rstd


def _bwd_inputs(dy: Tensor, dh: Tensor | None, h: Tensor, launch: Launch):
    """``(dy, dh, h, dx, pairs)``: kernel arguments (``dh`` aliases ``h`` when there is none),
    the ``dx`` output in ``h``'s dtype (float32 for float16), and whether to run the kernel on
    bfloat16 pairs (the launch choice, where the rows qualify)."""
    dya, ha = _arg(_f32(dy)), _arg(_f32(h))
    dha = ha if dh is None else _arg(_f32(dh).to(ha[0].dtype))
    dx = _empty(h.shape, ha[0].dtype)
    return dya, dha, ha, dx, launch.bf16_pairs and _pairs(h.shape[1], dx, dya, dha, ha)


def _addr(t: Tensor | None) -> int:
    """Where a kernel writes an optional output: its address, or 0 for none."""
    return 0 if t is None else t.data_ptr()


def _store_tag(dx: Tensor, *vecs: Tensor) -> np.generic:
    """How a backward, or a forward on pairs, stores its output
    (:mod:`~normlab.kernels.numba.backward`): bfloat16 without the NaN case when the FP32 gain
    (and bias) hold no NaN nor infinity, else exactly."""
    if dx.dtype == BF16 and all(B.nan_free(g.data_ptr(), g.numel()) for g in vecs):
        return _TAG[BF16]
    return _TAG[F32]


def rms_bwd(dy, dh, h, weight, rstd, eps, offset, casting, eps_inside, launch=None):
    """RMSNorm backward launcher: ``(dh_total, dweight | None)``."""
    m, n = h.shape
    launch = _launch("rms_bwd", h, launch)
    (dyk, dyp, dys), (_, dhp, dhs), (hk, hp, hs), dx, pairs = _bwd_inputs(dy, dh, h, launch)
    g = f32_vector(weight, n, offset, casting=casting)
    dw = None if weight is None else torch.empty(n, dtype=F32)
    ptrs = (dyp, dys, dhp, dhs, hp, hs, g.data_ptr(), rstd.data_ptr(), dx.data_ptr())
    flags = (eps, eps_inside, dh is not None, dw is not None)
    tags = (_TAG[dyk.dtype], _TAG[hk.dtype], _q_tag(casting, h.dtype), _store_tag(dx, g))
    args = (m, n, *ptrs, *flags, *tags, VW[launch.vector_512])
    nch, per = _chunks(m, launch)
    nw = n if dw is not None or launch.pipelined else 0  # the partial sums' width
    kern = _drivers("rms_bwd", pairs, launch)
    _run(*kern, launch, m, n, nch, per, launch.pipelined, nw, args, _addr(dw))
    return dx if dx.dtype == h.dtype else dx.to(h.dtype), dw


def _pairs(n: int, dx: Tensor, *rows_: tuple[Tensor, int, int]) -> bool:
    """Whether bfloat16 rows can be read as 32-bit pairs (the ``*_pairs`` kernels): every one
    bfloat16, ``n``, the row strides and the addresses even in elements."""
    return n % 2 == 0 and all(
        t.dtype == BF16 and p % 4 == 0 and rs % 2 == 0 for t, p, rs in (*rows_, (dx, _addr(dx), n))
    )


def ln_bwd(dy, dh, h, weight, mean, rstd, has_bias, launch=None):
    """LayerNorm backward launcher: ``(dh_total, dweight | None, dbias | None)``."""
    m, n = h.shape
    launch = _launch("ln_bwd", h, launch)
    (dyk, dyp, dys), (_, dhp, dhs), (hk, hp, hs), dx, pairs = _bwd_inputs(dy, dh, h, launch)
    w = f32_vector(weight, n)
    dw = None if weight is None else torch.empty(n, dtype=F32)
    db = torch.empty(n, dtype=F32) if has_bias else None
    ptrs = (dyp, dys, dhp, dhs, hp, hs, w.data_ptr(), mean.data_ptr(), rstd.data_ptr())
    tags = (_TAG[dyk.dtype], _TAG[hk.dtype], _store_tag(dx, w), VW[launch.vector_512])
    args = (m, n, *ptrs, dx.data_ptr(), dh is not None, *tags)
    nch, per = _chunks(m, launch)
    out = (_addr(dw), _addr(db))
    kern = _drivers("ln_bwd", pairs, launch)
    _run(*kern, launch, m, n, nch, per, launch.pipelined, n, args, *out)
    return dx if dx.dtype == h.dtype else dx.to(h.dtype), dw, db


def _y_inputs(dy: Tensor, dh: Tensor | None, y: Tensor, h_dtype: torch.dtype):
    """``(dy, dh, y)`` as kernel arguments and the ``dx`` output in ``h_dtype`` (float32 for
    float16); ``dh`` aliases ``dx`` when there is none (the kernel then does not read it)."""
    dya, ya = _arg(_f32(dy)), _arg(_f32(y))
    ht = F32 if h_dtype == F16 else h_dtype
    dx = _empty(tuple(y.shape), ht)
    dha = (dx, dx.data_ptr(), y.shape[1]) if dh is None else _arg(_f32(dh).to(ht))
    return dya, dha, ya, dx


def rms_bwd_y(dy, dh, y, weight, rstd, eps, offset, casting, eps_inside, h_dtype, launch=None):
    """Memory-efficient RMSNorm backward launcher, from the output ``y``."""
    m, n = y.shape
    launch = _launch("rms_bwd_y", y, launch)
    (dyk, dyp, dys), (_, dhp, dhs), (yk, yp, ys), dx = _y_inputs(dy, dh, y, h_dtype)
    g = f32_vector(weight, n, offset, casting=casting)
    gi = torch.reciprocal(g)  # the kernel multiplies by 1 / g: no division per element
    dw = None if weight is None else torch.empty(n, dtype=F32)
    ptrs = (dyp, dys, dhp, dhs, yp, ys, g.data_ptr(), gi.data_ptr(), rstd.data_ptr())
    flags = (eps_inside, dh is not None, dw is not None)
    tags = (_TAG[dyk.dtype], _TAG[yk.dtype], _TAG[dx.dtype], _q_tag(casting, h_dtype))
    args = (m, n, *ptrs, dx.data_ptr(), *flags, *tags, VW[launch.vector_512])
    nch, per = _chunks(m, launch)
    nw = 0 if dw is None else n
    _run(BY.rms_bwd_y, BY.rms_bwd_y_par, launch, m, n, nch, per, nw, args, _addr(dw))
    return dx if dx.dtype == h_dtype else dx.to(h_dtype), dw


def ln_bwd_y(dy, dh, y, weight, bias, rstd, h_dtype, launch=None):
    """Memory-efficient LayerNorm backward launcher, from the output ``y``."""
    m, n = y.shape
    launch = _launch("ln_bwd_y", y, launch)
    (dyk, dyp, dys), (_, dhp, dhs), (yk, yp, ys), dx = _y_inputs(dy, dh, y, h_dtype)
    w, b = f32_vector(weight, n), f32_vector(bias, n, missing=0.0)
    wi = torch.reciprocal(w)
    dw = None if weight is None else torch.empty(n, dtype=F32)
    db = None if bias is None else torch.empty(n, dtype=F32)
    ptrs = (dyp, dys, dhp, dhs, yp, ys, w.data_ptr(), b.data_ptr(), wi.data_ptr())
    args = (m, n, *ptrs, rstd.data_ptr(), dx.data_ptr(), dh is not None)
    args = (*args, _TAG[dyk.dtype], _TAG[yk.dtype], _TAG[dx.dtype], VW[launch.vector_512])
    nch, per = _chunks(m, launch)
    _run(BY.ln_bwd_y, BY.ln_bwd_y_par, launch, m, n, nch, per, n, args, _addr(dw), _addr(db))
    return dx if dx.dtype == h_dtype else dx.to(h_dtype), dw, db


def _tuning_calls(op: str, dtype: str, n: int, elements: int):
    """For the tuner: ``launch -> no-argument call`` of the launcher of ``op`` on inputs of
    ``elements`` elements in rows of ``n``, made once (a ramp, cheaper to make than random
    numbers; the kernels' speed does not depend on values)."""
    dt = BF16 if dtype == "bfloat16" else F32
    ramp = torch.linspace(-2.0, 2.0, n)
    x = ramp.expand(max(1, elements // n), n).to(dt, copy=True)
    dy = x.flip(1)
    w, b = torch.ones(n, dtype=dt), torch.zeros(n, dtype=dt)
    old = choices.OLD
    if op.startswith("rms"):
        y, _, rstd = rms_fwd(x, w, None, 1e-6, 0.0, "gemma", True, dt, launch=old["rms_fwd"])
        calls = {
            "rms_fwd": lambda c: rms_fwd(x, w, None, 1e-6, 0.0, "gemma", True, dt, launch=c),
            "rms_bwd": lambda c: rms_bwd(dy, None, x, w, rstd, 1e-6, 0.0, "gemma", True, c),
            "rms_bwd_y": lambda c: rms_bwd_y(dy, None, y, w, rstd, 1e-6, 0.0, "gemma", True, dt, c),
        }
    else:
        y, _, mean, rstd = ln_fwd(x, w, b, None, 1e-5, launch=old["ln_fwd"])
        calls = {
            "ln_fwd": lambda c: ln_fwd(x, w, b, None, 1e-5, launch=c),
            "ln_bwd": lambda c: ln_bwd(dy, None, x, w, mean, rstd, True, launch=c),
            "ln_bwd_y": lambda c: ln_bwd_y(dy, None, y, w, b, rstd, dt, launch=c),
        }
    run = calls[op]
    return lambda launch: lambda: run(launch)
