"""Tiny random-weight models built from configs (no download): a Llama, a Gemma and a BERT,
each saved as a Hugging Face model directory once per process. A helper module, not a
``conftest.py``: other tests import the root ``conftest`` by name, which a second one would
shadow."""

import atexit
import functools
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

TINY = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, max_position_embeddings=64)  # fmt: skip


def _build(kind: str):
    import transformers as tf

    if kind == "llama":
        model = tf.LlamaForCausalLM(tf.LlamaConfig(**TINY, num_key_value_heads=2))
    elif kind == "gemma":
        model = tf.GemmaForCausalLM(tf.GemmaConfig(**TINY, num_key_value_heads=2, head_dim=8))
    else:
        model = tf.BertModel(tf.BertConfig(**TINY))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # gains and biases away from their init, so the replay has work
        for m in model.modules():
            if "Norm" in type(m).__name__:
                centre = 0.0 if kind == "gemma" else 1.0  # Gemma stores its gain around 0
                m.weight.copy_(centre + 0.2 * torch.randn(m.weight.shape, generator=g))
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(0.1 * torch.randn(m.bias.shape, generator=g))
    return model


@functools.cache
def tiny_dirs() -> dict[str, Path]:
    """kind -> the directory of a saved tiny model of that kind (removed when the process
    ends); skips the test where ``transformers`` (the hf extra) is absent."""
    pytest.importorskip("transformers")
    root = Path(tempfile.mkdtemp(prefix="normlab-tiny-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    out = {}
    for kind in ("llama", "gemma", "bert"):
        _build(kind).save_pretrained(root / kind)
        out[kind] = root / kind
    return out
