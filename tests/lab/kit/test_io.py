"""One process per output directory, and every output file whole (normlab.lab.kit.io): a second
command into a held --out stops with one line naming the holder and changes nothing; a writer
killed mid-write leaves the file as it was (or, for the appended logs, the documented torn last
line, which --resume sets aside)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from study_procs import start_study

from normlab.lab.cli import main
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import LOCK_FILE, TMP_SUFFIX, atomic_writer, hold, set_aside, write_file
from normlab.lab.study.run.store import ResultStore
from normlab.lab.study.spec import parse as spec

SRC = str(Path(__file__).resolve().parents[3] / "src")


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


# ---- the writer


def test_write_file_replaces_whole_and_never_follows_a_symlink(tmp_path):
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me")
    link = tmp_path / "report.md"
    link.symlink_to(target)
    write_file(link, "new ✓")  # text is written as UTF-8
    assert not link.is_symlink() and link.read_text(encoding="utf-8") == "new ✓"
    assert target.read_text() == "keep me"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(TMP_SUFFIX)] == []


def test_an_exception_mid_write_leaves_the_file_as_it_was(tmp_path):
    path = tmp_path / "study.json"
    write_file(path, "old")
    with pytest.raises(RuntimeError), atomic_writer(path) as f:
        f.write(b"half")
        raise RuntimeError
    assert _snapshot(tmp_path) == {"study.json": b"old"}


def test_temp_names_are_unique_to_the_process(tmp_path):
    names = set()
    for _ in range(2):
        with atomic_writer(tmp_path / "a") as f:
            names |= {p.name for p in tmp_path.iterdir() if p.name.endswith(TMP_SUFFIX)}
            f.write(b"x")
    assert len(names) == 2 and all(f".a.{os.getpid()}." in n for n in names)


# What each writer is asked to write, in a process that dies (os._exit) halfway through.
_CRASH = """
import os, sys, torch
from normlab.lab.kit.io import atomic_writer, write_file
from normlab.lab.train.distributed import save_atomic
path, kind = sys.argv[1], sys.argv[2]
if kind == "text":
    with atomic_writer(path) as f:
        f.write(b'{"half": ')
        f.flush()
        os._exit(9)
if kind == "checkpoint":
    real = torch.save
    def half(obj, f):
        real(obj, f)
        f.flush()
        os._exit(9)
    torch.save = half
    save_atomic({"step": 2, "w": torch.ones(1000)}, path)
"""


@pytest.mark.parametrize("kind", ["text", "checkpoint"])
def test_a_crash_mid_write_leaves_the_old_file_and_the_lock_sweeps_the_temp(tmp_path, kind):
    path = tmp_path / ("checkpoint.pt" if kind == "checkpoint" else "result.json")
    write_file(path, b"the old, whole file")
    r = _python(_CRASH, str(path), kind)
    assert r.returncode == 9, r.stderr
    assert path.read_bytes() == b"the old, whole file"
    left = [p.name for p in tmp_path.iterdir() if p.name != path.name]
    assert len(left) == 1 and left[0].endswith(TMP_SUFFIX)  # the dead writer's temp file
    with hold(tmp_path, "test"):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([LOCK_FILE, path.name])


_CRASH_APPEND = """
import os, sys
from normlab.lab.study.spec import parse as spec
from normlab.lab.study.run.store import ResultStore
store = ResultStore(sys.argv[1])
for i in range(3):
    store.append({"key": f"k{i}", "name": "a", "seed_index": i, "result": {"loss": i}})
real = os.write
def half(fd, data):
    real(fd, data[: len(data) // 2])
    os._exit(9)
os.write = half
store.append({"key": "k3", "name": "a", "seed_index": 3, "result": {"loss": 3}})
"""


def test_a_crash_mid_append_leaves_a_torn_last_line_that_resume_sets_aside(tmp_path):
    path = tmp_path / "results.jsonl"
    r = _python(_CRASH_APPEND, str(path))
    assert r.returncode == 9, r.stderr
    data = path.read_bytes()
    assert data.count(b"\n") == 3 and not data.endswith(b"\n")  # the documented torn line
    store = ResultStore(path)
    torn = store.set_aside_torn_line()
    assert torn is not None and torn.read_text().startswith('{"key":"k3"')
    assert sorted(store.load()) == ["k0", "k1", "k2"]  # every finished run, once
    store.append({"key": "k3", "name": "a", "seed_index": 3, "result": {"loss": 3}})
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert [ln["key"] for ln in lines] == ["k0", "k1", "k2", "k3"]


_CRASH_METRICS = """
import os, sys
from pathlib import Path
from normlab.lab.train.dist_trainer import DistributedTrainer
t = DistributedTrainer.__new__(DistributedTrainer)
t.out = Path(sys.argv[1])
t._append({"step": 0, "loss": 5.0})
real = os.write
def half(fd, data):
    real(fd, data[: len(data) // 2])
    os._exit(9)
os.write = half
t._append({"step": 1, "loss": 4.0})
"""


def test_a_crash_mid_metrics_line_leaves_only_a_torn_last_line(tmp_path):
    r = _python(_CRASH_METRICS, str(tmp_path))
    assert r.returncode == 9, r.stderr
    text = (tmp_path / "metrics.jsonl").read_text()
    first, torn = text.split("\n")
    assert json.loads(first) == {"step": 0, "loss": 5.0} and torn.startswith('{"step": 1')


def test_backups_are_never_overwritten(tmp_path):
    path = tmp_path / "results.jsonl"
    names = []
    for i in range(3):  # three in the same second
        path.write_text(f"{i}\n")
        names.append(set_aside(tmp_path, ["results.jsonl", "study.json"], "previous"))
    assert len(set(names)) == 3 and not path.exists()
    assert sorted((p / "results.jsonl").read_text() for p in names) == ["0\n", "1\n", "2\n"]
    assert set_aside(tmp_path, ["results.jsonl"], "previous") is None  # nothing to move


def test_an_edited_advise_spec_is_never_overwritten(tmp_path, capsys):
    from normlab.lab.advise.engine import SPEC_FILE, write_spec

    assert write_spec(tmp_path, "spec A\n") == tmp_path / SPEC_FILE
    assert write_spec(tmp_path, "spec A\n") == tmp_path / SPEC_FILE  # the same: kept as is
    (tmp_path / SPEC_FILE).write_text("spec A, edited\n")
    beside = write_spec(tmp_path, "spec A\n")
    assert beside == tmp_path / "advise-spec.1.toml" and beside.read_text() == "spec A\n"
    assert (tmp_path / SPEC_FILE).read_text() == "spec A, edited\n"
    assert "is not this twin's spec (edited?): kept" in capsys.readouterr().err


# ---- the lock


def test_the_lock_names_its_holder_and_dies_with_it(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom normlab.lab.kit.io import hold\n"
         "with hold(sys.argv[1], 'study'):\n    print('held', flush=True)\n    time.sleep(60)",
         str(tmp_path)],
        env={**os.environ, "PYTHONPATH": SRC}, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(UsageError, match=rf"in use by normlab study \(PID {holder.pid}\)"):
            with hold(tmp_path, "train"):
                pass
    finally:
        holder.kill()  # SIGKILL: no cleanup of its own; the kernel releases the lock
        holder.wait()
    with hold(tmp_path, "train"):
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()} train\n"


def _wait_for_holder(out: Path, proc, command: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    lock = out / LOCK_FILE
    while time.time() < deadline and proc.poll() is None:
        if lock.exists() and lock.read_text().endswith(f" {command}\n"):
            return
        time.sleep(0.05)
    raise AssertionError(f"{command} never held {out}")


def _second(argv: list[str], capsys, holder_pid: int) -> None:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert f"is in use by normlab {argv[0]} (PID {holder_pid})" in err, err


@pytest.mark.slow
def test_a_second_study_into_a_held_out_changes_nothing(tmp_path, capsys):
    proc = start_study(tmp_path, "--workers", "1")
    try:
        _wait_for_holder(tmp_path, proc, "study")
        deadline = time.time() + 120
        while not (tmp_path / "results.jsonl").exists() and time.time() < deadline:
            time.sleep(0.05)
        names = {p.name for p in tmp_path.iterdir()}
        _second(["study", "--preset", "smoke", "--out", str(tmp_path), "--quiet"], capsys,
                proc.pid)  # fmt: skip
        _second(["study", "--preset", "smoke", "--out", str(tmp_path), "--resume", "--quiet"],
                capsys, proc.pid)  # fmt: skip
        assert not any(n.startswith("results.2") for n in {p.name for p in tmp_path.iterdir()})
        assert names <= {p.name for p in tmp_path.iterdir()}
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()[-2000:]
    finally:
        proc.kill()
    lines = [json.loads(ln) for ln in (tmp_path / "results.jsonl").read_text().splitlines()]
    keys = [ln["key"] for ln in lines]
    n = len(spec.load_builtin("smoke").runs(0))
    assert len(keys) == len(set(keys)) == n  # the first study's results: complete, each once
    assert main(["study", "--preset", "smoke", "--out", str(tmp_path), "--resume", "--quiet",
                 "--threads", "1"]) == 0  # fmt: skip
    assert json.loads((tmp_path / "study.json").read_text())["reused_runs"] == n
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == n


def _start(argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "normlab", *argv],
                            env={**os.environ, "PYTHONPATH": SRC}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip


@pytest.mark.slow
def test_a_second_advise_into_a_held_out_changes_nothing(tmp_path, capsys):
    argv = ["advise", "--hf-config", "llama-3.2-1b.json", "--preset", "smoke", "--out",
            str(tmp_path), "--workers", "1", "--threads", "1", "--quiet"]  # fmt: skip
    proc = _start(argv)
    try:
        _wait_for_holder(tmp_path, proc, "advise")
        while not (tmp_path / "twin.json").exists() and proc.poll() is None:
            time.sleep(0.05)
        spec = (tmp_path / "advise-spec.toml").read_bytes()
        _second(argv, capsys, proc.pid)
        assert (tmp_path / "advise-spec.toml").read_bytes() == spec
        assert not (tmp_path / "advise-spec.1.toml").exists()
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()[-2000:]
    finally:
        proc.kill()
    n = len((tmp_path / "results.jsonl").read_text().splitlines())
    assert main([*argv, "--resume"]) == 0
    assert json.loads((tmp_path / "study.json").read_text())["reused_runs"] == n


@pytest.mark.slow
def test_a_second_train_into_a_held_out_changes_nothing(tmp_path, capsys):
    argv = ["train", "--steps", "100000", "--threads", "1", "--dim", "16", "--n-layers", "1",
            "--out", str(tmp_path), "--log-every", "0"]  # fmt: skip
    proc = _start(argv)
    try:
        _wait_for_holder(tmp_path, proc, "train")
        while not (tmp_path / "metrics.jsonl").exists() and proc.poll() is None:
            time.sleep(0.05)
        config = (tmp_path / "config.json").read_bytes()
        _second([*argv[:2], "3", *argv[3:]], capsys, proc.pid)
        _second([*argv, "--resume"], capsys, proc.pid)
        assert (tmp_path / "config.json").read_bytes() == config
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the kernel releases the lock
        proc.wait()
    with hold(tmp_path, "test"):
        pass
