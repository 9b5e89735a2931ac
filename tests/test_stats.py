"""The shared statistics: the trimmed mean and the median a heavy-tailed rule chooses in its
spec."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.stats import mstats

from normlab.lab.study.pilot import size_seeds
from normlab.lab.study.rules import Context, Contrast
from normlab.lab.study.spec import parse_spec
from normlab.lab.study.stats import (
    FAILS,
    HOLDS,
    UNSURE,
    Estimate,
    decide_rows,
    seeds_for_interval,
)
from normlab.lab.study.words import part_text

# Seven models whose gap is about 0.1 and one that blew up: the plain mean's interval is wide.
HEAVY = [0.10, 0.12, 0.09, 0.15, 0.11, 1.6, 0.08, 0.13]


def _results(values):
    return {
        "a": {i: {"status": "ok", "summary": {"final_val_loss": v}} for i, v in enumerate(values)}
    }


def test_trimmed_rule_decides_what_one_blown_up_seed_leaves_open():
    plain = Contrast(((1, "a", "final_val_loss"),), ">0", 0.02, len(HEAVY))
    trimmed = Contrast(((1, "a", "final_val_loss"),), ">0", 0.02, len(HEAVY), trim=0.2)
    assert plain.decide(_results(HEAVY), Context()).status == UNSURE
    v = trimmed.decide(_results(HEAVY), Context())
    assert v.status == HOLDS
    assert v.estimate.effect == pytest.approx(np.mean(sorted(HEAVY)[1:-1]))
    assert "trimmed mean" in trimmed.describe() and "Yuen" in trimmed.describe()
    assert "Student-t" in plain.describe()


def test_trimmed_interval_is_yuens():
    est = Estimate.trimmed(HEAVY, 0.95, 0.2)
    se = float(mstats.trimmed_stde(np.asarray(HEAVY), limits=(0.2, 0.2)))
    assert est.hi - est.effect == pytest.approx(est.effect - est.lo)
    # Student t on n − 2g − 1 = 5 degrees of freedom
    assert (est.hi - est.effect) / se == pytest.approx(2.5706, rel=1e-4)
    assert Estimate.spread(HEAVY, 0.2) / np.sqrt(len(HEAVY)) == pytest.approx(se)
    assert Estimate.spread(HEAVY) == pytest.approx(np.std(HEAVY, ddof=1))


# Two blown-up models of eight, the tails seed blocks 2 and 3 of the quick study showed: the
# 20 % trim cuts one seed at each end, and the one left widens Yuen's interval past 0.
TWO_TAILS = [0.03, 0.05, 0.04, 0.06, 0.05, 1.6, 0.9, 0.04]


def test_median_decides_what_two_blown_up_seeds_leave_open():
    rule = lambda trim: Contrast(((1, "a", "final_val_loss"),), ">0", 0.02, 8, trim=trim)  # noqa: E731
    assert rule(0.2).decide(_results(TWO_TAILS), Context()).status == UNSURE
    v = rule(0.5).decide(_results(TWO_TAILS), Context())
    assert v.status == HOLDS and v.estimate.effect == pytest.approx(np.median(TWO_TAILS))
    # the sign test cannot place the median above 0 while one seed of eight is below it
    one_below = [-0.01, *TWO_TAILS[1:]]
    assert rule(0.5).decide(_results(one_below), Context()).status == UNSURE
    assert "median" in rule(0.5).describe() and "order statistics" in rule(0.5).describe()
    assert "median" in rule(0.5).statistic_words() and rule(0.0).statistic_words() == ""
    # the report's phrase names the statistic where it is not a mean
    assert ": median +0.05" in part_text("", rule(0.5), v, None)


def test_median_interval_is_the_order_statistics_and_needs_six_values():
    xs = [float(i) for i in range(1, 13)]  # n = 12: the 95 % interval is [x(3), x(10)]
    est = Estimate.trimmed(xs, 0.95, 0.5)
    assert (est.effect, est.lo, est.hi) == (6.5, 3.0, 10.0)
    ci = stats.quantile_test(xs, p=0.5).confidence_interval(0.95)
    assert (est.lo, est.hi) == (ci.low, ci.high)
    assert est.mde is None
    short = Estimate.median([1.0, 2.0, 3.0, 4.0, 5.0])
    assert short.effect == 3.0 and (short.lo, short.hi) == (-np.inf, np.inf)
    assert np.isfinite(Estimate.median([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).lo)
    assert (seeds_for_interval(0.5), seeds_for_interval(0.2), seeds_for_interval(0.0)) == (6, 2, 2)
    assert seeds_for_interval(0.5, 0.99) == 8  # 2 · 0.5⁸ ≤ 1 %
    assert Estimate.median([1.0, float("inf")]).effect is None
    # the pilot's spread for the median: √(π/2) times the MAD's normal-consistent σ
    mad = stats.median_abs_deviation(TWO_TAILS, scale="normal")
    assert Estimate.spread(TWO_TAILS, 0.5) == pytest.approx(np.sqrt(np.pi / 2) * mad)


def test_trim_zero_is_the_plain_mean_and_bounded_rows_still_pick_their_ends():
    rows = [(v, v) for v in HEAVY]
    assert decide_rows(">0", rows, 0.02, 0.95, 0.0)[2] == Estimate.of(HEAVY)
    # a seed known only as a range: "does not hold" is tried at its most favourable end
    rows = [(-0.001, -0.001)] * 7 + [(-0.002, 5.0)]
    status, why, _ = decide_rows(">0", rows, 0.02, 0.95, 0.2)
    assert status == FAILS and "most favourable" in why


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
    assert plan.sd == pytest.approx(Estimate.spread(HEAVY, 0.2))
    assert plan.sd < np.std(HEAVY, ddof=1) / 3
