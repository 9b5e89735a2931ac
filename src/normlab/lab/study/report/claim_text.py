"""A verdict in words: the one sentence of what a study saw for a claim (with the numbers that
matter, and for an undecided claim why and what would decide it), its rule in plain words, and
its scope, short.

Rules are read through the ``Rule`` protocol only (``parts()``, ``subject()``, ``expect``, ...):
each kind says its own words; ``rules_protocol.compound_parts`` is the one place that asks whether a
rule is made of parts.
"""

from __future__ import annotations

import math
import re
from typing import Any

from normlab.lab.study.decide import compound_parts
from normlab.lab.verdict import CLAIM_WORDS, EXPECT, MEDIAN, Word, signed


def _f(x: float) -> str:
    return signed(x).replace("-", "−")


def interval(est, shift: float = 0) -> str:
    """ "+0.201 [+0.089, +0.314]" (or why there is none), each number less ``shift``."""
    if est is None or est.effect is None:
        return "no interval"
    return f"{_f(est.effect - shift)} [{_f(est.lo - shift)}, {_f(est.hi - shift)}]"


def effect_text(est, rule, u: str = "") -> str:
    """``interval(est)`` with its unit ``u``; for a rule with a margin folded into v
    (``rule.offset()``: "at most 0.03 worse" is v = 0.03 + a − b), the difference and the margin
    apart: "difference −0.000 [−0.012, +0.011] nats/byte, margin 0.03", never the sum unlabelled."""
    m = rule.offset()
    if not m or est is None or est.effect is None:
        return f"{interval(est)}{u}"
    return f"difference {interval(est, m)}{u}, margin {m:g}{u}"


def _why_undecided(v, rule) -> str:
    """Why a rule's verdict is inconclusive, and what would decide it, in words."""
    est, delta = v.estimate, rule.delta
    if "not after Holm" in (v.correction or ""):
        return "reached alone at 95 % but not after Holm's correction across the parts"
    if est is None or est.effect is None or est.n < 2:
        n = est.n if est else 0
        return f"no interval on n={n} (too few seeds, or a measure undefined in every run)"
    units = rule.unit
    if est.mde is not None and est.mde > delta and delta > 0:
        # the seeds at which the detectable effect would reach δ, scaled as 1/√n (an estimate)
        need = math.ceil(est.n * (est.mde / delta) ** 2)
        more = f"about {need:,} {units}" if need <= 1000 else f"over 1,000 {units}"
        mde, d = rule.sizes(est.mde, delta)
        return f"this n detects only {mde} against δ={d}: {more} would decide it"
    if est.lo > 0 or est.hi < 0:
        return f"clear of 0, but the interval spans δ={delta:.3g}; more {units} would narrow it"
    if est.lo <= 0 <= est.hi and rule.offset():
        return f"the interval spans {_margin(rule)}, the margin; more {units} would decide it"
    if est.lo <= 0 <= est.hi:
        return f"the interval spans 0 and reaches past ±δ={delta:.3g}; more {units} would decide it"
    return f"the interval spans δ={delta:.3g}; more {units} would narrow it"


def _decision(v, rule) -> str:
    """The verdict of one rule against its δ, in words."""
    est, delta, expect = v.estimate, rule.delta, rule.expect
    if _unbounded(est):
        return f"n={est.n}: no interval"
    if v.status == Word.INCONCLUSIVE:
        return _why_undecided(v, rule)
    if v.status == Word.NOT_TESTABLE:
        return "not testable here"
    if est is None or est.effect is None:
        return v.status
    d = f"{delta:.3g}"
    lo, hi = (-est.hi, -est.lo) if expect == "<0" else (est.lo, est.hi)
    if expect in ("≈0", "≠0"):  # holding means inside ±δ for ≈0, outside it for ≠0
        inside = (v.status == Word.HOLDS) == (expect == "≈0")
        return f"inside ±{d}" if inside else f"wholly outside ±{d}"
    sign = "−" if expect == "<0" else ""
    if rule.offset() and not delta and expect in (">0", "<0"):
        return _margin_decision(v, rule)
    if v.status == Word.HOLDS:
        return f"{'below' if sign else 'above'} {sign}δ={sign}{d}" if delta else "holds"
    if hi < 0:
        return "the other sign"
    if -delta < lo and delta:
        return f"inside ±{d}: no difference that matters"
    return f"{'above' if sign else 'below'} {sign}δ={sign}{d}"


def _margin_decision(v, rule) -> str:
    """A margin rule's verdict on the difference's scale, where v = 0 is the difference at
    minus the margin (``effect_text`` shows the difference)."""
    holds = v.status == Word.HOLDS
    above = holds == (rule.expect == ">0")
    where = f"{'above' if above else 'below'} {_margin(rule)}"
    return f"{where}: {'within' if holds else 'past'} the margin"


def _margin(rule) -> str:
    """Where v = 0 falls on the difference's scale: minus the margin ("−0.03")."""
    return f"{-rule.offset():g}".replace("-", "−")


def unit(measure: str) -> str:
    """The unit of a measure's values, named beside every effect."""
    if measure.startswith("log_"):
        return "ln ratio"
    if any(k in measure for k in ("loss", "gap", "shift")):
        return "nats/byte"
    return {"norm_weight_mean": "gain", "deep_cos_end": "cosine"}.get(measure, "")


def unit_of(rule) -> str:
    """The unit of a rule's v, read through the ``Rule`` protocol ("" where it has none)."""
    if rule.timed:
        return "fraction of time saved"
    if rule.threshold(None) is not None:  # one term against the plateau bar H
        return "nats/byte from the bar"
    measures = [w.split(":", 1)[0] for w in rule.measure_words()]
    return unit(measures[0]) if len(measures) == 1 else ""


def part_text(label: str, rule, v, h: float | None) -> str:
    """One rule's result in a phrase: the numbers and what they mean."""
    th = rule.threshold(h)
    est = v.estimate
    if th and est is not None and est.values:
        arm, m, coef, bar = th
        mean = v.means.get(f"{m}[{arm}]")
        side = "above" if coef > 0 else "below"
        k = sum(x > 0 for x in est.values)
        at = f"ends at {mean:.3f}" if mean is not None else "has no final value"
        bar_s = f"the bar {bar:.3f}" if bar is not None else "the bar"
        out = f"{arm} {at} ({side} {bar_s} in {k} of {len(est.values)} seeds)"
        return (
            out if v.status in (Word.HOLDS, Word.DOES_NOT_HOLD) else f"{out} ({_decision(v, rule)})"
        )
    own = rule.result_words(est)
    if own is not None:
        return f"{own}; {_decision(v, rule)}"
    name = label or rule.subject()
    n = f", n={est.n}" if est is not None else ""
    median = "median " if rule.trim >= MEDIAN else ""  # the effect is not a mean: say so
    u = unit_of(rule) if est is not None and est.effect is not None else ""
    u = f" {u}" if u else ""
    return f"{name}: {median}{effect_text(est, rule, u)}{n}, {_decision(v, rule)}"


def sentence(claim, v, h: float | None) -> str:
    """What the study saw for ``claim``, in one sentence with the numbers that matter."""
    out = _seen(claim, v, h)
    if v.status != Word.NOT_TESTABLE:
        return out
    bad = next(((label, c) for label, c in v.controls if c.status != Word.HOLDS), None)
    if bad:
        label, c = bad
        seen = _control_text(dict(claim.controls).get(label), c, h)
        return (
            f"The control '{label}' did not hold: {seen}. This setting cannot show the "
            "claim; one where the control holds would decide it."
        )
    own = v.parts if compound_parts(claim.rule) else [("", v)]
    unbounded = [e.n for _, pv in own if _unbounded(e := pv.estimate)]
    if unbounded:  # claims.by_design
        return (
            f"{out} With n={min(unbounded)} no interval exists: this study cannot decide the "
            "claim whatever its runs show; more seeds would."
        )
    return out


def _unbounded(est) -> bool:
    return est is not None and est.effect is not None and not math.isfinite(est.hi - est.lo)


def _control_text(rule, v, h: float | None) -> str:
    """What a control showed: its numbers (each arm's, for "one of these arms trains")."""
    if rule is None:
        return v.status
    c = compound_parts(rule)
    if c is None:
        return part_text("", rule, v, h)
    return "; ".join(part_text("", r, pv, h) for (_, r), (_, pv) in zip(c[0], v.parts, strict=True))


def _seen(claim, v, h: float | None) -> str:
    c = compound_parts(claim.rule)
    if c is None:
        return part_text("", claim.rule, v, h) + "."
    parts, some = c
    rows = [(label, rule, pv) for (label, rule), (_, pv) in zip(parts, v.parts, strict=True)]
    # the parts that made the verdict: the ones that agree with it, the undecided ones
    # otherwise; all of them where every part had to hold
    key = {
        Word.HOLDS: {Word.HOLDS} if some else set(CLAIM_WORDS),
        Word.DOES_NOT_HOLD: {Word.DOES_NOT_HOLD},
    }.get(v.status, {Word.INCONCLUSIVE, Word.NOT_TESTABLE})
    shown = [r for r in rows if r[2].status in key]
    rest = [r for r in rows if r not in shown]
    limit = 3
    texts = [part_text(label, rule, pv, h) for label, rule, pv in shown[:limit]]
    if len(shown) > limit:
        texts.append(f"likewise {', '.join(label for label, _, _ in shown[limit:])}")
    out = "; ".join(texts)
    if rest:
        groups: dict[str, list[str]] = {}
        for label, _, pv in rest:
            groups.setdefault(pv.status, []).append(label)
        said = "; ".join(f"{', '.join(labels)}: {s}" for s, labels in groups.items())
        out += f" (other parts — {said})"
    return out + "."


# How a compound claim's parts combine, by whether one part holding suffices (``any_of``).
COMBINED = {
    False: " The claim holds iff every part holds; it does not hold iff some part does not, "
    "after Holm's correction across the parts.",
    True: " The claim holds iff some part holds after Holm's correction across the parts; it "
    "does not hold iff every part does not.",
}


def rule_words(claim) -> tuple[list[str], str]:
    """The claim's rule in plain words: one line per part (its v), and the decision."""
    c = compound_parts(claim.rule)
    rules = claim.rule.parts()
    lines = [(f"[{label}] " if label else "") + "v = " + r.formula_words() for label, r in rules]
    measures = list(dict.fromkeys(m for _, r in rules for m in r.measure_words()))
    expects = {r.expect for _, r in rules}
    deltas = ", ".join(dict.fromkeys(f"{r.delta:.3g}" for _, r in rules))
    decision = "; ".join(EXPECT[e] for e in sorted(expects))
    text = f"Measures: {'; '.join(measures)}. Each v: {decision} (δ = {deltas})."
    text += next((w for _, r in rules if (w := r.statistic_words())), "")
    if c is not None:
        text += COMBINED[c[1]]
    controls = [label for label, _ in claim.controls]
    controls += [label for _, r in rules for label, _ in r.controls]
    if controls:
        names = ", ".join(f"'{c}'" for c in dict.fromkeys(controls))
        text += f" Controls {names} must hold, else the claim is not testable here."
    return lines, text


def tokens(n: int) -> str:
    return f"{n / 1e6:.3g} M" if n >= 1e6 else f"{n / 1e3:.3g} K" if n >= 1e3 else str(n)


def short_scope(shapes: list[dict[str, Any]]) -> str:
    """ "d=64, 6/24 blocks, 154 K tokens": a claim's sizes in one short phrase."""

    def alts(key: str, fmt=str) -> str:
        return "/".join(fmt(x) for x in sorted({s[key] for s in shapes}))

    trained = [s for s in shapes if s["steps"]]
    seen = "/".join(tokens(n) for n in sorted({s["tokens"] for s in trained})) + " tokens"
    if not trained:
        seen = "at init"
    elif len(trained) < len(shapes):
        seen = f"at init and {seen}"
    return f"d={alts('d')}, {alts('blocks')} blocks, {seen}"


def compact_size(shapes: list[dict[str, Any]]) -> str:
    """A claim's shapes in words, the block counts merged where nothing else differs:
    "d=64 L=6/12/24/48 T=64 B=16 0 steps (0 tokens) init=xavier"."""
    groups: dict[tuple, list[int]] = {}
    for s in shapes:
        key = (s["d"], s["T"], s["B"], s["steps"], s["tokens"], s["init"])
        groups.setdefault(key, []).append(s["blocks"])
    return "; ".join(
        f"d={dim} L={'/'.join(map(str, sorted(blocks)))} T={t} B={b} {steps} steps "
        f"({tokens(n)} tokens) init={init}"
        for (dim, t, b, steps, n, init), blocks in groups.items()
    )


SHORT_STATEMENT = 100  # characters: one line of the report's first table at 1280 px


def short_statement(text: str, limit: int = SHORT_STATEMENT) -> str:
    """A statement's first sentence, cut at a word to ``limit`` characters ("…" where cut):
    the report's first table keeps each claim to one line, its section has the whole."""
    text = " ".join(text.split())
    # a sentence ends at a full stop before a capital ("et al. 2020" goes on)
    first = re.split(r"\.\s+(?=[A-Z])", text, maxsplit=1)[0].removesuffix(".")
    if len(first) <= limit:
        return first
    return first[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"


def short_source(source: str) -> str:
    """ "Article 003" of "Article 003 (BatchNorm/LayerNorm/RMSNorm)"."""
    return source.split(" (", 1)[0]


# The words a report and docs/study.md use, each said once: (term, meaning); the report renders
# them as its glossary, and the docs' glossary is the same list
# (tests/lab/study/published/test_results.py).
GLOSSARY = (
    (
        "seed",
        "one training run's random draws (data order, init); seed i gives every arm the same "
        "draws where the shapes agree, so arms are compared seed by seed (paired).",
    ),
    (
        "seed block",
        "the seeds a study runs, `--seed S` picks block S (disjoint from every other block), "
        "so a study can be repeated on seeds that did not shape its design.",
    ),
    (
        "n",
        "how many paired seeds (or, for a timing claim, timing processes) an effect is "
        "estimated from.",
    ),
    ("interval", "the 95 % confidence interval of the effect; every verdict is read off it."),
    (
        "δ",
        "the smallest effect that matters, fixed in the spec before the runs (0.02 nats/byte "
        "for quality, 5 % for time, ln 1.2 for gradient ratios, 0 for thresholds).",
    ),
    (
        "median, trimmed mean",
        "statistics a rule may choose before its runs where a few seeds blow up: the 20 % "
        "trimmed mean with Yuen's interval, or the median with its distribution-free interval"
        " (6 seeds at least).",
    ),
    (
        "Holm",
        "the step-down correction across a compound claim's parts (or a finding's), so that "
        '"some part does not hold" is wrong by chance at most 5 % of the time.',
    ),
    (
        "not testable here",
        "no outcome of these runs could decide the claim, for one of two reasons: a control "
        "(a recipe that must train in the same setting) did not show what it must, or the "
        "study runs too few seeds for any interval (one; a median under 6).",
    ),
    (
        "inconclusive",
        "the interval straddles an edge of ±δ; more seeds of the same design could decide it.",
    ),
)
