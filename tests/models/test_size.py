"""A model's size from its config's arithmetic (normlab.models.size) equals the built model's,
and its estimate of a run's peak memory is within a quarter of the measured peak RSS."""

import itertools
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from normlab.models import Transformer, TransformerConfig
from normlab.models.config import NORMS, PLACEMENTS
from normlab.models.size import (
    activation_bytes,
    buffer_bytes,
    norm_features,
    param_count,
    probe_bytes,
    run_bytes,
    train_bytes,
)


def _configs():
    for norm, placement, arch, qk, tie, bias in itertools.product(
        NORMS, PLACEMENTS, ("llama", "gpt2"), (False, True), (False, True), (None, True)
    ):
        try:
            yield TransformerConfig(
                50, 16, 5, 4, norm=norm, placement=placement, arch=arch, qk_norm=qk,
                tie_embeddings=tie, bias=bias, max_seq_len=24, learn_embed_scale=qk,
                mlp_ratio=None if tie else 3.3,
            )  # fmt: skip
        except ValueError:  # e.g. deepnorm without a norm
            continue


@pytest.mark.parametrize("placement", PLACEMENTS)
def test_param_count_is_the_built_models(placement):
    n = 0
    for cfg in _configs():
        if cfg.placement != placement:
            continue
        model = Transformer(cfg)
        assert param_count(cfg) == model.num_params(), cfg
        blocks = sum(p.numel() for p in model.blocks.parameters())
        assert param_count(cfg, blocks_only=True) == blocks, cfg
        n += 1
    assert n > 40


def test_memory_grows_with_the_sizes_and_is_at_least_the_adamw_state():
    cfg = TransformerConfig(256, 64, 4, 4)
    assert train_bytes(cfg, 16, 64) >= 16 * param_count(cfg) + activation_bytes(cfg, 16, 64)
    assert activation_bytes(cfg, 32, 64) == 2 * activation_bytes(cfg, 16, 64)
    wide = TransformerConfig(256, 10**6, 1, 8)  # arithmetic only: nothing is allocated
    assert param_count(wide) > 10**13


# A grid of small configs whose peaks differ in what dominates them: the activations (depth,
# width, tokens), gpt2's MLP, causal BatchNorm's prefix buffers, the RoPE table, the AdamW
# state, the probes' attention logits.
PEAK_GRID = [
    ({"dim": 128, "n_layers": 2, "n_heads": 2, "max_seq_len": 128}, 32, 128),
    ({"dim": 256, "n_layers": 3, "n_heads": 4, "max_seq_len": 128, "arch": "gpt2"}, 16, 128),
    ({"dim": 128, "n_layers": 2, "n_heads": 2, "max_seq_len": 8192, "norm": "batchnorm"}, 16, 128),
    ({"dim": 128, "n_layers": 2, "n_heads": 2, "max_seq_len": 200_000}, 16, 128),
    ({"dim": 256, "n_layers": 3, "n_heads": 4, "max_seq_len": 128}, 16, 128),
    ({"dim": 768, "n_layers": 2, "n_heads": 4, "max_seq_len": 64}, 4, 64),
    ({"dim": 128, "n_layers": 2, "n_heads": 8, "max_seq_len": 512}, 16, 512),  # B·H·T² probes
]


@pytest.mark.slow  # seven models trained in a fresh interpreter, up to d=768: ~20 CPU s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak RSS via /proc (Linux)")
def test_run_bytes_is_within_a_quarter_of_the_measured_peak_rss():
    from normlab.lab.train.config import TrainConfig

    cfgs = [
        TrainConfig(model=TransformerConfig(256, **m), steps=3, batch_size=b, seq_len=t)
        for m, b, t in PEAK_GRID
    ]
    script = Path(__file__).with_name("peak_rss.py")
    arg = json.dumps([c.to_dict() for c in cfgs])
    out = subprocess.run([sys.executable, str(script), arg], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    peaks = [json.loads(line)["peak"] for line in out.stdout.splitlines()]
    assert len(peaks) == len(cfgs), out.stdout
    ratios = [
        run_bytes(c.model, c.batch_size, c.seq_len) / p for c, p in zip(cfgs, peaks, strict=True)
    ]
    assert all(0.75 <= r <= 1.25 for r in ratios), [f"{r:.2f}" for r in ratios]


def test_run_bytes_counts_every_buffer_that_grows_with_the_sizes():
    base = TransformerConfig(256, 64, 2, 4, max_seq_len=128)
    long = replace(base, max_seq_len=10**6)  # the RoPE table: 2 x 10^6 x head_dim floats
    assert buffer_bytes(long) == 4 * 2 * 10**6 * 16
    assert run_bytes(long, 4, 64) - run_bytes(base, 4, 64) >= buffer_bytes(long) - 2**20
    bn = replace(long, norm="batchnorm")  # plus every BatchNorm's two prefix buffers
    assert buffer_bytes(bn) == buffer_bytes(long) + 4 * 2 * 10**6 * norm_features(bn)
    assert norm_features(bn) == 2 * 2 * 64 + 64  # two norms a block, and the final one
    assert probe_bytes(base, 8, 128) == 2 * probe_bytes(base, 4, 128)  # B·H·T²
    assert probe_bytes(base, 4, 256) == 4 * probe_bytes(base, 4, 128)
    assert run_bytes(base, 4, 64, val_sequences=10**6) > run_bytes(base, 4, 64) + 10**9
