"""A claim's design as data, and its fingerprint: what decides the claim (its rule with every
part, measure, δ, expect, statistic and seed count, its controls, rate checks and ``not_testable``,
the configs of the arms it reads, and the study's sequential design where it has one), so that a
design changed after its data was produced is seen (``normlab.lab.study.published.registry``).
Its words (statement, source, plots) are not part of it: rewording a claim decides nothing
differently; nor is whether a preset runs it by default (``extended``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from enum import Enum
from typing import Any

# A claim's fields that say how it reads or when it runs, not what decides it.
NOT_DESIGN = ("statement", "source", "plots", "extended")

# Config fields added after designs were first registered, with the value every earlier design
# had: left out of a design at that value, so adding a field changes no registered fingerprint
# (the run keys leave every default out for the same reason: ``run.store.run_key``).
ADDED: dict[str, dict[str, Any]] = {"model": {"deepnorm_alpha": None}}


def canonical(obj: Any) -> Any:
    """``obj`` as JSON-ready data that two equal designs share: dataclasses as ``{kind: fields}``
    (class attributes a kind fixes, such as its ``TARGET``, come with its kind's name), tuples
    as lists, floats as their shortest repr (so 0.1 and 0.1000000001 differ, 1 and 1.0 agree)."""
    if isinstance(obj, Enum):
        return obj.value
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        fields = {f.name: canonical(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        return {type(obj).__name__: fields}
    if hasattr(obj, "rule") and hasattr(obj, "controls"):  # a compound's part with controls
        return {"Controlled": {"rule": canonical(obj.rule), "controls": canonical(obj.controls)}}
    if isinstance(obj, dict):
        return {str(k): canonical(v) for k, v in sorted(obj.items())}
    if isinstance(obj, list | tuple):
        return [canonical(x) for x in obj]
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return repr(obj)
        return int(obj) if obj == int(obj) else obj
    return obj


def claim_design(study, claim) -> dict[str, Any]:
    """What decides ``claim`` of ``study``: the claim without its words, each arm it reads
    (rate checks' arms included) as its config without the seed (the seed block is the data's),
    and the study's sequential design where it has one (when the claim stops, at which levels)."""
    kept = {f.name: getattr(claim, f.name) for f in dataclasses.fields(claim)}
    own = canonical({k: v for k, v in kept.items() if k not in NOT_DESIGN})
    configs = {a.name: a.config for a in study.arms}
    arms = {name: canonical(_as_designed(configs[name])) for name in claim.arms}
    seq = getattr(study, "sequential", None)
    return {"claim": own, "arms": arms} | ({"sequential": canonical(seq)} if seq else {})


def _as_designed(cfg) -> dict[str, Any]:
    """``cfg`` (a ``TrainConfig``) as a design holds it: its ``to_dict()`` without the seed (the
    seed block is the data's) nor the ``ADDED`` fields at their old value."""
    out = {k: v for k, v in cfg.to_dict().items() if k != "seed"}
    for table, old in ADDED.items():
        if isinstance(out.get(table), dict):
            out[table] = {k: v for k, v in out[table].items() if k not in old or v != old[k]}
    return out


def fingerprint(design: Any) -> str:
    """A short hash of ``design`` (canonical JSON, keys sorted): equal designs, equal prints."""
    text = json.dumps(canonical(design), sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
