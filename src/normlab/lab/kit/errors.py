"""The lab's one user-facing error, at the bottom of the lab so that every layer of it (the
writer and the lock, the trainer, the engines, the commands) can raise it; every module imports
it from here."""

from __future__ import annotations


class UsageError(Exception):
    """What the user asked for cannot be done (a bad option value, a missing data file, a bad
    study spec): ``normlab`` prints ``normlab COMMAND: <message>`` and exits with status 2,
    without a traceback (``normlab --debug COMMAND ...`` shows it)."""
