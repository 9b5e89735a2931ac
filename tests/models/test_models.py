"""Tests for normlab.models: every norm x placement, DeepNorm, param groups, backends."""

from __future__ import annotations

import copy
import dataclasses
import json
import math

import pytest
import torch
import torch.nn.functional as F

from normlab.models import Transformer, TransformerConfig, deepnorm_constants, param_groups
from normlab.models.config import NORMS, PLACEMENTS
from normlab.models.norms import KINDS
from normlab.modules import DyT, RMSNorm

V, D, H = 32, 16, 2
# The grid tests use the eager reference norms: they test the model, not the kernels (which
# test_state_dict_moves_between_backends runs through "auto"), and skip their JIT warm-up.
REF = {"norm_backend": "reference"}


# Tiny tensors: intra-op threads only add overhead (and thrash on a shared 2-core box).
pytestmark = pytest.mark.usefixtures("one_thread")


def _tokens(b=2, t=8, v=V, seed=0):
    return torch.randint(0, v, (b, t), generator=torch.Generator().manual_seed(seed))


def _finite_step(cfg: TransformerConfig) -> None:
    torch.manual_seed(0)
    model = Transformer(cfg)
    logits = model(_tokens())
    assert logits.shape == (2, 8, V)
    assert torch.isfinite(logits).all()
    logits.float().logsumexp(-1).mean().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(p.grad).all(), f"{name} has a non-finite gradient"


# ---- every norm x placement runs at init


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("norm", NORMS)
def test_every_norm_and_placement_is_finite(norm, placement):
    for n_layers in (1, 2, 12):
        cfg_kw = {"norm": norm, "placement": placement, **REF}
        if norm == "none" and placement == "deepnorm":
            with pytest.raises(ValueError, match="deepnorm"):
                TransformerConfig(V, D, n_layers, H, **cfg_kw)
            continue
        _finite_step(TransformerConfig(V, D, n_layers, H, **cfg_kw))


@pytest.mark.parametrize("norm", NORMS)
def test_qk_norm_and_no_final_norm_are_finite(norm):
    for n_layers in (1, 2, 12):
        _finite_step(TransformerConfig(V, D, n_layers, H, norm=norm, qk_norm=True, **REF))
        _finite_step(TransformerConfig(V, D, n_layers, H, norm=norm, final_norm=False, **REF))


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_gpt2_arch_is_finite(placement):
    for n_layers in (1, 2, 12):
        _finite_step(
            TransformerConfig(
                V, D, n_layers, H, norm="layernorm", placement=placement, arch="gpt2", **REF
            )
        )


def test_placement_structure():
    def norms(cfg):
        b = Transformer(cfg).blocks[0]
        return b.attn_norm_in is not None, b.attn_norm_out is not None

    assert norms(TransformerConfig(V, D, 2, H, placement="pre")) == (True, False)
    assert norms(TransformerConfig(V, D, 2, H, placement="post")) == (False, True)
    assert norms(TransformerConfig(V, D, 2, H, placement="sandwich")) == (True, True)
    model = Transformer(TransformerConfig(V, D, 8, H, placement="mix"))
    assert [b.placement for b in model.blocks] == ["post"] * 2 + ["pre"] * 6
    assert model.norm is not None  # mix ends in Pre-LN blocks: it needs the final norm
    assert Transformer(TransformerConfig(V, D, 3, H, placement="mix")).blocks[0].placement == "post"
    assert Transformer(TransformerConfig(V, D, 1, H, placement="mix")).blocks[0].placement == "pre"
    for placement in ("post", "deepnorm"):
        assert Transformer(TransformerConfig(V, D, 2, H, placement=placement)).norm is None
    assert Transformer(TransformerConfig(V, D, 2, H, final_norm=False)).norm is None


def test_post_block_is_norm_of_sum():
    torch.manual_seed(0)
    block = Transformer(TransformerConfig(V, D, 1, H, norm="layernorm", placement="post")).blocks[0]
    x = torch.randn(2, 8, D)
    h = block.attn_norm_out(x + block.attn(x))
    want = block.mlp_norm_out(h + block.mlp(h))
    torch.testing.assert_close(block(x), want)


def test_reorder_block_norms_each_sublayer_output_inside_the_residual():
    torch.manual_seed(0)
    cfg = TransformerConfig(V, D, 1, H, placement="reorder", qk_norm=True, **REF)
    model = Transformer(cfg)
    block = model.blocks[0]
    assert block.attn_norm_in is None and block.mlp_norm_in is None  # nothing on the inputs
    assert isinstance(model.norm, RMSNorm)  # a final norm: the stream itself is never normed
    with torch.no_grad():  # non-unit gains, so a norm in the wrong place would show
        for n in (block.attn_norm_out, block.mlp_norm_out):
            n.weight.uniform_(0.5, 1.5)
    x = torch.randn(2, 8, D)
    h = x + block.attn_norm_out(block.attn(x))  # OLMo 2: x = x + N(F(x))
    want = h + block.mlp_norm_out(block.mlp(h))
    assert torch.equal(block(x), want)
    with pytest.raises(ValueError, match="depth_scaled_norm"):
        TransformerConfig(V, D, 2, H, placement="reorder", depth_scaled_norm=True)


def test_reorder_model_trains():
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(V, D, 2, H, placement="reorder", qk_norm=True, **REF))
    opt = torch.optim.AdamW(param_groups(model, 0.0), lr=1e-2)
    tokens = _tokens(b=4, t=16)
    losses = []
    for _ in range(30):
        logits = model(tokens)
        loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.5 * losses[0]


def test_deepnorm_scales_the_skip_by_alpha():
    torch.manual_seed(0)
    block = Transformer(
        TransformerConfig(V, D, 6, H, norm="layernorm", placement="deepnorm")
    ).blocks[0]
    alpha, _ = deepnorm_constants(6)
    assert block.alpha == pytest.approx(alpha)
    x = torch.randn(2, 8, D)
    h = block.attn_norm_out(alpha * x + block.attn(x))
    torch.testing.assert_close(block(x), block.mlp_norm_out(alpha * h + block.mlp(h)))


# ---- DeepNorm


@pytest.mark.parametrize(
    "n, alpha, beta",
    [(6, 1.8612, 0.3799), (12, 2.2134, 0.3195), (24, 2.6321, 0.2686), (48, 3.1302, 0.2259)],
)
def test_deepnorm_constants_decoder(n, alpha, beta):
    a, b = deepnorm_constants(n)
    assert a == pytest.approx(alpha, abs=1e-4) and b == pytest.approx(beta, abs=1e-4)
    assert deepnorm_constants(n, "encoder") == pytest.approx((a, b))  # same formula in N


def test_deepnorm_constants_encoder_decoder():
    (ea, eb), (da, db) = deepnorm_constants(None, ("encdec", 12, 6))
    assert ea == pytest.approx(0.81 * (12**4 * 6) ** (1 / 16))
    assert eb == pytest.approx(0.87 * (12**4 * 6) ** (-1 / 16))
    assert (da, db) == pytest.approx((18**0.25, 72**-0.25))
    for bad in [(0, "decoder"), (6, "both"), (6, ("encdec", 6)), (None, ("encdec", 6, 0))]:
        with pytest.raises(ValueError):
            deepnorm_constants(*bad)


def test_deepnorm_init_scales_exactly_v_o_and_mlp():
    n, d = 6, 64
    _, beta = deepnorm_constants(n)
    cfg = dict(vocab_size=V, dim=d, n_layers=n, n_heads=4, norm="layernorm")
    torch.manual_seed(0)
    deep = Transformer(TransformerConfig(**cfg, placement="deepnorm"))
    torch.manual_seed(0)
    post = Transformer(TransformerConfig(**cfg, placement="post"))  # same draws, no β
    scaled = ("attn.wv.weight", "attn.wo.weight", "mlp.w_in.weight", "mlp.w_gate.weight")
    scaled += ("mlp.w_out.weight",)
    touched = set()
    for (name, p), (_, q) in zip(deep.named_parameters(), post.named_parameters(), strict=True):
        is_scaled = name.startswith("blocks.") and name.split(".", 2)[2] in scaled
        if is_scaled:
            touched.add(name.split(".", 2)[2])
            fan_out, fan_in = p.shape
            xavier = math.sqrt(2 / (fan_in + fan_out))
            assert p.std().item() == pytest.approx(beta * xavier, rel=0.1), name
        elif name.endswith(("wq.weight", "wk.weight")):
            assert p.std().item() == pytest.approx(math.sqrt(1 / d), rel=0.1), name  # gain 1
        torch.testing.assert_close(p, q * beta if is_scaled else q, msg=name)
    assert touched == set(scaled)


@pytest.mark.parametrize("init", ["xavier", "normal", "default"])
def test_init_modes(init):
    d, n = 64, 2
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(256, d, n, 4, arch="gpt2", init=init, **REF))
    wq, emb = model.blocks[0].attn.wq, model.tok_emb.weight
    want = {"xavier": (d**-0.5, d**-0.5), "normal": (0.02, 0.02), "default": (None, 1.0)}[init]
    if want[0] is not None:
        assert wq.weight.std().item() == pytest.approx(want[0], rel=0.1)
        assert (wq.bias == 0).all()
    else:  # torch's kaiming-uniform: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        assert wq.weight.abs().max().item() <= d**-0.5
    assert emb.std().item() == pytest.approx(want[1], rel=0.1)
    for norm in model.norm_modules():
        assert (norm.weight == 1).all()


def test_no_norm_scales_branch_outputs():
    d, n = 64, 8
    base = dict(vocab_size=V, dim=d, n_layers=n, n_heads=4, **REF)
    torch.manual_seed(0)
    bare = Transformer(TransformerConfig(**base, norm="none"))
    torch.manual_seed(0)
    off = Transformer(TransformerConfig(**base, norm="none", scale_branch_init=False))
    for a, b in zip(bare.named_parameters(), off.named_parameters(), strict=True):
        scaled = a[0].endswith(("attn.wo.weight", "mlp.w_out.weight"))
        torch.testing.assert_close(a[1], b[1] * (2 * n) ** -0.5 if scaled else b[1], msg=a[0])


# ---- config


def test_config_round_trip_and_validation():
    cfg = TransformerConfig(V, D, 3, H, norm="dyt", placement="mix", arch="gpt2", eps=1e-6)
    again = TransformerConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg
    with pytest.raises(ValueError, match="unknown"):
        TransformerConfig.from_dict({**cfg.to_dict(), "depth": 3})
    for field, bad in [
        ("norm", "groupnorm"),
        ("placement", "middle"),
        ("arch", "bert"),
        ("init", "kaiming"),
        ("norm_backend", "cuda"),
        ("max_seq_len", 0),
        ("mlp_ratio", -1.0),
    ]:
        with pytest.raises(ValueError, match=field):
            TransformerConfig(V, D, 2, H, **{field: bad})
    with pytest.raises(ValueError, match="n_layers"):
        TransformerConfig(V, D, 0, H)
    with pytest.raises(ValueError, match="n_heads"):
        TransformerConfig(V, 18, 2, 4)
    with pytest.raises(TypeError, match="final_norm"):
        TransformerConfig(V, D, 2, H, final_norm="yes")


def test_arch_defaults():
    llama, gpt2 = TransformerConfig(V, 48, 1, H), TransformerConfig(V, 48, 1, H, arch="gpt2")
    assert (llama.use_bias, gpt2.use_bias) == (False, True)
    assert (llama.hidden_dim, gpt2.hidden_dim) == (128, 192)
    model = Transformer(gpt2)
    assert model.pos_emb is not None and model.blocks[0].mlp.w_gate is None
    assert model.blocks[0].attn.wq.bias is not None
    model = Transformer(llama)
    assert model.pos_emb is None and model.blocks[0].attn.rope is not None
    assert all(b.attn.rope is model.blocks[0].attn.rope for b in model.blocks)
    tied = Transformer(TransformerConfig(V, D, 1, H, tie_embeddings=True))
    assert tied.lm_head.weight is tied.tok_emb.weight


def test_bad_inputs():
    model = Transformer(TransformerConfig(V, D, 1, H, max_seq_len=8))
    with pytest.raises(TypeError, match="tokens"):
        model(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.zeros(2, 9, dtype=torch.long))
    with pytest.raises(TypeError, match="mask"):
        model(torch.zeros(2, 4, dtype=torch.long), mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="mask"):
        model(torch.zeros(2, 4, dtype=torch.long), mask=torch.ones(2, 3, dtype=torch.bool))


@pytest.mark.parametrize("causal", [True, False])
def test_batchnorm_mask_keeps_padding_out(causal):
    torch.manual_seed(0)
    cfg = TransformerConfig(V, D, 2, H, norm="batchnorm", qk_norm=True, batchnorm_causal=causal)
    model = Transformer(cfg)
    model(_tokens(seed=2))  # running statistics that the causal form uses as a prior
    a, b = _tokens(seed=1), _tokens(seed=1)
    b[1, 5:] = (b[1, 5:] + 7) % V  # different padding after position 5 of row 1
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 5:] = False
    # Each call on its own copy: a training-mode call updates the running statistics.
    run = lambda tokens, **kw: copy.deepcopy(model)(tokens, **kw)  # noqa: E731
    torch.testing.assert_close(run(a, mask=mask)[mask], run(b, mask=mask)[mask])
    assert not torch.allclose(run(a), run(b))  # without the mask padding leaks into stats


@pytest.mark.parametrize("b", [1, 4, 16])
def test_causal_batchnorm_never_sees_the_future(b):
    """Changing the tokens after t leaves the train-mode logits up to t unchanged (bit for bit);
    the pooled form lets them change."""
    cfg = dict(vocab_size=V, dim=D, n_layers=2, n_heads=H, norm="batchnorm", qk_norm=True)
    tokens = _tokens(b=b, t=16, seed=3)
    later = tokens.clone()
    later[:, 9:] = (later[:, 9:] + 5) % V
    for causal in (True, False):
        torch.manual_seed(0)
        model = Transformer(TransformerConfig(**cfg, max_seq_len=16, batchnorm_causal=causal))
        model(_tokens(b=b, t=16, seed=4))  # running statistics: the prior of the first positions
        la, lb = (copy.deepcopy(model)(t) for t in (tokens, later))
        if causal:
            assert torch.equal(la[:, :9], lb[:, :9])
        else:
            assert not torch.allclose(la[:, :9], lb[:, :9])
        assert not torch.allclose(la[:, 9:], lb[:, 9:])


# ---- param groups


@pytest.mark.parametrize("norm", NORMS)
def test_param_groups(norm):
    cfg = TransformerConfig(V, D, 2, H, norm=norm, qk_norm=True, arch="gpt2", tie_embeddings=True)
    model = Transformer(cfg)
    norm_params = {id(p) for m in model.norm_modules() for p in m.parameters()}
    for decay_norms in (False, True):
        groups = param_groups(model, 0.1, decay_norms=decay_norms)
        ids = [id(p) for g in groups for p in g["params"]]
        assert len(ids) == len(set(ids)) == len({id(p) for p in model.parameters()})
        by_name = {g["name"]: g for g in groups}
        decayed = {id(p) for g in groups if g["weight_decay"] > 0 for p in g["params"]}
        if decay_norms:
            assert norm_params <= decayed
        else:
            assert decayed.isdisjoint(norm_params)
        for p in by_name["decay"]["params"]:
            assert p.dim() == 2
        assert by_name["no_decay"]["weight_decay"] == 0.0
        assert all(p.dim() == 1 for p in by_name["no_decay"]["params"])  # biases
        torch.optim.AdamW(groups, lr=1e-3)
    groups = param_groups(model, 0.1, decay_norms=True, norm_weight_decay=5.0)
    wd = {g["name"]: g["weight_decay"] for g in groups}
    assert wd["decay"] == 0.1 and wd.get("norm", 5.0) == 5.0  # the gains' own decay
    plain = param_groups(model, 0.1, norm_weight_decay=5.0)  # without decay_norms: no decay
    assert {g["name"]: g["weight_decay"] for g in plain}.get("norm", 0.0) == 0.0
    kinds = {type(m) for m in model.norm_modules()}
    assert kinds == ({KINDS[norm].module} if KINDS[norm].module else set())


# ---- backends


@pytest.mark.parametrize("placement", ["pre", "post"])  # post runs the fused residual+norm
@pytest.mark.parametrize("norm", ["rmsnorm", "layernorm"])
def test_state_dict_moves_between_backends(norm, placement):
    def model(backend):
        cfg = TransformerConfig(V, D, 2, H, norm=norm, placement=placement, qk_norm=True)
        return Transformer(TransformerConfig.from_dict({**cfg.to_dict(), "norm_backend": backend}))

    torch.manual_seed(0)
    src, tokens = model("reference"), _tokens()
    want = src(tokens)
    want.logsumexp(-1).mean().backward()
    for backend in ("torch", "auto"):
        dst = model(backend)
        dst.load_state_dict(src.state_dict())
        got = dst(tokens)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        got.logsumexp(-1).mean().backward()
        for (name, p), q in zip(dst.named_parameters(), src.parameters(), strict=True):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    src.load_state_dict(dst.state_dict())  # and back


# ---- at init: properties of the math (Xiong et al. 2020) ----------------------------------------
# The profile depends on the init (measured on GPT-2-style blocks, d=64: with small-std inits the
# branch is too weak for the LayerNorms to shrink the gradient; docs/models.md). With Xavier
# init one seed's Post-LN profile is a random walk over the blocks: at L=24 the last/first ratio
# ranged 0.5-6 over seeds (log-std 0.8), so the test compares geometric means over 16 seeds
# (16 seeds: z ≈ 3 for "> 1"; 8 seeds gave only z ≈ 1). Pre-LN's profile is tight (log-std 0.2).
# The growth needs text: with uniform random tokens the Post-LN ratio stayed below 1 at L=24.
POST_SEEDS, PRE_SEEDS, DEPTHS = range(16), range(4), (6, 24)
CORPUS = (
    "On layer normalization in the Transformer architecture. The original Transformer places "
    "the layer normalization between the residual blocks, after the addition: this is Post-LN. "
    "At initialization the expected gradients of the parameters near the output layer are large, "
    "so a large learning rate makes training unstable, and a warm-up stage is needed. If the "
    "layer normalization is put inside the residual blocks, before the attention and the "
    "feed-forward network, this is Pre-LN: the gradients are well-behaved at initialization, "
    "the warm-up stage can be removed, and training is faster. DeepNorm goes back to Post-LN but "
    "scales the residual branch by alpha and the initial weights by beta, so that a model with a "
    "thousand layers can be trained. Where the norm sits decides how the gradient flows."
)


def _init_profile(placement: str, n_layers: int, seed: int) -> dict:
    from normlab.models import Probes

    corpus = torch.tensor(list(CORPUS.encode()), dtype=torch.long)  # byte-level tokens
    b, t = 8, 64
    torch.manual_seed(seed)
    model = Transformer(
        TransformerConfig(
            256, 32, n_layers, 4, norm="layernorm", placement=placement, arch="gpt2", **REF
        )
    )
    starts = torch.randint(
        0, len(corpus) - t - 1, (b,), generator=torch.Generator().manual_seed(seed)
    )
    batch = torch.stack([corpus[i : i + t + 1] for i in starts.tolist()])  # (B, T + 1)
    with Probes(model) as probes:
        logits = model(batch[:, :-1])
        F.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten()).backward()
        return probes.collect()


@pytest.fixture(scope="module")
def init_profiles() -> dict:
    return {
        (placement, n): [_init_profile(placement, n, seed) for seed in seeds]
        for placement, seeds in (("post", POST_SEEDS), ("pre", PRE_SEEDS))
        for n in DEPTHS
    }


def _last_over_first(runs: list[dict]) -> float:
    """Geometric mean over seeds of ‖∇W‖ last block / first block, W = the MLP's second matrix."""
    logs = [
        math.log(r["grad_norm"]["mlp.w_out"][-1] / r["grad_norm"]["mlp.w_out"][0]) for r in runs
    ]
    return math.exp(sum(logs) / len(logs))


def test_post_ln_gradients_grow_toward_the_output(init_profiles):
    ratio = {key: _last_over_first(runs) for key, runs in init_profiles.items()}
    assert ratio["post", 24] > 1.0, ratio
    assert ratio["post", 24] > ratio["post", 6], ratio
    for n in DEPTHS:
        assert ratio["post", n] > ratio["pre", n], ratio


def test_pre_ln_residual_stream_grows_post_ln_stays_flat(init_profiles):
    def mean_rms(key):  # (n_layers,) averaged over seeds
        return torch.tensor([r["residual_rms"] for r in init_profiles[key]]).mean(0)

    for n in DEPTHS:
        post, pre = mean_rms(("post", n)), mean_rms(("pre", n))
        assert post.max() / post.min() < 1.01  # every block ends in a unit-gain LayerNorm
        # Each block adds a roughly independent branch output to the stream: it grows like √l.
        assert (pre.diff() > 0).float().mean() >= 0.9 and pre[-1] > 2 * pre[0], pre
    assert mean_rms(("pre", 24))[-1] > 2 * mean_rms(("pre", 6))[-1]


def test_dyt_alpha_sets_every_dyt_and_is_checked():
    m = Transformer(TransformerConfig(V, D, 2, H, norm="dyt", dyt_alpha=2.0))
    alphas = [n.alpha.item() for n in m.modules() if isinstance(n, DyT)]
    assert alphas and all(a == 2.0 for a in alphas)
    for bad in (0.0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="dyt_alpha"):
            TransformerConfig(V, D, 2, H, norm="dyt", dyt_alpha=bad)


def test_deepnorm_alpha_changes_the_skip_alone_and_keeps_the_beta_init():
    # the ablation of α (000 §6.2c): α = 1 in DeepNet's β-scaled init
    cfg = TransformerConfig(V, D, 6, H, norm="layernorm", placement="deepnorm")
    torch.manual_seed(0)
    paper = Transformer(cfg)
    torch.manual_seed(0)
    plain = Transformer(dataclasses.replace(cfg, deepnorm_alpha=1.0))
    assert all(b.alpha == 1.0 for b in plain.blocks)
    assert all(b.alpha == pytest.approx(deepnorm_constants(6)[0]) for b in paper.blocks)
    assert plain.deepnorm_beta == paper.deepnorm_beta < 1
    for (name, p), q in zip(paper.named_parameters(), plain.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)  # the same init, β and all
    x = torch.randint(0, V, (2, 8))
    assert not torch.allclose(paper(x), plain(x))  # only the skip differs
    for bad in (0.0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="deepnorm_alpha"):
            dataclasses.replace(cfg, deepnorm_alpha=bad)
    with pytest.raises(ValueError, match="placement='post' has none"):
        TransformerConfig(V, D, 6, H, placement="post", deepnorm_alpha=1.0)
