"""The results page's forest plot (``img/results-forest.png``), by question: each decided claim of
the presets (and each part of a compound one) drawn under the statement it tests, labelled with
the statement's words, in its own unit: one panel per unit, the raw effect and its 95 % interval
in the claim's direction (right is the claim's side), each row's ±δ band in grey; evidence at
another size or with another measure (a statement's *related* claims) hollow and grey; an
interval past the panel's edge stops there with an arrow and its value written beside it (the
dot's, marked ●, where the dot is past it too).

Each claim is drawn once, under the first statement that names it (as evidence, then as related);
claims no statement names (``[beyond]``) under the paper they come from.
"""

from __future__ import annotations

import itertools
import math
import textwrap
from dataclasses import dataclass

from normlab.lab.study.published import legend
from normlab.lab.study.published.compare import effects as estimates
from normlab.lab.study.published.headline import size_of
from normlab.lab.study.report import COLORS
from normlab.lab.verdict import DECIDED, Word

FOREST = "img/results-forest.png"
TITLE = "every decided claim by the statement it tests, one panel per unit"
CAPTION = (
    "Each row is one decided claim of a preset (or one part of a compound claim) under the "
    "statement it tests: its effect (dot) and 95 % interval in its own unit, drawn in the "
    "claim's direction (right: the claim's side), against its ±δ band (grey). Colour: the "
    "verdict of the claim or part; hollow grey: related evidence (another size or measure), "
    "never a statement's headline. An interval past the panel's edge stops in an arrow with "
    "its value written beside it."
)
RELATED = "#afb8c1"
UNNAMED = "claims no statement names"


@dataclass(frozen=True)
class Effect:
    """One decided claim's (or part's) effect, under its statement."""

    label: str  # "quick post-ln-fails-deep / post-L24 fails"
    group: str  # the statement's words, or the paper a claim beyond the articles comes from
    effect: float
    lo: float
    hi: float
    delta: float
    unit: str
    word: str
    sign: int = 1  # −1 for a claim that expects a negative effect: drawn in its direction
    related: bool = False
    size: str = ""


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


def section_words(s) -> str:
    """``003 §11.3``: a statement's article and section, in digits."""
    return _digits(f"{s.article} §{s.section}")


def _groups(cat) -> dict[str, tuple[str, bool]]:
    """``"<preset>:<claim>"`` -> (the group it is drawn in, whether as related evidence)."""
    out: dict[str, tuple[str, bool]] = {}
    for s in cat.statements:
        words = f"{section_words(s)}: {s.statement}"
        for ref in s.claims:
            out.setdefault(ref, (words, False))
        for ref in s.related:
            out.setdefault(ref, (words, True))
    for ref, paper in cat.beyond.items():
        out.setdefault(ref, (f"beyond the articles: {paper}", False))
    return out


def effects(cat, pub, designs: dict[str, dict]) -> list[Effect]:
    """Every decided claim's effect (a compound's: each part's), in the statements' order."""
    groups = _groups(cat)
    order = {g: i for i, g in enumerate(dict.fromkeys(g for g, _ in groups.values()))}
    order[UNNAMED] = len(order)
    out = []
    for preset, claims in pub.claims.items():
        rules = designs[preset]
        for name, c in claims.items():
            ref = f"{preset}:{name}"
            if c["verdict"] not in DECIDED or name not in rules:
                continue
            group, related = groups.get(ref, (UNNAMED, False))
            parts = dict(rules[name].parts())
            words = {p["part"]: p["verdict"] for p in c.get("parts") or []}
            for label, est in estimates(c).items():
                rule = parts.get(label, rules[name])
                sign = -1 if rule.expect == "<0" else 1
                lo, hi = sorted((sign * est.lo, sign * est.hi))
                shown = f"{preset} {name}" + (f" / {label}" if label else "")
                word = words.get(label, c["verdict"])
                unit = legend.unit(rule) or "other"
                out.append(Effect(shown, group, sign * est.effect, lo, hi, rule.delta, unit, word,
                                  sign, related, size_of(c)))  # fmt: skip
    return sorted(out, key=lambda e: (order[e.group], e.related, e.label))


# --------------------------------------------------------------------------------------------
# drawing

ROW = 0.19  # inches a row takes
WRAP = 62  # characters of a statement's words on one line


def _limit(items: list[Effect]) -> float:
    """The panel's half-width: every δ band and most effects in view; a few far ones clipped."""
    finite = sorted(abs(e.effect) for e in items if math.isfinite(e.effect))
    typical = finite[int(0.85 * (len(finite) - 1))] if finite else 1.0
    return max([typical * 1.4, *(2.2 * e.delta for e in items)], default=1.0) or 1.0


def _rows(items: list[Effect]) -> list[tuple[str, Effect | None, int]]:
    """The panel's rows, top down: a statement's words (bold, wrapped), then its evidence."""
    out: list[tuple[str, Effect | None, int]] = []
    for group, members in itertools.groupby(items, key=lambda e: e.group):
        lines = textwrap.wrap(group, WRAP)
        text = "\n".join(lines[:3]) + (" …" if len(lines) > 3 else "")
        out.append((text, None, min(len(lines), 3)))
        out += [(f"{'related: ' if e.related else ''}{e.label} ({e.size})", e, 1) for e in members]
    return out


def _draw(ax, items: list[Effect], unit: str) -> None:
    from matplotlib.transforms import blended_transform_factory

    lim = _limit(items)
    rows, y, ticks = _rows(items), 0.0, []
    edge = blended_transform_factory(ax.transAxes, ax.transData)
    for text, e, lines in rows:
        y += 0.5 * lines
        ticks.append((y, text, e is None))
        if e is not None:
            _one(ax, e, y, lim, edge)
        y += 0.5 * lines
    ax.set_xlim(-lim, lim)
    ax.set_ylim(y, 0)
    ax.axvline(0, color="k", lw=0.6)
    ax.set_yticks([t[0] for t in ticks], [t[1] for t in ticks], fontsize=7.5)
    for label, (_, _, bold) in zip(ax.get_yticklabels(), ticks, strict=True):
        label.set_fontweight("bold" if bold else "normal")
        label.set_color("#1f2328" if bold else "#424a53")
    ax.tick_params(axis="y", length=0)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel(f"{unit}: effect in the claim's direction (right: the claim's side)", fontsize=8)
    ax.grid(axis="x", color="#eaeef2", lw=0.6)


def _one(ax, e: Effect, y: float, lim: float, edge) -> None:
    """One row: its ±δ band, interval and dot; an end past the edge as an arrow and a number."""
    color = RELATED if e.related else COLORS.get(e.word, "#57606a")
    if e.delta > 0:
        ax.barh(y, 2 * e.delta, left=-e.delta, height=0.8, color="#d0d7de", lw=0)
    lo, hi, x = (max(min(v, lim), -lim) for v in (e.lo, e.hi, e.effect))
    ax.plot([lo, hi], [y, y], color=color, lw=2, solid_capstyle="butt")
    face = "white" if e.related else color
    ax.plot([x], [y], "o", color=color, mfc=face, ms=4.5)
    for side in (-1, 1):  # an end past the panel's edge: an arrow, and its value written
        past = [(v, raw) for v, raw in ((x, e.effect), (lo, e.lo), (hi, e.hi)) if raw * side > lim]
        if not past:
            continue
        ax.plot([side * lim], [y], ">" if side > 0 else "<", color=color, ms=6)
        # the dot's own value where the dot is past it too (●), else the interval's end
        raw = past[0][1]
        value = "∞" if not math.isfinite(raw) else f"{abs(raw):.3g}"
        shown = ("● " if raw == e.effect else "") + ("+", "−")[side < 0]
        at, ha = (0.985, "right") if side > 0 else (0.015, "left")
        ax.text(at, y - 0.42, f"{shown}{value}", transform=edge, ha=ha, va="bottom",
                fontsize=6.5, color=color)  # fmt: skip


def png(items: list[Effect]) -> bytes:
    """One panel per unit, the panels' heights by their rows, and a legend above them."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from normlab.lab.kit.render import png as to_png

    units = list(dict.fromkeys(e.unit for e in items)) or ["none"]
    by = {u: [e for e in items if e.unit == u] for u in units}
    heights = [sum(n for *_, n in _rows(by[u])) + 3 for u in units]
    fig = Figure(figsize=(10.5, 1.0 + ROW * sum(heights)))
    axes = fig.subplots(len(units), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)
    for ax, u in zip(axes[:, 0], units, strict=True):
        _draw(ax, by[u], u)
    words = (Word.HOLDS, Word.DOES_NOT_HOLD, Word.INCONCLUSIVE, Word.NOT_TESTABLE)
    handles = [Line2D([], [], color=COLORS[w], marker="o", lw=2, label=w) for w in words]
    handles += [
        Line2D([], [], color=RELATED, marker="o", mfc="white", lw=2, label="related evidence"),
        Patch(color="#d0d7de", label="±δ (no effect that matters)"),
        Line2D([], [], color="#57606a", marker=">", lw=0, label="past the edge: value written"),
    ]
    axes[0, 0].legend(handles=handles, loc="lower center", ncol=4, fontsize=8, frameon=False,
                      bbox_to_anchor=(0.5, 1.01))  # fmt: skip
    return to_png(fig)
