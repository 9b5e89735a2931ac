"""What ``normlab inspect`` refuses, each in one line and exit status 2, before loading: a
directory that is not a model, a missing or bad config, an unknown family or norm class, a model
too large for the stated limit."""

import json
import subprocess
import sys

import pytest
from tiny_models import tiny_dirs
from torch import nn

from normlab.lab.inspect import load
from normlab.lab.kit.errors import UsageError


def _refused(argv, capsys) -> str:
    from normlab.lab.cli import main

    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("normlab inspect: "), err
    return err.strip()


def _model_dir(tmp_path, config, weights=True):
    d = tmp_path / "m"
    d.mkdir()
    if config is not None:
        text = config if isinstance(config, str) else json.dumps(config)
        (d / "config.json").write_text(text)
    if weights:
        (d / "model.safetensors").write_bytes(b"")
    return d


LLAMA = {"model_type": "llama", "hidden_size": 32, "num_hidden_layers": 2,
         "num_attention_heads": 4, "intermediate_size": 64, "vocab_size": 300}  # fmt: skip


@pytest.mark.parametrize(
    ("config", "weights", "says"),
    [
        (None, True, "not a model directory (no config.json)"),
        ("{not json", True, "config.json: not valid JSON"),
        ("[1, 2]", True, "config.json: expected a JSON object"),
        ({**LLAMA, "hidden_size": None}, True, "hidden_size: expected a positive int"),
        ({**LLAMA, "model_type": "t5"}, True, 'model_type "t5" is not supported'),
        ({**LLAMA, "rms_norm_eps": "small"}, True, "rms_norm_eps: expected a number"),
        (LLAMA, False, "no weights"),
    ],
)
def test_a_directory_that_is_no_model_is_refused(tmp_path, capsys, config, weights, says):
    d = _model_dir(tmp_path, config, weights)
    err = _refused(["inspect", str(d), "--out", str(tmp_path / "o")], capsys)
    assert says in err


def test_no_such_model(tmp_path, capsys):
    err = _refused(["inspect", str(tmp_path / "nope"), "--out", str(tmp_path / "o")], capsys)
    assert "no such directory, nor an installed package" in err
    err = _refused(["inspect", "no-such-package-xyz", "--out", str(tmp_path / "o")], capsys)
    assert "no such directory, nor an installed package" in err


def test_a_package_without_a_model_is_refused(tmp_path, capsys):
    err = _refused(["inspect", "pytest", "--out", str(tmp_path / "o")], capsys)
    assert "ships no single model directory" in err


def test_too_large_for_the_limit_is_refused_before_transformers_is_imported(tmp_path):
    """Sized from config.json alone: the refusal comes before ``transformers`` is imported."""
    d = _model_dir(tmp_path, {**LLAMA, "hidden_size": 4096, "num_hidden_layers": 32,
                              "intermediate_size": 11008, "vocab_size": 32000})  # fmt: skip
    argv = ["inspect", str(d), "--memory-gib", "4", "--out", str(tmp_path / "o")]
    code = (
        "import sys\n"
        "from normlab.lab.cli import main\n"
        f"rc = main({argv!r})\n"
        "assert 'transformers' not in sys.modules\n"
        "sys.exit(rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "too large for the limit" in out.stderr and "6,7" in out.stderr  # 6.7e9 parameters
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--tokens", "64", "--chunk", "32"], "2 chunks; the findings need at least 3"),
        (["--tokens", "16", "--chunk", "32"], "--chunk 32: expected 2 ... --tokens (16)"),
        (["--memory-gib", "0"], "--memory-gib 0.0: expected a number > 0"),
    ],
)
def test_sizes_are_refused(tmp_path, capsys, flags, says):
    err = _refused(["inspect", str(tmp_path), *flags], capsys)
    assert says in err


def test_a_chunk_longer_than_the_model_takes_is_refused(tmp_path, capsys):
    argv = ["inspect", str(tiny_dirs()["bert"]), "--chunk", "100", "--tokens", "300"]
    capsys.readouterr()  # what building the tiny models printed, if this test built them
    err = _refused([*argv, "--out", str(tmp_path / "o")], capsys)
    assert "the model takes at most 64 tokens" in err


class FancyNorm(nn.Module):
    def forward(self, x):
        return x


def test_a_norm_of_an_unknown_class_is_refused():
    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), FancyNorm())
    with pytest.raises(UsageError, match="unknown class \\(FancyNorm\\)"):
        load.norm_sites(model, "m")
    assert [s.name for s, _ in load.norm_sites(nn.Sequential(nn.LayerNorm(4)), "m")] == ["0"]
