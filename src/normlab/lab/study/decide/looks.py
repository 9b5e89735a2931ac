"""A sequential study decided look by look (``[sequential]``, ``normlab.lab.verdict.sequential``).

Each seeded claim of a study with a sequential design is looked at after ``n_1 < n_2 < …`` of
its seeds, up to its cap (its ``seeds``). At look k it is decided by its own rule — contrast,
compound with Holm, trimmed mean or median, controls, rate checks: ``Claim.decide`` — on the
runs of seed indices below ``n_k`` only, every interval a repeated one at that look's nominal
level (``Context.look``). It stops at the first look that **settles** it (``settled``); an open
claim's arms get the next batch. A look was *taken* when every arm the claim reads has a run of
that look's batch, so the same function decides a study while it runs (what to train next:
``needed``) and afterwards from its stored runs (``--redecide``): the verdicts are the same.
Runs keep their keys (seed index i is the same run whatever the design), so a study resumed,
extended, or run before with a fixed design reuses every run it has.

Timing claims (decided on the serial phase's processes, not on seeds) are decided once, as in a
fixed design.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from normlab.lab.study.decide import rivals
from normlab.lab.study.decide.claims import Claim, by_design
from normlab.lab.study.decide.stats import Context, Results
from normlab.lab.verdict import DECIDED, Verdict, Word
from normlab.lab.verdict.sequential import Look


@dataclass(frozen=True)
class Outcome:
    """A claim's verdict at the look it stopped at (or its last taken one), and the seeds its
    arms need now: that look's, or the next look's while the claim is open."""

    claim: Claim
    verdict: Verdict
    look: Look | None  # None: decided once (a timing claim, or a study without a design)
    need: int
    open: bool = False  # undecided with a look still to come


def _controls(v: Verdict) -> list[Verdict]:
    """Every control of ``v`` and of its parts."""
    return [c for _, c in v.controls] + [c for _, p in v.parts for c in _controls(p)]


def settled(v: Verdict) -> bool:
    """Whether more seeds could not change ``v``'s word: it holds or does not hold, or it is not
    testable here for a reason more seeds do not remove (its design, a rate check that decided
    the opposite, a control that does not hold). A claim not testable only because a control is
    still undecided stays open."""
    if v.status in DECIDED:
        return True
    if v.status != Word.NOT_TESTABLE:
        return False
    shown = [c.status for c in _controls(v)]
    return Word.INCONCLUSIVE not in shown or Word.DOES_NOT_HOLD in shown


def truncate(results: Results, n: int) -> Results:
    """``results`` with every arm's runs of seed index ``n`` and above left out."""
    return {a: {i: r for i, r in runs.items() if i < n} for a, runs in results.items()}


def taken(results: Results, claim: Claim, lo: int) -> bool:
    """Whether the look whose batch starts at seed index ``lo`` was run for ``claim``: every arm
    it reads has a run there or beyond."""
    return all(any(i >= lo for i in results.get(a, {})) for a in claim.arms)


def _by_design(study, claim: Claim) -> bool:
    """A claim its design leaves not testable here whatever the runs: one look is enough."""
    unchecked = rivals.standard(study, claim) == rivals.UNCHECKED
    return bool(claim.not_testable) or unchecked or study.without_interval(claim)


def decide_claim(study, claim: Claim, results: Results, ctx: Context) -> Outcome:
    """``claim`` decided look by look on ``results`` under ``study.sequential``: at the first
    look that settles it, else at its last taken look."""
    design = getattr(study, "sequential", None)  # a Study; tests pass stand-ins
    if design is None or claim.timed:
        v = by_design(study, claim, claim.decide(results, ctx))
        return Outcome(claim, v, None, 1 if claim.timed else claim.seeds)
    ns = design.looks(claim.seeds)
    if _by_design(study, claim):
        ns = ns[:1]
    starts = (0, *ns[:-1])  # where each look's batch begins
    last = max((j for j, lo in enumerate(starts) if taken(results, claim, lo)), default=-1)
    for j in range(max(last, 0) + 1):
        look = Look(design, claim.seeds, j)
        cut = dataclasses.replace(ctx, look=look)
        v = by_design(study, claim, claim.decide(truncate(results, ns[j]), cut))
        if settled(v):
            break
    still = not settled(v) and (last < 0 or j + 1 < len(ns))
    need = ns[0] if last < 0 else ns[j + 1] if still else ns[j]
    return Outcome(claim, with_look(v, look, settled(v)), look, need, still)


def with_look(v: Verdict, look: Look, stopped: bool) -> Verdict:
    """``v`` with the look it was decided at, in its why and its record."""
    record = {
        "look": look.k + 1,
        "looks": look.count,
        "n": look.n,
        "cap": look.cap,
        "level": look.level(),
        "spending": look.design.spending,
        "stopped": stopped,
    }
    return dataclasses.replace(v, why=f"{v.why} [{look.words()}]", sequential=record)


def decide_all(study, results: Results, plateau_h: float, timings: dict | None = None):
    """Every claim of ``study`` decided on ``results``: ``[(claim, verdict), ...]``; ``plateau_h``
    is H (``Corpus.unigram_val_xent()``: the validation bytes' unigram cross-entropy). A study
    with a sequential design is decided look by look, one without exactly as before: each
    claim once on all its runs."""
    return [(o.claim, o.verdict) for o in decide_looks(study, results, plateau_h, timings)]


def decide_looks(study, results: Results, plateau_h: float | None, timings=None) -> list[Outcome]:
    """Every claim of ``study`` decided as its design says (look by look under a sequential
    design, once otherwise)."""
    ctx = Context(plateau_h, timings or {})
    return [decide_claim(study, c, results, ctx) for c in study.claims]


def needed(study, outcomes: list[Outcome]) -> dict[str, int]:
    """The seeds each arm of ``study`` needs for its claims' current looks (an arm no claim
    reads: one)."""
    return {
        a.name: max([1, *(o.need for o in outcomes if a.name in o.claim.arms)]) for a in study.arms
    }
