"""The study's engine: train a study's runs, time its timing arms, decide its claims.

``run_study(study, options, corpus)`` is what ``normlab study`` and ``normlab advise`` both
call. Runs go to ``OUT/results.jsonl`` as they finish (``normlab.lab.study.run.store``); with
``resume`` the runs already there are skipped, so a killed study loses at most the runs in
progress. The runs go longest first to as many worker processes as the machine holds, each
with the threads its model's width pays for (``normlab.lab.study.run.plan.plan_workers``).
"""

from __future__ import annotations

import os
import platform
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import set_aside, utc
from normlab.lab.kit.threads import check_threads
from normlab.lab.study.decide import Claim, Results, decide_all
from normlab.lab.study.run.provenance import record
from normlab.lab.study.run.study_json import (
    BEGAN_FILE,
    StudyMeta,
    first_began,
    mark_began,
)
from normlab.lab.study.spec import SEED_STRIDE, Run, Study
from normlab.lab.verdict import Verdict


@dataclass(frozen=True)
class StudyOptions:
    """How a study runs (``normlab study``'s and ``normlab advise``'s shared options)."""

    out: Path
    seed: int = 0  # the seed block S: runs use seeds SEED_STRIDE * S + i
    data: str | None = None  # the training file; None: the standard library's *.py files
    resume: bool = False
    workers: int = 0  # runs trained at once; 0: as many as the machine holds (plan_workers)
    threads: int = 0  # torch threads of every run; 0: each run's width's own (run_threads)
    executor: str = "local"  # or "ray"
    address: str | None = None  # the Ray cluster to join; None: a local instance
    quiet: bool = False
    device: str | None = None  # every arm's device (auto, cpu, cuda); None: the spec's own
    precision: str | None = None  # every arm's precision (fp32, bf16, fp16); None: the spec's
    tensorboard: Path | None = None  # TensorBoard events per run: DIR/<arm>/seed<i>; None: none

    def __post_init__(self) -> None:
        from normlab.lab.train.device import DEVICES, PRECISIONS

        if self.executor not in ("local", "ray"):
            raise UsageError(f"executor: expected local or ray, got {self.executor!r}")
        for what, value, known in (
            ("device", self.device, DEVICES),
            ("precision", self.precision, PRECISIONS),
        ):
            if value is not None and value not in known:
                raise UsageError(f"{what}: expected one of {', '.join(known)}, got {value!r}")
        if self.tensorboard is not None:
            from normlab.lab.train.tblog import tensorboard_available

            if not tensorboard_available():
                raise UsageError(
                    "--tensorboard needs the tensorboard package: pip install tensorboard "
                    '(or "normlab[lab]")'
                )
        if self.workers < 0:
            raise UsageError(f"workers: expected an int >= 0, got {self.workers}")
        check_threads(self.threads)


@dataclass
class StudyResult:
    """A finished study: its results, verdicts, what ``study.json`` holds, the runs that raised."""

    study: Study
    results: Results
    verdicts: list[tuple[Claim, Verdict]]
    meta: StudyMeta
    failed: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """1 if a run raised (it is not recorded; ``resume`` retries it), else 0."""
        return 1 if self.failed else 0


class Interrupted(BaseException):
    """The study was stopped by a signal; ``code`` is the exit status (128 + signal). Not an
    ``Exception``, as ``KeyboardInterrupt`` is not: a run trained in this process (``--workers
    1``) turns its exceptions into a failed run, and SIGTERM then failed one run and went on."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


def _raise_on_sigterm(signum, frame) -> None:
    raise Interrupted(128 + signum)


def configure(study: Study, device: str | None = None, precision: str | None = None, *,
              check: bool = True, auto: str | None = None) -> Study:  # fmt: skip
    """``study`` with every arm on ``device`` in ``precision`` (None: the arm's own), and
    ``"auto"`` resolved to ``auto`` (None: the device here, ``cpu`` or ``cuda``), so a run's key
    and record say where it ran. ``check``: a :class:`UsageError` if an arm needs CUDA and there
    is none (before any work); ``normlab study --list`` plans a CUDA study on any machine."""
    from normlab.lab.train.device import check_device
    from normlab.lab.train.trainer import concrete_device

    arms = []
    for a in study.arms:
        dev = device or a.config.device
        if dev == "auto":
            dev = auto or concrete_device(dev)
        if check:
            check_device(dev, "--device" if device else f"arm {a.name}: device")
        cfg = a.config.replace(device=dev, precision=precision or a.config.precision)
        arms.append(replace(a, config=cfg))
    return replace(study, arms=tuple(arms))


def checks_device(executor: str, address: str | None) -> bool:
    """Whether CUDA must be here: not for a Ray cluster joined by address (its nodes train)."""
    return not (executor == "ray" and address)


def study_device(study: Study) -> str:
    """``cuda`` if any arm of a configured study trains there, else ``cpu``."""
    return "cuda" if any(a.config.device == "cuda" for a in study.arms) else "cpu"


def run_study(study: Study, options: StudyOptions, corpus) -> StudyResult:
    """Train ``study``'s runs, time its timing arms, write ``OUT/study.json`` and decide the
    claims. ``study`` is as :func:`configure` returns it (its commands configure it once, with
    ``options.device`` and ``options.precision``). Raises :class:`Interrupted` on SIGTERM or
    Ctrl-C (finished runs are kept)."""
    t0 = time.time()
    began = first_began(options.out, utc(t0))
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        if study.sequential is not None:
            from normlab.lab.study.run.look_runner import train_looks

            results, failed, reused, plan = train_looks(study, corpus, options, train_runs)
        else:
            results, failed, reused, plan = train_runs(study, corpus, options)
        t_train = time.time() - t0
        # Timed with the threads the training runs of those arms had: the setting the claim is
        # about, and one thread cannot stall in a thread barrier when something else takes a
        # core.
        timings = run_timing(study, corpus, options.seed, plan, options.quiet)
    except KeyboardInterrupt:
        raise Interrupted(130) from None
    meta = StudyMeta.of(
        study,
        corpus,
        seed_block=options.seed,
        environment=environment(plan, study_device(study)),
        wall_s=time.time() - t0,
        train_wall_s=t_train,
        finished=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        # when the first of its runs began (a resumed study keeps its first start): the
        # registry decides from it whether a design was fixed before its data
        began=began if reused else utc(t0),
        failed_runs=failed,
        reused_runs=reused,
        timings=timings,
        **record(study, options.device, options.precision),  # the design --redecide rebuilds
    )
    meta.write(options.out)
    verdicts = decide_all(study, results, meta.plateau_h, timings)
    return StudyResult(study, results, verdicts, meta, failed)


def summary(result: StudyResult, out: Path) -> str:
    """The claim table and where the reports are: what a command prints at the end."""
    from normlab.lab.study.report import format_table

    n = sum(map(len, result.results.values()))
    table = format_table(result.verdicts, result.meta.plateau_h)
    reports = ", ".join(str(out / f) for f in ("report.html", "report.md", "claims.json"))
    return f"{table}\n\n{n} runs in {result.meta.wall_s:.0f} s -> {reports}"


def run_timing(study: Study, corpus, seed: int, plan, quiet: bool) -> dict:
    """The serial phase: time the arms of the study's timing claims in fresh processes, one at
    a time, nothing else of the study running (the training workers have exited), with the most
    threads the ``plan`` gives a run of those arms.

    ``arm -> {"step_ms", "norm_ms", "torch_norm_ms": one value per round, "process": the
    index of the process that timed each round}``.
    """
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    from tqdm import tqdm

    from normlab.lab.study.run.timing import TIMING_ROUNDS, time_arms

    arms, processes = study.timing_phase()
    if not arms:
        return {}
    by_name = {a.name: a.config for a in study.arms}
    configs = {a: by_name[a].replace(seed=SEED_STRIDE * seed) for a in arms}
    threads = max(plan.threads_for(c) for c in configs.values())
    out: dict[str, dict[str, list]] = {a: {} for a in arms}
    with tqdm(
        total=processes, unit="process", dynamic_ncols=True, desc="timing (serial)", disable=quiet
    ) as bar:
        for p in range(processes):
            # a fresh spawned process each time (fork after torch started threads can deadlock)
            with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
                got = pool.submit(
                    time_arms, configs, corpus, rounds=TIMING_ROUNDS, threads=threads
                ).result()
            for a, keys in got.items():
                for k, xs in keys.items():
                    out[a].setdefault(k, []).extend(xs)
                out[a].setdefault("process", []).extend([p] * TIMING_ROUNDS)
            bar.update()
    return out


def environment(plan, device: str = "cpu") -> dict[str, Any]:
    """What the study ran on, and its ``plan`` (workers, and the most threads a run had)."""
    import numba
    import torch

    from normlab.lab.study.run.machine import cpu_name, usable_cpus

    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numba": numba.__version__,
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cpus(),
        "threads": plan.threads,
        "workers": plan.workers,
        "workers_limit": plan.limit,
        "device": device,
    }
    if device == "cuda":
        env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        env["cuda"] = torch.version.cuda
    return env


def train_runs(study: Study, corpus, options: StudyOptions, plan=None, executor=None, *,
               order: Callable[[list[Run]], list[Run]] | None = None,
               runs: list[Run] | None = None):  # fmt: skip
    """Train the runs (arm x seed; ``runs``, default ``study.runs``: every seed of every arm)
    that ``OUT/results.jsonl`` lacks, in ``order`` (default:
    longest first, :func:`normlab.lab.study.run.plan.longest_first`), each with the threads the
    ``plan`` gives it (default: ``plan_workers``' for the runs to do here) on ``executor``
    (default: the options', with the plan's workers). Returns ``arm -> {seed index: result}``,
    the labels of runs that raised, how many results were reused from an earlier invocation,
    and the plan."""
    from normlab.lab.study.run.executors import Job, make_executor, steps_taken
    from normlab.lab.study.run.plan import longest_first, plan_workers
    from normlab.lab.study.run.store import ResultStore, RunRecord, results_of, run_key
    from normlab.lab.train.result import RunResult

    store = _open_store(ResultStore(options.out / "results.jsonl"), options)
    done = store.load(results=True)  # a hand-edited line stops here, not in the verdicts
    runs = study.runs(options.seed) if runs is None else runs
    keys = {r.label: run_key(r.config, corpus.sha256) for r in runs}
    todo = [r for r in runs if keys[r.label] not in done]
    plan = plan or plan_workers([r.config for r in todo], None, options.workers, options.threads)
    if executor is None:
        executor = make_executor(options.executor, workers=plan.workers, address=options.address)
    todo = [replace(r, config=r.config.replace(threads=plan.threads_for(r.config))) for r in todo]
    todo = (order or longest_first)(todo)
    total = sum(max(1, r.config.steps) for r in todo)
    bar = Progress(total, options.quiet, runs=(len(runs) - len(todo), len(runs)))
    failed: list[str] = []

    def finish(run: Run, result: RunResult | None, err: str | None) -> None:
        if err is not None:
            failed.append(run.label)
            bar.write(f"run {run.label} raised: {err}")
        else:
            key, seed = keys[run.label], run.config.seed
            res = result.to_dict()
            rec = RunRecord(key, run.arm, run.index, seed, study.name, corpus.sha256, res)
            done[key] = asdict(rec)
            store.append(done[key])
        bar.run_done(max(1, run.config.steps) - steps_taken(result))  # a diverged run stops early

    tb = None if options.tensorboard is None else str(Path(options.tensorboard).resolve())
    cuda = any(r.config.device == "cuda" for r in todo)
    job = Job(options.data, corpus.sha256, plan.threads, cuda=cuda, tensorboard=tb)
    executor.run(todo, job, corpus, on_step=bar.step, on_done=finish)
    bar.close()
    results = results_of(done, runs, lambda r: keys[r.label], str(store.path))
    return results, failed, len(runs) - len(todo), plan


# What a study writes in its output directory: without --resume, the ones there move aside
# together, so the study they hold can still be decided (--redecide DIR/previous-<time>) and a
# file of the user's of one of these names is kept, not overwritten.
STUDY_FILES = (
    "results.jsonl", "study.json", "claims.json", "report.md", "report.html", "plots", BEGAN_FILE
)  # fmt: skip


def _open_store(store, options: StudyOptions):
    """The results file, continued (``resume``: a torn last line set aside) or started anew
    (what an earlier study left moved aside whole, never overwritten: :func:`start_anew`)."""
    if options.resume and (torn := store.set_aside_torn_line()) is not None and not options.quiet:
        print(f"a torn last line of {store.path.name} (a crash mid-write) was moved to {torn}")
    start_anew(options)  # without resume
    mark_began(options.out, utc())
    return store


def start_anew(options: StudyOptions, extra: tuple[str, ...] = ()) -> None:
    """Without ``resume``: the :data:`STUDY_FILES` (and ``extra``) in the output directory moved
    into ``OUT/previous-<time>``, a folder that holds everything to decide that study again."""
    if options.resume:
        return
    old = set_aside(options.out, STUDY_FILES + extra, "previous")
    if old is not None:
        print(
            f"an earlier study's files were moved to {old} (--resume continues a study; "
            f"--redecide {old} decides that one again)",
            file=sys.stderr if options.quiet else sys.stdout,
        )


class Progress:
    """The training phase's bar over ``total`` steps (those of all pending runs), with the runs
    counter ``runs=(done, all)`` in its label. ``quiet``: no bar (a disabled one), and the
    messages to stderr."""

    def __init__(self, total: int, quiet: bool, runs: tuple[int, int]):
        from tqdm import tqdm

        self.n_done, self.n_runs = runs
        self.quiet = quiet
        self._lock = threading.Lock()
        self.bar = tqdm(
            total=total, unit="step", dynamic_ncols=True, desc=self._desc(), disable=quiet
        )

    def _desc(self) -> str:
        return f"runs {self.n_done}/{self.n_runs}"

    def step(self, n: int = 1) -> None:
        with self._lock:
            self.bar.update(n)

    def run_done(self, steps_left: int) -> None:
        with self._lock:
            self.n_done += 1
            self.bar.update(max(0, steps_left))
            self.bar.set_description(self._desc())

    def write(self, msg: str) -> None:
        if self.quiet:
            print(msg, file=sys.stderr)
        else:
            self.bar.write(msg)

    def close(self) -> None:
        self.bar.close()
