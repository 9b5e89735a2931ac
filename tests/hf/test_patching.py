"""normlab.hf.patch on tiny random-initialised transformers models (nothing is downloaded)."""

from __future__ import annotations

import copy
import io
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

transformers = pytest.importorskip("transformers")

from normlab import LayerNorm, RMSNorm  # noqa: E402
from normlab.hf import PatchReport, export, patch, patch_classes  # noqa: E402
from normlab.models import Transformer, TransformerConfig  # noqa: E402
from normlab.testing import TOLERANCES  # noqa: E402

VOCAB, SEQ = 64, 8
_IDS = {"bos_token_id": 2, "eos_token_id": 3, "pad_token_id": 0}
_DECODER = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=8, max_position_embeddings=64, **_IDS,
)  # fmt: skip
_ENCODER = dict(
    vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
    num_attention_heads=4, max_position_embeddings=64, **_IDS,
)  # fmt: skip

# family -> (config class, model class, config kwargs, normlab class its norms become)
FAMILIES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", _DECODER, RMSNorm),
    "mistral": ("MistralConfig", "MistralForCausalLM", _DECODER, RMSNorm),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", _DECODER, RMSNorm),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", _DECODER, RMSNorm),
    "gemma": ("GemmaConfig", "GemmaForCausalLM", _DECODER, RMSNorm),
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", _DECODER, RMSNorm),
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM", _DECODER, RMSNorm),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", _DECODER, RMSNorm),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", _DECODER, RMSNorm),
    "bert": ("BertConfig", "BertForMaskedLM", _ENCODER, LayerNorm),
    "roberta": ("RobertaConfig", "RobertaForMaskedLM", {**_ENCODER, "pad_token_id": 1}, LayerNorm),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, **_IDS), LayerNorm),
    "opt": ("OPTConfig", "OPTForCausalLM", dict(
        vocab_size=VOCAB, hidden_size=32, ffn_dim=64, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=64, word_embed_proj_dim=32, **{**_IDS, "pad_token_id": 1}),
        LayerNorm),
}  # fmt: skip
LLAMA_LIKE = ["llama", "mistral", "qwen2", "qwen3", "phi3"]
DTYPES = [torch.float32, torch.bfloat16]


def make_model(family: str, dtype=torch.float32, **extra) -> nn.Module:
    cfg_cls, model_cls, kwargs, _ = FAMILIES[family]
    torch.manual_seed(0)
    cfg = getattr(transformers, cfg_cls)(**kwargs, **extra)
    model = getattr(transformers, model_cls)(cfg).eval()
    # Norm weights start at 1 (0 for Gemma's 1 + w) and biases at 0: perturb them so a wrong
    # offset, a dropped bias or a swapped cast order would show.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or ".ln_" in name or "LayerNorm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model.to(dtype)


def tokens(batch: int = 2) -> torch.Tensor:
    return torch.randint(4, VOCAB, (batch, SEQ), generator=torch.Generator().manual_seed(1))


def norm_modules(model: nn.Module) -> dict[str, str]:
    return {
        n: type(m).__name__
        for n, m in model.named_modules()
        if type(m).__name__.endswith(("RMSNorm", "LayerNorm"))
    }


def logits_and_grads(model: nn.Module, ids: torch.Tensor):
    model.zero_grad(set_to_none=True)
    logits = model(ids).logits
    loss = F.cross_entropy(logits.float().flatten(0, 1), ids.roll(-1, 1).flatten())
    loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


def assert_same_outputs(patched: nn.Module, original: nn.Module, dtype) -> None:
    ids = tokens()
    out_p, grads_p = logits_and_grads(patched, ids)
    out_o, grads_o = logits_and_grads(original, ids)
    tol = TOLERANCES[dtype]
    torch.testing.assert_close(out_p, out_o, **tol)
    assert grads_p.keys() == grads_o.keys() and len(grads_o) > 0
    for name, g in grads_o.items():
        torch.testing.assert_close(grads_p[name], g, **tol, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("backend", ["reference", "auto"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", list(FAMILIES))
def test_patch_matches_original(family, dtype, backend):
    original = make_model(family, dtype)
    patched = copy.deepcopy(original)
    before = norm_modules(patched)
    params_before = [(n, id(p)) for n, p in patched.named_parameters()]
    keys_before = list(patched.state_dict())

    report = patch(patched, backend=backend)

    assert report.replaced == before and not report.unknown and len(before) >= 5
    new_cls = FAMILIES[family][3]
    for name in before:
        mod = patched.get_submodule(name)
        assert type(mod) is new_cls and mod.backend == backend
    # The very same Parameter objects, under the same names: nothing was copied.
    assert [(n, id(p)) for n, p in patched.named_parameters()] == params_before
    assert list(patched.state_dict()) == keys_before
    assert_same_outputs(patched, original, dtype)


def test_gemma_norms_use_offset_and_fp32_product():
    model = make_model("gemma3")
    patch(model, backend="reference")
    norms = [m for m in model.modules() if isinstance(m, RMSNorm)]
    names = {n.rpartition(".")[2] for n in norm_modules(model)}
    assert {"q_norm", "k_norm", "pre_feedforward_layernorm", "post_feedforward_layernorm"} <= names
    assert all(m.offset == 1.0 and m.casting == "gemma" for m in norms)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", LLAMA_LIKE)
def test_fuse_residual_matches_original(family, dtype):
    original = make_model(family, dtype, attn_implementation="eager")
    patched = copy.deepcopy(original)
    report = patch(patched, fuse_residual=True, backend="reference")
    assert report.fused == [f"model.layers.{i}" for i in range(2)]
    assert_same_outputs(patched, original, dtype)

    # Recorded hidden states and attention maps come back as before.
    ids = tokens()
    with torch.no_grad():
        out_p = patched(ids, output_hidden_states=True, output_attentions=True)
        out_o = original(ids, output_hidden_states=True, output_attentions=True)
    for name in ("hidden_states", "attentions"):
        assert len(out_p[name]) == len(out_o[name]) > 0
        for a, b in zip(out_p[name], out_o[name], strict=True):
            torch.testing.assert_close(a, b, **TOLERANCES[dtype])


def test_fused_layers_generate_the_same_tokens_with_a_cache():
    original = make_model("llama")
    patched = copy.deepcopy(original)
    patch(patched, fuse_residual=True)
    kw = dict(max_new_tokens=6, do_sample=False, use_cache=True)
    ids = tokens(batch=1)
    with torch.no_grad():
        assert torch.equal(patched.generate(ids, **kw), original.generate(ids, **kw))


def test_fused_model_survives_deepcopy_and_pickle():
    model = make_model("llama")
    patch(model, fuse_residual=True)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    ids = tokens()
    with torch.no_grad():
        expected = model(ids).logits
        for other in (copy.deepcopy(model), loaded):
            layer = other.model.layers[0]
            assert layer.forward.args[0] is layer  # bound to the copy, not the original
            assert torch.equal(other(ids).logits, expected)


def test_patch_twice_is_a_no_op():
    model = make_model("qwen3")
    first = patch(model, fuse_residual=True)
    second = patch(model, fuse_residual=True)
    assert first.replaced and first.fused
    assert second == PatchReport() and "replaced 0" in str(second)


def test_fuse_only_where_a_norm_was_replaced():
    model = make_model("gpt2")
    assert patch(model, fuse_residual=True).fused == []


@pytest.mark.parametrize("family", ["llama", "gemma2", "gpt2", "bert"])
def test_save_pretrained_round_trip(family, tmp_path):
    model = make_model(family)
    patch(model, fuse_residual=True)
    model.save_pretrained(tmp_path)
    model_cls = getattr(transformers, FAMILIES[family][1])
    reloaded = model_cls.from_pretrained(tmp_path).eval()

    # An unpatched model loads the files of a patched one: same keys, same tensors.
    sd, sd_re = model.state_dict(), reloaded.state_dict()
    assert list(sd) == list(sd_re)
    for k, v in sd.items():
        assert torch.equal(v, sd_re[k]), k
    ids = tokens()
    with torch.no_grad():
        unpatched = reloaded(ids).logits
        patch(reloaded, fuse_residual=True)
        torch.testing.assert_close(model(ids).logits, reloaded(ids).logits, rtol=0, atol=0)
        torch.testing.assert_close(model(ids).logits, unpatched, **TOLERANCES[torch.float32])


class LlamaRMSNorm(nn.Module):
    """Not transformers' class, only its name (as remote code might define it)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4))
        self.variance_epsilon = 1e-6

    def forward(self, x):
        return x * self.weight


class MyNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(4))

    def forward(self, x):
        return x * self.weight


def test_unknown_norm_classes_are_left_with_a_warning():
    model = nn.Sequential(
        nn.LayerNorm(4), MyNorm(), nn.RMSNorm(4, eps=None), nn.Linear(4, 4), LlamaRMSNorm()
    )
    x = torch.randn(3, 4)
    expected = model(x)
    with pytest.warns(UserWarning, match="MyNorm"):
        report = patch(model, backend="reference")
    assert report.replaced == {"0": "LayerNorm", "2": "RMSNorm"}
    assert report.unknown == {"1": "MyNorm", "4": "LlamaRMSNorm"} and type(model[1]) is MyNorm
    assert isinstance(model[0], LayerNorm) and isinstance(model[2], RMSNorm)
    torch.testing.assert_close(model(x), expected, **TOLERANCES[torch.float32])


def test_known_models_patch_without_warnings():
    model = make_model("opt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        patch(model)


def test_bad_arguments():
    with pytest.raises(TypeError, match="model"):
        patch("llama")
    with pytest.raises(TypeError, match="fuse_residual"):
        patch(nn.Linear(2, 2), fuse_residual=1)
    with pytest.raises(TypeError, match="itself a norm"):
        patch(nn.LayerNorm(4))
    with pytest.raises(ValueError, match="backend"):
        patch(nn.Linear(2, 2), backend="cuda")


def test_import_normlab_does_not_import_transformers():
    code = (
        "import sys, normlab, normlab.hf, normlab.hf.convert; "
        "assert 'transformers' not in sys.modules, 'transformers was imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---- patch_classes: normlab norms built by transformers itself


def _config(family: str):
    cfg_cls, _, kwargs, _ = FAMILIES[family]
    return getattr(transformers, cfg_cls)(**kwargs, attn_implementation="eager")


def _build(family: str, cfg) -> nn.Module:
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(cfg).eval()


def _assert_same_model(a: nn.Module, b: nn.Module) -> None:
    assert [(n, type(m)) for n, m in a.named_modules()] == [
        (n, type(m)) for n, m in b.named_modules()
    ]
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k, v in sa.items():
        assert torch.equal(v, sb[k]), k
    ids = tokens()
    with torch.no_grad():
        assert torch.equal(a(ids).logits, b(ids).logits)


@pytest.mark.parametrize("fuse", [False, True], ids=["plain", "fused"])
@pytest.mark.parametrize("family", ["llama", "qwen3", "phi3", "gemma3", "olmo2"])
def test_patch_classes_builds_the_model_patch_makes(family, fuse, tmp_path):
    cfg = _config(family)
    after = _build(family, cfg)
    originals = {n: type(m) for n, m in after.named_modules()}
    patch(after, fuse_residual=fuse, backend="reference")
    after.save_pretrained(tmp_path)
    model_cls, layer_cls = type(after), originals["model.layers.0"]
    layer_forward = vars(layer_cls)["forward"]
    with patch_classes((family,), fuse_residual=fuse, backend="reference") as handle:
        assert handle.patched
        before = _build(family, cfg)  # from_config
        loaded = model_cls.from_pretrained(tmp_path, attn_implementation="eager").eval()
        # Only Llama-style layers are fused (Gemma 3's and OLMo 2's are not Llama's).
        fusable = fuse and family not in ("gemma3", "olmo2")
        assert (vars(layer_cls)["forward"] is not layer_forward) == fusable
    _assert_same_model(before, after)
    _assert_same_model(loaded, after)
    assert vars(layer_cls)["forward"] is layer_forward
    # undone: transformers builds its own classes again
    again = _build(family, cfg)
    assert {n: type(m) for n, m in again.named_modules()} == originals
    mod = sys.modules[originals["model.norm"].__module__]
    assert getattr(mod, originals["model.norm"].__name__) is originals["model.norm"]


def test_patch_classes_fused_layers_match_the_unfused_model():
    cfg = _config("llama")
    original = _build("llama", cfg)
    layer_cls = type(original.model.layers[0])
    layer_forward = vars(layer_cls)["forward"]
    with patch_classes(("llama",), fuse_residual=True, backend="reference"):
        fused = _build("llama", cfg)
        assert vars(layer_cls)["forward"] is not layer_forward  # the class forward is normlab's
        ids = tokens()
        with torch.no_grad():
            out_f = fused(ids, output_hidden_states=True, output_attentions=True)
            out_o = original(ids, output_hidden_states=True, output_attentions=True)
        tol = TOLERANCES[torch.float32]
        torch.testing.assert_close(out_f.logits, out_o.logits, **tol)
        for a, b in zip(out_f.attentions, out_o.attentions, strict=True):
            torch.testing.assert_close(a, b, **tol)
        # An unpatched model built earlier runs its own forward under the class patch.
        with torch.no_grad():
            assert torch.equal(original(ids).logits, out_o.logits)
    assert vars(layer_cls)["forward"] is layer_forward


def test_patch_classes_arguments():
    with pytest.raises(ValueError, match="unknown families"):
        patch_classes(("mamba",))
    with pytest.raises(TypeError, match="sequence"):
        patch_classes("llama")
    with pytest.raises(ValueError, match="backend"):
        patch_classes(("llama",), backend="cuda")
    handle = patch_classes()  # every family
    try:
        assert set(handle.families) >= {"llama", "gemma", "olmo2"}
    finally:
        handle.undo()
    assert type(transformers.LlamaForCausalLM(_config("llama")).model.norm).__name__ == (
        "LlamaRMSNorm"
    )


# ---- export: a lab model as a LlamaForCausalLM


def _lab_model(**kw) -> Transformer:
    torch.manual_seed(0)
    cfg = TransformerConfig(VOCAB, 32, 2, 4, max_seq_len=64, norm_backend="reference", **kw)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # non-unit norm gains, so a misplaced norm weight would show
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


@pytest.mark.parametrize(
    "kw", [{}, {"tie_embeddings": True}, {"bias": True, "eps": 1e-5}], ids=["plain", "tied", "bias"]
)
def test_export_loads_in_transformers_with_the_same_logits(kw, tmp_path):
    lab = _lab_model(**kw).double()
    export(lab, tmp_path)
    assert (tmp_path / "config.json").exists() and (tmp_path / "model.safetensors").exists()
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float64).eval()
    assert type(hf).__name__ == "LlamaForCausalLM"
    assert hf.config.tie_word_embeddings == lab.config.tie_embeddings
    ids = tokens()
    with torch.no_grad():
        want = lab(ids)
        # HF's LlamaRMSNorm takes FP32 statistics even in FP64: as loaded, FP32 rounding ...
        torch.testing.assert_close(hf(ids).logits, want, rtol=1e-5, atol=1e-5)
        # ... and with normlab's norms (FP64 statistics) in it, the same model to FP64 rounding.
        patch(hf, backend="reference")
        torch.testing.assert_close(hf(ids).logits, want, rtol=0, atol=1e-10)


def test_export_float32_matches_within_the_fp32_tolerance(tmp_path):
    lab = _lab_model()
    export(lab, tmp_path)
    hf = transformers.LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    ids = tokens()
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, lab(ids), **TOLERANCES[torch.float32])


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"placement": "post"}, "placement"),
        ({"placement": "reorder"}, "placement"),
        ({"norm": "layernorm"}, "norm="),
        ({"qk_norm": True}, "qk_norm"),
        ({"norm_offset": 1.0, "rms_casting": "gemma"}, "norm_offset"),
        ({"rms_casting": "gemma"}, "rms_casting"),
        ({"arch": "gpt2"}, "arch"),
        ({"scale_embeddings": True}, "scale_embeddings"),
        ({"final_norm": False}, "final_norm"),
    ],
)
def test_export_refuses_what_llama_cannot_express(kw, match, tmp_path):
    with pytest.raises(ValueError, match=match):
        export(_lab_model(**kw), tmp_path)
    assert not any(tmp_path.iterdir())
    with pytest.raises(TypeError, match="Transformer"):
        export(nn.Linear(2, 2), tmp_path)
