"""The twin's study as a spec file (TOML, docs/spec.md) that ``normlab study --spec`` reruns: the
recipe as the base, an arm per alternative, and the quality, speed and stability claims, with
comments that say what each section tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from normlab.lab.advise import toml_writer
from normlab.lab.advise.twin import AS_GOOD, BEATS, FASTER, LOSS, STABLER, Scale, Twin, claim_name


@dataclass
class SpecDoc:
    """A spec as data: the TOML document and the comments its reader gets (by key path, as
    ``toml_writer.dumps`` takes them)."""

    doc: dict[str, Any]
    comments: dict[tuple, str] = field(default_factory=dict)

    def add(self, section: str, items: list[dict[str, Any]], comment: str) -> None:
        """Append ``items`` to the array of tables ``section`` ("arms", "claims"), with
        ``comment`` above the first: it says what follows."""
        entries = self.doc.setdefault(section, [])
        self.comments[(section, len(entries))] = comment
        entries += items

    def values(self, path: tuple, pairs: dict[str, tuple[Any, str]]) -> dict[str, Any]:
        """The values of ``pairs`` (key -> (value, why)), each why the comment of its key at
        ``path``."""
        self.comments |= {(*path, k): why for k, (_, why) in pairs.items()}
        return {k: v for k, (v, _) in pairs.items()}


def spec_text(twin: Twin, command: str) -> str:
    """The study spec of ``twin`` (TOML, docs/spec.md): its base (the recipe), arms and claims;
    ``command`` made it."""
    hf, s = twin.hf, twin.scale
    spec = SpecDoc(
        {
            "name": "advise-" + hf.model_type,
            "description": f"{twin.name} vs its alternatives, twin at {s.name} scale",
        }
    )
    header = (
        f"{command}\n"
        f"{twin.name}: the model's recipe against the alternatives, on a scaled-down twin\n"
        f"({s.name}: {s.about}).\n"
        "A study spec (docs/spec.md): edit it and rerun it with normlab study --spec FILE.\n"
        "The comments say where each value came from."
    )
    for section in (_base, _arms, _quality_claims, _speed_claims, _stability_claims):
        section(spec, twin)
    return toml_writer.dumps(spec.doc, header=header, comments=spec.comments)


def _base(spec: SpecDoc, twin: Twin) -> None:
    """[base]: the recipe's training fields and, under [base.model], its model fields, each
    with where it came from."""
    base = spec.values(("base",), twin.train)
    # vocab_size is the data's and cannot be set in a spec; the lab's defaults need no line.
    model = {k: vs for k, vs in twin.fields.items() if k != "vocab_size"}
    model = {k: (v, why) for k, (v, why) in model.items() if why != "the lab's default"}
    base["model"] = spec.values(("base", "model"), model)
    spec.comments[("base",)] = (
        "The model's recipe, scaled down: training fields here, model fields under [base.model]."
    )
    spec.doc["base"] = base


def _arms(spec: SpecDoc, twin: Twin) -> None:
    """The recipe, each alternative (the placements as one axis), and the learning-rate
    sweeps of those that decide stability."""
    s = twin.scale
    placements = [a for a in twin.alts if a.kind == "placement"]
    changes = [a for a in twin.alts if a.kind != "placement"]
    arms = [{"name": "recipe"}, *({"name": a.arm, "model": a.model} for a in changes)]
    arms.append({"name": "{placement}", "axes": {"placement": [a.arm for a in placements]}})
    spec.add("arms", arms, "The recipe itself, then one change at a time.")
    lrs = _other_lrs(s)
    if not lrs:
        return
    swept = [a.arm for a in placements if a.swept]
    sweeps = [
        {"name": "recipe-lr{lr:g}", "axes": {"lr": lrs}},
        {"name": "{placement}-lr{lr:g}", "axes": {"placement": swept, "lr": lrs}},
        *(
            {"name": a.arm + "-lr{lr:g}", "model": a.model, "axes": {"lr": lrs}}
            for a in changes
            if a.swept
        ),
    ]
    spec.add(
        "arms",
        sweeps,
        "Learning-rate sweeps (stability): the arms above are their points at the "
        f"recipe's lr {s.lr:g}.",
    )


def _other_lrs(s: Scale) -> list[float]:
    """The sweep's learning rates other than the recipe's (the arms above train at that one)."""
    return [lr for lr in s.sweep if lr != s.lr]


def _quality_claims(spec: SpecDoc, twin: Twin) -> None:
    """At the recipe's learning rate: the recipe at least as good as each alternative, and
    each alternative better than the recipe."""
    s, who, source = twin.scale, _who(twin), f"normlab advise: {twin.hf.name}"
    claims = []
    for a in twin.alts:
        claims += [
            {
                "name": claim_name("as_good", a.arm),
                "statement": f"{who} trains at least as well as {a.label}: its final validation "
                f"loss is at most {AS_GOOD} nats/byte above that of {a.label}.",
                "source": source,
                "rule": "contrast",
                "terms": [[1, a.arm, LOSS], [-1, "recipe", LOSS]],
                "const": AS_GOOD,
                "expect": ">0",
                "delta": 0.0,
                "seeds": s.seeds,
                "rate_check": True,  # the standard for rivals (docs/study.md)
            },
            {
                "name": claim_name("beats", a.arm),
                "statement": f"{a.label} beats {who}: a final validation loss lower by at "
                f"least {BEATS} nats/byte.",
                "source": source,
                "rule": "contrast",
                "terms": [[1, "recipe", LOSS], [-1, a.arm, LOSS]],
                "expect": ">0",
                "delta": BEATS,
                "seeds": s.seeds,
                "rate_check": True,  # the standard for rivals (docs/study.md)
            },
        ]
    spec.add(
        "claims",
        claims,
        f"---- quality at lr {s.lr:g}: the recipe at least as good as each alternative "
        f"(within {AS_GOOD} nats/byte), and each alternative better by {BEATS}",
    )
    for i, claim in enumerate(spec.doc["claims"]):
        if "const" in claim:
            spec.comments[("claims", i, "const")] = (
                "the margin: it holds if loss(recipe) < loss(alternative) + margin"
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
    norms = (
        "In the twin, RMSNorm spends less time in the norms than LayerNorm (normlab's kernels, "
        "forward and backward, at the shapes the model gives them)."
    )
    step = "In the twin, a whole training step is faster with RMSNorm than with LayerNorm."
    claims = [
        {"name": claim_name("faster"), "statement": norms, **timing},
        {"name": claim_name("faster_step"), "statement": step, **timing, "what": "step_ms"},
    ]
    spec.add("claims", claims, "---- speed, timed after the training in a serial phase")


def _stability_claims(spec: SpecDoc, twin: Twin) -> None:
    """For each swept alternative, both directions: the recipe is the less LR-sensitive, or
    the alternative is."""
    s, who = twin.scale, _who(twin)
    if not _other_lrs(s):
        return
    span = f"(learning rates {s.sweep[0]:g} to {s.sweep[-1]:g})"
    claims = []
    for a in (a for a in twin.alts if a.swept):
        # a sweep's arms (globs): the arm itself at the recipe's lr, its grid arms at the others
        mine, theirs = ["recipe", "recipe-lr*"], [a.arm, f"{a.arm}-lr*"]
        for kind, x, y, stable, unstable in (
            ("stabler", who, a.label, mine, theirs),
            ("stabler_alt", a.label, who, theirs, mine),
        ):
            claims.append(
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
                }
            )
    lrs = ", ".join(f"{x:g}" for x in s.sweep)
    comment = f"---- stability: LR sensitivity over lr {lrs} (Wortsman et al. 2023)"
    spec.add("claims", claims, comment)


def _who(twin: Twin) -> str:
    return f"{twin.hf.family.name}'s recipe ({twin.recipe_label()})"
