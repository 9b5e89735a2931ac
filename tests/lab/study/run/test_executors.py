"""The executors: a study's runs trained through Ray give the same results as through the local
pool, and the driver alone writes results.jsonl."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from study_procs import assert_none_left, needs_proc, sigkill_mid_study

from normlab.lab.study.run.executors import LocalExecutor, RayExecutor
from normlab.lab.study.run.plan import WorkerPlan
from normlab.lab.study.run.runner import StudyOptions, train_runs
from normlab.lab.study.spec.parse import load_builtin
from normlab.lab.train.data import load_corpus

ray = pytest.importorskip("ray")


def _lines(path):
    out = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        res = rec["result"]
        out[rec["key"]] = (rec["name"], rec["seed"], res["status"], res["history"].get("loss"),
                           res["summary"].get("final_val_loss"))  # fmt: skip
    return out


@pytest.mark.slow
def test_ray_runs_the_same_study_as_the_local_pool(tmp_path):
    """The whole smoke preset through a local Ray instance and through the local pool."""
    smoke = load_builtin("smoke")
    corpus = load_corpus(None)
    for name, executor in [("local", LocalExecutor(1)), ("ray", RayExecutor(None, workers=2))]:
        (tmp_path / name).mkdir()
        options = StudyOptions(tmp_path / name, seed=3, threads=1, quiet=True)
        plan = WorkerPlan(workers=1, threads=1, limit="--workers", fixed=True)
        _, failed, *_ = train_runs(smoke, corpus, options, plan, executor)
        assert not failed
    assert not ray.is_initialized()  # the local instance went with the study
    a, b = _lines(tmp_path / "local" / "results.jsonl"), _lines(tmp_path / "ray" / "results.jsonl")
    assert a == b and len(a) == len(smoke.runs(3))
    assert {seed for _, seed, *_ in a.values()} == {30000 + i for i in range(3)}


def _alive(pid: int) -> bool:
    """Running (a zombie waiting to be reaped has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@needs_proc
def test_sigkill_of_the_driver_ends_the_local_ray_instance(tmp_path):
    mark = f"ray-{os.getpid()}-{time.time()}"
    # The driver, Ray's own processes (GCS, raylet) and its workers.
    sigkill_mid_study(tmp_path, mark, "--executor", "ray", "--workers", "2", lines=3, timeout=180)
    assert_none_left(mark, within_s=180)


@needs_proc
def test_die_with_a_dead_parent_exits(tmp_path):
    """A child armed with executors.die_with(parent) ends when its parent is SIGKILLed."""
    code = (
        "import os, sys, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    from normlab.lab.study.run.executors import die_with\n"
        "    die_with(os.getppid())\n"
        f"    open({str(tmp_path / 'armed')!r}, 'w').close()\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "print(pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    child = int(proc.stdout.readline())
    deadline = time.time() + 30
    while not (tmp_path / "armed").exists() and time.time() < deadline:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.time() + 10
    while _alive(child) and time.time() < deadline:
        time.sleep(0.1)
    if _alive(child):
        os.kill(child, signal.SIGKILL)
        pytest.fail("the child outlived its parent")


def test_without_ray_the_executor_says_how_to_install_it(tmp_path):
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "from normlab.lab.cli import main\n"
        f"sys.exit(main(['study', '--preset', 'smoke', '--executor', 'ray', '--out', "
        f"{str(tmp_path)!r}]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and 'pip install "normlab[ray]"' in lines[0], out.stderr
    assert not (tmp_path / "results.jsonl").exists()
