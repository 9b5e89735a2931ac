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
import difflib
import fnmatch
import itertools
import math
import re
import sys
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any

from normlab.lab.common import UsageError
from normlab.lab.study.claims import Claim
from normlab.lab.study.design import Arm, Study
from normlab.lab.study.measures import MEASURES
from normlab.lab.study.rules import CONTROL_EXPECTS, EXPECT, RULES, Controlled, control
from normlab.lab.train.data import VOCAB_SIZE
from normlab.lab.train.trainer import TrainConfig
from normlab.models import TransformerConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

SPECS = "specs"  # the built-in presets' directory, package data of normlab.lab.study

# Fields a spec may not set, and why: the study sets them per run, or the data fixes them.
_NOT_SETTABLE = {
    "seed": "the study sets each run's seed (normlab study --seed)",
    "threads": "the study sets the threads (normlab study --threads, --workers)",
    "vocab_size": f"the data's: {VOCAB_SIZE} (bytes)",
}
TRAIN_FIELDS = tuple(
    f.name for f in dataclasses.fields(TrainConfig) if f.name not in ("model", *_NOT_SETTABLE)
)
MODEL_FIELDS = tuple(
    f.name for f in dataclasses.fields(TransformerConfig) if f.name not in _NOT_SETTABLE
)
_REQUIRED_MODEL = ("dim", "n_layers", "n_heads")
# The arm names a grid is built from draw on both, so no name may mean two fields.
assert not set(TRAIN_FIELDS) & set(MODEL_FIELDS)

# ASCII spellings of the two decisions whose symbols are not on a keyboard.
EXPECT_ALIASES = {"!=0": "≠0", "~0": "≈0"}


def _params(kind: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A rule kind's (required, optional) parameters: its dataclass fields, by whether they
    have a default, and what a compound passes on to its parts."""
    fields = dataclasses.fields(RULES[kind])
    key = lambda f: f.metadata.get("key", f.name)  # noqa: E731
    req = tuple(key(f) for f in fields if f.default is f.default_factory is dataclasses.MISSING)
    opt = tuple(key(f) for f in fields if key(f) not in req)
    return req, opt + getattr(RULES[kind], "SHARED", ())


def _field(key: str, cls: type) -> tuple[dataclasses.Field, Any]:
    """The field of rule ``cls`` its parameter ``key`` sets, and its type; for a parameter a
    compound passes on to its parts, the first rule field of that name."""
    for c in (cls, *RULES.values()):
        for f in dataclasses.fields(c):
            if f.metadata.get("key", f.name) == key:
                return f, typing.get_type_hints(c)[f.name]
    raise AssertionError(key)


_CLAIM_KEYS = ("name", "statement", "source", "plots", "rule", "controls")
_CONTROL_KEYS = ("arm", "any", "expect", "margin")
_CONTROL_EXAMPLE = '[{arm = "pre-L24", expect = "trains"}]'
_CLAIM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # it names the report's plot files


class SpecError(UsageError, ValueError):
    """A study spec that cannot run; the message is ``FILE: key.path: what was expected``."""


# --------------------------------------------------------------------------------------------
# entry points


def builtin_names() -> list[str]:
    """The built-in presets: the spec files shipped in the package."""
    return sorted(
        p.name.removesuffix(".toml")
        for p in resources.files("normlab.lab.study").joinpath(SPECS).iterdir()
        if p.name.endswith(".toml")
    )


def builtin_text(name: str) -> str:
    """The TOML of a built-in preset, to copy and edit (``normlab study --print-spec NAME``)."""
    if name not in builtin_names():
        raise SpecError(f"no built-in preset {name!r}; built-in: {', '.join(builtin_names())}")
    return resources.files("normlab.lab.study").joinpath(SPECS, f"{name}.toml").read_text("utf-8")


def load_builtin(name: str, overrides: typing.Sequence[str] = ()) -> Study:
    """A built-in preset, with ``overrides`` (``KEY=VALUE``, see :func:`apply_overrides`)."""
    text = builtin_text(name)
    return parse_spec(text, f"{SPECS}/{name}.toml", default_name=name, overrides=overrides)


def load_spec(path: str | Path, overrides: typing.Sequence[str] = ()) -> Study:
    """Read and check the spec file ``path``, ``overrides`` (``KEY=VALUE``) applied to its
    document first; every mistake is a ``SpecError``."""
    p = Path(path)
    try:
        text = p.read_text("utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: cannot read it ({e})") from None
    return parse_spec(text, str(path), default_name=p.stem, overrides=overrides)


def parse_spec(
    text: str,
    source: str,
    *,
    default_name: str = "study",
    overrides: typing.Sequence[str] = (),
) -> Study:
    """The ``Study`` a spec's text describes, ``overrides`` applied to its document before it
    is checked; ``source`` names it in error messages."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{source}: not valid TOML: {e}") from None
    overrides = tuple(o.strip() for o in overrides)
    apply_overrides(doc, overrides, source)
    study = _Loader(source).study(doc, default_name)
    return dataclasses.replace(study, overrides=overrides) if overrides else study


# --------------------------------------------------------------------------------------------
# overrides: normlab study --set KEY=VALUE

_SEGMENT = re.compile(r"([A-Za-z0-9_-]+)((?:\[\d+\])*)")


def parse_override(text: str, source: str = "--set") -> tuple[list[str | int], Any]:
    """``KEY=VALUE`` as its path and value. ``KEY`` is a dotted path into the spec document
    (``base.steps``, ``base.model.dim``, ``arms[1].lr`` or ``arms.1.lr``); ``VALUE`` a TOML
    value (``50``, ``1e-3``, ``true``, ``[0.9, 0.95]``, ``"pre"``), else the text as a string
    (``rmsnorm``)."""
    key, eq, value = text.partition("=")
    key, value = key.strip(), value.strip()
    if not eq or not key:
        raise SpecError(f"{source}: --set {text}: expected KEY=VALUE, e.g. base.steps=50")
    path: list[str | int] = []
    for part in key.split("."):
        m = _SEGMENT.fullmatch(part)
        if m is None:
            raise SpecError(
                f"{source}: --set {text}: {part!r} is not a key; expected a dotted path like "
                "base.model.dim or arms[0].lr"
            )
        name, indices = m.groups()
        path.append(int(name) if name.isdigit() else name)
        path += [int(i) for i in re.findall(r"\d+", indices)]
    try:
        doc = tomllib.loads(f"v = {value}")
        parsed = doc["v"] if list(doc) == ["v"] else value
    except tomllib.TOMLDecodeError:
        parsed = value
    return path, parsed


def apply_overrides(doc: dict, overrides: typing.Sequence[str], source: str) -> None:
    """Set each ``KEY=VALUE`` of ``overrides`` in the spec document ``doc`` (in order; tables
    on the way are created), before the document is checked: a key the spec format does not
    know is then the same ``SpecError`` the file would give."""
    for text in overrides:
        path, value = parse_override(text, source)
        node: Any = doc
        where = ""
        for i, key in enumerate(path):
            last = i == len(path) - 1
            if isinstance(key, int):
                if not isinstance(node, list) or not 0 <= key < len(node):
                    n = len(node) if isinstance(node, list) else 0
                    what = f"a list of {n}" if isinstance(node, list) else "not a list"
                    raise SpecError(f"{source}: {where or 'the spec'}: --set {text}: {what}")
            elif not isinstance(node, dict):
                raise SpecError(f"{source}: {where}: --set {text}: {where} is not a table")
            if last:
                node[key] = value
            else:
                node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
            where = _at(where, key)


# --------------------------------------------------------------------------------------------
# value checks


def _at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _show(v: Any) -> str:
    """A value as it is written in TOML, for messages."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, list):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    return repr(v)


class _Expected(Exception):
    """A value of the wrong type; the message says what was expected."""


_HINTS = {cls: typing.get_type_hints(cls) for cls in (TrainConfig, TransformerConfig)}


def _coerce(hint: Any, v: Any) -> Any:
    """``v`` (as TOML read it) as a value of the field type ``hint``, or ``_Expected``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):  # X | None: TOML has no null, so X
        (inner,) = (a for a in args if a is not type(None))
        return _coerce(inner, v)
    if origin is tuple:
        if args[-1] is Ellipsis:
            if not isinstance(v, list):
                raise _Expected(f"a list of {_name(args[0])}s")
            return tuple(_coerce(args[0], x) for x in v)
        if not isinstance(v, list) or len(v) != len(args):
            raise _Expected(f"a list of {len(args)} {_name(args[0])}s")
        return tuple(_coerce(a, x) for a, x in zip(args, v, strict=True))
    if hint is bool:
        if not isinstance(v, bool):
            raise _Expected("true or false")
        return v
    if hint is int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise _Expected("an int")
        return v
    if hint is float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise _Expected("a number")
        return float(v)  # 1 and 1.0 must give the same config, and the same run key
    if hint is str:
        if not isinstance(v, str):
            raise _Expected("a string")
        return v
    raise TypeError(f"no TOML form for the field type {hint!r}")


def _name(hint: Any) -> str:
    return {int: "int", float: "number", str: "string", bool: "bool"}.get(hint, str(hint))


# --------------------------------------------------------------------------------------------
# the loader


class _Loader:
    def __init__(self, source: str):
        self.source = source

    def fail(self, path: str, msg: str) -> typing.NoReturn:
        raise SpecError(f"{self.source}: {path}: {msg}" if path else f"{self.source}: {msg}")

    # ---- shapes

    def table(self, v: Any, path: str) -> dict:
        if not isinstance(v, dict):
            self.fail(path, f"expected a table, got {_show(v)}")
        return v

    def tables(self, v: Any, path: str, toml: str) -> list[dict]:
        if not isinstance(v, list) or not v:
            self.fail(path, f"expected one or more {toml} tables")
        return [self.table(x, _at(path, i)) for i, x in enumerate(v)]

    def keys(self, d: dict, path: str, allowed, required=(), *, config: bool = False) -> None:
        """``d`` has only ``allowed`` keys and every ``required`` one; ``config``: ``d`` holds a
        config's fields, so a field of the wrong table, or one the study sets, is named so."""
        for k in d:
            if config and k in _NOT_SETTABLE:
                self.fail(_at(path, k), f"cannot be set in a spec: {_NOT_SETTABLE[k]}")
            if config and k not in allowed and k in MODEL_FIELDS:
                self.fail(
                    _at(path, k),
                    f"a model field: set it in the model table ({k} under {_at(path, 'model')})",
                )
            if config and k not in allowed and k in TRAIN_FIELDS:
                self.fail(
                    _at(path, k), "a training field: set it beside the model table, not in it"
                )
            if k not in allowed:
                close = difflib.get_close_matches(k, list(allowed), n=1)
                hint = f"did you mean {close[0]!r}?" if close else "expected one of: "
                self.fail(_at(path, k), f"unknown key; {hint}" + ", ".join(allowed) * (not close))
        for k in required:
            if k not in d:
                self.fail(_at(path, k), "missing (required)")

    def string(self, v: Any, path: str) -> str:
        if not isinstance(v, str) or not v:
            self.fail(path, f"expected a non-empty string, got {_show(v)}")
        return v

    def number(self, v: Any, path: str, *, low: float | None = None) -> float:
        try:
            x = _coerce(float, v)
        except _Expected as e:
            self.fail(path, f"expected {e}, got {_show(v)}")
        if low is not None and x < low:
            self.fail(path, f"expected a number >= {low:g}, got {_show(v)}")
        return x

    def count(self, v: Any, path: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            self.fail(path, f"expected an int >= 1, got {_show(v)}")
        return v

    # ---- the study

    def study(self, doc: dict, default_name: str) -> Study:
        self.keys(
            doc,
            "",
            ("name", "description", "base", "arms", "claims"),
            required=("base", "arms", "claims"),
        )
        name = self.string(doc.get("name", default_name), "name")
        desc = doc.get("description", "")
        if not isinstance(desc, str):
            self.fail("description", f"expected a string, got {_show(desc)}")
        base = self.base(self.table(doc["base"], "base"))
        runs: list[Arm] = []
        where: dict[str, str] = {}  # arm -> the entry that made it
        for i, entry in enumerate(self.tables(doc["arms"], "arms", "[[arms]]")):
            for run in self.arms(entry, _at("arms", i), base):
                if run.name in where:
                    self.fail(
                        _at(_at("arms", i), "name"),
                        f"arm {run.name!r} is already made by {where[run.name]}",
                    )
                where[run.name] = _at("arms", i)
                runs.append(run)
        arms = [r.name for r in runs]
        claims: list[Claim] = []
        for i, entry in enumerate(self.tables(doc["claims"], "claims", "[[claims]]")):
            claim = self.claim(entry, _at("claims", i), arms)
            if claim.name in {c.name for c in claims}:
                self.fail(_at(_at("claims", i), "name"), f"claim {claim.name!r} appears twice")
            claims.append(claim)
        return Study(name, desc, tuple(runs), tuple(claims))

    # ---- configs

    def overrides(self, d: dict, path: str) -> tuple[dict, dict]:
        """The training and model field values set in ``d`` (its keys already checked)."""
        train = {
            k: self.field(TrainConfig, k, v, _at(path, k))
            for k, v in d.items()
            if k in TRAIN_FIELDS
        }
        model = {}
        if "model" in d:
            mpath = _at(path, "model")
            m = self.table(d["model"], mpath)
            self.keys(m, mpath, MODEL_FIELDS, config=True)
            model = {k: self.field(TransformerConfig, k, v, _at(mpath, k)) for k, v in m.items()}
        return train, model

    def field(self, cls: type, name: str, v: Any, path: str) -> Any:
        try:
            return _coerce(_HINTS[cls][name], v)
        except _Expected as e:
            self.fail(path, f"expected {e}, got {_show(v)}")

    def build(self, path: str, make, train: dict, model: dict, axes: dict | None = None):
        """``make()``, with the dataclasses' own ValueError/TypeError placed at the key that
        set the field their message names first (the table itself when it names none)."""
        try:
            return make()
        except (ValueError, TypeError) as e:
            msg = str(e)
            keys = {k: _at(path, k) for k in train}
            keys.update({k: _at(_at(path, "model"), k) for k in model})
            keys.update({k: _at(_at(path, "axes"), k) for k in axes or {}})
            hits = [(m.start(), k) for k in keys if (m := re.search(rf"\b{k}\b", msg))]
            at = keys[min(hits)[1]] if hits else path
            if axes:
                msg += " (at " + ", ".join(f"{k} = {_show(v)}" for k, v in axes.items()) + ")"
            self.fail(at, msg)

    def base(self, d: dict) -> TrainConfig:
        self.keys(d, "base", (*TRAIN_FIELDS, "model"), required=("model",), config=True)
        train, model = self.overrides(d, "base")
        for k in _REQUIRED_MODEL:
            if k not in model:
                self.fail(_at("base.model", k), "missing (required: the model's size)")
        make = lambda: TrainConfig(model=TransformerConfig(VOCAB_SIZE, **model), **train)  # noqa: E731
        return self.build("base", make, train, model)

    def arms(self, d: dict, path: str, base: TrainConfig) -> list[Arm]:
        allowed = ("name", "axes", "model", *TRAIN_FIELDS)
        self.keys(d, path, allowed, required=("name",), config=True)
        pattern = self.string(d["name"], _at(path, "name"))
        train, model = self.overrides(d, path)
        axes = self.axes(d.get("axes", {}), _at(path, "axes"), train, model)
        runs = []
        for combo in itertools.product(*axes.values()):
            point = dict(zip(axes, combo, strict=True))
            t = {**train, **{k: v for k, v in point.items() if k in TRAIN_FIELDS}}
            m = {**model, **{k: v for k, v in point.items() if k in MODEL_FIELDS}}
            cfg = self.build(path, lambda t=t, m=m: base.replace(model=m, **t), train, model, point)
            runs.append(Arm(self.arm_name(pattern, cfg, _at(path, "name")), cfg))
        return runs

    def axes(self, v: Any, path: str, train: dict, model: dict) -> dict[str, list]:
        """Axis name -> its values; ``model.n_layers`` and ``n_layers`` are the same axis."""
        flat = []  # (name, values, key path), in the order written: it orders the arms
        for k, x in self.table(v, path).items():
            if k == "model":
                mpath = _at(path, "model")
                flat += [(mk, mx, _at(mpath, mk)) for mk, mx in self.table(x, mpath).items()]
            else:
                flat.append((k, x, _at(path, k)))
        out: dict[str, list] = {}
        for key, values, kpath in flat:
            if key in _NOT_SETTABLE:
                self.fail(kpath, f"cannot be set in a spec: {_NOT_SETTABLE[key]}")
            if key not in TRAIN_FIELDS and key not in MODEL_FIELDS:
                close = difflib.get_close_matches(key, [*TRAIN_FIELDS, *MODEL_FIELDS], n=1)
                self.fail(
                    kpath,
                    "not a training or model field"
                    + (f"; did you mean {close[0]!r}?" if close else ""),
                )
            if key in train or key in model or key in out:
                self.fail(kpath, f"{key} is set twice (as an axis and beside it)")
            if not isinstance(values, list) or not values:
                self.fail(kpath, f"expected a non-empty list of values, got {_show(values)}")
            cls = TrainConfig if key in TRAIN_FIELDS else TransformerConfig
            out[key] = [self.field(cls, key, x, _at(kpath, j)) for j, x in enumerate(values)]
        return out

    def arm_name(self, pattern: str, cfg: TrainConfig, path: str) -> str:
        fields = {
            **cfg.model.to_dict(),
            **{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)},
        }
        try:
            name = pattern.format_map(fields)
        except KeyError as e:
            self.fail(path, f"{{{e.args[0]}}} in {pattern!r} is not a training or model field")
        except (ValueError, IndexError) as e:
            self.fail(path, f"not a valid name pattern ({e}); write a literal brace as {{{{")
        if not name.strip():
            self.fail(path, "the arm's name is empty")
        return name

    # ---- claims

    def claim(self, d: dict, path: str, arms: list[str]) -> Claim:
        kind = self.rule_kind(d, path)
        self.keys(
            d,
            path,
            (*_CLAIM_KEYS, *_params(kind)[0], *_params(kind)[1]),
            required=("name", "statement"),
        )
        name = self.string(d["name"], _at(path, "name"))
        if not _CLAIM_NAME.fullmatch(name):
            self.fail(
                _at(path, "name"),
                "expected letters, digits, '.', '_' or '-' (it names "
                f"the report's plot files), got {_show(name)}",
            )
        statement = self.string(d["statement"], _at(path, "statement"))
        source = d.get("source", "")
        if not isinstance(source, str):
            self.fail(_at(path, "source"), f"expected a string, got {_show(source)}")
        kw = {}
        if "plots" in d:
            kw["plots"] = self.plots(d["plots"], _at(path, "plots"))
        rule = self.rule(kind, d, path, arms, {})
        if "controls" in d:
            kw["controls"] = self.controls(d["controls"], _at(path, "controls"), arms, rule.seeds)
        return Claim(name, statement, source, rule, **kw)

    def controls(self, v: Any, path: str, arms: list[str], seeds: int) -> tuple:
        """A claim's or a part's controls: each an arm name (it must train) or a table
        ``{arm, expect = "trains" | "fails", margin}``, or ``{any = [arms or globs], ...}``: one
        of those arms must, or ``{label, rule = "contrast", ...}``: a measured condition;
        decided on the claim's seeds."""
        if not isinstance(v, list) or not v:
            self.fail(path, f"expected a list of controls, e.g. {_CONTROL_EXAMPLE}, got {_show(v)}")
        out = []
        for i, c in enumerate(v):
            cpath = _at(path, i)
            if isinstance(c, str):
                c = {"arm": c}
            if not isinstance(c, dict):
                self.fail(cpath, f"expected an arm name or a table like {_CONTROL_EXAMPLE[1:-1]}")
            if "rule" in c:  # a measured condition, e.g. "the decayed gains moved"
                out.append(self.rule_control(c, cpath, arms, seeds))
                continue
            self.keys(c, cpath, _CONTROL_KEYS)
            if ("arm" in c) == ("any" in c):
                self.fail(cpath, 'expected one of "arm" (an arm) or "any" (a list of arms)')
            if "arm" in c:
                arm = self.arm(c["arm"], _at(cpath, "arm"), arms)
            else:
                arm = self.sweep(c["any"], _at(cpath, "any"), arms)
            expect = c.get("expect", "trains")
            if expect not in CONTROL_EXPECTS:
                wanted = " or ".join(map(_show, CONTROL_EXPECTS))
                self.fail(_at(cpath, "expect"), f"expected {wanted}, got {_show(expect)}")
            margin = self.number(c["margin"], _at(cpath, "margin")) if "margin" in c else None
            label, rule = control(arm, expect, seeds=seeds, margin=margin)
            if label in (x for x, _ in out):
                self.fail(cpath, f"control {label!r} appears twice")
            out.append((label, rule))
        return tuple(out)

    def rule_control(self, c: dict, path: str, arms: list[str], seeds: int) -> tuple[str, Any]:
        """A control stated as a contrast with a label: what the setting must show for the
        claim to be testable there (e.g. that a change moved what it acts on)."""
        kind = self.rule_kind(c, path)
        if not getattr(RULES[kind], "CONTROL", False):
            kinds = " or ".join(_show(k) for k, r in RULES.items() if getattr(r, "CONTROL", False))
            self.fail(_at(path, "rule"), f"a control's rule is {kinds}, got {_show(kind)}")
        self.keys(
            c, path, ("label", "rule", *_params(kind)[0], *_params(kind)[1]), required=("label",)
        )
        label = self.string(c["label"], _at(path, "label"))
        return label, self.rule(kind, c, path, arms, {"seeds": (seeds, path)})

    def plots(self, v: Any, path: str) -> tuple[str, ...]:
        from normlab.lab.study.plots import PLOTS

        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self.fail(path, f"expected a list of plot names, got {_show(v)}")
        for i, x in enumerate(v):
            if x not in PLOTS:
                self.fail(_at(path, i), f"unknown plot {x!r}; expected one of: {', '.join(PLOTS)}")
        return tuple(v)

    def rule_kind(self, d: dict, path: str) -> str:
        if "rule" not in d:
            self.fail(_at(path, "rule"), f"missing (required: one of {', '.join(RULES)})")
        kind = d["rule"]
        if kind not in RULES:
            known = ", ".join(RULES)
            self.fail(_at(path, "rule"), f"unknown rule {_show(kind)}; expected one of: {known}")
        return kind

    def rule(self, kind: str, d: dict, path: str, arms: list[str], inherited: dict):
        """The rule ``kind`` from ``d``'s parameters, or from ``inherited`` (a compound claim's
        parameters, for its parts) where ``d`` does not set them; each checked as its dataclass
        field says (``metadata["spec"]``, else by its type)."""
        cls = RULES[kind]
        req, opt = _params(kind)
        own = {k: (v, _at(path, k)) for k, v in d.items() if k in (*req, *opt)}
        params = {**{k: x for k, x in inherited.items() if k in (*req, *opt)}, **own}
        for k in req:
            if k not in params:
                self.fail(_at(path, k), "missing (required by the rule " + f"{kind!r})")
        fields = {f.metadata.get("key", f.name): f for f in dataclasses.fields(cls)}
        get = {}
        for k, (v, p) in params.items():
            f, hint = _field(k, cls)
            if f.metadata.get("spec") != "parts":
                get[k] = self.param(f.metadata.get("spec"), f, hint, v, p, arms)
        for k, (v, p) in params.items():  # a compound's parts, once its own parameters pass
            if _field(k, cls)[0].metadata.get("spec") == "parts":
                get[k] = self.parts(v, p, arms, params)
        try:
            return cls(**{fields[k].name: x for k, x in get.items() if k in fields})
        except (ValueError, TypeError) as e:
            self.fail(path, str(e))

    def parts(self, v: Any, path: str, arms: list[str], params: dict) -> tuple:
        """A compound claim's [[claims.parts]]: (label, rule) pairs, each part taking the
        parameters it does not set from its claim (``params``)."""
        parts, labels = [], set()
        for i, part in enumerate(self.tables(v, path, "[[claims.parts]]")):
            ppath = _at(path, i)
            pkind = self.rule_kind(part, ppath)
            if "parts" in _params(pkind)[0]:
                self.fail(_at(ppath, "rule"), f"a part cannot itself be {pkind}")
            allowed = ("label", "rule", "controls", *_params(pkind)[0], *_params(pkind)[1])
            self.keys(part, ppath, allowed, required=("label",))
            label = self.string(part["label"], _at(ppath, "label"))
            if label in labels:
                self.fail(_at(ppath, "label"), f"label {label!r} appears twice")
            labels.add(label)
            shared = {k: x for k, x in params.items() if k != "parts"}
            rule = self.rule(pkind, part, ppath, arms, shared)
            if "controls" in part:
                cpath = _at(ppath, "controls")
                rule = Controlled(rule, self.controls(part["controls"], cpath, arms, rule.seeds))
            parts.append((label, rule))
        return tuple(parts)

    def param(self, spec: str | None, f, hint: Any, v: Any, path: str, arms: list[str]) -> Any:
        """One rule parameter, checked as its field's ``spec`` says (None: by its type)."""
        if spec == "count":
            return self.count(v, path)
        if spec == "delta":
            return self.number(v, path, low=0)
        if spec == "expect":
            e = EXPECT_ALIASES.get(v, v)
            if e not in EXPECT:
                self.fail(
                    path,
                    f"expected one of {', '.join(map(_show, EXPECT))} (or "
                    f'"!=0", "~0"), got {_show(v)}',
                )
            return e
        if spec == "name":
            return self.string(v, path)
        if spec == "choice":
            if v not in f.metadata["choices"]:
                choices = ", ".join(f.metadata["choices"])
                self.fail(path, f"expected one of: {choices}; got {_show(v)}")
            return v
        if spec == "arm":
            return self.arm(v, path, arms)
        if spec == "sweep":  # arm names or glob patterns, in LR order
            return self.sweep(v, path, arms)
        if spec == "terms":
            if not isinstance(v, list) or not v:
                self.fail(path, "expected a list of [coef, arm, measure] terms, got " + _show(v))
            return tuple(self.term(t, _at(path, i), arms) for i, t in enumerate(v))
        try:
            return _coerce(hint, v)
        except _Expected as e:
            self.fail(path, f"expected {e}, got {_show(v)}")

    def sweep(self, v: Any, path: str, arms: list[str]) -> tuple[str, ...]:
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self.fail(path, f"expected arm names or glob patterns, got {_show(v)}")
        out: list[str] = []
        for i, pattern in enumerate(v):
            hits = [a for a in arms if fnmatch.fnmatchcase(a, pattern)]
            if not hits:
                self.arm(pattern, _at(path, i), arms)  # fails, with the near-miss hint
            out += [a for a in hits if a not in out]
        if len(out) < 2:
            self.fail(path, f"a sweep (or an 'any' control) needs at least two arms, got {out}")
        return tuple(out)

    def arm(self, v: Any, path: str, arms: list[str]) -> str:
        if v not in arms:
            close = difflib.get_close_matches(str(v), arms, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"arms: {', '.join(arms)}"
            self.fail(path, f"{_show(v)} is not an arm of this study; {hint}")
        return v

    def term(self, t: Any, path: str, arms: list[str]) -> tuple[float, str, str]:
        if not isinstance(t, list) or len(t) != 3:
            self.fail(path, f"expected a term [coef, arm, measure], got {_show(t)}")
        coef = self.number(t[0], _at(path, 0))
        arm = self.arm(t[1], _at(path, 1), arms)
        if t[2] not in MEASURES:
            known = ", ".join(MEASURES)
            self.fail(_at(path, 2), f"unknown measure {_show(t[2])}; expected one of: {known}")
        return coef, arm, t[2]
