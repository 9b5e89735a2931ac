"""Host launchers for the Numba kernels (the contract is in :mod:`normlab.kernels.ops`).

A launcher turns torch tensors into the flat arrays the kernels take, allocates the outputs, and
runs the kernel on the calling thread (small tensors) or splits its chunks over
``torch.get_num_threads()`` threads (the kernels release the GIL), so normlab never runs more
threads than torch is configured for.

float16 has no Numba type and is not a target of the fast path: its rows are converted to FP32
by torch around the kernels (a fused residual add is then done by the reference, so ``h`` is the
reference's, bit for bit).
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from torch import Tensor

from normlab.kernels import numba_cpu as K
from normlab.reference import residual_add

F16, BF16, F32 = torch.float16, torch.bfloat16, torch.float32

# Below this many elements waking a second thread costs more than it saves (a thread hand-off
# is ~20-50 us; 64K fp32 elements stream in ~25 us).
PAR_MIN_ELEMENTS = 1 << 17
# Fixed work chunks: the unit of parallel work and of the dweight/dbias partial sums. They depend
# on the machine only (not on the thread count), so gradients are bitwise reproducible.
N_CHUNKS = max(16, 2 * (os.cpu_count() or 1))
_NONE = np.zeros(1, np.float32)
# id(weight) -> (weakref, (version, data_ptr, dtype, numel, offset), FP32 copy)
_weight_cache: dict[int, tuple[weakref.ref, tuple, np.ndarray]] = {}
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (pid, pool): a forked child makes its own


def _flat(t: Tensor) -> tuple[np.ndarray, int]:
    """``(M, N)`` with unit element stride -> (1-D array over its rows, row stride)."""
    t = t.detach()
    if t.dtype == BF16:
        t = t.view(torch.uint16)
    m, n = t.shape
    if t.is_contiguous():  # the common case, and the cheapest: numpy reshapes in ~0.3 us
        return t.numpy().reshape(-1), n
    rs = t.stride(0) if m > 1 else n
    return t.as_strided(((m - 1) * rs + n,), (1,)).numpy(), rs


# Outputs of at least this many bytes are allocated by numpy, which asks the kernel for
# transparent huge pages (madvise): allocating and filling a fresh 128 MB tensor took ~120 ms
# with torch.empty (4 KB page faults, THP in madvise mode on the VM) and ~28 ms with numpy,
# about one copy_.
_NUMPY_ALLOC_BYTES = 1 << 22
_NP_DTYPE = {F32: np.float32, BF16: np.uint16}


# Large output buffers are recycled once every tensor using them is gone (a refcount check),
# so a training step's activations reuse memory whose pages are already mapped: a fresh buffer
# costs its page faults plus the kernel zeroing it, a second full write. At most this many MB
# of buffers are kept (NORMLAB_BUFFER_POOL_MB=0 turns the pool off).
_POOL_BYTES = int(float(os.environ.get("NORMLAB_BUFFER_POOL_MB", "512")) * 2**20)
_pool_buffers: list[np.ndarray] = []  # oldest first
_pool_lock = threading.Lock()


def _buffer(nbytes: int) -> np.ndarray:
    with _pool_lock:
        for i in range(len(_pool_buffers)):
            buf = _pool_buffers[i]
            # 3 = the list, ``buf`` and getrefcount's argument: no tensor uses it any more.
            if buf.nbytes == nbytes and sys.getrefcount(buf) == 3:
                _pool_buffers.append(_pool_buffers.pop(i))
                return buf
        buf = np.empty(nbytes, np.uint8)
        if nbytes <= _POOL_BYTES:
            _pool_buffers.append(buf)
            total = sum(b.nbytes for b in _pool_buffers)
            for old in list(_pool_buffers):
                if total <= _POOL_BYTES:
                    break
                if old is not buf:
                    _pool_buffers.remove(old)
                    total -= old.nbytes
        return buf


def _empty(shape: tuple[int, ...], dtype: torch.dtype) -> Tensor:
    shape = tuple(shape)
    if dtype not in _NP_DTYPE or 4 * shape[0] * shape[-1] < _NUMPY_ALLOC_BYTES:
        return torch.empty(shape, dtype=dtype)
    npd = _NP_DTYPE[dtype]
    arr = _buffer(shape[0] * shape[-1] * np.dtype(npd).itemsize).view(npd).reshape(shape)
    t = torch.from_numpy(arr)
    return t.view(dtype) if dtype == BF16 else t


def _out(t: Tensor) -> np.ndarray:
    return _flat(t)[0]


def _f32(t: Tensor | None) -> Tensor | None:
    return t if t is None or t.dtype != F16 else t.float()


def _vec(t: Tensor | None, offset: float = 0.0) -> tuple[np.ndarray, bool]:
    """A weight/bias as a contiguous FP32 array (plus ``offset``), and whether there is one.

    Always a copy: ``.numpy()`` marks a storage non-resizable for good, and FSDP2 frees a
    gathered parameter by resizing its storage to 0. The copy is cached per tensor and reused
    while the tensor's version counter, storage and ``offset`` are unchanged (an optimizer step
    or any in-place write bumps the version), which saves ~5-10 us a call on small tensors.
    """
    if t is None:
        return _NONE, False
    key = (t._version, t.data_ptr(), t.dtype, t.numel(), offset)
    hit = _weight_cache.get(id(t))
    if hit is not None and hit[0]() is t and hit[1] == key:
        return hit[2], True
    c = t.detach().to(F32, copy=True, memory_format=torch.contiguous_format)
    if offset:
        c += offset
    arr = c.numpy()
    ident = id(t)
    _weight_cache[ident] = (weakref.ref(t, lambda _, i=ident: _weight_cache.pop(i, None)), key, arr)
    return arr, True


def _chunks(m: int) -> tuple[int, int]:
    nch = min(m, N_CHUNKS)
    per = -(-m // nch)
    return -(-m // per), per


def _workers() -> ThreadPoolExecutor:
    global _pool
    if _pool is None or _pool[0] != os.getpid():
        _pool = (os.getpid(), ThreadPoolExecutor(max(1, (os.cpu_count() or 2) - 1), "normlab"))
    return _pool[1]


def _launch(kernel, m: int, n: int, nch: int, per: int, args: tuple) -> None:
    """Run ``kernel(c0, c1, per, *args)`` over chunks ``[0, nch)``: on this thread, or split in
    contiguous ranges over ``torch.get_num_threads()`` threads (this one included)."""
    threads = min(torch.get_num_threads(), nch)
    if threads <= 1 or m * n < PAR_MIN_ELEMENTS:
        kernel(0, nch, per, *args)
        return
    cuts = [nch * i // threads for i in range(threads + 1)]
    pool = _workers()
    futures = [pool.submit(kernel, cuts[i], cuts[i + 1], per, *args) for i in range(threads - 1)]
    kernel(cuts[-2], cuts[-1], per, *args)
    for f in futures:
        f.result()


def _round_mode(casting: str, h_dtype: torch.dtype) -> int:
    if casting == "gemma" or h_dtype == F32:  # rounding to FP32 is the identity
        return K.ROUND_NONE
    return K.ROUND_F16 if h_dtype == F16 else K.ROUND_LIKE_H


def _fwd_inputs(x: Tensor, residual: Tensor | None):
    """Flatten x and residual; float16 goes through FP32 (with the residual add done by torch)."""
    h_keep = None
    if residual is not None and F16 in (x.dtype, residual.dtype):
        h_keep = residual_add(x, residual)
        x, residual = h_keep, None
    xa, xs = _flat(_f32(x))
    if residual is None:
        return xa, xs, xa, xs, xa, None, h_keep
    h = _empty(x.shape, residual.dtype)
    ra, rs = _flat(residual)
    return xa, xs, ra, rs, _out(h), h, None


def rms_fwd(x, weight, residual, eps, offset, casting, eps_inside, out_dtype):
    """RMSNorm forward launcher: ``(y, h | None, rstd)``."""
    m, n = x.shape
    xa, xs, ra, rs, ha, h, h_keep = _fwd_inputs(x, residual)
    y = _empty((m, n), F32 if out_dtype == F16 else out_dtype)
    rstd = torch.empty(m, dtype=F32)
    g, has_w = _vec(weight, offset)
    nch, per = _chunks(m)
    h_dtype = x.dtype if residual is None else residual.dtype
    args = (m, n, xa, xs, ra, rs, ha, _out(y), g, rstd.numpy(), eps, eps_inside, h is not None,
            has_w, _round_mode(casting, h_dtype))  # fmt: skip
    _launch(K._rms_fwd_rows, m, n, nch, per, args)
    y = y if y.dtype == out_dtype else y.to(out_dtype)
    return y, h if h_keep is None else h_keep, rstd


def ln_fwd(x, weight, bias, residual, eps):
    """LayerNorm forward launcher: ``(y, h | None, mean, rstd)``."""
    m, n = x.shape
    xa, xs, ra, rs, ha, h, h_keep = _fwd_inputs(x, residual)
    h_dtype = x.dtype if residual is None else residual.dtype
    y = _empty((m, n), F32 if h_dtype == F16 else h_dtype)
    mean, rstd = torch.empty(m, dtype=F32), torch.empty(m, dtype=F32)
    w, has_w = _vec(weight)
    b, has_b = _vec(bias)
    nch, per = _chunks(m)
    args = (m, n, xa, xs, ra, rs, ha, _out(y), w, b, mean.numpy(), rstd.numpy(), eps,
            h is not None, has_w, has_b)  # fmt: skip
    _launch(K._ln_fwd_rows, m, n, nch, per, args)
    y = y if y.dtype == h_dtype else y.to(h_dtype)
    return y, h if h_keep is None else h_keep, mean, rstd


def _bwd_inputs(dy: Tensor, dh: Tensor | None, h: Tensor):
    dya, dys = _flat(_f32(dy))
    ha, hs = _flat(_f32(h))
    dha, dhs = (dya, dys) if dh is None else _flat(_f32(dh))
    dx = _empty(h.shape, F32 if h.dtype == F16 else h.dtype)
    return dya, dys, dha, dhs, ha, hs, dx


def rms_bwd(dy, dh, h, weight, rstd, eps, offset, casting, eps_inside):
    """RMSNorm backward launcher: ``(dh_total, dweight | None)``."""
    m, n = h.shape
    dya, dys, dha, dhs, ha, hs, dx = _bwd_inputs(dy, dh, h)
    g, has_w = _vec(weight, offset)
    nch, per = _chunks(m)
    dwp = np.empty((nch, n if has_w else 1), np.float32)
    args = (m, n, dya, dys, dha, dhs, ha, hs, g, rstd.numpy(), _out(dx), dwp, eps, eps_inside,
            dh is not None, has_w, _round_mode(casting, h.dtype))  # fmt: skip
    _launch(K._rms_bwd_rows, m, n, nch, per, args)
    dw = None
    if has_w:
        dw = torch.empty(n, dtype=F32)
        K._sum_chunks(dwp, dw.numpy())
    return dx.to(h.dtype), dw


def ln_bwd(dy, dh, h, weight, mean, rstd, has_bias):
    """LayerNorm backward launcher: ``(dh_total, dweight | None, dbias | None)``."""
    m, n = h.shape
    dya, dys, dha, dhs, ha, hs, dx = _bwd_inputs(dy, dh, h)
    w, has_w = _vec(weight)
    nch, per = _chunks(m)
    dwp, dbp = np.empty((nch, n), np.float32), np.empty((nch, n), np.float32)
    args = (m, n, dya, dys, dha, dhs, ha, hs, w, mean.numpy(), rstd.numpy(), _out(dx), dwp, dbp,
            dh is not None, has_w)  # fmt: skip
    _launch(K._ln_bwd_rows, m, n, nch, per, args)
    dw = db = None
    if has_w:
        dw = torch.empty(n, dtype=F32)
        K._sum_chunks(dwp, dw.numpy())
    if has_bias:
        db = torch.empty(n, dtype=F32)
        K._sum_chunks(dbp, db.numpy())
    return dx.to(h.dtype), dw, db
