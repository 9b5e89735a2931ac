"""A verdict in words: the summary's sentence carries the numbers that matter, and for an
undecided claim why and what would decide it; the rule in plain words; the scope, short."""

from normlab.lab.study.decide.claims import Claim
from normlab.lab.study.decide.rules_compound import AllOf, AnyOf
from normlab.lab.study.decide.rules_contrast import Contrast, Fails, Trains
from normlab.lab.study.decide.rules_timing import Timing
from normlab.lab.study.decide.stats import Context
from normlab.lab.study.report import claim_text
from normlab.lab.study.spec.claim_loader import control
from normlab.lab.train.result import RunResult


def res(val):
    return RunResult({"model": {"vocab_size": 256}}, summary={"final_val_loss": val})


def arm(*vals):
    return {i: res(v) for i, v in enumerate(vals)}


def diff(delta=0.02, n=3, expect=">0"):
    return Contrast(((1, "a", "final_val_loss"), (-1, "b", "final_val_loss")), expect, delta, n)


def said(rule, results, h=3.1, **kw):
    claim = Claim("c", "a statement", "Article 000 (x)", rule, **kw)
    v = claim.decide(results, Context(plateau_h=h, timings=kw.pop("timings", {})))
    return v.status, claim_text.sentence(claim, v, h)


def test_a_decided_contrast_says_its_interval_against_delta():
    status, text = said(diff(), {"a": arm(3.0, 3.1, 3.2), "b": arm(2.5, 2.55, 2.6)})
    assert status == "holds" and text.startswith("a − b (final val loss): +0.550 [")
    assert "] nats/byte, n=3, above δ=0.02." in text  # the unit named in the row
    status, text = said(diff(0.1, expect="≈0"), {"a": arm(3.0, 3.1, 3.2), "b": arm(3.0, 3.1, 3.2)})
    assert status == "holds" and "inside ±0.1" in text


def test_does_not_hold_says_which_edge_the_interval_lies_past():
    below = {"a": arm(3.00, 3.01, 3.02), "b": arm(2.995, 3.0, 3.005)}  # +0.01 ± little, δ=0.05
    status, text = said(diff(0.05), below)
    assert status == "does not hold" and "inside ±0.05: no difference that matters" in text
    status, text = said(diff(0.05), {"a": arm(3.0, 3.1, 3.2), "b": arm(3.5, 3.6, 3.7)})
    assert status == "does not hold" and "the other sign" in text
    apart = {"a": arm(3.0, 3.1, 3.2), "b": arm(2.5, 2.6, 2.7)}
    status, text = said(diff(0.1, expect="≈0"), apart)
    assert status == "does not hold" and "wholly outside ±0.1" in text


def test_an_undecided_contrast_says_why_and_what_would_decide_it():
    status, text = said(diff(), {"a": arm(3.0, 3.3, 2.8), "b": arm(3.0, 3.0, 3.0)})
    assert status == "inconclusive"
    assert "this n detects only" in text and "seeds would decide it" in text


def test_a_margin_is_shown_apart_from_the_difference_it_is_folded_into():
    # "the recipe b is at most 0.03 worse than a": v = 0.03 + loss(a) − loss(b), a difference
    # of +0.010 decided with a margin of 0.03: the row says both, never +0.040 unlabelled
    margin = Contrast(((1, "a", "final_val_loss"), (-1, "b", "final_val_loss")), ">0", 0.0, 3,
                      const=0.03)  # fmt: skip
    same = {"a": arm(3.0, 3.1, 3.2), "b": arm(2.99, 3.09, 3.19)}
    status, text = said(margin, same)
    assert status == "holds" and "+0.040" not in text
    assert text.startswith("a − b (final val loss): difference +0.010 [+0.010, +0.010] nats/byte")
    assert "margin 0.03 nats/byte, n=3, above −0.03: within the margin" in text
    status, text = said(margin, {"a": arm(3.0, 3.1, 3.2), "b": arm(3.1, 3.2, 3.3)})
    assert status == "does not hold" and "difference −0.100 [" in text and "past the margin" in text
    status, text = said(margin, {"a": arm(3.0, 3.3, 2.8), "b": arm(3.1, 3.1, 3.1)})
    assert status == "inconclusive" and "the interval spans −0.03, the margin" in text
    # the report's parts table says the same
    from normlab.lab.study.report.writer import _estimate_row

    claim = Claim("c", "s", "src", margin)
    v = claim.decide(same, Context(plateau_h=3.1))
    assert _estimate_row("", margin, v)[2] == "difference +0.010 [+0.010, +0.010], margin 0.03"
    # a one-term rule's constant is its bar, not a margin: v shown as it is
    bar = Contrast(((-1, "a", "final_val_loss"),), ">0", 0.0, 3, const=3.5)
    assert said(bar, same)[1].startswith("−a (final val loss): +0.400 [")


def test_thresholds_name_the_bar_and_the_seeds_on_its_side():
    rule = AllOf((("a fails", Fails("a", seeds=3)), ("b trains", Trains("b", seeds=3))))
    status, text = said(rule, {"a": arm(3.2, 3.3, 3.25), "b": arm(2.0, 2.1, 2.2)})
    assert status == "holds"
    assert "a ends at 3.250 (above the bar 3.050 in 3 of 3 seeds)" in text
    assert "b ends at 2.100 (below the bar 2.800 in 3 of 3 seeds)" in text


def test_an_untestable_claim_names_the_control_and_its_numbers():
    results = {"a": arm(3.2, 3.3, 3.25), "b": arm(3.0, 3.0, 3.1)}
    status, text = said(Fails("a", seeds=3), results, controls=(control("b", seeds=3),))
    assert status == "not testable here"
    assert text.startswith("The control 'b trains' did not hold: b ends at 3.033")
    assert "would decide it" in text


def test_an_any_of_that_holds_shows_the_part_that_holds():
    other_way = Contrast(((1, "b", "final_val_loss"), (-1, "a", "final_val_loss")), ">0", 0.02, 3)
    rule = AnyOf((("x", diff()), ("y", other_way)))
    status, text = said(rule, {"a": arm(3.0, 3.1, 3.2), "b": arm(2.5, 2.55, 2.6)})
    assert status == "holds" and text.startswith("x: +0.550") and "(other parts — y:" in text


def test_a_timing_claim_speaks_in_per_cent_and_timing_units():
    timings = {"f": {"norm_ms": [1.0, 1.0, 1.01, 0.99, 1.0]},
               "s": {"norm_ms": [2.0, 2.0, 2.02, 1.98, 2.0]}}  # fmt: skip
    claim = Claim("t", "f is faster", "src", Timing("f", "s", 0.05), ("speed",))
    v = claim.decide({}, Context(plateau_h=3.1, timings=timings))
    text = claim_text.sentence(claim, v, 3.1)
    assert v.status == "holds" and text.startswith("f saves +50.0% [") and "5 timing units" in text


def test_the_rule_in_words_names_each_part_and_the_decision_once():
    rule = AllOf((("L2", diff()), ("L4", diff(0.05))))
    lines, text = claim_text.rule_words(Claim("c", "s", "src", rule))
    v = "v = final_val_loss[a] − final_val_loss[b] per seed"
    assert lines == [f"[L2] {v}", f"[L4] {v}"]
    assert "(δ = 0.02, 0.05)" in text and "every part holds" in text and "Holm" in text


def test_scope_short_and_compact():
    shapes = [
        {"d": 64, "blocks": b, "T": 64, "B": 16, "steps": s, "tokens": s * 1024, "init": "xavier"}
        for b, s in ((6, 0), (24, 150))
    ]
    assert claim_text.short_scope(shapes) == "d=64, 6/24 blocks, at init and 154 K tokens"
    assert claim_text.compact_size(shapes[:1] + [{**shapes[0], "blocks": 48}]) == (
        "d=64 L=6/48 T=64 B=16 0 steps (0 tokens) init=xavier"
    )
    assert claim_text.short_source("Article 003 (BatchNorm)") == "Article 003"
