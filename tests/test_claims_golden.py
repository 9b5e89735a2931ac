"""The claim machinery against its golden outputs (tests/claims_golden.py): the made-up cases and
the stored quick study are decided into the same ``claims.json``, byte for byte (verdicts,
effects, intervals, reasons)."""

from __future__ import annotations

import json

import pytest
from claims_golden import CASES, GOLDEN, QUICK, case_text, quick_text

from normlab.lab.study.stats import VERDICTS


@pytest.mark.parametrize("case", CASES)
def test_the_made_up_case_is_decided_as_its_golden_file(case):
    assert case_text(case) == (GOLDEN / case / "claims.json").read_text("utf-8")


def test_the_stored_quick_study_is_decided_as_it_was():
    assert quick_text() == (QUICK / "claims.json").read_text("utf-8")


def test_the_golden_cases_cover_every_rule_kind_verdict_and_holm_case():
    claims = [c for case in CASES for c in json.loads(case_text(case))["claims"]]
    parts = [p for c in claims for p in c["parts"]]
    assert {c["verdict"] for c in claims} == set(VERDICTS)
    assert {p["verdict"] for p in parts} == set(VERDICTS)
    rules = " ".join(c["rule"] for c in claims)
    for text in (
        "v = 1 − norm_ms",
        "v = 1 − step_ms",
        "S = the LR sensitivity",
        "H = ",
        "Holds iff",
    ):
        assert text in rules
    assert any(p["correction"].startswith("confirmed by Holm") for p in parts)
    assert any("not after Holm's correction" in p["correction"] for p in parts)
    assert any(c["controls"] and c["verdict"] == "not testable here" for c in claims)
    outcomes = [c["seed_outcomes"] for c in claims if c["seed_outcomes"]]
    assert any(o["bounded"] for o in outcomes) and any(o["unpaired"] for o in outcomes)
    assert any(o["diverged"] for o in outcomes) and any(o["stalled"] for o in outcomes)
