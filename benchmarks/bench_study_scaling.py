"""How a study's training phase scales with workers, and which thread count pays per model width.

    python benchmarks/bench_study_scaling.py [--workers 1 2 4 ...] [--repeats 2]
        [--order longest spec] [--write-docs docs/benchmarks.md]
    python benchmarks/bench_study_scaling.py --threads [--dims 64 128 256 512] [--budget-s 120]

Scaling (the default): a fixed subset of the quick preset's runs (:data:`SUBSET`: its arms of
every size, a few seeds each, about 100 CPU s at one thread a run) trained by the study's own
runner and local process pool at each worker count, one thread per run, with the submission
``--order``: ``longest`` (the runner's: estimated cost, longest first) or ``spec`` (the study's
own order, what the runner did before). The worker counts and orders are interleaved (one pass
over all of them per repeat), so load drift on a shared machine hits all alike. Each row: the
wall time of the training phase, runs/s, and the ideal ``max(total CPU / workers, longest run)``
from the CPU seconds the runs themselves reported in that same pass.

``--threads``: one training step of the quick preset's baseline recipe (LLaMA, 4 blocks, batch 16
x 64 tokens, fused AdamW) at each ``--dims`` width and 1, 2, 4, ... threads up to the usable
CPUs, timed in interleaved rounds; the speed-up over one thread tells which thread count pays for
a width (``normlab.lab.study.run.plan.THREADS_BY_DIM``).
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from normlab.lab.study.run.machine import cpu_name, usable_cpus

SECTION = "## Study scaling (bench_study_scaling.py)"
# (arm, seeds): every model size of the quick preset, its longest runs included.
SUBSET = (  # in the preset's own order
    ("init-pre-L12", 4),
    ("init-post-L48", 4),
    ("post-L6", 1),
    ("post-L24", 1),
    ("deepnorm-L24", 1),
    ("base", 3),
    ("layernorm-B4", 2),
)


def subset_study(subset=SUBSET):
    """The quick preset's ``subset`` arms (name, seeds), on the CPU, with no claims."""
    from normlab.lab.study.run.runner import configure
    from normlab.lab.study.spec.design import Study
    from normlab.lab.study.spec.parse import load_builtin

    class Subset(Study):
        def seeds(self, arm: str) -> int:
            return dict(subset)[arm]

    quick = configure(load_builtin("quick"), "cpu")
    arms = {a.name: a for a in quick.arms}
    return Subset("quick-subset", quick.description, tuple(arms[n] for n, _ in subset), ())


def train_phase(study, corpus, workers: int, order: str) -> tuple[float, list[float]]:
    """Wall seconds of the training phase and each run's CPU seconds."""
    from normlab.lab.study.run.executors import LocalExecutor
    from normlab.lab.study.run.plan import WorkerPlan
    from normlab.lab.study.run.runner import StudyOptions, train_runs

    with tempfile.TemporaryDirectory() as out:
        options = StudyOptions(Path(out), workers=workers, threads=1, quiet=True)
        plan = WorkerPlan(workers=workers, threads=1, limit="--workers", fixed=True)
        keep = None if order == "longest" else list  # spec: the study's own order
        t0 = time.perf_counter()
        results, failed, *_ = train_runs(
            study, corpus, options, plan, LocalExecutor(workers), order=keep
        )
        wall = time.perf_counter() - t0
    if failed:
        raise RuntimeError(f"runs failed: {failed}")
    cpu = [r["summary"]["cpu_s"] for arm in results.values() for r in arm.values()]
    return wall, cpu


def scaling(args) -> str:
    from normlab.lab.train.data import load_corpus

    study = subset_study()
    corpus = load_corpus(None)
    n_runs = len(study.runs())
    # Warm-up: Numba's kernels compiled and cached on disk, for every worker process after.
    train_phase(subset_study((("base", 1),)), corpus, 1, "spec")
    rows: dict[tuple[int, str], list[tuple[float, list[float]]]] = {}
    for rep in range(args.repeats):
        # One worker trains the runs one after another in any order: one order is enough.
        keys = [(w, o) for w in args.workers for o in args.order if w > 1 or o == args.order[0]]
        for key in keys[rep % len(keys) :] + keys[: rep % len(keys)]:
            rows.setdefault(key, []).append(train_phase(study, corpus, *key))
            print(key, f"{rows[key][-1][0]:.1f} s", file=sys.stderr, flush=True)
    lines = [
        "| workers | order | wall s (median) | runs/s | ideal s | wall / ideal | CPU s (sum) "
        "| longest run s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    points = []
    for (w, order), reps in sorted(rows.items()):
        wall = statistics.median(r[0] for r in reps)
        cpu = statistics.median(sum(r[1]) for r in reps)
        longest = statistics.median(max(r[1]) for r in reps)
        ideal = max(cpu / w, longest)
        points.append((w, order, wall, ideal))
        lines.append(
            f"| {w} | {order} | {wall:.1f} | {n_runs / wall:.3f} | {ideal:.1f} | "
            f"{wall / ideal:.2f} | {cpu:.1f} | {longest:.1f} |"
        )
    if args.plot:
        plot(points, args.plot)
    head = (
        f"{n_runs} runs of the quick preset (`SUBSET` in the script), one thread a run, "
        f"{args.repeats} interleaved repeats; ideal = max(total CPU / workers, longest run) from "
        "the CPU seconds the runs reported."
    )
    return "\n".join([head, "", *lines])


def plot(points, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.4))
    for order in sorted({p[1] for p in points}):
        ws = [p[0] for p in points if p[1] == order]
        ax.plot(ws, [p[2] for p in points if p[1] == order], "o-", label=f"measured ({order})")
    ideal = {p[0]: p[3] for p in points}
    ax.plot(list(ideal), list(ideal.values()), "k--", label="ideal")
    ax.set_xlabel("workers")
    ax.set_ylabel("training phase, wall s")
    ax.set_xticks(sorted(ideal))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def thread_table(args) -> str:
    import torch.nn.functional as F

    from normlab.models import Transformer, TransformerConfig, param_groups

    counts = [1]
    while counts[-1] * 2 <= usable_cpus():
        counts.append(counts[-1] * 2)
    cases = {}
    for d in args.dims:
        cfg = TransformerConfig(256, d, 4, max(4, d // 64), max_seq_len=64)
        torch.manual_seed(0)
        model = Transformer(cfg)
        opt = torch.optim.AdamW(param_groups(model, 0.1), lr=1e-3, fused=True)
        x = torch.randint(256, (16, 65))

        def step(model=model, opt=opt, x=x):
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x[:, :-1]).reshape(-1, 256), x[:, 1:].reshape(-1))
            loss.backward()
            opt.step()

        for _ in range(3):
            step()
        cases[d] = step
    times: dict[tuple[int, int], list[float]] = {}
    start, rnd = time.perf_counter(), 0
    while rnd < 3 or time.perf_counter() - start < args.budget_s:
        for d, step in cases.items():
            order = counts[rnd % len(counts) :] + counts[: rnd % len(counts)]
            for t in order:
                torch.set_num_threads(t)
                t0 = time.perf_counter()
                for _ in range(5):
                    step()
                times.setdefault((d, t), []).append((time.perf_counter() - t0) / 5)
        rnd += 1
    head = "| d | " + " | ".join(f"{t} thr ms/step" for t in counts) + " | "
    head += " | ".join(f"speed-up at {t}" for t in counts[1:]) + " |"
    lines = [head, "|" + "---|" * (1 + 2 * len(counts) - 1)]
    for d in args.dims:
        ms = [statistics.median(times[(d, t)]) * 1e3 for t in counts]
        lines.append(
            f"| {d} | "
            + " | ".join(f"{m:.1f}" for m in ms)
            + (" | " if len(ms) > 1 else "")
            + " | ".join(f"{ms[0] / m:.2f}x" for m in ms[1:])
            + " |"
        )
    return (
        f"One training step (LLaMA, 4 blocks, batch 16 x 64 tokens, fused AdamW), median of "
        f"{rnd} interleaved rounds:\n\n" + "\n".join(lines)
    )


def machine() -> str:
    return f"{cpu_name()}, {usable_cpus()} usable CPUs ({os.cpu_count()} on the host), torch " + (
        torch.__version__
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", action="store_true", help="the thread table instead")
    p.add_argument("--dims", type=int, nargs="+", default=[64, 128, 256, 512])
    p.add_argument("--budget-s", type=float, default=120.0, help="--threads: timing budget")
    cpus = usable_cpus()
    default = sorted({1, *(w for w in (2, 4, 8, 16, 32, 64) if w <= cpus), cpus})
    p.add_argument("--workers", type=int, nargs="+", default=default)
    p.add_argument("--order", nargs="+", default=["longest"], choices=["longest", "spec"])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--plot", metavar="PNG", default=None, help="the scaling curve")
    args = p.parse_args()
    body = thread_table(args) if args.threads else scaling(args)
    argv = " ".join(sys.argv[1:])
    print(
        f"{datetime.date.today()}, {machine()}\n"
        f"command: python benchmarks/bench_study_scaling.py {argv}\n\n{body}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
