"""Hostile input, round 3 (docs/refusals.md): what the lab reads. Every file through the bounded
reader (a FIFO, a directory, a device, a file too big: refused, never waited on or read whole),
every value of a study.json checked to its leaves before use, and nothing non-finite written:
each is one line on stderr and exit status 2, nothing hangs and nothing is changed."""

import gzip
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import QUICK_S0, finished_quick_study
from refusal import refused
from test_hostile import SPEC, TRAINS

import normlab
import normlab.lab.train.dist_trainer as dist_trainer
from normlab.lab.study.run.store import ResultStore

QUICK_SPEC = str(QUICK_S0 / "spec.toml")
SRC = str(Path(normlab.__file__).resolve().parents[1])


@pytest.fixture
def no_training(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the run started")

    monkeypatch.setattr(dist_trainer, "train_process", refuse)


def _cli(argv: list[str], timeout: float = 90) -> tuple[int, str]:
    """``normlab ARGV`` in its own process: (status, stderr); a hang fails the test."""
    env = {**os.environ, "PYTHONPATH": SRC}
    try:
        p = subprocess.run([sys.executable, "-m", "normlab", *argv], capture_output=True,
                           text=True, timeout=timeout, env=env)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"normlab {' '.join(argv)} still runs after {timeout} s (a hang)")
    return p.returncode, p.stderr


def _docs(tmp_path: Path, claims: str | None = None) -> Path:
    """A DOCS directory for ``study --coverage`` with one published study's claims.json."""
    docs = tmp_path / "docs"
    (docs / "data" / "quick").mkdir(parents=True)
    if claims is not None:
        (docs / "data" / "quick" / "claims.json").write_text(claims)
    return docs


# ---- every file through the bounded reader


@pytest.mark.parametrize(
    ("value", "says"),
    [("NaN", "NaN is not a finite number"), ('"holds\\u001b[2J"', "the control character")],
)
def test_coverage_reads_claims_json_bounded_and_checked(tmp_path, capsys, value, says):
    doc = (
        (QUICK_S0 / "claims.json").read_text().replace('"verdict": "holds"', f'"verdict": {value}')
    )
    docs = _docs(tmp_path, doc)
    err = refused(["study", "--coverage", str(docs)], capsys)
    assert f"{docs / 'data' / 'quick' / 'claims.json'}: " in err and says in err
    assert not (docs / "claims.md").exists() and not (docs / "results.md").exists()


def test_coverage_refuses_a_fifo_rather_than_waiting_on_it(tmp_path):
    docs = _docs(tmp_path)
    os.mkfifo(docs / "data" / "quick" / "claims.json")
    rc, err = _cli(["study", "--coverage", str(docs)])
    assert rc == 2 and err.strip().endswith("claims.json: not a regular file"), err
    assert not (docs / "claims.md").exists()


def test_resume_refuses_a_results_jsonl_that_is_a_fifo(tmp_path):
    os.mkfifo(tmp_path / "results.jsonl")
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC.format(model="", claim=TRAINS))
    rc, err = _cli(["study", "--spec", str(spec), "--out", str(tmp_path), "--resume", "--quiet"])
    assert rc == 2 and err.strip().endswith("results.jsonl: not a regular file"), err


def test_resume_refuses_a_results_jsonl_that_is_a_directory(tmp_path, capsys):
    from normlab.lab.kit.errors import UsageError

    out = finished_quick_study(tmp_path / "q")
    (out / "results.jsonl").unlink()
    (out / "results.jsonl").mkdir()
    with pytest.raises(UsageError, match="results.jsonl: not a regular file"):
        ResultStore(out / "results.jsonl").set_aside_torn_line()
    argv = ["study", "--redecide", str(out), "--spec", QUICK_SPEC]
    assert "results.jsonl: not a regular file" in refused(argv, capsys)


def test_resume_moves_aside_a_torn_record_only(tmp_path):
    from normlab.lab.kit.errors import UsageError

    path = tmp_path / "results.jsonl"
    with gzip.open(QUICK_S0 / "results.jsonl.gz", "rt") as f:  # runs' records, as written
        first, second = f.readline(), f.readline().rstrip("\n")
    path.write_text(first + second)  # the last record whole, its newline not written
    assert ResultStore(path).set_aside_torn_line() is None
    assert path.read_text() == first + second + "\n"  # kept, not retrained
    assert len(ResultStore(path).load(results=True)) == 2
    path.write_text(first + "x" * 1000)  # not JSON and not a record cut short: not guessed at
    with pytest.raises(UsageError, match="results.jsonl line 2: not valid JSON"):
        ResultStore(path).set_aside_torn_line()
    assert path.read_text() == first + "x" * 1000 and not (tmp_path / "results.jsonl.torn").exists()
    path.write_text(first + second[:40])  # a record cut mid-string: the torn line, set aside
    assert ResultStore(path).set_aside_torn_line() == tmp_path / "results.jsonl.torn"
    assert path.read_text() == first


def test_data_is_read_bounded(tmp_path, capsys, monkeypatch, no_training):
    import normlab.lab.kit.reading as reading

    monkeypatch.setattr(reading, "MAX_FILE", 10_000)
    data = tmp_path / "data.txt"
    data.write_text("def f(x):\n    return x + 1\n" * 1000)  # 27 KB, over the bound
    os.mkfifo(tmp_path / "fifo")
    argv = ["train", "--steps", "1", "--dim", "8", "--n-layers", "1", "--n-heads", "2"]
    err = refused([*argv, "--data", str(data), "--out", str(tmp_path / "o")], capsys)
    assert f"--data {data}: 27,000 bytes; the lab reads at most 10,000" in err
    err = refused([*argv, "--data", str(tmp_path / "fifo"), "--out", str(tmp_path / "o")], capsys)
    assert err.endswith("fifo: not a regular file")


# ---- every value of a study.json checked to its leaves


def _env(m):
    return {**m, "environment": {**m["environment"], "device": "gpu"}}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda m: {k: v for k, v in m.items() if k != "environment"}, "environment: missing"),
        (lambda m: {**m, "environment": {}}, "environment.cpu: missing"),
        (_env, 'environment.device: expected one of "cpu", "cuda", got "gpu"'),
        (lambda m: {**m, "run_with": {"device": "tpu"}}, "run_with.device: expected one of"),
        (lambda m: {**m, "run_with": {"precision": "fp64"}}, "run_with.precision: expected one"),
        (lambda m: {**m, "overrides": [1]}, "overrides[0]: expected a string, got 1"),
        (lambda m: {**m, "wall_s": "x"}, 'wall_s: expected a number >= 0, got "x"'),
        (lambda m: {**m, "finished": 5}, "finished: expected a string, got 5"),
        (lambda m: {**m, "timings": {"base": {"step_ms": "x"}}}, "timings.base.step_ms: expected"),
    ],
)
def test_a_study_json_is_checked_to_its_leaves(tmp_path, capsys, change, says):
    out = finished_quick_study(tmp_path / "q")
    meta = json.loads((out / "study.json").read_text())
    (out / "study.json").write_text(json.dumps(change(meta)))
    before = sorted(p.name for p in out.iterdir())
    err = refused(["study", "--redecide", str(out), "--spec", QUICK_SPEC, "--quiet"], capsys)
    assert f"--redecide {out / 'study.json'}: {says}" in err
    assert sorted(p.name for p in out.iterdir()) == before


# ---- nothing non-finite is written


def test_a_constant_beyond_any_measure_is_refused(tmp_path, capsys):
    claim = 'rule = "contrast"\nterms = [[1, "b", "final_val_loss"]]\nexpect = ">0"\n'
    claim += "delta = 0.1\nseeds = 2\nconst = 1e308"
    spec = tmp_path / "s.toml"
    spec.write_text(SPEC.format(model="", claim=claim))
    err = refused(["study", "--spec", str(spec), "--list"], capsys)
    assert "claims[0]: const must be a finite number >= -1e+12 and <= 1e+12, got 1e+308" in err


def test_an_estimate_beyond_float_range_is_no_estimate():
    from normlab.lab.verdict import Word, decide, statistic

    for trim in (0, 0.2, 0.5):
        est = statistic(trim).estimate([1e308] * 7)
        assert est.effect is None and all(math.isfinite(v) for v in est.values)
        word, why = decide(">0", est, 0.1)
        assert word == Word.INCONCLUSIVE and "leaves float range" in why
        json.dumps(est.to_dict(), allow_nan=False)  # what claims.json gets: JSON


def test_the_json_writer_writes_nothing_non_finite(tmp_path):
    from normlab.lab.kit.io import write_json

    with pytest.raises(ValueError, match="nothing written"):
        write_json(tmp_path / "claims.json", {"effect": math.inf})
    assert not list(tmp_path.iterdir())


def test_a_result_beyond_what_a_run_computes_is_refused(tmp_path, capsys):
    out = finished_quick_study(tmp_path / "q")
    lines = (out / "results.jsonl").read_text().splitlines()
    i = next(i for i, ln in enumerate(lines) if json.loads(ln)["result"]["history"]["loss"])
    rec = json.loads(lines[i])
    rec["result"]["history"]["loss"][0] = 1.7e308  # finite, and beyond float32: no run's
    lines[i] = json.dumps(rec)
    (out / "results.jsonl").write_text("\n".join(lines) + "\n")
    err = refused(["study", "--redecide", str(out), "--spec", QUICK_SPEC, "--quiet"], capsys)
    assert f"results.jsonl line {i + 1}: not a run's record (a value of 1.7e+308 in its" in err
    assert not (out / "report.md").exists()


@pytest.mark.parametrize(
    ("flag", "says"),
    [("--eps", "eps must be a number in [0, 1]"), ("--init-std", "init_std must be a positive")],
)
def test_model_values_beyond_range_are_refused(tmp_path, capsys, no_training, flag, says):
    err = refused(["train", flag, "1e308", "--out", str(tmp_path / "o")], capsys)
    assert says in err and "1e+308" in err
    assert not (tmp_path / "o").exists()
