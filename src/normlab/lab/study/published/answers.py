"""Answers for a model builder: the choices one makes about a Transformer's norms (which norm,
where, a final norm, weight decay, precision, eps, BatchNorm, warmup, QK-norm), each answered
from the published verdicts of the statements it rests on (``answers.toml``: the choices, which
statements answer them and how each verdict reads), never saying more than those verdicts.

An answer has aspects; each rests on one statement (or some parts of its findings; or, beyond the
articles, on claims) and reads its headline as ``headline`` forms it, evidence at every size:

- **holds** / **does not hold**: the aspect's reading of that word, and the sizes it holds at;
- **depends on size** (or, an op-level finding against a model's, differs by level): each
  size's reading, with its size;
- **inconclusive**: "undecided", then each size's reading or "undecided" at it;
- **not testable here**: that, and why, at the largest size;
- a headline decided after its data was seen says *exploratory*; a statement with no headline
  says why (``coverage.NOT_DECIDED``).

Beside it stands the deciding number: from the evidence that tests the statement as stated and
is counted, at the largest size the lab ran it (a real model over a trained twin over an op),
the claim or finding that says that size's verdict, the most seeds first; for a compound one,
the part that says it. ``normlab study --coverage`` writes ``docs/answers.md`` (and its HTML)
and the README's first table (the block kind ``answers``) from it.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from normlab.lab.study.published import coverage, headline
from normlab.lab.study.published.compare import effects
from normlab.lab.study.published.coverage import Catalogue, Published, Statement, split_ref
from normlab.lab.study.published.headline import OP_LEVEL, Decision, Evidence
from normlab.lab.study.published.legend import unit as unit_of
from normlab.lab.study.published.replay import published_design
from normlab.lab.verdict import Word, signed

if sys.version_info >= (3, 11):
    import tomllib
else:  # the same parser, before it joined the standard library
    import tomli as tomllib

ANSWERS = "answers.toml"


@dataclass(frozen=True)
class Aspect:
    what: str
    holds: str
    does_not_hold: str
    statement: str = ""  # a statement's id
    parts: tuple[str, ...] = ()  # some parts of its findings
    claims: tuple[str, ...] = ()  # or claims beyond the articles

    def reading(self, word: str) -> str:
        """What the answer says where the verdict is ``word`` (a size's)."""
        said = {Word.HOLDS: self.holds, Word.DOES_NOT_HOLD: self.does_not_hold}
        if word in said:
            return f"{said[word]} — **{word}**"
        if word == Word.MIXED:
            return "some evidence holds, some does not — **mixed**"
        return f"**{word}**"


@dataclass(frozen=True)
class Choice:
    id: str
    choice: str
    aspects: tuple[Aspect, ...]


@cache
def load() -> tuple[Choice, ...]:
    """The choices shipped in the package, each checked against the statements."""
    text = resources.files("normlab.lab.study.published").joinpath(ANSWERS).read_text("utf-8")
    cat = coverage.load()
    out = []
    for c in tomllib.loads(text)["choices"]:
        aspects = []
        for a in c.pop("aspects"):
            a.update({k: tuple(a.get(k, ())) for k in ("parts", "claims")})
            aspect = Aspect(**a)
            _check(aspect, cat)
            aspects.append(aspect)
        out.append(Choice(c["id"], c["choice"], tuple(aspects)))
    return tuple(out)


def _check(a: Aspect, cat: Catalogue) -> None:
    """An aspect rests on a statement or on claims, never both; its parts are the statement's."""
    if bool(a.statement) == bool(a.claims):
        raise ValueError(f"{ANSWERS}: {a.what!r} rests on a statement or on claims, not both")
    s = cat.statement(a.statement)
    if a.statement and s is None:
        raise ValueError(f"{ANSWERS}: {a.what!r}: no statement {a.statement!r}")
    if a.parts and (not s.findings or (s.parts and not set(a.parts) <= set(s.parts))):
        raise ValueError(f"{ANSWERS}: {a.what!r}: parts {a.parts} are not {s.id}'s")


def designs(docs: Path) -> dict[str, dict]:
    """Per published preset, claim name -> the rule that decided it (parsed once a page), a
    later round's design over the preset's as ``coverage.published`` takes its rows."""
    out: dict[str, dict] = {}
    for where, data in coverage.data_dirs(docs):
        rules = {c.name: c.rule for c in published_design(docs, where.name).claims}
        out.setdefault(data["preset"], {}).update(rules)
    return out


# --------------------------------------------------------------------------------------------
# an aspect's decision and its deciding number


def statement_of(a: Aspect) -> Statement:
    """The statement an aspect reads: its own (with only its parts), or one made of its claims."""
    if a.claims:
        return Statement(f"claims:{','.join(a.claims)}", "", "", a.what, claims=a.claims)
    s = coverage.load().statement(a.statement)
    return dataclasses.replace(s, parts=a.parts) if a.parts else s


def decide(a: Aspect, pub: Published) -> Decision:
    """The aspect's headline: its statement's (``headline.status``), or, read on some parts of
    its findings or on claims, the same rule over that evidence (a statement's plan still
    marks it exploratory where it was fixed after the data)."""
    s = statement_of(a)
    if not (a.parts or a.claims):
        return headline.status(s, pub)
    found = headline.evidence(s, pub)
    if not found:
        return Decision("not-run" if a.claims else "pending")
    whole = coverage.load().statement(a.statement)
    return headline.decide(found, lambda: headline.plan_changed(whole, pub, found) if whole else "")


def size_key(size: str) -> tuple[int, int]:
    """How large a size is: its widest d, then its most blocks (an op-level finding: none)."""
    if size == OP_LEVEL:
        return (0, 0)
    widths = re.findall(r"d=(\d+(?:/\d+)*)", size)  # none: a CNN's (normlab vision)
    d = max(map(int, widths[0].split("/")), default=0) if widths else 0
    blocks = re.findall(r"L=(\d+(?:/\d+)*)|(\d+) blocks", size)
    n = max((int(x) for a, b in blocks for x in (a or b).split("/")), default=0)
    return (d, n)


def size_words(size: str) -> str:
    """``d=64, 24/6 blocks``; a real model by its name; ``op level``."""
    m = re.fullmatch(r"d=(\S+) L=(\S+)", size)
    if m:
        return f"d={m[1]}, {m[2]} blocks"
    return size if size == OP_LEVEL else size.split(" (")[0]


@dataclass(frozen=True)
class Number:
    """One published effect of a claim or a finding (or of one of its parts), in its unit."""

    part: str  # its label ("" for a claim's own effect)
    word: str  # its verdict
    text: str  # "+0.107 [+0.093, +0.120] nats/byte, n=5"
    n: int | None  # None: a finding's part published without one
    delta: float | None
    unit: str


@dataclass(frozen=True)
class Shown:
    """The deciding number: one claim's or finding's (or one of its parts') effect."""

    ref: str
    size: str
    number: Number
    why: str = ""  # why it was not testable here


def deciding(a: Aspect, pub: Published, designs: dict[str, dict]) -> Shown | None:
    """The number that decides ``a`` at the largest size it was tested at (module docstring):
    the one that says the evidence's verdict, else its first."""
    s = statement_of(a)
    e = strongest(headline.evidence(s, pub), pub)
    if e is None:
        return None
    if e.kind == "finding":
        found, why = finding_numbers(s, pub.finding(e.ref)), ""
    else:
        preset, name = split_ref(e.ref)
        c, rule = pub.claim(e.ref), designs[preset][name]
        found = claim_numbers(c, rule) or [
            Number("", c["verdict"], "no effect published", 0, None, unit_of(rule))
        ]
        why = untestable_why(c) if e.word == Word.NOT_TESTABLE else ""
    return Shown(e.ref, e.size, next((x for x in found if x.word == e.word), found[0]), why)


def strongest(found: list[Evidence], pub: Published) -> Evidence | None:
    """Of ``found``, the counted evidence (else any) at the largest size that says that size's
    verdict, the most seeds first."""
    pool = [e for e in found if e.counted] or found
    if not pool:
        return None
    top = max(size_key(e.size) for e in pool)
    at = [e for e in pool if size_key(e.size) == top]
    said = dict(headline.across_sizes(at)[1])
    return max(at, key=lambda e: (e.word == said.get(e.size, e.word), _n(e, pub)))


def _n(e: Evidence, pub: Published) -> int:
    entry = pub.claim(e.ref) if e.kind == "claim" else pub.finding(e.ref)
    return max([entry.get("n") or 0] + [p.get("n") or 0 for p in entry.get("parts") or []])


def _interval(effect, lo, hi, u: str) -> str:
    return f"{signed(effect)} [{signed(lo)}, {signed(hi)}]{' ' * bool(u)}{u}"


def claim_numbers(c: dict, rule) -> list[Number]:
    """A published claim's effect, or each part's of a compound one (``rule``: its design's)."""
    parts = dict(rule.parts())
    words = {p["part"]: p["verdict"] for p in c.get("parts") or []}
    out = []
    for label, est in effects(c).items():
        part = parts.get(label, rule)
        u = unit_of(part)
        text = f"{_interval(est.effect, est.lo, est.hi, u)}, n={est.n}"
        out.append(Number(label, words.get(label, c["verdict"]), text, est.n, part.delta, u))
    return out


def measure_unit(measure: str) -> str:
    """The unit of a finding part's measure."""
    heads = (("log10(", "log10 ratio"), ("ln(", "ln ratio"), ("W(", "share"))
    return next((unit for head, unit in heads if measure.startswith(head)), "")


def finding_numbers(s: Statement, f: dict) -> list[Number]:
    """A published finding's parts (the ones ``s`` is about), each in its measure's unit."""
    design = {q["label"]: q for q in f.get("design", {}).get("parts", [])}
    out = []
    for p in s.parts_of(f):
        q = design.get(p["part"], {})
        u = measure_unit(q.get("measure", ""))
        text = _interval(p.get("effect"), p.get("lo"), p.get("hi"), u)
        text += f", n={p['n']}" if "n" in p else ""
        out.append(Number(p["part"], p["verdict"], text, p.get("n"), q.get("delta"), u))
    return out


def untestable_why(c: dict) -> str:
    """Why a claim is not testable here, without its own result and its rule's page (the
    legend links it)."""
    return re.sub(r" \(docs/[^)\s]*\)", "", c["why"].split(" (its own result")[0])


# --------------------------------------------------------------------------------------------
# the answer in words


def _groups(sizes: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    """(word, its sizes in words) for each word the sizes say, in the sizes' order."""
    by: dict[str, list[str]] = {}
    for size, word in sizes:
        by.setdefault(word, []).append(size_words(size))
    return [(w, " and ".join(s)) for w, s in by.items()]


def answer(a: Aspect, dec: Decision, shown: Shown | None) -> str:
    """The aspect's answer (Markdown: its verdict words bold), never more than ``dec``."""
    if dec.status in (Word.HOLDS, Word.DOES_NOT_HOLD):
        text = a.reading(dec.status) + " at " + _groups(dec.sizes)[0][1]
    elif dec.status in (Word.DEPENDS, Word.MIXED, Word.INCONCLUSIVE):
        lead = {
            Word.DEPENDS: "**depends on size**",
            Word.MIXED: "**mixed**, op level against a model",
            Word.INCONCLUSIVE: "**undecided**",
        }[dec.status]
        text = f"{lead}: " + "; ".join(f"{a.reading(w)} at {at}" for w, at in _groups(dec.sizes))
    elif dec.status == Word.NOT_TESTABLE:
        where = f" at {size_words(shown.size)}: {shown.why}" if shown and shown.why else ""
        text = f"**{Word.NOT_TESTABLE}**{where}"
    else:
        text = f"not decided: {coverage.NOT_DECIDED[dec.status][0]}"
    if dec.exploratory:
        text += " (exploratory: decided after its data was seen)"
    return text
