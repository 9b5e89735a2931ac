"""One standard for rivals (``decide.rivals``): a claim that compares trained recipes at one
shared learning rate needs its registered rate check; a check that decides the opposite makes it
not testable here; and the kinds that need no check say why."""

from __future__ import annotations

import pytest

from normlab.lab.study.decide import rivals
from normlab.lab.study.spec import load_builtin, parse_spec
from normlab.lab.study.spec.checks import SpecError
from normlab.lab.verdict import Verdict, Word

SPEC = """
name = "r"
[base]
steps = 4
batch_size = 2
seq_len = 8
[base.model]
dim = 16
n_layers = 2
n_heads = 2
max_seq_len = 8
[[arms]]
name = "a"
[[arms]]
name = "b"
model = { norm = "layernorm" }
[[arms]]
name = "init"
steps = 0
[[claims]]
name = "rival"
statement = "b beats a"
{check}
rule = "contrast"
terms = [[1, "a", "final_val_loss"], [-1, "b", "final_val_loss"]]
expect = ">0"
delta = 0.02
seeds = 3
[[claims]]
name = "bar"
statement = "a learns"
rule = "contrast"
terms = [[-1, "a", "final_val_loss"]]
const = 3.0
expect = ">0"
delta = 0.1
seeds = 3
[[claims]]
name = "untrained"
statement = "at init"
rule = "contrast"
terms = [[1, "init", "log_grad_ratio"], [-1, "init", "log_grad_ratio"]]
expect = ">0"
delta = 0.1
seeds = 3
"""


def _study(check: str = ""):
    return parse_spec(SPEC.replace("{check}", check), "r.toml")


def test_a_rate_check_adds_each_arm_at_the_other_rates_on_the_same_seeds():
    s = _study("rate_check = true")
    rival = s.claims[0]
    assert [c.factor for c in rival.rate_checks] == list(rivals.CHECK)
    arms = {a.name: a.config for a in s.arms}
    for check in rival.rate_checks:
        for arm, at in check.arms:
            assert arms[at] == arms[arm].replace(lr=round(arms[arm].lr * check.factor, 9))
            assert s.seeds(at) == s.seeds(arm) == 3
    assert set(rival.arms) == {"a", "b", "a.lr0.0003", "b.lr0.0003", "a.lr0.003", "b.lr0.003"}


@pytest.mark.parametrize(
    "check, kinds",
    [
        ("", [rivals.UNCHECKED, rivals.ONE_RECIPE, rivals.UNTRAINED]),
        ("rate_check = [0.5]", [rivals.CHECKED, rivals.ONE_RECIPE, rivals.UNTRAINED]),
    ],
)
def test_each_claim_meets_the_standard_by_its_kind(check, kinds):
    s = _study(check)
    assert [rivals.standard(s, c) for c in s.claims] == kinds


def test_every_trained_rival_contrast_of_the_presets_carries_the_check():
    for preset in ("quick", "paper", "stability"):
        s = load_builtin(preset)
        unmet = [c.name for c in s.claims if rivals.standard(s, c) == rivals.UNCHECKED]
        assert not unmet, (preset, unmet)


def test_without_the_check_a_rival_claim_is_not_testable_here():
    s = _study()
    v = rivals.unmet(s, s.claims[0], Verdict(Word.HOLDS, "+0.1 [+0.05, +0.15]"))
    assert v.status == Word.NOT_TESTABLE and "without the registered rate check" in v.why
    assert rivals.unmet(s, s.claims[1], Verdict(Word.HOLDS, "x")).status == Word.HOLDS


@pytest.mark.parametrize(
    "shared, checks, expected",
    [
        (Word.HOLDS, (Word.HOLDS, Word.INCONCLUSIVE), Word.HOLDS),  # no check contradicts
        (Word.HOLDS, (Word.DOES_NOT_HOLD, Word.HOLDS), Word.NOT_TESTABLE),
        (Word.DOES_NOT_HOLD, (Word.HOLDS,), Word.NOT_TESTABLE),
        (Word.INCONCLUSIVE, (Word.HOLDS, Word.DOES_NOT_HOLD), Word.INCONCLUSIVE),
        (Word.HOLDS, (Word.NOT_TESTABLE,), Word.HOLDS),  # a check that cannot decide: no veto
    ],
)
def test_a_check_that_decides_the_opposite_makes_the_claim_not_testable(shared, checks, expected):
    labelled = tuple((f"lr ×{i}", Verdict(w, "seen")) for i, w in enumerate(checks))
    v = rivals.checked(Verdict(shared, "at the shared rate"), labelled)
    assert v.status == expected and v.rate_checks == labelled
    if expected != shared:
        assert "depends on the learning rate" in v.why


@pytest.mark.parametrize(
    "value, message",
    [
        ("[]", "expected true or a list of factors"),
        ("[1.0]", "not 1"),
        ("[0.5, 0.5]", "appears twice"),
        ('"yes"', "expected true or a list of factors"),
    ],
)
def test_a_bad_rate_check_is_refused_at_its_key(value, message):
    with pytest.raises(SpecError, match=message) as e:
        _study(f"rate_check = {value}")
    assert "claims[0].rate_check" in str(e.value)


def test_only_cuts_a_study_to_some_claims_and_the_arms_they_read():
    s = parse_spec('only = ["bar"]\n' + SPEC.replace("{check}", ""), "r.toml")
    assert [c.name for c in s.claims] == ["bar"] and [a.name for a in s.arms] == ["a"]
    with pytest.raises(SpecError, match="did you mean 'bar'"):
        parse_spec('only = ["baz"]\n' + SPEC.replace("{check}", ""), "r.toml")
