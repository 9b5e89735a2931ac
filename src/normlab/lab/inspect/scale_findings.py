"""The articles' statements that a real model's activations can decide, as findings.

One repetition is one text chunk (the sample's unit, :mod:`normlab.lab.inspect.text`); per
chunk each part gives one value ``v`` from the chunk's rows at every norm layer, and the verdict
engine decides it (:mod:`normlab.lab.verdict.finding`: the mean of ``v`` over the chunks, its
95 % Student-t interval against δ; a finding holds iff every part holds, does not hold iff some
part does not after Holm's step-down). The rules and δ are fixed here, before any model is run;
they are numerics' where the statement is numerics' (:mod:`normlab.lab.numerics.findings`), so
the two read the same at toy and at real scale. The part labels are numerics' too, so a
statement that names a finding's parts names the same parts in both.

"RMSNorm" on a LayerNorm model (and "LayerNorm" on an RMSNorm model) is the layer's inputs
through the other norm with the layer's gain: the same real activations, the other code.
"""

from __future__ import annotations

import math

import torch

from normlab.lab.inspect.formats_replay import Replay
from normlab.lab.numerics import eps as numerics_eps
from normlab.lab.numerics import findings as numerics_findings
from normlab.lab.numerics import sentences, stability
from normlab.lab.numerics.eps import EPS_DEFAULT, EPS_SMALL
from normlab.lab.numerics.measuring import part, registered
from normlab.lab.verdict.finding import Finding

LOW = tuple(sentences.LOW.values())  # ("FP16", "BF16")
NORMS = tuple(sentences.OPS.values())  # ("RMSNorm", "LayerNorm")
UNIT = "text chunk"
_ROWS = "the chunk's rows at every norm layer"
_E = (
    f"E = the worst row error over {_ROWS} (max|y − t| / max|t| per row against float64; a row "
    "that fails visibly, inf/NaN, flushed to 0 or off by 10 %, counts as 1)"
)
DIRECTION_DELTA = 0.01  # 1 − cos: an output turned by 8° or more has changed
TASK_DELTA = {"embedding": 0.05, "lm": 0.01}  # 1 − ρ of the similarity ranks; changed top-1 share


def eps_small(model_eps: float) -> float:
    """The small eps of the eps findings: the model's own where it is below numerics' 1e-10."""
    return min(model_eps, EPS_SMALL)


def _real(f: Finding, parts, statement: str = "") -> Finding:
    """numerics' finding ``f`` decided on a real model's activations, one text chunk a
    repetition: its name and source, its statement (or ``statement``) said of them, ``parts``."""
    said = f"{statement or f.statement.removesuffix('.')} (on a real model's activations)."
    return Finding(f.name, said, f.source, tuple(parts), unit=UNIT)


FP32_NEEDED = _real(
    numerics_findings.FP32_NEEDED,
    (
        part(f"{name} {short}", f"log10(E_naive / E_FP32-statistics), {_E}")
        for name in NORMS
        for short in LOW
    ),
)

MORE_STABLE = _real(
    stability.MORE_STABLE,
    (
        part(
            f"{short} error",
            f"log10(E_LayerNorm / E_RMSNorm), the naive {short} code on the same recorded "
            f"inputs, {_E}",
        )
        for short in LOW
    ),
    "RMSNorm is numerically more stable than LayerNorm because it computes no mean",
)

EXPLODES = _real(
    numerics_eps.EXPLODES,
    (
        part(
            f"{name}: true max|dx| grows",
            f"log10(max|dx| at the small eps / at eps={EPS_DEFAULT:g}) over {_ROWS}, float64 "
            f"truth, a seeded Gaussian upstream gradient; the small eps: the model's own where "
            f"it is below {EPS_SMALL:g}, else {EPS_SMALL:g}",
            delta=1.0,
        )
        for name in NORMS
    ),
)


def _worse(dt: str, short: str) -> Finding:
    return _real(
        numerics_eps.WORSE[dt],
        (
            part(
                f"{name} {short}: worse than FP32",
                f"W({short}) − W(FP32) at the small eps, W = the share of dx entries of the "
                f"naive code over {_ROWS} that are inf/NaN or off by ≥ 10 % of the row's max "
                "|dx| (a seeded Gaussian upstream gradient)",
                delta=0.01,
            )
            for name in NORMS
        ),
    )


WORSE = {short: _worse(dt, short) for dt, short in sentences.LOW.items()}


def forgot_eval(kind: str) -> Finding:
    """Forgetting ``eval()`` with dropout; the task part's measure is the model kind's."""
    task = (
        "1 − ρ, ρ = Spearman's correlation of the chunk's cosine similarities to the other "
        "chunks (train mode against eval mode): the ranking a retrieval reads"
        if kind == "embedding"
        else "the share of the chunk's positions whose top-1 prediction changes"
    )
    return Finding(
        "forgot-eval-dropout",
        "Forgetting model.eval() changes the outputs of a model with dropout (on a real model).",
        "003 §十一.1",
        (
            part(
                "output direction",
                "1 − cos(train-mode output, eval-mode output), the output being the pooled "
                "embedding (an embedding model) or the last hidden state averaged over "
                f"positions (a language model); δ: a turn of 8° (cos {1 - DIRECTION_DELTA:g})",
                delta=DIRECTION_DELTA,
            ),
            part("task measure", task, delta=TASK_DELTA[kind]),
        ),
        unit=UNIT,
    )


def all_findings(kind: str) -> list[Finding]:
    return [FP32_NEEDED, MORE_STABLE, EXPLODES, *WORSE.values(), forgot_eval(kind)]


def _log_ratio(a: torch.Tensor, b: torch.Tensor) -> list[float]:
    return [math.log10(x / y) for x, y in zip(a.tolist(), b.tolist(), strict=True)]


def values(replay: Replay, train) -> dict[str, dict[str, list[float]]]:
    """Every finding's per-chunk values (finding -> part -> v per chunk) from the replay and
    the train-mode comparison."""
    e = replay.chunk_error
    out: dict[str, dict[str, list[float]]] = {
        FP32_NEEDED.name: {
            f"{name} {short}": _log_ratio(
                e[name, short, "naive"], e[name, short, "FP32 statistics"]
            )
            for name in NORMS
            for short in LOW
        },
        MORE_STABLE.name: {
            f"{short} error": _log_ratio(
                e["LayerNorm", short, "naive"], e["RMSNorm", short, "naive"]
            )
            for short in LOW
        },
        EXPLODES.name: {
            f"{name}: true max|dx| grows": _log_ratio(
                replay.chunk_dx[name, "small"], replay.chunk_dx[name, "default"]
            )
            for name in NORMS
        },
    }
    n = replay.chunk_entries
    for short, f in WORSE.items():
        out[f.name] = {
            f"{name} {short}: worse than FP32": (
                (replay.chunk_wrong[name, short] - replay.chunk_wrong[name, "FP32"]) / n
            ).tolist()
            for name in NORMS
        }
    out["forgot-eval-dropout"] = {"output direction": train.direction, "task measure": train.task}
    return out


def _mean(t) -> float:
    return float(torch.as_tensor(t, dtype=torch.float64).mean())


def means(replay: Replay, train) -> dict[str, dict[str, float]]:
    """What each verdict shows beside its parts: the raw measures' means over the chunks."""
    e, n = replay.chunk_error, replay.chunk_entries
    return {
        FP32_NEEDED.name: {
            f"mean E {name} {short} {impl}": _mean(e[name, short, impl])
            for name in NORMS
            for short in LOW
            for impl in ("naive", "FP32 statistics", "normlab")
        },
        MORE_STABLE.name: {
            f"mean E {name} {short} naive": _mean(e[name, short, "naive"])
            for short in LOW
            for name in NORMS
        },
        EXPLODES.name: {
            f"mean max|dx| {name} at the {which} eps": _mean(replay.chunk_dx[name, which])
            for name in NORMS
            for which in ("small", "default")
        },
        **{
            f.name: {
                f"mean W {name} {fmt}": _mean(replay.chunk_wrong[name, fmt] / n)
                for name in NORMS
                for fmt in (short, "FP32")
            }
            for short, f in WORSE.items()
        },
        "forgot-eval-dropout": {
            "mean cos": 1 - _mean(train.direction),
            "mean task measure": _mean(train.task),
        },
    }


def decide(kind: str, replay: Replay, train, record: dict, **stamp) -> list[dict]:
    """Every finding decided, each with ``record`` (the model, its kind, the small eps: what
    ``redecide`` needs), its design and ``stamp`` (its seed block and start); forgetting eval()
    is not testable where train mode changes nothing (the model has no active dropout)."""
    vals, shown = values(replay, train), means(replay, train)
    idle = "train mode changes nothing: the model has no active dropout" if train.identical else ""
    return [
        registered(
            f,
            vals[f.name],
            record,
            means=shown[f.name],
            why=idle if f.name == "forgot-eval-dropout" else "",
            **stamp,
        )
        for f in all_findings(kind)
    ]


def redecide(published: dict) -> dict:
    """A published finding decided again from its values under today's rule."""
    rules = {f.name: f for f in all_findings(published["record"]["kind"])}
    return rules[published["name"]].redecide(published)
