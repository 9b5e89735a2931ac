"""The report's last section, folded: the arms (seeds, outcomes, mean numbers), their configs
and the environment."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from normlab.lab.kit import doc as d
from normlab.lab.study.decide import MEASURES
from normlab.lab.train.result import RunResult


def fmt(x: Any) -> str:
    """A value as the report's tables write it: a float to 4 significant digits, None as –."""
    if isinstance(x, float):
        return f"{x:.4g}"
    return "–" if x is None else str(x)


def _describe_model(cfg: dict) -> str:
    m = cfg["model"]
    return (
        f"{m['arch']} {m['placement']}-{m['norm']} d={m['dim']} L={m['n_layers']} "
        f"T={cfg['seq_len']} B={cfg['batch_size']} steps={cfg['steps']} lr={cfg['lr']:g} "
        f"warmup={cfg['warmup_steps']} init={m['init']}"
    )


def _arm_rows(study, results) -> list[tuple[str, ...]]:
    """One row per arm: seeds, outcome and the mean of the main numbers over its seeds."""
    rows = []
    for r in study.arms:
        runs = list(results.get(r.name, {}).values())
        ok = [x for x in runs if x.status == "ok"]

        def mean(key: str, runs=ok) -> str:
            xs = [x.summary.get(key) for x in runs]
            xs = [x for x in xs if isinstance(x, int | float)]
            if not xs:
                return "–"
            m = statistics.fmean(xs)
            return fmt(m) if len(xs) < 2 else f"{fmt(m)} ± {fmt(statistics.stdev(xs))}"

        stalled = sorted(x.stopped_step for x in ok if x.stopped_step)
        stopped = f" ({len(stalled)} stalled at step {stalled[0]})" if stalled else ""
        rows.append(
            (
                r.name,
                _describe_model(r.config.to_dict()),
                f"{len(runs)}/{study.seeds(r.name)}",
                f"{len(runs) - len(ok)}{stopped}",
                mean("final_val_loss"),
                _branch_ratios(runs),
                mean("step_ms"),
                mean("cpu_s"),
            )
        )
    return rows


def _branch_ratios(runs: list[RunResult]) -> str:
    """ "attn / mlp": the branch share of the variance at init, mean over the arm's seeds."""
    means = []
    for key in ("attn_branch_ratio", "mlp_branch_ratio"):
        xs = [v for v in (MEASURES[key].read(r, None) for r in runs) if v is not None]
        means.append(f"{statistics.fmean(xs):.2f}" if xs else None)
    return "–" if None in means else " / ".join(means)


ARM_HEADER = (
    "arm", "model", "seeds", "diverged", "final val loss",
    "Var f / Var(x+f) at init (attn / mlp)", "ms/step", "CPU s",
)  # fmt: skip


def arms_section(out: Path, study, results, meta) -> list[d.Block]:
    """The arms, their configs and the environment, each folded, and the link to the numerics
    page where ``normlab numerics`` wrote one."""
    env = {**meta.environment, **{f"corpus {k}": x for k, x in meta.corpus.items()}}
    configs = tuple(
        d.Details(r.name, (d.Pre(json.dumps(r.config.to_dict(), indent=1), "json"),))
        for r in study.arms
    )
    if (out / "numerics.html").exists():
        link = d.Link("precision and overflow of the norms in FP16/BF16/FP32", "numerics.html")
        numerics: d.Inline = (" ", link)
    else:
        run = d.Code(f"normlab numerics --out {out}")
        numerics = (" not run — ", run, " adds a precision page linked here.")
    return [
        d.Heading(2, "Arms, configs and environment", "arms"),
        d.Paragraph((d.Strong("Numerics:"), *numerics), muted=True),
        d.Details(
            "Arms: seeds, outcomes and mean numbers",
            (d.Table(ARM_HEADER, tuple(_arm_rows(study, results))),),
        ),
        d.Details("Configs", configs),
        d.Details("Environment", (d.Table(("", ""), tuple((k, fmt(x)) for k, x in env.items())),)),
    ]
