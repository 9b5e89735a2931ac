"""The study's plan: workers and threads from (faked) machines, the memory estimate, the order
and the wall-time estimate of ``--list``."""

from dataclasses import replace

import pytest

from normlab.lab.study.run.machine import Machine
from normlab.lab.study.run.overhead import (
    REPORT_S,
    START_S,
    TIMING_PROCESS_S,
    WORKER_START_S,
    overhead,
    timing_seconds,
)
from normlab.lab.study.run.plan import (
    MEMORY_SHARE,
    THREADS_BY_DIM,
    WORKER_BYTES,
    WorkerPlan,
    cpu_seconds,
    cpu_step_seconds,
    format_plan,
    longest_first,
    plan_workers,
    run_memory,
    run_threads,
    serving_forwards,
    wall_seconds,
)
from normlab.lab.study.run.runner import configure
from normlab.lab.study.spec.parse import load_builtin
from normlab.models.config import TransformerConfig

GIB = 2**30
ROOMY = 256 * GIB


@pytest.fixture(scope="module")
def quick():
    return configure(load_builtin("quick", whole=True), "cpu")


def _configs(study):
    return [r.config for r in study.runs()]


def _dim(cfg, dim):
    return cfg.replace(model=replace(cfg.model, dim=dim))


def _wide(quick, dim):
    return [_dim(c, dim) for c in _configs(quick)]


def test_run_threads_follow_the_table():
    base = configure(load_builtin("quick", whole=True), "cpu").arms[0].config
    at = {d: run_threads(_dim(base, d)) for d in
          (64, 128, 136, 512, 520, 2048, 4096)}  # fmt: skip
    assert at == {64: 1, 128: 1, 136: 1, 512: 1, 520: 2, 2048: 2, 4096: 4}
    assert THREADS_BY_DIM[0][1] == 1 and THREADS_BY_DIM[0][0] >= 128


@pytest.mark.parametrize(
    ("cpus", "workers", "threads", "limit"),
    [(2, 2, 1, "cores"), (1, 1, 1, "cores"), (16, 16, 1, "cores"), (64, 64, 1, "cores")],
)
def test_the_quick_preset_gets_a_worker_per_usable_cpu_one_thread_each(
    quick, cpus, workers, threads, limit
):
    assert plan_workers(_configs(quick), Machine(cpus, ROOMY)) == WorkerPlan(
        workers, threads, limit
    )


def test_wider_models_get_more_threads_and_fewer_workers(quick):
    assert plan_workers(_wide(quick, 1024), Machine(16, ROOMY)) == WorkerPlan(8, 2, "cores")
    assert plan_workers(_wide(quick, 4096), Machine(16, 1024 * GIB)) == WorkerPlan(4, 4, "cores")
    # More threads than the machine has: one worker with all of them.
    assert plan_workers(_wide(quick, 4096), Machine(2, 1024 * GIB)) == WorkerPlan(1, 2, "cores")


def test_memory_bounds_the_workers(quick):
    configs = _configs(quick)
    worst = max(run_memory(c.model, c.batch_size, c.seq_len) for c in configs)
    mem = 3 * GIB
    plan = plan_workers(configs, Machine(16, mem))
    assert plan.limit == "memory" and plan.workers == int(
        mem * MEMORY_SHARE // (WORKER_BYTES + worst)
    )
    assert 1 <= plan.workers < 16
    # Too little memory for even one: still one worker (the study runs, slowly or not at all).
    assert plan_workers(configs, Machine(16, 10 * 2**20)).workers == 1


def test_few_runs_get_few_workers_and_no_extra_threads(quick):
    three = _configs(quick)[:3]
    assert plan_workers(three, Machine(16, ROOMY)) == WorkerPlan(3, 1, "runs")


def test_cuda_runs_share_each_gpu_between_two_workers(quick):
    cuda = [c.replace(device="cuda") for c in _configs(quick)]
    assert plan_workers(cuda, Machine(16, ROOMY, gpus=1)) == WorkerPlan(2, 1, "GPUs")
    assert plan_workers(cuda, Machine(16, ROOMY, gpus=4)) == WorkerPlan(8, 1, "GPUs")


def test_workers_and_threads_override(quick):
    configs, m = _configs(quick), Machine(16, ROOMY)
    # --workers: threads still by width, within the worker's share of the CPUs.
    assert plan_workers(configs, m, workers=4) == WorkerPlan(4, 1, "--workers")
    assert plan_workers(_wide(quick, 1024), m, workers=8) == WorkerPlan(8, 2, "--workers")
    # --threads: every run gets them; the workers fill the CPUs at that count.
    plan = plan_workers(configs, m, threads=3)
    assert plan == WorkerPlan(5, 3, "cores", fixed=True)
    assert {plan.threads_for(c) for c in _wide(quick, 2048)} == {3}
    assert plan_workers(configs, m, workers=2, threads=2) == WorkerPlan(2, 2, "--workers", True)


def test_threads_for_stays_within_the_workers_share(quick):
    plan = WorkerPlan(8, 2, "cores")
    c = _configs(quick)[0]
    assert plan.threads_for(c) == 1
    assert plan.threads_for(_dim(c, 2048)) == 2


def test_run_memory_grows_with_every_size():
    m = TransformerConfig(256, 64, 4, 4, max_seq_len=64)
    base = run_memory(m, 16, 64)
    assert base < run_memory(replace(m, dim=128), 16, 64)
    assert base < run_memory(replace(m, n_layers=8), 16, 64)
    assert base < run_memory(m, 32, 64) and base < run_memory(m, 16, 128)
    # Activations are linear in the batch, and the peak is the larger of two moments (a training
    # step, the probes at step 0), each linear in it: doubling it twice adds at least twice.
    assert run_memory(m, 64, 64) - run_memory(m, 32, 64) >= 2 * (run_memory(m, 32, 64) - base)
    assert run_memory(m, 64, 64) - base > 3 * (run_memory(m, 32, 64) - base) // 2


def test_longest_first_is_by_cost_and_stable(quick):
    runs = quick.runs()
    ordered = longest_first(runs)
    costs = [cpu_seconds(r.config) for r in ordered]
    assert costs == sorted(costs, reverse=True) and sorted(map(id, ordered)) == sorted(
        map(id, runs)
    )
    ties = [r for r in ordered if r.arm == "no-final-norm"]
    assert [r.index for r in ties] == sorted(r.index for r in ties)


def test_wall_seconds_assigns_each_run_to_the_first_free_worker():
    assert wall_seconds([4, 1, 1, 1, 1], 2) == 4  # longest first
    assert wall_seconds([1, 1, 1, 1, 4], 2) == 6  # the long one last: a tail
    assert wall_seconds([5, 1, 1], 8) == 5 and wall_seconds([], 4) == 0
    assert wall_seconds([1, 2, 3], 1) == 6


def test_list_shows_the_plan_and_its_wall_time(quick):
    total = sum(cpu_seconds(c) for c in _configs(quick))
    two = format_plan(quick, machine=Machine(2, ROOMY))
    assert "2 worker(s) x 1 thread(s) a run (by model width) on 2 usable CPU(s)" in two
    assert "workers set by cores" in two and "longest first" in two
    sixteen = format_plan(quick, machine=Machine(16, ROOMY))
    wall = wall_seconds([cpu_seconds(r.config) for r in longest_first(quick.runs())], 16)
    assert f"{wall:.0f} s training" in sixteen and "16 worker(s)" in sixteen
    assert wall < total / 8  # the quick preset's many short runs fill 16 workers
    forced = format_plan(quick, workers=1, threads=2, machine=Machine(16, ROOMY))
    assert "1 worker(s) x 2 thread(s) a run (--threads)" in forced and "set by --workers" in forced


def test_list_wall_time_holds_the_start_the_timing_phase_and_the_reports(quick):
    # --list once promised ~5 s for an advise smoke that took 90 s: the runs alone were counted
    smoke = configure(load_builtin("smoke"), "cpu")
    idle = format_plan(smoke, machine=Machine(2, ROOMY))
    runs = longest_first(smoke.runs())
    train = wall_seconds([cpu_seconds(r.config) for r in runs], 2)  # one thread a run
    oh = overhead(smoke, 2, cpu_step_seconds)
    processes = max(c.rule.processes for c in smoke.claims if c.timed)
    assert oh.start == START_S + WORKER_START_S  # the command's, then its workers' at once
    assert oh.reports == REPORT_S * len(smoke.claims)
    assert processes * TIMING_PROCESS_S <= oh.timing < processes * (TIMING_PROCESS_S + 1)
    wall = train + oh.total
    assert oh.total > 2 * train  # a toy study's wall time is mostly these
    assert f"~{wall:.0f} s (~{wall / 60:.1f} min) wall idle: {train:.0f} s training, " in idle
    assert f"{oh.start:.0f} s start-up, {oh.timing:.0f} s serial timing phase" in idle
    assert "at the load now" not in idle
    assert overhead(smoke, 1, cpu_step_seconds).start == START_S  # the runs train in-process
    # a larger model's timed steps add to each timing process
    per_process = timing_seconds(quick, cpu_step_seconds) / 16
    assert per_process > TIMING_PROCESS_S + 1
    # beside other work, every phase at the CPU share a thread gets now
    loaded = format_plan(smoke, machine=Machine(2, ROOMY, load=6.0, share=0.4))
    assert f"; ~{wall / 0.4:.0f} s at the 40% of a CPU a thread gets now (load 6.0 on 2" in loaded
    assert timing_seconds(configure(load_builtin("deep"), "cpu"), cpu_step_seconds) == 0


def test_the_serving_measures_are_costed_as_their_forward_passes(quick):
    bn = next(a.config for a in quick.arms if a.name == "batchnorm")  # B=16, 1024 val sequences
    off = bn.replace(eval_serving=False)
    # six passes over 256 probes in batches of 16, and 64 batch-1 forwards
    assert serving_forwards(bn) == 6 * 256 / 16 + 64 and serving_forwards(off) == 0
    assert cpu_seconds(off) < cpu_seconds(bn) < 1.5 * cpu_seconds(off)
    assert serving_forwards(bn.replace(steps=0, probe_steps=(0,))) == 0  # nothing trained


def test_list_tells_which_claims_have_too_few_seeds_for_an_interval():
    deep = configure(load_builtin("deep"), "cpu")
    rows = {line.split()[0]: line for line in format_plan(deep).splitlines() if line}
    assert "1: no interval, not testable" in rows["deepnorm-trains-1000"]
    assert rows["deepnorm-beats-post-100"].split()[1] == "12"
    assert "no interval" not in format_plan(configure(load_builtin("quick"), "cpu"))
