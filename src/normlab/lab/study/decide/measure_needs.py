"""What a measure needs of the run it reads (``Need``), and the check that a study's claims read
each measure only on arms configured to produce it (``unmet``).

A measure reads the trainer's output by key; an arm that does not produce what it reads (no probe
after step 0 for an end-of-training measure, no ``eval_serving`` for a serving measure) gives no
value on any seed, and the rule can then only bound it: the verdict is inconclusive with no error.
The spec loader refuses such a design instead (``parse``), naming the arm, the measure and the
setting to change.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from normlab.lab.study.decide.rules_protocol import compound_parts

if TYPE_CHECKING:
    from normlab.lab.train import TrainConfig
    from normlab.lab.train.result import RunResult

# A measure's reading of one run: (its result, the probed matrix) -> value (None: it lacks it).
Measured = Callable[["RunResult", str | None], float | None]


@dataclass(frozen=True)
class Need:
    """A setting of ``TrainConfig`` a measure needs, said as the fix: ``what`` (its words) holds
    of a config when ``ok(config)``."""

    setting: str
    what: str
    ok: Callable[[TrainConfig], bool]


@dataclass(frozen=True)
class Measure:
    """A measure: ``text`` (what it is, in the report's words), ``read(run result, probed matrix)``
    (None: the run lacks it) and ``needs`` (what an arm's config must set for the run to have
    it)."""

    text: str
    read: Measured
    needs: tuple[Need, ...] = ()


def _probes(c: TrainConfig, lo: int, hi: int) -> list[int]:
    return [s for s in c.probe_steps if lo <= s <= min(hi, c.steps)]


TRAINED = Need("steps", "steps > 0 (a trained model: validated at the end)", lambda c: c.steps > 0)
TRAIN_MODE = Need("eval_train_mode", "eval_train_mode = true", lambda c: c.eval_train_mode)
SERVING = Need("eval_serving", "eval_serving = true", lambda c: c.eval_serving)
LENGTHS = Need("eval_lengths", "eval_lengths (a length or more)", lambda c: bool(c.eval_lengths))
SLICE = Need(
    "train_slice", "train_slice > 0 (the loss on the training bytes)", lambda c: c.train_slice > 0
)
CURVE = Need(
    "eval_interval",
    "0 < eval_interval < steps (validations along the curve)",
    lambda c: 0 < c.eval_interval < c.steps,
)
DROP = Need("block_drop_batches", "block_drop_batches > 0", lambda c: c.block_drop_batches > 0)
AT_INIT = Need(
    "probe_steps", "probe_steps with 0 (the probe at init)", lambda c: 0 in c.probe_steps
)
DURING = Need(
    "probe_steps",
    "probe_steps with a step in 1 … steps (a probe of the trained model)",
    lambda c: bool(_probes(c, 1, c.steps)),
)
TWICE_DURING = Need(
    "probe_steps",
    "probe_steps with two steps or more in 1 … steps (a spread over training)",
    lambda c: len(set(_probes(c, 1, c.steps))) >= 2,
)


def early(window: int) -> Need:
    """A probe in the first ``window`` steps (DeepNet's early training)."""
    return Need(
        "probe_steps",
        f"probe_steps with a step in 1 … {window} (early training)",
        lambda c: bool(_probes(c, 1, window)),
    )


def reads(claim: Any) -> Iterator[tuple[str, str, str]]:
    """``(part label, arm, measure)`` for every measure a claim's rule, its parts and its controls
    read."""
    rules = [*claim.rule.parts(), *claim.controls]
    while rules:
        label, rule = rules.pop(0)
        yield from ((label, arm, m) for arm, m in rule.reads())
        if compound := compound_parts(rule):
            rules.extend(compound[0])
        rules.extend(rule.controls)


def unmet(claim: Any, configs: dict[str, TrainConfig], measures: dict[str, Measure]) -> str | None:
    """Why ``claim`` reads a measure its arm cannot produce (the first such term), or None."""
    for label, arm, m in reads(claim):
        cfg = configs[arm]
        for need in measures[m].needs:
            if not need.ok(cfg):
                part = f", part {label!r}" if label else ""
                has = getattr(cfg, need.setting)
                return (
                    f"claim {claim.name!r}{part}: measure {m!r} on arm {arm!r} needs {need.what}; "
                    f"the arm has {need.setting} = {list(has) if isinstance(has, tuple) else has}"
                )
    return None
