"""Differential fuzzing of the kernel backends against the float64 reference.

Hypothesis draws the op and every option together (shape, memory layout, dtypes, residual,
weight/bias, cast order, offset, eps placement and size, input scale) and each case is compared
forward and backward (every tensor input's gradient) with the same rules as the per-backend
tests: the tolerance table, and "kernel error <= 2x eager error + atol" against the float64
truth. Runs are derandomized, so a failure reproduces; the example counts keep the file short
on a small CPU. The Triton interpreter runs each program as numpy code, so its cases are fewer
and narrower. BatchNorm's training statistics are fuzzed the same way against torch's own op.
"""

import contextlib
import math
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_checks import (
    assert_error_bound,
    assert_grad_close,
    make_inputs,
    rounded_xhat_dweight,
    run_three_ways,
)

import normlab
from normlab import functional as F
from normlab.testing import TOLERANCES, assert_kernel_close

BF16, F16, F32 = torch.bfloat16, torch.float16, torch.float32
CUDA = torch.cuda.is_available()
TRITON_DEVICE = "cuda" if CUDA else "cpu"
HAS_TRITON = "triton" in F.available_backends() and F.get_backend("triton").supports(
    torch.device(TRITON_DEVICE)
)
# Masked-off lanes of the interpreted Triton kernels may divide by zero; the stores drop them.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning:triton.runtime.interpreter")

LAYOUTS = ("contiguous", "row_sliced", "padded", "transposed", "broadcast")


def with_layout(t, layout):
    """``t``'s values (``broadcast``: its first row repeated) in a tensor of the given layout;
    the memory a view skips holds NaN, so a kernel that reads past its row cannot pass."""
    if layout == "contiguous" or t.numel() == 0:
        return t
    if layout == "row_sliced":  # rows two apart: x[::2]
        big = t.new_full((2 * t.shape[0], *t.shape[1:]), math.nan)
        big[::2] = t
        return big[::2]
    if layout == "padded":  # a wider row cut short: row stride > N
        big = t.new_full((*t.shape[:-1], t.shape[-1] + 3), math.nan)
        big[..., : t.shape[-1]] = t
        return big[..., : t.shape[-1]]
    if layout == "transposed":  # the last dim is not the unit-stride one
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    return t[:1].expand(t.shape)  # broadcast: row stride 0


SCALE_SHIFT = [
    {"scale": scale, "shift": shift}
    for scale, shift in [(1.0, 0.0), (1.0, 0.0), (1e-2, 0.0), (50.0, 0.0), (1.0, 30.0), (0.0, 30.0)]
]


@st.composite
def cases(draw, max_n, max_elems, dtypes=(F32, BF16, F16)):
    """One call: ``(op, dtype, shape, layouts, options)``; tensors are made by :func:`build`."""
    op = draw(st.sampled_from(["rms_norm", "layer_norm"]))
    dtype = draw(st.sampled_from(dtypes))
    n = draw(st.one_of(st.integers(1, 8), st.integers(1, max_n)))
    ndim = draw(st.integers(2, 4))
    # 2-D cases may have many rows: the Numba kernels go parallel above 32K elements
    rows = st.one_of(st.integers(1, 16), st.integers(1, max(1, max_elems // n)))
    lead = [draw(rows if ndim == 2 else st.integers(1, 5)) for _ in range(ndim - 1)]
    if draw(st.integers(0, 9)) == 0:  # no rows at all
        lead[draw(st.integers(0, ndim - 2))] = 0
    while math.prod(lead) * n > max_elems:
        lead[lead.index(max(lead))] //= 2
    kw = {
        "eps": draw(st.sampled_from([1e-6, 1e-5, 1e-2])),
        # x * scale + shift; scale 0 makes constant rows. A shift far above the spread makes
        # FP32 eager itself lose digits beyond the tolerance table, so it stays within ~15x.
        **draw(st.sampled_from(SCALE_SHIFT)),
        "layout": draw(st.sampled_from(LAYOUTS)),
        "seed": draw(st.integers(0, 2**16)),
        "wdtype": draw(st.sampled_from([None, dtype, F32])),  # None: no weight
        "rdtype": draw(st.sampled_from([None, dtype, F32])),  # None: no residual
        "r_layout": draw(st.sampled_from(LAYOUTS)),
    }
    if op == "layer_norm":
        kw["bias"] = draw(st.booleans())
    else:
        kw["casting"] = draw(st.sampled_from(["llama", "gemma", "none"]))
        kw["eps_inside"] = draw(st.booleans())
        kw["offset"] = draw(st.sampled_from([0.0, 1.0])) if kw["wdtype"] else 0.0
    return op, dtype, (*lead, n), kw


def build(dtype, shape, kw, device):
    """``(x, call keywords)`` for a drawn case, on ``device``."""
    kw = dict(kw)
    wdtype, rdtype = kw.pop("wdtype"), kw.pop("rdtype")
    x, w, b, _ = make_inputs(shape, dtype, wdtype, seed=kw.pop("seed"), device=device)
    r = make_inputs(shape, rdtype or dtype, seed=1, device=device)[3]
    x = (x.float() * kw.pop("scale") + kw.pop("shift")).to(dtype)
    layout, r_layout = kw.pop("layout"), kw.pop("r_layout")
    call = {k: v for k, v in kw.items() if k != "bias"}
    if wdtype is not None:
        call["weight"] = w
    if kw.get("bias"):
        call["bias"] = b
    if rdtype is not None:
        call["residual"] = with_layout(r, r_layout)
    return with_layout(x, layout), call


def check(op, backend, x, kw, device, scale=1.0):
    """``op`` on ``backend`` against the reference at x's dtype and at float64, forward and
    every gradient, with the rules of tests/kernels/test_numba_cpu.py and
    tests/kernels/test_triton_gpu.py."""
    # Gradients scale with rstd, so inputs of scale s get cotangents of scale s (sqrt(eps) for
    # constant rows, whose rstd is 1/sqrt(eps)): the absolute atol of the tolerance table is
    # meant for O(1) values, and is below an ulp of the large gradients of small inputs.
    cot_scale = min(1.0, scale) if scale else math.sqrt(kw.get("eps", 1e-5))
    cots, (got, got_g), (want, want_g), (truth, truth_g) = run_three_ways(
        op, backend, x, kw, device=device, cot_scale=cot_scale
    )
    h_dtype = kw["residual"].dtype if "residual" in kw else x.dtype
    # casting="none" in half precision is the naive all-half eager code; the Triton kernel
    # reproduces its forward roundings but not the per-step rounding of its autograd (see
    # tests/kernels/test_triton_gpu.py's check): outputs get 3x the tolerance of the half dtype the
    # code rounds to (also when an FP32 weight promotes y), gradients only the error bound.
    naive_half = kw.get("casting") == "none" and h_dtype != F32
    if op == "rms_norm" and "weight" in kw and kw["casting"] != "gemma" and not naive_half:
        dy = cots[0].to(want[0].dtype)
        truth_g["weight"] = rounded_xhat_dweight(x, kw, dy)
    for i, (a, e, t) in enumerate(zip(got, want, truth, strict=True)):
        if naive_half:
            tol = {k: 3 * v for k, v in TOLERANCES[h_dtype].items()}
            torch.testing.assert_close(a, e, **tol, equal_nan=True)
            assert_error_bound(a, e, t, f"{op} out[{i}]")
        else:
            assert_kernel_close(a, e, t, f"{op} out[{i}]")
    for k in want_g:
        if naive_half:
            assert_error_bound(got_g[k], want_g[k], truth_g[k], f"{op} d{k}")
        else:
            assert_grad_close(got_g[k], want_g[k], truth_g[k], f"{op} d{k}")


def _looped_triton(looped):
    """Under the interpreter, optionally force the Triton kernels' chunked path at small N."""
    if not looped:
        return contextlib.nullcontext()
    from normlab.kernels.triton import launch as tk

    return mock.patch.multiple(tk, MAX_FUSED_FWD=64, MAX_FUSED_BWD=64, LOOP_BLOCK=32)


def _fuzz(backend, device, case, looped=False):
    op, dtype, shape, kw = case
    x, call = build(dtype, shape, kw, device)
    with _looped_triton(looped):
        check(op, backend, x, call, device, scale=kw["scale"])


_FUZZ = {
    "derandomize": True,
    "deadline": None,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
}


@settings(max_examples=150, **_FUZZ)
@given(case=cases(max_n=4096, max_elems=65_536))
def test_fuzz_numba(case):
    _fuzz("numba", "cpu", case)


@settings(max_examples=20, **_FUZZ)
@given(case=cases(max_n=2048, max_elems=20_000))
def test_fuzz_auto_on_cpu(case):
    _fuzz("auto", "cpu", case)


@pytest.mark.skipif(not HAS_TRITON, reason="needs a GPU or TRITON_INTERPRET=1")
@settings(max_examples=60, **_FUZZ)
@given(
    case=cases(max_n=8192 if CUDA else 256, max_elems=200_000 if CUDA else 1024),
    looped=st.booleans(),
)
def test_fuzz_triton(case, looped):
    _fuzz("triton", TRITON_DEVICE, case, looped=looped and not CUDA)


@pytest.mark.skipif(not CUDA, reason="auto picks Triton on CUDA tensors only")
@settings(max_examples=20, **_FUZZ)
@given(case=cases(max_n=8192, max_elems=200_000))
def test_fuzz_auto_on_cuda(case):
    _fuzz("auto", "cuda", case)


# Regressions: cases the fuzzing found, kept as explicit tests.
BACKENDS = ["numba", "triton", "auto"]


def _device(backend):
    if backend == "triton" and not HAS_TRITON:
        pytest.skip("needs a GPU or TRITON_INTERPRET=1")
    return TRITON_DEVICE if backend == "triton" else "cpu"


def _case(op, dtype, shape, **kw):
    base = {"eps": 1e-6, "scale": 1.0, "shift": 0.0, "layout": "contiguous", "seed": 0,
            "wdtype": None, "rdtype": None, "r_layout": "contiguous"}  # fmt: skip
    if op == "rms_norm":
        base.update(casting="llama", eps_inside=True, offset=0.0)
    else:
        base["bias"] = False
    return op, dtype, shape, {**base, **kw}


REGRESSIONS = {
    # two-element rows of a large mean: the rounded FP32 mean shifted every xhat by the same
    # rstd-amplified amount, which the backward formula (mean(xhat) = 0) did not cancel
    "ln-mean-rounding": _case("layer_norm", F32, (17, 2), shift=30.0),
    # llama order with offset and a bf16 weight: the gain offset + w rounds to bf16 (seen when
    # an FP32 residual makes y FP32)
    "rms-offset-gain": _case(
        "rms_norm", BF16, (1, 3856), wdtype=BF16, rdtype=F32, offset=1.0, eps_inside=False
    ),  # fmt: skip
    # eps outside on one-element rows: dh used the rounded xhat of the llama order, flipping
    # the sign of the small true gradient
    "rms-rounded-xhat": _case("rms_norm", BF16, (2, 1), scale=1e-2, seed=2, eps_inside=False),
}


@pytest.mark.parametrize("name", REGRESSIONS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_regressions(backend, name):
    _fuzz(backend, _device(backend), REGRESSIONS[name])


@pytest.mark.parametrize("dtype", [F32, BF16], ids=str)
@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_norm_of_constant_rows_is_its_bias(backend, dtype):
    # The mean was sum * (1/N), 30.000002 for seven 30s: y = 1/sqrt(eps) * 2e-6, not 0.
    device = _device(backend)
    for n in (7, 3, 100):
        x = torch.full((3, n), 30.0, dtype=dtype, device=device)
        b = torch.linspace(-1, 1, n, dtype=dtype, device=device)
        y = normlab.layer_norm(x, torch.ones_like(b), b, eps=1e-6, backend=backend)
        assert torch.equal(y, b.expand_as(y)), n


@pytest.mark.parametrize("backend", BACKENDS)
def test_layer_norm_of_one_element_rows_has_zero_dx(backend):
    # A one-element row is its own mean: y = bias and dx is exactly 0. The kernel subtracts the
    # row mean of w * dy from w * dy, which cancels only if both are rounded alike (no FMA).
    device = _device(backend)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 1, generator=g).to(device).requires_grad_()
    w = (1 + 0.5 * torch.randn(1, generator=g)).to(device).requires_grad_()
    b = torch.randn(1, generator=g).to(device).requires_grad_()
    dy = torch.randn(2, 5, 1, generator=g).to(device)
    y = normlab.layer_norm(x, w, b, eps=1e-6, backend=backend)
    dx, dw, db = torch.autograd.grad(y, (x, w, b), dy)
    assert torch.equal(y, b.detach().expand_as(y))
    assert torch.equal(dx, torch.zeros_like(dx))
    assert torch.equal(dw, torch.zeros_like(dw))
    torch.testing.assert_close(db, dy.sum().reshape(1), rtol=1e-6, atol=0)
    check("layer_norm", backend, x.detach(), {"weight": w.detach(), "bias": b.detach(),
          "eps": 1e-6}, device)  # fmt: skip


# --------------------------------------------------------------------------------------------
# BatchNorm's training statistics: a mean far from 0 (and from the running mean) against a
# spread of any scale, padding, a stale running mean; torch's eager op at the same dtype sets the
# bound for the output and for dx.


@st.composite
def batchnorm_cases(draw):
    c = draw(st.integers(1, 16))
    b, t = draw(st.integers(1, 4)), draw(st.integers(2, 48))
    spread = draw(st.sampled_from([1e-3, 1e-1, 1.0, 30.0]))
    ratio = draw(st.sampled_from([0.0, 1.0, 1e2, 1e3, 3e3, 1e4]))
    return {
        "shape": (b, t, c),
        "dtype": draw(st.sampled_from([F32, BF16])),
        "spread": spread,
        "offset": draw(st.sampled_from([1.0, -1.0])) * ratio * spread,
        "stale": draw(st.sampled_from([0.0, 1.0, -1.0])),  # running mean: stale * offset
        "padded": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
    }


@settings(max_examples=60, **_FUZZ)
@given(case=batchnorm_cases())
def test_fuzz_batchnorm_training_statistics(case):
    b, t, c = case["shape"]
    g = torch.Generator().manual_seed(case["seed"])
    x = (case["offset"] + case["spread"] * torch.randn(b, t, c, generator=g)).to(case["dtype"])
    mask = torch.ones(b, t, dtype=torch.bool)
    if case["padded"]:
        mask = torch.rand(b, t, generator=g) < 0.7
    mask.view(-1)[:2] = True  # training needs two real tokens
    bn = normlab.BatchNorm(c, dtype=case["dtype"])
    with torch.no_grad():
        bn.weight.copy_(1 + 0.2 * torch.randn(c, generator=g))
        bn.bias.copy_(0.1 * torch.randn(c, generator=g))
        bn.running_mean.fill_(case["stale"] * case["offset"])
    x.requires_grad_()
    y = bn(x, mask=mask if case["padded"] else None)
    dy = torch.randn(int(mask.sum()), c, generator=g)
    dx = torch.autograd.grad(y[mask], x, dy.to(y.dtype))[0][mask]

    def torch_bn(dtype):
        leaf = x.detach()[mask].to(dtype).requires_grad_()
        w, bias = bn.weight.detach().to(dtype), bn.bias.detach().to(dtype)
        out = torch.nn.functional.batch_norm(leaf, None, None, w, bias, True, 0.0, bn.eps)
        return out.detach(), torch.autograd.grad(out, leaf, dy.to(dtype))[0]

    (eager, eager_dx), (truth, truth_dx) = torch_bn(case["dtype"]), torch_bn(torch.float64)
    assert_error_bound(y[mask], eager, truth, "y")
    # dx scales with 1/std: the bound's atol is meant for O(1) values
    s = case["spread"]
    assert_error_bound(dx * s, eager_dx * s, truth_dx * s, "dx")


# ------------------------------------------------------------------------------------------
# study spec files: whatever a spec holds, it runs or is refused with one line (a SpecError or
# another UsageError, status 2 from the CLI), never a traceback. A valid spec is mutated at a
# random place (a value replaced, a key removed or added) or as text.

_SPEC_DOC = {
    "name": "fuzz",
    "base": {
        "steps": 2,
        "batch_size": 2,
        "seq_len": 8,
        "model": {"dim": 8, "n_layers": 1, "n_heads": 2, "max_seq_len": 8},
    },
    "arms": [
        {"name": "{norm}-lr{lr:g}", "axes": {"lr": [1e-3, 3e-3]}},
        {"name": "ln", "model": {"norm": "layernorm"}},
    ],
    "claims": [
        {
            "name": "c",
            "statement": "s",
            "rule": "contrast",
            "terms": [[1, "ln", "final_val_loss"], [-1, "rmsnorm-lr0.001", "final_val_loss"]],
            "expect": "<0",
            "delta": 0.01,
            "seeds": 2,
        },
        {"name": "t", "statement": "s", "rule": "trains", "arm": "ln", "seeds": 1},
    ],
}

_SCALARS = st.one_of(
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.sampled_from([0, 1, -1, 10**6, 10**9, 2**62]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["{model.__class__}", "{a[0]}", "{seed:>999}", "..", "a/b", "$a_$", "{lr}",
                     "{", "}", "{{x}}", "layernorm", "post", "trains", "holds", "*", "a\nb",
                     "ln\n", "x" * 300]),
)  # fmt: skip
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),  # fmt: skip
    max_leaves=6,
)


def _paths(node, prefix=()):
    """Every key path into ``node`` (dict keys and list indices)."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for k, v in items:
        yield (*prefix, k)
        if isinstance(v, dict | list):
            yield from _paths(v, (*prefix, k))


@st.composite
def mutated_specs(draw):
    import copy

    from normlab.lab.advise import toml_writer

    doc = copy.deepcopy(_SPEC_DOC)
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        op = draw(st.sampled_from(["set", "set", "delete", "add"]))
        if op == "set":
            parent[path[-1]] = draw(_VALUES)
        elif op == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            key = draw(st.sampled_from(["seed", "threads", "lr", "dim", "zzz", "model", "axes"]))
            parent[key] = draw(_VALUES)
        else:
            parent.append(draw(_VALUES))
    text = toml_writer.dumps(doc)
    if draw(st.integers(0, 4)) == 0:  # a mangled file: some characters cut or inserted
        i = draw(st.integers(0, len(text)))
        text = (
            text[:i]
            + draw(st.sampled_from(["", "[", "=", '"', "{", "\n[[arms]]\n"]))
            + text[i + draw(st.integers(0, 5)) :]
        )
    return text


@settings(max_examples=300, **_FUZZ)
@given(text=mutated_specs())
def test_fuzz_spec_files_are_refused_in_one_line(text):
    from normlab.lab.kit.errors import UsageError
    from normlab.lab.kit.limits import check_name, check_study
    from normlab.lab.study.spec.parse import parse_spec

    try:
        study = parse_spec(text, "fuzz.toml")
        check_study(study)
    except UsageError as e:
        msg = str(e)
        assert msg and "\n" not in msg and "Traceback" not in msg, msg
        assert len(msg) < 2000, msg[:200]
        return
    for arm in study.arms:  # what is accepted is a valid study
        check_name(arm.name)


@settings(max_examples=300, **_FUZZ)
@given(pattern=st.text(alphabet=st.sampled_from("{}[]:.!<>^0123456789abdegslr_-$/x "),
                       max_size=16))  # fmt: skip
def test_fuzz_name_patterns_give_a_name_or_a_value_error(pattern):
    from normlab.lab.kit.limits import NAME_PATTERN, format_name

    try:
        name = format_name(pattern, {"lr": 0.003, "seed": 7, "dim": 64, "s": "pre", "x": 1.5})
    except ValueError as e:
        assert "\n" not in str(e)
        return
    assert NAME_PATTERN.fullmatch(name) and name not in (".", "..") and len(name) <= 100
