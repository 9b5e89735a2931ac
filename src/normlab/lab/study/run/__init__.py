"""Running a study: the runner (``run_study``), its executors, the results store, the serial
timing phase, the plan ``--list`` prints, and ``--redecide``."""

from normlab.lab.study.run.plan import format_plan
from normlab.lab.study.run.redecide import redecide_study
from normlab.lab.study.run.runner import (
    Interrupted,
    StudyOptions,
    StudyResult,
    checks_device,
    configure,
    environment,
    run_study,
    start_anew,
    summary,
)
from normlab.lab.study.run.store import ResultStore, find_run, run_key, saved_config

__all__ = [
    "checks_device",
    "configure",
    "environment",
    "find_run",
    "format_plan",
    "Interrupted",
    "redecide_study",
    "ResultStore",
    "run_key",
    "run_study",
    "saved_config",
    "start_anew",
    "StudyOptions",
    "StudyResult",
    "summary",
]
