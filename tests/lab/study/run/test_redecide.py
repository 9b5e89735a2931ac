"""Deciding a finished study again without training: the same claims.json from the same runs
and timing rounds, nothing retrained or re-timed."""

import json
import shutil

import pytest
from claims_golden import RULE_CHANGES
from conftest import QUICK_S0, finished_quick_study

import normlab
from normlab.lab.cli import main
from normlab.lab.study.run.provenance import record, run_with, study_of
from normlab.lab.study.run.redecide import redecide_study
from normlab.lab.study.run.study_json import StudyMeta
from normlab.lab.study.spec.parse import builtin_text, load_builtin, load_spec


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
    assert json.loads(study_json)["spec"] == builtin_text("smoke")  # the design it decided with


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
        if g["name"] in RULE_CHANGES:  # the verdict rule changed since: the numbers did not
            assert (w["verdict"], g["verdict"]) == RULE_CHANGES[g["name"]]
            g, w = {**g, "verdict": None, "why": None}, {**w, "verdict": None, "why": None}
        assert _numbers(g) == _numbers(w), g["name"]  # exact: floats compared by ==
    # the family's counts follow the verdicts; its level and wording did not change
    keep = lambda f: {
        k: v
        for k, v in f.items()
        if k not in ("counts", "text", "expected_false_decisions_at_most")
    }  # noqa: E731
    assert keep(got["family"]) == keep(want["family"])
    assert sum(got["family"]["counts"].values()) == sum(want["family"]["counts"].values())
    # The timing claim came from the recorded rounds: re-timing would not give these.
    timed = next(c for c in got["claims"] if c["name"] == "rmsnorm-faster")
    assert timed["n"] == 21 and timed["verdict"] == "inconclusive"


def _stored(out, spec_text: str):
    """``out``'s study.json storing ``spec_text`` as the design it ran."""
    meta = json.loads((out / "study.json").read_text())
    (out / "study.json").write_text(json.dumps({**meta, "spec": spec_text}))
    return out


def test_redecide_decides_with_the_stored_design_not_todays_preset(quick_report, tmp_path):
    spec_text = (QUICK_S0 / "spec.toml").read_text()
    assert spec_text != builtin_text("quick"), "the fixture's design must differ from today's"
    out = _stored(finished_quick_study(tmp_path / "q"), spec_text)
    result = redecide_study(out)
    assert result.failed == []  # today's preset has runs this study never had
    assert [c.name for c in result.study.claims] == [
        c.name for c in load_spec(QUICK_S0 / "spec.toml").claims
    ]
    assert main(["study", "--redecide", str(out), "--quiet"]) == 0
    # What today's code decides from the same design given as --spec FILE (not the fixture's
    # golden claims.json: that follows the verdict rules, and they change on their own).
    assert (out / "claims.json").read_bytes() == (quick_report / "claims.json").read_bytes()
    assert "with the spec study.json stores" in (out / "report.md").read_text()


def test_a_stored_design_rebuilds_the_same_study():
    study = load_builtin("smoke", ["base.steps=20", "arms[0].lr=2e-3"])
    doc = json.loads(json.dumps({"preset": study.name, **record(study, "cpu", None)}))
    meta = StudyMeta.from_dict(doc, "study.json", complete=False)  # the design alone
    assert study_of(meta, "study.json") == study
    assert run_with(meta) == ("cpu", None)
    code = meta.code
    assert code["version"] == normlab.__version__
    if "commit" in code:  # a git checkout
        assert len(code["commit"]) == 40 and isinstance(code["modified"], bool)


def _snapshot(d):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(d.iterdir())}


def test_redecide_without_a_design_refuses_in_one_line_and_writes_nothing(tmp_path, capsys):
    out = finished_quick_study(tmp_path / "q")  # a study.json from before studies stored theirs
    (out / "claims.json").write_text("{}")
    before = _snapshot(out)
    assert main(["study", "--redecide", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "stores no spec" in err and "--spec FILE" in err
    assert _snapshot(out) == before


def test_redecide_refuses_what_it_cannot_decide(tmp_path, capsys):
    def fails(*extra: str) -> str:
        assert main(["study", "--redecide", str(tmp_path), "--quiet", *extra]) == 2
        return capsys.readouterr().err

    assert "cannot read" in fails()
    (tmp_path / "study.json").write_text("[]")
    assert "not a study's study.json" in fails()
    (tmp_path / "study.json").write_text(json.dumps({"preset": "mine", "overrides": []}))
    assert "--spec FILE" in fails()
    shutil.copy(QUICK_S0 / "study.json", tmp_path / "study.json")
    (tmp_path / "results.jsonl").write_text("")
    assert "none of the study's" in fails("--spec", str(QUICK_S0 / "spec.toml"))
    assert "reads the spec" in fails("--set", "base.steps=3")
