"""``docs/answers.md`` (and its HTML twin) and the README's first table: one line per choice a
model builder makes, its answer read from the published verdicts (``answers``), the deciding
number beside it, and each statement it rests on with all its evidence below.

Written by ``normlab study --coverage``; the README's table is the block kind ``answers``
(``blocks``), the same rows rendered to Markdown.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from normlab.lab.kit import doc as d
from normlab.lab.study.published import answers, coverage, headline, legend
from normlab.lab.study.published.answers import Aspect, Choice, Shown
from normlab.lab.study.published.coverage import Catalogue, Published, split_ref
from normlab.lab.study.published.headline import Decision
from normlab.lab.verdict import Word

PAGE = "answers.md"


@dataclass(frozen=True)
class Read:
    """One aspect read from the data: its decision and deciding number."""

    aspect: Aspect
    decision: Decision
    shown: Shown | None


def read(docs: Path, pub: Published) -> list[tuple[Choice, list[Read]]]:
    """Every choice with each aspect read from the published data ``pub``."""
    designs = answers.designs(docs)
    return [
        (c, [Read(a, answers.decide(a, pub), answers.deciding(a, pub, designs)) for a in c.aspects])
        for c in answers.load()
    ]


def source(a: Aspect, cat: Catalogue, base: str) -> d.Link:
    """Where an aspect's statement stands on claims.md (its row), or its claims' report."""
    if a.statement:
        s = cat.statement(a.statement)
        return d.Link(f"{s.article} §{s.section}", f"{base}claims.md#{s.id}")
    preset = split_ref(a.claims[0])[0]
    return d.Link(f"{preset} study", base + cat.reports[preset]["report"])


def number(shown: Shown | None) -> str:
    """``paper `no-decay-on-norms`: +0.107 [...] nats/byte, n=5 (δ = 0.02), d=128, 6 blocks``."""
    if shown is None:
        return "nothing published"
    where, name = split_ref(shown.ref)
    x = shown.number
    part = f" ({x.part})" if x.part else ""
    delta = f" (δ = {x.delta:.3g})" if x.delta is not None else ""
    said = f", not decided on: {Word.NOT_TESTABLE}" if shown.why else f", {x.word}"
    return f"{where} `{name}`{part}: {x.text}{delta} at {answers.size_words(shown.size)}{said}"


HEADER = ("choice", "answer, from the published verdicts", "the deciding number (size, n)")


def table(read_: list[tuple[Choice, list]], cat: Catalogue, base: str, compact: bool) -> d.Table:
    """The answers, a row per choice, links relative to ``base`` (``""`` in docs/, ``docs/``
    above): its answer per aspect, each with its n and statement (``compact``: the README's),
    or beside it the deciding number (answers.md's)."""
    out = []
    for choice, reads in read_:
        said: list[d.Span] = []
        nums: list[d.Span] = []
        for i, r in enumerate(reads):
            gap = [d.Break()] if i else []
            text = answers.answer(r.aspect, r.decision, r.shown)
            said += [*gap, d.Strong(r.aspect.what), ": ", *d.from_markdown(text)]
            n = f"n={r.shown.number.n}; " if r.shown and r.shown.number.n else ""
            if compact:
                said += [f" ({n}", source(r.aspect, cat, base), ")"]
                continue
            nums += [*gap, f"{r.aspect.what}: ", *d.from_markdown(number(r.shown)), " ("]
            nums += [source(r.aspect, cat, base), ")"]
        link = d.Link(choice.choice, f"{base}{PAGE}#{choice.id}")
        out.append((link, tuple(said)) if compact else (link, tuple(said), tuple(nums)))
    # "answers": the choice column narrow (a question, not a statement)
    return d.Table(HEADER[:2] if compact else HEADER, tuple(out), cls="summary answers")


def _evidence(a: Aspect, pub: Published) -> list[d.Inline]:
    """Every claim and finding that tests the aspect's statement as stated, with its verdict."""
    out = []
    for e in headline.evidence(answers.statement_of(a), pub):
        counted = "" if e.counted else " (listed, not counted)"
        entry = pub.claim(e.ref) if e.kind == "claim" else pub.finding(e.ref)
        why = f": {entry['why']}" if e.kind == "claim" and not e.counted else ""
        where, name = split_ref(e.ref)
        size = answers.size_words(e.size)
        out.append(
            (f"{where} ", d.Code(name), f" at {size}: ", d.Strong(e.word), f"{counted}{why}")
        )
    return out


def _choice_blocks(choice: Choice, reads: list[Read], cat: Catalogue, pub: Published) -> list:
    out: list[d.Block] = [d.Heading(2, choice.choice, id=choice.id)]
    for r in reads:
        a = r.aspect
        text = answers.answer(a, r.decision, r.shown)
        out.append(d.Paragraph((d.Strong(a.what), ": ", *d.from_markdown(text))))
        rests = (
            ("Rests on ", source(a, cat, ""), ": ")
            + ((f"“{cat.statement(a.statement).statement}”",)
               if a.statement else (f"claims beyond the articles: {', '.join(a.claims)}",))
            + ((f" (its findings' parts {', '.join(a.parts)})",) if a.parts else ())
        )  # fmt: skip
        deciding = ("The deciding number: ", *d.from_markdown(number(r.shown)), ".")
        out.append(d.Items((rests, deciding, *_evidence(a, pub))))
    return out


def document(docs: Path) -> d.Document:
    cat = coverage.load()
    pub = Published.read(docs, cat)
    read_ = read(docs, pub)
    units = {r.shown.number.unit for _, reads in read_ for r in reads if r.shown}
    doc = legend.page(
        "Answers for a model builder",
        "Answers for a model builder",
        "The choices a model builder makes about normalization, each answered from the published "
        "verdicts of the articles' statements it rests on, with the deciding number: the claim or "
        "finding that tests the statement as stated, at the largest size the lab ran it. An "
        "answer says no more than those verdicts: where they are undecided, not testable here, "
        "exploratory or depend on size, it says so. ",
        {
            "Every statement with all its evidence": "claims.md",
            "every decided statement with what decided it": "results.md",
        },
        ". Generated by normlab study --coverage from answers.toml and the data.",
    )
    doc.add(
        table(read_, cat, "", compact=False),
        d.Heading(2, "How to read the numbers", id="legend"),
        *legend.blocks(cat, pub, units),
    )
    for choice, reads in read_:
        doc.add(*_choice_blocks(choice, reads, cat, pub))
    return doc
