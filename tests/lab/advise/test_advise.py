"""normlab advise: a Hugging Face config read as JSON, its twin, the study spec, the advice, and
the command end to end at the smoke size on the shipped configs."""

from __future__ import annotations

import json
import math
import shutil

import pytest

from normlab.lab.advise import hf_config
from normlab.lab.advise.advice import blocks, headline, lead, page
from normlab.lab.advise.engine import plan, shipped_config, shipped_configs
from normlab.lab.advise.twin import SCALES, make_twin, scale_of, twin_json
from normlab.lab.advise.twin_spec import spec_text
from normlab.lab.cli import main
from normlab.lab.kit import doc as d
from normlab.lab.kit.errors import UsageError
from normlab.lab.study.decide import decide_all
from normlab.lab.study.decide.rules_lr_sensitivity import LRSensitivity
from normlab.lab.study.run.runner import StudyResult
from normlab.lab.study.run.study_json import StudyMeta
from normlab.lab.study.spec.parse import load_spec
from normlab.lab.train.result import RunResult
from normlab.lab.verdict import Word

SHIPPED = {"llama": "llama-3.2-1b.json", "qwen3": "qwen3-0.6b.json", "gemma3": "gemma-3-1b.json"}


def _config(name: str) -> dict:
    with open(shipped_config(SHIPPED[name]), encoding="utf-8") as f:
        return json.load(f)


def _recipe(hf) -> dict:
    return {k: v for k, (v, _) in hf.recipe.items()}


# ---- reading config.json


def test_the_shipped_configs_are_package_data():
    assert set(SHIPPED.values()) <= set(shipped_configs())


@pytest.mark.parametrize("name", SHIPPED)
def test_the_recipe_is_what_the_config_says(name):
    cfg = _config(name)
    hf = hf_config.read(shipped_config(SHIPPED[name]))
    r = _recipe(hf)
    assert r["eps"] == cfg["rms_norm_eps"] and hf.recipe["eps"][1] == "rms_norm_eps"
    assert r["norm"] == "rmsnorm" and r["arch"] == "llama" and r["final_norm"]
    assert r["mlp_ratio"] == cfg["intermediate_size"] / cfg["hidden_size"]
    assert hf.sizes["layers"] == cfg["num_hidden_layers"]
    assert hf.sizes["kv_heads"] == cfg["num_key_value_heads"]
    gemma = name == "gemma3"
    assert r["placement"] == ("sandwich" if gemma else "pre")
    assert r["qk_norm"] == (name in ("qwen3", "gemma3"))
    assert (r["norm_offset"], r["rms_casting"]) == ((1.0, "gemma") if gemma else (0.0, "llama"))
    assert r["scale_embeddings"] == gemma
    if gemma:  # gemma-3-1b's config leaves tie_word_embeddings to Gemma3TextConfig's default
        assert r["tie_embeddings"]
        assert "absent: Gemma3TextConfig's default" in hf.recipe["tie_embeddings"][1]
    else:
        assert r["tie_embeddings"] == cfg["tie_word_embeddings"]
    # What the twin leaves out is said, never dropped.
    gaps = " ".join(hf.gaps)
    assert "grouped KV heads" in gaps and "rope_theta" in gaps and "torch_dtype" in gaps
    assert ("rope_scaling (llama3, factor 32)" in gaps) == (name == "llama")
    assert ("sliding-window attention in 5 of every 6 layers" in gaps) == gemma
    assert ("head_dim = " in gaps) == (name != "llama")  # Qwen3 and Gemma 3 widen their heads
    # The real model's size, from its sizes: Llama-3.2-1B has about 1.24 B parameters.
    if name == "llama":
        assert hf.params() == pytest.approx(1.236e9, rel=0.01)


# The shipped OLMo 2 and BERT configs (allenai/OLMo-2-0425-1B, bert-base-uncased).
OTHERS = {"olmo2": "olmo-2-0425-1b.json", "bert": "bert-base-uncased.json"}


def test_olmo2_recipe_is_the_reordered_norm_with_qk_norm():
    assert set(OTHERS.values()) <= set(shipped_configs())
    hf = hf_config.read(shipped_config(OTHERS["olmo2"]))
    r = _recipe(hf)
    assert (r["arch"], r["norm"], r["placement"], r["qk_norm"]) == (
        "llama", "rmsnorm", "reorder", True
    )  # fmt: skip
    assert r["eps"] == 1e-6 and hf.recipe["eps"][1] == "rms_norm_eps"
    assert (r["rms_casting"], r["norm_offset"]) == ("gemma", 0.0)  # × w in FP32, no offset
    assert r["mlp_ratio"] == 4.0 and not r["tie_embeddings"] and r["final_norm"]
    assert "x + N(F(x))" in hf.recipe["placement"][1]
    gaps = " ".join(hf.gaps)
    assert "rope_theta = 500000" in gaps and "over each whole projection" in gaps
    assert hf.params() == pytest.approx(1.48e9, rel=0.02)  # OLMo-2-0425-1B: ~1.5 B
    assert make_twin(hf, "quick").recipe_label() == "reordered-norm (OLMo 2) RMSNorm, QK-norm"


def test_bert_recipe_is_post_ln_and_its_objective_is_a_gap():
    hf = hf_config.read(shipped_config(OTHERS["bert"]))
    r = _recipe(hf)
    assert (r["arch"], r["norm"], r["placement"], r["qk_norm"]) == (
        "gpt2", "layernorm", "post", False
    )  # fmt: skip
    assert r["eps"] == 1e-12 and hf.recipe["eps"][1] == "layer_norm_eps"
    assert r["mlp_ratio"] == 4.0 and r["tie_embeddings"]
    assert "absent: BertConfig's default" in hf.recipe["tie_embeddings"][1]
    gaps = " ".join(hf.gaps)
    for what in ("masked-LM objective", "bidirectional attention", "token types"):
        assert what in gaps
    assert "hidden_act = gelu" in gaps and "hidden_dropout_prob = 0.1" in gaps
    assert hf.params() == pytest.approx(1.10e8, rel=0.03)  # bert-base: ~110 M
    twin = make_twin(hf, "quick")
    assert twin.config().model.placement == "post"


@pytest.mark.parametrize("name", OTHERS)
def test_list_prints_olmo2_and_bert_twins_with_their_sources(name, tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["advise", "--hf-config", OTHERS[name], "--list", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    if name == "olmo2":
        assert "reorder" in text and "rms_norm_eps" in text and "q_norm/k_norm" in text
    else:
        assert "layer_norm_eps" in text and "post" in text and "masked-LM objective" in text
    assert "estimated" in text and "recipe-as-good-as-pre" in text
    assert not out.exists()


@pytest.mark.parametrize("name", OTHERS)
def test_olmo2_and_bert_specs_load(name, tmp_path):
    hf = hf_config.read(shipped_config(OTHERS[name]))
    for preset in SCALES:
        path = tmp_path / f"{preset}.toml"
        path.write_text(spec_text(make_twin(hf, preset), "normlab advise"), "utf-8")
        assert load_spec(path).name == f"advise-{hf.model_type}"


def test_other_families():
    gpt2 = hf_config.from_dict(
        {
            "model_type": "gpt2",
            "n_embd": 768,
            "n_layer": 12,
            "n_head": 12,
            "n_inner": None,
            "n_positions": 1024,
            "vocab_size": 50257,
            "layer_norm_epsilon": 1e-5,
            "resid_pdrop": 0.1,
        }
    )
    r = _recipe(gpt2)
    assert (r["norm"], r["arch"], r["placement"], r["eps"]) == ("layernorm", "gpt2", "pre", 1e-5)
    assert r["tie_embeddings"] and r["mlp_ratio"] == 4.0 and "rms_casting" not in r
    assert gpt2.params() == pytest.approx(124.4e6, rel=0.01)
    assert any("dropout" in g for g in gpt2.gaps)
    gemma2 = hf_config.from_dict(
        {
            "model_type": "gemma2",
            "hidden_size": 2304,
            "num_hidden_layers": 26,
            "num_attention_heads": 8,
            "num_key_value_heads": 4,
            "intermediate_size": 9216,
            "vocab_size": 256000,
        }
    )
    r = _recipe(gemma2)
    assert r["placement"] == "sandwich" and not r["qk_norm"] and r["norm_offset"] == 1.0
    gaps = " ".join(gemma2.gaps)
    assert "attn_logit_softcapping (absent: Gemma2Config's default) = 50" in gaps
    assert "final_logit_softcapping" in gaps and "every other layer" in gaps
    # The multimodal Gemma 3 nests its decoder under text_config, with defaults for the rest.
    gemma3 = hf_config.from_dict(
        {
            "model_type": "gemma3",
            "vision_config": {},
            "text_config": {
                "hidden_size": 2560,
                "num_hidden_layers": 34,
                "intermediate_size": 10240,
                "model_type": "gemma3_text",
            },
        }
    )
    assert gemma3.sizes["heads"] == 8 and gemma3.recipe["qk_norm"][0]
    assert gemma3.recipe["mlp_ratio"][1].startswith("text_config.intermediate_size")
    assert any(g.startswith("vision_config") for g in gemma3.gaps)
    for mt in ("mistral", "qwen2", "phi3", "gemma"):
        hf = hf_config.from_dict(
            {
                "model_type": mt,
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "intermediate_size": 128,
                "vocab_size": 1000,
            }
        )
        assert hf.recipe["norm"][0] == "rmsnorm"
    with pytest.raises(UsageError, match="num_hidden_layers: expected a positive int"):
        hf_config.from_dict({"model_type": "llama", "hidden_size": 64, "vocab_size": 9})


def test_an_unsupported_model_type_is_one_line(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mamba", "hidden_size": 64}))
    assert main(["advise", "--hf-config", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(
        f'normlab advise: --hf-config {path}: model_type "mamba" is not '
        "supported; supported: llama, mistral, qwen2, qwen3, gemma, gemma2, "
        "gemma3_text, phi3, olmo2, bert, gpt2, gemma3"
    )
    assert not (tmp_path / "o").exists()  # nothing written
    path.write_text("{not json")
    assert main(["advise", "--hf-config", str(path)]) == 2
    assert "not valid JSON" in capsys.readouterr().err


# ---- the twin and its spec


@pytest.mark.parametrize("preset", SCALES)
@pytest.mark.parametrize("name", SHIPPED)
def test_the_written_spec_loads(tmp_path, name, preset):
    hf = hf_config.read(shipped_config(SHIPPED[name]))
    twin = make_twin(hf, preset)
    path = tmp_path / "advise-spec.toml"
    path.write_text(spec_text(twin, "normlab advise ..."), encoding="utf-8")
    study = load_spec(path)
    runs = {r.name: r.config for r in study.arms}
    assert runs["recipe"] == twin.config()
    for a in twin.alts:  # one change each from the recipe
        assert runs[a.arm] == twin.config().replace(model=a.model)
    m = runs["recipe"].model
    for k, (v, _) in hf.recipe.items():
        assert getattr(m, k) == v, k
    assert (m.dim, m.n_layers, m.vocab_size) == (SCALES[preset].dim, SCALES[preset].n_layers, 256)
    names = {c.name for c in study.claims}
    sweeps = [c.rule for c in study.claims if isinstance(c.rule, LRSensitivity)]
    if preset == "quick":
        placements = {"pre", "sandwich", "deepnorm", "post"} - {m.placement}
        assert {f"recipe-stabler-than-{p}" for p in placements} <= names
        for rule in sweeps:  # each sweep: >= 4 learning rates
            for sweep in (rule.stable, rule.unstable):
                assert len({runs[a].lr for a in sweep}) == len(sweep) >= 4
    else:
        assert not sweeps


# ---- the advice, from made-up results


def _fake(cfg, loss: float | None) -> RunResult:
    status = "ok" if loss is not None else "diverged"
    return RunResult(cfg.to_dict(), status, summary={"final_val_loss": loss})


def test_the_advice_reads_the_claims_back(tmp_path):
    twin = make_twin(hf_config.read(shipped_config(SHIPPED["llama"])), "quick")
    path = tmp_path / "s.toml"
    path.write_text(spec_text(twin, "normlab advise ..."), encoding="utf-8")
    study = load_spec(path)
    results: dict = {}
    for t in study.runs():
        lr, placement = t.config.lr, t.config.model.placement
        loss = 2.0 + 0.01 * t.index + 0.1 * math.log10(lr / 1e-3)  # the same in every arm ...
        if placement == "sandwich":
            loss -= 0.05  # ... but Sandwich is better,
        if placement == "post" and lr > 0.005:
            loss = None  # and Post-LN diverges at high learning rates
        results.setdefault(t.arm, {})[t.index] = _fake(t.config, loss)
    timings = {
        "recipe": {"norm_ms": [1.0, 1.1, 1.0, 1.05], "step_ms": [10.0, 10.5, 10.2, 10.1]},
        "layernorm": {"norm_ms": [1.5, 1.6, 1.5, 1.55], "step_ms": [10.4, 10.8, 10.6, 10.5]},
    }
    verdicts = decide_all(study, results, 3.0, timings)
    status = {c.name: v.status for c, v in verdicts}
    assert status["sandwich-beats-recipe"] == Word.HOLDS
    assert status["recipe-stabler-than-post"] == Word.HOLDS
    assert status["rmsnorm-faster"] == Word.HOLDS
    bl = blocks(twin, StudyResult(study, results, verdicts, StudyMeta(timings=timings)))
    head = headline(bl)
    assert "Sandwich/Peri-LN (mean loss 1.9600" in head  # best on quality
    assert "beat the recipe by ≥ 0.02: Sandwich/Peri-LN" in head
    assert "the recipe is less LR-sensitive than: Post-LN" in head
    assert "| Speed (the norms' time, serial timing phase) | RMSNorm |" in head
    md = d.to_markdown(page(bl))
    assert md.startswith("# Advice for Llama (llama-3.2-1b.json)")
    for section in (
        "## Stability",
        "## Speed",
        "## The twin and the model",
        "### What the twin does not reproduce",
        "## What depends on scale",
    ):
        assert section in md
    assert "| depth (blocks) | 16 | 6 | 2.67× |" in md
    html = d.html(lead(bl))
    assert html.startswith('<section id="advice">\n<h2>Advice for') and "<script" not in html


def _near_the_bar(study, sandwich: float) -> dict:
    """Every arm's loss near 5.4 nats/byte (the smoke twins' on the built-in corpus: near the
    uniform ln 256 = 5.55), Sandwich's ``sandwich`` lower."""
    results: dict = {}
    for t in study.runs():
        loss = 5.40 + 0.001 * t.index - (sandwich if t.config.model.placement == "sandwich" else 0)
        results.setdefault(t.arm, {})[t.index] = _fake(t.config, loss)
    return results


@pytest.mark.parametrize("h", [3.1, 5.3])
def test_twins_that_did_not_learn_are_said_so_and_ranked_on_nothing(h):
    """Above H − 0.05 (the "fails" rule's margin) a twin learned nothing past byte
    frequencies: with H = 3.1 none did, and the bottom line cannot tell; with H = 5.3 Sandwich
    (0.4 lower) did, and the others are named as not having learned."""
    p = plan("llama-3.2-1b.json", "smoke")
    study = p.study()
    results = _near_the_bar(study, 0.4)
    verdicts = decide_all(study, results, h, {})
    bl = blocks(p.twin, StudyResult(study, results, verdicts, StudyMeta(plateau_h=h)))
    head = headline(bl)
    first = head.splitlines()[0]
    if h == 3.1:
        assert first.startswith("Bottom line: Llama (llama-3.2-1b.json): cannot tell at this")
        why = "no twin learned past the bytes' frequencies (mean final loss above H − 0.05 = "
        assert f"{why}3.050 nats/byte" in first and "nothing to rank" in first
        assert "| none learned past the bytes' frequencies (H = 3.100 nats/byte) | – |" in head
    else:
        assert first.startswith("Bottom line: Llama (llama-3.2-1b.json): switch to Sandwich")
        unlearned = first.split("did not learn past the bytes' frequencies")[1]
        assert "LayerNorm, DeepNorm, Post-LN, QK-norm" in unlearned and "Sandwich" not in unlearned
        assert "| Sandwich/Peri-LN (mean loss 5.0005 nats/byte); did not learn past" in head


# ---- --seeds and --steps: a budget between smoke and quick (end to end: test_advise_rebuild.py)


def test_seeds_and_steps_reach_the_spec_the_twin_and_the_bottom_line():
    p = plan("llama-3.2-1b.json", "quick", seeds=1, steps=60)
    assert p.command.endswith("--preset quick --seeds 1 --steps 60")
    assert p.spec_text.startswith(f"# {p.command}\n")
    study = p.study()
    recipe = next(a.config for a in study.arms if a.name == "recipe")
    assert (recipe.steps, recipe.warmup_steps, recipe.model.dim) == (60, 6, 64)  # quick's 10 %
    # 21 arms and the quality claims' rate checks at ×0.3 (×3 is a sweep's point): 28, 1 seed
    assert {a.config.steps for a in study.arms} == {60} and len(study.runs()) == 28
    assert {c.rule.seeds for c in study.claims if not c.timed} == {1}
    scale = twin_json(p.twin)["scale"]
    assert (scale["steps"], scale["seeds"], scale["warmup_steps"]) == (60, 1, 6)
    assert "--steps (quick: 200)" in p.spec_text  # the value says where it came from
    bl = blocks(p.twin, StudyResult(study, {}, decide_all(study, {}, 3.0), StudyMeta()))
    bottom = d.markdown(*bl).split("## Bottom line\n\n")[1].split("\n", 1)[0]
    assert "tested at a d=64, 6-block twin, 60 steps, 1 seed, not at" in bottom
    assert "over 1 paired seed (quick: d=64, 6 blocks, 60 steps, 1 seed" in d.markdown(*bl)
    # Unchanged where not given, and the warmup never longer than the run.
    assert scale_of("quick") is SCALES["quick"] and scale_of("quick", seeds=5).steps == 200
    for steps in (1, 2, 5, 12, 1000):
        s = scale_of("smoke", steps=steps)
        assert s.steps == steps and 0 <= s.warmup_steps <= steps
        make_twin(hf_config.read(shipped_config(SHIPPED["llama"])), s).config()


def test_list_estimates_the_budget_given(tmp_path, capsys):
    argv = ["advise", "--hf-config", "llama-3.2-1b.json", "--list", "--quiet"]
    assert main(argv) == 0
    assert "28 arms, 84 runs" in capsys.readouterr().out
    assert main([*argv, "--seeds", "1", "--steps", "60"]) == 0
    assert "28 arms, 28 runs" in capsys.readouterr().out


@pytest.mark.parametrize(("flag", "value", "what"), [
    ("--seeds", "0", "[1, 1,000]"), ("--seeds", "1001", "[1, 1,000]"),
    ("--seeds", "two", "[1, 1,000]"), ("--steps", "0", "[1, 10,000,000]"),
    ("--steps", "nan", "[1, 10,000,000]"), ("--steps", "1e400", "[1, 10,000,000]"),
])  # fmt: skip
def test_a_bad_seeds_or_steps_is_one_line(tmp_path, capsys, flag, value, what):
    out = tmp_path / "o"
    argv = ["advise", "--hf-config", "llama-3.2-1b.json", "--out", str(out), flag, value]
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"normlab advise: argument {flag}: expected an int in {what}, got ")
    assert not out.exists()


def test_list_prints_the_twin_and_the_plan_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "o"
    argv = ["advise", "--hf-config", shipped_config(SHIPPED["llama"]), "--list", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "rms_norm_eps" in text and "grouped KV heads" in text
    assert "estimated" in text and "recipe-stabler-than-post" in text
    assert not out.exists()


# ---- CONFIG as a user gives it


def test_config_is_a_file_a_model_directory_or_an_example_name(tmp_path, capsys):
    """``normlab advise CONFIG``: a config.json, the directory save_pretrained wrote, or a
    shipped example's name without .json, all the same twin; --hf-config takes the same."""
    model = tmp_path / "my-llama"
    model.mkdir()
    shutil.copy(shipped_config(SHIPPED["llama"]), model / "config.json")
    printed = []
    for argv in (
        [str(model / "config.json")],
        [str(model)],
        ["llama-3.2-1b"],
        ["llama-3.2-1b.json"],
        ["--hf-config", str(model)],
    ):
        assert main(["advise", *argv, "--list", "--quiet", "--out", str(tmp_path / "o")]) == 0
        printed.append(capsys.readouterr().out)
    fields = [p.split("\n\n")[1] for p in printed]  # the twin's fields, each with its source
    assert "rms_norm_eps" in fields[0] and all(f == fields[0] for f in fields[1:])
    assert all(p.startswith("Llama (") for p in printed)
    assert not (tmp_path / "o").exists()  # --list writes nothing


def test_a_config_that_is_not_there_says_what_to_type(tmp_path, capsys):
    def refused(argv: list[str]) -> str:
        assert main(["advise", *argv, "--list"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        return err

    err = refused(["config.json"])
    assert "no such file, model directory or shipped example" in err
    assert "type normlab advise path/to/config.json" in err and "normlab advise llama-3.2-1b" in err
    assert all(n.removesuffix(".json") in err for n in shipped_configs())  # every example named
    long = tmp_path / ("a-long-directory-name-" * 5)  # the command to type is never cut
    long.mkdir()
    err = refused([str(long)])
    assert f"normlab advise {long / 'config.json'}" in err
    err = refused([str(tmp_path)])
    assert f"normlab advise {tmp_path / 'config.json'}" in err  # the directory lacks one
    err = refused([])
    assert "which model? type normlab advise path/to/config.json" in err
    err = refused(["llama-3.2-1b", "--hf-config", "qwen3-0.6b"])
    assert "give one" in err
