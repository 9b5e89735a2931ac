"""``normlab study --list``: the plan of a study (arms x seeds, claims, estimated time) without
running anything; and how its runs share this machine (:func:`plan_workers`: workers from the
usable CPUs and memory, threads by model width; :func:`longest_first`: the submission order).

The CPU time is estimated from a FLOP count of each run (6 x parameters x tokens for the
training steps, attention included, 2 x for each forward-only evaluation) at
``GFLOPS_PER_CORE``, a rate measured for these small models with one thread per run on the
2-core AMD EPYC VM; it is a plan, not a promise.

A study on CUDA is estimated from :data:`GPU_CALIBRATION`, keyed by the GPU's name
(``torch.cuda.get_device_name()``): the same FLOP count at a fraction of the GPU's dense peak,
plus a host-side cost per kernel launch (the lab's models are small: deep narrow ones are
launch-bound). **No entry is measured yet**: the H200's numbers are assumptions (30 % of the
peak, 8 µs a launch), and the plan says so ("estimate, not measured") until a run on that GPU
replaces them with fitted values and sets ``measured`` (docs/gpu.md says how).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.limits import fmt_bytes
from normlab.lab.kit.render import text_table
from normlab.lab.study.run import machine as host
from normlab.lab.study.run.machine import Machine
from normlab.lab.study.run.overhead import overhead
from normlab.lab.train.serving import BATCH1_SEQUENCES, n_probes
from normlab.lab.train.trainer import TrainConfig
from normlab.models.config import TransformerConfig
from normlab.models.size import param_count, run_bytes

GFLOPS_PER_CORE = 40.0
RUN_OVERHEAD_S = 0.3  # building the model, the probes, the process hand-off

# The torch threads that pay for a model's width: (widest d, threads), narrowest first; wider
# than the last entry: its threads x 2. These models' small GEMMs gain little from a second
# thread, which a separate run on that core uses fully, and a thread that waits in a barrier
# for a busy core stalls its run; benchmarks/bench_study_scaling.py --threads measures it
# (docs/benchmarks.md: up to d=512 measured, the wider entries not yet).
THREADS_BY_DIM: tuple[tuple[int, int], ...] = ((512, 1), (2048, 2))
# A worker process before its run: Python, torch, Numba, the corpus (its peak RSS, measured).
WORKER_BYTES = 400 * 2**20
# What one run adds whatever its size (Numba's kernels, the allocator's pools; measured), and
# the share of the memory available now that the workers may plan to take.
RUN_BASE_BYTES = 320 * 2**20
MEMORY_SHARE = 0.8
# Runs at once on one GPU (its worker processes share it): small, launch-bound models overlap.
WORKERS_PER_GPU = 2


@dataclass(frozen=True)
class GpuCalibration:
    """How fast the lab's training steps go on one GPU model."""

    peak_tflops: dict[str, float]  # the dense peak per precision (fp32: no TF32, torch's default)
    utilisation: float  # the fraction of the peak the lab's small models reach
    launch_us: float  # host-side cost of one kernel launch, eager PyTorch
    measured: str | None = None  # None: assumed; else the date and command that fitted these
    start_s: float = 20.0  # a study's start: CUDA context, Triton's compiles
    run_s: float = 1.0  # a run's own: building the model (on the CPU) and moving it


GPU_CALIBRATION: dict[str, GpuCalibration] = {
    # Peak: NVIDIA's H200 SXM datasheet (989 TFLOP/s dense BF16/FP16, 67 TFLOP/s FP32).
    # Utilisation and launch cost: assumed, not measured (docs/gpu.md).
    "NVIDIA H200": GpuCalibration(
        peak_tflops={"bf16": 989.0, "fp16": 989.0, "fp32": 67.0}, utilisation=0.30, launch_us=8.0
    ),
}
REFERENCE_GPU = "NVIDIA H200"  # the entry a plan uses on a machine whose GPU has none
# Kernel launches of one training step (forward, backward, autocast casts), per block and for
# the rest (embedding, head, loss, clipping, the fused AdamW): counted from the models' ops.
KERNELS_PER_BLOCK = 40
KERNELS_PER_STEP = 30


def forward_flops(cfg: TrainConfig) -> float:
    """Floating-point operations of one forward pass of one batch (a training step: 3 x)."""
    m = cfg.model
    tokens = cfg.batch_size * cfg.seq_len
    # Blocks (attention's four matrices, the MLP: three matrices gated, two not) and the head;
    # the MLP term follows mlp_ratio, which a model read from a config may set far from 4.
    mlp = (3 if m.arch == "llama" else 2) * m.dim * m.hidden_dim
    dense = (4 * m.dim * m.dim + mlp) * m.n_layers + m.dim * m.vocab_size
    attn = 2 * m.n_layers * cfg.seq_len * m.dim  # per token: scores and weighted values
    return 2 * (dense + attn) * tokens


def flops(cfg: TrainConfig) -> float:
    """Floating-point operations of one run (training steps, probes and evaluation)."""
    fwd = forward_flops(cfg)
    return 3 * fwd * (cfg.steps + len(cfg.probe_steps)) + fwd * forward_passes(cfg)


def forward_passes(cfg: TrainConfig) -> float:
    """Forward-only passes of one batch: the validation set's (twice with ``eval_train_mode``)
    and the serving measures' (:func:`serving_forwards`)."""
    batches = cfg.val_sequences // cfg.batch_size
    evals = batches * (2 if cfg.eval_train_mode else 1) if cfg.steps else 0
    return evals + serving_forwards(cfg)


def serving_forwards(cfg: TrainConfig) -> float:
    """Forward passes of one batch that the serving measures make (``eval_serving``): six
    passes over the probes, and each batch-1 forward counted as a whole batch's, as its
    per-call cost is at the lab's sizes."""
    if not (cfg.eval_serving and cfg.steps):
        return 0.0
    probes = n_probes(cfg.val_sequences, cfg.batch_size)
    return 6 * probes / cfg.batch_size + min(probes, BATCH1_SEQUENCES)


def cpu_seconds(cfg: TrainConfig) -> float:
    return RUN_OVERHEAD_S + flops(cfg) / (GFLOPS_PER_CORE * 1e9)


def run_threads(cfg: TrainConfig) -> int:
    """The torch threads that pay for ``cfg``'s model width (:data:`THREADS_BY_DIM`)."""
    wider = 2 * THREADS_BY_DIM[-1][1]
    return next((threads for dim, threads in THREADS_BY_DIM if cfg.model.dim <= dim), wider)


def run_memory(model: TransformerConfig, batch_size: int, seq_len: int) -> int:
    """Bytes a run of ``model`` trained in fp32 on ``batch_size`` x ``seq_len`` tokens takes at
    its peak, over its worker process: the size model the size checks use
    (``normlab.models.size.run_bytes``: AdamW state, buffers, activations, probes, validation
    tokens) and :data:`RUN_BASE_BYTES`. Config arithmetic only (nothing is built)."""
    return RUN_BASE_BYTES + run_bytes(model, batch_size, seq_len)


def host_memory(cfg: TrainConfig) -> int:
    """Bytes of this machine's memory a run takes: all of it on the CPU (:func:`run_memory`);
    on CUDA the model's fp32 weights, built here before they move (the GPU's memory is not
    planned)."""
    if cfg.device == "cuda":
        return RUN_BASE_BYTES + 4 * param_count(cfg.model)
    return run_memory(cfg.model, cfg.batch_size, cfg.seq_len)


def longest_first(runs: Iterable) -> list:
    """``runs`` by estimated cost, longest first (ties keep their order): the longest runs then
    start first and the last to finish are short ones, so the workers end together. A CUDA
    run's cost is the reference GPU's estimate, another's its CPU seconds at one thread."""
    ref = GPU_CALIBRATION[REFERENCE_GPU]
    cost = lambda cfg: gpu_seconds(cfg, ref) if cfg.device == "cuda" else cpu_seconds(cfg)
    return sorted(runs, key=lambda r: -cost(r.config))


@dataclass(frozen=True)
class WorkerPlan:
    """How a study's runs share the machine: ``workers`` runs at once, each worker with up to
    ``threads`` torch threads. ``limit`` says what set the workers (cores, memory, runs, gpus, or
    --workers); ``fixed``: every run gets ``threads`` (``--threads``), not its width's own."""

    workers: int
    threads: int
    limit: str
    fixed: bool = False

    def threads_for(self, cfg: TrainConfig) -> int:
        """The torch threads of one run: its width's (:func:`run_threads`) within the worker's
        share, or ``--threads``."""
        return self.threads if self.fixed else min(run_threads(cfg), self.threads)

    def describe(self, configs: Iterable[TrainConfig], cpus: int) -> str:
        """The plan for ``configs`` in a line, for ``--list``."""
        ts = sorted({self.threads_for(c) for c in configs} or {self.threads})
        threads = f"{ts[0]}" if len(ts) == 1 else f"{ts[0]}-{ts[-1]}"
        by = "--threads" if self.fixed else "by model width"
        return (
            f"{self.workers} worker(s) x {threads} thread(s) a run ({by}) on {cpus} usable "
            f"CPU(s); workers set by {self.limit}"
        )


def plan_workers(
    configs: Sequence[TrainConfig],
    machine: Machine | None = None,
    workers: int = 0,
    threads: int = 0,
) -> WorkerPlan:
    """The plan for training ``configs`` on ``machine`` (None: this one). ``workers`` and
    ``threads`` (``--workers``, ``--threads``; 0: from the machine) override. By default each run
    gets the threads its width pays for, and there are as many workers as the usable CPUs hold
    at the widest run's threads, no more than the runs, than the available memory holds at the
    largest run's estimate (:func:`host_memory`), nor, on CUDA, :data:`WORKERS_PER_GPU` per GPU.
    With ``workers`` given, a run's threads stay within the worker's share of the CPUs."""
    cuda = any(c.device == "cuda" for c in configs)
    machine = machine or host.this_machine(cuda)
    wanted = threads or min(max(map(run_threads, configs), default=1), machine.cpus)
    if workers:
        check_workers(configs, workers, machine)
        return WorkerPlan(workers, threads or min(wanted, max(1, machine.cpus // workers)),
                          "--workers", bool(threads))  # fmt: skip
    per_run = WORKER_BYTES + max(map(host_memory, configs), default=0)
    bounds = [
        (machine.cpus // wanted, "cores"),
        (int(machine.memory * MEMORY_SHARE // per_run), "memory"),
        (len(configs), "runs"),
    ]
    if cuda:
        bounds.append((WORKERS_PER_GPU * max(1, machine.gpus), "GPUs"))
    n, limit = min(bounds, key=lambda b: b[0])
    return WorkerPlan(max(1, n), wanted, limit, bool(threads))


def check_workers(
    configs: Sequence[TrainConfig], workers: int, machine: Machine | None = None
) -> None:
    """A :class:`UsageError` if ``workers`` (``--workers``) runs of ``configs`` at once, each a
    worker and the largest run, need more than the memory available: counted before any
    process starts, as the default plan counts them."""
    if not workers:
        return
    per_run = WORKER_BYTES + max(map(host_memory, configs), default=0)
    memory = (machine or host.this_machine()).memory
    if workers * per_run > memory:
        raise UsageError(
            f"--workers {workers:,}: that many runs at once need about "
            f"{fmt_bytes(workers * per_run)} ({fmt_bytes(per_run)} each), more than the "
            f"{fmt_bytes(memory)} this machine has available; at most {max(1, memory // per_run):,}"
        )


def wall_seconds(costs: Iterable[float], workers: int) -> float:
    """The training phase's wall time when runs of these costs (seconds, in submission order)
    go to ``workers`` workers, each run to the first free one."""
    free = [0.0] * max(1, workers)
    for c in costs:
        heapq.heappush(free, heapq.heappop(free) + c)
    return max(free)


def launches(cfg: TrainConfig) -> float:
    """Kernel launches of one run: a training step's for each step and probe, a third of one
    (forward only) for each batch of the validation set (``eval_sequences`` where set)."""
    return step_launches(cfg) * (cfg.steps + len(cfg.probe_steps) + forward_passes(cfg) / 3)


def step_launches(cfg: TrainConfig) -> int:
    """Kernel launches of one training step."""
    return cfg.model.n_layers * KERNELS_PER_BLOCK + KERNELS_PER_STEP


def gpu_seconds(cfg: TrainConfig, cal: GpuCalibration) -> float:
    """One run on the GPU ``cal`` describes: FLOPs at its utilisation, plus its launches."""
    rate = cal.peak_tflops[cfg.precision] * 1e12 * cal.utilisation
    return cal.run_s + flops(cfg) / rate + launches(cfg) * cal.launch_us * 1e-6


def gpu_step_seconds(cfg: TrainConfig, cal: GpuCalibration) -> float:
    """One training step on the GPU ``cal`` describes (the timing phase's unit)."""
    rate = cal.peak_tflops[cfg.precision] * 1e12 * cal.utilisation
    return 3 * forward_flops(cfg) / rate + step_launches(cfg) * cal.launch_us * 1e-6


def cpu_step_seconds(cfg: TrainConfig, threads: int = 1) -> float:
    """One training step on this machine's CPU at ``threads`` threads, counted as that many
    times as fast (the timing phase's unit)."""
    return 3 * forward_flops(cfg) / (GFLOPS_PER_CORE * 1e9) / max(1, threads)


def calibration(name: str | None) -> tuple[str, GpuCalibration, str]:
    """The calibration for the GPU ``name`` (None: no CUDA here), its key, and a note on where
    it comes from."""
    if name in GPU_CALIBRATION:
        where = f"this machine's {name}"
    else:
        where = "no CUDA device here" if name is None else f"no calibration for {name} here"
        where += f"; the estimate is for the {REFERENCE_GPU}"
        name = REFERENCE_GPU
    cal = GPU_CALIBRATION[name]
    if cal.measured:
        how = f"calibrated {cal.measured}"
    else:
        how = (
            f"estimate, not measured: FLOPs at an assumed {cal.utilisation:.0%} of the dense "
            f"peak, {cal.launch_us:g} µs per kernel launch, {cal.start_s:g} s start-up "
            "(docs/gpu.md)"
        )
    return name, cal, f"{where}; {how}"


def _at_load(wall: float, machine: Machine) -> str:
    """The wall time at the CPU share a thread of this process gets now (``machine.share``,
    measured), where other work takes some: every phase's threads slowed alike."""
    if machine.share > 0.9:
        return ""
    return (
        f"; ~{wall / machine.share:.0f} s at the {machine.share:.0%} of a CPU a thread gets now "
        f"(load {machine.load:.1f} on {machine.cpus} CPUs)"
    )


def _seeds(study, claim) -> str:
    if claim.timed:
        return "timed"
    if study.without_interval(claim):  # tell before the runs, not in the report
        return f"{claim.seeds}: no interval, not testable"
    return str(claim.seeds)


def format_plan(
    study,
    seed_block: int = 0,
    how: str | None = None,
    *,
    workers: int = 0,
    threads: int = 0,
    machine: Machine | None = None,
    assume=None,
) -> str:
    """The plan as text; ``how`` is the option that chose the study (default ``--preset``);
    ``workers``/``threads`` as ``--workers``/``--threads`` give them (0: from ``machine``,
    default this one); a sequential study's worst and expected cost under ``assume``
    (a ``budget.Assumption``; none: the worst only)."""
    import torch

    tasks = study.runs(seed_block)
    cuda = any(a.config.device == "cuda" for a in study.arms)
    machine = machine or host.this_machine(cuda, share=not cuda)
    wp = plan_workers([t.config for t in tasks], machine, workers, threads)
    how_run = wp.describe([t.config for t in tasks], machine.cpus)
    if cuda:
        gpu, cal, note = calibration(
            torch.cuda.get_device_name() if torch.cuda.is_available() else None
        )
        cost, unit = (lambda cfg: gpu_seconds(cfg, cal)), "est. GPU s"
        oh = overhead(study, 1, lambda cfg: gpu_step_seconds(cfg, cal))
    else:
        cost, unit = cpu_seconds, "est. CPU s"
        oh = overhead(study, wp.workers, lambda cfg: cpu_step_seconds(cfg, wp.threads_for(cfg)))
    rows, total = [], 0.0
    for r in study.arms:
        n, m = study.seeds(r.name), r.config.model
        est = n * cost(r.config)
        total += est
        model = f"{m.arch} {m.placement}-{m.norm} d={m.dim} L={m.n_layers}"
        rows.append([r.name, n, model, r.config.steps, f"{est:.0f}"])
    runs = f"{len(study.arms)} arms, {len(tasks)} runs (seeds {seed_block * 10_000} + i)"
    if cuda:
        precisions = "/".join(sorted({a.config.precision for a in study.arms}))
        total += cal.start_s + oh.total
        estimate = [
            f"{runs} on CUDA in {precisions}, estimated {total:.0f} s (~{total / 60:.1f} min) on "
            f"one {gpu}, one run at a time, with {oh.words()}",
            f"({note})",
            f"plan: {how_run}",
        ]
    else:
        # A run with t threads is counted t times as fast: exact for one-thread runs, an
        # optimistic bound for the wider ones (THREADS_BY_DIM gives threads only where they pay).
        walls = [cost(t.config) / wp.threads_for(t.config) for t in longest_first(tasks)]
        train = wall_seconds(walls, wp.workers)
        wall = train + oh.total
        estimate = [
            f"{runs}, estimated {total:.0f} CPU s of training; on this machine ~{wall:.0f} s "
            f"(~{wall / 60:.1f} min) wall idle: {train:.0f} s training, {oh.words()}"
            + _at_load(wall, machine),
            "(the first study after installing also compiles the kernels: ~15 s a norm kind)",
            f"plan: {how_run}; runs longest first",
        ]
    if study.sequential is not None:
        from normlab.lab.study.run import budget

        b = budget.budget(study, cost, assume or budget.NONE)
        estimate.append(
            f"{study.sequential.words()}: {budget.words(b, unit.removeprefix('est. '))}"
        )
    if study.left_out:
        n = len(study.left_out)
        estimate.append(
            f"{n} extended claim{'s' * (n != 1)} left out ({', '.join(study.left_out)}): "
            "--set extended=true runs them too"
        )
    sets = "".join(f" --set {o}" for o in study.overrides)
    claims = [[c.name, _seeds(study, c), ", ".join(c.arms)] for c in study.claims]
    lines = [
        f"normlab study {how or '--preset ' + study.name}{sets} --seed {seed_block}: "
        f"{study.description}",
        *estimate,
        *([f"overrides (--set): {', '.join(study.overrides)}"] if sets else []),
        "",
        text_table(["arm", "seeds", "model", "steps", unit], rows),
        "",
        text_table(["claim", "seeds", "arms"], claims),
    ]
    return "\n".join(lines)
