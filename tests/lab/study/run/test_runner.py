"""The study's runner without training: progress accounting and options (fake executors)."""

import sys
import types

import pytest

from normlab.lab.kit.errors import UsageError
from normlab.lab.study.run import executors, runner
from normlab.lab.study.run.machine import Machine
from normlab.lab.study.run.plan import WorkerPlan, cpu_seconds
from normlab.lab.study.run.runner import StudyOptions, configure, train_runs
from normlab.lab.study.spec.parse import load_builtin
from normlab.lab.train.result import RunResult


class _Counting(runner.Progress):
    """The progress bar, quiet, counting the units it was moved by."""

    instances: list["_Counting"] = []

    def __init__(self, total, quiet, **kw):
        super().__init__(total, True, **kw)
        self.total, self.count = total, 0
        _Counting.instances.append(self)

    def step(self, n=1):
        self.count += n

    def run_done(self, steps_left):
        self.count += max(0, steps_left)


def _result(cfg, steps_done):  # as a worker sends it
    return RunResult(cfg.to_dict(), summary={"steps_done": steps_done}).to_dict()


class _Ref:
    def __init__(self, value):
        self.value = value


def _fake_ray() -> types.ModuleType:
    """Ray's calls the executor makes, run synchronously in this process."""
    ray = types.ModuleType("ray")
    state = {"up": False}
    ray.is_initialized = lambda: state["up"]
    ray.init = lambda **kw: state.update(up=True)
    ray.shutdown = lambda: state.update(up=False)
    ray.put = lambda x: x
    ray.get = lambda ref: ref.value
    ray.wait = lambda pending, num_returns=1: (pending[:1], pending[1:])
    ray.cancel = lambda ref, force=False: None

    def remote(**kw):
        return lambda fn: types.SimpleNamespace(remote=lambda *a: _Ref(fn(*a)))

    ray.remote = remote
    return ray


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_a_run_that_stops_early_counts_its_steps_once(tmp_path, monkeypatch, executor):
    """Every run moves the bar by its configured steps, once, however many it took (the Ray
    executor once added a stopped run's full steps after the runner had added the rest)."""
    study = load_builtin("smoke")
    early = {r.label for r in study.runs()[::2]}  # every other run stops halfway

    def fake_run(cfg_dict, data, tensorboard=None):
        from normlab.lab.train.trainer import TrainConfig

        cfg = TrainConfig.from_dict(cfg_dict)
        label = next(r.label for r in study.runs() if r.config.replace(threads=cfg.threads) == cfg)
        return _result(cfg, cfg.steps // 2 if label in early else cfg.steps), None

    def fake_train_one(cfg, corpus, on_step, tensorboard=None):
        result, err = fake_run(cfg.to_dict(), None)
        on_step(result["summary"]["steps_done"])  # the local executor reports steps as it goes
        return result, err

    monkeypatch.setattr(runner, "Progress", _Counting)
    monkeypatch.setattr(executors, "_ray_run", fake_run)
    monkeypatch.setattr(executors, "train_one", fake_train_one)
    monkeypatch.setattr("normlab.lab.train.data.read_bytes", lambda path: (b"", "fake"))
    monkeypatch.setitem(sys.modules, "ray", _fake_ray())
    corpus = types.SimpleNamespace(sha256="0" * 64)
    chosen = executors.make_executor(executor, workers=1)
    _Counting.instances.clear()
    plan = WorkerPlan(workers=1, threads=1, limit="--workers")
    results, failed, reused, _ = train_runs(
        study, corpus, StudyOptions(tmp_path, quiet=True), plan, chosen
    )
    (bar,) = _Counting.instances
    assert not failed and reused == 0 and early
    assert bar.count == bar.total == sum(max(1, r.config.steps) for r in study.runs())


def test_study_options_reject_what_no_study_can_run(tmp_path):
    with pytest.raises(UsageError, match="executor"):
        StudyOptions(tmp_path, executor="slurm")
    with pytest.raises(UsageError, match="workers"):
        StudyOptions(tmp_path, workers=-1)


class _Recording:
    """An executor that trains nothing: it records the runs in the order they were submitted."""

    def __init__(self):
        self.runs, self.job = [], None

    def run(self, runs, job, corpus, *, on_step, on_done):
        self.runs, self.job = list(runs), job
        for r in runs:
            on_done(r, RunResult.from_dict(_result(r.config, r.config.steps), "fake"), None)


def test_runs_are_submitted_longest_first_with_their_widths_threads(tmp_path):
    """The quick preset's runs go out by estimated cost, longest first (its 24-block runs lead,
    the at-init profiles trail), each run with its width's threads: one for d=64, two for a
    d=1024 arm, within a plan of two threads a worker."""
    quick = configure(load_builtin("quick", ["arms[3].model.dim=1024"], whole=True), "cpu")
    rec = _Recording()
    corpus = types.SimpleNamespace(sha256="0" * 64)
    plan = WorkerPlan(workers=2, threads=2, limit="cores")
    _, failed, reused, used = train_runs(
        quick, corpus, StudyOptions(tmp_path, quiet=True), plan, rec
    )
    assert not failed and reused == 0 and used is plan and rec.job.threads == 2
    costs = [cpu_seconds(r.config) for r in rec.runs]
    assert costs == sorted(costs, reverse=True) and len(rec.runs) == len(quick.runs())
    assert [r.label for r in rec.runs] != [r.label for r in quick.runs()]  # spec order differs
    assert rec.runs[-1].arm.startswith("init-") and not rec.runs[-1].config.steps
    threads = {r.arm: r.config.threads for r in rec.runs}
    wide = {r.arm for r in rec.runs if r.config.model.dim == 1024}
    assert wide and all(threads[a] == (2 if a in wide else 1) for a in threads)
    # Seeds of one arm keep their order among themselves (a stable sort).
    base = [r.index for r in rec.runs if r.arm == "base"]
    assert base == sorted(base)


def test_train_runs_plans_from_the_machine_when_not_given(tmp_path, monkeypatch):
    """Without a plan, the runs to do and this (faked) machine decide it, and the executor is
    made with its workers."""
    monkeypatch.setattr(
        "normlab.lab.study.run.machine.this_machine", lambda cuda=False: Machine(16, 64 * 2**30)
    )
    made = {}
    rec = _Recording()

    def make(name, *, workers, address=None):
        made.update(name=name, workers=workers)
        return rec

    monkeypatch.setattr(executors, "make_executor", make)
    smoke = load_builtin("smoke")
    corpus = types.SimpleNamespace(sha256="0" * 64)
    _, _, _, plan = train_runs(smoke, corpus, StudyOptions(tmp_path, quiet=True))
    assert plan.workers == made["workers"] == min(16, len(smoke.runs())) and plan.threads == 1
    assert made["name"] == "local" and len(rec.runs) == len(smoke.runs())
