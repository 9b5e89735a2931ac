"""What a reader needs to read a published number, said once for every page that shows one (the
answers and the results page): δ, the units, the bar, each preset's sizes and each article's
title. The sizes and the bar are read from the published data, never retyped. And how those
pages open (``page``)."""

from __future__ import annotations

from normlab.lab.kit import doc as d
from normlab.lab.study.published.coverage import Catalogue, Published, data_dirs

# Each unit a published effect is given in, in words; a page lists the ones it shows.
UNITS = {
    "nats/byte": "a difference in validation loss, natural log per byte (0.69 nats = 1 bit)",
    "nats/byte from the bar": "a final loss against the bar, past the claim's margin (trains: "
    "0.3 below it; fails: above it less 0.05); positive is the claim's side",
    "ln ratio": "ln of a ratio (gradient norms, logit scales): 0.18 is ×1.2, 0.69 is ×2",
    "log10 ratio": "log10 of a ratio of two errors or scales: 0.30 is ×2, 1 is ×10",
    "fraction of time saved": "RMSNorm's time saved, a fraction of LayerNorm's (0.05 is 5 %)",
    "cosine": "the cosine between the deep blocks' outputs (1: parallel)",
    "share": "a difference in the share of wrong gradient entries (0.01 is 1 %)",
    "LR sensitivity": "the mean over a learning-rate sweep of each rate's final loss above the "
    "sweep's best (nats/byte; a diverged run counts as a uniform guess)",
}


def unit(rule) -> str:
    """The unit of a claim's (or part's) rule, as the legend names it ("" where it has none)."""
    from normlab.lab.study.report import unit_of
    from normlab.lab.study.report.claim_text import unit as measure_unit

    if u := unit_of(rule):
        return u
    if rule.subject().startswith("LR sensitivity"):
        return "LR sensitivity"
    # several measures of one unit (a gap against a gap): that unit
    units = {measure_unit(w.split(":", 1)[0]) for w in rule.measure_words()}
    return units.pop() if len(units) == 1 else ""


def _each(shapes: list[dict], key: str) -> str:
    """The values of ``key`` over ``shapes``, ``/``-joined (a run of 0 steps measures at init:
    no training size)."""
    return "/".join(map(str, sorted({int(s[key]) for s in shapes if s.get(key)})))


def _sizes(pub: Published) -> list[tuple[d.Code, str]]:
    """Each published preset's sizes: widths, depths, steps, seeds, read from its claims."""
    out = []
    for preset, rows in pub.claims.items():
        shapes = [s for c in rows.values() for s in c.get("scope", ())]
        if not shapes:
            continue

        seeds = sorted({c["n"] for c in rows.values() if c.get("n")})
        n = f", n = {seeds[0]}–{seeds[-1]} seeds" if len(seeds) > 1 else ""
        d_, blocks_, steps = (_each(shapes, k) for k in ("d", "blocks", "steps"))
        out.append((d.Code(preset), f" d={d_}, {blocks_} blocks, {steps} steps{n}"))
    return out


def blocks(cat: Catalogue, pub: Published, units: set[str]) -> list[d.Block]:
    """The legend: δ, the bar, the units in ``units``, the presets, the articles."""
    # the bar H each published study decided with (the same corpus gives the same H)
    bar = next((h for _, doc in data_dirs(pub.docs) if (h := doc.get("plateau_h"))), None)
    items: list[d.Inline] = [
        (
            d.Strong("δ"),
            ": the smallest effect that matters, fixed before the runs; a verdict is read off "
            "the effect's 95 % interval over paired seeds: past δ, short of it, or straddling it",
        ),
        (
            d.Strong("the bar"),
            (f" (H = {bar:.3f} nats/byte)" if bar else "")
            + ": the loss of a model that learned only the bytes' frequencies; near it, a model "
            "learned nothing more",
        ),
    ]
    items += [(d.Strong(u), f": {UNITS[u]}") for u in UNITS if u in units]
    presets: list[d.Span] = [d.Strong("presets"), ": "]
    for i, (name, words) in enumerate(_sizes(pub)):
        presets += ["; " * bool(i), name, words]
    items.append(tuple(presets))
    items.append(
        (
            d.Strong("sizes"),
            ": d is the width, blocks the depth; op level: one norm call alone "
            "(numerics, bench); a named model: a real checkpoint (inspect)",
        )  # fmt: skip
    )
    articles: list[d.Span] = [d.Strong("articles"), ": "]
    for i, (key, info) in enumerate(cat.articles.items()):
        english = f" ({info['english']})" if info.get("english") else ""
        articles += ["; " * bool(i), d.Code(key), f" {info['title']}{english}"]
    items.append(tuple(articles))
    return [d.Items(tuple(items), cls="legend")]


def page(title: str, heading: str, lead: str, see: dict[str, str], tail: str) -> d.Document:
    """A page over the published data: its heading, then what it is (``lead``) and where to
    read more (``see``: words -> the page, ``;``-separated), ``tail`` after."""
    spans: list[d.Span] = [lead]
    for i, (words, href) in enumerate(see.items()):
        spans += [f"{'; ' * bool(i)}{words}: ", d.Link(href.partition("#")[0], href)]
    doc = d.Document(title)
    doc.add(d.Heading(1, heading), d.Paragraph((*spans, tail)))
    return doc
