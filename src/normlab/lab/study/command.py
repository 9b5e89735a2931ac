"""``normlab study``: train a preset's runs, decide its claims, write the reports.

Runs go to ``DIR/results.jsonl`` as they finish (``normlab.lab.study.store``); ``--resume``
skips the runs already there, so a killed study loses at most the runs in progress.
``--workers N`` trains N runs at once in separate processes, the CPU threads split between them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

PRESET_NAMES = ("quick", "stability", "paper", "deep", "smoke")  # the shipped spec files


def add_arguments(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group()
    which.add_argument("--preset", choices=PRESET_NAMES, default=None,
                       help="a built-in study (default: quick, ~7 min on 2 cores)")  # fmt: skip
    which.add_argument("--spec", metavar="FILE", default=None,
                       help="a study spec file (TOML, see docs/spec.md), not a preset")  # fmt: skip
    which.add_argument("--print-spec", metavar="NAME", choices=PRESET_NAMES, default=None,
                       help="print a preset's spec file, to copy and edit, and exit")  # fmt: skip
    add_run_options(
        p, out="normlab-out", listed="the plan (runs x seeds, claims, estimated CPU time)"
    )


def add_run_options(p: argparse.ArgumentParser, *, out: str, listed: str) -> None:
    """How a study runs: --seed, --list (printing ``listed``), --out (default ``out``), its
    data, --resume, processes, threads, executor, --quiet. Shared by the commands that run one
    (``normlab study``, ``normlab advise``; see ``execute``)."""
    from normlab.lab.cli import non_negative_int, positive_int

    p.add_argument("--seed", type=int, default=0,
                   help="seed block S: runs use seeds 10000*S + i, so two studies with "
                        "different --seed share no seed")  # fmt: skip
    p.add_argument("--list", action="store_true", help=f"print {listed} and exit")
    p.add_argument("--out", default=out, help="output directory")

    p.add_argument("--data", default=None,
                   help="train on this file; None = the stdlib's *.py files")  # fmt: skip
    p.add_argument("--resume", action="store_true",
                   help="keep DIR/results.jsonl and skip the runs already in it")  # fmt: skip
    # These models are too small for a second thread to pay off much; separate runs scale.
    p.add_argument(
        "--workers",
        type=positive_int,
        default=min(2, os.cpu_count() or 1),
        help="runs trained at once (processes); the threads are split between them",
    )
    p.add_argument("--threads", type=non_negative_int, default=0,
                   help="torch threads in all; 0 = torch's default (the cores)")  # fmt: skip
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: a process pool on this machine; ray: a Ray cluster "
                        '(pip install "normlab[ray]")')  # fmt: skip
    p.add_argument("--address", default=None,
                   help="with --executor ray: the cluster to join (auto, or HOST:6379); none: "
                        "a local Ray instance started and stopped with the study")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress bars or tables")


class Interrupted(Exception):
    """The study was stopped by a signal; ``code`` is the exit status (128 + signal)."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def _raise_on_sigterm(signum, frame) -> None:
    raise Interrupted(128 + signum)


def run(args: argparse.Namespace) -> int:
    from normlab.lab.cli import load_data, out_dir
    from normlab.lab.study import spec
    from normlab.lab.study.plan import format_plan

    if args.print_spec:
        print(spec.builtin_text(args.print_spec), end="")
        return 0
    # A spec is checked whole here, before anything runs or is written.
    preset = spec.load_spec(args.spec) if args.spec else spec.load_builtin(args.preset or "quick")
    if args.list:
        how = f"--spec {args.spec}" if args.spec else f"--preset {preset.name}"
        print(format_plan(preset, args.seed, how))
        return 0
    out = out_dir(args.out)
    corpus = load_data(args.data)
    done = execute(preset, args, out, corpus)
    if isinstance(done, int):
        return done
    return finish(args, out, preset, *done)


def execute(preset, args: argparse.Namespace, out: Path, corpus):
    """Train ``preset``'s runs (``run_study``), time its timing arms (``run_timing``), write
    ``out/study.json`` and decide the claims, under ``args.seed`` and the options of
    ``add_run_options``. Returns ``(results, verdicts, meta, failed)``, or the exit status of a
    study that could not start or was stopped by a signal. Every command that runs a study
    (``normlab study``, ``normlab advise``) goes through here."""
    import torch

    from normlab.lab.study.report import decide_all

    threads = args.threads or torch.get_num_threads()
    executor = _executor(args)
    t0 = time.time()
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        results, failed, reused = run_study(
            preset, corpus, out, seed=args.seed, data_path=args.data, resume=args.resume,
            workers=args.workers, threads=threads, quiet=args.quiet, executor=executor,
        )  # fmt: skip
        t_train = time.time() - t0
        # Timed with the threads each training run had: the setting the claim is about, and
        # one thread cannot stall in a thread barrier when something else takes a core.
        per_run = max(1, threads // args.workers)
        timings = run_timing(preset, corpus, seed=args.seed, threads=per_run, quiet=args.quiet)
    except (KeyboardInterrupt, Interrupted) as e:
        code = e.code if isinstance(e, Interrupted) else 130
        print(f"\nstudy stopped; finished runs are kept in {out / 'results.jsonl'}. Continue with "
              f"the same command and --resume.", file=sys.stderr)  # fmt: skip
        return code
    meta = {
        "preset": preset.name, "description": preset.description, "seed_block": args.seed,
        "corpus": corpus.describe(), "environment": environment(threads, args.workers),
        "wall_s": time.time() - t0, "train_wall_s": t_train,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "failed_runs": failed,
        "reused_runs": reused, "timings": timings,
    }  # fmt: skip
    (out / "study.json").write_text(json.dumps(meta, indent=2))
    verdicts = decide_all(preset, results, corpus.unigram_entropy(), timings)
    return results, verdicts, meta, failed


def finish(args, out: Path, preset, results, verdicts, meta, failed, *, lead_md: str = "",
           lead_html: str = "") -> int:  # fmt: skip
    """Write the reports (``lead_md``/``lead_html`` open them, after the title), print the
    claim table unless ``args.quiet``; the exit status: 1 if a run raised."""
    from normlab.lab.study.report import format_table, write_reports

    write_reports(out, preset, results, verdicts, meta, lead_md=lead_md, lead_html=lead_html)
    if not args.quiet:
        print(format_table(preset, verdicts))
        print(f"\n{sum(map(len, results.values()))} runs in {meta['wall_s']:.0f} s -> "
              f"{out / 'report.html'}, {out / 'report.md'}, {out / 'claims.json'}")  # fmt: skip
    if failed:
        print(f"runs that raised (not recorded; --resume retries them): {failed}", file=sys.stderr)
    return 1 if failed else 0


def _executor(args):
    from normlab.lab.cli import UsageError, importable
    from normlab.lab.study.executors import make_executor

    if args.executor == "ray" and not importable("ray"):
        raise UsageError('--executor ray needs Ray: pip install "normlab[ray]"')
    return make_executor(args.executor, workers=args.workers, address=args.address)


def run_timing(preset, corpus, *, seed: int, threads: int, quiet: bool) -> dict:
    """The serial phase: time the arms of the preset's timing claims, one process, nothing else
    of the study running (the training workers have exited)."""
    from normlab.lab.study.presets import SEED_STRIDE
    from normlab.lab.study.timing import time_arms

    arms = list(dict.fromkeys(a for c in preset.claims if c.timed for a in c.arms))
    if not arms:
        return {}
    by_name = {r.name: r.config for r in preset.arms}
    configs = {a: by_name[a].replace(seed=SEED_STRIDE * seed) for a in arms}
    rounds = 7
    bar = _Progress([], 0, 0, quiet, total=rounds, desc="timing (serial)")
    try:
        return time_arms(configs, corpus, rounds=rounds, threads=threads, on_round=bar.step)
    finally:
        bar.close()


def environment(threads: int, workers: int) -> dict[str, Any]:
    import numba
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "python": platform.python_version(), "torch": torch.__version__,
        "numba": numba.__version__, "platform": platform.platform(), "cpu": cpu,
        "cpu_count": os.cpu_count(), "threads": threads, "workers": workers,
    }  # fmt: skip


Grouped = dict[str, dict[int, dict]]  # arm -> seed index -> result


def run_study(preset, corpus, out: Path, *, seed=0, data_path=None, resume=False, workers=1,
              threads=1, quiet=False, executor=None) -> tuple[Grouped, list[str], int]:  # fmt: skip
    """Train the runs (arm x seed) that ``out/results.jsonl`` lacks. Returns
    ``arm -> {seed index: result}``, the labels of runs that raised, and how many results were
    reused from an earlier invocation."""
    from normlab.lab.study.executors import LocalExecutor
    from normlab.lab.study.store import ResultStore, run_key

    executor = executor or LocalExecutor(workers)
    store = ResultStore(out / "results.jsonl")
    if resume and (torn := store.set_aside_torn_line()) is not None and not quiet:
        print(f"a torn last line of {store.path.name} (a crash mid-write) was moved to {torn}")
    if not resume and store.path.exists():
        old = store.path.with_name(f"results.{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
        store.path.rename(old)
        if not quiet:
            print(f"previous results moved to {old} (use --resume to continue them)")
    done = store.load()
    tasks = preset.runs(seed)
    keys = {t.label: run_key(t.config, corpus.sha256) for t in tasks}
    todo = [t for t in tasks if keys[t.label] not in done]
    per_worker = max(1, threads // min(workers, max(1, len(todo))))
    bar = _Progress(todo, len(tasks) - len(todo), len(tasks), quiet)
    failed: list[str] = []

    def finish(task, result: dict | None, err: str | None) -> None:
        if err is not None:
            failed.append(task.label)
            bar.write(f"run {task.label} raised: {err}")
        else:
            rec = {"key": keys[task.label], "name": task.arm, "seed_index": task.index,
                   "seed": task.config.seed, "preset": preset.name,
                   "corpus_sha256": corpus.sha256, "result": result}  # fmt: skip
            store.append(rec)
            done[keys[task.label]] = rec
        steps_done = (result or {}).get("summary", {}).get("steps_done", 0)
        bar.run_done(max(1, task.config.steps) - steps_done)  # a diverged run stops early

    from normlab.lab.study.executors import Job

    job = Job(data_path, corpus.sha256, per_worker)
    executor.run(todo, job, corpus, on_step=bar.step, on_done=finish)
    bar.close()
    results: Grouped = {}
    for t in tasks:
        if keys[t.label] in done:
            results.setdefault(t.arm, {})[t.index] = done[keys[t.label]]["result"]
    return results, failed, len(tasks) - len(todo)


class _Progress:
    """One bar over the training steps of all pending runs; the runs counter in its label."""

    def __init__(self, todo, n_done: int, n_runs: int, quiet: bool, *, total: int | None = None,
                 desc: str | None = None):  # fmt: skip
        self.quiet, self.n_done, self.n_runs = quiet, n_done, n_runs
        self._lock = threading.Lock()
        if quiet:
            self.bar = None
            return
        from tqdm import tqdm

        if total is None:
            total = sum(max(1, r.config.steps) for r in todo)
        unit = "step" if desc is None else "round"
        self.bar = tqdm(total=total, unit=unit, dynamic_ncols=True, desc=desc or self._desc())

    def _desc(self) -> str:
        return f"runs {self.n_done}/{self.n_runs}"

    def step(self, n: int = 1) -> None:
        if self.bar is not None:
            with self._lock:
                self.bar.update(n)

    def run_done(self, steps_left: int) -> None:
        with self._lock:
            self.n_done += 1
            if self.bar is not None:
                self.bar.update(max(0, steps_left))
                self.bar.set_description(self._desc())

    def write(self, msg: str) -> None:
        if self.bar is not None:
            self.bar.write(msg)
        else:
            print(msg, file=sys.stderr)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
