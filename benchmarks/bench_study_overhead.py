"""What a study costs beyond its runs' FLOPs: the constants of ``normlab study --list``'s wall
time (``normlab.lab.study.run.plan``: ``START_S``, ``WORKER_START_S``, ``RUN_OVERHEAD_S``,
``TIMING_PROCESS_S``, ``REPORT_S_PER_CLAIM``), each timed here on its own.

    python benchmarks/bench_study_overhead.py [--rounds 3]

Each in CPU seconds (the plan's estimate is for an idle machine, where CPU and wall time agree
for these one-thread pieces; a shared machine's load inflates CPU time far less than wall).
Per round, interleaved (so load drift hits all alike; the medians are printed):

- start: a fresh ``python`` that imports the lab's command line and study runner and reads the
  default corpus, as a command does before its first run;
- worker: a spawned pool worker (the study's own ``_init_worker``: torch, the corpus, the
  threads) from its start to the end of its first smoke run, less that run's own time; the
  Numba kernels come from their on-disk cache (a first run after installing compiles them);
- run: the driver's wall per further run on that warm worker (a smoke run of 12 steps, the
  result's round trip included), less the run's steps;
- timing process: one process of the serial timing phase (spawned, the study's ``time_arms``
  on two smoke arms, ``TIMING_ROUNDS`` rounds), whole and less what ``time_arms`` took in it
  (timing start);
- report: ``write_reports`` of a smoke study's verdicts (its plots included), per claim.

Each figure is also given as a ratio to one training step of the quick preset's base arm
(LLaMA d=64, 4 blocks, 16 x 64 tokens) timed in the same round: the per-step cost the
plan's ``GFLOPS_PER_CORE`` is calibrated on, so a machine k times slower scales them alike.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path


def children_cpu() -> float:
    """CPU seconds of this process's reaped children: a piece's CPU time, which the load of a
    shared machine inflates far less than its wall time (what the plan assumes: an idle one)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


START_CODE = (
    "import normlab.lab.cli, normlab.lab.study.run.runner\n"
    "from normlab.lab.train.data import load_corpus\n"
    "load_corpus(None).unigram_val_xent()\n"
)


def _smoke_configs():
    from normlab.lab.study.spec import load_builtin

    study = load_builtin("smoke")
    by = {a.name: a.config for a in study.arms}
    return study, by["base"], by["layernorm"]


def time_start() -> float:
    c = children_cpu()
    subprocess.run([sys.executable, "-c", START_CODE], check=True)
    return children_cpu() - c


def time_worker(corpus, cfg, runs: int = 4) -> tuple[float, float]:
    """(worker start-up, per-run overhead) of a spawned pool worker, CPU seconds. The start-up
    is the worker's whole CPU less its runs' steps and the later runs' overhead: its first run
    loads the norms' kernels (from their cache), which is the worker's start, not that run's."""
    from normlab.lab.study.run.executors import _init_worker, _worker_run

    ctx = mp.get_context("spawn")
    queue, gpus = ctx.SimpleQueue(), ctx.SimpleQueue()
    gpus.put(None)
    args = (None, corpus.sha256, 1, queue, os.getpid(), gpus)
    c, steps, extra = children_cpu(), 0.0, []
    with ProcessPoolExecutor(1, mp_context=ctx, initializer=_init_worker, initargs=args) as pool:
        for k in range(runs + 1):
            res, _ = pool.submit(_worker_run, cfg.to_dict()).result()
            s = res["summary"]
            steps += s["steps_done"] * s["step_ms"] / 1e3
            if k:
                extra.append(s["cpu_s"] - s["steps_done"] * s["step_ms"] / 1e3)
    return children_cpu() - c - steps - sum(extra), statistics.median(extra)


def _time_arms_timed(configs, corpus, rounds):
    """``time_arms`` in the timing process, and the CPU it took there."""
    from normlab.lab.study.run.timing import time_arms

    t = time.process_time()
    time_arms(configs, corpus, rounds=rounds, threads=1)
    return time.process_time() - t


def time_timing_process(corpus, a, b) -> tuple[float, float]:
    """One timing process of two smoke arms, CPU seconds: (its start, the whole process); the
    start is the whole less what ``time_arms`` took inside it."""
    from normlab.lab.study.run.timing import TIMING_ROUNDS

    c = children_cpu()
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        inside = pool.submit(_time_arms_timed, {"a": a, "b": b}, corpus, TIMING_ROUNDS).result()
    whole = children_cpu() - c
    return whole - inside, whole


def time_report(study, corpus) -> float:
    """``write_reports`` of a smoke study decided on made-up-free results: its own runs, one
    seed block trained in this process at one thread (not timed), the reports timed, per claim."""
    from normlab.lab.study.report import write_reports
    from normlab.lab.study.run import StudyOptions, run_study

    with tempfile.TemporaryDirectory() as d:
        opts = StudyOptions(Path(d), workers=1, threads=1, quiet=True)
        result = run_study(study, opts, corpus)
        t = time.process_time()
        write_reports(result, Path(d))
        return (time.process_time() - t) / len(study.claims)


def time_step() -> float:
    """One training step of the quick preset's base arm, in CPU seconds (the fastest of 5)."""
    import torch

    from normlab.lab.study.run.timing import _Arm
    from normlab.lab.study.spec import load_builtin
    from normlab.lab.train.data import load_corpus

    cfg = next(a.config for a in load_builtin("quick").arms if a.name == "base")
    torch.set_num_threads(1)
    arm = _Arm(cfg, load_corpus(None))
    arm.step()
    out = []
    for _ in range(5):
        t = time.process_time()
        arm.step()
        out.append(time.process_time() - t)
    return min(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    from normlab.lab.train.data import load_corpus

    corpus = load_corpus(None)
    study, a, b = _smoke_configs()
    rows: dict[str, list[float]] = {}
    for r in range(args.rounds):
        step = time_step()
        got = {"start": time_start()}
        got["worker"], got["run"] = time_worker(corpus, a)
        got["timing start"], got["timing process"] = time_timing_process(corpus, a, b)
        if r == 0:  # trains a whole smoke study first: once
            got["report per claim"] = time_report(study, corpus)
        for k, v in got.items():
            rows.setdefault(k, []).append(v)
            rows.setdefault(f"{k} / step", []).append(v / step)
        rows.setdefault("quick base step", []).append(step)
        line = ", ".join(f"{k} {v:.3f} CPU s" for k, v in got.items())
        print(f"round {r + 1}: {line}; load {os.getloadavg()[0]:.1f}", flush=True)
    print(f"load: {os.getloadavg()}")
    for k, xs in rows.items():
        print(f"{k:28s} median {statistics.median(xs):9.3f}  ({', '.join(f'{x:.3f}' for x in xs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
