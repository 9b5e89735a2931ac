"""A sequential study's cost for ``--list`` (``run.budget``): the worst case, and the expected
cost under an assumed effect and spread per claim."""

import json

import pytest

from normlab.lab.study.run import budget
from normlab.lab.study.run.study_json import StudyMeta
from normlab.lab.study.spec import parse_spec
from normlab.lab.train.result import RunResult

SPEC = """
name = "seq"
[sequential]
batch = 4
[base]
steps = 0
[base.model]
dim = 8
n_layers = 1
n_heads = 1
[[arms]]
name = "{norm}"
axes = { norm = ["rmsnorm", "layernorm", "none"] }
[[claims]]
name = "c"
statement = "s"
source = "t"
rule = "contrast"
terms = [[1, "rmsnorm", "attn_branch_ratio"], [-1, "layernorm", "attn_branch_ratio"]]
expect = ">0"
delta = 0.1
seeds = 16
"""


# The budget the quick preset's default run is held to (its expected training CPU s under the
# published effects): what a user can run while reading the docs.
QUICK_EXPECTED_CPU_S = 1300


def one(cfg) -> float:
    return 1.0  # a run's cost: the budget counts runs


def assumed(values) -> budget.Assumption:
    return budget.Assumption({"c": {"name": "c", "values": list(values)}}, "a pilot")


@pytest.fixture(scope="module")
def study():
    return parse_spec(SPEC, "seq.toml")


def test_the_worst_case_is_every_claim_at_its_cap(study):
    b = budget.budget(study, one)
    assert (b.worst, b.runs_worst) == (16 + 16 + 1, 33)  # "none", read by no claim: one seed
    assert b.expected == b.worst  # no assumption: the claim runs to its cap
    text = budget.words(b)
    assert "nothing to assume it from" in text and "worst case 33 CPU s (33 runs" in text


def test_a_large_effect_stops_at_the_first_look_and_a_null_at_delta_runs_on(study):
    # O'Brien-Fleming's first look (4 seeds) is at about 99.998 %: a tight effect stops there,
    # a looser one at the second
    big = budget.budget(study, one, assumed([1.0, 1.001, 0.999, 1.0005, 0.9995]))
    assert big.expected == 4 + 4 + 1 and big.assumed == 1 and big.unassumed == 0
    assert "expected 9 CPU s" in budget.words(big) and "a pilot" in budget.words(big)
    loose = budget.budget(study, one, assumed([1.0, 1.1, 0.9, 1.05, 0.95]))
    assert loose.expected == 8 + 8 + 1
    # the true effect at δ with a wide spread: most simulated studies go to the last look
    null = budget.budget(study, one, assumed([0.1 + x for x in (-0.6, 0.6, -0.3, 0.3, 0.0)]))
    assert 9 < null.expected <= 33 and null.expected > 0.7 * 33


def test_a_claims_json_is_an_assumption(study, tmp_path):
    from normlab.lab.study.decide.looks import decide_looks
    from normlab.lab.study.report.claims_json import claims_json, read_claims

    def run(x: float) -> RunResult:  # an untrained arm's probe at init: attn_branch_ratio = x
        return RunResult({}, probes={"0": {"branch_ratio": {"attn": [x]}}})

    results = {
        "rmsnorm": {i: run(1.0 + 0.01 * i) for i in range(4)},
        "layernorm": {i: run(0.0) for i in range(4)},
    }
    verdicts = [(o.claim, o.verdict) for o in decide_looks(study, results, None)]
    meta = StudyMeta(seed_block=3)
    (tmp_path / "claims.json").write_text(json.dumps(claims_json(study, verdicts, meta)))
    doc = read_claims(tmp_path / "claims.json")  # as a pilot's or a published block's
    got = budget.Assumption({c["name"]: c for c in doc["claims"]}, "a pilot")
    assert doc["seed_block"] == 3 and got.entries["c"]["values"]
    assert budget.budget(study, one, got).expected == 9


def test_list_shows_a_sequential_quick_studys_worst_and_expected_cost(capsys):
    from normlab.lab.cli import main

    argv = ["study", "--preset", "quick", "--list"]
    assert main(argv) == 0  # quick is sequential since seed block 12
    out = capsys.readouterr().out.splitlines()
    line = next(ln for ln in out if "worst case" in ln)
    worst = float(line.split("worst case ")[1].split()[0])
    expected = float(line.split("expected ")[1].split()[0])
    assert 0 < expected < worst and "docs/data/quick" in line
    # a quick run: the claims that need many seeds or deep trained arms are left out by default
    assert expected <= QUICK_EXPECTED_CPU_S, line
    assert any(ln.endswith("--set extended=true runs them too") for ln in out)
