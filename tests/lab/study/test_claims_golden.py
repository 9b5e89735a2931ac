"""The claim machinery against its golden outputs (tests/claims_golden.py): the made-up cases are
decided into the same ``claims.json``, byte for byte (verdicts, effects, intervals, reasons); the
stored quick study of commit 2db8868 into the verdicts, effects and intervals that commit wrote,
except where the verdict rule has changed since (each change listed in ``RULE_CHANGES``)."""

from __future__ import annotations

import json

import pytest
from claims_golden import CASES, GOLDEN, QUICK, RULE_CHANGES, case_text, quick_text

from normlab.lab.verdict import CLAIM_WORDS


@pytest.mark.parametrize("case", CASES)
def test_the_made_up_case_is_decided_as_its_golden_file(case):
    assert case_text(case) == (GOLDEN / case / "claims.json").read_text("utf-8")


def _decided(doc: dict) -> dict[str, tuple]:
    """Every claim's, part's and control's verdict with its effect, interval and n."""
    out = {}
    for c in doc["claims"]:
        for key, d in [(c["name"], c)] + [(f"{c['name']}/{p['part']}", p) for p in c["parts"]]:
            out[key] = (d["verdict"], d.get("effect"), d.get("lo"), d.get("hi"), d.get("n"))
        for ctl in c["controls"]:
            out[f"{c['name']}/control {ctl['control']}"] = (ctl["verdict"],)
    return out


def test_the_stored_quick_study_is_decided_as_it_was_but_for_the_listed_rule_changes():
    then = _decided(json.loads((QUICK / "claims.json").read_text("utf-8")))
    now = _decided(json.loads(quick_text()))
    assert now.keys() == then.keys()
    for key, (was, is_) in RULE_CHANGES.items():
        assert (then[key][0], now[key][0]) == (was, is_)
    for key in then.keys() - RULE_CHANGES.keys():
        assert now[key] == then[key], key
    for key in RULE_CHANGES:  # the verdict changed; what was measured did not
        assert now[key][1:] == then[key][1:], key


def test_the_golden_cases_cover_every_rule_kind_verdict_and_holm_case():
    claims = [c for case in CASES for c in json.loads(case_text(case))["claims"]]
    parts = [p for c in claims for p in c["parts"]]
    assert {c["verdict"] for c in claims} == set(CLAIM_WORDS)
    assert {p["verdict"] for p in parts} == set(CLAIM_WORDS)
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
