"""The one run sequence of ``normlab study`` and ``normlab advise``: its steps in order, a
command's hooks where it puts them, and a signal's exit status with the lock given back."""

import argparse

import pytest

from normlab.lab.commands.options import add_run_options
from normlab.lab.commands.run_sequence import RunSteps, run_sequence
from normlab.lab.kit.io import LOCK_FILE, hold
from normlab.lab.study.run import Interrupted
from normlab.lab.study.spec import load_builtin


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_run_options(p, out="unused", listed="the plan")
    return p.parse_args(list(argv))


class _Result:
    failed = ["base/seed1"]
    exit_code = 1


def _steps(calls: list[str], train) -> RunSteps:
    def hook(name):
        return lambda *a: calls.append(name)

    return RunSteps(
        "test",
        lambda study: calls.append("listing") or "the plan",
        train,
        study_of=lambda r: r,
        started=hook("started"),
        stopped=hook("stopped"),
        trained=hook("trained"),
        closing=hook("closing"),
    )


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("def f(x):\n    return x + 1\n" * 400)
    return str(path)


def test_list_prints_the_listing_and_runs_nothing(tmp_path, capsys):
    calls = []
    args = _args("--list", "--out", str(tmp_path / "out"))
    assert run_sequence(load_builtin("smoke"), args, _steps(calls, None)) == 0
    assert calls == ["listing"] and capsys.readouterr().out == "the plan\n"
    assert not (tmp_path / "out").exists()


def test_the_hooks_run_in_order_around_the_summary_and_the_failures(tmp_path, data, capsys):
    calls = []

    def train(study, options, corpus):
        # trained in the command's lock, on the data given
        assert (options.out / LOCK_FILE).read_text().split()[1] == "test"
        calls.append(f"train {len(corpus.train) > 0}")
        return _Result()

    out = tmp_path / "out"
    args = _args("--out", str(out), "--data", data, "--quiet")
    assert run_sequence(load_builtin("smoke"), args, _steps(calls, train)) == 1
    assert calls == ["started", "train True", "trained", "closing"]
    assert "base/seed1" in capsys.readouterr().err
    with hold(out, "next"):  # given back
        pass


def test_a_signal_stops_it_with_its_status_and_the_lock_given_back(tmp_path, data, capsys):
    calls = []

    def train(study, options, corpus):
        raise Interrupted(143)

    out = tmp_path / "out"
    args = _args("--out", str(out), "--data", data, "--quiet")
    assert run_sequence(load_builtin("smoke"), args, _steps(calls, train)) == 143
    assert calls == ["started", "stopped"] and "--resume" in capsys.readouterr().err
    with hold(out, "next"):
        pass
