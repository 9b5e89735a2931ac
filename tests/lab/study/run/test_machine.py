"""What this process may use of the machine, from faked cgroup trees, affinities and meminfo."""

import os

import pytest

from normlab.lab.study.run import machine
from normlab.lab.study.run.machine import available_memory, cgroup_cpu_quota, usable_cpus

GIB = 2**30


def _tree(root, files: dict[str, str]):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
    return str(root / "fs"), str(root / "self-cgroup")


@pytest.fixture
def cpus16(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)


@pytest.mark.parametrize(
    ("files", "want"),
    [
        # cgroup v2, the container's own cgroup at the root: 1.5 CPUs keep one worker busy.
        ({"self-cgroup": "0::/", "fs/cpu.max": "150000 100000"}, 1),
        ({"self-cgroup": "0::/", "fs/cpu.max": "max 100000"}, 16),
        ({"self-cgroup": "0::/", "fs/cpu.max": "800000 100000"}, 8),
        # v2 nested: the parent's quota binds though the process's own cgroup has none.
        (
            {
                "self-cgroup": "0::/user.slice/job",
                "fs/user.slice/job/cpu.max": "max 100000",
                "fs/user.slice/cpu.max": "200000 100000",
            },
            2,
        ),
        # cgroup v1 (cpu and cpuacct co-mounted), quota -1 = none.
        (
            {
                "self-cgroup": "3:cpu,cpuacct:/\n0::/",
                "fs/cpu,cpuacct/cpu.cfs_quota_us": "400000",
                "fs/cpu,cpuacct/cpu.cfs_period_us": "100000",
            },
            4,
        ),
        (
            {
                "self-cgroup": "3:cpu:/\n2:cpuacct:/",
                "fs/cpu/cpu.cfs_quota_us": "-1",
                "fs/cpu/cpu.cfs_period_us": "100000",
            },
            16,
        ),
        # No cgroup files at all: the affinity alone; a quota above it changes nothing.
        ({"self-cgroup": "0::/"}, 16),
        ({"self-cgroup": "0::/", "fs/cpu.max": "3200000 100000"}, 16),
    ],
)
def test_usable_cpus_are_the_affinity_within_the_cgroup_quota(tmp_path, cpus16, files, want):
    assert usable_cpus(*_tree(tmp_path, files)) == want


def test_usable_cpus_count_the_affinity_not_the_host(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert usable_cpus(*_tree(tmp_path, {"self-cgroup": "0::/"})) == 2
    tiny = {"self-cgroup": "0::/", "fs/cpu.max": "20000 100000"}  # 0.2 CPUs: still one worker
    assert usable_cpus(*_tree(tmp_path, tiny)) == 1
    assert cgroup_cpu_quota(*_tree(tmp_path, tiny)) == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("files", "want"),
    [
        ({"self-cgroup": "0::/"}, 8 * GIB),  # the host's MemAvailable
        # v2: what the limit leaves above the usage.
        (
            {
                "self-cgroup": "0::/",
                "fs/memory.max": str(4 * GIB),
                "fs/memory.current": str(1 * GIB),
            },
            3 * GIB,
        ),  # fmt: skip
        ({"self-cgroup": "0::/", "fs/memory.max": "max", "fs/memory.current": "5"}, 8 * GIB),
        # v1 at a nested path; its "no limit" is a huge number.
        (
            {
                "self-cgroup": "4:memory:/jobs/a",
                "fs/memory/jobs/a/memory.limit_in_bytes": str(2 * GIB),
                "fs/memory/jobs/a/memory.usage_in_bytes": str(GIB // 2),
            },
            3 * GIB // 2,
        ),  # fmt: skip
        (
            {
                "self-cgroup": "4:memory:/",
                "fs/memory/memory.limit_in_bytes": "9223372036854771712",
                "fs/memory/memory.usage_in_bytes": "1",
            },
            8 * GIB,
        ),  # fmt: skip
    ],
)
def test_available_memory_is_the_tightest_of_host_and_cgroup(tmp_path, files, want):
    root, cgroup = _tree(tmp_path, files)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(f"MemTotal: {16 * GIB // 1024} kB\nMemAvailable: {8 * GIB // 1024} kB\n")
    assert available_memory(root, cgroup, str(meminfo)) == want


def test_this_machine_reads_this_process():
    m = machine.this_machine()
    assert 1 <= m.cpus <= (os.cpu_count() or 1) and m.memory > 0 and m.gpus == 0
