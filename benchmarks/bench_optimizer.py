"""Fused against foreach AdamW in whole training steps of the lab's models (the trainer's choice).

    python benchmarks/bench_optimizer.py [--rows 0 1] [--budget-s 90]

The models are ``bench_step.py``'s rows (normlab's norms, float32); for each, one copy steps
with ``AdamW(fused=True)`` and one with ``AdamW(foreach=True)``, all in one process, timed in
interleaved rounds (the order rotating) until ``--budget-s`` is spent; figures are medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from bench_step import ROWS, Case

from normlab.models import param_groups

KINDS = ("foreach", "fused")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, nargs="+", default=[0, 1], choices=range(len(ROWS)))
    p.add_argument("--budget-s", type=float, default=90.0)
    args = p.parse_args()
    cases = {}
    for r in args.rows:
        for kind in KINDS:
            case = Case(ROWS[r], "normlab", "float32", "pre", "cpu")
            case.opt = torch.optim.AdamW(param_groups(case.model, 0.1), lr=1e-3, **{kind: True})
            cases[r, kind] = case
    for case in cases.values():
        for _ in range(3):  # kernel compilation, allocator caches
            case.step()
    keys, start, rounds = list(cases), time.perf_counter(), 0
    while rounds == 0 or time.perf_counter() - start < args.budget_s:
        shift = rounds % len(keys)
        for key in keys[shift:] + keys[:shift]:
            cases[key].times.append(cases[key].timed(3))
        rounds += 1
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; {rounds} rounds\n")
    print("| model | foreach ms | fused ms | fused / foreach |")
    print("|---|---|---|---|")
    for r in args.rows:
        ms = {k: 1e3 * statistics.median(cases[r, k].times) for k in KINDS}
        print(f"| {ROWS[r].label} | {ms['foreach']:.2f} | {ms['fused']:.2f} | "
              f"{ms['fused'] / ms['foreach']:.3f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
