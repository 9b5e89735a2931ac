"""The claims of a study spec: ``[[claims]]``, their rules, parts and controls, checked whole
(the rest of the document is ``parse.py``'s) with the value checks both share (``checks.py``).
A rule is built from its dataclass's fields (``rules.RULES``): required where the field has no
default, each value checked as its ``metadata["spec"]`` says, else by its type as a config field
is (by the lab's one coercer of config values, ``normlab.lab.train.fields.coerce``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from typing import Any

from normlab.lab.kit.limits import MAX_SEEDS, NAME_MAX
from normlab.lab.study.decide import MEASURES, RULES, AnyOf, Claim, Controlled, control_kinds
from normlab.lab.study.decide.rivals import CHECK, RateCheck
from normlab.lab.study.spec.checks import Checks, did_you_mean, key_at, show
from normlab.lab.verdict import EXPECT
from normlab.models.config import field_types

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


_CLAIM_KEYS = (
    "name",
    "statement",
    "source",
    "plots",
    "rule",
    "controls",
    "not_testable",
    "rate_check",
    "extended",
)
_CONTROL_KEYS = ("arm", "any", "expect", "margin")
_CONTROL_EXAMPLE = '[{arm = "pre-L24", expect = "trains"}]'
_CLAIM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # it names the report's plot files


class ClaimLoader:
    """A spec's claims (``[[claims]]``), their rules, parts and controls, checked with
    ``check``."""

    def __init__(self, check: Checks):
        self.check = check

    def claim(self, d: dict, path: str, arms: list[str]) -> Claim:
        kind = self.rule_kind(d, path)
        self.check.keys(d, path, (*_CLAIM_KEYS, *_params(kind)[1]), required=("name", "statement"))
        name = self.check.string(d["name"], key_at(path, "name"))
        if not _CLAIM_NAME.fullmatch(name) or len(name) > NAME_MAX:
            self.check.fail(
                key_at(path, "name"),
                f"expected letters, digits, '.', '_' or '-', at most {NAME_MAX} (it names "
                f"the report's plot files), got {show(name)}",
            )
        statement = self.check.string(d["statement"], key_at(path, "statement"))
        source = self.check.plain(d, "source", path)
        kw = {"plots": self.plots(d["plots"], key_at(path, "plots"))} if "plots" in d else {}
        rule = self.rule(kind, d, path, arms, {})
        readers = {  # an optional key after the rule -> (the Claim field, how its value is read)
            "controls": ("controls", lambda v, at: self.controls(v, at, arms, rule.seeds)),
            "not_testable": ("not_testable", self.check.string),
            "rate_check": ("rate_checks", self.rate_check),
        }
        kw |= {f: read(d[k], key_at(path, k)) for k, (f, read) in readers.items() if k in d}
        kw["extended"] = self.check.flag(d, "extended", path)  # false where it is not set
        return Claim(name, statement, source, rule, **kw)

    def rate_check(self, v: Any, path: str) -> tuple[RateCheck, ...]:
        """``true`` (the registered factors, ``rivals.CHECK``) or a list of factors of the
        shared learning rate, each > 0 and not 1; the study loader adds the arms."""
        if v is True:
            v = list(CHECK)
        if not isinstance(v, list) or not v:
            self.check.fail(path, f"expected true or a list of factors like {list(CHECK)}")
        factors = [self.check.number(x, key_at(path, i)) for i, x in enumerate(v)]
        for i, f in enumerate(factors):
            if not (0 < f < 1e3) or f == 1:
                self.check.fail(
                    key_at(path, i), f"expected a factor > 0, < 1000 and not 1, got {f}"
                )
        if len(set(factors)) != len(factors):
            self.check.fail(path, f"a factor appears twice: {factors}")
        return tuple(RateCheck(f, ()) for f in factors)

    def controls(self, v: Any, path: str, arms: list[str], seeds: int) -> tuple:
        """A claim's or a part's controls: each an arm name (it must train) or a table
        ``{arm, expect = "trains" | "fails", margin}``, or ``{any = [arms or globs], ...}``: one
        of those arms must, or ``{label, rule = "contrast", ...}``: a measured condition;
        decided on the claim's seeds."""
        if not isinstance(v, list) or not v:
            self.check.fail(
                path, f"expected a list of controls, e.g. {_CONTROL_EXAMPLE}, got {show(v)}"
            )
        out = []
        for i, c in enumerate(v):
            cpath = key_at(path, i)
            if isinstance(c, str):
                c = {"arm": c}
            if not isinstance(c, dict):
                self.check.fail(
                    cpath, f"expected an arm name or a table like {_CONTROL_EXAMPLE[1:-1]}"
                )
            if "rule" in c:  # a measured condition, e.g. "the decayed gains moved"
                out.append(self.rule_control(c, cpath, arms, seeds))
                continue
            self.check.keys(c, cpath, _CONTROL_KEYS)
            if ("arm" in c) == ("any" in c):
                self.check.fail(cpath, 'expected one of "arm" (an arm) or "any" (a list of arms)')
            key, read = ("arm", self.arm) if "arm" in c else ("any", self.sweep)
            arm = read(c[key], key_at(cpath, key), arms)
            expect = c.get("expect", "trains")
            if expect not in CONTROL_EXPECTS:
                wanted = " or ".join(map(show, CONTROL_EXPECTS))
                self.check.fail(key_at(cpath, "expect"), f"expected {wanted}, got {show(expect)}")
            margin = (
                self.check.number(c["margin"], key_at(cpath, "margin")) if "margin" in c else None
            )
            label, rule = control(arm, expect, seeds=seeds, margin=margin)
            if label in (x for x, _ in out):
                self.check.fail(cpath, f"control {label!r} appears twice")
            out.append((label, rule))
        return tuple(out)

    def rule_control(self, c: dict, path: str, arms: list[str], seeds: int) -> tuple[str, Any]:
        """A control stated as a contrast with a label: what the setting must show for the
        claim to be testable there (e.g. that a change moved what it acts on)."""
        kind = self.rule_kind(c, path)
        if kind not in control_kinds():
            kinds = " or ".join(show(k) for k in control_kinds())
            self.check.fail(key_at(path, "rule"), f"a control's rule is {kinds}, got {show(kind)}")
        self.check.keys(c, path, ("label", "rule", *_params(kind)[1]), required=("label",))
        label = self.check.string(c["label"], key_at(path, "label"))
        return label, self.rule(kind, c, path, arms, {"seeds": (seeds, path)})

    def plots(self, v: Any, path: str) -> tuple[str, ...]:
        from normlab.lab.study.report import PLOTS

        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self.check.fail(path, f"expected a list of plot names, got {show(v)}")
        for i, x in enumerate(v):
            if x not in PLOTS:
                self.check.fail(
                    key_at(path, i), f"unknown plot {x!r}; expected one of: {', '.join(PLOTS)}"
                )
        return tuple(v)

    def rule_kind(self, d: dict, path: str) -> str:
        if "rule" not in d:
            self.check.fail(key_at(path, "rule"), f"missing (required: one of {', '.join(RULES)})")
        kind = d["rule"]
        if not isinstance(kind, str) or kind not in RULES:
            known = ", ".join(RULES)
            self.check.fail(
                key_at(path, "rule"), f"unknown rule {show(kind)}; expected one of: {known}"
            )
        return kind

    def rule(self, kind: str, d: dict, path: str, arms: list[str], inherited: dict):
        """The rule ``kind`` from ``d``'s parameters, or from ``inherited`` (a compound claim's
        parameters, for its parts) where ``d`` does not set them; each checked as its dataclass
        field says (``metadata["spec"]``, else by its type)."""
        cls = RULES[kind]
        req, known = _params(kind)
        own = {k: (v, key_at(path, k)) for k, v in d.items() if k in known}
        params = {**{k: x for k, x in inherited.items() if k in known}, **own}
        for k in req:
            if k not in params:
                self.check.fail(key_at(path, k), "missing (required by the rule " + f"{kind!r})")
        get = {k: self.param(k, cls, v, p, arms) for k, (v, p) in params.items() if k != "parts"}
        self.distinct_arms(get, params, kind)
        if "parts" in params:  # a compound's parts (PARTS), once its own parameters pass
            get["parts"] = self.parts(*params["parts"], arms, params)
        fields = {f.metadata.get("key", f.name): f.name for f in dataclasses.fields(cls)}
        try:
            return cls(**{fields[k]: x for k, x in get.items() if k in fields})
        except (ValueError, TypeError) as e:
            self.check.fail(path, str(e))

    def parts(self, v: Any, path: str, arms: list[str], params: dict) -> tuple:
        """A compound claim's [[claims.parts]]: (label, rule) pairs, each part taking the
        parameters it does not set from its claim (``params``)."""
        parts: list[tuple[str, Any]] = []
        for i, part in enumerate(self.check.tables(v, path, "[[claims.parts]]")):
            ppath = key_at(path, i)
            pkind = self.rule_kind(part, ppath)
            if "parts" in _params(pkind)[0]:
                self.check.fail(key_at(ppath, "rule"), f"a part cannot itself be {pkind}")
            allowed = ("label", "rule", "controls", *_params(pkind)[1])
            self.check.keys(part, ppath, allowed, required=("label",))
            label = self.check.string(part["label"], key_at(ppath, "label"))
            if label in dict(parts):
                self.check.fail(key_at(ppath, "label"), f"label {label!r} appears twice")
            rule = self.rule(pkind, part, ppath, arms, params)  # its kind takes no parts
            if "controls" in part:
                cpath = key_at(ppath, "controls")
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
                self.check.fail(params[k][1], f"{show(v)} is also {seen[v]}: {why}")
            seen[v] = k
        if get.get("processes", 0) > MAX_SEEDS:  # timing processes run one after the other
            self.check.count(get["processes"], params["processes"][1])  # fails: more than allowed

    def param(self, key: str, cls: type, v: Any, path: str, arms: list[str]) -> Any:
        """Parameter ``key`` of rule ``cls``, checked as its field's ``metadata["spec"]`` says
        (none: by its type)."""
        f, hint = _field(key, cls)
        spec = f.metadata.get("spec")
        if spec == "count":
            return self.check.count(v, path)
        if spec == "delta":
            return self.check.number(v, path, low=0)
        if spec == "expect":
            e = EXPECT_ALIASES.get(v, v) if isinstance(v, str) else v
            if not isinstance(e, str) or e not in EXPECT:
                wanted = ", ".join(map(show, EXPECT))
                self.check.fail(path, f'expected one of {wanted} (or "!=0", "~0"), got {show(v)}')
            return e
        if spec == "name":
            return self.check.string(v, path)
        if spec == "choice":
            if not isinstance(v, str) or v not in f.metadata["choices"]:
                choices = ", ".join(f.metadata["choices"])
                self.check.fail(path, f"expected one of: {choices}; got {show(v)}")
            return v
        if spec == "arm":
            return self.arm(v, path, arms)
        if spec == "sweep":  # arm names or glob patterns, in LR order
            return self.sweep(v, path, arms)
        if spec == "terms":
            if not isinstance(v, list) or not v:
                self.check.fail(
                    path, "expected a list of [coef, arm, measure] terms, got " + show(v)
                )
            return tuple(self.term(t, key_at(path, i), arms) for i, t in enumerate(v))
        return self.check.coerced(hint, v, path)

    def sweep(self, v: Any, path: str, arms: list[str]) -> tuple[str, ...]:
        if isinstance(v, str):
            v = [v]
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            self.check.fail(path, f"expected arm names or glob patterns, got {show(v)}")
        out: list[str] = []
        for i, pattern in enumerate(v):
            hits = [a for a in arms if fnmatch.fnmatchcase(a, pattern)]
            if not hits:
                self.arm(pattern, key_at(path, i), arms)  # fails, with the near-miss hint
            out += [a for a in hits if a not in out]
        if len(out) < 2:
            self.check.fail(
                path, f"a sweep (or an 'any' control) needs at least two arms, got {out}"
            )
        return tuple(out)

    def arm(self, v: Any, path: str, arms: list[str]) -> str:
        if not isinstance(v, str) or v not in arms:
            hint = did_you_mean(v, arms, f"arms: {', '.join(arms)}")
            self.check.fail(path, f"{show(v)} is not an arm of this study; {hint}")
        return v

    def term(self, t: Any, path: str, arms: list[str]) -> tuple[float, str, str]:
        if not isinstance(t, list) or len(t) != 3:
            self.check.fail(path, f"expected a term [coef, arm, measure], got {show(t)}")
        coef = self.check.number(t[0], key_at(path, 0))
        arm = self.arm(t[1], key_at(path, 1), arms)
        if not isinstance(t[2], str) or t[2] not in MEASURES:
            hint = did_you_mean(t[2], MEASURES, f"expected one of: {', '.join(MEASURES)}")
            self.check.fail(key_at(path, 2), f"unknown measure {show(t[2])}; {hint}")
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
