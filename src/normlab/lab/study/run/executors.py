"""Where a study's runs are trained: this machine (a process pool) or a Ray cluster.

An executor takes the runs still to do and calls ``on_done(run, result, error)`` on the driver
as each finishes; the driver alone appends to ``results.jsonl``, so resume, the report and the
claims work the same whichever executor ran. Every process an executor starts ends with the
driver, whatever signal ends it.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from functools import partial
from typing import Any

from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.packages import importable
from normlab.lab.train.result import RunResult

OnDone = Callable[[Any, RunResult | None, str | None], None]  # (run, result, error)
OnStep = Callable[[int], None]
Outcome = tuple[dict | None, str | None]  # a run's result (to_dict), or the error it raised
PR_SET_PDEATHSIG = 1  # prctl's option: a signal for this process when its parent dies


@dataclass(frozen=True)
class Job:
    """What every run of a study shares: its data, the most threads a run gets (each run's own
    are in its config), and whether the runs train on CUDA (each then gets a GPU: its worker's
    locally, one per task on Ray)."""

    data_path: str | None
    corpus_sha256: str
    threads: int
    cuda: bool = False
    tensorboard: str | None = None
    """TensorBoard event files of each run under this directory, in ``<arm>/seed<i>``
    (:func:`run_logdir`); written by the process that trains the run. None: no logs."""


def run_logdir(job: Job, run) -> str | None:
    """Where ``run`` (an arm under one seed index) writes its TensorBoard events, or None."""
    if job.tensorboard is None:
        return None
    arm = run.arm.replace("/", "_").replace("\\", "_")
    return os.path.join(job.tensorboard, arm, f"seed{run.index}")


def visible_gpus() -> list[str]:
    """The ids of the GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` spells them: that
    variable's list when it is set, else ``0 .. torch.cuda.device_count() - 1``."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [g.strip() for g in env.split(",") if g.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def gpu_assignment(workers: int, gpus: list[str]) -> list[str | None]:
    """``CUDA_VISIBLE_DEVICES`` for each of ``workers`` worker processes: worker i gets GPU
    ``gpus[i % len(gpus)]`` alone (one worker per GPU when ``workers == len(gpus)``; more share
    round-robin); no GPUs: None for every worker (the environment is left alone)."""
    return [gpus[i % len(gpus)] if gpus else None for i in range(workers)]


def steps_taken(result: RunResult | None) -> int:
    """The training steps a finished run took (fewer than configured if it stopped early)."""
    return 0 if result is None else result.summary.get("steps_done", 0)


def _outcome(get: Callable[[], Outcome]) -> tuple[RunResult | None, str | None]:
    """What ``get`` returns (a run's result and error), the result rebuilt as its ``RunResult``
    where the driver receives it; or its exception as the error: the process or Ray task that
    trained the run died."""
    try:
        result, err = get()
        return None if result is None else RunResult.from_dict(result, "a run's result"), err
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"


def train_one(cfg, corpus, on_step: OnStep, tensorboard: str | None = None) -> Outcome:
    """One run; an exception becomes an error string, so a bug in one run loses no other.
    ``tensorboard``: the run's TensorBoard directory (:func:`run_logdir`), or None."""
    from normlab.lab.train.trainer import train

    tb = None
    try:
        if tensorboard is not None:
            from normlab.lab.train.tblog import TensorBoardLog

            tb = TensorBoardLog(tensorboard, cfg.to_dict())

        def step(i: int, rec: dict) -> None:
            on_step(1)
            if tb is not None:
                tb.step(i, rec)

        res = train(cfg, corpus, on_step=step, on_eval=None if tb is None else tb.evaluation)
        if tb is not None:
            tb.finish(res.summary)
        return res.to_dict(), None
    except Exception as e:
        return None, f"{type(e).__name__}: {e}"
    finally:
        if tb is not None:
            tb.close()


# --------------------------------------------------------------------------------------------
# this machine


class LocalExecutor:
    """``workers == 1``: the runs one after another in this process; more: a pool of that many
    spawned processes, each loading the corpus once and reporting its steps on a queue. A study
    on CUDA gives each worker its own GPU (:func:`gpu_assignment`): its initializer takes a GPU
    id from a queue filled before the pool starts and sets ``CUDA_VISIBLE_DEVICES`` before CUDA
    starts in that process."""

    def __init__(self, workers: int):
        self.workers = workers

    def run(self, runs, job: Job, corpus, *, on_step: OnStep, on_done: OnDone) -> None:
        if self.workers == 1:
            for t in runs:
                one = partial(train_one, t.config, corpus, on_step, run_logdir(job, t))
                on_done(t, *_outcome(one))
            return
        import multiprocessing as mp

        ctx = mp.get_context("spawn")  # fork after torch has started threads can deadlock
        queue = ctx.SimpleQueue()  # steps, relayed to the progress bar
        pump = threading.Thread(target=_pump, args=(queue, on_step), daemon=True)
        pump.start()
        gpu_ids = ctx.SimpleQueue()  # one CUDA_VISIBLE_DEVICES value per worker, taken once
        for gpu in gpu_assignment(self.workers, visible_gpus() if job.cuda else []):
            gpu_ids.put(gpu)
        pool = ProcessPoolExecutor(
            self.workers,
            mp_context=ctx,
            initializer=_init_worker,
            initargs=(job.data_path, job.corpus_sha256, job.threads, queue, os.getpid(), gpu_ids),
        )
        try:
            futures = {
                pool.submit(_worker_run, t.config.to_dict(), run_logdir(job, t)): t for t in runs
            }
            for f in as_completed(futures):  # each as it finishes
                on_done(futures[f], *_outcome(f.result))
        except BaseException:
            # Interrupted: the runs in progress are abandoned, not waited for. The pool's
            # workers are this process's only multiprocessing children. A worker killed inside
            # queue.put leaves the queue's lock held for good, so the pump (a daemon thread,
            # blocked in get) is not stopped through the queue: it ends with this process.
            for p in ctx.active_children():
                p.kill()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        queue.put(None)
        pump.join()


def _pump(queue, on_step: OnStep) -> None:
    while (n := queue.get()) is not None:
        on_step(n)


_WORKER: dict[str, Any] = {}


def _init_worker(data_path, sha256: str, threads: int, queue, driver_pid: int, gpu_ids) -> None:
    claim_gpu(gpu_ids)  # before torch is imported (set_threads imports it)
    from normlab.lab.kit.threads import set_threads
    from normlab.lab.train.data import load_corpus

    die_with(driver_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    set_threads(threads)
    corpus = load_corpus(data_path)
    if corpus.sha256 != sha256:
        raise RuntimeError("the data file changed while the study ran")
    _WORKER.update(corpus=corpus, queue=queue)


def claim_gpu(gpu_ids) -> str | None:
    """Take this worker's GPU id off ``gpu_ids`` (a queue; None: no GPUs) and make it the only
    one this process sees, before CUDA starts here: its ``"cuda"`` is then its own GPU."""
    gpu = gpu_ids.get() if gpu_ids is not None else None
    if gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    return gpu


def _worker_run(cfg_dict: dict, tensorboard: str | None = None) -> Outcome:
    from normlab.lab.train.trainer import TrainConfig

    cfg = TrainConfig.from_dict(cfg_dict)
    return train_one(cfg, _WORKER["corpus"], _WORKER["queue"].put, tensorboard)


def die_with(parent_pid: int) -> None:
    """End this process when ``parent_pid`` dies, however it dies (SIGKILL included): the
    kernel's parent-death signal where there is one (Linux), and a watchdog thread everywhere."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent_pid:
            threading.Event().wait(1.0)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="die-with-driver").start()


# --------------------------------------------------------------------------------------------
# a Ray cluster


class RayExecutor:
    """Each run a Ray task asking for its threads as CPUs, and for one GPU when the study runs
    on CUDA (``num_gpus=1``: Ray then sets the task's ``CUDA_VISIBLE_DEVICES`` to that GPU).

    ``address=None`` starts a local Ray instance for the study and shuts it down after;
    otherwise the study joins that cluster and leaves it running. The corpus travels with the
    tasks (its bytes and SHA-256, put in the object store once): the default corpus, the
    running Python's standard library, may differ from node to node. TensorBoard logs
    (``Job.tensorboard``) are written by each task on its node, at the driver's path: on a
    cluster, give a directory every node shares.
    """

    def __init__(self, address: str | None = None, workers: int | None = None):
        self.address, self.workers = address, workers

    def run(self, runs, job: Job, corpus, *, on_step: OnStep, on_done: OnDone) -> None:
        import ray

        started_here = not ray.is_initialized()
        temp = None
        if started_here:
            kw: dict[str, Any] = {"address": self.address, "include_dashboard": False}
            if self.address is None:
                # A local instance's sessions and sockets go to a directory of this study's
                # own (mode 0700, removed at the end), not the shared /tmp/ray.
                temp = tempfile.mkdtemp(prefix="normlab-ray-")
                kw["_temp_dir"] = temp
                if self.workers:
                    kw["num_cpus"] = self.workers * job.threads
            ray.init(**kw, log_to_driver=False, configure_logging=False)
        try:
            from normlab.lab.train.data import read_bytes

            raw, source = read_bytes(job.data_path)
            data = ray.put((raw, source, corpus.sha256))
            remote = ray.remote(**ray_resources(job))(_ray_run)
            refs = {remote.remote(t.config.to_dict(), data, run_logdir(job, t)): t for t in runs}
            pending = list(refs)
            try:
                while pending:
                    ready, pending = ray.wait(pending, num_returns=1)
                    for ref in ready:
                        result, err = _outcome(lambda ref=ref: ray.get(ref))
                        # A Ray task reports no steps as it trains: its bar moves by the steps
                        # it took when it ends, and on_done adds those a run that stopped early
                        # skipped, so every run counts its configured steps once.
                        on_step(steps_taken(result))
                        on_done(refs[ref], result, err)
            except BaseException:
                for ref in pending:
                    ray.cancel(ref, force=True)
                raise
        finally:
            if started_here:
                ray.shutdown()
            if temp is not None:
                shutil.rmtree(temp, ignore_errors=True)


def ray_resources(job: Job) -> dict[str, int]:
    """What each run's Ray task asks for: its threads as CPUs, and a GPU for a CUDA study."""
    return {"num_cpus": job.threads, "num_gpus": 1 if job.cuda else 0}


def _ray_run(cfg_dict: dict, data, tensorboard: str | None = None) -> Outcome:
    from normlab.lab.train.data import corpus_from_bytes
    from normlab.lab.train.trainer import TrainConfig

    raw, source, sha256 = data
    corpus = corpus_from_bytes(raw, source)
    if corpus.sha256 != sha256:
        return None, "the corpus changed in transit"
    return train_one(TrainConfig.from_dict(cfg_dict), corpus, lambda n: None, tensorboard)


def make_executor(name: str, *, workers: int, address: str | None = None):
    """``name``'s executor (local or ray): an object whose ``run(runs, job, corpus, *, on_step,
    on_done)`` trains the runs."""
    if name == "local":
        return LocalExecutor(workers)
    if not importable("ray"):
        raise UsageError('--executor ray needs Ray: pip install "normlab[ray]"')
    return RayExecutor(address, workers)
