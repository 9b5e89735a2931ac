"""A spec's extended claims (``extended = true`` on a claim): left out of its default run with
the arms only they read, run with ``extended = true`` on the study (``--set extended=true``),
by ``only``, or where the lab reads every design (``whole``); never part of a claim's design."""

import pytest

from normlab.lab.study import spec
from normlab.lab.study.spec.checks import SpecError
from normlab.lab.study.spec.fingerprint import claim_design, fingerprint

SPEC = """
name = "ext"
[base]
steps = 0
[base.model]
dim = 8
n_layers = 1
n_heads = 1
[[arms]]
name = "{norm}"
axes = { norm = ["rmsnorm", "layernorm", "none"] }
[[claims]]
name = "core"
statement = "s"
rule = "contrast"
terms = [[1, "rmsnorm", "attn_branch_ratio"], [-1, "layernorm", "attn_branch_ratio"]]
expect = ">0"
delta = 0.1
seeds = 4
[[claims]]
name = "more"
statement = "s"
%s
rule = "contrast"
terms = [[1, "none", "attn_branch_ratio"], [-1, "layernorm", "attn_branch_ratio"]]
expect = ">0"
delta = 0.1
seeds = 8
"""
EXTENDED = SPEC % "extended = true"


def _names(study) -> tuple[list[str], list[str]]:
    return [c.name for c in study.claims], [a.name for a in study.arms]


def test_the_default_run_leaves_out_the_extended_claims_and_the_arms_only_they_read():
    study = spec.parse_spec(EXTENDED, "x.toml")
    assert _names(study) == (["core"], ["rmsnorm", "layernorm"])
    assert study.left_out == ("more",) and study.seeds("layernorm") == 4


@pytest.mark.parametrize(
    "how",
    [
        {"overrides": ["extended=true"]},
        {"whole": True},
    ],
)
def test_extended_true_or_whole_runs_every_claim(how):
    study = spec.parse_spec(EXTENDED, "x.toml", **how)
    assert _names(study) == (["core", "more"], ["rmsnorm", "layernorm", "none"])
    assert study.left_out == () and study.seeds("layernorm") == 8


def test_only_runs_an_extended_claim_it_names():
    study = spec.parse_spec(EXTENDED, "x.toml", overrides=['only=["more"]'])
    assert _names(study) == (["more"], ["layernorm", "none"]) and study.left_out == ()


def test_whether_a_claim_is_extended_is_not_part_of_its_design():
    marked = spec.parse_spec(EXTENDED, "x.toml", whole=True)
    plain = spec.parse_spec(SPEC % "", "x.toml")
    assert _names(plain) == _names(marked) and plain.left_out == ()
    for a, b in zip(marked.claims, plain.claims, strict=True):
        assert fingerprint(claim_design(marked, a)) == fingerprint(claim_design(plain, b))


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (SPEC % "extended = 1", r"claims\[1\].extended"),
        ('extended = "yes"\n' + EXTENDED, "extended"),
    ],
)
def test_extended_must_be_a_boolean(text, where):
    with pytest.raises(SpecError, match=rf"{where}: expected true or false"):
        spec.parse_spec(text, "x.toml")


def test_quick_leaves_out_what_its_published_rounds_run():
    quick, whole = spec.load_builtin("quick"), spec.load_builtin("quick", whole=True)
    names = {c.name for c in whole.claims}
    assert quick.left_out and set(quick.left_out) <= names
    assert {c.name for c in quick.claims} == names - set(quick.left_out)
    read = {a for c in quick.claims for a in c.arms}
    assert {a.name for a in quick.arms} == read  # no arm trained for a claim left out
