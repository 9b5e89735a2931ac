"""Deciding a finished study again without training: the same claims.json from the same runs
and timing rounds, nothing retrained or re-timed."""

import json
import shutil

import pytest
from conftest import QUICK_S0

from normlab.lab.cli import main


@pytest.mark.slow  # the smoke study it decides again is trained in a process
def test_redecide_reproduces_the_claims_json_a_smoke_study_wrote(smoke_study, tmp_path):
    out = tmp_path / "again"
    shutil.copytree(smoke_study, out)
    (out / "claims.json").unlink()
    study_json = (out / "study.json").read_bytes()
    assert main(["study", "--redecide", str(out), "--quiet"]) == 0
    assert (out / "claims.json").read_bytes() == (smoke_study / "claims.json").read_bytes()
    assert (out / "study.json").read_bytes() == study_json  # read, never rewritten
    assert "Decided again from its results" in (out / "report.md").read_text()


def _numbers(claim: dict) -> list:
    keys = ("verdict", "effect", "lo", "hi", "n", "mde", "values")
    return [[c.get(k) for k in keys] for c in [claim, *claim["parts"]]] + [
        [c["verdict"] for c in claim["controls"]]
    ]


def test_redecide_reproduces_the_fixture_verdicts_to_the_last_digit(quick_report):
    got = json.loads((quick_report / "claims.json").read_text())
    want = json.loads((QUICK_S0 / "claims.json").read_text())
    assert [c["name"] for c in got["claims"]] == [c["name"] for c in want["claims"]]
    for g, w in zip(got["claims"], want["claims"], strict=True):
        assert _numbers(g) == _numbers(w), g["name"]  # exact: floats compared by ==
    assert got["family"] == want["family"]
    # The timing claim came from the recorded rounds: re-timing would not give these.
    timed = next(c for c in got["claims"] if c["name"] == "rmsnorm-faster")
    assert timed["n"] == 21 and timed["verdict"] == "inconclusive"


def test_redecide_refuses_what_it_cannot_decide(tmp_path, capsys):
    def fails(*extra: str) -> str:
        assert main(["study", "--redecide", str(tmp_path), "--quiet", *extra]) == 2
        return capsys.readouterr().err

    assert "cannot read" in fails()
    (tmp_path / "study.json").write_text(json.dumps({"preset": "mine", "overrides": []}))
    assert "--spec FILE" in fails()
    shutil.copy(QUICK_S0 / "study.json", tmp_path / "study.json")
    (tmp_path / "results.jsonl").write_text("")
    assert "none of the study's" in fails()
    assert "reads the preset" in fails("--set", "base.steps=3")
