"""What a study's wall time holds beyond its training runs, for ``--list``: the command's start,
each worker's, the serial timing phase and the reports.

The constants are CPU seconds on the project's 2-core VM (an Intel Xeon on 2026-12-06, where a
step of the quick preset's base arm took 0.034 CPU s against 0.038 s from its FLOPs at
``plan.GFLOPS_PER_CORE``), timed piece by piece by ``benchmarks/bench_study_overhead.py`` (the
medians of 3 interleaved rounds; docs/benchmarks.md has the figures and their ratio to that
step). These one-thread pieces take as long in wall time on an idle machine; beside
other work ``--list`` scales the estimate by the CPU share a thread gets
(``machine.cpu_share``), and the first study after installing normlab compiles its Numba
kernels once (about 15 s per norm kind in each worker; they are cached after).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

START_S = 2.9  # the command: Python, torch and the lab imported, the corpus read
# A spawned worker: the same, and the norms' kernels loaded from their cache by its first run.
WORKER_START_S = 5.4
# One process of the timing phase on two toy arms, whole: its start (3.2 s) and its models
# built, warmed up and timed; a larger model adds its steps (timing_seconds).
TIMING_PROCESS_S = 6.2
REPORT_S = 0.39  # per claim: its plots and sections in report.html and report.md


@dataclass(frozen=True)
class Overhead:
    """The parts of a study's wall time that are not its training runs, in seconds."""

    start: float  # the command's own start, and its workers' (they start at once)
    timing: float  # the serial timing phase
    reports: float

    @property
    def total(self) -> float:
        return self.start + self.timing + self.reports

    def words(self) -> str:
        return (
            f"{self.start:.0f} s start-up, {self.timing:.0f} s serial timing phase, "
            f"{self.reports:.0f} s reports"
        )


def timing_seconds(study, step_s: Callable) -> float:
    """The serial timing phase of ``study``: per process (the most any timing claim asks), its
    start and toy arms' work (:data:`TIMING_PROCESS_S`), and each timed arm's training steps,
    ``step_s(config)`` seconds each: warm-up and timed rounds, each arm twice a round (ABBA),
    :data:`normlab.lab.study.run.timing.STEP_REPS` steps a measurement."""
    from normlab.lab.study.run.timing import STEP_REPS, TIMING_ROUNDS, WARMUP_ROUNDS

    arms, processes = study.timing_phase()
    if not arms:
        return 0.0
    configs = {a.name: a.config for a in study.arms}
    steps = (WARMUP_ROUNDS + TIMING_ROUNDS) * 2 * STEP_REPS
    return processes * (TIMING_PROCESS_S + steps * sum(step_s(configs[a]) for a in arms))


def overhead(study, workers: int, step_s: Callable) -> Overhead:
    """What ``study`` adds to its training runs with ``workers`` workers (one: the runs train
    in the command's own process, no worker starts)."""
    start = START_S + (WORKER_START_S if workers > 1 else 0.0)
    return Overhead(start, timing_seconds(study, step_s), REPORT_S * len(study.claims))
