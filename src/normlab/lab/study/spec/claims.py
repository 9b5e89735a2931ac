"""The claims of a study spec: ``[[claims]]``, their rules, parts and controls, checked whole
(the rest of the document is ``parse.py``'s), and the value checks both share. A rule is built
from its dataclass's fields (``rules.RULES``): required where the field has no default, each
value checked as its ``metadata["spec"]`` says, else by its type as a config field is (by the
lab's one coercer of config values, ``normlab.lab.train.fields.coerce``).

A mistake is one ``SpecError`` whose message is ``FILE: key.path: what was expected``; a key is
shown escaped and a value as TOML writes it, so a message is one line whatever the spec holds.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import json
import re
import typing
from typing import Any

from normlab.lab.errors import UsageError
from normlab.lab.limits import MAX_SEEDS, NAME_MAX
from normlab.lab.study.decide import MEASURES, RULES, AnyOf, Claim, Controlled, control_kinds
from normlab.lab.train.fields import Expected, coerce
from normlab.lab.verdict import EXPECT
from normlab.models.config import field_types


class SpecError(UsageError, ValueError):
    """A study spec that cannot run; the message is ``FILE: key.path: what was expected``."""


_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,100}")


def _at(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not _PLAIN_KEY.fullmatch(key):  # a quoted TOML key: escaped, so a message is one line
        key = json.dumps(key if len(key) <= 60 else key[:60] + "...")
    return f"{path}.{key}" if path else key


def _show(v: Any) -> str:
    """A value as it is written in TOML, for messages."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):  # escaped: a message is one line, whatever the value holds
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, dict):
        return "a table"
    if isinstance(v, list):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    return repr(v)


# ASCII spellings of the two decisions whose symbols are not on a keyboard.
EXPECT_ALIASES = {"!=0": "≠0", "~0": "≈0"}


def _params(kind: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A rule kind's required parameters (its dataclass fields without a default) and all it
    takes: its fields, then what a compound passes on to its parts."""
    fields = dataclasses.fields(RULES[kind])
    key = lambda f: f.metadata.get("key", f.name)  # noqa: E731
    req = tuple(key(f) for f in fields if f.default is f.default_factory is dataclasses.MISSING)
    opt = (*(key(f) for f in fields if key(f) not in req), *getattr(RULES[kind], "SHARED", ()))
    return req, (*req, *opt)


def _field(key: str, cls: type) -> tuple[dataclasses.Field, Any]:
    """The field of rule ``cls`` its parameter ``key`` sets, and its type; for a parameter a
    compound passes on to its parts, the first rule field of that name."""
    for c in (cls, *RULES.values()):
        for f in dataclasses.fields(c):
            if f.metadata.get("key", f.name) == key:
                return f, field_types(c)[f.name]
    raise AssertionError(key)


_CLAIM_KEYS = ("name", "statement", "source", "plots", "rule", "controls", "not_testable")
_CONTROL_KEYS = ("arm", "any", "expect", "margin")
_CONTROL_EXAMPLE = '[{arm = "pre-L24", expect = "trains"}]'
_CLAIM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # it names the report's plot files


class ClaimLoader:
    """The shapes of a spec's values, each failing with the key path, and its claims."""

    def misplaced(self, key: str, path: str, allowed) -> None:
        """Fails if config field ``key`` is one a spec cannot set here."""

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
        config's fields (``misplaced`` names a field of the wrong table, or one the study sets)."""
        for k in d:
            if config:
                self.misplaced(k, path, allowed)
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

    def coerced(self, hint: Any, v: Any, path: str) -> Any:
        """``v`` as a config field of type ``hint`` takes it (``coerce``)."""
        try:
            return coerce(hint, v)
        except Expected as e:
            self.fail(path, f"expected {e}, got {_show(v)}")

    def plain(self, d: dict, key: str, path: str) -> str:
        """``d[key]``, a string ("" where it is not set)."""
        v = d.get(key, "")
        if not isinstance(v, str):
            self.fail(_at(path, key), f"expected a string, got {_show(v)}")
        return v

    def number(self, v: Any, path: str, *, low: float | None = None) -> float:
        x = self.coerced(float, v, path)
        if low is not None and x < low:
            self.fail(path, f"expected a number >= {low:g}, got {_show(v)}")
        return x

    def count(self, v: Any, path: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            self.fail(path, f"expected an int >= 1, got {_show(v)}")
        if v > MAX_SEEDS:
            self.fail(path, f"{v:,} is more than the {MAX_SEEDS:,} the lab allows")
        return v

    def claim(self, d: dict, path: str, arms: list[str]) -> Claim:
        kind = self.rule_kind(d, path)
        self.keys(d, path, (*_CLAIM_KEYS, *_params(kind)[1]), required=("name", "statement"))
        name = self.string(d["name"], _at(path, "name"))
        if not _CLAIM_NAME.fullmatch(name) or len(name) > NAME_MAX:
            self.fail(
                _at(path, "name"),
                f"expected letters, digits, '.', '_' or '-', at most {NAME_MAX} (it names "
                f"the report's plot files), got {_show(name)}",
            )
        statement = self.string(d["statement"], _at(path, "statement"))
        source = self.plain(d, "source", path)
        kw = {}
        if "plots" in d:
            kw["plots"] = self.plots(d["plots"], _at(path, "plots"))
        rule = self.rule(kind, d, path, arms, {})
        if "controls" in d:
            kw["controls"] = self.controls(d["controls"], _at(path, "controls"), arms, rule.seeds)
        if "not_testable" in d:
            kw["not_testable"] = self.string(d["not_testable"], _at(path, "not_testable"))
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
        if kind not in control_kinds():
            kinds = " or ".join(_show(k) for k in control_kinds())
            self.fail(_at(path, "rule"), f"a control's rule is {kinds}, got {_show(kind)}")
        self.keys(c, path, ("label", "rule", *_params(kind)[1]), required=("label",))
        label = self.string(c["label"], _at(path, "label"))
        return label, self.rule(kind, c, path, arms, {"seeds": (seeds, path)})

    def plots(self, v: Any, path: str) -> tuple[str, ...]:
        from normlab.lab.study.report import PLOTS

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
        if not isinstance(kind, str) or kind not in RULES:
            known = ", ".join(RULES)
            self.fail(_at(path, "rule"), f"unknown rule {_show(kind)}; expected one of: {known}")
        return kind

    def rule(self, kind: str, d: dict, path: str, arms: list[str], inherited: dict):
        """The rule ``kind`` from ``d``'s parameters, or from ``inherited`` (a compound claim's
        parameters, for its parts) where ``d`` does not set them; each checked as its dataclass
        field says (``metadata["spec"]``, else by its type)."""
        cls = RULES[kind]
        req, known = _params(kind)
        own = {k: (v, _at(path, k)) for k, v in d.items() if k in known}
        params = {**{k: x for k, x in inherited.items() if k in known}, **own}
        for k in req:
            if k not in params:
                self.fail(_at(path, k), "missing (required by the rule " + f"{kind!r})")
        get = {k: self.param(k, cls, v, p, arms) for k, (v, p) in params.items() if k != "parts"}
        self.distinct_arms(get, params, kind)
        if "parts" in params:  # a compound's parts (PARTS), once its own parameters pass
            get["parts"] = self.parts(*params["parts"], arms, params)
        fields = {f.metadata.get("key", f.name): f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{fields[k]: x for k, x in get.items() if k in fields})
        except (ValueError, TypeError) as e:
            self.fail(path, str(e))

    def parts(self, v: Any, path: str, arms: list[str], params: dict) -> tuple:
        """A compound claim's [[claims.parts]]: (label, rule) pairs, each part taking the
        parameters it does not set from its claim (``params``)."""
        parts: list[tuple[str, Any]] = []
        for i, part in enumerate(self.tables(v, path, "[[claims.parts]]")):
            ppath = _at(path, i)
            pkind = self.rule_kind(part, ppath)
            if "parts" in _params(pkind)[0]:
                self.fail(_at(ppath, "rule"), f"a part cannot itself be {pkind}")
            allowed = ("label", "rule", "controls", *_params(pkind)[1])
            self.keys(part, ppath, allowed, required=("label",))
            label = self.string(part["label"], _at(ppath, "label"))
            if label in dict(parts):
                self.fail(_at(ppath, "label"), f"label {label!r} appears twice")
            rule = self.rule(pkind, part, ppath, arms, params)  # its kind takes no parts
            if "controls" in part:
                cpath = _at(ppath, "controls")
                rule = Controlled(rule, self.controls(part["controls"], cpath, arms, rule.seeds))
            parts.append((label, rule))
        return tuple(parts)

    def distinct_arms(self, get: dict, params: dict, kind: str) -> None:
        """A rule's arm parameters name different arms: ``fast = slow`` compares an arm with
        itself, a verdict decided by the spec, not by the runs."""
        seen: dict[str, str] = {}
        for k, v in get.items():
            if _field(k, RULES[kind])[0].metadata.get("spec") != "arm":
                continue
            if v in seen:
                why = f"the rule {kind!r} compares two different arms"
                self.fail(params[k][1], f"{_show(v)} is also {seen[v]}: {why}")
            seen[v] = k
        if get.get("processes", 0) > MAX_SEEDS:  # timing processes run one after the other
            self.count(get["processes"], params["processes"][1])  # fails: more than allowed

    def param(self, key: str, cls: type, v: Any, path: str, arms: list[str]) -> Any:
        """Parameter ``key`` of rule ``cls``, checked as its field's ``metadata["spec"]`` says
        (none: by its type)."""
        f, hint = _field(key, cls)
        spec = f.metadata.get("spec")
        if spec == "count":
            return self.count(v, path)
        if spec == "delta":
            return self.number(v, path, low=0)
        if spec == "expect":
            e = EXPECT_ALIASES.get(v, v) if isinstance(v, str) else v
            if not isinstance(e, str) or e not in EXPECT:
                wanted = ", ".join(map(_show, EXPECT))
                self.fail(path, f'expected one of {wanted} (or "!=0", "~0"), got {_show(v)}')
            return e
        if spec == "name":
            return self.string(v, path)
        if spec == "choice":
            if not isinstance(v, str) or v not in f.metadata["choices"]:
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
        return self.coerced(hint, v, path)

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
        if not isinstance(v, str) or v not in arms:
            close = difflib.get_close_matches(str(v), arms, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"arms: {', '.join(arms)}"
            self.fail(path, f"{_show(v)} is not an arm of this study; {hint}")
        return v

    def term(self, t: Any, path: str, arms: list[str]) -> tuple[float, str, str]:
        if not isinstance(t, list) or len(t) != 3:
            self.fail(path, f"expected a term [coef, arm, measure], got {_show(t)}")
        coef = self.number(t[0], _at(path, 0))
        arm = self.arm(t[1], _at(path, 1), arms)
        if not isinstance(t[2], str) or t[2] not in MEASURES:
            known = ", ".join(MEASURES)
            self.fail(_at(path, 2), f"unknown measure {_show(t[2])}; expected one of: {known}")
        return coef, arm, t[2]


CONTROL_EXPECTS = ("trains", "fails")  # what a control's arm must do: a rule kind of RULES


def control(
    arm: str | tuple[str, ...], expect: str = "trains", *, seeds: int, margin: float | None = None
):
    """A control: ``(label, rule)``, the rule ``Trains(arm)`` or ``Fails(arm)``; for a tuple of
    arms, that *one of them* does (an ``any_of``, Holm-corrected): e.g. "some arm of a grid
    trains", without which the grid cannot show what changes training."""
    if expect not in CONTROL_EXPECTS:
        raise ValueError(f"a control expects 'trains' or 'fails', got {expect!r}")
    make = RULES[expect]
    kw = {} if margin is None else {"margin": margin}
    if isinstance(arm, str):
        return (f"{arm} {expect}", make(arm, seeds=seeds, **kw))
    parts = tuple((f"{a} {expect}", make(a, seeds=seeds, **kw)) for a in arm)
    return (f"one of {len(arm)} arms ({arm[0]}, …) {expect}", AnyOf(parts))
