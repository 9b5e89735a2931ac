"""``DIR/claims.json``: the report's verdicts, effects, intervals and n, for programs; with each
claim's scope (the sizes it was tested at) and the family's error rates, which the report shows
too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from normlab.lab.kit.io import write_file
from normlab.lab.study.decide import Claim
from normlab.lab.study.report import claim_text
from normlab.lab.verdict import CLAIM_WORDS, LEVEL, Word


def scope(study, claim: Claim) -> list[dict[str, Any]]:
    """The sizes a claim was tested at, one entry per distinct shape of its arms (a verdict holds
    at these sizes, not beyond): width, blocks, T, B, steps, tokens seen = steps × B × T (the
    planned budget: a stalled run stops earlier), init."""
    configs = {r.name: r.config for r in study.arms}
    shapes: dict[tuple, dict[str, Any]] = {}
    for arm in claim.arms:
        c = configs[arm]
        m = c.model
        shape = {
            "d": m.dim,
            "blocks": m.n_layers,
            "T": c.seq_len,
            "B": c.batch_size,
            "steps": c.steps,
            "tokens": c.steps * c.batch_size * c.seq_len,
            "init": m.init,
        }
        shapes.setdefault(tuple(shape.values()), {**shape, "arms": []})["arms"].append(arm)
    return list(shapes.values())


def size(study, claim: Claim) -> str:
    """The model sizes a claim was tested at: its arms' distinct shapes, in words."""
    return "; ".join(claim_text.compact_size([s]) for s in scope(study, claim))


def family(verdicts) -> dict[str, Any]:
    """How many claims were decided, at what error rate, within and across claims."""
    n = len(verdicts)
    counts = {s: sum(v.status == s for _, v in verdicts) for s in CLAIM_WORDS}
    held, failed = counts[Word.HOLDS], counts[Word.DOES_NOT_HOLD]
    alpha = 1 - LEVEL
    text = (
        f"{n} claims: {held} hold, {failed} do not hold, {counts[Word.INCONCLUSIVE]} "
        f"inconclusive, {counts[Word.NOT_TESTABLE]} not testable here. Each claim is decided at "
        f"{LEVEL:.0%}: the chance that it is called 'holds', or 'does not hold', when that is "
        f"false is at most {alpha:.0%} (within a compound claim family-wise over its parts, by "
        f"Holm's step-down; a claim's controls must hold as well). Across the {n} claims there "
        f"is no correction: by chance alone, up to {alpha * n:.2g} of them (n × {alpha:.0%}) "
        "may be decided wrongly."
    )
    return {
        "claims": n,
        "counts": counts,
        "level": LEVEL,
        "within_claim": f"family-wise {alpha:.0%} (Holm across the parts of a compound claim)",
        "across_claims": "no correction",
        "expected_false_decisions_at_most": alpha * n,
        "text": text,
    }


def claims_json(study, verdicts, meta: dict) -> dict[str, Any]:
    return {
        "preset": study.name,
        "seed_block": meta.get("seed_block", 0),
        "plateau_h": meta.get("plateau_h"),
        "family": family(verdicts),
        "claims": [
            {
                "name": c.name,
                "statement": c.statement,
                "source": c.source,
                "rule": c.describe(),
                "seeds": c.seeds,
                "size": size(study, c),
                "scope": scope(study, c),
                **v.to_dict(),
            }
            for c, v in verdicts
        ],
    }


def write_claims(out: Path, study, verdicts, meta: dict) -> None:
    claims = claims_json(study, verdicts, meta)
    write_file(out / "claims.json", json.dumps(claims, indent=1, ensure_ascii=False))
