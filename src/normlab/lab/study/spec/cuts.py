"""What a spec adds to or takes from its study beyond its arms and claims: the rate checks' arms
(the standard for rivals, ``normlab.lab.study.decide.rivals``) and ``only``, a study cut to
some of its claims."""

from __future__ import annotations

import dataclasses
from typing import Any

from normlab.lab.study.decide import Claim
from normlab.lab.study.decide.rules_compound import control_arms
from normlab.lab.study.spec.checks import Checks, did_you_mean, key_at, show
from normlab.lab.study.spec.design import Arm


def with_rate_arms(claim: Claim, runs: list[Arm], path: str, check: Checks) -> Claim:
    """``claim`` with its rate checks' arms: each of its arms at the shared rate times each
    factor, an arm of the spec where one has that very config (a sweep's point), else a new one
    (appended to ``runs``, named ``<arm>.lr<rate>``)."""
    if not claim.rate_checks:
        return claim
    by_name = {a.name: a for a in runs}
    own = control_arms(claim.rule, claim.controls)
    checks = []
    for rate in claim.rate_checks:
        pairs = []
        for name in own:
            cfg = by_name[name].config
            cfg = cfg.replace(lr=float(f"{cfg.lr * rate.factor:.6g}"))
            at = next((a for a in runs if a.config == cfg), None)
            if at is None:
                at = Arm(f"{name}.lr{cfg.lr:g}", cfg)
                if at.name in by_name:
                    check.fail(
                        key_at(path, "rate_check"),
                        f"arm {at.name!r} exists with another config than {name!r} at lr "
                        f"{cfg.lr:g}",
                    )
                runs.append(at)
                by_name[at.name] = at
            pairs.append((name, at.name))
        checks.append(dataclasses.replace(rate, arms=tuple(pairs)))
    return dataclasses.replace(claim, rate_checks=tuple(checks))


def only(v: Any, claims: list[Claim], check: Checks) -> list[Claim]:
    """The claims ``only`` names (a list of claim names), in the spec's order: the study cut to
    them (``--set 'only=["a", "b"]'`` runs a preset's claims a and b alone)."""
    names = [c.name for c in claims]
    if not isinstance(v, list) or not v or not all(isinstance(x, str) for x in v):
        check.fail("only", f"expected a non-empty list of claim names, got {show(v)}")
    for i, x in enumerate(v):
        if x not in names:
            hint = did_you_mean(x, names)
            check.fail(
                key_at("only", i), f"no claim {show(x)} in the spec" + f"; {hint}" * bool(hint)
            )
    return [c for c in claims if c.name in v]
