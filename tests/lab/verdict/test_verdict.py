"""The verdict engine: the statistics as objects, the one symmetric rule at its edges, Holm, and
the same words from every decider (a study's claim, a numerics finding, a bench finding)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.stats import mstats

from normlab.lab.bench.cost_findings import COMMUNICATION
from normlab.lab.numerics.findings import FINDINGS
from normlab.lab.study.decide.rules_contrast import Contrast
from normlab.lab.study.decide.stats import Context
from normlab.lab.train.result import RunResult
from normlab.lab.verdict import (
    Estimate,
    Mean,
    Median,
    TrimmedMean,
    Word,
    combine,
    correct,
    decide,
    decide_rows,
    headline,
    statistic,
)
from normlab.lab.verdict.finding import Finding, Part

HEAVY = [0.10, 0.12, 0.09, 0.15, 0.11, 1.6, 0.08, 0.13]
TWO_TAILS = [0.03, 0.05, 0.04, 0.06, 0.05, 1.6, 0.9, 0.04]
H, D = Word.HOLDS, Word.DOES_NOT_HOLD
U = Word.INCONCLUSIVE


# --------------------------------------------------------------------------------------------
# the statistics


def test_statistic_names_the_three_by_trim_and_refuses_others():
    assert statistic(0.0) == Mean() and statistic(0.2) == TrimmedMean(0.2)
    assert statistic(0.5) == Median()
    for bad in (-0.1, 0.51, math.nan):
        with pytest.raises(ValueError, match="trim"):
            statistic(bad)


def test_trimmed_interval_is_yuens():
    est = TrimmedMean(0.2).estimate(HEAVY, 0.95)
    se = float(mstats.trimmed_stde(np.asarray(HEAVY), limits=(0.2, 0.2)))
    assert est.hi - est.effect == pytest.approx(est.effect - est.lo)
    # Student t on n − 2g − 1 = 5 degrees of freedom
    assert (est.hi - est.effect) / se == pytest.approx(2.5706, rel=1e-4)
    assert TrimmedMean(0.2).spread(HEAVY) / np.sqrt(len(HEAVY)) == pytest.approx(se)
    assert Mean().spread(HEAVY) == pytest.approx(np.std(HEAVY, ddof=1))
    assert TrimmedMean(0.2).estimate([0.1, 0.2, 0.3]) == Mean().estimate([0.1, 0.2, 0.3])


def test_mean_interval_is_student_t_and_one_value_has_none():
    xs = [0.1, 0.3, 0.2, 0.25]
    est = Mean().estimate(xs)
    half = stats.t.ppf(0.975, 3) * np.std(xs, ddof=1) / 2
    assert (est.lo, est.hi) == pytest.approx((np.mean(xs) - half, np.mean(xs) + half))
    one = Mean().estimate([0.5])
    assert one.n == 1 and one.lo == -math.inf and Mean().estimate([]).effect is None
    assert Mean().min_seeds() == TrimmedMean().min_seeds() == 2


def test_median_interval_is_the_order_statistics_and_needs_six_values():
    xs = [float(i) for i in range(1, 13)]  # n = 12: the 95 % interval is [x(3), x(10)]
    est = Median().estimate(xs, 0.95)
    assert (est.effect, est.lo, est.hi) == (6.5, 3.0, 10.0)
    ci = stats.quantile_test(xs, p=0.5).confidence_interval(0.95)
    assert (est.lo, est.hi) == (ci.low, ci.high)
    assert est.mde is None
    short = Median().estimate([1.0, 2.0, 3.0, 4.0, 5.0])
    assert short.effect == 3.0 and (short.lo, short.hi) == (-np.inf, np.inf)
    assert np.isfinite(Median().estimate([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]).lo)
    assert Median().min_seeds() == 6 and Median().min_seeds(0.99) == 8  # 2 · 0.5⁸ ≤ 1 %
    assert Median().estimate([1.0, float("inf")]).effect is None
    # the pilot's spread for the median: √(π/2) times the MAD's normal-consistent σ
    mad = stats.median_abs_deviation(TWO_TAILS, scale="normal")
    assert Median().spread(TWO_TAILS) == pytest.approx(np.sqrt(np.pi / 2) * mad)
    assert "median" in Median().words("seeds") and "Yuen" in TrimmedMean().words("seeds")


# --------------------------------------------------------------------------------------------
# the rule at its edges: each word just inside and just outside, for every claim form

E = 1e-6  # just past an edge
DELTA = 0.1

# (expect, lo, hi, the word): intervals placed at the edges of δ = 0.1
EDGES = [
    # superiority: above δ holds, below δ does not hold, straddling δ is inconclusive
    (">0", DELTA + E, 0.5, H),
    (">0", DELTA - E, 0.5, U),
    (">0", -0.5, DELTA - E, D),
    (">0", -0.5, DELTA + E, U),
    (">0", 0.01, 0.09, D),  # above 0 but below δ: no effect that matters
    ("<0", -0.5, -DELTA - E, H),
    ("<0", -0.5, -DELTA + E, U),
    ("<0", -DELTA + E, 0.5, D),
    ("<0", -DELTA - E, 0.5, U),
    # equivalence: inside ±δ holds, wholly outside does not hold
    ("≈0", -DELTA + E, DELTA - E, H),
    ("≈0", -DELTA - E, DELTA - E, U),
    ("≈0", -DELTA + E, DELTA + E, U),
    ("≈0", DELTA + E, 0.5, D),
    ("≈0", DELTA - E, 0.5, U),
    ("≈0", -0.5, -DELTA - E, D),
    ("≈0", -0.5, -DELTA + E, U),
    # difference: the mirror of equivalence
    ("≠0", DELTA + E, 0.5, H),
    ("≠0", DELTA - E, 0.5, U),
    ("≠0", -0.5, -DELTA - E, H),
    ("≠0", -DELTA + E, DELTA - E, D),
    ("≠0", -DELTA - E, DELTA - E, U),
]


def _values(lo: float, hi: float) -> list[float]:
    """Eight values whose mean's 95 % Student-t interval is exactly [lo, hi]."""
    z = np.array([-1.5, -1.0, -0.5, -0.1, 0.1, 0.5, 1.0, 1.5])
    half = stats.t.ppf(0.975, 7) * np.std(z, ddof=1) / np.sqrt(8)
    return list((lo + hi) / 2 + z * (hi - lo) / 2 / half)


@pytest.mark.parametrize(("expect", "lo", "hi", "word"), EDGES)
def test_every_decider_gives_the_same_word_at_the_edges(expect, lo, hi, word):
    values = _values(lo, hi)
    est = Mean().estimate(values)
    assert (est.lo, est.hi) == pytest.approx((lo, hi), abs=1e-9)
    assert decide(expect, est, DELTA)[0] == word
    # a study's claim over eight seeds
    rule = Contrast(((1, "a", "final_val_loss"),), expect, DELTA, 8)
    results = {"a": {i: RunResult({}, summary={"final_val_loss": v}) for i, v in enumerate(values)}}
    assert rule.decide(results, Context()).status == word
    # a finding of one part (numerics and bench decide through the same Finding)
    finding = Finding("f", "s", "src", (("p", Part("v", expect, DELTA)),))
    assert finding.decide({"p": values})["verdict"] == word
    assert finding.decide({"p": values})["parts"][0]["verdict"] == word


def test_no_interval_decides_nothing():
    one = Estimate(0.5, -math.inf, math.inf, 1, None)
    assert all(decide(e, one, DELTA)[0] == U for e in (">0", "<0", "≈0", "≠0"))
    unbounded = Estimate(None, None, None, 4, None)
    assert decide(">0", unbounded, DELTA)[0] == U


def test_every_sentence_about_a_bound_is_true_of_the_interval():
    for expect, lo, hi, _ in EDGES:
        word, why = decide(expect, Mean().estimate(_values(lo, hi)), DELTA)
        if "lies above" in why:
            assert lo > (-DELTA if expect == "<0" else DELTA)
        if "lies below" in why:
            assert hi < (-DELTA if expect == "<0" else DELTA)
        if "inside ±δ" in why:
            assert -DELTA < lo and hi < DELTA
        if "wholly outside" in why:
            assert lo > DELTA or hi < -DELTA


def test_a_bounded_seed_decides_does_not_hold_only_at_its_most_favourable_end():
    rows = [(v, v) for v in HEAVY]
    assert decide_rows(">0", rows, 0.02, 0.95, 0.0)[2] == Mean().estimate(HEAVY)
    rows = [(-0.001, -0.001)] * 7 + [(-0.002, 5.0)]
    status, why, _ = decide_rows(">0", rows, 0.02, 0.95, 0.2)
    assert status == D and "most favourable" in why


# --------------------------------------------------------------------------------------------
# Holm, the one correction


def test_holm_confirms_step_by_step_and_leaves_the_rest_inconclusive():
    # part 0 reaches the target only at 95 %; part 1 at every level; part 2 never
    levels = {0: 0.96, 1: 1.0, 2: 0.0}
    at = lambda j, lvl: D if lvl <= levels[j] else U  # noqa: E731
    fixed = correct([(D, "a"), (D, "b"), (H, "c")], at, D, 0.95)
    assert [w for w, _, _ in fixed] == [U, D, H]
    assert "Holm" in fixed[0][1] and fixed[1][2].startswith("confirmed")
    assert combine(D, [w for w, _, _ in fixed]) == D
    assert combine(D, [H, H]) == H and combine(H, [D, D]) == D
    assert combine(D, [H, Word.NOT_TESTABLE]) == Word.NOT_TESTABLE
    assert combine(D, [H, U, Word.NOT_TESTABLE]) == U


def test_a_headline_is_never_stronger_than_its_weakest_evidence():
    assert headline([H, H]) == H and headline([D]) == D
    assert headline([H, U]) == U and headline([D, Word.NOT_TESTABLE]) == U
    assert headline([H, D, U]) == Word.MIXED
    assert headline([Word.NOT_TESTABLE]) == Word.NOT_TESTABLE and headline([]) == U


def test_the_numerics_and_bench_findings_decide_through_the_engine():
    for finding in (*FINDINGS.values(), COMMUNICATION):
        assert isinstance(finding, Finding)
        assert all(isinstance(p, Part) for _, p in finding.parts)


def test_a_published_finding_is_decided_again_from_its_stored_values():
    f = Finding("f", "s", "src", (("a", Part("v", ">0", 0.1)), ("b", Part("v", ">0", 0.1))))
    published = f.decide({"a": [0.5, 0.6, 0.55], "b": [0.0, 0.01, -0.01]}) | {"record": {"x": 1}}
    again = f.redecide(published)
    assert again == published
    stricter = Finding("f", "s", "src", (("a", Part("v", ">0", 0.7)), ("b", Part("v", ">0", 0.1))))
    assert stricter.redecide(published)["parts"][0]["verdict"] == D
    assert isinstance(Estimate(None, None, None, 0, None).text(), str)
