"""The model's forwards: the norm inputs recorded by forward hooks, and the model's output.

Every chunk runs in batches of about ``BATCH_TOKENS`` tokens (the chunks have one length, so
there is no padding); a hook keeps each norm's input per chunk in FP32, flattened to rows of the
norm's width, so a chunk's rows are its tokens (and heads, for a q/k norm). The output compared
across modes is the model's: for an embedding model its pooled last hidden state (mean or CLS,
as the directory says), for a language model its last hidden state at every position and its
top-1 prediction there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

BATCH_TOKENS = 1024  # tokens per forward: bounds the transient logits and attention scores


@dataclass
class Output:
    """What one pass over the sample gives."""

    vectors: Tensor  # (chunks, D) pooled, or (chunks, T, d) per position (a language model)
    top1: Tensor | None  # (chunks, T) the predicted token, for a language model
    stream_rms: list[Tensor]  # per hidden state (embeddings, then each block): (chunks·T,) RMS


@contextmanager
def hooked(modules: dict[str, nn.Module], hook: Callable) -> Iterator[None]:
    """``hook(name, module, args, output)`` as a forward hook on each of ``modules``."""
    handles = [
        m.register_forward_hook(lambda mod, args, out, n=name: hook(n, mod, args, out))
        for name, m in modules.items()
    ]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def run(model: nn.Module, ids: Tensor, kind: str, pooling: str) -> Output:
    """One pass over ``ids`` (chunks, T) in the model's current mode, without gradients."""
    vectors, top1, stream = [], [], []
    with torch.no_grad():
        for b in ids.split(max(1, BATCH_TOKENS // ids.shape[1])):  # about BATCH_TOKENS a batch
            out = model(input_ids=b, attention_mask=torch.ones_like(b), output_hidden_states=True)
            hidden = out.hidden_states
            last = hidden[-1].float()  # (B, T, d)
            if kind == "lm":
                vectors.append(last)
                top1.append(out.logits.argmax(-1))
            else:
                vectors.append(last[:, 0] if pooling == "cls" else last.mean(1))
            stream.append([h.float().pow(2).mean(-1).sqrt().flatten() for h in hidden])
    rms = [torch.cat(per_layer) for per_layer in zip(*stream, strict=True)]
    return Output(torch.cat(vectors), torch.cat(top1) if top1 else None, rms)


def record(model: nn.Module, sites, ids: Tensor, kind: str, pooling: str):
    """The eval pass, with every norm's input kept: ``(output, {name: (chunks, rows, width)})``."""
    kept: dict[str, list[Tensor]] = {s.name: [] for s, _ in sites}

    def keep(name, module, args, out):
        x = args[0].detach().float()  # (B, ..., width): the batch dim first, as HF calls norms
        kept[name].append(x.reshape(x.shape[0], -1, x.shape[-1]).clone())

    with hooked({s.name: m for s, m in sites}, keep):
        output = run(model, ids, kind, pooling)
    return output, {name: torch.cat(xs) for name, xs in kept.items()}
