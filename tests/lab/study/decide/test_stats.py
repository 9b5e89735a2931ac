"""A study rule's statistic: the trimmed mean and the median a heavy-tailed rule chooses in its
spec (the statistics themselves: test_verdict.py)."""

from __future__ import annotations

import numpy as np
import pytest

from normlab.lab.study.decide.rules_contrast import Contrast
from normlab.lab.study.decide.stats import Context
from normlab.lab.study.report.claim_text import part_text
from normlab.lab.study.run.pilot import size_seeds
from normlab.lab.study.spec.parse import parse_spec
from normlab.lab.train.result import RunResult
from normlab.lab.verdict import TrimmedMean, Word

# Seven models whose gap is about 0.1 and one that blew up: the plain mean's interval is wide.
HEAVY = [0.10, 0.12, 0.09, 0.15, 0.11, 1.6, 0.08, 0.13]


def _results(values):
    return {"a": {i: RunResult({}, summary={"final_val_loss": v}) for i, v in enumerate(values)}}


def test_trimmed_rule_decides_what_one_blown_up_seed_leaves_open():
    plain = Contrast(((1, "a", "final_val_loss"),), ">0", 0.02, len(HEAVY))
    trimmed = Contrast(((1, "a", "final_val_loss"),), ">0", 0.02, len(HEAVY), trim=0.2)
    assert plain.decide(_results(HEAVY), Context()).status == Word.INCONCLUSIVE
    v = trimmed.decide(_results(HEAVY), Context())
    assert v.status == Word.HOLDS
    assert v.estimate.effect == pytest.approx(np.mean(sorted(HEAVY)[1:-1]))
    assert "trimmed mean" in trimmed.describe() and "Yuen" in trimmed.describe()
    assert "Student-t" in plain.describe()


# Two blown-up models of eight, the tails seed blocks 2 and 3 of the quick study showed: the
# 20 % trim cuts one seed at each end, and the one left widens Yuen's interval past 0.
TWO_TAILS = [0.03, 0.05, 0.04, 0.06, 0.05, 1.6, 0.9, 0.04]


def test_median_decides_what_two_blown_up_seeds_leave_open():
    rule = lambda trim: Contrast(((1, "a", "final_val_loss"),), ">0", 0.02, 8, trim=trim)  # noqa: E731
    assert rule(0.2).decide(_results(TWO_TAILS), Context()).status == Word.INCONCLUSIVE
    v = rule(0.5).decide(_results(TWO_TAILS), Context())
    assert v.status == Word.HOLDS and v.estimate.effect == pytest.approx(np.median(TWO_TAILS))
    # the sign test cannot place the median above 0 while one seed of eight is below it
    one_below = [-0.01, *TWO_TAILS[1:]]
    assert rule(0.5).decide(_results(one_below), Context()).status == Word.INCONCLUSIVE
    assert "median" in rule(0.5).describe() and "order statistics" in rule(0.5).describe()
    assert "median" in rule(0.5).statistic_words() and rule(0.0).statistic_words() == ""
    # the report's phrase names the statistic where it is not a mean
    assert ": median +0.05" in part_text("", rule(0.5), v, None)


@pytest.mark.parametrize("trim", [-0.1, 0.51, 0.7])
def test_trim_out_of_range_is_refused(trim):
    with pytest.raises(ValueError, match="trim"):
        Contrast(((1, "a", "final_val_loss"),), ">0", 0.02, 8, trim=trim)


def test_the_spec_sets_trim_and_the_pilot_sizes_from_the_trimmed_spread():
    spec = parse_spec(
        """
name = "t"
[base]
steps = 1
[base.model]
dim = 16
n_layers = 1
n_heads = 1
[[arms]]
name = "a"
[[claims]]
name = "c"
statement = "s"
source = "x"
rule = "contrast"
terms = [[1, "a", "final_val_loss"]]
expect = ">0"
delta = 0.02
seeds = 8
trim = 0.2
""",
        "t.toml",
    )
    (claim,) = spec.claims
    assert claim.rule.trim == 0.2
    pilot = {"claims": [{"name": "c", "values": HEAVY}]}
    (plan,) = size_seeds(spec, pilot)
    assert plan.sd == pytest.approx(TrimmedMean(0.2).spread(HEAVY))
    assert plan.sd < np.std(HEAVY, ddof=1) / 3
