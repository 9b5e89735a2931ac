"""Verdicts that are not flattered, on synthetic results (no training): no seed dropped, unpaired
runs left out and counted, Holm across compound parts, controls, the plateau bar."""

import math

import pytest

from normlab.lab.study.decide import Claim, decide_all
from normlab.lab.study.decide.rules_compound import AllOf, AnyOf, Controlled
from normlab.lab.study.decide.rules_contrast import Contrast, Fails, Trains
from normlab.lab.study.decide.rules_lr_sensitivity import LRSensitivity
from normlab.lab.study.decide.stats import Context
from normlab.lab.study.report import claim_text
from normlab.lab.study.spec.claim_loader import control
from normlab.lab.study.spec.design import Study
from normlab.lab.train.data import VOCAB_SIZE, corpus_from_bytes
from normlab.lab.train.result import RunResult
from normlab.lab.verdict import Mean, Seeds, TrimmedMean, Word

V = 256


def run(val=2.0, status="ok", logit_rms=None, stopped=None) -> RunResult:
    probes = {"0": {}}
    if logit_rms is not None and status == "ok":
        probes["10"] = {"logit_rms": logit_rms}
    return RunResult(
        {"model": {"vocab_size": V}},
        status,
        stopped_step=stopped,
        summary={"final_val_loss": val if status == "ok" else None},
        probes=probes,
    )


def arm(*vals, **kw) -> dict:
    return {i: run(v, **kw) for i, v in enumerate(vals)}


def single(name: str, n: int = 3) -> Contrast:
    """``v = final_val_loss[name]``, decided >0 with δ = 0."""
    return Contrast(((1, name, "final_val_loss"),), ">0", 0.0, n)


# ---- no seed dropped


def logits(*xs):
    return {i: run(logit_rms=math.exp(x)) if x is not None else run(status="diverged")
            for i, x in enumerate(xs)}  # fmt: skip


def test_a_diverged_seed_stays_in_at_its_least_favourable_value():
    rule = Contrast(((1, "a", "log_logit_rms_end"), (-1, "b", "log_logit_rms_end")), ">0", 0.0, 3)
    results = {"a": logits(2.0, 2.1, None), "b": logits(1.0, 1.0, 1.0)}
    v = rule.decide(results, Context())
    # Dropped, the two seeds left (+1.0, +1.1) would make the claim hold; kept at the least
    # favourable value of the range the measure takes (1.0), the third is 0: not decided.
    assert Contrast.decide(rule, {k: {i: r for i, r in x.items() if i < 2} for k, x in
                                      results.items()}, Context()).status == Word.HOLDS  # fmt: skip
    assert v.status == Word.INCONCLUSIVE and v.estimate.n == 3
    assert v.estimate.values == pytest.approx((1.0, 1.1, 0.0))
    assert v.seeds.diverged == (2,) and v.seeds.bounded == (2,) and v.seeds.n == 3
    assert "1 of 3 seeds diverged" in v.seeds.text()
    assert v.to_dict()["seed_outcomes"]["diverged"] == 1
    assert "least favourable" in rule.describe()


def test_a_bounded_seed_cannot_make_a_claim_fail_either():
    # "does not hold" is decided on the most favourable end: the diverged seed could be +1.1.
    rule = Contrast(((1, "a", "log_logit_rms_end"), (-1, "b", "log_logit_rms_end")), ">0", 0.5, 3)
    results = {"a": logits(1.0, 1.0, None), "b": logits(1.05, 1.02, 0.0)}
    v = rule.decide(results, Context())
    assert v.status == Word.INCONCLUSIVE
    both = {"a": logits(1.0, 1.0, 1.0), "b": logits(1.05, 1.02, 1.03)}
    assert (
        rule.decide(both, Context()).status == Word.DOES_NOT_HOLD
    )  # the same claim with every seed defined


def test_an_unpaired_run_enters_neither_the_values_nor_the_means():
    rule = Contrast(((1, "a", "final_val_loss"), (-1, "b", "final_val_loss")), ">0", 0.0, 3)
    results = {"a": arm(2.1, 2.2, 2.3, 9.0), "b": arm(2.0, 2.0, 2.0)}
    v = rule.decide(results, Context())
    assert v.estimate.n == 3 and v.seeds.unpaired == (3,)
    assert v.means["final_val_loss[a]"] == pytest.approx(2.2)  # not pulled up by seed 3's 9.0
    assert "1 unpaired, left out" in v.seeds.text()


def test_stalled_seeds_are_counted():
    rule = Fails("p", seeds=3)
    v = rule.decide(
        {"p": {0: run(3.2, stopped=60), 1: run(3.2), 2: run(3.2)}}, Context(plateau_h=3.0)
    )
    assert v.status == Word.HOLDS and v.seeds.stalled == (0,) and "1 stalled" in v.seeds.text()


def test_the_lr_sweep_pairs_both_sweeps_and_counts_divergence():
    rule = LRSensitivity(("s1", "s2"), ("u1", "u2"), 0.0, 3)
    results = {
        "s1": arm(2.0, 2.0, 2.0, 2.0),  # seed 3 is unpaired: the unstable sweep lacks it
        "s2": arm(2.1, 2.1, 2.1, 2.1),
        "u1": arm(2.0, 2.0, 2.0),
        "u2": {i: run(status="diverged") for i in range(3)},
    }
    v = rule.decide(results, Context())
    assert v.estimate.n == 3 and v.seeds.unpaired == (3,) and len(v.seeds.diverged) == 3
    assert v.status == Word.HOLDS


# ---- Holm across the parts of a compound claim


BORDERLINE = (1.0, 1.5, 2.0)  # lower end above 0 at 95 % (t=4.30), below at 97.5 % (t=6.21)


def test_any_of_a_part_that_holds_alone_but_not_after_holm():
    assert single("p").decide({"p": arm(*BORDERLINE)}, Context()).status == Word.HOLDS
    rule = AnyOf((("p", single("p")), ("q", single("q"))))
    v = rule.decide({"p": arm(*BORDERLINE), "q": arm(-1.0, 1.0, 0.0)}, Context())
    assert v.status == Word.INCONCLUSIVE
    p = dict(v.parts)["p"]
    assert p.status == Word.INCONCLUSIVE and "not after Holm" in p.why and "0.975" in p.why
    assert "Holm" in v.correction and "Holm" in rule.describe()


def test_any_of_holm_steps_down():
    # The strong part is confirmed at 97.5 %; then the borderline one is tested at 95 %.
    rule = AnyOf((("p", single("p")), ("q", single("q"))))
    v = rule.decide({"p": arm(*BORDERLINE), "q": arm(5.0, 5.1, 4.9)}, Context())
    assert v.status == Word.HOLDS
    assert [x.status for _, x in v.parts] == [Word.HOLDS, Word.HOLDS]
    assert "0.95" in dict(v.parts)["p"].correction and "2 confirmed" in v.correction


def test_all_of_does_not_hold_only_after_holm():
    neg = tuple(-x for x in BORDERLINE)
    rule = AllOf((("p", single("p")), ("q", single("q"))))
    v = rule.decide({"p": arm(*neg), "q": arm(5.0, 5.1, 4.9)}, Context())
    assert (
        single("p").decide({"p": arm(*neg)}, Context()).status == Word.DOES_NOT_HOLD
    )  # alone it would
    assert v.status == Word.INCONCLUSIVE and dict(v.parts)["p"].status == Word.INCONCLUSIVE
    clear = rule.decide({"p": arm(-5.0, -5.1, -4.9), "q": arm(5.0, 5.1, 4.9)}, Context())
    assert clear.status == Word.DOES_NOT_HOLD
    both = rule.decide({"p": arm(*BORDERLINE), "q": arm(5.0, 5.1, 4.9)}, Context())
    assert both.status == Word.HOLDS  # every part at 95 %: no correction needed


# ---- controls and "not testable here"


def test_a_failing_control_makes_a_claim_not_testable_never_false():
    ctx = Context(plateau_h=3.0)
    claim = Claim("c", "p fails", "t", Fails("p", seeds=3),
                  controls=(control("q", seeds=3),))  # fmt: skip
    plateau, learned = arm(3.1, 3.12, 3.08), arm(2.5, 2.55, 2.45)
    assert claim.arms == ("p", "q")
    assert claim.decide({"p": plateau, "q": learned}, ctx).status == Word.HOLDS
    v = claim.decide({"p": plateau, "q": plateau}, ctx)
    assert v.status == Word.NOT_TESTABLE and "control 'q trains' does not hold" in v.why
    assert (
        v.controls[0][1].status == Word.DOES_NOT_HOLD
        and v.to_dict()["controls"][0]["control"] == "q trains"
    )
    # the claim's own result does not hold either: still not testable, not "does not hold"
    v = claim.decide({"p": learned, "q": plateau}, ctx)
    assert v.status == Word.NOT_TESTABLE and "not decided on: does not hold" in v.why
    assert "not testable here" in claim.describe()


def test_a_part_with_a_failing_control():
    ctx = Context(plateau_h=3.0)
    part = Controlled(Fails("p", seeds=3), (control("q", seeds=3),))
    rule = AllOf((("p fails", part), ("r trains", Trains("r", seeds=3))))
    plateau, learned = arm(3.1, 3.12, 3.08), arm(2.5, 2.55, 2.45)
    assert rule.arms() == ("p", "q", "r") and part.delta == 0.0
    v = rule.decide({"p": plateau, "q": plateau, "r": learned}, ctx)
    assert v.status == Word.NOT_TESTABLE and dict(v.parts)["p fails"].status == Word.NOT_TESTABLE
    v = rule.decide({"p": plateau, "q": plateau, "r": plateau}, ctx)
    assert v.status == Word.DOES_NOT_HOLD  # a testable part does not hold
    with pytest.raises(ValueError, match="trains"):
        control("q", "learns", seeds=3)


# ---- the plateau bar


def test_the_plateau_bar_is_the_validation_cross_entropy():
    raw = bytes(range(200)) * 100 + b"ab" * 10_000
    c = corpus_from_bytes(raw, "test")
    p = [0.0] * VOCAB_SIZE
    for b in c.train.tolist():
        p[b] += 1
    p = [(x + 1) / (c.train.numel() + VOCAB_SIZE) for x in p]  # add-one: unseen bytes are finite
    want = -sum(math.log(p[b]) for b in c.val.tolist()) / c.val.numel()
    assert c.unigram_val_xent() == pytest.approx(want)
    assert c.describe()["unigram_val_xent"] == pytest.approx(want)
    unseen = corpus_from_bytes(b"a" * 9000 + b"z" * 1000, "t")  # a validation byte never trained
    assert math.isfinite(unseen.unigram_val_xent())


def test_decide_all_measures_against_the_plateau_it_is_given():
    claim = Claim("f", "p fails", "t", Fails("p", seeds=3))
    study = Study("s", "", (), ())
    object.__setattr__(study, "claims", (claim,))  # arms need configs; the rule needs none
    results = {"p": arm(3.0, 3.01, 2.99)}
    assert decide_all(study, results, 3.0)[0][1].status == Word.HOLDS  # above H − 0.05
    assert decide_all(study, results, 3.2)[0][1].status == Word.DOES_NOT_HOLD
    assert "validation bytes" in claim.describe()


def test_seeds_merge_and_serialise():
    a = Seeds((0, 1), (1,), (), (), (2,))
    b = Seeds((0, 1, 2), (), (0,), (), ())
    m = a.merge(b)
    assert m.n == 3 and m.diverged == (1,) and m.stalled == (0,) and m.unpaired == (2,)
    assert m.to_dict()["diverged_seeds"] == [1]


def test_the_trimmed_estimate_is_yuens_and_ignores_a_stalled_round():
    import numpy as np
    from scipy.stats import mstats

    rounds = [0.03, 0.02, 0.05, 0.01, 0.04, 0.0, 0.06, 0.03, 0.02, 0.03, 0.04, 0.05, 0.02, 0.01]
    est = TrimmedMean().estimate(rounds)
    lo, hi = mstats.trimmed_mean_ci(np.array(rounds), limits=(0.2, 0.2), alpha=0.05)
    assert (est.lo, est.hi) == pytest.approx((lo, hi)) and est.n == len(rounds)
    stalled = TrimmedMean().estimate([*rounds[:-1], -0.47])  # one round the machine stalled
    assert stalled.hi < 0.05 and stalled.lo > 0  # still decided against δ = 0.05
    assert Mean().estimate([*rounds[:-1], -0.47]).lo < -0.02  # the plain mean's interval is not
    assert TrimmedMean().estimate([0.1, 0.2, 0.3]) == Mean().estimate(
        [0.1, 0.2, 0.3]
    )  # too few to trim


def test_a_claim_its_study_runs_too_few_seeds_for_is_not_testable_by_design():
    one = Claim("one", "p trains", "t", Trains("p", seeds=1))
    study = Study("s", "", (), ())
    object.__setattr__(study, "claims", (one,))
    v = decide_all(study, {"p": arm(1.0)}, 3.0)[0][1]  # far below the bar, but one seed
    assert v.status == Word.NOT_TESTABLE and "too few for any 95% interval" in v.why
    assert "n=1 no interval exists" in claim_text.sentence(one, v, 3.0)
    # the same claim on arms another claim runs three seeds of is decided on all three
    object.__setattr__(study, "claims", (one, Claim("three", "s", "t", Trains("p", seeds=3))))
    assert decide_all(study, {"p": arm(1.0, 1.1, 0.9)}, 3.0)[0][1].status == Word.HOLDS
    # seeds missing from the runs leave it inconclusive: the design could decide it
    assert decide_all(study, {"p": arm(1.0)}, 3.0)[0][1].status == Word.INCONCLUSIVE
    # a median needs six: with five seeds no outcome decides it either
    for n, want in ((5, Word.NOT_TESTABLE), (6, Word.HOLDS)):
        rule = Contrast(((1, "p", "final_val_loss"),), ">0", 0.0, n, trim=0.5)
        object.__setattr__(study, "claims", (Claim("m", "p is positive", "t", rule),))
        assert decide_all(study, {"p": arm(*[1.0] * n)}, 3.0)[0][1].status == want


def test_a_claim_that_says_why_its_design_cannot_test_it_is_not_testable_whatever_it_shows():
    why = "the source compares each arm at its best learning rate"
    one = Claim("one", "p trains", "t", Trains("p", seeds=3), not_testable=why)
    study = Study("s", "", (), ())
    object.__setattr__(study, "claims", (one,))
    v = decide_all(study, {"p": arm(1.0, 1.1, 0.9)}, 3.0)[0][1]  # it would hold
    assert v.status == Word.NOT_TESTABLE and v.why.startswith(why) and "not decided on" in v.why
