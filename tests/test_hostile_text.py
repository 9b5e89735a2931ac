"""Hostile input, round 2 (docs/refusals.md), continued: the files of others (the lock's sweep,
the locks of numerics and bench, a FIFO lock, the Numba cache) and text that would reach a
terminal or Markdown raw (control characters in keys, names, descriptions, results, study.json,
a compared claims.json)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import QUICK_S0, finished_quick_study
from test_hostile import SPEC, TRAINS, _refused

from normlab.lab.kit.io import LOCK_FILE, hold
from normlab.lab.study.spec.parse import parse_spec

# ---- files of others


def test_the_sweep_removes_only_dead_writers_temp_files(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    out = tmp_path / "out"
    nested = out / "nested"
    nested.mkdir(parents=True)
    (nested / LOCK_FILE).write_text("")  # another command's --out, swept by that command
    keep = [
        out / "mine.normlab-tmp",  # a user's own file of that suffix
        out / f".report.md.{os.getpid()}.0123abcd.normlab-tmp",  # a live writer's
        nested / f".x.{dead}.0123abcd.normlab-tmp",  # inside another --out
    ]
    gone = out / f".report.md.{dead}.0123abcd.normlab-tmp"
    for p in [*keep, gone]:
        p.write_text("x")
    with hold(out, "study"):
        pass
    assert all(p.exists() for p in keep) and not gone.exists()


def test_numerics_and_bench_hold_their_out(tmp_path, capsys):
    with hold(tmp_path, "study"):
        err = _refused(["numerics", "--reduced", "--quiet", "--out", str(tmp_path)], capsys)
        assert f"--out {tmp_path} is in use by normlab study" in err
        err = _refused(["bench", "--quick", "--out", str(tmp_path)], capsys)
        assert f"--out {tmp_path} is in use by normlab study" in err


def test_a_lock_that_is_a_fifo(tmp_path, capsys):
    os.mkfifo(tmp_path / LOCK_FILE)
    err = _refused(["study", "--preset", "smoke", "--out", str(tmp_path), "--quiet"], capsys)
    assert "its lock file .normlab.lock is not a regular file" in err


def test_the_numba_cache_is_the_users(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    from normlab.kernels.numba import cache_dir

    assert cache_dir() == tmp_path / "normlab" / "numba"


# ---- terminal control


@pytest.mark.parametrize(
    ("head", "says"),
    [
        ('"a\\u001b[2J" = 1\n', 'the key "a\\u001b[2J": the control character'),
        ('name = "x\\u001b]0;pwned\\u0007"\n', "the control character '\\x1b' is not allowed"),
        ('name = "two\\nlines"\n', "name: the control character '\\n' is not allowed"),
        ('description = "\\u001b[31mred"\n', "the control character '\\x1b' is not allowed"),
    ],
)
def test_names_keys_and_descriptions_reach_no_terminal_raw(tmp_path, capsys, head, says):
    text = head + SPEC.format(model="", claim=TRAINS).replace('name = "h"\n', "", 1)
    path = tmp_path / "t.toml"
    path.write_text(text)
    assert says in _refused(["study", "--spec", str(path), "--list"], capsys)


def test_a_name_without_control_characters_is_kept():
    study = parse_spec(SPEC.format(model="", claim=TRAINS), "s.toml")
    assert study.name == "h"  # the plain spec is accepted as before


@pytest.mark.parametrize(
    ("verdict", "says"),
    [
        ("holds\x1b[2J", "the control character '\\x1b' is not allowed"),
        ("holds\n| x |", 'claims[0].verdict: expected one of "holds", "does not hold"'),
        ("DEEP", "nested more than 32 deep"),
    ],
)
def test_compare_copies_no_hostile_string_into_markdown(tmp_path, capsys, verdict, says):
    dirs = []
    for name in ("good", "bad"):
        (tmp_path / name).mkdir()
        claim = {"name": "c", "verdict": "holds" if name == "good" else verdict}
        if name == "bad" and verdict == "DEEP":
            claim["verdict"] = json.loads("[" * 40 + "]" * 40)
        doc = {"preset": "p", "claims": [claim]}
        (tmp_path / name / "claims.json").write_text(json.dumps(doc))
        dirs.append(str(tmp_path / name))
    err = _refused(["study", "--compare", *dirs], capsys)
    assert f"--compare: {tmp_path / 'bad' / 'claims.json'}: " in err and says in err


def test_control_characters_in_a_results_line_or_study_json(tmp_path, capsys):
    out = finished_quick_study(tmp_path / "q")
    spec = str(QUICK_S0 / "spec.toml")
    argv = ["study", "--redecide", str(out), "--spec", spec, "--quiet"]
    lines = (out / "results.jsonl").read_text().splitlines()
    rec = json.loads(lines[0])
    (out / "results.jsonl").write_text(json.dumps({**rec, "name": "a\x1b[2J"}) + "\n")
    err = _refused(argv, capsys)
    assert "results.jsonl line 1: name: the control character '\\x1b' is not allowed" in err
    meta = json.loads((out / "study.json").read_text())
    (out / "study.json").write_text(json.dumps({**meta, "preset": "q\x1b]0;x\x07"}))
    assert "preset: the control character '\\x1b' is not allowed" in _refused(argv, capsys)
