"""Hostile input, round 2 (docs/refusals.md): every case of each category is one line on stderr
and exit status 2 (the library: a ValueError naming the argument), with nothing written or
deleted outside --out."""

import json
import os

import pytest
import torch
from conftest import QUICK_S0, finished_quick_study
from refusal import refused as _refused

DEEP = 800  # levels of nesting that made the parsers or the code after them recurse
BIG = "1" + "0" * 400  # 10**400


SPEC = """
name = "h"
[base]
steps = 2
batch_size = 2
seq_len = 8
eval_batches = 1
[base.model]
dim = 8
n_layers = 1
n_heads = 2
max_seq_len = 8
{model}
[[arms]]
name = "a"
[[arms]]
name = "b"
model = {{ norm = "layernorm" }}
[[claims]]
name = "c"
statement = "s"
{claim}
"""
TRAINS = 'rule = "trains"\narm = "b"\nseeds = 2'


def _spec(tmp_path, *, model: str = "", claim: str = TRAINS, head: str = "") -> str:
    path = tmp_path / "s.toml"
    path.write_text(head + SPEC.format(model=model, claim=claim))
    return str(path)


@pytest.fixture
def hf(tmp_path):
    """Write a Llama config.json with some keys changed; returns its path."""
    from normlab.lab.advise.engine import shipped_config

    base = json.loads(open(shipped_config("llama-3.2-1b.json")).read())

    def write(text: str | None = None, **changes) -> str:
        path = tmp_path / "config.json"
        path.write_text(text if text is not None else json.dumps({**base, **changes}))
        return str(path)

    return write


# ---- nesting 800 deep


def test_nesting_is_refused_wherever_a_document_is_read(tmp_path, capsys, hf):
    deep_toml = "[" * DEEP + "]" * DEEP
    deep_json = '{"a":' * DEEP + "1" + "}" * DEEP
    err = _refused(["study", "--spec", _spec(tmp_path, model=f"x = {deep_toml}"), "--list"], capsys)
    assert "nested" in err
    err = _refused(["study", "--preset", "smoke", "--set", f"base.steps={deep_toml}", "--list"],
                   capsys)  # fmt: skip
    assert "nested" in err
    err = _refused(["advise", "--hf-config", hf(deep_json), "--list"], capsys)
    assert "nested more than 32 deep" in err
    out = finished_quick_study(tmp_path / "q")
    spec = str(QUICK_S0 / "spec.toml")
    (out / "results.jsonl").write_text(deep_json + "\n")
    err = _refused(["study", "--redecide", str(out), "--spec", spec, "--quiet"], capsys)
    assert "results.jsonl line 1" in err and "nested" in err
    (out / "study.json").write_text(deep_json)
    assert "nested" in _refused(["study", "--redecide", str(out), "--quiet"], capsys)
    (tmp_path / "pilot").mkdir()
    (tmp_path / "pilot" / "claims.json").write_text(deep_json)
    err = _refused(["study", "--preset", "quick", "--size-seeds", str(tmp_path / "pilot")], capsys)
    assert "nested" in err


# ---- numbers beyond range, wrong types


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"hidden_size": int(BIG[:310])}, "does not fit in 64 bits"),
        ({"model_type": ["llama"]}, 'model_type ["llama"] is not supported'),
        ({"num_key_value_heads": "x"}, 'num_key_value_heads: expected a positive int (got "x")'),
        ({"head_dim": -64}, "head_dim: expected a positive int (got -64)"),
        ({"head_dim": 1.5}, "head_dim: expected a positive int (got 1.5)"),
        ({"num_key_value_heads": -8}, "num_key_value_heads: expected a positive int (got -8)"),
        ({"tie_word_embeddings": "no"}, 'tie_word_embeddings: expected true or false, got "no"'),
    ],
)
def test_an_hf_config_is_checked_by_type_and_range(capsys, hf, changes, says):
    assert says in _refused(["advise", "--hf-config", hf(**changes), "--list"], capsys)


def test_an_hf_config_with_huge_or_infinite_numbers(capsys, hf):
    text = json.dumps({"model_type": "llama", "hidden_size": 64})[:-1]
    err = _refused(["advise", "--hf-config", hf(text + ', "vocab_size": ' + "9" * 5000 + "}"),
                    "--list"], capsys)  # fmt: skip
    assert "(5,000 digits) does not fit in 64 bits" in err
    err = _refused(["advise", "--hf-config", hf(text + ', "rms_norm_eps": Infinity}'), "--list"],
                   capsys)  # fmt: skip
    assert "Infinity is not a finite number" in err


def test_numbers_of_the_spec_and_the_command_line(tmp_path, capsys):
    err = _refused(
        ["study", "--spec", _spec(tmp_path, model="mlp_ratio = 1e308"), "--list"], capsys
    )
    assert "mlp_ratio must be a positive number" in err
    out = str(tmp_path / "o")
    err = _refused(["train", "--steps", BIG, "--out", out], capsys)
    assert "argument --steps: expected an int within 64 bits" in err
    for flag, value in (("--lr", "inf"), ("--min-lr-ratio", "nan"), ("--diverge-factor", "nan")):
        err = _refused(["train", flag, value, "--out", out], capsys)
        assert f"argument {flag}: expected a finite number, got {value}" in err
    assert not os.path.exists(out)


# ---- values that passed the spec and failed in training


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--betas", "2", "5"], "betas[0] must be a finite number >= 0 and <= 1, got 2.0"),
        (["--adam-eps", "-1"], "adam_eps must be a finite number > 0"),
        (["--weight-decay", "-1"], "weight_decay must be a finite number >= 0"),
        (["--seed", "1" + "0" * 26], "argument --seed: expected an int within 64 bits"),
        (["--preset", "smoke", "--run", "x", "--seed-block", BIG], "argument --seed-block"),
        (["--eval-sequences", "2000000000000"], "eval_sequences must be <= 1,048,576"),
        (["--eval-batches", "100000000000"], "validation sequences; at most 1,048,576"),
        (["--max-seq-len", "300000000"], "buffers of max_seq_len 300,000,000"),
    ],
)
def test_training_values_are_refused_before_the_run(tmp_path, capsys, argv, says):
    out = tmp_path / "o"
    err = _refused(["train", *argv, "--out", str(out)], capsys, within=1.0)
    assert says in err
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has CUDA")
def test_cuda_or_triton_without_cuda(tmp_path, capsys):
    err = _refused(["train", "--norm-backend", "triton", "--out", str(tmp_path / "o")], capsys)
    assert "norm_backend 'triton' needs a CUDA device" in err
    err = _refused(["numerics", "--device", "cuda", "--out", str(tmp_path / "n")], capsys)
    assert "--device cuda: no CUDA device here" in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "n").exists()


# ---- checkpoints under train --resume


CHECKPOINTS = {
    "empty": lambda p: p.write_bytes(b""),
    "truncated": lambda p: p.write_bytes(b"PK\x03\x04" + b"\x00" * 40),
    "directory": lambda p: p.mkdir(),
    "bare tensor": lambda p: torch.save(torch.zeros(3), p),
    "config-less": lambda p: torch.save({"step": 1, "model": {}}, p),
}


@pytest.mark.parametrize("what", CHECKPOINTS)
def test_a_bad_checkpoint_under_resume(tmp_path, capsys, what):
    data = tmp_path / "data.txt"
    data.write_text("def f(x):\n    return x + 1\n" * 400)
    out = tmp_path / "o"
    out.mkdir()
    CHECKPOINTS[what](out / "checkpoint.pt")
    argv = ["train", "--dim", "8", "--n-layers", "1", "--n-heads", "2", "--steps", "2",
            "--data", str(data), "--resume", "--log-every", "0", "--out", str(out)]  # fmt: skip
    err = _refused(argv, capsys)
    assert err.startswith("normlab train: --resume: ") and "checkpoint" in err, err
    assert sorted(p.name for p in out.iterdir()) == [".normlab.lock", "checkpoint.pt"]


# ---- tampered results.jsonl and study.json


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ('{"key": "k", "result": {}}', "result.config: expected a JSON object"),
        ("RESULT_SUMMARY_LIST", "result.summary: expected a JSON object"),
        ("RESULT_HUGE_LOSS", "beyond float range"),
        ("garbage", "not valid JSON"),
    ],
)
def test_a_tampered_results_line(tmp_path, capsys, line, says):
    out = finished_quick_study(tmp_path / "q")
    lines = (out / "results.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    if line == "RESULT_SUMMARY_LIST":
        line = json.dumps({**rec, "result": {**rec["result"], "summary": [1, 2]}})
    elif line == "RESULT_HUGE_LOSS":
        line = json.dumps(rec).replace('"summary": {', '"summary": {"x": 1e400, ', 1)
    (out / "results.jsonl").write_text("\n".join([lines[0], line, *lines[1:3]]) + "\n")
    spec = str(QUICK_S0 / "spec.toml")
    err = _refused(["study", "--redecide", str(out), "--spec", spec, "--quiet"], capsys)
    assert "results.jsonl line 2" in err and says in err


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda m: [], "not a study's study.json"),
        (
            lambda m: {k: v for k, v in m.items() if k != "plateau_h"},
            "plateau_h: expected a number",
        ),
        (lambda m: {**m, "plateau_h": "x"}, 'plateau_h: expected a number in (0, 1000), got "x"'),
        (lambda m: {**m, "environment": [1]}, "environment: expected a JSON object, got [1]"),
        ("NaN", "NaN is not a finite number"),
    ],
)
def test_a_tampered_study_json(tmp_path, capsys, change, says):
    out = finished_quick_study(tmp_path / "q")
    meta = json.loads((out / "study.json").read_text())
    if change == "NaN":
        text = json.dumps({**meta, "plateau_h": float("nan")})
    else:
        text = json.dumps(change(meta))
    (out / "study.json").write_text(text)
    before = sorted(p.name for p in out.iterdir())
    spec = str(QUICK_S0 / "spec.toml")
    assert says in _refused(["study", "--redecide", str(out), "--spec", spec, "--quiet"], capsys)
    assert sorted(p.name for p in out.iterdir()) == before


# ---- claims that decide nothing


@pytest.mark.parametrize(
    ("claim", "says"),
    [
        ('rule = "timing"\nfast = "a"\nslow = "a"\ndelta = 0.1', 'slow: "a" is also fast'),
        ('rule = "timing"\nfast = "a"\nslow = "b"\ndelta = 0.1\nprocesses = 9223372036854775807',
         "processes: 9,223,372,036,854,775,807 is more than the 1,000"),
    ],
)  # fmt: skip
def test_claims_that_compare_nothing_or_run_forever(tmp_path, capsys, claim, says):
    assert says in _refused(["study", "--spec", _spec(tmp_path, claim=claim), "--list"], capsys)


def test_the_library_names_the_argument():
    import normlab
    from normlab.functional import rms_norm

    with pytest.raises(ValueError, match="alpha_init must be a finite number > 0 and <= .*, got 0"):
        normlab.DyT(4, alpha_init=0)
    with pytest.raises(ValueError, match="offset must be finite, got nan"):
        rms_norm(torch.ones(2, 4), torch.ones(4), offset=float("nan"))


# ---- work before refusal


def test_limits_are_checked_before_the_work(tmp_path, capsys):
    grid = ", ".join(map(str, range(1, 5001)))
    entries = "".join(f'\n[[arms]]\nname = "g{i}-{{warmup_steps}}"\naxes = {{ warmup_steps = '
                      f"[{grid}] }}\n" for i in range(3))  # fmt: skip
    path = tmp_path / "grid.toml"
    path.write_text(SPEC.format(model="", claim=TRAINS) + entries)
    err = _refused(["study", "--spec", str(path), "--list"], capsys, within=1.0)
    assert "arms: 15,002 arms; the lab allows 10,000 in a study" in err
    err = _refused(["bench", "--threads", "1000000", "--out", str(tmp_path / "b")], capsys)
    assert "argument --threads: expected an int in [0, 1,024], got 1,000,000" in err
    desc = 'description = "' + "x" * 50_000 + '"\n'
    err = _refused(["study", "--spec", _spec(tmp_path, head=desc), "--list"], capsys, within=1.0)
    assert "description: 50,000 characters; at most 10,000 are allowed" in err


@pytest.mark.parametrize("norm", ["rmsnorm", "batchnorm"])
def test_the_buffers_of_max_seq_len_are_counted_before_the_study_starts(tmp_path, capsys, norm):
    sets = ["--set", "base.model.max_seq_len=1000000000", "--set", f"base.model.norm={norm!r}"]
    err = _refused(["study", "--spec", _spec(tmp_path), *sets, "--list"], capsys, within=1.0)
    assert "arm a: too big for this machine" in err
    assert "of it buffers of max_seq_len 1,000,000,000" in err
