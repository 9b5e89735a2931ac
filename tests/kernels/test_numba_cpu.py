"""The Numba CPU kernels against the reference ops: every option, dtype and odd shape, gradients
included, with the "2x eager error + atol" bound against a float64 truth.

Numba compiles one specialization per array-dtype combination, and CI starts with an empty
cache, so the tests reuse a few dtype combinations; flags (casting, offset, eps_inside, ...) are
runtime arguments.
"""

import os
import subprocess
import sys

import pytest
import torch
from kernel_checks import (
    assert_grad_close,
    grad_tolerances,
    make_inputs,
    rounded_xhat_dweight,
    run_three_ways,
)

import normlab
from normlab import reference as R
from normlab.kernels.numba import buffer_pool
from normlab.kernels.numba import launch as numba_launch
from normlab.testing import assert_kernel_close, max_abs_error

BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32


@pytest.fixture(params=[False, True], ids=["default", "memory_efficient"])
def mode(request):
    """The backward saving the input (default) or the output (memory_efficient=True)."""
    return request.param


def check(*args, grad=True, seed=1, **kw):
    """Run ``op`` on the numba backend, the reference at x's dtype and at float64; compare.
    ``memory_efficient=True`` holds the gradients to normlab.testing's RECOMPUTE rows."""
    if isinstance(args[0], bool):  # check(mode, op, x, ...): the mode of the `mode` fixture
        kw["memory_efficient"], args = args[0], args[1:]
    op, x = args
    runs = run_three_ways(op, "numba", x, kw, grad=grad, seed=seed)
    if runs is None:
        return
    cots, (got, got_g), (want, want_g), (truth, truth_g) = runs
    tols = grad_tolerances(kw.get("memory_efficient", False), want[0].dtype)
    if op == "rms_norm" and "weight" in truth_g and kw.get("casting", "llama") != "gemma":
        truth_g["weight"] = rounded_xhat_dweight(x, kw, cots[0].to(want[0].dtype))
    for i, (a, e, t) in enumerate(zip(got, want, truth, strict=True)):
        assert_kernel_close(a, e, t, f"{op} out[{i}]")
    for k in want_g:
        assert_grad_close(got_g[k], want_g[k], truth_g[k], f"{op} d{k}", **tols)


@pytest.mark.parametrize("casting", ["llama", "gemma", "none"])
@pytest.mark.parametrize("offset", [0.0, 1.0])
@pytest.mark.parametrize("eps_inside", [True, False])
@pytest.mark.parametrize("fused", [False, True])
def test_rms_norm_every_option(casting, offset, eps_inside, fused, mode):
    dtype = F32 if casting == "none" else BF16  # "none" is all-bf16 math in the reference
    x, w, _, r = make_inputs((37, 123), dtype)  # 3 rows a chunk: the pipelined row loop
    check(mode, "rms_norm", x, weight=w, residual=r if fused else None, offset=offset,
          casting=casting, eps_inside=eps_inside, eps=1e-2)  # fmt: skip


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=str)
@pytest.mark.parametrize("wdtype", ["same", F32], ids=str)
@pytest.mark.parametrize("n", [1, 3, 4097])
def test_dtypes_weight_dtypes_and_odd_sizes(dtype, wdtype, n, mode):
    x, w, b, r = make_inputs((3, n), dtype, None if wdtype == "same" else wdtype)
    for casting in ("llama", "gemma"):
        check(mode, "rms_norm", x, weight=w, casting=casting)
        check(mode, "rms_norm", x, weight=w, residual=r, casting=casting)
    check(mode, "layer_norm", x, weight=w, bias=b)
    check(mode, "layer_norm", x, weight=w, bias=b, residual=r)


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_without_weight_or_bias(dtype, mode):
    x, w, _, r = make_inputs((37, 123), dtype)
    check(mode, "rms_norm", x)
    check(mode, "rms_norm", x, residual=r, eps_inside=False)
    check(mode, "layer_norm", x)
    check(mode, "layer_norm", x, weight=w, residual=r)


def test_parallel_path_on_large_rows(mode):
    # 2 x 70000 elements is above the parallel threshold: two threads run here.
    assert 2 * 70000 >= numba_launch.PAR_MIN_ELEMENTS
    x, w, b, r = make_inputs((2, 70000), F32)
    check(mode, "rms_norm", x, weight=w, residual=r, offset=1.0, casting="gemma")
    check(mode, "layer_norm", x, weight=w, bias=b, residual=r)
    x, w, b, r = make_inputs((160, 1024), BF16)
    check(mode, "rms_norm", x, weight=w, residual=r)
    check(mode, "layer_norm", x, weight=w, bias=b)


@pytest.mark.parametrize("shape", [(2, 3, 123), (2, 2, 3, 64)], ids=str)
def test_3d_and_4dmake_inputs(shape, mode):
    x, w, b, r = make_inputs(shape, BF16)
    check(mode, "rms_norm", x, weight=w, residual=r)
    check(mode, "layer_norm", x, weight=w, bias=b)


def test_non_contiguous_views_are_read_in_place_or_copied(mode):
    x, w, b, _ = make_inputs((12, 160), F32)
    rows = x[::3, 16:139]  # unit element stride, row stride 160: read without a copy
    cols = x[:, ::2]  # element stride 2: copied
    trans = x.t()[:123]  # a transposed view
    for v in (rows, cols, trans):
        n = v.shape[-1]
        check(mode, "rms_norm", v, weight=w[:n], residual=torch.randn(v.shape))
        check(mode, "layer_norm", v, weight=w[:n], bias=b[:n])
    bcast = torch.randn(1, 123).expand(5, 123)  # row stride 0
    check(mode, "rms_norm", bcast, weight=w[:123])


def test_zero_rows(mode):
    x, w, b, r = make_inputs((0, 123), F32)
    check(mode, "rms_norm", x, weight=w, residual=r)
    check(mode, "layer_norm", x, weight=w, bias=b)
    x3 = torch.empty(2, 0, 64, requires_grad=True)
    y = normlab.rms_norm(x3, backend="numba", memory_efficient=mode)
    assert y.shape == (2, 0, 64)
    y.sum().backward()
    assert x3.grad.shape == x3.shape


def test_no_grad_path_and_float64_fallback():
    x, w, b, r = make_inputs((4, 123), F32)
    check("rms_norm", x, weight=w, residual=r, grad=False)
    check("layer_norm", x, weight=w, bias=b, grad=False)
    x64, w64 = x.double(), w.double()
    assert normlab.rms_norm(x64, w64, backend="numba").dtype == torch.float64
    torch.testing.assert_close(normlab.rms_norm(x64, w64, backend="numba"), R.rms_norm(x64, w64))


def test_special_values_propagate():
    x = torch.randn(3, 40).to(BF16)
    x[0, 5] = float("nan")
    x[1, 7] = float("inf")
    y = normlab.rms_norm(x, backend="numba")
    want = R.rms_norm(x)
    torch.testing.assert_close(y, want, equal_nan=True, atol=8e-3, rtol=1.6e-2)
    assert y[0].isnan().all() and not y[2].isnan().any()


def test_bf16_store_rounds_to_nearest_even():
    # Values exactly halfway between two bf16 numbers: ties must go to the even mantissa.
    base = torch.tensor([1.0, 1.0078125, -3.0, 1e-30], dtype=F32)  # bf16 values
    ulp = torch.tensor([2.0**-7, 2.0**-7, 2.0**-6, 2.0**-106])
    x = torch.stack([base + ulp / 2, base + 3 * ulp / 2, base + ulp / 4]).reshape(-1)
    r = torch.zeros_like(x, dtype=BF16).reshape(1, -1)
    _, h = normlab.rms_norm(x.reshape(1, -1), residual=r, backend="numba")
    torch.testing.assert_close(h.reshape(-1), x.to(BF16), atol=0, rtol=0)


@pytest.mark.parametrize(
    ("shift", "std"), [(0.5, 1.0), (1e4, 1.0), (3e18, 3e15)], ids=["plain", "cancels", "overflows"]
)
def test_layer_norm_variance_keeps_fp32_accuracy(shift, std):
    # A one-pass E[h²] - mean² loses most digits when mean² >> var and overflows for huge rows;
    # the kernel must fall back to the two-pass variance there.
    g = torch.Generator().manual_seed(0)
    x = shift + std * torch.randn(40, 256, generator=g)
    with torch.no_grad():
        got = normlab.layer_norm(x, backend="numba")
    truth = R.layer_norm(x.double())
    assert max_abs_error(got, truth) <= 2 * max_abs_error(R.layer_norm(x), truth) + 1e-5


def test_bf16_store_keeps_every_nan_a_nan():
    # NaN payloads whose rounding carry would make an infinity (low bits only) or -0 (all ones)
    bits = torch.tensor([0x7F800001, 0x7FFFFFFF, 0xFF800001, 0x7FC00000], dtype=torch.int64)
    x = bits.to(torch.int32).view(F32).reshape(1, -1)
    r = torch.zeros(1, 4, dtype=BF16)
    with torch.no_grad():
        _, h = normlab.rms_norm(x, residual=r, backend="numba")
    assert h.isnan().all()


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("residual", [False, True], ids=["plain", "residual"])
def test_bf16_output_keeps_a_float32_weight_nan(op, residual):
    # bfloat16 outputs are stored without the NaN case when the kernel saw no NaN in the FP32
    # weight/bias; a payload-carrying NaN there must still come out as a NaN, not inf or -0.
    x, w, b, r = make_inputs((5, 64), BF16, wdtype=F32)
    bad = torch.tensor([0x7FFFFFFF, 0xFFFFFFFF], dtype=torch.int64).to(torch.int32).view(F32)
    w[3], b[7] = bad[0], bad[1]
    kw = {"residual": r} if residual else {}
    if op == "rms_norm":
        args, kw["casting"] = (x, w), "gemma"  # y in x's dtype, not promoted to the weight's
    else:
        args = (x, w, b)
    with torch.no_grad():
        out = getattr(normlab, op)(*args, backend="numba", **kw)
    y = out[0] if residual else out
    assert y[:, 3].isnan().all()
    assert y[:, 7].isnan().all() == (op == "layer_norm")
    assert not y[:, :3].isnan().any() and y[:, :3].isfinite().all()


def test_forked_child_runs_serially(monkeypatch):
    # GNU OpenMP aborts a forked child that enters a pool its parent started: such a child must
    # not use Numba's threads (an at-fork hook marks the pool unusable in the child). A real
    # fork cannot test it here: torch's own OpenMP pool hangs in such a child.
    monkeypatch.setitem(numba_launch._par, "started", True)
    monkeypatch.setitem(numba_launch._par, "ok", True)
    numba_launch._after_fork_in_child()
    assert numba_launch._threads(4096, 4096, 16) == 0
    x, w, b, r = make_inputs((160, 1024), F32)
    check("rms_norm", x, weight=w, residual=r)


def test_starting_numbas_pool_leaves_torchs_thread_count_alone():
    """Numba and torch share one OpenMP runtime; starting Numba's pool set its thread count to
    Numba's default, which torch read as its own (a study worker set to one thread then ran
    torch's ops on two, oversubscribing the cores). A fresh process, so the pool starts here."""
    code = (
        "import torch, normlab\n"
        "torch.set_num_threads(1)\n"
        "normlab.layer_norm(torch.randn(1024, 64), backend='numba')  # big enough for the pool\n"
        "print(torch.get_num_threads())\n"
    )
    env = {**os.environ, "NUMBA_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "1"


def test_double_backward_raises():
    x, w, _, _ = make_inputs((4, 16), F32)
    x.requires_grad_(True)
    y = normlab.rms_norm(x, w, backend="numba")
    (gx,) = torch.autograd.grad(y.pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|differentiable"):
        gx.sum().backward()


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_bad_input_raises_like_the_reference(op):
    x = torch.randn(4, 8)
    cases = [
        ((torch.ones(4, 8, dtype=torch.int32),), {}),
        ((x, torch.ones(7)), {}),
        ((x,), {"residual": torch.ones(4, 7)}),
        ((x,), {"eps": -1.0}),
    ]
    for args, kw in cases:
        errors = []
        for backend in ("reference", "numba"):
            with pytest.raises((TypeError, ValueError)) as e:
                getattr(normlab, op)(*args, backend=backend, **kw)
            errors.append((e.type, str(e.value)))
        assert errors[0] == errors[1]


def test_results_are_deterministic_across_runs_and_thread_counts():
    x, w, b, r = make_inputs((512, 256), F32, seed=3)  # parallel path
    dy = torch.randn(512, 256)

    def run():
        ws = w.clone().requires_grad_(True)
        bs = b.clone().requires_grad_(True)
        y1 = normlab.rms_norm(x, ws, backend="numba")
        y2, h = normlab.layer_norm(x, ws, bs, residual=r, backend="numba")
        (y1 + y2).backward(dy)
        return y1.detach(), y2.detach(), h, ws.grad, bs.grad

    first = run()
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        serial = run()
    finally:
        torch.set_num_threads(threads)
    for a, b_, c in zip(first, run(), serial, strict=True):
        assert torch.equal(a, b_) and torch.equal(a, c)


def test_zero_rows_with_eps_zero_give_inf_times_zero_like_the_reference():
    x = torch.tensor([[3.0], [-2.0], [0.0]])
    with torch.no_grad():
        got = normlab.rms_norm(x, eps=0.0, backend="numba")
    torch.testing.assert_close(got, R.rms_norm(x, eps=0.0), equal_nan=True)


@pytest.mark.parametrize("shape", [(1024, 1024), (1024, 256)])  # 4 MB; 1 MB, the smallest
def test_large_output_buffers_are_recycled_only_when_free(shape):
    x = torch.randn(*shape)
    first = normlab.rms_norm(x, backend="numba")
    ptr, want = first.data_ptr(), first.clone()
    assert ptr % buffer_pool.ALIGN == 0  # on a cache line (numpy's own alignment is 16)
    view = first[:, :3]
    del first
    other = normlab.rms_norm(x * 2, backend="numba")
    assert other.data_ptr() != ptr  # a view still uses the first buffer
    torch.testing.assert_close(view, want[:, :3], atol=0, rtol=0)
    del view
    again = normlab.rms_norm(x, backend="numba")
    assert again.data_ptr() == ptr  # now free: reused
    torch.testing.assert_close(again, want, atol=0, rtol=0)


def test_buffer_pool_keeps_at_most_its_budget(monkeypatch):
    monkeypatch.setattr(buffer_pool, "MAX_BYTES", 3 * 2**20)
    monkeypatch.setattr(buffer_pool, "_pool", {})

    def pooled() -> set[int]:
        return {id(b) for bufs in buffer_pool._pool.values() for b in bufs}

    x = torch.randn(1024, 256)  # 1 MB outputs
    alive = [normlab.rms_norm(x, backend="numba") for _ in range(5)]  # none can be reused
    assert len(pooled()) == 3 and buffer_pool.total() == 3 * 2**20
    kept = pooled()
    del alive
    normlab.rms_norm(x, backend="numba")
    assert pooled() == kept  # a kept buffer, now free, was handed out: no new one


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_bf16_backward_keeps_a_float32_weight_nan(op):
    # The bfloat16 dx is stored without the NaN case only when the FP32 weight holds no NaN or
    # inf; a payload-carrying NaN there must make every dx a NaN, not an inf or -0.
    x, w, _, _ = make_inputs((64, 1024), BF16, wdtype=F32)  # a large call: the lean store
    w[3] = torch.tensor([0x7FFFFFFF], dtype=torch.int32).view(F32)
    x.requires_grad_(True)
    getattr(normlab, op)(x, w, backend="numba").float().sum().backward()
    assert x.grad.isnan().all()
