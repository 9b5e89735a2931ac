"""The one check of a refusal, shared by tests/test_refusals.py and tests/test_hostile*.py."""

from __future__ import annotations

import time

from normlab.lab.cli import main


def refused(argv: list[str], capsys, *, within: float | None = None, warm: bool = False) -> str:
    """``normlab ARGV``: status 2 and one line naming the command, with no terminal escape;
    decided ``within`` seconds (of the call after a first one where ``warm``, so that the first
    call's imports do not count)."""
    for _ in range(2 if warm else 1):
        capsys.readouterr()
        t0 = time.perf_counter()
        try:
            rc = main(argv)
        except SystemExit as e:
            rc = e.code
        elapsed = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"normlab {argv[0]}: "), err
    assert "\x1b" not in err, err
    if within is not None:
        assert elapsed < within, f"{elapsed:.2f} s to refuse: {err}"
    return err.strip()
