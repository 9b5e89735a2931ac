"""Hostile input, round 3 (docs/refusals.md): what the lab is asked. Sizes counted before
anything is allocated (a bench shape, --workers, a Hugging Face size), no escape sequence
reaching a terminal or a report, options that cannot go together refused, and the library
checking types and ranges before torch: one line and exit status 2 (a ValueError or TypeError
in the library)."""

import json
import os

import pytest
import torch
from conftest import QUICK_S0, finished_quick_study
from refusal import refused
from test_hostile import _spec

import normlab
import normlab.lab.train.dist_trainer as dist_trainer
from normlab.lab.kit.io import LOCK_FILE, hold

QUICK_SPEC = str(QUICK_S0 / "spec.toml")


@pytest.fixture
def hf(tmp_path):
    from normlab.lab.advise.engine import shipped_config

    base = json.loads(open(shipped_config("llama-3.2-1b.json")).read())

    def write(**changes) -> str:
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**base, **changes}))
        return str(path)

    return write


# ---- sizes before allocation, in every command


def test_a_bench_shape_is_counted_before_its_tensors(tmp_path, capsys):
    err = refused(["bench", "--shapes", "1000000x1000000", "--out", str(tmp_path / "b")], capsys)
    assert "argument --shapes: 1000000x1000000: rows 1,000,000: at hidden 1,000,000" in err
    assert not (tmp_path / "b").exists()


def test_explicit_workers_are_counted_against_the_memory(capsys):
    err = refused(["study", "--preset", "smoke", "--workers", "1000", "--list"], capsys)
    assert "--workers 1,000: that many runs at once need about" in err


def test_a_hugging_face_size_beyond_the_models_bound(capsys, hf):
    err = refused(["advise", "--hf-config", hf(intermediate_size=2**62), "--list"], capsys)
    assert "intermediate_size: 4,611,686,018,427,387,904 is more than 2**40" in err


# ---- no escape sequence reaches a terminal or a report


def _twin_doc():
    from normlab.lab.advise.engine import plan
    from normlab.lab.advise.twin import twin_json

    return json.loads(json.dumps(twin_json(plan("llama-3.2-1b.json", "smoke").twin)))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda d: {**d, "family": "llama\x1b[2J"}, "family: the control character '\\x1b'"),
        (lambda d: {**d, "not_reproduced": "abc"}, 'not_reproduced: expected a list, got "abc"'),
        (lambda d: {**d, "spec_file": "../../x.toml"}, "spec_file: the name '../../x.toml'"),
    ],
)
def test_a_twin_json_is_checked_before_it_reaches_advice_md(tmp_path, capsys, change, says):
    out = tmp_path / "advise"
    out.mkdir()
    (out / "twin.json").write_text(json.dumps(change(_twin_doc())))
    err = refused(["advise", "--redecide", str(out)], capsys)
    assert says in err
    assert sorted(p.name for p in out.iterdir()) == ["twin.json"]


def test_refusals_quote_no_escape_sequence(tmp_path, capsys):
    esc = str(tmp_path / "a\x1b[2Jb")
    for argv in (
        ["study", "--spec", esc + ".toml", "--list"],
        ["study", "--compare", esc, str(tmp_path)],
        ["train", "--steps", "1", "--out", esc],
    ):
        assert "the control character '\\x1b' is not allowed in a path" in refused(argv, capsys)
    assert not any("\x1b" in p.name for p in tmp_path.iterdir())


def test_a_lock_holders_text_is_not_echoed(tmp_path, capsys):
    with hold(tmp_path, "study"):
        fd = os.open(tmp_path / LOCK_FILE, os.O_WRONLY)
        os.pwrite(fd, b"1 \x1b]0;pwned\x07 \x1b[2J\n", 0)  # anyone may write the lock file
        os.close(fd)
        err = refused(["numerics", "--reduced", "--quiet", "--out", str(tmp_path)], capsys)
    assert f"--out {tmp_path} is in use by a process" in err


# ---- options that cannot go together


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--list"], "--redecide does not go with --list"),
        (["--out", "OTHER"], "--redecide does not go with --out"),
        (["--resume"], "--redecide does not go with --resume"),
        (["--workers", "2", "--seed", "3"], "--redecide does not go with --seed, --workers"),
    ],
)
def test_redecide_refuses_the_options_it_would_ignore(tmp_path, capsys, extra, says):
    out = finished_quick_study(tmp_path / "q")
    err = refused(["study", "--redecide", str(out), "--spec", QUICK_SPEC, *extra], capsys)
    assert says in err and "reads the spec and its --set overrides from DIR/study.json" in err
    assert not (out / "report.md").exists() and not (tmp_path / "OTHER").exists()


def test_compare_names_each_study_once(tmp_path, capsys):
    out = finished_quick_study(tmp_path / "q")
    (out / "claims.json").write_text((QUICK_S0 / "claims.json").read_text())
    err = refused(["study", "--compare", str(out), f"{out}/."], capsys)
    assert "are one directory: name each study once" in err


def test_freeze_norm_stats_past_the_last_step(tmp_path, capsys, monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the run started")

    monkeypatch.setattr(dist_trainer, "train_process", refuse)
    argv = ["train", "--norm", "batchnorm", "--freeze-norm-stats", "10", "--steps", "5"]
    err = refused([*argv, "--out", str(tmp_path / "o")], capsys)
    assert "freeze_norm_stats=10 must be below steps=5" in err


def test_a_misspelt_probe_matrix(tmp_path, capsys):
    claim = 'rule = "contrast"\nterms = [[1, "b", "log_grad_ratio"]]\nexpect = ">0"\n'
    claim += 'delta = 0.1\nseeds = 2\nmatrix = "mlp.wout"'
    err = refused(["study", "--spec", _spec(tmp_path, claim=claim), "--list"], capsys)
    assert "matrix: unknown 'mlp.wout'; known: attn.wq" in err


def test_more_key_value_heads_than_heads(capsys, hf):
    err = refused(["advise", "--hf-config", hf(num_key_value_heads=64), "--list"], capsys)
    assert "num_key_value_heads 64 does not divide num_attention_heads 32" in err


# ---- the library checks types and ranges before torch


@pytest.mark.parametrize(
    ("make", "error", "says"),
    [
        (lambda: normlab.RMSNorm("64"), TypeError, "normalized_shape must be an int or a"),
        (lambda: normlab.RMSNorm(True), TypeError, "normalized_shape must be an int or a"),
        (lambda: normlab.LayerNorm([4, True]), ValueError, "normalized_shape must be a positive"),
        (lambda: normlab.RMSNorm(2**40), ValueError, "normalized_shape must be at most"),
        (lambda: normlab.ScaleNorm((2**20, 2**20)), ValueError, "at most 2,147,483,647 elements"),
        (lambda: normlab.BatchNorm(2**40), ValueError, "num_features must be at most"),
        (lambda: normlab.LayerNorm(8, dtype=torch.int32), TypeError, "a floating-point dtype"),
        (lambda: normlab.DyT(8, dtype=torch.int64), TypeError, "a floating-point dtype"),
        (lambda: normlab.RMSNorm(8, eps=1e39), ValueError, "eps must be at most float32's"),
        (lambda: normlab.RMSNorm(8, offset=1e39), ValueError, "offset must be within float32"),
        (lambda: normlab.DyT(8, alpha_init=1e39), ValueError, "alpha_init must be a finite"),
    ],
)
def test_the_modules_check_types_and_ranges_before_torch(make, error, says):
    with pytest.raises(error, match=says):
        make()


def test_the_functional_ops_check_eps_and_offset_before_torch():
    from normlab.functional import layer_norm, rms_norm

    x, w = torch.ones(2, 4), torch.ones(4)
    with pytest.raises(ValueError, match="eps must be at most float32's"):
        layer_norm(x, w, None, eps=1e39)
    with pytest.raises(ValueError, match="offset must be within float32's range"):
        rms_norm(x, w, offset=-1e39)
