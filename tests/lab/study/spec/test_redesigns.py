"""The designs #72 registers for statements the presets left not testable here by choice: each
claim reads the arms its statement needs and no more (run alone with ``--set only=[...]``)."""

from normlab.lab.study.decide.rules_contrast import Trains
from normlab.lab.study.run.plan import format_plan
from normlab.lab.study.run.runner import configure
from normlab.lab.study.spec.parse import load_builtin


def alone(preset: str, claim: str):
    return configure(load_builtin(preset, [f'only=["{claim}"]']), "cpu")


def test_deepnorm_trains_1000_layers_without_the_post_ln_arm():
    s = alone("deep", "deepnorm-alone-trains-1000")
    (c,) = s.claims
    assert isinstance(c.rule, Trains) and c.rule.arm == "deepnorm-L1000" and c.seeds == 3
    assert c.rule.margin == 0.15  # the bar of the claim it replaces, and of its control
    # DeepNorm at 1000 blocks and its 100-block control, three seeds each: no Post-LN arm
    assert {a.name: s.seeds(a.name) for a in s.arms} == {"deepnorm-L1000": 3, "deepnorm-L100": 3}
    m = next(a.config.model for a in s.arms if a.name == "deepnorm-L1000")
    assert (m.placement, m.n_layers, m.init) == ("deepnorm", 1000, "xavier")
    assert "6 runs" in format_plan(s) and "not testable" not in format_plan(s)
