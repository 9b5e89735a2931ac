"""The scaled-down twin of a Hugging Face model and the study that sets its recipe against the
alternatives (``twin_spec.py`` writes it as a study spec, docs/spec.md, that ``normlab study
--spec`` reruns).

The twin keeps what the config says about normalization (norm kind, eps, Gemma's ``(1 + w)``
and embedding scale, placement, QK-norm, final norm, tied embeddings, arch, MLP ratio) and
shrinks the rest: fewer and narrower blocks, a byte vocabulary (the lab trains on bytes), a
short context. The arms change one thing at a time from the model's recipe (its arm is named
``recipe``): the norm kind, each other placement, QK-norm on/off; at ``quick`` the recipe and
the alternatives that decide stability are also swept over learning rates.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from normlab.lab.advise.hf_config import HFModel
from normlab.lab.train.data import VOCAB_SIZE
from normlab.lab.train.trainer import TrainConfig
from normlab.models import TransformerConfig


@dataclass(frozen=True)
class Scale:
    """The size of a twin and of its study."""

    name: str
    about: str
    dim: int
    n_layers: int
    head_dim: int
    seq_len: int
    batch_size: int
    steps: int
    warmup_steps: int
    eval_batches: int
    lr: float  # the recipe's learning rate: quality is compared here
    seeds: int
    sweep: tuple[float, ...]  # the stability sweeps' learning rates (lr among them); () = none


# quick is sized with the plan's CPU estimate (normlab advise --list) to finish on a laptop's
# cores in one sitting (docs/advise.md gives its runs); smoke exercises every path.
# Each field of a Scale: (smoke's, quick's).
_SCALE_FIELDS = {
    "about": (
        "toy sizes, seconds: exercises the machinery, proves nothing",
        "d=64, 6 blocks, 200 steps, 3 seeds; learning-rate sweeps for stability",
    ),
    "dim": (16, 64),
    "n_layers": (2, 6),
    "head_dim": (8, 16),
    "seq_len": (16, 64),
    "batch_size": (4, 16),
    "steps": (12, 200),
    "warmup_steps": (2, 20),
    "eval_batches": (2, 8),
    "lr": (1e-3, 1e-3),
    "seeds": (2, 3),
    "sweep": ((), (1e-3, 3e-3, 1e-2, 3e-2)),
}
SCALES = {
    name: Scale(name, **{k: v[i] for k, v in _SCALE_FIELDS.items()})
    for i, name in enumerate(("smoke", "quick"))
}

# δ, the smallest effect that matters, fixed before the runs as in the lab's presets:
BEATS = 0.02  # nats/byte: "X beats the recipe" by at least this
AS_GOOD = 0.03  # nats/byte: the margin of "the recipe is at least as good as X"
FASTER = 0.05  # the fraction of the time a norm must save
STABLER = 0.05  # nats/byte of LR sensitivity, as the stability preset

PLACEMENTS = {
    "pre": "Pre-LN",
    "sandwich": "Sandwich/Peri-LN",
    "deepnorm": "DeepNorm",
    "post": "Post-LN",
}
# Placements a recipe may have but that are not tried as alternatives to the others' (one
# more arm and sweep in every study).
PLACEMENT_LABELS = {**PLACEMENTS, "reorder": "reordered-norm (OLMo 2)"}
NORMS = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}


@dataclass(frozen=True)
class Alt:
    """An alternative to the recipe: one change to its model."""

    arm: str
    label: str
    kind: str  # "norm" | "placement" | "qk"
    model: dict[str, Any]
    swept: bool  # swept over learning rates with the recipe (stability)


@dataclass
class Twin:
    hf: HFModel
    scale: Scale
    fields: dict[str, tuple[Any, str]]  # every TransformerConfig field -> (value, source)
    train: dict[str, tuple[Any, str]]  # the training fields set -> (value, why)
    alts: list[Alt]

    def config(self) -> TrainConfig:
        """The recipe's run config (building it runs the dataclasses' own checks)."""
        model = TransformerConfig(**{k: v for k, (v, _) in self.fields.items()})
        return TrainConfig(model=model, **{k: v for k, (v, _) in self.train.items()})

    def recipe_label(self) -> str:
        f = {k: v for k, (v, _) in self.fields.items()}
        norm = NORMS[f["norm"]] + (" (1 + w)" if f.get("norm_offset") else "")
        qk = "QK-norm" if f["qk_norm"] else "no QK-norm"
        return f"{PLACEMENT_LABELS[f['placement']]} {norm}, {qk}"

    @property
    def name(self) -> str:
        return f"{self.hf.family.name} ({self.hf.name})"


def scale_of(preset: str, seeds: int | None = None, steps: int | None = None) -> Scale:
    """``SCALES[preset]`` with ``seeds`` and ``steps`` (``--seeds``, ``--steps``; None: the
    preset's own): a budget between smoke and quick. The warmup keeps its share of the steps
    (quick's 20 of 200 is 6 of 60), so a shorter run is the preset's schedule shrunk, not one
    that is mostly warmup; it is never more than the steps."""
    s = SCALES[preset]
    if seeds is None and steps is None:
        return s
    seeds = s.seeds if seeds is None else seeds
    steps = s.steps if steps is None else steps
    warmup = min(steps, round(s.warmup_steps * steps / s.steps))
    about = (
        f"d={s.dim}, {s.n_layers} blocks, {steps} steps, {plural(seeds, 'seed')} (--steps, "
        f"--seeds; {preset} itself: {s.steps} steps, {s.seeds} seeds)"
        + ("; learning-rate sweeps for stability" if s.sweep else "")
    )
    return dataclasses.replace(s, about=about, steps=steps, warmup_steps=warmup, seeds=seeds)


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def make_twin(hf: HFModel, preset: str | Scale) -> Twin:
    """``hf``'s twin at the scale ``preset`` (a name of ``SCALES``, or a scale ``scale_of``
    returned)."""
    s = SCALES[preset] if isinstance(preset, str) else preset
    preset = s.name
    # The training fields say where a value overridden on the command line came from.
    base = SCALES[preset]
    sz = hf.sizes
    fields: dict[str, tuple[Any, str]] = {
        "vocab_size": (
            VOCAB_SIZE,
            f"bytes: the lab trains on bytes (the model: vocab_size {sz['vocab']})",
        ),
        "dim": (s.dim, f"scaled ({preset}): the model's hidden width is {sz['hidden']}"),
        "n_layers": (s.n_layers, f"scaled ({preset}): the model has {sz['layers']} blocks"),
        "n_heads": (
            s.dim // s.head_dim,
            f"scaled ({preset}): head_dim {s.head_dim}; the model "
            f"has {sz['heads']} heads of {sz['head_dim']}",
        ),
        "max_seq_len": (
            s.seq_len,
            f"the twin's context ({preset}); the model's is {sz['positions'] or '?'}",
        ),
    }
    fields.update(hf.recipe)
    # Every field, in TransformerConfig's order; those neither scaled nor the recipe's: defaults.
    order = dataclasses.fields(TransformerConfig)
    fields = {f.name: fields.get(f.name, (f.default, "the lab's default")) for f in order}
    steps_why, warmup_why = preset, f"{preset}: a linear warmup, as these models train"
    if s.steps != base.steps:
        steps_why = f"--steps ({preset}: {base.steps})"
        warmup_why += f", {preset}'s share of --steps ({base.warmup_steps} of {base.steps})"
    train: dict[str, tuple[Any, str]] = {
        "steps": (s.steps, steps_why),
        "batch_size": (s.batch_size, preset),
        "seq_len": (s.seq_len, preset),
        "lr": (s.lr, f"{preset}: the recipe's learning rate"),
        "warmup_steps": (s.warmup_steps, warmup_why),
        "schedule": ("cosine", "a cosine decay, as these models train"),
        "eval_batches": (s.eval_batches, preset),
    }
    rec, swept = {k: v for k, (v, _) in fields.items()}, bool(s.sweep)
    other = "layernorm" if rec["norm"] == "rmsnorm" else "rmsnorm"
    change: dict[str, Any] = {"norm": other}
    if rec.get("norm_offset"):  # (1 + w) is an RMSNorm's; the LayerNorm arm has a plain gain
        change["norm_offset"] = 0.0
    alts = [Alt(other, NORMS[other], "norm", change, False)]
    alts += [
        Alt(p, label, "placement", {"placement": p}, swept)
        for p, label in PLACEMENTS.items()
        if p != rec["placement"]
    ]
    qk = not rec["qk_norm"]
    qk_arm, qk_label = ("qk-norm", "QK-norm") if qk else ("no-qk-norm", "no QK-norm")
    alts.append(Alt(qk_arm, qk_label, "qk", {"qk_norm": qk}, swept))
    twin = Twin(hf, s, fields, train, alts)
    twin.config()  # a config the dataclasses reject fails here, before anything is written
    return twin


# --------------------------------------------------------------------------------------------
# the spec: the twin's study as data (the TOML document), written out by toml_writer

# The claims' names, by what each answers: the spec names its claims with them, the advice
# finds their verdicts by them.
CLAIM_NAMES = {
    "as_good": "recipe-as-good-as-{arm}",
    "beats": "{arm}-beats-recipe",
    "stabler": "recipe-stabler-than-{arm}",
    "stabler_alt": "{arm}-stabler-than-recipe",
    "faster": "rmsnorm-faster",
    "faster_step": "rmsnorm-faster-step",
}
LOSS = "final_val_loss"  # the quality claims' measure


def claim_name(kind: str, arm: str = "") -> str:
    """The name of the claim of kind ``kind`` (a key of ``CLAIM_NAMES``) about ``arm``."""
    return CLAIM_NAMES[kind].format(arm=arm)


def twin_params(twin: Twin) -> tuple[int, int]:
    """The twin's parameter count: all, and in its blocks (from its config: nothing built)."""
    from normlab.models.size import param_count

    m = twin.config().model
    return param_count(m), param_count(m, blocks_only=True)


def twin_json(twin: Twin) -> dict[str, Any]:
    all_p, block_p = twin_params(twin)
    return {
        "hf_config": twin.hf.name,
        "model_type": twin.hf.model_type,
        "family": twin.hf.family.name,
        "scale": dataclasses.asdict(twin.scale),
        "model_sizes": twin.hf.sizes,
        "params": {
            "model": twin.hf.params(),
            "model_blocks": twin.hf.params(False),
            "twin": all_p,
            "twin_blocks": block_p,
        },
        "fields": {k: {"value": v, "from": src} for k, (v, src) in twin.fields.items()},
        "train": {k: {"value": v, "why": why} for k, (v, why) in twin.train.items()},
        "alternatives": [dataclasses.asdict(a) for a in twin.alts],
        "not_reproduced": twin.hf.gaps,
    }
