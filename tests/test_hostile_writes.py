"""Hostile input, round 3 (docs/refusals.md): where the lab writes. An empty directory argument,
a directory another command holds (whatever RANK says), an output directory that holds a study
or a user's files, and a symlinked output directory or folder in it: each is one line on stderr
and exit status 2, or is set aside whole, and nothing is written where it should not be."""

import json
import os
from pathlib import Path

import pytest
from conftest import QUICK_S0, finished_quick_study
from refusal import refused
from test_hostile import SPEC, TRAINS

import normlab.lab.commands.numerics as numerics_command
import normlab.lab.commands.study as study_command
import normlab.lab.train.dist_trainer as dist_trainer
from normlab.lab.cli import main
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import LOCK_FILE, hold, is_main_process, write_file

QUICK_SPEC = str(QUICK_S0 / "spec.toml")


@pytest.fixture
def no_work(monkeypatch, tmp_path):
    """Training a study or a run fails the test (a flag that fell through would start one), and
    the working directory is a fresh one (where ``--out ""`` would write)."""

    def refuse(*a, **k):
        raise AssertionError("the command went on to train")

    monkeypatch.setattr(study_command, "_train", refuse)
    monkeypatch.setattr(dist_trainer, "train_process", refuse)
    monkeypatch.setattr(numerics_command, "run_numerics", refuse)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _tiny_study(tmp_path: Path) -> list[str]:
    """``normlab study`` of a two-arm spec at two steps: the fastest study that writes."""
    spec, data = tmp_path / "s.toml", tmp_path / "data.txt"
    spec.write_text(SPEC.format(model="", claim=TRAINS))
    data.write_text("def f(x):\n    return x + 1\n" * 400)
    return ["study", "--spec", str(spec), "--data", str(data), "--workers", "1", "--threads", "1",
            "--quiet"]  # fmt: skip


# ---- an empty directory argument


@pytest.mark.parametrize(
    "argv",
    [
        ["study", "--redecide", ""],
        ["study", "--coverage", ""],
        ["study", "--size-seeds", ""],
        ["study", "--spec", "", "--list"],
        ["study", "--preset", "smoke", "--out", ""],
        ["study", "--compare", "", "x"],
        ["train", "--steps", "1", "--out", ""],
        ["train", "--steps", "1", "--data", ""],
        ["advise", "--redecide", ""],
        ["numerics", "--out", ""],
    ],
)
def test_an_empty_directory_argument_is_refused_not_a_default(no_work, capsys, argv):
    err = refused(argv, capsys)
    assert "expected a path, got an empty string" in err
    assert not list(no_work.iterdir())  # nothing made in the working directory


def test_a_path_option_is_not_empty_and_has_no_control_character():
    from normlab.lab.kit.reading import path_arg

    assert path_arg("runs/a b") == "runs/a b"
    for bad in ("", "a\x1b[2Jb", "a\nb", "x" * 5000):
        with pytest.raises(ValueError):
            path_arg(bad)


# ---- every command that writes takes its directory's lock


def test_redecide_takes_the_lock_of_its_directory(tmp_path, capsys):
    out = finished_quick_study(tmp_path / "q")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with hold(out, "study"):
        err = refused(["study", "--redecide", str(out), "--spec", QUICK_SPEC, "--quiet"], capsys)
    assert f"--redecide {out} is in use by normlab study (PID {os.getpid()})" in err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != LOCK_FILE} == before


def test_coverage_takes_the_lock_of_the_docs_it_writes(tmp_path, capsys):
    (tmp_path / "data").mkdir()
    with hold(tmp_path, "study"):
        err = refused(["study", "--coverage", str(tmp_path)], capsys)
    assert "--coverage" in err and "is in use by normlab study" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_FILE, "data"]


@pytest.mark.parametrize("env", [{"RANK": "1"}, {"RANK": "3", "WORLD_SIZE": "1"}])
def test_a_rank_in_the_environment_does_not_skip_the_lock(tmp_path, capsys, monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert is_main_process()  # a lone process: it writes, so it holds the lock
    with hold(tmp_path, "study"):
        err = refused(["train", "--steps", "1", "--dim", "8", "--n-layers", "1", "--n-heads",
                       "2", "--out", str(tmp_path)], capsys)  # fmt: skip
    assert "is in use by normlab study" in err
    assert not (tmp_path / "config.json").exists()


def test_ranks_that_are_no_job_are_refused(monkeypatch):
    from normlab.lab.kit.io import job_rank

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert job_rank() == (0, 1)
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in ("x", "2", "-1"):
        monkeypatch.setenv("RANK", rank)
        with pytest.raises(UsageError, match="not a torchrun job's"):
            job_rank()
    monkeypatch.setenv("RANK", "1")
    assert job_rank() == (1, 2) and not is_main_process()  # rank 1 of a job writes nothing


# ---- a directory holding a study is set aside whole, never overwritten


def test_a_study_rerun_without_resume_keeps_the_old_one_whole(tmp_path, capsys):
    out = finished_quick_study(tmp_path / "out")
    write_file(out / "report.md", "my notes\n")  # a file of the user's, of a name a study writes
    old = {n: (out / n).read_bytes() for n in ("study.json", "results.jsonl", "report.md")}
    assert main([*_tiny_study(tmp_path), "--out", str(out)]) == 0
    (previous,) = [p for p in out.iterdir() if p.name.startswith("previous-")]
    assert {n: (previous / n).read_bytes() for n in old} == old  # nothing overwritten
    assert json.loads((out / "study.json").read_text())["preset"] == "h"  # the new study's
    # what was set aside is a study that can be decided again, as it ran
    assert main(["study", "--redecide", str(previous), "--spec", QUICK_SPEC, "--quiet"]) == 0
    assert json.loads((previous / "claims.json").read_text())["preset"] == "quick"
    assert "moved to" in capsys.readouterr().err


def test_an_out_that_is_a_symlink_to_another_study_is_refused(tmp_path, capsys):
    other = finished_quick_study(tmp_path / "other")
    before = {p.name: p.read_bytes() for p in other.iterdir()}
    (tmp_path / "link").symlink_to(other)
    err = refused([*_tiny_study(tmp_path), "--out", str(tmp_path / "link")], capsys)
    assert f"{tmp_path / 'link'} is a symlink; the lab does not write through one" in err
    assert {p.name: p.read_bytes() for p in other.iterdir()} == before


# ---- no symlinked folder is written through


def test_a_plots_folder_that_is_a_symlink_is_not_written_through(tmp_path, capsys):
    out = finished_quick_study(tmp_path / "q")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "plots").symlink_to(elsewhere)
    err = refused(["study", "--redecide", str(out), "--spec", QUICK_SPEC, "--quiet"], capsys)
    assert f"{out / 'plots'} is a symlink; the lab does not write through one" in err
    assert not list(elsewhere.iterdir()) and not (out / "report.md").exists()


def test_the_writer_and_the_appender_refuse_a_symlinked_directory(tmp_path):
    from normlab.lab.kit.io import open_append

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    for write in (lambda p: write_file(p, "x"), lambda p: os.close(open_append(p))):
        with pytest.raises(UsageError, match="is a symlink"):
            write(tmp_path / "link" / "f")
    assert not list((tmp_path / "real").iterdir())
