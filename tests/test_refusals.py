"""Hostile and careless input (docs/refusals.md): each case is one line on stderr and status 2,
decided in under a second once the modules are imported, and no model is built for it."""

import json

import pytest
from refusal import refused

import normlab.models.transformer
from normlab.lab.kit.io import write_file
from normlab.lab.kit.limits import check_name, format_name
from normlab.lab.study.spec import parse as spec

SPEC = """
name = "hostile"
[base]
steps = 2
batch_size = 2
seq_len = 8
eval_batches = 1
[base.model]
dim = {dim}
n_layers = 1
n_heads = 2
max_seq_len = 8

[[arms]]
name = '{name}'

[[arms]]
name = "other"
model = {{ norm = "layernorm" }}

[[claims]]
name = "c"
statement = "s"
rule = "trains"
arm = "other"
seeds = {seeds}
"""


def _spec(tmp_path, *, name="a", dim=8, seeds=1) -> str:
    path = tmp_path / "s.toml"
    path.write_text(SPEC.format(name=name, dim=dim, seeds=seeds))
    return str(path)


@pytest.fixture(autouse=True)
def no_model(monkeypatch):
    """Building a model fails the test: every refusal is decided from the configs."""

    def refuse(self, *a, **k):
        raise AssertionError("a model was built")

    monkeypatch.setattr(normlab.models.transformer.Transformer, "__init__", refuse)


def _refused(argv: list[str], capsys) -> str:
    """``normlab ARGV``: status 2, one line naming the command, in under a second."""
    return refused(argv, capsys, within=1.0, warm=True)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("{model.__class__}", "attribute access, indexing and positional fields are not allowed"),
        ("{model.__init__.__globals__}", "attribute access"),
        ("{a[0]}", "attribute access, indexing"),
        ("{0}", "positional fields"),
        ("{seed:>999}", "widths and precisions <= 20"),
        ("{seed:>1000000000}", "widths and precisions <= 20"),
        ("{lr!r}", "conversions are not allowed"),
        ("{lr:{dim}}", "a short format spec"),
        ("..", "not '.' or '..'"),
        (".", "not '.' or '..'"),
        ("a/b", "the name 'a/b' is not allowed"),
        ("$a_$", "the name '$a_$' is not allowed"),
        ("x" * 101, "at most 100 characters"),
        ("{nope}", "{nope} in '{nope}' is not a training or model field"),
    ],
)
def test_arm_names_are_data(tmp_path, capsys, name, says):
    path = _spec(tmp_path, name=name)
    err = _refused(["study", "--spec", path, "--list"], capsys)
    assert err.startswith(f"normlab study: {path}: arms[0].name: "), err
    assert says in err, err


def test_names_with_short_format_specs_are_kept():
    values = {"lr": 3e-3, "seed": 7, "placement": "pre", "x": 0.0001}
    assert format_name("{placement}-lr{lr:g}", values) == "pre-lr0.003"
    assert format_name("s{seed:03d}-{x:.0e}+{lr:08.1e}", values) == "s007-1e-04+03.0e-03"
    assert check_name("post-L1000_a.b+c") == "post-L1000_a.b+c"
    for name in spec.builtin_names():  # every preset's names match the documented pattern
        for arm in spec.load_builtin(name).arms:
            check_name(arm.name)


def test_a_billion_seeds_is_refused_before_any_run_object(tmp_path, capsys):
    path = _spec(tmp_path, seeds=1_000_000_000)
    err = _refused(["study", "--spec", path, "--list"], capsys)
    assert f"{path}: claims[0].seeds: 1,000,000,000 is more than the 1,000" in err


def test_a_huge_grid_is_refused_before_its_arms_are_made(tmp_path, capsys):
    path = tmp_path / "grid.toml"
    grid = ", ".join(f"{i}e-4" for i in range(1, 201))
    text = SPEC.format(name="g-{lr:g}-{warmup_steps}", dim=8, seeds=1).replace(
        "name = 'g-{lr:g}-{warmup_steps}'",
        f"name = 'g-{{lr:g}}-{{warmup_steps}}'\naxes = {{ lr = [{grid}], "
        f"warmup_steps = [{', '.join(map(str, range(100)))}] }}",
    )
    path.write_text(text)
    err = _refused(["study", "--spec", str(path), "--list"], capsys)
    assert f"{path}: arms[0].axes: 20,000 arms; the lab allows 10,000" in err


def test_a_million_wide_model_is_refused_from_its_arithmetic(tmp_path, capsys):
    path = _spec(tmp_path, dim=1_000_000)
    err = _refused(["study", "--spec", path, "--list"], capsys)
    assert "arm a: too big for this machine: a model of " in err and "needs about" in err


def test_too_many_steps(tmp_path, capsys):
    err = _refused(["train", "--steps", "100000000000", "--out", str(tmp_path)], capsys)
    assert "the run: steps: 100,000,000,000 is more than the 10,000,000" in err
    assert not list(tmp_path.iterdir())


def test_train_refuses_a_model_too_big_before_building_it(tmp_path, capsys):
    err = _refused(["train", "--dim", "1048576", "--n-heads", "8", "--out", str(tmp_path)], capsys)
    assert "the run: too big for this machine" in err


def test_advise_with_a_huge_mlp_is_refused_without_building_the_twin(tmp_path, capsys):
    from normlab.lab.advise.engine import shipped_config

    doc = json.loads(open(shipped_config("llama-3.2-1b.json")).read())
    doc.update(hidden_size=64, intermediate_size=6_400_000_000, num_attention_heads=4,
               num_key_value_heads=4, head_dim=16)  # fmt: skip
    evil = tmp_path / "evil.json"
    evil.write_text(json.dumps(doc))
    err = _refused(["advise", "--hf-config", str(evil), "--list"], capsys)
    assert "arm recipe: too big for this machine" in err and "MLP 6,400,000,000" in err


def test_a_config_json_with_an_eps_of_ten_to_the_400(tmp_path, capsys):
    from normlab.lab.train.data import VOCAB_SIZE
    from normlab.lab.train.trainer import TrainConfig
    from normlab.models import TransformerConfig

    cfg = TrainConfig(model=TransformerConfig(VOCAB_SIZE, 8, 1, 2)).to_dict()
    cfg["model"]["eps"] = 10**400
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    err = _refused(["train", "--config", str(path), "--out", str(tmp_path / "o")], capsys)
    assert "(the int 100000000000... (401 digits) does not fit in 64 bits)" in err
    assert len(err.replace(str(path), "FILE")) < 150  # the 401 digits cut, wherever tmp is


def test_a_keyless_results_line_under_resume(tmp_path, capsys):
    path = _spec(tmp_path)
    data = tmp_path / "data.txt"
    data.write_text("def f(x):\n    return x + 1\n" * 400)
    out = tmp_path / "out"
    out.mkdir()
    (out / "results.jsonl").write_text('{"key": "0123", "name": "a"}\n')
    argv = ["study", "--spec", path, "--out", str(out), "--data", str(data), "--resume", "--quiet"]
    err = _refused(argv, capsys)
    assert "results.jsonl line 1: not a run's record" in err
    assert (out / "results.jsonl").read_text() == '{"key": "0123", "name": "a"}\n'


@pytest.mark.parametrize(
    "doc",
    ["[1, 2]", "{", '{"preset": "x"}', '{"preset": "x", "claims": [{"name": 3}]}',
     '{"preset": "x", "claims": [{"name": "c", "verdict": "holds", "scope": 1}]}',
     '{"preset": "x", "claims": "c"}', '{"preset": "x", "claims": [{"name": "c", '
     '"verdict": "holds", "scope": [{"d": 1}]}]}'],
)  # fmt: skip
def test_a_malformed_claims_json_for_compare(tmp_path, capsys, doc):
    good = tmp_path / "good"
    good.mkdir()
    write_file(good / "claims.json", json.dumps({"preset": "p", "claims": []}))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "claims.json").write_text(doc)
    err = _refused(["study", "--compare", str(good), str(bad)], capsys)
    assert f"--compare: {bad / 'claims.json'}: not " in err


def test_numerics_rows_are_bounded(tmp_path, capsys):
    err = _refused(["numerics", "--rows", "1000000000", "--out", str(tmp_path)], capsys)
    assert "--rows: 1,000,000,000 is more than the 1,048,576 the lab allows" in err


@pytest.mark.parametrize("label", ["$a_$", r"$\foo$", "5$ and 6$"])
def test_plot_labels_are_literal_not_mathtext(label):
    from normlab.lab.kit.render import figure, png
    from normlab.lab.study.report.plots import _literal

    fig, ax = figure()
    ax.plot([0, 1], [0, 1], label=_literal(label))
    ax.set_yticks([0, 1], [_literal(label), "b"])
    ax.legend()
    assert png(fig).startswith(b"\x89PNG")  # raw, "$a_$" makes savefig raise
    assert ax.get_legend().get_texts()[0].get_text() == label.replace("$", r"\$")
