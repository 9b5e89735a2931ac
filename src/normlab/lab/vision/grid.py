"""``normlab vision``: every run of the registered plan (``findings.Plan``), each in a process
of one thread, then the findings decided and written: ``vision-findings.json`` (the verdicts
with their values per seed, design, seed block and seeds, as every findings file),
``vision-runs.json`` (each run's loss, error and CPU seconds) and ``vision-loss.png``."""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import utc
from normlab.lab.numerics.measuring import seeds_of
from normlab.lab.vision.cnn_findings import Plan, decide, loss
from normlab.lab.vision.net import Arm, Outcome, Recipe, train

FILES = ("vision-findings.json", "vision-runs.json", "vision-loss.png")


@dataclass(frozen=True)
class VisionOptions:
    out: Path = Path("normlab-out/vision")
    seed_block: int = 0
    plan: Plan = field(default_factory=Plan)
    jobs: int = 1  # processes, one torch thread each
    progress: bool = True


def _one(job: tuple[Arm, int, Recipe]) -> Outcome:
    import torch

    torch.set_num_threads(1)  # tiny convs: one thread per run, runs side by side
    return train(*job)


def run_all(options: VisionOptions) -> dict[tuple[Arm, int], Outcome]:
    """Every (arm, seed) of the plan on the seed block, ``options.jobs`` processes."""
    from tqdm.auto import tqdm

    from normlab.lab.kit.threads import using_threads

    seeds = seeds_of(options.seed_block, options.plan.seeds)
    jobs = [(a, s, options.plan.recipe) for s in seeds for a in options.plan.arms()]
    bar = tqdm(total=len(jobs), desc="vision runs", disable=not options.progress, leave=False)
    out = {}
    if options.jobs <= 1:
        with using_threads(1):
            for job in jobs:
                out[job[0], job[1]] = train(*job)
                bar.update()
    else:
        import multiprocessing

        # spawn: a forked child of a process whose torch started its thread pool may hang
        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(options.jobs, mp_context=ctx) as pool:
            for o in pool.map(_one, jobs, chunksize=1):
                out[o.arm, o.seed] = o
                bar.update()
    bar.close()
    return out


def findings(options: VisionOptions, runs, began: str) -> list[dict]:
    """Every finding decided from ``runs``, with what a findings file records beside it."""
    plan = options.plan
    seeds = list(seeds_of(options.seed_block, plan.seeds))
    out = []
    for f in plan.findings():
        verdict = decide(f, runs, seeds, plan.factors)
        means = {
            f"mean L {a.label}": sum(loss(runs[a, s]) for s in seeds) / len(seeds)
            for a in (Arm(b.norm, b.batch, r) for r in (1.0, *plan.factors) for b in f.arms)
        }
        registered = {"design": plan.design(f), "seed_block": options.seed_block, "began": began}
        out.append(verdict | {"means": means, **registered, "seeds": seeds})
    return out


def run_vision(options: VisionOptions) -> tuple[list[dict], dict[tuple[Arm, int], Outcome]]:
    """Run the plan, decide it and write ``FILES`` into ``options.out``."""
    from normlab.lab.kit.io import write_file, write_json
    from normlab.lab.kit.packages import importable
    from normlab.lab.vision.plot import loss_plot

    if not importable("sklearn"):
        raise UsageError('needs scikit-learn for its digits: pip install "normlab[lab]"')
    began = utc()
    wall = time.perf_counter()
    runs = run_all(options)
    decided = findings(options, runs, began)
    out = Path(options.out)
    write_json(out / FILES[0], decided, "\n", indent=1, ensure_ascii=False)
    meta = {"wall_s": round(time.perf_counter() - wall, 1), "jobs": options.jobs}
    write_json(out / FILES[1], {**meta, "runs": [asdict(o) for o in runs.values()]}, "\n", indent=1)
    write_file(out / FILES[2], loss_plot(runs, options.plan))
    return decided, runs


def listing(plan: Plan, seed_block: int) -> str:
    """What a run of ``plan`` does, before it runs (``--list``)."""
    arms = plan.arms()
    lines = [
        f"seed block {seed_block}: seeds {seeds_of(seed_block, plan.seeds)[0]}… ({plan.seeds})",
        f"recipe: {plan.recipe.words()}",
        f"{len(arms)} arms × {plan.seeds} seeds = {len(arms) * plan.seeds} runs:",
        *(f"  {a.label}" for a in arms),
        *(f"{f.finding.name}: {f.finding.describe()}" for f in plan.findings()),
    ]
    return "\n".join(lines)


def summary(decided: list[dict], runs) -> str:
    lines = [f"{len(runs)} runs, {sum(o.cpu_s for o in runs.values()):,.0f} CPU s"]
    for f in decided:
        why = f" ({f['why']})" if f.get("why") else ""
        lines.append(f"{f['name']}: {f['verdict']}{why}")
        lines += [f"  {p['part']}: {p['why']}" for p in f["parts"]]
    return "\n".join(lines)
