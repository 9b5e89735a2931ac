"""benchmarks/gpu_bench.py end to end on tiny shapes (on the CPU through the Triton interpreter,
where its timings mean nothing but every code path runs), and its table-from-sweep rule."""

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
import torch

import normlab

triton = pytest.importorskip("triton")
tuning = pytest.importorskip("normlab.kernels.triton.tuning")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if not normlab.functional.get_backend("triton").supports(torch.device(DEVICE)):
    pytest.skip("needs a GPU or TRITON_INTERPRET=1", allow_module_level=True)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning:triton.runtime.interpreter")

_path = Path(__file__).parents[3] / "benchmarks" / "gpu_bench.py"
_spec = importlib.util.spec_from_file_location("gpu_bench", _path)
gpu_bench = sys.modules["gpu_bench"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_bench)


def test_a_whole_run_writes_every_output(tmp_path, monkeypatch):
    # The run points NORMLAB_TRITON_TUNING at its sweep's table. delenv alone records nothing
    # where the variable is unset, so the pointer outlived this test and a later subprocess
    # (test_the_backward_grid_fits_the_registers) read a sweep's random winners: setenv first.
    monkeypatch.setenv("NORMLAB_TRITON_TUNING", "")
    monkeypatch.delenv("NORMLAB_TRITON_TUNING")
    args = ["--device", DEVICE, "--out", str(tmp_path), "--sizes", "48", "--elems", "96"]
    args += ["--dtypes", "bf16", "--impls", "torch,normlab,liger", "--rep-ms", "1"]
    args += ["--sweep", "--sweep-rep-ms", "1", "--jobs", "1"]
    args += ["--memory", "--memory-elems", "96"]
    try:
        assert gpu_bench.main(args) == 0
    finally:
        tuning.load(None)  # the run put its sweep's table in place
    table = (tmp_path / "table.md").read_text()
    for op in gpu_bench.IO_ELEMS:
        assert f"### {op} bf16" in table
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + 3 * len(gpu_bench.IO_ELEMS)
    assert all(",ok" in r for r in rows[1:] if ",torch," in r or ",normlab," in r)
    sweep = (tmp_path / "sweep.csv").read_text().splitlines()[1:]
    n_cands = len(tuning.candidates(48, True)) + len(tuning.candidates(48, False))
    assert len(sweep) == 2 * n_cands and all(r.endswith(",ok") for r in sweep)
    tables = json.loads((tmp_path / "tuning.json").read_text())
    assert tables["forward"][-1]["looped"] and tables["backward"][-1]["looped"]
    assert Path(os.environ["NORMLAB_TRITON_TUNING"]) == (tmp_path / "tuning.json").resolve()
    memory = (tmp_path / "memory.md").read_text()
    assert "| rms | 48 | 2 | normlab_me |" in memory and "| ln | 48 | 2 | torch |" in memory
    try:
        import liger_kernel  # noqa: F401
    except ImportError:
        assert "liger | n/a" in memory and any(",liger," in r for r in rows)
        assert all("n/a: ModuleNotFoundError" in r for r in rows if ",liger," in r)


def test_table_from_winners_moves_the_fused_limit():
    rows = tuning.BACKWARD
    same = gpu_bench.table_from_winners(rows, {})
    assert same == list(rows)
    limit = tuning.fused_limit(True)
    looped = rows[-1]
    # the row at the fused limit is better looped: the looped row takes over from there
    shorter = gpu_bench.table_from_winners(rows, {limit: looped})
    assert [t.n_max for t in shorter] == [t.n_max for t in rows[:-2]] + [looped.n_max]
    # the looped row is better held in registers at twice the limit: a new fused row
    fused = tuning.Tune(looped.n_max, 2 * limit, 32)
    longer = gpu_bench.table_from_winners(rows, {looped.n_max: fused})
    assert [t.n_max for t in longer][-3:] == [limit, 2 * limit, looped.n_max]
    assert not longer[-2].looped and longer[-1] == looped
