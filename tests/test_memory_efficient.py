"""memory_efficient=True: the backward that recomputes xhat from the saved output.

What is saved (the output, not the input, in both the plain and the fused form), the small-gain
fall-back, torch.library registration and torch.compile, and where users reach it: modules,
TransformerConfig, normlab.hf.patch, and the bytes a tiny model saves per step. The kernels'
accuracy in this mode is tested by test_numba_cpu.py and test_triton_gpu.py (the `mode`
fixture) against normlab.testing's RECOMPUTE rows.
"""

import pytest
import torch
from kernel_checks import make_inputs

import normlab
import normlab.kernels.numba.backend  # noqa: F401  (registers the normlab::numba_* ops)
from normlab import reference as R
from normlab.models import Transformer, TransformerConfig
from normlab.testing import saved_tensor_bytes

OPS = torch.ops.normlab
BACKENDS = ["numba", "reference"]
if normlab.functional.get_backend("triton").supports(torch.device("cpu")):
    BACKENDS.append("triton")


def _saved_storages(fn):
    """``(storages of what autograd saved, out)`` while ``fn()`` runs."""
    ptrs = set()

    def pack(t):
        ptrs.add(t.untyped_storage().data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return ptrs, out


def _run(op, backend, x, w, b, r, me):
    leaves = [None if t is None else t.clone().requires_grad_() for t in (x, w, b, r)]
    xs, ws, bs, rs = leaves
    kw = {"residual": rs if r is not None else None, "backend": backend, "memory_efficient": me}

    def fwd():
        if op == "rms_norm":
            return normlab.rms_norm(xs, ws, offset=1.0, casting="gemma", **kw)
        return normlab.layer_norm(xs, ws, bs, **kw)

    saved, out = _saved_storages(fwd)
    out = out if isinstance(out, tuple) else (out,)
    sum(o.float().pow(2).sum() for o in out).backward()
    used = (xs, ws, bs if op == "layer_norm" else None, rs)
    grads = [t.grad for t in used if t is not None]
    return saved, out, xs, grads


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
@pytest.mark.parametrize("fused", [False, True], ids=["plain", "fused"])
def test_saves_the_output_instead_of_the_input(backend, op, fused):
    x, w, b, r = make_inputs((6, 40), torch.float32)
    r = r if fused else None
    saved, out, xs, _ = _run(op, backend, x, w, b, r, me=True)
    y = out[0]
    assert y.untyped_storage().data_ptr() in saved
    assert xs.untyped_storage().data_ptr() not in saved
    if fused:  # h is the next block's residual; nothing but this norm would save it
        assert out[1].untyped_storage().data_ptr() not in saved
    default_saved, default_out, xd, _ = _run(op, backend, x, w, b, r, me=False)
    if backend != "reference":  # eager autograd saves intermediates of the input's size
        kept = default_out[1] if fused else xd
        assert default_out[0].untyped_storage().data_ptr() not in default_saved
        assert kept.untyped_storage().data_ptr() in default_saved
    for a, e in zip(out, default_out, strict=True):
        assert torch.equal(a, e)  # the forward is the default's, bit for bit


@pytest.mark.parametrize("backend", BACKENDS)
def test_small_gain_falls_back_to_saving_the_input(backend):
    # Gemma's 1 + w with w -> -1: one gain below RECOMPUTE_MIN_GAIN, where y = 0 * xhat.
    x, w, b, _ = make_inputs((5, 32), torch.float32)
    w[3] = -1.0 + R.RECOMPUTE_MIN_GAIN / 4
    saved, out, xs, grads = _run("rms_norm", backend, x, w, b, None, me=True)
    assert xs.untyped_storage().data_ptr() in saved
    assert out[0].untyped_storage().data_ptr() not in saved
    _, _, _, want = _run("rms_norm", backend, x, w, b, None, me=False)
    for g, e in zip(grads, want, strict=True):
        assert torch.equal(g, e)  # it is the default backward
    # LayerNorm: a bias large against its gain (its rounding in y, divided by the gain)
    w2, b2 = torch.ones(32), torch.zeros(32)
    b2[7] = 2 * R.RECOMPUTE_MAX_BIAS_RATIO
    saved, out, xs, _ = _run("layer_norm", backend, x, w2, b2, None, me=True)
    assert out[0].untyped_storage().data_ptr() not in saved
    assert backend == "reference" or xs.untyped_storage().data_ptr() in saved


def test_recompute_rule():
    ok = R.recompute_ok
    assert ok(None, None, 8) and not ok(None, None, 1)  # one-element rows save the input
    g = torch.ones(4)
    assert ok(g, None, 4) and ok(g, torch.full((4,), R.RECOMPUTE_MAX_BIAS_RATIO), 4)
    assert not ok(torch.tensor([1.0, 0.0, 1.0, 1.0]), None, 4)
    assert not ok(torch.tensor([1.0, -R.RECOMPUTE_MIN_GAIN / 2]), None, 2)
    assert not ok(torch.tensor([1.0, float("nan")]), None, 2)
    assert not ok(g, torch.full((4,), 1.01 * R.RECOMPUTE_MAX_BIAS_RATIO), 4)
    # RMSNorm's gain as the forward multiplies by it: llama adds the offset in w's dtype
    w = torch.tensor([-0.99951171875], dtype=torch.bfloat16)
    assert R.rms_gain(w, 1.0, "llama").dtype == torch.float32


def test_custom_ops_pass_opcheck():
    g = torch.Generator().manual_seed(0)
    x, r = torch.randn(4, 16, generator=g), torch.randn(4, 16, generator=g)
    w = 0.1 * torch.randn(16, generator=g)  # gains 1 + w, and w's near 1 for LayerNorm
    args = (x.requires_grad_(), w.requires_grad_(), r.requires_grad_(), 1e-6, 1.0, "gemma", True)
    torch.library.opcheck(OPS.numba_rms_norm_fwd_y.default, args)
    with torch.no_grad():
        y, h, rstd = OPS.numba_rms_norm_fwd_y(*args)
    dy, dh = torch.randn_like(y), torch.randn_like(h)
    bwd = (dy, dh, y, w.detach(), rstd, 1e-6, 1.0, "gemma", True, torch.float32)
    torch.library.opcheck(OPS.numba_rms_norm_bwd_y.default, bwd, test_utils=("test_schema",))
    b = 0.1 * torch.randn(16, generator=g)
    w = (1 + w).detach().requires_grad_()
    ln = (x, w, b.requires_grad_(), None, 1e-5)
    torch.library.opcheck(OPS.numba_layer_norm_fwd_y.default, ln, test_utils=("test_faketensor",))
    with torch.no_grad():
        y, _, _, rstd = OPS.numba_layer_norm_fwd_y(*ln)
    bwd = (dy, None, y, w.detach(), b.detach(), rstd, torch.bfloat16)
    dht, dw, db = OPS.numba_layer_norm_bwd_y(*bwd)
    assert dht.dtype == torch.bfloat16 and dw.shape == db.shape == (16,)


class _Block(torch.nn.Module):
    def __init__(self, dim: int, gain: float = 1.0):
        super().__init__()
        self.norm1 = normlab.RMSNorm(dim, memory_efficient=True)
        self.proj = torch.nn.Linear(dim, dim)
        self.norm2 = normlab.LayerNorm(dim, memory_efficient=True)
        with torch.no_grad():
            self.norm1.weight.mul_(gain)

    def forward(self, x):
        y, h = self.norm1(self.proj(x), residual=x)
        return self.norm2(torch.nn.functional.gelu(y) + h)


def _grads(fn, x):
    out = fn(x)
    return out.detach(), torch.autograd.grad(out.pow(2).sum(), [x])


def test_torch_compile_fullgraph_matches_eager():
    torch.manual_seed(0)
    model = _Block(32)
    x = torch.randn(2, 8, 32, requires_grad=True)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    out_e, g_e = _grads(model, x)
    out_c, g_c = _grads(compiled, x)
    torch.testing.assert_close(out_c, out_e, atol=0, rtol=0)
    torch.testing.assert_close(g_c, g_e, atol=0, rtol=0)


def test_torch_compile_refuses_a_small_gain():
    # What to save is fixed when the graph is traced: no per-call fall-back, a clear error.
    torch.manual_seed(0)
    model = _Block(32, gain=0.0)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with pytest.raises(ValueError, match="memory_efficient=True under torch.compile"):
        compiled(torch.randn(2, 8, 32, requires_grad=True))


def test_bad_arguments():
    x = torch.randn(2, 8)
    with pytest.raises(TypeError, match="memory_efficient"):
        normlab.rms_norm(x, memory_efficient="yes")
    with pytest.raises(ValueError, match="backend='torch'"):
        normlab.layer_norm(x, backend="torch", memory_efficient=True)
    with pytest.raises(TypeError, match="memory_efficient"):
        normlab.LayerNorm(8, memory_efficient=1)
    assert "memory_efficient=True" in repr(normlab.RMSNorm(8, memory_efficient=True))


def _tiny(me: bool, **kw) -> TransformerConfig:
    return TransformerConfig(
        vocab_size=64, dim=32, n_layers=2, n_heads=2, max_seq_len=16, norm_memory_efficient=me, **kw
    )


def test_config_field_is_validated_and_round_trips():
    cfg = _tiny(True)
    assert TransformerConfig.from_dict(cfg.to_dict()) == cfg
    assert TransformerConfig.from_dict(_tiny(False).to_dict()).norm_memory_efficient is False
    with pytest.raises(TypeError, match="norm_memory_efficient"):
        _tiny(1)
    with pytest.raises(ValueError, match="rmsnorm and layernorm"):
        _tiny(True, norm="dyt")
    with pytest.raises(ValueError, match="norm_backend='torch'"):
        _tiny(True, norm_backend="torch")
    model = Transformer(cfg)
    norms = [m for m in model.modules() if isinstance(m, normlab.RMSNorm)]
    assert len(norms) == 5 and all(m.memory_efficient for m in norms)


@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_tiny_model_saves_one_activation_per_norm(norm):
    """The claim of docs/benchmarks.md on a tiny Pre-LN model: memory-efficient mode keeps
    exactly one (B, T, dim) float32 activation less per norm (2 per block + the final norm),
    and trains to the same gradients within the mode's tolerance."""
    batch, seq = 2, 16
    tok = torch.randint(0, 64, (batch, seq), generator=torch.Generator().manual_seed(0))
    results = {}
    for me in (False, True):
        torch.manual_seed(0)
        model = Transformer(_tiny(me, norm=norm))
        saved, logits = saved_tensor_bytes(lambda m=model: m(tok), model.parameters())
        logits.float().pow(2).mean().backward()
        results[me] = saved, [p.grad for p in model.parameters()]
    n_norms = 2 * 2 + 1
    per_norm = batch * seq * 32 * 4  # the input, float32
    if norm == "layernorm":
        per_norm += batch * seq * 4  # and the per-row mean, not needed from y
    assert results[False][0] - results[True][0] == n_norms * per_norm
    for g, e in zip(results[True][1], results[False][1], strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-4)


def test_hf_patch_passes_memory_efficient_on():
    transformers = pytest.importorskip("transformers")
    from normlab.hf import patch

    cfg = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=64,
    )
    torch.manual_seed(0)
    original = transformers.LlamaForCausalLM(cfg)
    patched = transformers.LlamaForCausalLM(cfg)
    patched.load_state_dict(original.state_dict())
    report = patch(patched, fuse_residual=True, memory_efficient=True)
    norms = [m for m in patched.modules() if isinstance(m, normlab.RMSNorm)]
    assert len(report.replaced) == len(norms) == 5 and all(m.memory_efficient for m in norms)
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    grads = []
    for model in (original, patched):
        model(ids).logits.float().pow(2).mean().backward()
        grads.append([p.grad for p in model.parameters()])
    for g, e in zip(*grads, strict=True):
        torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="backend='torch'"):
        patch(patched, backend="torch", memory_efficient=True)


def test_the_gain_check_is_redone_when_the_weight_changes():
    # The check is cached per weight version (on CUDA it is a sync): an optimizer step or any
    # in-place write must make it look again.
    x = torch.randn(4, 16, requires_grad=True)
    w = torch.ones(16, requires_grad=True)

    def saved_x():
        saved, _ = _saved_storages(lambda: normlab.rms_norm(x, w, memory_efficient=True))
        return x.untyped_storage().data_ptr() in saved

    assert not saved_x() and not saved_x()
    with torch.no_grad():
        w[5] = 0.0
    assert saved_x()
    with torch.no_grad():
        w[5] = 1.0
    assert not saved_x()
