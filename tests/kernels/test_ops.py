"""The torch.library registration of the kernel backends (normlab.kernels.rms_norm and
layer_norm), on the numba one: opcheck of every custom op, the three call paths agree, and
torch.compile traces through."""

import pytest
import torch

import normlab
import normlab.kernels.numba.backend  # noqa: F401  (registers the normlab::numba_* ops)
from normlab.kernels.rms_norm import rms_out_dtype

OPS = torch.ops.normlab


def _t(*shape, dtype=torch.float32, grad=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype).requires_grad_(grad)


RMS_CASES = [
    # x, weight, residual, eps, offset, casting, eps_inside
    ((_t(3, 5, 16), _t(16), None, 1e-6, 0.0, "llama", True), "plain"),
    (
        (
            _t(4, 16, dtype=torch.bfloat16),
            _t(16),
            _t(4, 16, dtype=torch.bfloat16),
            1e-5,
            1.0,
            "gemma",
            False,
        ),
        "bf16-fused-offset",
    ),  # fmt: skip
    ((_t(4, 16), None, _t(4, 16), 1e-6, 0.0, "none", True), "no-weight-fused"),
]
LN_CASES = [
    ((_t(3, 5, 16), _t(16), _t(16), None, 1e-5), "affine"),
    (
        (_t(4, 16, dtype=torch.bfloat16), _t(16), None, _t(4, 16, dtype=torch.bfloat16), 1e-5),
        "bf16-fused-no-bias",
    ),  # fmt: skip
    ((_t(4, 16), None, None, None, 1e-5), "plain"),
]


# The full opcheck (schema, autograd registration, fake tensors, AOT dispatch) on the first case;
# fake-tensor checks only on the others, as the AOT test costs seconds per case.
QUICK = ("test_schema", "test_faketensor")


def _utils(i):
    return None if i == 0 else QUICK


@pytest.mark.parametrize("i", range(len(RMS_CASES)), ids=[c[1] for c in RMS_CASES])
def test_opcheck_rms_norm(i):
    args = RMS_CASES[i][0]
    kw = {} if _utils(i) is None else {"test_utils": _utils(i)}
    torch.library.opcheck(OPS.numba_rms_norm_fwd.default, args, **kw)
    x, w, r, eps, offset, casting, eps_inside = args
    with torch.no_grad():  # the backward op has no autograd of its own (no double backward)
        y, h, rstd = OPS.numba_rms_norm_fwd(*args)
    hs = (x if r is None else h).detach()
    dy = torch.randn_like(y.detach())
    dh = None if r is None else torch.randn_like(hs)
    bwd_args = (dy, dh, hs, None if w is None else w.detach(), rstd, eps, offset, casting,
                eps_inside)  # fmt: skip
    torch.library.opcheck(OPS.numba_rms_norm_bwd.default, bwd_args, **kw)


@pytest.mark.parametrize("i", range(len(LN_CASES)), ids=[c[1] for c in LN_CASES])
def test_opcheck_layer_norm(i):
    args = LN_CASES[i][0]
    kw = {} if _utils(i) is None else {"test_utils": _utils(i)}
    torch.library.opcheck(OPS.numba_layer_norm_fwd.default, args, **kw)
    x, w, b, r, eps = args
    with torch.no_grad():
        y, h, mean, rstd = OPS.numba_layer_norm_fwd(*args)
    hs = (x if r is None else h).detach()
    dh = None if r is None else torch.randn_like(hs)
    wd = None if w is None else w.detach()
    bwd_args = (torch.randn_like(y.detach()), dh, hs, wd, mean, rstd, b is not None)
    torch.library.opcheck(OPS.numba_layer_norm_bwd.default, bwd_args, **kw)


def test_rms_out_dtype_follows_the_reference_promotion():
    w32 = torch.ones(4)
    assert rms_out_dtype(torch.bfloat16, w32, "llama") == torch.float32
    assert rms_out_dtype(torch.bfloat16, w32, "gemma") == torch.bfloat16
    assert rms_out_dtype(torch.bfloat16, None, "llama") == torch.bfloat16


def _grads(fn, *leaves):
    out = fn(*leaves)
    out = out if isinstance(out, tuple) else (out,)
    g = torch.Generator().manual_seed(1)
    loss = sum((o.float() * torch.randn(o.shape, generator=g)).sum() for o in out)
    return [o.detach() for o in out], torch.autograd.grad(loss, leaves)


def test_eager_paths_agree_with_the_custom_op():
    """Direct launcher (no grad), lean autograd.Function and the custom op give the same bits."""
    x, w, r = _t(6, 32), _t(32), _t(6, 32)
    kw = {"eps": 1e-6, "offset": 0.5, "casting": "gemma", "eps_inside": True}
    eager = lambda x, w, r: normlab.rms_norm(x, w, residual=r, backend="numba", **kw)  # noqa: E731
    op = lambda x, w, r: OPS.numba_rms_norm_fwd(x, w, r, *kw.values())[:2]  # noqa: E731
    out_e, g_e = _grads(eager, x, w, r)
    out_o, g_o = _grads(op, x, w, r)
    with torch.no_grad():
        out_n = eager(x, w, r)
    for a, b, c in zip(out_e, out_o, out_n, strict=True):
        assert torch.equal(a, b) and torch.equal(a, c)
    for a, b in zip(g_e, g_o, strict=True):
        assert torch.equal(a, b)


class _Block(torch.nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm1 = normlab.RMSNorm(dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = normlab.LayerNorm(dim)

    def forward(self, x):
        y, h = self.norm1(self.proj(x), residual=x)
        return self.norm2(torch.nn.functional.gelu(y) + h)


def test_torch_compile_fullgraph_matches_eager():
    torch.manual_seed(0)
    model = _Block(32)
    x = torch.randn(2, 8, 32, requires_grad=True)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    out_e, g_e = _grads(model, x)
    out_c, g_c = _grads(compiled, x)
    torch.testing.assert_close(out_c, out_e, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(g_c, g_e, atol=1e-6, rtol=1e-6)
    pw = [p.grad for p in model.parameters()]
    assert all(g is None for g in pw)  # autograd.grad leaves .grad alone
