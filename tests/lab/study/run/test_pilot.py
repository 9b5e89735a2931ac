"""Seeds sized from a pilot: the detectable effect at the chosen n reaches δ, not one seed less."""

import json

import pytest

from normlab.lab.cli import main
from normlab.lab.study.run.pilot import sd_upper, seeds_for, size_seeds
from normlab.lab.study.spec.parse import load_builtin
from normlab.lab.verdict import detectable


def test_the_upper_limit_of_a_spread_from_three_seeds_is_about_twice_it():
    from scipy import stats

    assert sd_upper(1.0, 3) == pytest.approx((2 / stats.chi2.ppf(0.2, 2)) ** 0.5)
    assert 2.0 < sd_upper(1.0, 3) < 2.2 and 1.0 < sd_upper(1.0, 100) < 1.1


def test_seeds_for_is_the_fewest_that_reach_the_target():
    n = seeds_for(0.05, 0.02, cap=64)
    assert detectable(0.05, n) <= 0.02 < detectable(0.05, n - 1)
    assert seeds_for(0.05, 0.02, cap=n - 1) is None
    assert seeds_for(0.0, 0.02, cap=4) == 2


def _pilot(study, sd_by_claim):
    claims = []
    for c in study.claims:
        sd = sd_by_claim.get(c.name, 0.01)
        values = [0.1 - sd, 0.1, 0.1 + sd]
        parts = [{"part": label, "verdict": "holds", "values": values}
                 for label, _ in c.rule.parts() if label]  # fmt: skip
        claims.append({"name": c.name, "verdict": "holds", "values": values, "parts": parts})
    return {"preset": study.name, "seed_block": 99, "claims": claims}  # as a study writes it


def test_size_seeds_reads_the_spread_per_rule_and_skips_timings():
    study = load_builtin("quick")
    plans = size_seeds(study, _pilot(study, {"rmsnorm-matches-quality": 0.02}), cap=32)
    names = {p.claim for p in plans}
    assert "rmsnorm-faster" not in names and "rmsnorm-matches-quality" in names
    quality = next(p for p in plans if p.claim == "rmsnorm-matches-quality")
    assert quality.sd == pytest.approx(0.02) and quality.target == 0.03
    assert quality.sd_upper == pytest.approx(sd_upper(0.02, 3)) and quality.sd_upper > 0.04
    up = quality.sd_upper
    assert detectable(up, quality.needed) <= 0.03 < detectable(up, quality.needed - 1)
    fails = [p for p in plans if p.claim == "post-ln-fails-deep"]
    assert fails and all(p.part for p in fails)  # one plan per part, by its label


def test_the_command_prints_the_table(tmp_path, capsys):
    study = load_builtin("quick")
    (tmp_path / "claims.json").write_text(json.dumps(_pilot(study, {})))
    assert main(["study", "--preset", "quick", "--size-seeds", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "seed block 99" in out and "rmsnorm-matches-quality" in out
    assert main(["study", "--size-seeds", str(tmp_path / "nowhere")]) == 2
