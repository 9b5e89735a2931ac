"""The designs #72 registers for statements the presets left not testable here by choice: each
claim reads the arms its statement needs and no more (run alone with ``--set only=[...]``)."""

import dataclasses

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


def test_deepnorms_lr_sweep_runs_under_the_init_its_beta_is_written_for():
    s = alone("stability", "deepnorm-lr-robust-paper-init")
    (c,) = s.claims
    assert {r.delta for _, r in c.rule.parts()} == {0.05} and c.seeds == 3
    models = {a.name: a.config.model for a in s.arms}
    rates = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1]
    for d in (32, 64):
        deepnorm = [models[f"deepnorm-d{d}-lr{lr:g}"] for lr in rates]
        assert {(m.placement, m.init, m.dim) for m in deepnorm} == {("deepnorm", "xavier", d)}
        post = [models[f"post-default-d{d}-lr{lr:g}"] for lr in rates]  # the claim it redoes
        assert {(m.placement, m.init) for m in post} == {("post", "default")}
    assert len(s.arms) == 28 and {s.seeds(a.name) for a in s.arms} == {3}
    old = alone("stability", "deepnorm-lr-robust")
    assert {a.name for a in old.arms} - {a.name for a in s.arms} == {
        f"deepnorm-default-d{d}-lr{lr:g}" for d in (32, 64) for lr in rates
    }


def test_the_alpha_ablation_at_init_changes_alpha_alone():
    s = alone("quick", "deepnorm-alpha-evens-grads")
    (c,) = s.claims
    assert (c.rule.expect, c.rule.delta, c.seeds) == (">0", 0.1823215567939546, 16)
    models = {a.name: a.config.model for a in s.arms}
    assert set(models) == {"init-deepnorm-L24", "init-deepnorm-a1-L24"}
    paper, plain = models["init-deepnorm-L24"], models["init-deepnorm-a1-L24"]
    assert plain == dataclasses.replace(paper, deepnorm_alpha=1.0) and paper.deepnorm_alpha is None
    assert {a.config.steps for a in s.arms} == {0}  # untrained: no learning rate to check


def test_the_trained_alpha_ablation_is_deepnorms_arm_with_alpha_one_and_a_rate_check():
    s = alone("paper", "deepnorm-alpha-bounds-update")
    (c,) = s.claims
    assert c.seeds == 5 and [r.delta for _, r in c.rule.parts()] == [
        0.4054651081081644,
        0.1823215567939546,
    ]
    cfgs = {a.name: a.config for a in s.arms}
    paper, plain = cfgs["deepnorm-xavier-L24"], cfgs["deepnorm-a1-xavier-L24"]
    assert plain.model == dataclasses.replace(paper.model, deepnorm_alpha=1.0)
    assert plain.replace(model=paper.model) == paper  # the recipe and probes: the same
    assert {r.label for r in c.rate_checks} == {"lr ×0.3", "lr ×3"}  # the standard for rivals
    assert len(s.arms) == 6 and {s.seeds(a.name) for a in s.arms} == {5}


def test_a_config_field_added_at_its_old_value_leaves_every_fingerprint_as_it_was():
    from normlab.lab.study.spec.fingerprint import claim_design, fingerprint

    s = alone("paper", "deepnorm-alpha-bounds-update")
    (c,) = s.claims
    arms = claim_design(s, c)["arms"]
    paper, plain = arms["deepnorm-xavier-L24"], arms["deepnorm-a1-xavier-L24"]
    assert "deepnorm_alpha" not in paper["model"]  # at None: as before the field existed
    assert plain["model"]["deepnorm_alpha"] == 1
    assert fingerprint(paper) != fingerprint(plain)
