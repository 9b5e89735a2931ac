"""The ``normlab`` command: --help lists exactly the subcommands that exist, each with --help."""

import subprocess
import sys

import pytest

from normlab.lab.cli import SUBCOMMANDS, build_parser, main


def test_help_lists_every_subcommand():
    out = subprocess.run(
        [sys.executable, "-m", "normlab", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for name in SUBCOMMANDS:
        assert name in out


@pytest.mark.parametrize("name", list(SUBCOMMANDS))
def test_every_subcommand_has_help_with_defaults(name, capsys):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args([name, "--help"])
    assert e.value.code == 0
    assert "usage: normlab " + name in capsys.readouterr().out


def test_train_help_gives_every_option_its_help_text():
    """Every ``normlab train`` option has help text, the config fields' from their metadata
    (``normlab.models.config.setting``, no source parsing); every field is an option but the
    two the field table excludes."""
    import argparse
    import dataclasses

    from normlab.lab.commands.train import add_arguments
    from normlab.lab.train.config import TrainConfig
    from normlab.models import TransformerConfig

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    helps = {a.dest: a.help for a in parser._actions if a.dest != "help"}
    assert all(h and h.strip() for h in helps.values()), [d for d, h in helps.items() if not h]
    for cls in (TrainConfig, TransformerConfig):
        for f in dataclasses.fields(cls):
            assert f.metadata["help"], f.name
            if f.name in ("model", "vocab_size"):
                assert f.name not in helps
            else:
                assert helps[f.name].startswith(f.metadata["help"]), f.name


def test_unknown_subcommand_fails():
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["frobnicate"])
    assert e.value.code == 2


def test_demo_runs(capsys):
    assert main(["demo", "--rows", "8", "--hidden", "16"]) == 0
    out = capsys.readouterr().out
    assert "rms_norm" in out and "reference" in out
