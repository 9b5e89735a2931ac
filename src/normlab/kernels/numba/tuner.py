"""The launch-choice tuner: on the first large call of a key ``(op, dtype, hidden-size bucket)``
on a CPU, time the candidates of :func:`~normlab.kernels.numba.choices.candidates`, keep the
fastest and cache it (:mod:`normlab.kernels.numba.tune_cache`); later calls, and later processes
on the same CPU model and normlab version, look the pick up.

- The candidates are timed on inputs of their own, in the regime of the call
  (:func:`~normlab.kernels.numba.choices.from_memory`, a key of its own): ``2**22`` elements of
  the bucket's hidden size (out of the private caches) for calls the last-level cache serves,
  twice that cache (at most :data:`MEM_TUNE_BYTES`) for calls from DRAM. Serially and
  interleaved: each round runs every candidate once, the order reversed every other round, so a
  load spike of a shared machine lands on a round of every candidate rather than on one. A
  candidate's time is its median over rounds.
- A fixed budget per key (``NORMLAB_TUNE_BUDGET_S``, default 0.25 s) bounds the rounds (at
  least one); a first call of each candidate before them is not counted: it compiles the kernels
  if they are not yet (the old choice's the user's call would have paid anyway; a candidate with
  kernels of its own, ``bf16_pairs``, once per machine: the compiled code is cached).
- The old choice (:data:`~normlab.kernels.numba.choices.OLD`) stays unless a candidate's median
  beats it by more than :data:`KEEP_OLD_WITHIN`: a pick that moves on noise alone would change
  the last bits of results from one tuning to the next for nothing, and a gain of a few per cent
  in the tuner's rounds may not hold in the caller's (docs/kernels.md has a case).
- A second look before a pick other than the old choice is kept: the two alone, interleaved
  again for another budget, and the pick stands only if it beats the old choice by as much
  again. On a shared machine the first look's best of several candidates is partly the luck of
  its rounds (the best of k noisy medians is biased low); one timing of two, drawn afresh, is
  not. Only a key whose first look moves away from the old choice pays for it.
- Not on a busy machine: with a load average above :data:`BUSY_LOAD` per CPU the candidates
  would be timed against the load of the moment (fewer threads win on an oversubscribed
  machine, and would stay picked once it is quiet), so the process runs the shipped choice and
  caches nothing; a later process tunes.
- ``NORMLAB_TUNE=0``: no timing and no cache; the shipped table
  (:func:`~normlab.kernels.numba.choices.shipped`) or the old choices. ``NORMLAB_TUNE=always``:
  tune even on a busy machine (the benchmarks, the tests).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping

from normlab.kernels.numba import choices, tune_cache
from normlab.kernels.numba.choices import (
    MIN_ELEMENTS,
    OLD,
    Launch,
    bucket,
    candidates,
    cpu_count,
    key,
    shipped,
)
from normlab.kernels.numba.tune_cache import Timed, Tuned

TUNE_ELEMENTS = 1 << 22
MEM_TUNE_BYTES = 512 << 20  # the inputs' bytes for a call from memory, at most
KEEP_OLD_WITHIN = 0.05  # what the benchmark calls slower; smaller gains did not carry over
DEFAULT_BUDGET_S = 0.25
BUSY_LOAD = 1.5  # load average per CPU above which timings are not trusted

# ``calls(op, dtype, n, elements)(launch)``: a no-argument call of the launcher of ``op`` under a
# launch choice, on inputs of ``elements`` elements in rows of ``n`` made once.
Calls = Callable[[str, str, int, int], Callable[[Launch], Callable[[], object]]]

_memo: dict[str, Launch] = {}  # key -> the choice this process runs
_forced: dict[str, Launch] | None = None
_lock = threading.RLock()


def mode() -> str:
    """``NORMLAB_TUNE``: ``"0"`` (off), ``"always"`` (even on a busy machine), else ``"1"``."""
    value = os.environ.get("NORMLAB_TUNE", "1").strip().lower()
    return value if value in ("0", "always") else "1"


def busy() -> bool:
    """Whether the 1-minute load average exceeds :data:`BUSY_LOAD` per CPU (False where the
    platform has no load average)."""
    try:
        return os.getloadavg()[0] > BUSY_LOAD * cpu_count()
    except (AttributeError, OSError):
        return False


def budget_s() -> float:
    """Seconds of timing per key (``NORMLAB_TUNE_BUDGET_S``, default 0.25)."""
    try:
        return max(0.0, float(os.environ.get("NORMLAB_TUNE_BUDGET_S", DEFAULT_BUDGET_S)))
    except ValueError:
        return DEFAULT_BUDGET_S


def choice(op: str, dtype: str, elements: int, n: int, calls: Calls, parallel: bool) -> Launch:
    """The launch choice for a call of ``op`` on ``elements`` elements in rows of ``n``:
    forced (:func:`forced`), OLD below :data:`~normlab.kernels.numba.choices.MIN_ELEMENTS`,
    else this key's pick (tuned now on a miss when tuning is on and ``parallel``: Numba's pool
    may be used, so the candidates would run as later calls do)."""
    if _forced is not None:
        return _forced.get(op, OLD[op])
    if elements < MIN_ELEMENTS:
        return OLD[op]
    k = key(op, dtype, n, elements)
    hit = _memo.get(k)
    if hit is None:
        hit = _resolve(k, op, dtype, bucket(n), calls, parallel)
    return hit


def _resolve(k: str, op: str, dtype: str, n: int, calls: Calls, parallel: bool) -> Launch:
    with _lock:  # one tuning at a time in a process; a second thread then finds the pick
        if k in _memo:
            return _memo[k]
        on = mode()
        if on == "0":
            pick = shipped(k, op)
        else:
            path = tune_cache.cache_file()
            hit = tune_cache.load(path).get(k)
            cands = candidates(op, dtype=dtype, memory=k.endswith("/mem"))
            # a pick among other candidates (a build of the same version before they changed)
            # is timed again, so a new choice is tried
            if hit is not None and {t.launch for t in hit.timed} == set(cands):
                pick = hit.pick
            elif not parallel or (on != "always" and busy()):
                pick = shipped(k, op)
            else:
                tuned = tune(k, calls(op, dtype, n, tune_elements(k, dtype)), cands)
                _save(path, tuned)
                pick = tuned.pick
        _memo[k] = pick
        return pick


def tune_elements(k: str, dtype: str) -> int:
    """The elements of the inputs key ``k`` is timed on (see the module docstring)."""
    if k.endswith("/mem"):
        return min(2 * choices.llc_bytes(), MEM_TUNE_BYTES) // choices.ITEMSIZE[dtype]
    return TUNE_ELEMENTS


def _save(path, tuned: Tuned) -> None:
    try:
        tune_cache.store(path, {tuned.key: tuned})
    except OSError as e:  # a read-only cache: the pick still holds for this process
        warnings.warn(f"normlab: cannot write the kernel tuning cache {path} ({e})", stacklevel=3)


def tune(
    k: str, call: Callable[[Launch], Callable[[], object]], cands, budget: float | None = None
) -> Tuned:
    """Time ``cands`` (the first is the old choice) for key ``k`` within ``budget`` seconds
    (:func:`budget_s` if None) and pick one (:func:`pick`); a pick other than the old choice is
    kept only if a second look at the two picks it again."""
    budget = budget_s() if budget is None else budget
    runs = [call(c) for c in cands]
    for run in runs:  # a compile if one is due, page faults of the outputs: outside the budget
        run()
    timed = _look(cands, runs, budget)
    first = pick(timed)
    if first == cands[0]:
        return Tuned(k, first, timed, budget)
    best = cands.index(first)
    second = _look((cands[0], first), (runs[0], runs[best]), budget)
    return Tuned(k, pick(second), timed, budget, second)


def _look(cands, runs, budget: float) -> tuple[Timed, ...]:
    """Interleaved rounds of ``runs`` (the order reversed every other round) until ``budget``
    seconds have passed, at least one: each candidate's seconds per round."""
    t_end = time.perf_counter() + budget
    seconds: list[list[float]] = [[] for _ in runs]
    order = list(range(len(runs)))
    r = 0
    while r == 0 or time.perf_counter() < t_end:
        for i in order if r % 2 == 0 else order[::-1]:
            t0 = time.perf_counter()
            runs[i]()
            seconds[i].append(time.perf_counter() - t0)
        r += 1
    return tuple(Timed(c, tuple(s)) for c, s in zip(cands, seconds, strict=True))


def pick(timed: tuple[Timed, ...]) -> Launch:
    """The candidate of least median time, unless the old one (the first) is within
    :data:`KEEP_OLD_WITHIN` of it."""
    medians = [statistics.median(t.seconds) for t in timed]
    best = min(range(len(timed)), key=medians.__getitem__)
    if medians[0] <= (1 + KEEP_OLD_WITHIN) * medians[best]:
        return timed[0].launch
    return timed[best].launch


@contextlib.contextmanager
def forced(choices: Mapping[str, Launch]) -> Iterator[None]:
    """Run every call of the ops in ``choices`` with that choice (the others with OLD) while the
    block runs, whatever their size: what the tests and benchmarks use to run one candidate."""
    global _forced
    with _lock:
        before, _forced = _forced, dict(choices)
    try:
        yield
    finally:
        _forced = before


def reset() -> None:
    """Forget this process's picks (the next large call of each key looks it up again)."""
    with _lock:
        _memo.clear()
