"""The Triton kernels against the reference ops: every option, dtype and odd shape, gradients
included, with the "2x eager error + atol" bound against a float64 truth.

On a CUDA machine they run on the GPU. Without one they run in the Triton interpreter
(tests/conftest.py sets TRITON_INTERPRET=1), which executes each program as numpy code: shapes
stay small, rows few, and the looped path is forced at small N by shrinking the register limit.
"""

import functools
import os

import pytest
import torch
from kernel_checks import assert_error_bound, grad_tolerances, make_inputs, run_three_ways

import normlab
from normlab import reference as R
from normlab.testing import TOLERANCES, assert_kernel_close

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")
tk = pytest.importorskip("normlab.kernels.triton.launch")
tk_kernels = pytest.importorskip("normlab.kernels.triton.kernels")
tuning = pytest.importorskip("normlab.kernels.triton.tuning")
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if not normlab.functional.get_backend("triton").supports(DEVICE):
    pytest.skip(
        "needs a GPU or TRITON_INTERPRET=1 before triton is imported", allow_module_level=True
    )

BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32

_inputs = functools.partial(make_inputs, device=DEVICE)

# Masked-off lanes (rows past M, columns past N) may divide by zero or overflow in numpy; the
# stores drop them, but the interpreter warns.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning:triton.runtime.interpreter")


@pytest.fixture(params=[False, True], ids=["default", "memory_efficient"])
def mode(request):
    """The backward saving the input (default) or the output (memory_efficient=True)."""
    return request.param


def check(*args, grad=True, seed=1, **kw):
    """Run ``op`` on the triton backend, the reference at x's dtype and at float64; compare
    outputs and (with ``grad``) the gradients of every tensor input.

    casting="none" in a half dtype is the naive all-half eager code: its gradients carry a
    rounding per autograd step, and torch's CPU ``rsqrt`` on half tensors is not correctly
    rounded (the kernel's is). The kernel is more accurate than that code rather than within
    an ulp of it, so there outputs get 3x the tolerance and gradients only the
    "2x eager error + atol" bound. ``check(mode, op, x, ...)`` passes the ``mode`` fixture as
    ``memory_efficient``, whose gradients get normlab.testing's RECOMPUTE rows.
    """
    if isinstance(args[0], bool):
        kw["memory_efficient"], args = args[0], args[1:]
    op, x = args
    runs = run_three_ways(op, "triton", x, kw, grad=grad, seed=seed, device=DEVICE)
    if runs is None:
        return
    _, (got, got_g), (want, want_g), (truth, truth_g) = runs
    tols = grad_tolerances(kw.get("memory_efficient", False), want[0].dtype)
    naive_half = kw.get("casting") == "none" and x.dtype != torch.float32
    for i, (a, e, t) in enumerate(zip(got, want, truth, strict=True)):
        if naive_half:
            tol = {k: 3 * v for k, v in TOLERANCES[a.dtype].items()}
            torch.testing.assert_close(a, e, **tol)
            assert_error_bound(a, e, t, f"{op} out[{i}]")
        else:
            assert_kernel_close(a, e, t, f"{op} out[{i}]")
    for k in want_g:
        if naive_half:
            assert_error_bound(got_g[k], want_g[k], truth_g[k], f"{op} d{k}")
        else:
            assert_kernel_close(got_g[k], want_g[k], truth_g[k], f"{op} d{k}", **tols)


@pytest.fixture
def looped(monkeypatch):
    """Force the chunked (looped) path at small N: rows over 64 elements stream in 32-chunks."""
    monkeypatch.setattr(tk, "MAX_FUSED_FWD", 64)
    monkeypatch.setattr(tk, "MAX_FUSED_BWD", 64)
    monkeypatch.setattr(tk, "LOOP_BLOCK", 32)
    assert tk.pick_config(100).looped and tk.pick_config(100, backward=True).looped


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=str)
@pytest.mark.parametrize("casting", ["llama", "gemma", "none"])
@pytest.mark.parametrize("eps_inside", [True, False])
def test_rms_norm_every_option(dtype, casting, eps_inside, mode):
    x, w, _, r = _inputs((5, 37), dtype)
    for offset, residual in [(0.0, None), (1.0, r)]:
        check(mode, "rms_norm", x, weight=w, residual=residual, offset=offset, casting=casting,
              eps_inside=eps_inside)  # fmt: skip


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=str)
def test_layer_norm_with_and_without_affine_and_residual(dtype, mode):
    x, w, b, r = _inputs((5, 37), dtype)
    x = x + 30  # a large mean must not cancel the variance away
    check(mode, "layer_norm", x, weight=w, bias=b)
    check(mode, "layer_norm", x, weight=w, bias=b, residual=r)
    check(mode, "layer_norm", x, residual=r)
    check(mode, "layer_norm", x, weight=w)


@pytest.mark.parametrize("dtype", [BF16, F16], ids=str)
def test_fp32_weights_and_mixed_residual_dtypes(dtype, mode):
    x, w, b, _ = _inputs((4, 40), dtype, wdtype=F32)
    r32 = torch.randn(4, 40, generator=torch.Generator().manual_seed(3)).to(DEVICE)
    check(mode, "rms_norm", x, weight=w, casting="llama")  # y promotes to fp32
    check(mode, "rms_norm", x, weight=w, residual=r32, offset=1.0, casting="gemma")  # h in fp32
    check(mode, "layer_norm", x, weight=w, bias=b, residual=r32)
    check(mode, "rms_norm", x)  # no weight at all


@pytest.mark.parametrize("n", [1, 3, 123, 4097])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
def test_odd_hidden_sizes(n, dtype, mode):
    x, w, b, r = _inputs((3, n), dtype)
    check(mode, "rms_norm", x, weight=w, residual=r)
    check(mode, "layer_norm", x, weight=w, bias=b)


def test_3d_input_and_non_contiguous_views(mode):
    x, w, b, r = _inputs((2, 3, 48), BF16)
    check(mode, "rms_norm", x, weight=w, residual=r, casting="gemma")
    check(mode, "layer_norm", x.transpose(0, 1), weight=w, bias=b)  # leading dims do not collapse
    check(mode, "rms_norm", x[:, :, ::2], weight=w[:24])  # stride(-1) == 2: copied once
    check(mode, "layer_norm", x[:, 1:, :40], weight=w[:40], bias=b[:40], residual=r[:, 1:, :40])
    row = x[:1, :1].expand(2, 4, 48)  # row stride 0
    check(mode, "rms_norm", row, weight=w, grad=False)


def test_unit_stride_rows_are_read_in_place():
    x = torch.randn(4, 5, 100, device=DEVICE)
    for view in (x[:, :, :37], x[1:3], x[:, 2]):
        assert tk.as_rows(view).data_ptr() == view.data_ptr()
    assert tk.as_rows(x[:, :, ::2]).is_contiguous()


def test_zero_rows(mode):
    for shape in [(0, 16), (2, 0, 16)]:
        x, w, b, r = _inputs(shape, F32)
        check(mode, "rms_norm", x, weight=w, residual=r)
        check(mode, "layer_norm", x, weight=w, bias=b)


@pytest.mark.parametrize("casting", ["llama", "gemma", "none"])
def test_looped_path_every_option(looped, casting, mode):
    x, w, b, r = _inputs((3, 100), BF16)
    check(mode, "rms_norm", x, weight=w, residual=r, offset=1.0, casting=casting)
    check(mode, "rms_norm", x, weight=w, casting=casting, eps_inside=False)
    if casting == "llama":
        check(mode, "layer_norm", x + 30, weight=w, bias=b, residual=r)
        check(mode, "layer_norm", x, weight=w)


@pytest.mark.parametrize("n", [70000, 262144])
def test_looped_path_at_large_hidden_sizes(n, monkeypatch, mode):
    assert tk.pick_config(n).looped and tk.pick_config(n, backward=True).looped
    # Each chunk costs the interpreter a fixed ~ms of Python; 16K chunks keep this test short
    # (test_looped_path_every_option covers many small chunks and the ragged tail).
    monkeypatch.setattr(tk, "LOOP_BLOCK", 16384)
    x, w, b, r = _inputs((1, n), BF16)
    check(mode, "rms_norm", x, weight=w, residual=r)
    check(mode, "layer_norm", x, weight=w, bias=b, grad=n < 100000)


def _use_backward_config(monkeypatch, cfg, programs=3):
    """Launch every backward with ``cfg`` on ``programs`` persistent programs."""
    pick = tk.pick_config
    monkeypatch.setattr(tk, "pick_config", lambda n, backward=False: cfg if backward else pick(n))
    monkeypatch.setattr(tk, "_persistent_programs", lambda *args: programs)


# The backward's paths beyond the default grid: 37 rows in tiles of 2 (or 4) rows over 3
# programs, so each program walks several tiles and the last tile is ragged; a prefetched tile
# past the last row is masked off; looped tiles of several rows stream 16-column chunks.
_BWD_PATHS = {
    "prefetch": tk.LaunchConfig(2, 64, 4, looped=False, prefetch=True),
    "resident": tk.LaunchConfig(4, 64, 4, looped=False),
    "looped_rows": tk.LaunchConfig(4, 16, 4, looped=True),
}


@pytest.mark.parametrize("path", list(_BWD_PATHS))
@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=str)
def test_backward_paths_several_tiles_per_program(path, dtype, mode, monkeypatch):
    _use_backward_config(monkeypatch, _BWD_PATHS[path])
    x, w, b, r = _inputs((37, 40), dtype)
    check(mode, "rms_norm", x, weight=w, residual=r, offset=1.0, casting="gemma")
    check(mode, "rms_norm", x, weight=w, casting="none", eps_inside=False)
    check(mode, "layer_norm", x + 30, weight=w, bias=b, residual=r)


@pytest.mark.parametrize("path", list(_BWD_PATHS))
def test_partial_sums_are_bitwise_repeatable(path, monkeypatch):
    # No atomics: each program writes its own partial dweight/dbias row and the host sums them.
    _use_backward_config(monkeypatch, _BWD_PATHS[path])
    x, w, b, _ = _inputs((37, 40), F32)
    x.requires_grad_(), w.requires_grad_(), b.requires_grad_()
    runs = [torch.autograd.grad(normlab.layer_norm(x, w, b, backend="triton").sum(), (w, b))
            for _ in range(2)]  # fmt: skip
    for first, second in zip(*runs, strict=True):
        assert torch.equal(first, second)


def _row_ns():
    """The smallest N each row of the tables serves (rows over 16K: forward and backward)."""
    ns = {t.n_max // 2 + 1 for bwd in (False, True) for t in tuning.table(bwd) if not t.looped}
    return sorted(ns | {2 * tuning.fused_limit(False) + 1})


@pytest.mark.parametrize("n", _row_ns())
def test_every_row_of_the_table(n):
    # One row per range of N, at its ragged low end (the block is about twice the row).
    x, w, b, r = _inputs((2, n), F32)
    check("rms_norm", x, weight=w, residual=r)
    check("layer_norm", x, weight=w, bias=b)


def test_bf16_rounds_to_nearest_even_like_the_gpu():
    # The interpreter truncates FP32 -> BF16; normlab.kernels.triton.interpreter patches it to
    # round as the GPU does.
    h = torch.tensor([[1.0 + 2**-8, 1.0 + 3 * 2**-9, -(1.0 + 2**-8)]], device=DEVICE)
    zero = torch.zeros_like(h, dtype=BF16)
    _, got = normlab.layer_norm(h, residual=zero, backend="triton")
    assert torch.equal(got, h.to(BF16))


@triton.jit
def _three_sums(X, OUT, N: tl.constexpr):
    x = tl.load(X + tl.arange(0, N))[None, :]
    a, b, c = tl.reduce((x, 2.0 * x, x * x), 1, tk_kernels._add3)
    tl.store(OUT + tl.arange(0, 1), a)
    tl.store(OUT + 1 + tl.arange(0, 1), b)
    tl.store(OUT + 2 + tl.arange(0, 1), c)
    tl.store(OUT + 3 + tl.arange(0, 1), tl.sum(x, axis=1))
    tl.store(OUT + 4 + tl.arange(0, 1), tl.sum(2.0 * x, axis=1))
    tl.store(OUT + 5 + tl.arange(0, 1), tl.sum(x * x, axis=1))


@pytest.mark.skipif(DEVICE.type == "cuda", reason="a fix to the CPU interpreter")
def test_interpreted_multi_operand_sums_reduce_as_tl_sum():
    # The interpreter folds a custom combine left to right, one Python call per element; the
    # launcher's fix reduces the backward's sum combines as tl.sum does (np.sum, pairwise).
    tk._interpreted(DEVICE)
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0))
    out = torch.empty(6)
    _three_sums[(1,)](x, out, N=4096)
    assert torch.equal(out[:3], out[3:])


def test_special_values_propagate():
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[1.0, nan, 2.0], [1.0, 2.0, 3.0], [inf, 1.0, 1.0]], device=DEVICE)
    for op in (normlab.rms_norm, normlab.layer_norm):
        got, want = op(x, backend="triton"), op(x, backend="reference")
        torch.testing.assert_close(got, want, equal_nan=True)


def test_float64_goes_to_the_reference():
    x, w, b, r = _inputs((3, 20), torch.float64)
    y, h = normlab.rms_norm(x, w, residual=r, backend="triton")
    assert y.dtype == h.dtype == torch.float64
    torch.testing.assert_close(y, R.rms_norm(x, w, residual=r)[0], rtol=0, atol=0)


def test_config_table():
    for backward in (False, True):
        rows = tuning.table(backward)
        assert rows[-1].looped and not any(t.looped for t in rows[:-1])
        assert [t.n_max for t in rows] == sorted(t.n_max for t in rows)
        for n in [1, 3, 1000, 1024, 1025, 4097, 16384, 32768, 70000]:
            cfg = tk.pick_config(n, backward=backward)
            assert cfg.block_n & (cfg.block_n - 1) == 0 and cfg.num_warps in (4, 8, 16, 32)
            assert cfg.looped == (n > tuning.fused_limit(backward))
            assert cfg.looped or cfg.block_n >= n
            assert cfg.block_m * cfg.block_n <= max(tuning.row(n, backward).tile, cfg.block_n)
            cands = tuning.candidates(n, backward)
            assert cands[0] == tuning.row(n, backward) and len(set(cands)) == len(cands)


def test_table_loads_from_json(tmp_path):
    path = tmp_path / "tuning.json"
    fwd = [tuning.Tune(64, 256, 4), tuning.Tune(tuning.LOOPED, 64, 4, looped=True)]
    tuning.dump({False: fwd, True: list(tuning.BACKWARD)}, path)
    try:
        tuning.load(path)
        assert tk.pick_config(64) == tuning.LaunchConfig(4, 64, 4, False)
        assert tk.pick_config(65).looped and tk.pick_config(65).block_n == 64
        assert tuning.table(True) == tuning.BACKWARD
        x, w, b, r = _inputs((3, 100), BF16)  # the loaded table's looped forward
        check("rms_norm", x, weight=w, residual=r)
        path.write_text('{"forward": [{"n_max": 64, "tile": 256, "num_warps": 4}]}')
        with pytest.raises(ValueError, match="looped"):
            tuning.load(path)
    finally:
        tuning.load(None)
    assert tuning.table(False) == tuning.FORWARD


@pytest.mark.parametrize("memory_efficient", [False, True], ids=["default", "memory_efficient"])
def test_torch_compile_fullgraph_traces_the_custom_ops(memory_efficient):
    # aot_eager runs dynamo and AOTAutograd over the fake kernels (what breaks a graph) without
    # inductor's slow CPU codegen; the compiled call must equal the eager one, gradients too.
    import normlab.kernels.triton.backend  # noqa: F401  (register before tracing)

    me = {"backend": "triton", "memory_efficient": memory_efficient}

    def f(x, w, r):
        y, h = normlab.rms_norm(x, w, residual=r, casting="gemma", offset=1.0, **me)
        z = normlab.layer_norm(h, w, **me)
        return (y.float() * z).sum()

    x, w, _, r = _inputs((4, 64), BF16)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    results = []
    for fn in (compiled, f):
        leaves = [t.clone().requires_grad_() for t in (x, w, r)]
        out = fn(*leaves)
        results.append([out, *torch.autograd.grad(out, leaves)])
    for got, want in zip(*results, strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


_COMPILE_FOR_SM90 = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from normlab.kernels.triton import tuning
from normlab.kernels.triton.kernels import norm_bwd_kernel, norm_fwd_kernel
from normlab.kernels.triton.launch import pick_config

SM90 = GPUTarget("cuda", 90, 32)
FWD = dict(X="*bf16", R="*bf16", H="*fp32", W="*fp32", B="*fp32", Y="*fp32", MEAN="*fp32",
           RSTD="*fp32", stride_x="i32", stride_r="i32", stride_h="i32", stride_y="i32",
           M="i32", N="i32", eps="fp32", offset="fp32")
BWD = dict(H="*fp16", W="*fp16", B="*fp16", MEAN="*fp32", RSTD="*fp32", DY="*fp16",
           DHO="*fp16", DH="*fp16", DW="*fp32", DB="*fp32", stride_h="i32", stride_dy="i32",
           stride_dho="i32", stride_dh="i32", M="i32", N="i32", offset="fp32")

def build(kernel, types, flags, cfg):
    flags = dict(flags, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, LOOPED=cfg.looped)
    if kernel is norm_bwd_kernel:
        flags["PREFETCH"] = cfg.prefetch and not cfg.looped
    types = {**types, **dict.fromkeys(flags, "constexpr")}
    names = kernel.arg_names
    src = ASTSource(kernel, {k: types[k] for k in names},
                    constexprs={(names.index(k),): v for k, v in flags.items()})
    out = triton.compile(src, target=SM90, options={"num_warps": cfg.num_warps})
    assert out.asm["cubin"], cfg

def both(n, rms, cast, from_y, fwd_cfg, bwd_cfg):
    build(norm_fwd_kernel, FWD, dict(IS_RMS=rms, HAS_RES=True, HAS_W=True, HAS_B=not rms,
          CASTING=cast, EPS_INSIDE=cast != 2), fwd_cfg)
    build(norm_bwd_kernel, BWD, dict(IS_RMS=rms, HAS_W=True, HAS_B=not rms, HAS_DHO=rms,
          CASTING=cast, EPS_INSIDE=cast != 2, FROM_Y=from_y), bwd_cfg)

for n, rms, cast, from_y in [(123, False, 0, False), (70000, True, 2, True),
                             (4096, True, 1, False), (20000, False, 0, True), (123, True, 0, True)]:
    both(n, rms, cast, from_y, pick_config(n), pick_config(n, backward=True))
for i, (f, b) in enumerate(zip(tuning.FORWARD, tuning.BACKWARD)):  # every row of the tables
    n = 3 * f.n_max // 4 if f.n_max < tuning.LOOPED else 70000
    both(n, i % 2 == 0, i % 3, i % 2 == 1, f.config(n), b.config(n))
print("compiled")
"""


def _compile_env() -> dict[str, str]:
    """A compiling subprocess's environment: no interpreter, and the built-in tuning table
    whatever a user's (or an earlier test's) NORMLAB_TRITON_TUNING says."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TRITON_INTERPRET", "NORMLAB_TRITON_TUNING")
    }
    env["TRITON_DEFAULT_FP_FUSION"] = "1"
    return env


@pytest.mark.slow
def test_kernels_compile_for_a_real_gpu():
    # The interpreter runs the kernels as Python and accepts code the GPU compiler rejects, so
    # compile both kernels for sm_90 (fused and looped paths, both norms) in a process without
    # TRITON_INTERPRET. ptxas ships with Triton: no GPU is needed.
    import subprocess
    import sys

    pytest.importorskip("triton.backends.nvidia")
    env = _compile_env()
    run = subprocess.run(
        [sys.executable, "-c", _COMPILE_FOR_SM90], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0 and "compiled" in run.stdout, run.stderr[-3000:]


@pytest.mark.slow
def test_the_backward_grid_fits_the_registers(tmp_path):
    # The table's programs per SM must be resident together: compile every row for sm_90 and
    # count how many CTAs of its registers one SM holds (benchmarks/triton_registers.py).
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("triton.backends.nvidia")
    script = Path(__file__).parents[2] / "benchmarks" / "triton_registers.py"
    env = _compile_env()
    # A cache of its own: the registers counted are those of this compile, not of an entry
    # another test compiled under other settings.
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-cache")
    out = tmp_path / "regs.md"
    run = subprocess.run(
        [sys.executable, str(script), "--out", str(out)], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = [line.split("|")[1:-1] for line in out.read_text().splitlines()[2:]]
    assert len(rows) == len(tuning.FORWARD) + len(tuning.BACKWARD)
    for kernel, _, _, _, _, _, programs, _, _, ctas in rows:
        assert int(ctas) >= 1
        if kernel.strip() == "bwd":
            assert int(programs) <= int(ctas), rows
