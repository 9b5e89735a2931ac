"""The study's runner without training: progress accounting and options (fake executors)."""

import sys
import types

import pytest

from normlab.lab.common import UsageError
from normlab.lab.study import executors, runner
from normlab.lab.study.presets import PRESETS
from normlab.lab.study.runner import StudyOptions, train_runs


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


def _result(cfg, steps_done):
    return {"status": "ok", "summary": {"steps_done": steps_done}, "history": {}}


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
    study = PRESETS["smoke"]()
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
    results, failed, reused = train_runs(
        study, corpus, StudyOptions(tmp_path, quiet=True), 1, chosen
    )
    (bar,) = _Counting.instances
    assert not failed and reused == 0 and early
    assert bar.count == bar.total == sum(max(1, r.config.steps) for r in study.runs())


def test_study_options_reject_what_no_study_can_run(tmp_path):
    with pytest.raises(UsageError, match="executor"):
        StudyOptions(tmp_path, executor="slurm")
    with pytest.raises(UsageError, match="workers"):
        StudyOptions(tmp_path, workers=0)
