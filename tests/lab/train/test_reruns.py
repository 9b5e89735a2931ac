"""Fitting the tools people use: TensorBoard logs of ``normlab train`` and ``normlab study``,
validation lines in ``metrics.jsonl``, rerunning a study's run (``train --spec --run``,
``train --config``), ``study --set`` overrides, and loading a trained checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from normlab.lab.cli import main
from normlab.lab.study.spec import parse as spec
from normlab.lab.train.data import fixed_batches, load_corpus
from normlab.lab.train.dist_trainer import load_model
from normlab.models import Transformer

TINY = [
    "--dim",
    "16",
    "--n-layers",
    "2",
    "--n-heads",
    "2",
    "--max-seq-len",
    "16",
    "--seq-len",
    "16",
    "--batch-size",
    "4",
    "--steps",
    "12",
    "--eval-batches",
    "2",
    "--log-every",
    "0",
    "--threads",
    "1",
]

SPEC = """
name = "tiny"

[base]
steps = 12
batch_size = 4
seq_len = 16
eval_batches = 2
eval_interval = 6

[base.model]
dim = 16
n_layers = 2
n_heads = 2
max_seq_len = 16

[[arms]]
name = "rms"

[[arms]]
name = "ln"
model = { norm = "layernorm" }

[[claims]]
name = "both-train"
statement = "both train"
rule = "all_of"
seeds = 1
parts = [{ label = "rms", rule = "trains", arm = "rms" },
         { label = "ln", rule = "trains", arm = "ln" }]
"""


def _events(logdir: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return acc


def _scalars(acc, tag: str) -> dict[int, float]:
    return {e.step: e.value for e in acc.Scalars(tag)}


@pytest.fixture
def threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)  # --threads 1 must not slow the rest of the session


# ---- normlab train: metrics.jsonl's evaluations, TensorBoard, the checkpoint


def test_train_logs_evaluations_and_tensorboard_and_its_checkpoint_loads(tmp_path, threads):
    pytest.importorskip("tensorboard")
    out, tb = tmp_path / "run", tmp_path / "tb"
    argv = ["train", *TINY, "--eval-interval", "4", "--out", str(out), "--tensorboard", str(tb)]
    assert main(argv) == 0
    res = json.loads((out / "result.json").read_text())
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in rows if "val_loss" in r]
    assert evals == res["evals"] and [e["step"] for e in evals] == [4, 8, 12]
    assert [r["step"] for r in rows if "loss" in r] == list(range(12))

    acc = _events(tb)
    scalars = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/grad_norm", "train/lr", "train/tokens_per_s"} <= scalars
    assert {"val/loss", "hparam/final_val_loss"} <= scalars
    losses = _scalars(acc, "train/loss")
    assert sorted(losses) == list(range(12))
    assert losses[11] == pytest.approx(res["history"]["loss"][11], rel=1e-6)
    val = _scalars(acc, "val/loss")
    assert val == pytest.approx({e["step"]: e["val_loss"] for e in res["evals"]}, rel=1e-6)
    assert _scalars(acc, "hparam/final_val_loss")[12] == pytest.approx(
        res["summary"]["final_val_loss"], rel=1e-6
    )
    from tensorboard.backend.event_processing import plugin_event_accumulator

    plugins = plugin_event_accumulator.EventAccumulator(str(tb))
    plugins.Reload()
    hparams = plugins.PluginTagToContent("hparams")
    assert {"_hparams_/experiment", "_hparams_/session_start_info"} <= set(hparams)
    assert "config/text_summary" in plugins.Tags()["tensors"]

    # The checkpoint as a Transformer: it gives the run's final validation loss again.
    model = load_model(out)
    assert isinstance(model, Transformer) and not model.training
    assert load_model(out / "checkpoint.pt").state_dict().keys() == model.state_dict().keys()
    corpus = load_corpus()
    with torch.no_grad():
        losses = [
            torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            for x, y in fixed_batches(corpus.val, 2, 4, 16)
        ]
    assert float(sum(losses) / len(losses)) == pytest.approx(
        res["summary"]["final_val_loss"], abs=1e-6
    )


def test_tensorboard_without_the_package_is_one_line(tmp_path, monkeypatch, capsys):
    from normlab.lab.train import tblog

    monkeypatch.setattr(tblog, "tensorboard_available", lambda: False)
    argv = ["train", *TINY, "--out", str(tmp_path / "o"), "--tensorboard", str(tmp_path / "tb")]
    assert main(argv) == 2
    assert "--tensorboard needs the tensorboard package" in capsys.readouterr().err
    assert not (tmp_path / "tb").exists()


# ---- normlab study --tensorboard: one run directory per arm and seed, from the workers


def test_study_writes_one_tensorboard_run_per_arm_and_seed(tmp_path):
    pytest.importorskip("tensorboard")
    path, out, tb = tmp_path / "tiny.toml", tmp_path / "out", tmp_path / "tb"
    path.write_text(SPEC)
    argv = [
        "study",
        "--spec",
        str(path),
        "--out",
        str(out),
        "--tensorboard",
        str(tb),
        "--workers",
        "2",
        "--threads",
        "2",
        "--quiet",
    ]
    assert main(argv) == 0  # two worker processes: each writes its own runs' logs
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(r["name"] for r in records) == ["ln", "rms"]
    for r in records:
        acc = _events(tb / r["name"] / f"seed{r['seed_index']}")
        assert sorted(_scalars(acc, "train/loss")) == list(range(12))
        val = _scalars(acc, "val/loss")
        assert sorted(val) == [6, 12]
        assert val[12] == pytest.approx(r["result"]["summary"]["final_val_loss"], rel=1e-6)


# ---- normlab study --set


def test_set_overrides_the_spec_document_before_it_is_checked():
    sets = ["base.steps=20", "base.model.dim=32", "arms[1].lr=3e-3", "arms.0.model.norm=dyt"]
    s = spec.parse_spec(SPEC, "tiny.toml", overrides=sets)
    rms, ln = (a.config for a in s.arms)
    assert rms.steps == ln.steps == 20 and rms.model.dim == ln.model.dim == 32
    assert ln.lr == 3e-3 and rms.lr == 1e-3 and rms.model.norm == "dyt"  # a bare string
    assert s.overrides == tuple(sets)
    assert spec.parse_override("base.betas=[0.9, 0.95]") == (["base", "betas"], [0.9, 0.95])
    assert spec.parse_override("arms[2].name = x y") == (["arms", 2, "name"], "x y")
    # A bad key or value is the error the file itself would give.
    with pytest.raises(spec.SpecError) as e:
        spec.parse_spec(SPEC, "tiny.toml", overrides=["base.stepz=50"])
    assert str(e.value) == "tiny.toml: base.stepz: unknown key; did you mean 'steps'?"
    with pytest.raises(spec.SpecError, match=r"^tiny.toml: base.steps: expected an int"):
        spec.parse_spec(SPEC, "tiny.toml", overrides=["base.steps=lots"])
    for bad, msg in [
        ("base.steps", "expected KEY=VALUE"),
        ("arms[5].lr=1", "a list of 2"),
        ("base.steps.x=1", "base.steps is not a table"),
    ]:
        with pytest.raises(spec.SpecError, match=msg):
            spec.parse_spec(SPEC, "tiny.toml", overrides=[bad])


def test_study_set_is_shown_by_list_and_a_bad_one_is_one_line(tmp_path, capsys):
    path = tmp_path / "tiny.toml"
    path.write_text(SPEC)
    argv = ["study", "--spec", str(path), "--out", str(tmp_path / "out"), "--list"]
    assert main([*argv, "--set", "base.steps=50", "--set", "base.model.dim=32"]) == 0
    plan = capsys.readouterr().out
    assert f"normlab study --spec {path} --set base.steps=50 --set base.model.dim=32" in plan
    assert "overrides (--set): base.steps=50, base.model.dim=32" in plan
    assert "| 50 " in plan or " 50 " in plan  # the steps column
    assert main([*argv, "--set", "base.model.dimm=32"]) == 2
    err = capsys.readouterr().err
    assert err == f"normlab study: {path}: base.model.dimm: unknown key; did you mean 'dim'?\n"


# ---- normlab train --spec --run / --config: exactly the study's run


def test_train_reruns_a_study_run_exactly(tmp_path, capsys, threads):
    path, out = tmp_path / "tiny.toml", tmp_path / "study"
    path.write_text(SPEC.replace("seeds = 1", "seeds = 2"))
    sets = ["--set", "base.steps=8", "--set", "base.eval_interval=4"]
    argv = [
        "study",
        "--spec",
        str(path),
        "--out",
        str(out),
        "--seed",
        "1",
        *sets,
        "--workers",
        "1",
        "--threads",
        "1",
        "--quiet",
    ]
    assert main(argv) == 0
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    (want,) = [r for r in records if r["name"] == "ln" and r["seed_index"] == 1]
    assert want["seed"] == 10001
    meta = json.loads((out / "study.json").read_text())
    assert meta["overrides"] == ["base.steps=8", "base.eval_interval=4"]

    def final(run_dir: Path) -> float:
        return json.loads((run_dir / "result.json").read_text())["summary"]["final_val_loss"]

    again = tmp_path / "again"
    argv = [
        "train",
        "--spec",
        str(path),
        *sets,
        "--run",
        "ln",
        "--seed-index",
        "1",
        "--seed-block",
        "1",
        "--threads",
        "1",
        "--log-every",
        "0",
        "--out",
        str(again),
    ]
    assert main(argv) == 0
    study_loss = want["result"]["summary"]["final_val_loss"]
    assert abs(final(again) - study_loss) <= 1e-6
    saved = json.loads((again / "config.json").read_text())
    assert saved["seed"] == 10001 and saved["steps"] == 8 and saved["model"]["norm"] == "layernorm"

    # --config: normlab train's config.json, and the study's results.jsonl with --run
    for i, config in enumerate(
        [
            ["--config", str(again / "config.json")],
            ["--config", str(out / "results.jsonl"), "--run", "ln", "--seed-index", "1"],
        ]
    ):
        d = tmp_path / f"config{i}"
        argv = ["train", *config, "--threads", "1", "--log-every", "0", "--out", str(d)]
        assert main(argv) == 0
        assert abs(final(d) - study_loss) <= 1e-6


def test_train_run_choice_mistakes_are_one_line(tmp_path, capsys):
    path = tmp_path / "tiny.toml"
    path.write_text(SPEC)
    out = str(tmp_path / "o")
    cases = [
        (["--spec", str(path), "--run", "nope"], "bad run config: --run must name a run of spec"),
        (
            ["--spec", str(path), "--run", "ln", "--seed-index", "1"],
            "bad run config: --seed-index 1: the study trains ln under 1 seed(s)",
        ),
        (["--run", "ln"], "bad run config: --run, --seed-index, --seed-block and --set"),
        (
            ["--spec", str(path), "--run", "ln", "--set", "base.stepz=3"],
            f"{path}: base.stepz: unknown key",
        ),
        (["--config", str(path)], f"--config {path}: not JSON"),
        (["--config", str(tmp_path / "none.json")], f"--config {tmp_path / 'none.json'}: cannot"),
    ]
    for extra, msg in cases:
        assert main(["train", *extra, "--out", out]) == 2, extra
        err = capsys.readouterr().err
        assert err.startswith(f"normlab train: {msg}") and len(err.splitlines()) == 1, err
    with pytest.raises(SystemExit) as e:  # argparse's own refusal
        main(["train", "--spec", str(path), "--preset", "smoke", "--out", out])
    assert e.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err
