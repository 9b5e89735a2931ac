"""``normlab study --list``: the plan of a study (arms x seeds, claims, estimated CPU time)
without running anything.

The CPU time is estimated from a FLOP count of each run (6 x parameters x tokens for the
training steps, attention included, 2 x for each forward-only evaluation) at
``GFLOPS_PER_CORE``, a rate measured for these small models with one thread per run on the
2-core AMD EPYC VM; it is a plan, not a promise.
"""

from __future__ import annotations

from normlab.lab.render import text_table
from normlab.lab.train.trainer import TrainConfig

GFLOPS_PER_CORE = 40.0
RUN_OVERHEAD_S = 0.3  # building the model, the probes, the process hand-off


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


def format_plan(preset, seed_block: int = 0, how: str | None = None) -> str:
    """The plan as text; ``how`` is the option that chose the study (default ``--preset``)."""
    tasks = preset.runs(seed_block)
    rows, total = [], 0.0
    for r in preset.arms:
        n = preset.seeds(r.name)
        est = n * cpu_seconds(r.config)
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
    lines = [
        f"normlab study {how or '--preset ' + preset.name} --seed {seed_block}: "
        f"{preset.description}",
        f"{len(preset.arms)} arms, {len(tasks)} runs (seeds {seed_block * 10_000} + i), "
        f"estimated {total:.0f} CPU s (~{total / 120:.1f} min on 2 cores), plus the serial "
        "timing phase",
        "",
        text_table(["arm", "seeds", "model", "steps", "est. CPU s"], rows),
        "",
        text_table(
            ["claim", "seeds", "arms"],
            [[c.name, "timed" if c.timed else c.seeds, ", ".join(c.arms)] for c in preset.claims],
        ),
    ]
    return "\n".join(lines)
