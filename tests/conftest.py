import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

# Triton picks its interpreter when a kernel is decorated, so this must precede every import of
# normlab's Triton backend: without a GPU the Triton kernels are tested on the CPU.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session", autouse=True)
def _kernel_tuning_cache(tmp_path_factory):
    """The Numba kernels' launch-choice tuner (normlab.kernels.numba.tuner) caches its picks
    under the user's cache directory: in the tests, under a temporary one (subprocesses inherit
    it), with a small timing budget per key."""
    os.environ.setdefault("NORMLAB_TUNE_DIR", str(tmp_path_factory.mktemp("tune")))
    os.environ.setdefault("NORMLAB_TUNE_BUDGET_S", "0.05")


@pytest.fixture(scope="module")
def one_thread():
    """torch on one intra-op thread for a module of tiny-tensor tests."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


QUICK_S0 = Path(__file__).parent / "data" / "quick-s0"


@pytest.fixture(scope="session")
def smoke_study(tmp_path_factory):
    """A smoke study trained once for the session (in its own process): its output directory."""
    out = tmp_path_factory.mktemp("smoke")
    cmd = [sys.executable, "-m", "normlab", "study", "--preset", "smoke", "--out", str(out),
           "--threads", "1", "--quiet"]  # fmt: skip
    subprocess.run(cmd, check=True, timeout=600)
    return out


def finished_quick_study(out: Path) -> Path:
    """The quick study of ``tests/data/quick-s0`` (seed block 0, its runs and timing rounds) laid
    out as the study wrote it: ``out/study.json`` and ``out/results.jsonl``."""
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(QUICK_S0 / "study.json", out / "study.json")
    with gzip.open(QUICK_S0 / "results.jsonl.gz", "rb") as f:
        (out / "results.jsonl").write_bytes(f.read())
    return out


@pytest.fixture(scope="session")
def quick_report(tmp_path_factory):
    """The quick study's reports, decided again from ``tests/data/quick-s0`` (no training)."""
    from normlab.lab.cli import main

    out = finished_quick_study(tmp_path_factory.mktemp("quick") / "quick-s0")
    spec = str(QUICK_S0 / "spec.toml")  # the preset as that study ran it, not today's
    assert main(["study", "--redecide", str(out), "--spec", spec, "--quiet"]) == 0
    return out
