"""Does ``torch.compile`` of the model pay back within one study run? For the quick preset's arms,
one process, interleaved: a run's steps eager, and the same steps compiled *including* the
compile, as the trainer would pay them.

    python benchmarks/bench_compile_run.py [--arms base post-L24] [--steps 30]

Prints per arm: eager ms/step, compiled ms/step (after warm-up), compile seconds, and the steps a
run needs before compiling pays back, beside the steps the arm runs.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from normlab.lab.study.spec.parse import load_builtin
from normlab.lab.train.data import RandomBatches, load_corpus
from normlab.lab.train.trainer import adamw
from normlab.models import Transformer, param_groups


def _stepper(cfg, corpus, compiled: bool):
    torch.manual_seed(cfg.seed)
    model = Transformer(cfg.model)
    fwd = torch.compile(model) if compiled else model
    opt = adamw(param_groups(model, cfg.weight_decay), cfg)
    batches = RandomBatches(corpus.train, cfg.batch_size, cfg.seq_len, seed=0)

    def step() -> None:
        x, y = next(batches)
        loss = F.cross_entropy(fwd(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _ms_per_step(step, n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    return 1e3 * (time.perf_counter() - t0) / n


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arms", nargs="*", default=["base", "post-L24"])
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args()
    torch.set_num_threads(1)  # what each of the study's two workers has
    corpus = load_corpus()
    arms = {a.name: a.config for a in load_builtin("quick").arms}
    print(f"torch {torch.__version__}, 1 thread; {args.steps} timed steps per mode\n")
    print(f"{'arm':<10} {'eager ms':>9} {'compiled ms':>12} {'compile s':>10} "
          f"{'pay-back steps':>15} {'run steps':>10}")  # fmt: skip
    for name in args.arms:
        cfg = arms[name]
        eager = _stepper(cfg, corpus, compiled=False)
        eager()  # one-off allocations
        t0 = time.perf_counter()
        comp = _stepper(cfg, corpus, compiled=True)
        comp()  # the compile happens on the first call
        compile_s = time.perf_counter() - t0
        e, c = [], []
        for _ in range(3):  # interleaved: load drift hits both modes
            e.append(_ms_per_step(eager, args.steps // 3))
            c.append(_ms_per_step(comp, args.steps // 3))
        e_ms, c_ms = min(e), min(c)
        gain = e_ms - c_ms
        payback = f"{1e3 * compile_s / gain:.0f}" if gain > 0 else "never"
        print(f"{name:<10} {e_ms:>9.1f} {c_ms:>12.1f} {compile_s:>10.1f} {payback:>15} "
              f"{cfg.steps:>10}")  # fmt: skip


if __name__ == "__main__":
    main()
