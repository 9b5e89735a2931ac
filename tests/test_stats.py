"""The shared statistics: the trimmed estimator a heavy-tailed rule chooses in its spec."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import mstats

from normlab.lab.study.pilot import size_seeds
from normlab.lab.study.rules import Context, Contrast
from normlab.lab.study.spec import parse_spec
from normlab.lab.study.stats import FAILS, HOLDS, UNSURE, Estimate, decide_rows

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


def test_trim_zero_is_the_plain_mean_and_bounded_rows_still_pick_their_ends():
    rows = [(v, v) for v in HEAVY]
    assert decide_rows(">0", rows, 0.02, 0.95, 0.0)[2] == Estimate.of(HEAVY)
    # a seed known only as a range: "does not hold" is tried at its most favourable end
    rows = [(-0.001, -0.001)] * 7 + [(-0.002, 5.0)]
    status, why, _ = decide_rows(">0", rows, 0.02, 0.95, 0.2)
    assert status == FAILS and "most favourable" in why


@pytest.mark.parametrize("trim", [-0.1, 0.5, 0.7])
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
