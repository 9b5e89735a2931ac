"""What this process may use of the machine: its CPUs and its memory.

``os.cpu_count()`` counts the host's CPUs, not this process's: a container or a batch job is
limited by its CPU affinity and its cgroup's CPU quota, and by its cgroup's memory limit. Both
cgroup versions are read (v2's unified ``cpu.max``/``memory.max``, v1's ``cpu.cfs_quota_us`` and
``memory.limit_in_bytes``), along the process's own cgroup path and its ancestors; the tightest
limit wins. The paths are parameters so the tests can fake a machine.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = "/sys/fs/cgroup"
SELF_CGROUP = "/proc/self/cgroup"
MEMINFO = "/proc/meminfo"


@dataclass(frozen=True)
class Machine:
    """The CPUs this process may use, the memory it may still take (bytes), its GPUs."""

    cpus: int
    memory: int
    gpus: int = 0
    load: float = 0.0  # the 1-minute load average: other work now
    share: float = 1.0  # the fraction of a CPU a busy thread of ours gets now (cpu_share)


def this_machine(cuda: bool = False, share: bool = False) -> Machine:
    """This process's share of the machine; its GPUs counted only for ``cuda`` (that starts
    CUDA's driver here), the CPU share a thread gets measured only for ``share`` (a spin of
    :func:`cpu_share`'s window)."""
    gpus = 0
    if cuda:
        from normlab.lab.study.run.executors import visible_gpus

        gpus = len(visible_gpus())
    return Machine(
        usable_cpus(), available_memory(), gpus, load_now(), cpu_share() if share else 1.0
    )


def cpu_share(window: float = 0.3) -> float:
    """The fraction of one CPU a busy thread of this process gets now: a spin of ``window``
    seconds, its CPU time over its wall time (1 on an idle core, less beside other work, as
    the scheduler shares the CPUs however it does: by thread, by session, by cgroup)."""
    t0, c0 = time.perf_counter(), time.thread_time()
    while time.perf_counter() - t0 < window:
        pass
    return min(1.0, (time.thread_time() - c0) / max(time.perf_counter() - t0, 1e-9))


def load_now() -> float:
    """The 1-minute load average (0 where the system has none)."""
    with contextlib.suppress(AttributeError, OSError):
        return os.getloadavg()[0]
    return 0.0


def _read(path: Path) -> str | None:
    with contextlib.suppress(OSError):
        return path.read_text().strip()
    return None


def _cgroup_dirs(root: str, cgroup: str, v1: tuple[str, ...]) -> list[Path]:
    """The directories that may hold this process's limits, innermost first: its cgroup (v2's
    ``0::PATH`` line, or v1's line for one of the ``v1`` controllers) and every ancestor up to
    the root, under the unified hierarchy and under each v1 controller's mount."""
    base = Path(root)
    found: list[Path] = []
    for line in (_read(Path(cgroup)) or "").splitlines():
        _, controllers, rel = line.split(":", 2)
        names = controllers.split(",") if controllers else []
        if controllers and not set(names) & set(v1):
            continue
        mounts = [base] if not controllers else [base / controllers, *(base / n for n in names)]
        parts = Path(rel.lstrip("/")).parts
        for mount in mounts:
            found += [mount.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]
    found += [base, *(base / n for n in v1)]  # a container's own cgroup, mounted at the root
    return list(dict.fromkeys(found))


def cgroup_cpu_quota(root: str = CGROUP_ROOT, cgroup: str = SELF_CGROUP) -> float | None:
    """The CPUs the cgroup quota allows (quota / period, e.g. 1.5), or None: no quota."""
    quotas = []
    for d in _cgroup_dirs(root, cgroup, ("cpu", "cpu,cpuacct")):
        v2 = _read(d / "cpu.max")
        if v2 is not None:
            quota, _, period = v2.partition(" ")
            if quota != "max":
                quotas.append(int(quota) / int(period or 100_000))
        quota, period = _read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us")
        if quota is not None and period is not None and int(quota) > 0:
            quotas.append(int(quota) / int(period))
    return min(quotas, default=None)


def cpu_name() -> str:
    """The processor's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    with contextlib.suppress(OSError, StopIteration), open("/proc/cpuinfo") as f:
        return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    return platform.processor() or platform.machine()


def usable_cpus(root: str = CGROUP_ROOT, cgroup: str = SELF_CGROUP) -> int:
    """The CPUs this process may keep busy: those its affinity allows, no more than its cgroup's
    quota (rounded down: 1.5 CPUs of quota keep one worker busy, not two), at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota(root, cgroup)
    if quota is not None:
        cpus = min(cpus, math.floor(quota))
    return max(1, cpus)


def available_memory(
    root: str = CGROUP_ROOT, cgroup: str = SELF_CGROUP, meminfo: str = MEMINFO
) -> int:
    """Bytes this process may still allocate: the host's ``MemAvailable``, no more than what the
    cgroup's limit leaves above its usage (v1 reports "no limit" as a huge number, kept as is)."""
    lines = (_read(Path(meminfo)) or "").splitlines()
    found = [int(ln.split()[1]) * 1024 for ln in lines if ln.startswith("MemAvailable:")]
    avail = found[0] if found else os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    limits = []
    for d in _cgroup_dirs(root, cgroup, ("memory",)):
        for limit, usage in (("memory.max", "memory.current"),
                             ("memory.limit_in_bytes", "memory.usage_in_bytes")):  # fmt: skip
            lim, use = _read(d / limit), _read(d / usage)
            if lim is not None and lim != "max":
                limits.append(int(lim) - int(use or 0))
    return max(0, min([avail, *limits]))
