"""Numba CPU kernel: the LayerNorm backward of bfloat16 rows read as 32-bit pairs, and its
drivers (a launch choice, ``Launch.bf16_pairs``; the formulas are those of
:func:`normlab.kernels.numba.backward.ln_row_loop`).

Why: the bfloat16 LayerNorm backward is bound by the vector units on a machine of few cores,
and a good share of their work is converting (a widening load with a shuffle and a shift per
input, in both passes) and the shuffle of the narrowing store (the profile is in
docs/kernels.md, "Launch choices and the tuner"). This kernel converts without shuffles:

- a row of ``N`` bfloat16 (``N`` even) is read as ``N / 2`` uint32 words; element ``2j`` is the
  low half of word ``j`` and element ``2j + 1`` the high half, so ``f32(2j) = bits(u << 16)``
  and ``f32(2j + 1) = bits(u & 0xFFFF0000)``: one integer operation each, no shuffle;
- ``dx`` is stored the same way: the rounded bits of the even element shifted down, OR the odd
  element's high half (:func:`pack`), one 32-bit store per pair;
- the weight and the partial sums are split into even and odd halves (``wd``, and ``dw``/``db``
  of shape ``(chunks, 2, N / 2)``), put back in element order by the final reduction (same
  chunk order; the two-pass loop on long rows adds two rows' terms to them at once);
- FMA contraction is allowed (``_JIT``): the reference kernel forbids it for the one-element
  row, whose ``w dy - mean(w dy)`` must be exactly 0; rows here have at least two elements.

Rows qualify when ``dy``, ``h`` (and ``dh``) are bfloat16 with ``N`` and the row strides even
and 4-byte aligned addresses (:func:`normlab.kernels.numba.launch.ln_bwd` checks); other calls
run the reference kernel.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import overload

from normlab.kernels.numba import bf16
from normlab.kernels.numba.backward import ln_row_loop
from normlab.kernels.numba.bf16 import _HALF, _ONE, _QNAN, _S16, _bits_f32, _f32_bits, rows, vec
from normlab.kernels.numba.kernels import _F0, _JIT

_HI = np.uint32(0xFFFF0000)
_U32 = np.uint32(0)  # the tag of a row of pairs


@njit(inline="always")
def lo(u):
    """The even element of a pair as float32."""
    return _bits_f32(np.uint32(u << _S16))


@njit(inline="always")
def hi(u):
    """The odd element of a pair as float32."""
    return _bits_f32(np.uint32(u & _HI))


@njit(inline="always")
def _rne(v):
    """The bits of ``v`` rounded to nearest even at bit 16 (bfloat16 in the high half)."""
    u = _f32_bits(v)
    return np.uint32(u + _HALF + ((u >> _S16) & _ONE))


@njit(inline="always")
def _rne_nan(v):
    """:func:`_rne` keeping a NaN a quiet NaN (as :func:`~normlab.kernels.numba.bf16.f32_to_bf16`
    does)."""
    u = _f32_bits(v)
    nan = np.uint32(0) - np.uint32(v != v)
    return np.uint32(((u | _QNAN) & nan) | ((u + _HALF + ((u >> _S16) & _ONE)) & ~nan))


def pack(ve, vo, st):
    """The pair ``(ve, vo)`` rounded to bfloat16 as one uint32; ``st`` as the store tag of
    :mod:`~normlab.kernels.numba.backward` (bfloat16: without the NaN case)."""


@overload(pack, inline="always")
def _pack(ve, vo, st):
    if st == types.uint16:
        return lambda ve, vo, st: np.uint32((_rne(ve) >> _S16) | (_rne(vo) & _HI))
    return lambda ve, vo, st: np.uint32((_rne_nan(ve) >> _S16) | (_rne_nan(vo) & _HI))


@njit(inline="always")
def _chunk(dw, db, c):
    """Chunk ``c``'s partial sums ``(dw even, dw odd, db even, db odd)``, zeroed."""
    acc = (dw[c, 0], dw[c, 1], db[c, 0], db[c, 1])
    for a in acc:
        a[:] = _F0
    return acc


@njit(inline="always")
def _acc(uh, ud, j, we, wo, awe, awo, abe, abo, mu, rs_):
    """Pair ``j`` of pass 1: ``dy xhat`` and ``dy`` added to the partial sums (dw even, dw odd,
    db even, db odd); returns ``(xhat even, xhat odd, w dy even, w dy odd)``."""
    xe, xo = (lo(uh) - mu) * rs_, (hi(uh) - mu) * rs_
    ge, go = lo(ud), hi(ud)
    awe[j] += ge * xe
    awo[j] += go * xo
    abe[j] += ge
    abo[j] += go
    return xe, xo, ge * we[j], go * wo[j]


@njit(inline="always")
def _sums(hr, dyr, we, wo, acc, mu, rs_, k):
    """Pass 1 of a row of ``k`` pairs: ``(sum xhat, sum w dy, sum w dy xhat)``, and ``dy xhat``,
    ``dy`` added to the partial sums ``acc = (dw even, dw odd, db even, db odd)``."""
    awe, awo, abe, abo = acc
    s0 = s1 = s2 = _F0
    for j in range(k):
        xe, xo, gwe, gwo = _acc(hr[j], dyr[j], j, we, wo, awe, awo, abe, abo, mu, rs_)
        s0 += xe + xo
        s1 += gwe + gwo
        s2 += gwe * xe + gwo * xo
    return s0, s1, s2


@njit(inline="always")
def _sums2(h0, dy0, h1, dy1, we, wo, acc, st0, st1, k):
    """:func:`_sums` of two rows at once, ``st0``/``st1`` their ``(mean, rstd)``: each partial
    sum is loaded and stored once for both rows."""
    awe, awo, abe, abo = acc
    (m0, r0), (m1, r1) = st0, st1
    s0 = s1 = s2 = t0 = t1 = t2 = _F0
    for j in range(k):  # written out: see _dx_row_next
        uh, ud, vh, vd = h0[j], dy0[j], h1[j], dy1[j]
        xe, xo = (lo(uh) - m0) * r0, (hi(uh) - m0) * r0
        ye, yo = (lo(vh) - m1) * r1, (hi(vh) - m1) * r1
        ge, go, fe, fo = lo(ud), hi(ud), lo(vd), hi(vd)
        awe[j] += ge * xe + fe * ye
        awo[j] += go * xo + fo * yo
        abe[j] += ge + fe
        abo[j] += go + fo
        gwe, gwo, fwe, fwo = ge * we[j], go * wo[j], fe * we[j], fo * wo[j]
        s0 += xe + xo
        s1 += gwe + gwo
        s2 += gwe * xe + gwo * xo
        t0 += ye + yo
        t1 += fwe + fwo
        t2 += fwe * ye + fwo * yo
    return (s0, s1, s2), (t0, t1, t2)


@njit(inline="always")
def _dx(uh, ud, j, we, wo, mu, rs_, coefs):
    """``dx`` of pair ``j`` (before ``dh``): the two float32 values."""
    a, bb = coefs
    xe, xo = (lo(uh) - mu) * rs_, (hi(uh) - mu) * rs_
    return rs_ * (lo(ud) * we[j] - a - xe * bb), rs_ * (hi(ud) * wo[j] - a - xo * bb)


@njit(inline="always")
def _dx_row(hr, dyr, dhr, dxr, k, we, wo, mu, rs_, coefs, has_dh, st):
    """Pass 2 of a row: its ``dx``."""
    if has_dh:
        for j in range(k):
            ve, vo = _dx(hr[j], dyr[j], j, we, wo, mu, rs_, coefs)
            dxr[j] = pack(ve + lo(dhr[j]), vo + hi(dhr[j]), st)
    else:
        for j in range(k):
            ve, vo = _dx(hr[j], dyr[j], j, we, wo, mu, rs_, coefs)
            dxr[j] = pack(ve, vo, st)


@njit(inline="always")
def _dx_row_next(hr, dyr, dhr, dxr, k, we, wo, mu, rs_, coefs, has_dh, st, nxt):
    """:func:`_dx_row` fused with :func:`_sums` of the next row, whose sums it returns;
    ``nxt = (h row, dy row, mean, rstd, acc)``. The partial sums' rows are unpacked before the
    loop and passed to :func:`_acc` one by one: so written, the kernel compiles to the same
    assembly as with the body written out. An earlier per-pair helper returning the three terms
    stopped LLVM from vectorizing the loop (several times slower); one that unpacked ``acc`` in
    the loop compiled to other code (not timed)."""
    hn, dyn, mn, rn, (awe, awo, abe, abo) = nxt
    s0 = s1 = s2 = _F0
    if has_dh:
        for j in range(k):
            ve, vo = _dx(hr[j], dyr[j], j, we, wo, mu, rs_, coefs)
            dxr[j] = pack(ve + lo(dhr[j]), vo + hi(dhr[j]), st)
            xe, xo, gwe, gwo = _acc(hn[j], dyn[j], j, we, wo, awe, awo, abe, abo, mn, rn)
            s0 += xe + xo
            s1 += gwe + gwo
            s2 += gwe * xe + gwo * xo
    else:
        for j in range(k):
            ve, vo = _dx(hr[j], dyr[j], j, we, wo, mu, rs_, coefs)
            dxr[j] = pack(ve, vo, st)
            xe, xo, gwe, gwo = _acc(hn[j], dyn[j], j, we, wo, awe, awo, abe, abo, mn, rn)
            s0 += xe + xo
            s1 += gwe + gwo
            s2 += gwe * xe + gwo * xo
    return s0, s1, s2


_loop = ln_row_loop(_chunk, _sums2, _sums, _dx_row, _dx_row_next)


@njit(**_JIT)
def _ln_bwd_pairs_rows(c0, c1, per, pipe, dw, db, wd, args):
    """LayerNorm backward of chunks ``[c0, c1)`` of bfloat16 rows read as pairs
    (:func:`~normlab.kernels.numba.backward.ln_row_loop`); ``wd`` the FP32 weight as ``(even,
    odd)`` halves, ``dw``/``db`` the partial sums, ``(chunks, 2, N / 2)``."""
    m, n, dyp, dys, dhp, dhs, hp, hs, _, meanp, rstdp, dxp, has_dh, _, _, st, vw = args
    bf16.vector_width(vw)
    k = n // 2
    dy, dh = rows(dyp, m, dys // 2, _U32), rows(dhp, m, dhs // 2, _U32)
    h, dx = rows(hp, m, hs // 2, _U32), rows(dxp, m, k, _U32)
    mean, rstd, we, wo = vec(meanp, m), vec(rstdp, m), wd[0], wd[1]
    _loop(c0, c1, per, pipe, dw, db, (m, n, k, dy, dh, h, dx, we, wo, mean, rstd, has_dh, st))


@njit(inline="always")
def _split(wp, n):
    """The float32 weight at ``wp`` as ``(2, N / 2)``: its even and its odd elements."""
    w, k = vec(wp, n), n // 2
    wd = np.empty((2, k), np.float32)
    for j in range(k):
        wd[0, j] = w[2 * j]
        wd[1, j] = w[2 * j + 1]
    return wd


@njit(inline="always")
def _reduce_pairs(parts, outp):
    """``out = parts.sum(0)`` in chunk order, even and odd halves interleaved back, into the
    vector at ``outp`` (0: none); plain loops, as in
    :func:`~normlab.kernels.numba.partials._reduce`."""
    if outp == 0:
        return
    k = parts.shape[2]
    out = vec(outp, 2 * k)
    for j in range(k):
        out[2 * j] = parts[0, 0, j]
        out[2 * j + 1] = parts[0, 1, j]
    for c in range(1, parts.shape[0]):
        for j in range(k):
            out[2 * j] += parts[c, 0, j]
            out[2 * j + 1] += parts[c, 1, j]


@njit(**_JIT)
def ln_bwd_pairs(nch, per, pipe, n, args, dwo, dbo):
    """:func:`~normlab.kernels.numba.backward.ln_bwd` of bfloat16 rows read as pairs."""
    k = n // 2
    dw, db = np.empty((nch, 2, k), np.float32), np.empty((nch, 2, k), np.float32)
    wd = _split(args[8], n)
    _ln_bwd_pairs_rows(0, nch, per, pipe, dw, db, wd, args)
    _reduce_pairs(dw, dwo)
    _reduce_pairs(db, dbo)


@njit(parallel=True, **_JIT)
def ln_bwd_pairs_par(nch, per, pipe, n, args, dwo, dbo):
    k = n // 2
    dw, db = np.empty((nch, 2, k), np.float32), np.empty((nch, 2, k), np.float32)
    wd = _split(args[8], n)
    for c in prange(nch):
        _ln_bwd_pairs_rows(c, c + 1, per, pipe, dw, db, wd, args)
    _reduce_pairs(dw, dwo)
    _reduce_pairs(db, dbo)
