"""What the lab found, answers first: ``docs/results.md`` (and its HTML twin), every statement
of the articles the lab tests, in plain words, with its verdict, what was seen and at what size,
and one figure of every decided claim (``img/results-forest.png``: each effect and interval
against its ±δ band, grouped by article section, coloured by verdict).

Built by ``normlab study --coverage`` from the same published data as ``claims.md``
(``coverage``), never retyped; the tests fail when the page is stale.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from normlab.lab.kit import doc as d
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import hold, sub_dir, write_file
from normlab.lab.study.decide import rules_of
from normlab.lab.study.published import claims_page, coverage, headline, pages
from normlab.lab.study.published.compare import effects
from normlab.lab.study.published.replay import published_design
from normlab.lab.study.report import COLORS, badge, unit_of
from normlab.lab.verdict import DECIDED, signed

FOREST = "img/results-forest.png"


@dataclass(frozen=True)
class Effect:
    """One decided claim's (or part's) effect for the forest plot."""

    label: str  # "quick post-ln-fails-deep / post-L24 fails"
    group: str  # "000 §5.3"
    effect: float
    lo: float
    hi: float
    delta: float
    unit: str
    word: str
    sign: int = 1  # −1 for a claim that expects a negative effect: drawn in its direction


def _section_of(cat) -> dict[str, str]:
    """``"<preset>:<claim>"`` -> the article section of the first statement naming it."""
    out: dict[str, str] = {}
    for s in cat.statements:
        for ref in s.claims + s.related:
            out.setdefault(ref, f"{s.article} §{s.section}")
    return out


def _designs(docs: Path, pub) -> dict[str, dict]:
    """Per published preset, claim name -> the rule that decided it (parsed once a page), a
    later round's design over the preset's as ``coverage.published`` takes its rows."""
    out: dict[str, dict] = {}
    for where, data in coverage.data_dirs(docs):
        rules = {c.name: c.rule for c in published_design(docs, where.name).claims}
        out.setdefault(data["preset"], {}).update(rules)
    return out


def forest_effects(docs: Path) -> list[Effect]:
    """Every decided claim's effect (a compound's: each part's), with its δ and unit."""
    cat = coverage.load()
    pub = coverage.Published.read(docs, cat)
    return _effects(cat, pub, _designs(docs, pub))


def _effects(cat, pub, designs: dict[str, dict]) -> list[Effect]:
    sections = _section_of(cat)
    out = []
    for preset, claims in pub.claims.items():
        rules = designs[preset]
        for name, c in claims.items():
            if c["verdict"] not in DECIDED or name not in rules:
                continue
            parts = dict(rules_of(rules[name]))
            words = {p["part"]: p["verdict"] for p in c.get("parts") or []}
            for label, est in effects(c).items():
                rule = parts.get(label, rules[name])
                shown = f"{preset} {name}" + (f" / {label}" if label else "")
                group = sections.get(f"{preset}:{name}", "beyond the articles")
                word = words.get(label, c["verdict"])
                u, sign = unit_of(rule), -1 if rule.expect == "<0" else 1
                lo, hi = sorted((sign * est.lo, sign * est.hi))
                e = Effect(shown, group, sign * est.effect, lo, hi, rule.delta, u, word, sign)
                out.append(e)
    return sorted(out, key=lambda e: (e.group, e.label))


CLIP = 10.0  # the δ-scaled panel's half-width: effects past it are drawn at the edge, marked


def _digits(group: str) -> str:
    """Article 003's sections are Chinese numerals: the plot's font has no CJK glyphs."""
    nums = "一二三四五六七八九"
    out, head = group.split("§")[0], group.partition("§")[2]
    sec, dot, rest = head.partition(".")
    if sec and all(c in nums + "十" for c in sec):
        tens, _, ones = sec.rpartition("十") if "十" in sec else ("", "", sec)
        value = (nums.index(tens) + 1 if tens else 1) * 10 * ("十" in sec)
        value += nums.index(ones) + 1 if ones else 0
        head = f"{value}{dot}{rest}"
    return f"{out}§{head}" if "§" in group else group


def forest_png(items: list[Effect]) -> bytes:
    """Two panels: effects in units of their own δ (the band ±1 every such rule is decided
    against, clipped at ±CLIP), and the threshold rules' values against their bar (δ = 0)."""
    from matplotlib.figure import Figure

    from normlab.lab.kit.render import png

    banded = [e for e in items if e.delta > 0]
    bars = [e for e in items if e.delta == 0]
    heights = [max(len(banded), 1), max(len(bars), 1)]
    fig = Figure(figsize=(7.6, 1.6 + 0.17 * sum(heights)))
    top, bottom = fig.subplots(2, 1, gridspec_kw={"height_ratios": heights})
    panels = (
        (top, banded, True, "effect in the claim's direction, in units of its δ (grey: ±δ)"),
        (bottom, bars, False, "threshold claims: v against the plateau bar, nats/byte (0 = bar)"),
    )
    for ax, group, scaled, xlabel in panels:
        for i, e in enumerate(group):
            s, color = (e.delta if scaled else 1.0), COLORS.get(e.word, "#57606a")
            lim = CLIP if scaled else math.inf
            lo, hi, x = (max(min(v / s, lim), -lim) for v in (e.lo, e.hi, e.effect))
            ax.plot([lo, hi], [i, i], color=color, lw=2, solid_capstyle="butt")
            ax.plot([x], [i], "o", color=color, ms=4)
            for end, raw in ((lo, e.lo / s), (hi, e.hi / s)):
                if abs(raw) > lim:  # beyond the panel: an arrowhead at its edge
                    ax.plot([end], [i], ">" if end > 0 else "<", color=color, ms=5)
        if scaled:
            ax.axvspan(-1, 1, color="#d0d7de", alpha=0.6, lw=0)
            ax.set_xlim(-CLIP - 0.6, CLIP + 0.6)
        ax.axvline(0, color="k", lw=0.6)
        labels = [f"{_digits(e.group)}  {e.label}" for e in group]
        ax.set_yticks(range(len(group)), labels, fontsize=7)
        ax.set_ylim(len(group) - 0.5, -0.5)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    top.set_title(
        "every decided claim (95 % intervals): green holds, red does not hold; of a compound "
        "claim's parts, amber inconclusive, grey not testable here",
        fontsize=8,
    )
    return png(fig)


# --------------------------------------------------------------------------------------------
# the page


def _seen(s, pub, designs: dict[str, dict]) -> str:
    """What was seen, short: the first claim's (or finding's) effect with its unit and size."""
    for preset, name in map(coverage.split_ref, s.claims):
        c = pub.claims.get(preset, {}).get(name)
        if c is None or not effects(c):
            continue
        rules = designs[preset]
        label, est = next(iter(effects(c).items()))
        rule = dict(rules_of(rules[name])).get(label, rules[name])
        part = f" ({label})" if label else ""
        size = coverage.scope(c).split(" T=")[0]
        interval = f"{signed(est.effect)} [{signed(est.lo)}, {signed(est.hi)}]"
        u = f" {u}" if (u := unit_of(rule)) else ""
        return f"{preset}{part}: {interval}{u}, n={est.n}, at {size}"
    for ref in s.findings:
        f = pub.finding(ref) or {"parts": []}
        parts = [p for p in f["parts"] if (not s.parts or p["part"] in s.parts) and "n" in p]
        if parts:
            p, k = parts[0], len(parts) - 1
            more = f" (+{k} more part{'s' if k > 1 else ''})" if k else ""
            interval = f"{signed(p['effect'])} [{signed(p.get('lo'))}, {signed(p.get('hi'))}]"
            return f"{ref.partition(':')[0]} ({p['part']}): {interval}, n={p['n']}{more}"
    return "checked by a library test (in CI)"


def document(docs: Path) -> d.Document:
    cat = coverage.load()
    pub = coverage.Published.read(docs, cat)
    designs = _designs(docs, pub)
    status = {s.id: headline.status(s, pub).status for s in cat.statements}
    decided = [s for s in cat.statements if status[s.id] in coverage.HEADLINES]
    tested = [
        s
        for s in cat.statements
        if s not in decided and headline.evidence(s, pub) and status[s.id] != s.reason
    ]

    def table(statements) -> d.Table:
        """One row per statement; its source links the article's heading in claims.md (the
        anchor GitHub gives it)."""
        rows = []
        for s in statements:
            title = f"{s.article}: {cat.articles[s.article]['title']}".lower()
            anchor = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            where = cat.articles[s.article]["sections"][s.section]
            source = d.Link(f"{s.article} · {where}", f"claims.md#{anchor}")
            rows.append((s.statement, badge(status[s.id]), _seen(s, pub, designs), source))
        header = ("statement (our paraphrase)", "verdict", "what was seen, at what size", "source")
        return d.Table(header, tuple(rows), cls="summary")

    doc = d.Document("What the lab found")
    doc.add(
        d.Heading(1, "What the lab found: the articles' statements, decided"),
        d.Paragraph(
            (
                "Every statement of the three articles that a study, a numerics or bench finding, "
                "or a library test decides, with what was seen and the size it was seen at (a "
                "verdict holds there, not beyond). How a verdict is decided: ",
                d.Link("study.md", "study.md#how-a-verdict-is-decided"),
                "; every statement with its evidence: ",
                d.Link("claims.md", "claims.md"),
                ".",
            )
        ),
        table(decided),
        d.Heading(2, "Tested, not decided", id="tested-not-decided"),
        d.Paragraph(
            "A claim or finding tests these, but the evidence is inconclusive, not testable "
            "here, or tests another size or measure (each row of claims.md says which)."
        ),
        table(tested),
        d.Heading(2, "Every decided claim in one figure", id="forest"),
        d.Figure(
            "every decided claim against its ±δ band",
            forest_png(_effects(cat, pub, designs)),
            FOREST,
        ),
    )
    return doc


def write(docs: Path) -> list[Path]:
    """``docs/results.md``, ``docs/results.html`` and the forest plot; returns their paths."""
    doc = document(docs)
    (fig,) = [b for b in d.walk(doc.blocks) if isinstance(b, d.Figure)]
    paths = [docs / "results.md", docs / "results.html", docs / FOREST]
    sub_dir(docs, paths[2].parent.name)  # a symlink there is refused, not written through
    write_file(paths[0], d.to_markdown(doc))
    write_file(paths[1], d.to_html(doc, toc_after=2))
    write_file(paths[2], fig.png)
    return paths


def main(docs: str) -> int:
    """``normlab study --coverage [DOCS]``: ``claims.md``, the results page built on it, then
    every generated block of the other pages (``pages``: the ones that changed are printed);
    UsageError where ``DOCS`` holds no published data."""
    root = Path(docs)
    if not (root / "data").is_dir():
        raise UsageError(
            f"--coverage {docs}: no {root / 'data'} directory; run from the repository's "
            "root or name its docs/ directory"
        )
    with hold(root, "study", "--coverage"):  # one process per directory written, as --out
        write_file(root / "claims.md", claims_page.render(root))
        try:
            changed = pages.write(root)
        except pages.BlockError as e:  # a page names data that is not published
            raise UsageError(f"--coverage: {e}") from None
        paths = [root / "claims.md", *write(root), *changed]
    for path in paths:
        print(path)
    return 0
