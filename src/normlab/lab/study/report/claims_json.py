"""``DIR/claims.json``: the report's verdicts, effects, intervals and n, for programs; with each
claim's scope (the sizes it was tested at) and the family's error rates, which the report shows
too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from normlab.lab.kit.reading import ReadError, check_strings, read_json
from normlab.lab.kit.shapes import ANY, Int, Maybe, Num, check_shape
from normlab.lab.study.decide import Claim
from normlab.lab.study.report import claim_text
from normlab.lab.verdict import CLAIM_WORDS, LEVEL, Word
from normlab.lab.verdict.finding import CLAIM_WORD


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


def claims_json(study, verdicts, meta) -> dict[str, Any]:  # meta: run.study_json.StudyMeta
    return {
        "preset": study.name,
        "seed_block": meta.seed_block,
        "plateau_h": meta.plateau_h,
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


# What the readers of a claims.json (--compare, --size-seeds, --coverage and the published
# pages) read of it, to the leaves: a file from elsewhere is checked before it is read.
_OUTCOMES = ("diverged", "stalled", "bounded", "unpaired")
_SEEDS = {"n": Int(0), "*": Maybe(ANY)} | {f"{k}_seeds?": [Int(0)] for k in _OUTCOMES}
_ESTIMATE = {
    "verdict": CLAIM_WORD,
    "why?": str,
    **dict.fromkeys(("effect?", "lo?", "hi?", "mde?"), Num()),
    "n?": Int(0),
    "values?": [Num()],
    "means?": {"*": Maybe(Num())},
    "seed_outcomes?": _SEEDS,
    "controls?": [{"control": str, "verdict": CLAIM_WORD, "why": str, "seed_outcomes?": _SEEDS}],
}
_SCOPE = dict.fromkeys(("d", "blocks", "T", "B", "steps"), Int(0)) | {"init": str}
CLAIMS_SCHEMA = {
    "preset": str,
    "seed_block?": Int(0, 10**14),
    "plateau_h?": Num(),
    "claims": [
        {"name": str, **_ESTIMATE, "scope?": [_SCOPE], "parts?": [{"part": str, **_ESTIMATE}]}
    ],
}


def read_claims(path: Path, what: str | None = None) -> dict[str, Any]:
    """A ``claims.json`` read bounded (``normlab.lab.kit.reading``), its strings without control
    characters and its values of the types the readers take, to the leaves; a
    :class:`normlab.lab.kit.reading.ReadError` naming the file and the key otherwise."""
    what = what or str(path)
    doc = check_strings(read_json(path, what), what)
    try:
        return check_shape(doc, CLAIMS_SCHEMA, "")
    except ReadError as e:
        detail = str(e).removeprefix(": ")
        raise ReadError(f"{what}: not a study's claims.json ({detail})") from None
