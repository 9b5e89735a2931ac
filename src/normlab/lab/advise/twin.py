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
from dataclasses import dataclass
from typing import Any

from normlab.lab.advise import toml_writer
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


def claim_names(twin: Twin) -> dict[str, str]:
    """What each claim of the spec answers ("kind:arm", or "kind" for speed) -> its name."""
    names = {}
    for a in twin.alts:
        kinds = ("as_good", "beats", *(("stabler", "stabler_alt") if a.swept else ()))
        names.update({f"{k}:{a.arm}": claim_name(k, a.arm) for k in kinds})
    return names | {k: claim_name(k) for k in ("faster", "faster_step")}


@dataclass
class SpecDoc:
    """A spec as data: the TOML document and the comments its reader gets (by key path, as
    ``toml_writer.dumps`` takes them)."""

    doc: dict[str, Any]
    header: str = ""
    comments: dict[tuple, str] = dataclasses.field(default_factory=dict)

    def claim(self, data: dict[str, Any], comment: str = "") -> None:
        """Add a claim; ``comment`` goes above it (a section's first claim says what follows)."""
        claims = self.doc.setdefault("claims", [])
        if comment:
            self.comments[("claims", len(claims))] = comment
        claims.append(data)

    def arm(self, data: dict[str, Any], comment: str = "") -> None:
        arms = self.doc.setdefault("arms", [])
        if comment:
            self.comments[("arms", len(arms))] = comment
        arms.append(data)

    def text(self) -> str:
        return toml_writer.dumps(self.doc, header=self.header, comments=self.comments)


def spec_text(twin: Twin, command: str) -> str:
    """The study spec of ``twin`` (TOML, docs/spec.md); ``command`` made it."""
    return spec_doc(twin, command).text()


def spec_doc(twin: Twin, command: str) -> SpecDoc:
    """The study spec of ``twin`` as data: its base (the recipe), arms and claims."""
    hf, s = twin.hf, twin.scale
    spec = SpecDoc(
        {
            "name": "advise-" + hf.model_type,
            "description": f"{twin.name} vs its alternatives, twin at {s.name} scale",
        },
        header=(
            f"{command}\n"
            f"{twin.name}: the model's recipe against the alternatives, on a scaled-down twin\n"
            f"({s.name}: {s.about}).\n"
            "A study spec (docs/spec.md): edit it and rerun it with normlab study --spec FILE.\n"
            "The comments say where each value came from."
        ),
    )
    _base(spec, twin)
    _arms(spec, twin)
    _quality_claims(spec, twin)
    _speed_claims(spec, twin)
    _stability_claims(spec, twin)
    return spec


def _base(spec: SpecDoc, twin: Twin) -> None:
    """[base]: the recipe's training fields and, under [base.model], its model fields, each
    with where it came from."""
    base: dict[str, Any] = {k: v for k, (v, _) in twin.train.items()}
    spec.comments |= {("base", k): why for k, (_, why) in twin.train.items()}
    # vocab_size is the data's and cannot be set in a spec; the lab's defaults need no line.
    model = {k: vs for k, vs in twin.fields.items() if k != "vocab_size"}
    model = {k: (v, why) for k, (v, why) in model.items() if why != "the lab's default"}
    base["model"] = {k: v for k, (v, _) in model.items()}
    spec.comments |= {("base", "model", k): why for k, (_, why) in model.items()}
    spec.comments[("base",)] = (
        "The model's recipe, scaled down: training fields here, model fields under [base.model]."
    )
    spec.doc["base"] = base


def _arms(spec: SpecDoc, twin: Twin) -> None:
    """The recipe, each alternative (the placements as one axis), and the learning-rate
    sweeps of those that decide stability."""
    s = twin.scale
    spec.arm({"name": "recipe"}, "The recipe itself, then one change at a time.")
    placements = [a for a in twin.alts if a.kind == "placement"]
    for a in twin.alts:
        if a.kind != "placement":
            spec.arm({"name": a.arm, "model": a.model})
    spec.arm({"name": "{placement}", "axes": {"placement": [a.arm for a in placements]}})
    others = _other_lrs(s)
    if not others:
        return
    spec.arm(
        {"name": "recipe-lr{lr:g}", "axes": {"lr": others}},
        "Learning-rate sweeps (stability): the arms above are their points at the "
        f"recipe's lr {s.lr:g}.",
    )
    swept = [a.arm for a in placements if a.swept]
    spec.arm({"name": "{placement}-lr{lr:g}", "axes": {"placement": swept, "lr": others}})
    for a in twin.alts:
        if a.swept and a.kind != "placement":
            spec.arm({"name": a.arm + "-lr{lr:g}", "model": a.model, "axes": {"lr": others}})


def _other_lrs(s: Scale) -> list[float]:
    """The sweep's learning rates other than the recipe's (the arms above train at that one)."""
    return [lr for lr in s.sweep if lr != s.lr]


def _who(twin: Twin) -> str:
    return f"{twin.hf.family.name}'s recipe ({twin.recipe_label()})"


def _source(twin: Twin) -> str:
    return f"normlab advise: {twin.hf.name}"


def _quality_claims(spec: SpecDoc, twin: Twin) -> None:
    """At the recipe's learning rate: the recipe at least as good as each alternative, and
    each alternative better than the recipe."""
    s, who = twin.scale, _who(twin)
    comment = (
        f"---- quality at lr {s.lr:g}: the recipe at least as good as each alternative "
        f"(within {AS_GOOD} nats/byte), and each alternative better by {BEATS}"
    )
    for a in twin.alts:
        spec.claim(
            {
                "name": claim_name("as_good", a.arm),
                "statement": f"{who} trains at least as well as {a.label}: its final validation "
                f"loss is at most {AS_GOOD} nats/byte above that of {a.label}.",
                "source": _source(twin),
                "rule": "contrast",
                "terms": [[1, a.arm, LOSS], [-1, "recipe", LOSS]],
                "const": AS_GOOD,
                "expect": ">0",
                "delta": 0.0,
                "seeds": s.seeds,
            },
            comment,
        )
        comment = ""
        spec.comments[("claims", len(spec.doc["claims"]) - 1, "const")] = (
            "the margin: it holds if loss(recipe) < loss(alternative) + margin"
        )
        spec.claim(
            {
                "name": claim_name("beats", a.arm),
                "statement": f"{a.label} beats {who}: a final validation loss lower by at "
                f"least {BEATS} nats/byte.",
                "source": _source(twin),
                "rule": "contrast",
                "terms": [[1, "recipe", LOSS], [-1, a.arm, LOSS]],
                "expect": ">0",
                "delta": BEATS,
                "seeds": s.seeds,
            }
        )


def _speed_claims(spec: SpecDoc, twin: Twin) -> None:
    """RMSNorm against LayerNorm in the serial timing phase: the norms' time, a whole step's."""
    norm = next(a for a in twin.alts if a.kind == "norm")
    recipe_rms = twin.fields["norm"][0] == "rmsnorm"
    fast, slow = ("recipe", norm.arm) if recipe_rms else (norm.arm, "recipe")
    timing = {
        "source": "Zhang and Sennrich 2019",
        "plots": ["speed"],
        "rule": "timing",
        "fast": fast,
        "slow": slow,
        "delta": FASTER,
    }
    spec.claim(
        {
            "name": claim_name("faster"),
            "statement": "In the twin, RMSNorm spends less time in the norms than LayerNorm "
            "(normlab's kernels, forward and backward, at the shapes the model gives them).",
            **timing,
        },
        "---- speed, timed after the training in a serial phase",
    )
    spec.claim(
        {
            "name": claim_name("faster_step"),
            "statement": "In the twin, a whole training step is faster with RMSNorm than with "
            "LayerNorm.",
            **timing,
            "what": "step_ms",
        }
    )


def _stability_claims(spec: SpecDoc, twin: Twin) -> None:
    """For each swept alternative, both directions: the recipe is the less LR-sensitive, or
    the alternative is."""
    s = twin.scale
    if not _other_lrs(s):
        return
    comment = (
        "---- stability: LR sensitivity over lr "
        + ", ".join(f"{x:g}" for x in s.sweep)
        + " (Wortsman et al. 2023)"
    )
    span = f"(learning rates {s.sweep[0]:g} to {s.sweep[-1]:g})"
    for a in twin.alts:
        if not a.swept:
            continue
        mine, theirs = twin.sweep_arms("recipe"), twin.sweep_arms(a.arm)
        for kind, (x, y), (stable, unstable) in (
            ("stabler", (_who(twin), a.label), (mine, theirs)),
            ("stabler_alt", (a.label, _who(twin)), (theirs, mine)),
        ):
            spec.claim(
                {
                    "name": claim_name(kind, a.arm),
                    "statement": f"{x} is less sensitive to the learning rate than {y} {span}.",
                    "source": "Wortsman et al. 2023",
                    "plots": ["lr", "seeds"],
                    "rule": "lr_sensitivity",
                    "stable": stable,
                    "unstable": unstable,
                    "delta": STABLER,
                    "seeds": s.seeds,
                },
                comment,
            )
            comment = ""
