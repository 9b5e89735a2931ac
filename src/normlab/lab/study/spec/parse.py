"""Studies as data: a study spec file (TOML) becomes a ``Study``, its arms and its claims.

The format is described for users in ``docs/spec.md``; the built-in presets are spec files in
``specs/`` next to this module, read by the same loader. In short::

    name, description
    [base]           a TrainConfig's fields; [base.model] a TransformerConfig's
    [[arms]]         name (a pattern: "{field}" is the arm's value of that field), overrides of
                     the base (model fields under model), and optionally axes: a grid, one arm
                     per combination, the first axis varying slowest
    [[claims]]       name, statement, source, plots, rule = contrast | all_of | any_of | fails |
                     trains | timing | lr_sensitivity and that rule's parameters; an all_of's
                     or any_of's [[claims.parts]] take the parameters they do not set from
                     their claim; controls (on a claim or a part): arms that must train (or
                     fail) in the same setting, else the verdict is "not testable here"

A spec is checked whole before anything runs. A mistake is one ``SpecError`` whose message is
``FILE: key.path: what was expected``: values are checked against the dataclasses' field types
here (TOML has its own types, and a string where an int belongs must not reach the trainer),
and the dataclasses' own validation decides the rest (ranges, choices, shapes), its message
placed at the key that caused it.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import typing
from importlib import resources
from pathlib import Path
from typing import Any

from normlab.lab.kit.limits import MAX_ARMS, NAME_MAX, format_name
from normlab.lab.kit.reading import (
    ReadError,
    check_strings,
    check_text,
    loads_toml,
    read_text,
)
from normlab.lab.study.decide import MEASURES, Claim, unmet
from normlab.lab.study.spec.checks import Checks, SpecError, did_you_mean, key_at, show
from normlab.lab.study.spec.claim_loader import ClaimLoader
from normlab.lab.study.spec.cuts import only, with_rate_arms
from normlab.lab.study.spec.design import Arm, Study
from normlab.lab.study.spec.overrides import apply_overrides, parse_override  # noqa: F401 (its API)
from normlab.lab.train.config import TrainConfig
from normlab.lab.train.data import VOCAB_SIZE
from normlab.lab.train.fields import NOT_IN_SPEC
from normlab.lab.verdict.sequential import SPENDING, Design
from normlab.models import TransformerConfig
from normlab.models.config import field_types

SPECS = "specs"  # the built-in presets' directory, package data of normlab.lab.study
MAX_SPEC_BYTES = 1 << 20  # a spec of a megabyte is a generated one; the presets are ~10 KB
MAX_DESCRIPTION = 10_000  # characters: --list prints it whole


def _settable(cls: type, *but: str) -> tuple[str, ...]:
    """The fields of ``cls`` a spec may set: all but ``but`` and those the lab's field table
    keeps for the study."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.name not in (*but, *NOT_IN_SPEC))


TRAIN_FIELDS = _settable(TrainConfig, "model")  # the model's own: MODEL_FIELDS
MODEL_FIELDS = _settable(TransformerConfig)
_REQUIRED_MODEL = ("dim", "n_layers", "n_heads")
_TABLES = ("base", "arms", "claims")  # a spec's required tables
# The arm names a grid is built from draw on both, so no name may mean two fields.
assert not set(TRAIN_FIELDS) & set(MODEL_FIELDS)


# --------------------------------------------------------------------------------------------
# entry points


def _specs():
    return resources.files("normlab.lab.study.spec").joinpath(SPECS)


def builtin_names() -> list[str]:
    """The built-in presets: the spec files shipped in the package."""
    return sorted(
        p.name.removesuffix(".toml") for p in _specs().iterdir() if p.name.endswith(".toml")
    )


def builtin_text(name: str) -> str:
    """The TOML of a built-in preset, to copy and edit (``normlab study --print-spec NAME``)."""
    if name not in builtin_names():
        raise SpecError(f"no built-in preset {name!r}; built-in: {', '.join(builtin_names())}")
    return _specs().joinpath(f"{name}.toml").read_text("utf-8")


def load_builtin(name: str, overrides: typing.Sequence[str] = (), *, whole: bool = False) -> Study:
    """A built-in preset, with ``overrides`` (``KEY=VALUE``, see :func:`apply_overrides`);
    ``whole``: with its extended claims whatever it runs by default (what its registered
    designs and published pages read)."""
    text = builtin_text(name)
    source = f"{SPECS}/{name}.toml"
    return parse_spec(text, source, default_name=name, overrides=overrides, whole=whole)


def load_spec(
    path: str | Path, overrides: typing.Sequence[str] = (), *, whole: bool = False
) -> Study:
    """Read and check the spec file ``path``, ``overrides`` (``KEY=VALUE``) applied to its
    document first (``whole``: as :func:`parse_spec`); every mistake is a ``SpecError``."""
    p = Path(path)
    try:
        text = read_text(p, str(path), limit=MAX_SPEC_BYTES)
    except ReadError as e:
        raise SpecError(str(e)) from None
    return parse_spec(text, str(path), default_name=p.stem, overrides=overrides, whole=whole)


def parse_spec(
    text: str,
    source: str,
    *,
    default_name: str = "study",
    overrides: typing.Sequence[str] = (),
    whole: bool = False,
) -> Study:
    """The ``Study`` a spec's text describes, ``overrides`` applied to its document before it
    is checked; ``source`` names it in error messages; ``whole``: with its extended claims
    whether or not the spec runs them."""
    try:
        doc = check_strings(loads_toml(text, source), source)
    except ReadError as e:
        raise SpecError(str(e)) from None
    overrides = tuple(o.strip() for o in overrides)
    apply_overrides(doc, overrides, source)
    study = _StudyLoader(source).study(doc, default_name, whole)
    return dataclasses.replace(study, overrides=overrides, spec_text=text)


# --------------------------------------------------------------------------------------------
# the loader


class _StudyLoader:
    """A spec's study: its base, arms and their grids, and its claims (``ClaimLoader``), checked
    with ``check``."""

    def __init__(self, source: str):
        self.check = Checks(source)
        self.claims = ClaimLoader(self.check)

    def misplaced(self, k: str, path: str, allowed) -> None:
        """Fails if config field ``k`` is one a spec cannot set here."""
        at, model = key_at(path, k), key_at(path, "model")
        if k in NOT_IN_SPEC:
            self.check.fail(at, f"cannot be set in a spec: {NOT_IN_SPEC[k]}")
        if k not in allowed and k in MODEL_FIELDS:
            self.check.fail(at, f"a model field: set it in the model table ({k} under {model})")
        if k not in allowed and k in TRAIN_FIELDS:
            self.check.fail(at, "a training field: set it beside the model table, not in it")

    # ---- the study

    def study(self, doc: dict, default_name: str, whole: bool = False) -> Study:
        allowed = ("name", "description", *_TABLES, "only", "sequential", "extended")
        self.check.keys(doc, "", allowed, required=_TABLES)
        name = self.text(self.check.string(doc.get("name", default_name), "name"), "name", NAME_MAX)
        desc = self.text(self.check.plain(doc, "description", ""), "description", MAX_DESCRIPTION)
        base = self.base(self.check.table(doc["base"], "base"))
        self.count_arms(doc["arms"])
        runs: list[Arm] = []
        where: dict[str, str] = {}  # arm -> the entry that made it
        for i, entry in enumerate(self.check.tables(doc["arms"], "arms", "[[arms]]")):
            at = key_at("arms", i)
            for run in self.arms(entry, at, base):
                if made := where.get(run.name):
                    self.check.fail(
                        key_at(at, "name"), f"arm {run.name!r} is already made by {made}"
                    )
                where[run.name] = at
                runs.append(run)
        arms = [r.name for r in runs]
        claims: list[Claim] = []
        for i, entry in enumerate(self.check.tables(doc["claims"], "claims", "[[claims]]")):
            claim = self.claims.claim(entry, key_at("claims", i), arms)
            if claim.name in {c.name for c in claims}:
                self.check.fail(
                    key_at(key_at("claims", i), "name"), f"claim {claim.name!r} appears twice"
                )
            claims.append(claim)
        claims = [
            with_rate_arms(c, runs, key_at("claims", i), self.check) for i, c in enumerate(claims)
        ]
        configs = {r.name: r.config for r in runs}
        for i, c in enumerate(claims):
            if why := unmet(c, configs, MEASURES):
                self.check.fail(key_at("claims", i), why)
        runs_all = self.check.flag(doc, "extended", "") or whole or "only" in doc
        left = () if runs_all else tuple(c.name for c in claims if c.extended)
        if "only" in doc:  # it names its claims, extended or not
            claims = only(doc["only"], claims, self.check)
        claims = [c for c in claims if c.name not in left]
        if "only" in doc or left:  # the arms no claim left reads go
            used = {a for c in claims for a in c.arms}
            runs = [r for r in runs if r.name in used]
        seq = self.sequential(doc["sequential"]) if "sequential" in doc else None
        return Study(name, desc, tuple(runs), tuple(claims), sequential=seq, left_out=left)

    def sequential(self, v: Any) -> Design:
        """``[sequential]``: a group-sequential design (``normlab.lab.verdict.sequential``):
        ``batch`` seeds a look, optionally ``first`` (the first look's seeds) and
        ``spending``."""
        d = self.check.table(v, "sequential")
        self.check.keys(d, "sequential", ("batch", "first", "spending"), required=("batch",))
        batch = self.check.count(d["batch"], "sequential.batch")
        first = self.check.count(d["first"], "sequential.first") if "first" in d else 0
        spending = d.get("spending", "obrien-fleming")
        if spending not in SPENDING:
            choices = ", ".join(map(show, SPENDING))
            self.check.fail(
                "sequential.spending", f"expected one of {choices}, got {show(spending)}"
            )
        return Design(batch, spending, first)

    def text(self, v: str, path: str, limit: int) -> str:
        """``v`` if it is printable (newlines and tabs aside) and at most ``limit`` long: it
        reaches a terminal, ``study.json`` and the Markdown report."""
        try:
            check_text(v, "", limit, newlines=path != "name")
        except ValueError as e:
            self.check.fail(path, str(e).removeprefix(": "))
        return v

    def count_arms(self, entries: Any) -> None:
        """The arms every ``[[arms]]`` entry's grid makes, together, within :data:`MAX_ARMS`:
        counted from the axes' lengths before any arm is made."""
        total = 0
        for i, e in enumerate(entries if isinstance(entries, list) else []):  # else: tables()
            axes = e.get("axes") if isinstance(e, dict) else None
            axes = axes if isinstance(axes, dict) else {}  # no grid: one arm
            model = axes.get("model")
            flat = [*model.values()] if isinstance(model, dict) else []
            flat += [v for k, v in axes.items() if k != "model"]
            n = math.prod(len(v) if isinstance(v, list) else 1 for v in flat)
            if n > MAX_ARMS:
                self.check.fail(
                    key_at(key_at("arms", i), "axes"), f"{n:,} arms; the lab allows {MAX_ARMS:,}"
                )
            total += n
        if total > MAX_ARMS:
            self.check.fail("arms", f"{total:,} arms; the lab allows {MAX_ARMS:,} in a study")

    # ---- configs

    def overrides(self, d: dict, path: str) -> tuple[dict, dict]:
        """The training and model field values set in ``d`` (its keys already checked)."""
        train = {k: v for k, v in d.items() if k in TRAIN_FIELDS}
        train = {k: self.field(TrainConfig, k, v, key_at(path, k)) for k, v in train.items()}
        model = {}
        if "model" in d:
            mpath = key_at(path, "model")
            m = self.check.table(d["model"], mpath)
            self.check.keys(m, mpath, MODEL_FIELDS, misplaced=self.misplaced)
            model = {k: self.field(TransformerConfig, k, v, key_at(mpath, k)) for k, v in m.items()}
        return train, model

    def field(self, cls: type, name: str, v: Any, path: str) -> Any:
        return self.check.coerced(field_types(cls)[name], v, path)

    def build(self, path: str, make, train: dict, model: dict, axes: dict | None = None):
        """``make()``, with the dataclasses' own ValueError/TypeError placed at the key that
        set the field their message names first (the table itself when it names none)."""
        try:
            return make()
        except (ValueError, TypeError) as e:
            msg = str(e)
            keys = {k: key_at(path, k) for k in train}
            keys.update({k: key_at(key_at(path, "model"), k) for k in model})
            keys.update({k: key_at(key_at(path, "axes"), k) for k in axes or {}})
            hits = [(m.start(), k) for k in keys if (m := re.search(rf"\b{k}\b", msg))]
            at = keys[min(hits)[1]] if hits else path
            if axes:
                msg += " (at " + ", ".join(f"{k} = {show(v)}" for k, v in axes.items()) + ")"
            self.check.fail(at, msg)

    def base(self, d: dict) -> TrainConfig:
        self.check.keys(
            d, "base", (*TRAIN_FIELDS, "model"), required=("model",), misplaced=self.misplaced
        )
        train, model = self.overrides(d, "base")
        for k in _REQUIRED_MODEL:
            if k not in model:
                self.check.fail(key_at("base.model", k), "missing (required: the model's size)")
        make = lambda: TrainConfig(model=TransformerConfig(VOCAB_SIZE, **model), **train)  # noqa: E731
        return self.build("base", make, train, model)

    def arms(self, d: dict, path: str, base: TrainConfig) -> list[Arm]:
        allowed = ("name", "axes", "model", *TRAIN_FIELDS)
        self.check.keys(d, path, allowed, required=("name",), misplaced=self.misplaced)
        pattern = self.check.string(d["name"], key_at(path, "name"))
        train, model = self.overrides(d, path)
        axes = self.axes(d.get("axes", {}), key_at(path, "axes"), train, model)
        runs = []  # count_arms has kept their number within MAX_ARMS
        for combo in itertools.product(*axes.values()):
            point = dict(zip(axes, combo, strict=True))
            t = {**train, **{k: v for k, v in point.items() if k in TRAIN_FIELDS}}
            m = {**model, **{k: v for k, v in point.items() if k in MODEL_FIELDS}}
            cfg = self.build(path, lambda t=t, m=m: base.replace(model=m, **t), train, model, point)
            runs.append(Arm(self.arm_name(pattern, cfg, key_at(path, "name")), cfg))
        return runs

    def axes(self, v: Any, path: str, train: dict, model: dict) -> dict[str, list]:
        """Axis name -> its values; ``model.n_layers`` and ``n_layers`` are the same axis."""
        flat = []  # (name, values, key path), in the order written: it orders the arms
        for k, x in self.check.table(v, path).items():
            if k == "model":
                mpath = key_at(path, "model")
                flat += [
                    (mk, mx, key_at(mpath, mk)) for mk, mx in self.check.table(x, mpath).items()
                ]
            else:
                flat.append((k, x, key_at(path, k)))
        out: dict[str, list] = {}
        for key, values, kpath in flat:
            if key in NOT_IN_SPEC:
                self.check.fail(kpath, f"cannot be set in a spec: {NOT_IN_SPEC[key]}")
            if key not in TRAIN_FIELDS and key not in MODEL_FIELDS:
                hint = did_you_mean(key, [*TRAIN_FIELDS, *MODEL_FIELDS])
                self.check.fail(kpath, "not a training or model field" + f"; {hint}" * bool(hint))
            if key in train or key in model or key in out:
                self.check.fail(kpath, f"{key} is set twice (as an axis and beside it)")
            if not isinstance(values, list) or not values:
                self.check.fail(kpath, f"expected a non-empty list of values, got {show(values)}")
            cls = TrainConfig if key in TRAIN_FIELDS else TransformerConfig
            out[key] = [self.field(cls, key, x, key_at(kpath, j)) for j, x in enumerate(values)]
        return out

    def arm_name(self, pattern: str, cfg: TrainConfig, path: str) -> str:
        """The arm's name: ``pattern``'s fields replaced by the config's values (names are data:
        ``normlab.lab.kit.limits.format_name``)."""
        fields = {
            **cfg.model.to_dict(),
            **{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg) if f.name != "model"},
        }
        try:
            return format_name(pattern, fields)
        except ValueError as e:
            self.check.fail(path, str(e))
