"""``normlab demo``: every backend on one tensor, error against a float64 truth, and time."""

from __future__ import annotations

import argparse
import time

import torch


def add_arguments(p: argparse.ArgumentParser) -> None:
    from normlab.lab.cli import positive_int

    p.add_argument("--rows", type=positive_int, default=4096, help="rows of the test tensor")
    p.add_argument("--hidden", type=positive_int, default=1024, help="hidden size N")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="bfloat16")


def _time(fn, repeat: int = 5) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(repeat):
        fn()
    return (time.perf_counter() - t0) / repeat


def run(args: argparse.Namespace) -> int:
    from normlab import functional as F
    from normlab import reference

    torch.manual_seed(0)
    dtype = getattr(torch, args.dtype)
    x = torch.randn(args.rows, args.hidden, dtype=dtype) * 3 + 1
    w = 1 + 0.1 * torch.randn(args.hidden, dtype=dtype)
    b = 0.1 * torch.randn(args.hidden, dtype=dtype)
    truth = {
        "rms_norm": reference.rms_norm(x.double(), w.double(), casting="gemma"),
        "layer_norm": reference.layer_norm(x.double(), w.double(), b.double()),
    }
    calls = {
        "rms_norm": lambda be: F.rms_norm(x, w, casting="gemma", backend=be),
        "layer_norm": lambda be: F.layer_norm(x, w, b, backend=be),
    }
    print(f"x: ({args.rows}, {args.hidden}) {args.dtype}; error vs float64, time per call")
    print(f"{'op':<11} {'backend':<10} {'max abs err':>12} {'ms':>8}")
    for op, call in calls.items():
        for be in F.available_backends():
            err = (call(be).double() - truth[op]).abs().max().item()
            ms = 1e3 * _time(lambda be=be, call=call: call(be))
            print(f"{op:<11} {be:<10} {err:>12.3e} {ms:>8.2f}")
    return 0
