"""``normlab study --list``: the plan of a study (arms x seeds, claims, estimated time) without
running anything.

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

from dataclasses import dataclass

from normlab.lab.render import text_table
from normlab.lab.train.trainer import TrainConfig

GFLOPS_PER_CORE = 40.0
RUN_OVERHEAD_S = 0.3  # building the model, the probes, the process hand-off


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


def flops(cfg: TrainConfig) -> float:
    """Floating-point operations of one run (training steps, probes and evaluation)."""
    m = cfg.model
    tokens = cfg.batch_size * cfg.seq_len
    # Blocks (attention's four matrices, the MLP: three matrices gated, two not) and the head;
    # the MLP term follows mlp_ratio, which a model read from a config may set far from 4.
    mlp = (3 if m.arch == "llama" else 2) * m.dim * m.hidden_dim
    dense = (4 * m.dim * m.dim + mlp) * m.n_layers + m.dim * m.vocab_size
    attn = 2 * m.n_layers * cfg.seq_len * m.dim  # per token: scores and weighted values
    fwd = 2 * (dense + attn) * tokens
    batches = cfg.eval_sequences // cfg.batch_size if cfg.eval_sequences else cfg.eval_batches
    evals = batches * (2 if cfg.eval_train_mode else 1) if cfg.steps else 0
    return 3 * fwd * (cfg.steps + len(cfg.probe_steps)) + fwd * evals


def cpu_seconds(cfg: TrainConfig) -> float:
    return RUN_OVERHEAD_S + flops(cfg) / (GFLOPS_PER_CORE * 1e9)


def launches(cfg: TrainConfig) -> float:
    """Kernel launches of one run: a training step's for each step and probe, a third of one
    (forward only) for each evaluation batch."""
    per_step = cfg.model.n_layers * KERNELS_PER_BLOCK + KERNELS_PER_STEP
    evals = cfg.eval_batches * (2 if cfg.eval_train_mode else 1) if cfg.steps else 0
    return per_step * (cfg.steps + len(cfg.probe_steps) + evals / 3)


def gpu_seconds(cfg: TrainConfig, cal: GpuCalibration) -> float:
    """One run on the GPU ``cal`` describes: FLOPs at its utilisation, plus its launches."""
    rate = cal.peak_tflops[cfg.precision] * 1e12 * cal.utilisation
    return cal.run_s + flops(cfg) / rate + launches(cfg) * cal.launch_us * 1e-6


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


def _here_gpu() -> str | None:
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def format_plan(preset, seed_block: int = 0, how: str | None = None) -> str:
    """The plan as text; ``how`` is the option that chose the study (default ``--preset``)."""
    tasks = preset.runs(seed_block)
    cuda = any(a.config.device == "cuda" for a in preset.arms)
    if cuda:
        gpu, cal, note = calibration(_here_gpu())
        cost, unit = (lambda cfg: gpu_seconds(cfg, cal)), "est. GPU s"
    else:
        cost, unit = cpu_seconds, "est. CPU s"
    rows, total = [], 0.0
    for r in preset.arms:
        n = preset.seeds(r.name)
        est = n * cost(r.config)
        total += est
        m = r.config.model
        rows.append(
            [
                r.name,
                n,
                f"{m.arch} {m.placement}-{m.norm} d={m.dim} L={m.n_layers}",
                r.config.steps,
                f"{est:.0f}",
            ]
        )
    runs = f"{len(preset.arms)} arms, {len(tasks)} runs (seeds {seed_block * 10_000} + i)"
    if cuda:
        precisions = "/".join(sorted({a.config.precision for a in preset.arms}))
        total += cal.start_s
        estimate = [
            f"{runs} on CUDA in {precisions}, estimated {total:.0f} s (~{total / 60:.1f} min) on "
            f"one {gpu}, one run at a time, plus the serial timing phase",
            f"({note})",
        ]
    else:
        estimate = [
            f"{runs}, estimated {total:.0f} CPU s (~{total / 120:.1f} min on 2 cores), plus the "
            "serial timing phase"
        ]
    sets = "".join(f" --set {o}" for o in preset.overrides)
    lines = [
        f"normlab study {how or '--preset ' + preset.name}{sets} --seed {seed_block}: "
        f"{preset.description}",
        *estimate,
        *([f"overrides (--set): {', '.join(preset.overrides)}"] if sets else []),
        "",
        text_table(["arm", "seeds", "model", "steps", unit], rows),
        "",
        text_table(
            ["claim", "seeds", "arms"],
            [[c.name, "timed" if c.timed else c.seeds, ", ".join(c.arms)] for c in preset.claims],
        ),
    ]
    return "\n".join(lines)
