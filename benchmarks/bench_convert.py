"""Forward speed of a GPT-2 converted to Pre-RMSNorm against the original, on the CPU.

Variants of one random-initialised ``GPT2LMHeadModel`` (fp32, eval) in the same process:
``original`` (``nn.LayerNorm``), ``patched[B]`` (``normlab.hf.patch``: normlab LayerNorm on
backend B) and ``converted[B]`` (``normlab.hf.convert.preln_to_rmsnorm``: weightless RMSNorms on
backend B, γ/β folded into the next linear layer, a bias added to the untied LM head). Calls are
interleaved round-robin so a noisy, shared machine slows every variant alike; the median and
the minimum are reported. The norms are also timed alone on the model's hidden-state shape.

    .venv/bin/python benchmarks/bench_convert.py            # 6 layers, d=384, seq 256
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from normlab.hf import patch
from normlab.hf.convert import preln_to_rmsnorm


def build(args) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=args.vocab, n_embd=args.dim, n_layer=args.layers, n_head=args.heads,
        n_positions=args.seq, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return GPT2LMHeadModel(cfg).eval()


def interleaved_ms(
    fns: dict[str, Callable[[], object]], repeats: int
) -> dict[str, tuple[float, float]]:
    """(median, min) wall time of each callable in ms, calls interleaved round-robin."""
    for fn in fns.values():  # warm-up: JIT, allocator, caches
        fn()
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(1e3 * (time.perf_counter() - t0))
    return {k: (statistics.median(v), min(v)) for k, v in times.items()}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument(
        "--backends",
        default="auto,torch",
        help="normlab kernel backends of the new norms, comma-separated",
    )
    p.add_argument("--threads", type=int, default=0, help="torch threads; 0 = torch's default")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    backends = [b for b in args.backends.split(",") if b]
    original = build(args)
    models = {"original": original}
    for b in backends:
        models[f"patched[{b}]"] = copy.deepcopy(original)
        patch(models[f"patched[{b}]"], backend=b)
    for b in backends:
        models[f"converted[{b}]"] = preln_to_rmsnorm(copy.deepcopy(original), backend=b)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen)

    with torch.inference_mode():
        logits = {k: m(ids).logits for k, m in models.items()}
        ms = interleaved_ms({k: (lambda m=m: m(ids)) for k, m in models.items()}, args.repeats)
        # The norms alone, on the hidden states they see: 2 per block + the final one.
        h = torch.randn(args.batch * args.seq, args.dim)
        n_norms = 2 * args.layers + 1
        norms = {k: m.transformer.ln_f for k, m in models.items()}
        norm_ms = interleaved_ms(
            {k: (lambda n=n: n(h)) for k, n in norms.items()}, 10 * args.repeats
        )

    err = {k: (logits[k] - logits["original"]).abs().max().item() for k in models}
    print(
        f"GPT-2 {args.layers} layers, d={args.dim}, {args.heads} heads, vocab {args.vocab}, "
        f"batch {args.batch} x seq {args.seq}, fp32, torch threads {torch.get_num_threads()}, "
        f"median of {args.repeats} interleaved forwards\n"
    )
    print(
        "| model | forward ms, median (min) | ratio to original, median (min) | "
        f"norms ms x{n_norms}, median | max abs logit diff |"
    )
    print("|---|---|---|---|---|")
    (med0, min0) = ms["original"]
    for k in models:
        med, mn = ms[k]
        print(
            f"| {k} | {med:.1f} ({mn:.1f}) | {med / med0:.3f} ({mn / min0:.3f}) | "
            f"{n_norms * norm_ms[k][0]:.2f} | {err[k]:.2e} |"
        )


if __name__ == "__main__":
    main()
