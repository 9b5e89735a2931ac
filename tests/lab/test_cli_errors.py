"""A user's mistake, in any command, is one line on stderr and exit status 2, no traceback:
a missing or too small --data file, an --out that cannot be created, an out-of-range number."""

import pytest

from normlab.lab.cli import main
from normlab.lab.kit.errors import UsageError


def _fails(argv: list[str], capsys) -> str:
    """Run ``normlab ARGV``; it must fail with status 2 and one line. Returns that line."""
    try:
        rc = main(argv)
    except SystemExit as e:  # argparse's own errors
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"normlab {argv[0]}: "), err
    return err.strip()


@pytest.fixture
def files(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "small.txt").write_bytes(b"print('hello')\n" * 10)
    (tmp_path / "a-file").write_text("not a directory")
    return tmp_path


# ---- study


def test_study_missing_data(files, capsys):
    err = _fails(["study", "--preset", "smoke", "--out", str(files / "o"), "--data",
                  str(files / "nope.txt")], capsys)  # fmt: skip
    assert err == f"normlab study: --data {files / 'nope.txt'}: no such file"


@pytest.mark.parametrize("name", ["empty.txt", "small.txt"])
def test_study_empty_or_too_small_data(files, capsys, name):
    err = _fails(["study", "--preset", "smoke", "--out", str(files / "o"), "--data",
                  str(files / name)], capsys)  # fmt: skip
    assert f"--data {files / name}: corpus too small (" in err


def test_study_out_cannot_be_created(files, capsys):
    out = files / "a-file" / "out"
    err = _fails(["study", "--preset", "smoke", "--out", str(out)], capsys)
    assert err == f"normlab study: --out {out}: cannot create the directory (Not a directory)"


@pytest.mark.parametrize(("flag", "value", "what"), [
    ("--threads", "-1", "an int in [0, 1,024]"), ("--workers", "0", "an int in [1, 1,024]"),
    ("--workers", "two", "an int in [1, 1,024]"), ("--workers", "1000000", "an int in [1, 1,024]"),
])  # fmt: skip
def test_study_numbers_out_of_range(capsys, flag, value, what):
    err = _fails(["study", "--list", flag, value], capsys)
    assert f"argument {flag}: expected {what}, got " in err and "--help" in err


# ---- train


def test_train_missing_and_small_data(files, capsys):
    out = str(files / "o")
    err = _fails(["train", "--out", out, "--data", str(files / "nope.txt")], capsys)
    assert err == f"normlab train: --data {files / 'nope.txt'}: no such file"
    err = _fails(["train", "--out", out, "--data", str(files / "empty.txt")], capsys)
    assert "corpus too small (0 bytes)" in err


def test_train_out_cannot_be_created(files, capsys):
    out = files / "a-file" / "out"
    err = _fails(["train", "--out", str(out), "--data", str(files / "small.txt")], capsys)
    assert err.startswith(f"normlab train: --out {out}: cannot create the directory")


def test_train_bad_values(files, capsys):
    out = str(files / "o")
    err = _fails(["train", "--out", out, "--threads", "-1"], capsys)
    assert err == "normlab train: bad run config: threads must be >= 0, got -1"
    err = _fails(["train", "--out", out, "--dim", "30", "--n-heads", "4"], capsys)
    assert err == "normlab train: bad run config: dim=30 must be divisible by n_heads=4"
    err = _fails(["train", "--out", out, "--ckpt-every", "-5"], capsys)
    assert "argument --ckpt-every: expected an int >= 0, got -5" in err
    err = _fails(["train", "--out", out, "--preset", "quick", "--run", "nope"], capsys)
    assert err.startswith("normlab train: bad run config: --run must name a run of preset")


# ---- numerics, bench, demo


def test_numerics_out_and_rows(files, capsys):
    out = files / "a-file" / "out"
    err = _fails(["numerics", "--reduced", "--quiet", "--out", str(out)], capsys)
    assert err.startswith(f"normlab numerics: --out {out}: cannot create the directory")
    err = _fails(["numerics", "--rows", "0"], capsys)
    assert "argument --rows: expected an int >= 1, got 0" in err


def test_bench_out_threads_repeat_and_shapes(files, capsys):
    out = files / "a-file" / "out"
    err = _fails(["bench", "--quick", "--out", str(out)], capsys)
    assert err.startswith(f"normlab bench: --out {out}: cannot create the directory")
    assert "argument --threads: expected an int in [0, 1,024], got -1" in _fails(
        ["bench", "--threads", "-1"], capsys
    )
    err = _fails(["bench", "--repeat", "0"], capsys)
    assert "argument --repeat: expected an int in [1, 10,000], got 0" in err
    err = _fails(["bench", "--shapes", "1024by64"], capsys)
    assert "argument --shapes: expected MxN with M, N >= 1, e.g. 1024x64; got '1024by64'" in err


@pytest.mark.parametrize("command", ["bench", "inspect"])
def test_threads_are_bounded_on_the_command_line(command, capsys):
    args = [command, "--threads", "5000"] + (["a-model"] if command == "inspect" else [])
    err = _fails(args, capsys)
    assert "argument --threads: expected an int in [0, 1,024], got 5,000" in err


def test_demo_sizes(capsys):
    assert "argument --rows: expected an int >= 1, got 0" in _fails(["demo", "--rows", "0"], capsys)
    err = _fails(["demo", "--hidden", "100000000000"], capsys)
    assert "at hidden 100,000,000,000 a case needs about" in err
    assert "argument --hidden: expected an int >= 1" in _fails(["demo", "--hidden", "-3"], capsys)


def test_debug_shows_the_traceback(files):
    with pytest.raises(UsageError, match="no such file"):
        main(["--debug", "study", "--preset", "smoke", "--out", str(files / "o"), "--data",
              str(files / "nope.txt")])  # fmt: skip


@pytest.mark.parametrize("command", ["advise", "bench", "study", "numerics"])
def test_an_unknown_argument_points_to_its_own_commands_help(command, capsys):
    err = _fails([command, "--no-such-option"], capsys)
    assert err.endswith(f"unrecognized arguments: --no-such-option (see normlab {command} --help)")
