"""The scaled-down twin of a Hugging Face model and the study that sets its recipe against the
alternatives, written as a study spec (docs/spec.md) that ``normlab study --spec`` reruns.

The twin keeps what the config says about normalization (norm kind, eps, Gemma's ``(1 + w)``
and embedding scale, placement, QK-norm, final norm, tied embeddings, arch, MLP ratio) and
shrinks the rest: fewer and narrower blocks, a byte vocabulary (the lab trains on bytes), a
short context. The arms change one thing at a time from the model's recipe (its arm is named
``recipe``): the norm kind, each other placement, QK-norm on/off; at ``quick`` the recipe and
the alternatives that decide stability are also swept over learning rates.
"""

from __future__ import annotations

import dataclasses
import json
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


# quick is sized with the plan's CPU estimate (normlab advise --list) to train a Llama twin's
# 63 runs, plus the timing phase, within 15 minutes on 2 cores; smoke exercises every path.
SCALES = {
    "smoke": Scale(
        "smoke",
        "toy sizes, seconds: exercises the machinery, proves nothing",
        dim=16,
        n_layers=2,
        head_dim=8,
        seq_len=16,
        batch_size=4,
        steps=12,
        warmup_steps=2,
        eval_batches=2,
        lr=1e-3,
        seeds=2,
        sweep=(),
    ),
    "quick": Scale(
        "quick",
        "d=64, 6 blocks, 200 steps, 3 seeds; learning-rate sweeps for stability",
        dim=64,
        n_layers=6,
        head_dim=16,
        seq_len=64,
        batch_size=16,
        steps=200,
        warmup_steps=20,
        eval_batches=8,
        lr=1e-3,
        seeds=3,
        sweep=(1e-3, 3e-3, 1e-2, 3e-2),
    ),
}

# δ, the smallest effect that matters, fixed before the runs as in the lab's presets:
BEATS = 0.02  # nats/byte: "X beats the recipe" (about 1 % of these models' loss)
AS_GOOD = 0.03  # nats/byte: the margin of "the recipe is at least as good as X"
FASTER = 0.05  # the fraction of the time a norm must save
STABLER = 0.05  # nats/byte of LR sensitivity, as the stability preset

PLACEMENTS = {
    "pre": "Pre-LN",
    "sandwich": "Sandwich/Peri-LN",
    "deepnorm": "DeepNorm",
    "post": "Post-LN",
}
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
        return f"{PLACEMENTS[f['placement']]} {norm}, {qk}"

    @property
    def name(self) -> str:
        return f"{self.hf.family.name} ({self.hf.name})"

    def sweep_arms(self, arm: str) -> list[str]:
        """The arm names (globs) of ``arm``'s learning-rate sweep: itself at the recipe's
        learning rate, the grid arms at the others."""
        return [arm, f"{arm}-lr*"]


def make_twin(hf: HFModel, preset: str) -> Twin:
    s = SCALES[preset]
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
    for f in dataclasses.fields(TransformerConfig):
        if f.name not in fields:
            fields[f.name] = (f.default, "the lab's default")
    fields = {f.name: fields[f.name] for f in dataclasses.fields(TransformerConfig)}
    train: dict[str, tuple[Any, str]] = {
        "steps": (s.steps, preset),
        "batch_size": (s.batch_size, preset),
        "seq_len": (s.seq_len, preset),
        "lr": (s.lr, f"{preset}: the recipe's learning rate"),
        "warmup_steps": (s.warmup_steps, f"{preset}: a linear warmup, as these models train"),
        "schedule": ("cosine", "a cosine decay, as these models train"),
        "eval_batches": (s.eval_batches, preset),
    }
    rec = {k: v for k, (v, _) in fields.items()}
    alts: list[Alt] = []
    other = "layernorm" if rec["norm"] == "rmsnorm" else "rmsnorm"
    change: dict[str, Any] = {"norm": other}
    if rec.get("norm_offset"):  # (1 + w) is an RMSNorm's; the LayerNorm arm has a plain gain
        change["norm_offset"] = 0.0
    alts.append(Alt(other, NORMS[other], "norm", change, False))
    for p in PLACEMENTS:
        if p != rec["placement"]:
            alts.append(Alt(p, PLACEMENTS[p], "placement", {"placement": p}, bool(s.sweep)))
    qk = not rec["qk_norm"]
    alts.append(
        Alt(
            "qk-norm" if qk else "no-qk-norm",
            "QK-norm" if qk else "no QK-norm",
            "qk",
            {"qk_norm": qk},
            bool(s.sweep),
        )
    )
    twin = Twin(hf, s, fields, train, alts)
    twin.config()  # a config the dataclasses reject fails here, before anything is written
    return twin


# --------------------------------------------------------------------------------------------
# the spec


def _toml(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)  # Python's shortest round-trip form is valid TOML (1e-05, 0.001, 3)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # JSON's escapes are TOML's basic string's
    if isinstance(v, list | tuple):
        return "[" + ", ".join(map(_toml, v)) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"no TOML form for {v!r}")


def claim_names(twin: Twin) -> dict[str, str]:
    """What each claim of the spec answers -> its name (the advice reads them back)."""
    names = {}
    for a in twin.alts:
        names[f"as_good:{a.arm}"] = f"recipe-as-good-as-{a.arm}"
        names[f"beats:{a.arm}"] = f"{a.arm}-beats-recipe"
        if a.swept:
            names[f"stabler:{a.arm}"] = f"recipe-stabler-than-{a.arm}"
            names[f"stabler_alt:{a.arm}"] = f"{a.arm}-stabler-than-recipe"
    names["faster"] = "rmsnorm-faster"
    names["faster_step"] = "rmsnorm-faster-step"
    return names


def spec_text(twin: Twin, command: str) -> str:
    """The study spec of ``twin`` (TOML, docs/spec.md); ``command`` made it."""
    hf, s = twin.hf, twin.scale
    who = f"{hf.family.name}'s recipe ({twin.recipe_label()})"
    src = f"normlab advise: {hf.name}"
    lines = [
        f"# {command}",
        f"# {twin.name}: the model's recipe against the alternatives, on a scaled-down twin",
        f"# ({s.name}: {s.about}).",
        "# A study spec (docs/spec.md): edit it and rerun it with normlab study --spec FILE.",
        "# The comments say where each value came from.",
        "",
        f"name = {_toml('advise-' + hf.model_type)}",
        f"description = {_toml(f'{twin.name} vs its alternatives, twin at {s.name} scale')}",
        "",
        "# The model's recipe, scaled down: training fields here, model fields under [base.model].",
        "[base]",
    ]
    lines += [f"{k} = {_toml(v)}  # {why}" for k, (v, why) in twin.train.items()]
    lines += ["", "[base.model]"]
    # vocab_size is the data's and cannot be set in a spec; the lab's defaults need no line.
    lines += [
        f"{k} = {_toml(v)}  # {why}"
        for k, (v, why) in twin.fields.items()
        if k != "vocab_size" and why != "the lab's default"
    ]
    lines += [
        "",
        "# The recipe itself, then one change at a time.",
        "[[arms]]",
        'name = "recipe"',
        "",
    ]
    placements = [a for a in twin.alts if a.kind == "placement"]
    for a in twin.alts:
        if a.kind == "placement":
            continue
        lines += ["[[arms]]", f"name = {_toml(a.arm)}", f"model = {_toml(a.model)}", ""]
    lines += [
        "[[arms]]",
        'name = "{placement}"',
        f"axes = {{ placement = {_toml([a.arm for a in placements])} }}",
        "",
    ]
    others = [lr for lr in s.sweep if lr != s.lr]
    if others:
        lines += [
            "# Learning-rate sweeps (stability): the arms above are their points at the "
            f"recipe's lr {s.lr:g}.",
            "[[arms]]",
            'name = "recipe-lr{lr:g}"',
            f"axes = {{ lr = {_toml(others)} }}",
            "",
            "[[arms]]",
            'name = "{placement}-lr{lr:g}"',
            f"axes = {{ placement = {_toml([a.arm for a in placements if a.swept])}, "
            f"lr = {_toml(others)} }}",
            "",
        ]
        for a in twin.alts:
            if a.swept and a.kind != "placement":
                lines += [
                    "[[arms]]",
                    f"name = {_toml(a.arm + '-lr{lr:g}')}",
                    f"model = {_toml(a.model)}",
                    f"axes = {{ lr = {_toml(others)} }}",
                    "",
                ]
    names = claim_names(twin)

    def claim(name: str, statement: str, rule: str, source: str = src, **kw) -> None:
        nonlocal lines
        lines += [
            "[[claims]]",
            f"name = {_toml(name)}",
            f"statement = {_toml(statement)}",
            f"source = {_toml(source)}",
        ]
        if "plots" in kw:
            lines.append(f"plots = {_toml(kw.pop('plots'))}")
        lines.append(f"rule = {_toml(rule)}")
        for k, v in kw.items():
            comment = ""
            if isinstance(v, tuple):
                v, comment = v[0], f"  # {v[1]}"
            lines.append(f"{k} = {_toml(v)}{comment}")
        lines.append("")

    lines += [
        f"# ---- quality at lr {s.lr:g}: the recipe at least as good as each alternative "
        f"(within {AS_GOOD} nats/byte), and each alternative better by {BEATS}",
        "",
    ]
    loss = "final_val_loss"
    for a in twin.alts:
        claim(
            names[f"as_good:{a.arm}"],
            f"{who} trains at least as well as {a.label}: its final validation loss is at "
            f"most {AS_GOOD} nats/byte above that of {a.label}.",
            "contrast",
            terms=[[1, a.arm, loss], [-1, "recipe", loss]],
            const=(AS_GOOD, "the margin: it holds if loss(recipe) < loss(alternative) + margin"),
            expect=">0",
            delta=0.0,
            seeds=s.seeds,
        )
        claim(
            names[f"beats:{a.arm}"],
            f"{a.label} beats {who}: a final validation loss lower by at least {BEATS} nats/byte.",
            "contrast",
            terms=[[1, "recipe", loss], [-1, a.arm, loss]],
            expect=">0",
            delta=BEATS,
            seeds=s.seeds,
        )
    norm = next(a for a in twin.alts if a.kind == "norm")
    fast, slow = (
        ("recipe", norm.arm) if twin.fields["norm"][0] == "rmsnorm" else (norm.arm, "recipe")
    )
    lines += ["# ---- speed, timed after the training in a serial phase", ""]
    claim(
        names["faster"],
        "In the twin, RMSNorm spends less time in the norms than LayerNorm "
        "(normlab's kernels, forward and backward, at the shapes the model gives them).",
        "timing",
        source="Zhang and Sennrich 2019",
        plots=["speed"],
        fast=fast,
        slow=slow,
        delta=FASTER,
    )
    claim(
        names["faster_step"],
        "In the twin, a whole training step is faster with RMSNorm than with LayerNorm.",
        "timing",
        source="Zhang and Sennrich 2019",
        plots=["speed"],
        fast=fast,
        slow=slow,
        delta=FASTER,
        what="step_ms",
    )
    if others:
        lines += [
            "# ---- stability: LR sensitivity over lr "
            + ", ".join(f"{x:g}" for x in s.sweep)
            + " (Wortsman et al. 2023)",
            "",
        ]
        for a in twin.alts:
            if not a.swept:
                continue
            mine, theirs = twin.sweep_arms("recipe"), twin.sweep_arms(a.arm)
            span = f"(learning rates {s.sweep[0]:g} to {s.sweep[-1]:g})"
            # Both directions: the recipe is the stabler one, or the alternative is.
            for key, (x, y), (stable, unstable) in (
                ("stabler", (who, a.label), (mine, theirs)),
                ("stabler_alt", (a.label, who), (theirs, mine)),
            ):
                claim(
                    names[f"{key}:{a.arm}"],
                    f"{x} is less sensitive to the learning rate than {y} {span}.",
                    "lr_sensitivity",
                    source="Wortsman et al. 2023",
                    plots=["lr", "seeds"],
                    stable=stable,
                    unstable=unstable,
                    delta=STABLER,
                    seeds=s.seeds,
                )
    return "\n".join(lines).rstrip() + "\n"
