"""Study specs (``normlab.lab.study.spec``): the shipped presets, grids and variants, the docs'
example run end to end, and one test per kind of mistake (one line, status 2, nothing run)."""

import json
import math
import re
from pathlib import Path

import pytest

from normlab.lab.cli import main
from normlab.lab.study.decide.rules_compound import AllOf, AnyOf
from normlab.lab.study.decide.rules_contrast import Contrast, Fails, Trains
from normlab.lab.study.decide.rules_timing import Timing
from normlab.lab.study.spec import parse as spec
from normlab.lab.study.spec.parse import load_builtin

ROOT = Path(__file__).resolve().parents[4]
DOC = (ROOT / "docs" / "spec.md").read_text()
EXAMPLE = re.search(r"```toml\n(.*?)```", DOC, re.S).group(1)  # the worked example


# ---- the built-in presets are the shipped spec files


@pytest.mark.parametrize("name", spec.builtin_names())
def test_shipped_spec_loads_through_the_loader_and_is_consistent(name):
    p = load_builtin(name)
    assert p.name == name and p == spec.parse_spec(spec.builtin_text(name), "x.toml")
    arms = [r.name for r in p.arms]
    assert len(set(arms)) == len(arms)
    for c in p.claims:
        assert set(c.arms) <= set(arms) and c.rule.describe()


def test_quick_key_arms_have_the_expected_configs():
    p = load_builtin("quick", whole=True)
    runs = {r.name: r.config for r in p.arms}
    base = runs["base"]
    assert (base.steps, base.batch_size, base.seq_len, base.lr, base.warmup_steps) == (
        200, 16, 64, 1e-3, 0,
    )  # fmt: skip
    m = base.model
    assert (m.arch, m.norm, m.placement, m.dim, m.n_layers, m.n_heads, m.max_seq_len) == (
        "llama", "rmsnorm", "pre", 64, 4, 4, 64,
    )  # fmt: skip
    # the output's range over training: probed at init, three times while training, at the end
    assert base.probe_steps == (0, 50, 100, 150, 200)
    plain = base.replace(probe_steps=(0,))
    assert runs["layernorm"] == plain.replace(eval_serving=True, model={"norm": "layernorm"})
    assert runs["no-final-norm"] == base.replace(model={"final_norm": False})
    decay = runs["decay-norms"]
    assert decay == plain.replace(decay_norms=True)
    # decay on the gains at the usual dose: the other weights' weight decay, nothing more
    assert decay.norm_weight_decay is None and decay.weight_decay == base.weight_decay == 0.1
    # BatchNorm as users meet it: pooled statistics served at 16 of 64 positions; accumulation
    bn = runs["batchnorm"]
    assert runs["batchnorm-pooled"] == plain.replace(
        eval_train_mode=True,
        eval_lengths=(16,),
        model={"norm": "batchnorm", "batchnorm_causal": False},
    )
    assert runs["batchnorm-accum4"] == plain.replace(grad_accum=4, model={"norm": "batchnorm"})
    assert bn.batch_size == runs["batchnorm-accum4"].batch_size == 16
    assert runs["batchnorm-B4"] == plain.replace(
        batch_size=4, eval_train_mode=True, eval_serving=True, model={"norm": "batchnorm"}
    )
    # no norm at the baseline's depth, with norm="none"'s default branch scaling and without
    scaled, unscaled = runs["no-norm"], runs["no-norm-unscaled-init"]
    assert scaled == plain.replace(model={"norm": "none"})
    assert scaled.model.branch_init_scale == pytest.approx(8**-0.5)
    assert unscaled == scaled.replace(model={"scale_branch_init": False})
    assert unscaled.model.branch_init_scale == 1.0
    deep = runs["post-L24"]
    assert deep == plain.replace(
        steps=150, warmup_steps=30, probe_steps=(0, 50, 100, 150),
        model={"arch": "gpt2", "norm": "layernorm", "placement": "post", "n_layers": 24},
    )  # fmt: skip
    # the deep rivals: one recipe, each with its source's init
    assert runs["deepnorm-L24"] == deep.replace(model={"placement": "deepnorm"})
    assert runs["pre-L24"] == deep.replace(model={"placement": "pre", "scale_branch_init": True})
    assert runs["pre-L24"].model.branch_init_scale == pytest.approx(48**-0.5)
    for init in ("xavier", "default"):
        post, pre = (runs["post-L6"], runs["pre-L6"]) if init == "xavier" else (
            runs["post-default-L6"], runs["pre-default-L6"])  # fmt: skip
        assert post.model.init == pre.model.init == init
        assert pre == post.replace(model={"placement": "pre"}) and post.warmup_steps == 0
    assert runs["init-deepnorm-L48"] == plain.replace(
        steps=0, model={"arch": "gpt2", "norm": "layernorm", "placement": "deepnorm",
                        "n_layers": 48},
    )  # fmt: skip
    assert [r.name for r in p.arms][:4] == [
        "init-post-L6", "init-pre-L6", "init-deepnorm-L6", "init-post-L12",
    ]  # fmt: skip
    claims = {c.name: c for c in p.claims}
    assert claims["post-ln-fails-deep"].rule == AllOf((
        ("post-L24 fails", Fails("post-L24", seeds=3)),
        ("deepnorm-L24 trains", Trains("deepnorm-L24", seeds=3)),
        ("post-L6 trains", Trains("post-L6", seeds=3)),
    ))  # fmt: skip
    assert claims["post-ln-fails-deep"].controls == (
        ("pre-L24 trains", Trains("pre-L24", seeds=3)),
    )
    assert "pre-L24" in claims["post-ln-fails-deep"].arms
    grow = claims["post-ln-grad-grows"].rule.parts()[0][1]
    assert grow == Contrast(((1, "init-post-L48", "log_grad_trend"),), ">0", math.log(1.2), 16,
                            matrix="mlp.w_out")  # fmt: skip
    assert claims["rmsnorm-faster"].rule == Timing("base", "layernorm", 0.05, processes=16)
    assert claims["rmsnorm-faster-torch-ops"].rule == Timing(
        "base", "layernorm", 0.05, what="torch_norm_ms", processes=16
    )
    assert claims["rmsnorm-faster"].plots == ("speed",)
    # the serving claims read arms the preset already trains, at those arms' seeds
    serving = ("batchnorm-forgot-eval", "batchnorm-padding")
    for name in serving + ("batchnorm-forgot-eval-B4", "batchnorm-padding-B4"):
        assert all(runs[a].eval_serving for a in claims[name].arms), name
        cap = 40 if name == "batchnorm-padding" else 8  # padding's cap raised after block 9
        assert {p.seeds for _, p in claims[name].rule.parts()} == {cap}
    # the source's claims read the batch-16 arms; batch 4 is a claim of its own
    for name in serving:
        assert {runs[a].batch_size for a in claims[name].arms} == {16}, name
        assert {runs[a].batch_size for a in claims[f"{name}-B4"].arms} == {4}, name
    # batch-mates hold by construction: a library test (test_batchnorm), not a claim
    assert "batchnorm-batch-mates" not in claims
    # Pre-LN's undiminished gradient is one-sided: ln(first / last) + ln 1.2 > 0 at each depth
    (_, l6), *_ = claims["pre-ln-grad-undiminished"].rule.parts()
    assert l6 == Contrast(((-1, "init-pre-L6", "log_grad_ratio"),), ">0", 0.0, 16,
                          const=math.log(1.2), matrix="mlp.w_out")  # fmt: skip
    # 000 §5.2 as written: ∂loss/∂x_l at init and while the 24-block model trains
    parts = dict(claims["pre-ln-input-grad-undiminished"].rule.parts())
    assert parts["training L24"].terms == ((1, "pre-L24", "log_input_grad_min_train"),)
    assert all(r.const == pytest.approx(math.log(1.2)) for r in parts.values())
    # the final norm: the output's range at the end and as training grew it, every rival
    # contrast checked at a third and three times the shared rate
    rng = dict(claims["final-norm-bounds-output-range"].rule.parts())
    assert {m for r in rng.values() for _, _, m in r.terms} == {
        "log_logit_absmax_end",
        "log_logit_absmax_drift",
    }
    for name in ("final-norm-needed", "rmsnorm-matches-quality", "batchnorm-worse-than-layernorm"):
        checks = claims[name].rate_checks
        assert [c.factor for c in checks] == [0.3, 3.0], name
        for c in checks:
            for arm, at in c.arms:
                assert runs[at] == runs[arm].replace(lr=round(runs[arm].lr * c.factor, 9)), at


def test_paper_arms_test_each_claim_in_its_sources_setting():
    p = load_builtin("paper")
    runs = {r.name: r.config for r in p.arms}
    # at-init profiles at d=256; Xavier's embeddings scaled by √d, torch's N(0, 1) rows are not
    for name, cfg in runs.items():
        if name.startswith("init-"):
            assert cfg.steps == 0 and cfg.model.dim == 256 and cfg.model.n_layers <= 48
            assert cfg.model.scale_embeddings == (cfg.model.init == "xavier")
    # DeepNet's update: DeepNorm and Post-LN probed at the same early steps, the same recipe
    for init in ("xavier", "default"):
        dn, post = runs[f"deepnorm-{init}-L24"], runs[f"w0-lr0.001-{init}-post-L24"]
        assert dn.probe_steps == post.probe_steps and set(range(21)) <= set(dn.probe_steps)
        assert dn == post.replace(model={"placement": "deepnorm"})
        # DeepNorm vs Pre-LN: each with its source's init, the same warmup
        pre, dnw = runs[f"pre-scaled-{init}-L24-w100"], runs[f"deepnorm-{init}-L24-w100"]
        assert pre.model.scale_branch_init and pre.warmup_steps == dnw.warmup_steps > 0
        assert pre == dnw.replace(model={"placement": "pre", "scale_branch_init": True})
    # the depth sweep: one recipe at 6, 12 and 24 blocks, the shallow ones block-dropped
    for pl, deep in (("post", "w0-lr0.001-default-post-L24"), ("pre", "pre-default-L24")):
        for n in (6, 12):
            cfg = runs[f"{pl}-default-L{n}"]
            assert cfg.block_drop_batches > 0
            assert cfg.replace(block_drop_batches=0, probe_steps=runs[deep].probe_steps) == (
                runs[deep].replace(model={"n_layers": n})
            )
    # decay on the gains at a budget where it acts, the other weights' decay unchanged
    decay, base = runs["decay-norms"], runs["base"]
    assert decay.lr * decay.norm_weight_decay * decay.steps >= 0.5
    assert decay == base.replace(
        decay_norms=True, norm_weight_decay=decay.norm_weight_decay, probe_steps=decay.probe_steps
    )
    # the output's range over training: probed at init, while training and after the last step
    assert runs["no-final-norm"].probe_steps == base.probe_steps == (0, 150, 300, 450, base.steps)
    # regularization: the same small model on the same slice, only the norm differs
    small = runs["small-corpus-layernorm"]
    assert 0 < small.train_slice and small.steps * small.batch_size * small.seq_len >= (
        10 * small.train_slice
    )  # many epochs
    for norm in ("batchnorm", "none"):
        assert runs[f"small-corpus-{norm}"] == small.replace(model={"norm": norm})
    assert small.eval_interval > 0  # the gaps at equal training loss need the curve
    frozen = runs["small-corpus-batchnorm-frozen"]  # the same BatchNorm without batch noise
    assert frozen == runs["small-corpus-batchnorm"].replace(freeze_norm_stats=60)
    # Mix-LN and its rival: one init, suited to the width (not GPT-2's d=768 N(0, 0.02))
    assert {runs[f"{pl}-L24-warmup"].model.init for pl in ("mix", "pre")} == {"default"}
    claims = {c.name: c for c in p.claims}
    control = claims["no-decay-on-norms"].controls[0][1]
    assert control.delta >= 0.2  # a move of at least 20 % of the gains' initial 1
    # on the CPU Sandwich-LN has nothing to rescue: its claim needs Pre-LN to fail
    assert claims["sandwich-trains-deep"].controls == (
        ("pre-xavier-L24 fails", Fails("pre-xavier-L24", seeds=3)),
    )
    assert "sandwich-rescues-pre-bf16" in {c.name for c in load_builtin("gpu").claims}


def test_stability_claims_are_paired_against_their_rival():
    p = load_builtin("stability")
    claims, runs = {c.name: c for c in p.claims}, {r.name: r.config for r in p.arms}
    dilutes = claims["pre-ln-dilutes-depth"]
    pair = ("pre-default-d64-lr0.001", "post-default-d64-lr0.001")
    assert {a for _, a, _ in dilutes.rule.terms} == set(pair)
    assert len(dilutes.controls) == 2 and not dilutes.rule.const  # both train; no absolute bar
    # the same recipe and depth, only the placement differs, under the init where Post-LN trains
    assert runs[pair[1]] == runs[pair[0]].replace(model={"placement": "post"})
    assert runs[pair[0]].model.init == "default"
    # the final norm: the same 8-block model with and without it, probed over training, its
    # range decided at the end and as training grew it, each claim checked at two more rates
    final, nofinal = runs["final-d64"], runs["nofinal-d64"]
    assert nofinal == final.replace(model={"final_norm": False}) and len(final.probe_steps) == 5
    rng = claims["final-norm-bounds-output-range"]
    assert {m for _, r in rng.rule.parts() for _, _, m in r.terms} == {
        "log_logit_absmax_end",
        "log_logit_absmax_drift",
    }
    assert [c.factor for c in rng.rate_checks] == [0.3, 3.0]
    for name in ("pre-ln-lr-robust", "deepnorm-lr-robust"):  # under the init where Post-LN trains
        arms = {runs[a].model.init for a in claims[name].rule.arms()}
        assert arms == {"default"}
    ((_, grows),) = claims["peri-ln-curbs-variance"].controls  # a control that can fail
    assert {m for _, _, m in grows.terms} == {"log_resid_growth_drift"}
    ((_, massive),) = claims["peri-ln-fewer-massive-activations"].controls
    assert massive.const == pytest.approx(-math.log(100))  # the bar: max/median above 100


def test_print_spec_prints_a_file_the_loader_reads_back(tmp_path, capsys):
    assert main(["study", "--print-spec", "smoke"]) == 0
    (tmp_path / "mine.toml").write_text(capsys.readouterr().out)
    assert spec.load_spec(tmp_path / "mine.toml") == load_builtin("smoke")


# ---- the format: variants, grids, inherited parameters


BASE = """
[base]
steps = 12
batch_size = 4
seq_len = 16
eval_batches = 2

[base.model]
dim = 16
n_layers = 2
n_heads = 2
max_seq_len = 16
"""


def test_grids_name_their_arms_first_axis_slowest_and_variants_change_one_thing():
    p = spec.parse_spec(BASE + """
[[arms]]
name = "w{warmup_steps}-lr{lr:g}-{placement}"
model = { placement = "post" }
axes = { warmup_steps = [0, 4], lr = [3e-4, 1e-3] }

[[arms]]
name = "{norm}-L{n_layers}"
axes = { model = { norm = ["rmsnorm", "layernorm"] }, n_layers = [2, 3] }

[[arms]]
name = "wide"
model = { dim = 32, n_heads = 4 }

[[claims]]
name = "c"
statement = "s"
rule = "contrast"
terms = [[1, "wide", "final_val_loss"], [-1.5, "rmsnorm-L2", "final_val_loss"]]
expect = "!=0"
delta = 1
seeds = 2
""", "t.toml")  # fmt: skip
    runs = {r.name: r.config for r in p.arms}
    assert list(runs) == [
        "w0-lr0.0003-post", "w0-lr0.001-post", "w4-lr0.0003-post", "w4-lr0.001-post",
        "rmsnorm-L2", "rmsnorm-L3", "layernorm-L2", "layernorm-L3", "wide",
    ]  # fmt: skip
    assert runs["w4-lr0.0003-post"].warmup_steps == 4 and runs["w4-lr0.0003-post"].lr == 3e-4
    assert runs["layernorm-L3"].model.n_layers == 3 and runs["layernorm-L3"].eval_batches == 2
    assert (runs["wide"].model.dim, runs["wide"].model.n_heads) == (32, 4)
    assert runs["rmsnorm-L2"].model.vocab_size == 256 and runs["rmsnorm-L2"].model.init == "xavier"
    (claim,) = p.claims
    assert claim.rule == Contrast(
        ((1.0, "wide", "final_val_loss"), (-1.5, "rmsnorm-L2", "final_val_loss")), "≠0", 1.0, 2
    )
    assert claim.source == "" and claim.plots == ("loss", "seeds")


def test_parts_take_what_they_do_not_set_from_their_claim():
    p = spec.parse_spec(BASE + """
[[arms]]
name = "{placement}"
axes = { placement = ["pre", "post"] }

[[claims]]
name = "c"
statement = "s"
rule = "all_of"
seeds = 4
margin = 0.1
expect = "<0"
delta = 0.5

[[claims.parts]]
label = "pre trains"
rule = "trains"
arm = "pre"

[[claims.parts]]
label = "post fails"
rule = "fails"
arm = "post"
seeds = 2
margin = 0.2

[[claims.parts]]
label = "pre below post"
rule = "contrast"
terms = [[1, "pre", "final_val_loss"], [-1, "post", "final_val_loss"]]
""", "t.toml")  # fmt: skip
    assert p.claims[0].rule == AllOf((
        ("pre trains", Trains("pre", seeds=4, margin=0.1)),
        ("post fails", Fails("post", seeds=2, margin=0.2)),
        ("pre below post", Contrast(((1, "pre", "final_val_loss"), (-1, "post",
                                     "final_val_loss")), "<0", 0.5, 4)),
    ))  # fmt: skip


def test_any_of_claims_parse_and_reject_nesting():
    text = """
name = "t"
[base]
steps = 1
[base.model]
dim = 16
n_layers = 1
n_heads = 2
[[arms]]
name = "a{dyt_alpha:g}"
model = { norm = "dyt" }
axes = { dyt_alpha = [0.5, 2.0] }
[[arms]]
name = "rms"

[[claims]]
name = "some-alpha"
statement = "s"
source = "s"
rule = "any_of"
expect = "≈0"
delta = 0.03
seeds = 2

[[claims.parts]]
label = "alpha 0.5"
rule = "contrast"
terms = [[1, "a0.5", "final_val_loss"], [-1, "rms", "final_val_loss"]]

[[claims.parts]]
label = "alpha 2"
rule = "contrast"
terms = [[1, "a2", "final_val_loss"], [-1, "rms", "final_val_loss"]]
"""
    p = spec.parse_spec(text, "t.toml")
    assert isinstance(p.claims[0].rule, AnyOf) and len(p.claims[0].rule.parts()) == 2
    assert {r.name: r.config.model.dyt_alpha for r in p.arms[:2]} == {"a0.5": 0.5, "a2": 2.0}
    nested = text.replace(
        'rule = "contrast"\nterms = [[1, "a2"', 'rule = "all_of"\nterms = [[1, "a2"'
    )
    with pytest.raises(spec.SpecError, match="a part cannot itself be all_of"):
        spec.parse_spec(nested, "t.toml")


# ---- the docs' worked example, at toy size, end to end

TOY = {
    "steps": "12", "batch_size": "4", "seq_len": "16", "warmup_steps": "2", "dim": "16",
    "n_layers": "2", "n_heads": "2", "max_seq_len": "16", "seeds": "2",
}  # fmt: skip


def _toy(text: str) -> str:
    for key, value in TOY.items():
        text = re.sub(rf"(?m)^{key} = \S+", f"{key} = {value}", text)
    return text.replace("[base]\n", "[base]\neval_batches = 2\n")


def test_the_docs_example_loads_as_written():
    p = spec.parse_spec(EXAMPLE, "rms-vs-ln.toml")
    assert [r.name for r in p.arms] == ["rmsnorm", "layernorm", "rmsnorm-no-final-norm"]
    assert [p.seeds(r.name) for r in p.arms] == [3, 3, 3]
    assert p.arms[1].config.model.norm == "layernorm" and p.arms[1].config.model.dim == 128


def test_the_docs_example_runs_end_to_end(tmp_path, capsys):
    path = tmp_path / "rms-vs-ln.toml"
    # two fresh timing processes instead of 8: each is a spawned interpreter importing torch
    timed = 'rule = "timing"\n'
    assert EXAMPLE.count(timed) == 1
    path.write_text(_toy(EXAMPLE).replace(timed, timed + "processes = 2\n"))
    out = tmp_path / "out"
    argv = ["study", "--spec", str(path), "--out", str(out), "--workers", "1", "--threads", "1"]
    assert main([*argv, "--list"]) == 0
    assert f"--spec {path}" in capsys.readouterr().out and not out.exists()
    assert main([*argv, "--quiet"]) == 0
    assert (out / "report.html").stat().st_size and (out / "report.md").stat().st_size
    claims = json.loads((out / "claims.json").read_text())
    assert claims["preset"] == "rms-vs-ln"
    names = [c["name"] for c in claims["claims"]]
    assert names == ["rmsnorm-matches-layernorm", "rmsnorm-faster", "final-norm-needed",
                     "both-train"]  # fmt: skip
    by_name = {c["name"]: c for c in claims["claims"]}
    assert by_name["rmsnorm-matches-layernorm"]["n"] == by_name["final-norm-needed"]["n"] == 2
    assert [part["n"] for part in by_name["both-train"]["parts"]] == [2, 2]
    assert by_name["rmsnorm-faster"]["n"] == 2  # the serial phase's fresh processes
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 6 and {json.loads(x)["preset"] for x in lines} == {"rms-vs-ln"}


# ---- mistakes: one line naming the file, the key and what was expected; status 2; nothing run


def _bad(tmp_path, capsys, text: str) -> str:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    out = tmp_path / "out"
    assert main(["study", "--spec", str(path), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"normlab study: {path}: ")
    assert not out.exists()  # rejected before anything ran or was written
    return err.strip().removeprefix(f"normlab study: {path}: ")


def _edit(old: str, new: str) -> str:
    assert old in EXAMPLE
    return EXAMPLE.replace(old, new, 1)


def test_unknown_key_at_the_top(tmp_path, capsys):
    err = _bad(tmp_path, capsys, "seeds = 3\n" + EXAMPLE)
    assert err.startswith("seeds: unknown key; expected one of: name, description, base")


def test_unknown_field_names_its_key_and_the_near_miss(tmp_path, capsys):
    err = _bad(tmp_path, capsys, _edit("n_layers = 6", "n_layer = 6"))
    assert err == "base.model.n_layer: unknown key; did you mean 'n_layers'?"
    err = _bad(tmp_path, capsys, _edit("model = { final_norm = false }", "final_norm = false"))
    assert err.startswith("arms[1].final_norm: a model field: set it in the model table")


def test_fields_the_study_sets_are_refused(tmp_path, capsys):
    err = _bad(tmp_path, capsys, _edit("lr = 1e-3", "seed = 1"))
    assert err.startswith("base.seed: cannot be set in a spec: the study sets each run's seed")
    err = _bad(tmp_path, capsys, _edit("n_layers = 6", "n_layers = 6\nvocab_size = 300"))
    assert err.startswith("base.model.vocab_size: cannot be set in a spec: the data's")


def test_the_fields_not_settable_are_the_field_tables():
    """The spec loader reads which fields it refuses from the lab's field table."""
    assert set(spec.NOT_IN_SPEC) == {"seed", "threads", "vocab_size"}
    assert "seed" not in spec.TRAIN_FIELDS and "vocab_size" not in spec.MODEL_FIELDS


def test_unknown_rule_type(tmp_path, capsys):
    err = _bad(tmp_path, capsys, _edit('rule = "timing"', 'rule = "faster"'))
    assert err == (
        'claims[1].rule: unknown rule "faster"; expected one of: contrast, all_of, any_of, '
        "fails, trains, timing, lr_sensitivity"
    )


def test_a_claim_naming_an_arm_not_in_the_study(tmp_path, capsys):
    err = _bad(tmp_path, capsys, _edit('slow = "layernorm"', 'slow = "layer-norm"'))
    assert err == "claims[1].slow: \"layer-norm\" is not an arm of this study; did you mean " \
        "'layernorm'?"  # fmt: skip
    err = _bad(tmp_path, capsys, _edit('arm = "layernorm"', 'arm = "groupnorm"'))
    assert err.startswith('claims[3].parts[1].arm: "groupnorm" is not an arm of this study')


def test_a_wrong_type(tmp_path, capsys):
    err = _bad(tmp_path, capsys, _edit("steps = 400", 'steps = "400"'))
    assert err == 'base.steps: expected an int, got "400"'
    err = _bad(tmp_path, capsys, _edit("delta = 0.02", 'delta = "small"'))
    assert err == 'claims[2].delta: expected a number, got "small"'


def test_an_out_of_range_value_reuses_the_dataclasses_validation(tmp_path, capsys):
    wrong = "model = { final_norm = false, dim = 100, n_heads = 3 }"
    err = _bad(tmp_path, capsys, _edit("model = { final_norm = false }", wrong))
    assert err == "arms[1].model.dim: dim=100 must be divisible by n_heads=3"
    err = _bad(tmp_path, capsys, _edit("steps = 400", "steps = -1"))
    assert err == "base.steps: steps must be >= 0, got -1"
    err = _bad(tmp_path, capsys, _edit('"rmsnorm", "layernorm"]', '"rmsnorm", "groupnorm"]'))
    assert err.startswith("arms[0].axes.norm: norm must be one of (") and "groupnorm" in err
    err = _bad(tmp_path, capsys, _edit("seeds = 3\n", "seeds = 0\n"))
    assert err == "claims[0].seeds: expected an int >= 1, got 0"


def test_an_unknown_measure(tmp_path, capsys):
    err = _bad(tmp_path, capsys, _edit('"layernorm", "final_val_loss"]', '"layernorm", "loss"]'))
    assert err.startswith('claims[0].terms[1][2]: unknown measure "loss"; expected one of: '
                          "final_val_loss, ")  # fmt: skip
    misspelt = _edit('"layernorm", "final_val_loss"]', '"layernorm", "final_val_los"]')
    err = _bad(tmp_path, capsys, misspelt)
    assert err.endswith("""unknown measure "final_val_los"; did you mean 'final_val_loss'?""")


def test_a_bad_expect(tmp_path, capsys):
    err = _bad(tmp_path, capsys, _edit('expect = ">0"', 'expect = ">="'))
    assert err == 'claims[2].expect: expected one of ">0", "<0", "≠0", "≈0" (or "!=0", "~0"), ' \
        'got ">="'  # fmt: skip


def test_duplicate_arm_names_and_a_bad_pattern(tmp_path, capsys):
    err = _bad(tmp_path, capsys, _edit('name = "rmsnorm-no-final-norm"', 'name = "layernorm"'))
    assert err == "arms[1].name: arm 'layernorm' is already made by arms[0]"
    err = _bad(tmp_path, capsys, _edit('name = "{norm}"', 'name = "{nrom}"'))
    assert err == "arms[0].name: {nrom} in '{nrom}' is not a training or model field"


def test_not_toml_and_no_file(tmp_path, capsys):
    assert _bad(tmp_path, capsys, "name = ").startswith("not valid TOML: ")
    assert main(["study", "--spec", str(tmp_path / "none.toml")]) == 2
    assert capsys.readouterr().err == f"normlab study: {tmp_path / 'none.toml'}: no such file\n"


def test_spec_and_preset_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as e:
        main(["study", "--spec", "x.toml", "--preset", "smoke"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.splitlines()) == 1
    assert "--preset: not allowed with argument --spec" in err


def test_controls_on_claims_and_parts(tmp_path, capsys):
    from normlab.lab.study.decide.rules_compound import Controlled
    from normlab.lab.study.spec.claim_loader import control

    text = _edit('label = "rmsnorm trains"', 'label = "rmsnorm trains"\ncontrols = ["layernorm"]')
    text = text.replace('rule = "all_of"\n', 'rule = "all_of"\ncontrols = [{ arm = "rmsnorm", '
                        'expect = "trains", margin = 0.2 }]\n', 1)  # fmt: skip
    study = spec.parse_spec(text, "x.toml")
    both = next(c for c in study.claims if c.name == "both-train")
    assert both.controls == (control("rmsnorm", seeds=3, margin=0.2),)
    part = both.rule.parts()[0][1]
    assert isinstance(part, Controlled) and part.controls == (control("layernorm", seeds=3),)
    bad = text.replace('expect = "trains", margin', 'expect = "learns", margin')
    assert _bad(tmp_path, capsys, bad) == (
        'claims[3].controls[0].expect: expected "trains" or "fails", got "learns"'
    )
    err = _bad(tmp_path, capsys, text.replace('controls = ["layernorm"]', 'controls = ["ln"]'))
    assert err.startswith('claims[3].parts[0].controls[0].arm: "ln" is not an arm of this study')
    err = _bad(tmp_path, capsys, text.replace('controls = ["layernorm"]', "controls = 3"))
    assert err.startswith("claims[3].parts[0].controls: expected a list of controls, e.g.")
    err = _bad(tmp_path, capsys, text.replace("margin = 0.2", "margn = 0.2"))
    assert err == "claims[3].controls[0].margn: unknown key; did you mean 'margin'?"


def test_any_and_measured_controls():
    from normlab.lab.study.decide.rules_compound import AnyOf
    from normlab.lab.study.decide.rules_contrast import Contrast
    from normlab.lab.study.spec.claim_loader import control

    controls = (
        'controls = [{ any = ["rmsnorm", "layernorm"], expect = "trains" }, { label = "gains '
        'moved", rule = "contrast", terms = [[1, "rmsnorm", "norm_weight_mean"]], expect = ">0", '
        "delta = 0.05 }]"
    )
    text = _edit('label = "rmsnorm trains"', f'label = "rmsnorm trains"\n{controls}')
    study = spec.parse_spec(text, "x.toml")
    part = next(c for c in study.claims if c.name == "both-train").rule.parts()[0][1]
    (any_label, any_rule), (label, measured) = part.controls
    assert isinstance(any_rule, AnyOf) and any_label.startswith("one of 2 arms")
    assert (any_label, any_rule) == control(("rmsnorm", "layernorm"), seeds=3)
    assert label == "gains moved" and measured == Contrast(
        ((1.0, "rmsnorm", "norm_weight_mean"),), ">0", 0.05, 3
    )


def test_a_claims_not_testable_reason_is_read_and_must_be_a_sentence(tmp_path):
    p = load_builtin("paper")
    claims = {c.name: c for c in p.claims}
    assert "best learning rate" in claims["deepnorm-beats-pre"].not_testable
    assert not claims["final-norm-needed"].not_testable
    src = (Path(spec.__file__).parent / "specs" / "smoke.toml").read_text()
    bad = src.replace("[[claims]]\n", "[[claims]]\nnot_testable = 3\n", 1)
    (tmp_path / "bad.toml").write_text(bad)
    with pytest.raises(spec.SpecError, match=r"not_testable.*expected a non-empty string"):
        spec.load_spec(tmp_path / "bad.toml")


NEEDS = (
    BASE
    + """
[[arms]]
name = "a"
{extra}

[[arms]]
name = "b"

[[claims]]
name = "c"
statement = "s"
rule = "contrast"
terms = [[1, "a", "log_logit_absmax_end"], [-1, "b", "final_val_loss"]]
expect = ">0"
delta = 0.1
seeds = 2
"""
)


def test_a_spec_that_reads_a_measure_its_arm_cannot_produce_is_refused_at_load():
    with pytest.raises(spec.SpecError) as e:
        spec.parse_spec(NEEDS.format(extra=""), "x.toml")
    msg = str(e.value)
    assert "claims[0]" in msg and "'log_logit_absmax_end'" in msg and "arm 'a'" in msg
    assert "probe_steps" in msg and "[0]" in msg  # the setting to change, and what it has
    ok = spec.parse_spec(NEEDS.format(extra="probe_steps = [0, 12]"), "x.toml")
    assert [c.name for c in ok.claims] == ["c"]


def test_a_compound_claims_part_is_checked_for_what_its_measure_needs():
    compound = (
        BASE
        + """
[[arms]]
name = "a"

[[arms]]
name = "b"
eval_serving = true
eval_sequences = 16

[[claims]]
name = "c"
statement = "s"
rule = "all_of"
seeds = 2
expect = ">0"
delta = 0.1

[[claims.parts]]
label = "loss"
rule = "contrast"
terms = [[1, "a", "final_val_loss"]]

[[claims.parts]]
label = "served"
rule = "contrast"
terms = [[1, "a", "forgot_eval_gap"], [-1, "b", "forgot_eval_gap"]]
"""
    )
    with pytest.raises(spec.SpecError, match=r"part 'served': measure 'forgot_eval_gap' on arm 'a' "
                       r"needs eval_serving = true; the arm has eval_serving = False"):  # fmt: skip
        spec.parse_spec(compound, "x.toml")
