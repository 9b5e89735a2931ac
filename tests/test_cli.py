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


def test_unknown_subcommand_fails():
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["frobnicate"])
    assert e.value.code == 2


def test_demo_runs(capsys):
    assert main(["demo", "--rows", "8", "--hidden", "16"]) == 0
    out = capsys.readouterr().out
    assert "rms_norm" in out and "reference" in out
