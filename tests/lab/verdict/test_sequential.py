"""Repeated confidence intervals: the bounds against published tables, the spending checked by
simulation, and the design's looks."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from normlab.lab.verdict.sequential import Design, Look, bounds, nominal_levels, spent


def test_obrien_fleming_bounds_match_the_published_tables():
    # Lan-DeMets O'Brien-Fleming spending, two-sided α = 0.05, equal looks (Jennison & Turnbull
    # 2000, Table 7.6; gsDesign's sfLDOF gives the same)
    assert bounds((0.25, 0.5, 0.75, 1.0), 0.05, "obrien-fleming") == pytest.approx(
        (4.3326, 2.9631, 2.3590, 2.0141), abs=2e-4
    )
    five = bounds((0.2, 0.4, 0.6, 0.8, 1.0), 0.05, "obrien-fleming")
    assert five == pytest.approx((4.8769, 3.3570, 2.6803, 2.2898, 2.0310), abs=2e-4)


@pytest.mark.parametrize("kind", ["obrien-fleming", "pocock"])
def test_the_bounds_spend_alpha_as_the_function_says(kind):
    # Brownian paths at the looks (unequal ones): the share that crosses by each look is the
    # spending function's, within Monte-Carlo error
    fr = (0.3, 0.55, 0.8, 1.0)
    cs = np.array(bounds(fr, 0.05, kind))
    rng = np.random.default_rng(0)
    steps = rng.standard_normal((400_000, len(fr))) * np.sqrt(np.diff((0.0, *fr)))
    z = np.cumsum(steps, axis=1) / np.sqrt(fr)
    crossed = np.maximum.accumulate(np.abs(z) > cs, axis=1).mean(axis=0)
    want = [spent(kind, 0.05, t) for t in fr]
    assert crossed == pytest.approx(want, abs=4 * math.sqrt(0.05 / 400_000) + 1e-4)


def test_one_look_is_the_fixed_design():
    assert nominal_levels((1.0,), 0.95, "pocock") == (0.95,)
    assert bounds((1.0,), 0.05, "obrien-fleming")[0] == pytest.approx(norm.isf(0.025))
    assert Design(4).levels(4) == (0.95,)


def test_pocock_levels_are_about_even_and_obrien_fleming_saves_the_last():
    poc, obf = Design(4, "pocock").levels(16), Design(4).levels(16)
    assert max(poc) - min(poc) < 0.002 and all(0.95 < x < 0.99 for x in poc)
    assert obf[0] > 0.9999 and 0.95 < obf[-1] < 0.96
    assert all(a > b for a, b in zip(obf, obf[1:], strict=False))


def test_looks_up_to_the_cap():
    assert Design(4).looks(10) == (4, 8, 10)
    assert Design(4).looks(8) == (4, 8)
    assert Design(4).looks(3) == (3,)
    assert Design(3, first=5).looks(12) == (5, 8, 11, 12)
    look = Look(Design(4), 10, 1)
    assert (look.n, look.count) == (8, 3) and "look 2 of 3 at n=8" in look.words()


@pytest.mark.parametrize(
    "kw",
    [
        {"batch": 0},
        {"batch": 2, "spending": "haybittle"},
        {"batch": True},
        {"batch": 2, "first": -1},
    ],
)
def test_a_bad_design_is_refused(kw):
    with pytest.raises(ValueError):
        Design(**kw)


def test_bad_fractions_are_refused():
    for fr in [(), (0.5,), (0.5, 0.4, 1.0), (0.0, 1.0)]:
        with pytest.raises(ValueError):
            bounds(fr, 0.05, "pocock")
