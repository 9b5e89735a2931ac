"""Starting a study in a subprocess and finding every process it started (by an environment
marker that they all inherit), for the process-hygiene tests."""

import os
import signal
import subprocess
import sys
import time

import pytest


def _interruptible() -> None:
    # A job started in the background (as CI may start the tests) inherits SIGINT ignored, and
    # Python then installs no KeyboardInterrupt handler: give the study the terminal's default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


_SESSIONS: dict[str, int] = {}  # mark -> the session the study was started in


def start_study(out, *extra, mark: str = ""):
    cmd = [sys.executable, "-m", "normlab", "study", "--preset", "smoke", "--out", str(out),
           "--threads", "1", "--quiet", *extra]  # fmt: skip
    env = {**os.environ, "NORMLAB_TEST_MARK": mark}  # inherited by every process it starts
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env,
                            preexec_fn=_interruptible)  # fmt: skip
    if mark:
        _SESSIONS[mark] = proc.pid  # a new session's id is its leader's pid
    return proc


def marked(mark: str) -> list[int]:
    """PIDs of live processes of the study started with ``mark``: those that inherited the
    marker in their environment, and those in the study's session (helpers that a library
    starts with a clean environment, such as Ray's agents, stay in it)."""
    sid = _SESSIONS.get(mark)
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as st:
                fields = st.read().split(")")[-1].split()
            if fields[0] == "Z":  # a zombie has ended; only its parent's wait is missing
                continue
            with open(f"/proc/{d}/environ", "rb") as f:
                has_mark = f"NORMLAB_TEST_MARK={mark}".encode() in f.read().split(b"\0")
        except OSError:
            continue
        if has_mark or (sid is not None and int(fields[3]) == sid):
            pids.append(int(d))
    return pids


def wait_for_lines(path, n: int, proc, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if path.exists() and path.read_text().count("\n") >= n:
            return
        time.sleep(0.05)
    raise AssertionError("the study ended (or stalled) before it could be stopped")


def assert_none_left(mark: str, within_s: float) -> None:
    """Every process carrying ``mark`` ends within ``within_s`` seconds."""
    deadline = time.time() + within_s
    while marked(mark) and time.time() < deadline:
        time.sleep(0.2)
    assert marked(mark) == []


def sigkill_mid_study(tmp_path, mark: str, *extra, lines: int = 2, **kw) -> None:
    """Start a study, SIGKILL its driver once ``lines`` runs are recorded, while its workers
    (at least two other processes) are alive."""
    proc = start_study(tmp_path, *extra, mark=mark)
    wait_for_lines(tmp_path / "results.jsonl", lines, proc, **kw)
    assert len(marked(mark)) >= 3
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
