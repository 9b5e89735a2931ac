"""What every lab report shares: HTML and terminal tables, the CSS (the page around them and
every Markdown table are ``normlab.lab.kit.doc``'s), figures as PNG and their embedding (a report
file is written whole by ``normlab.lab.kit.io``), and the look of every plot: :func:`legend`
places a legend where it can be read, :func:`png` makes every axis readable before it saves
(:func:`tidy`).

matplotlib is imported only by :func:`figure` (the ``Figure`` class, no pyplot state) and the
functions that style one, so a report that draws nothing never loads it.
"""

from __future__ import annotations

import base64
import functools
import io
import math
import textwrap
from collections.abc import Sequence
from html import escape

# The fonts: the system's, then CJK fonts of each platform by name (the articles' titles and
# sections are Chinese: a browser whose default fallback has no CJK glyph draws boxes), then any.
CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Noto Sans CJK SC",
"Source Han Sans SC","PingFang SC","Hiragino Sans GB","Microsoft YaHei","WenQuanYi Micro Hei",
sans-serif;max-width:1000px;margin:24px auto;padding:0 16px;color:#1f2328}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #d0d7de;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f6f8fa}.v{color:#fff;padding:1px 7px;
border-radius:10px;font-weight:600;white-space:nowrap}pre{background:#f6f8fa;padding:8px;
overflow:auto;font-size:12px}img{max-width:100%;border:1px solid #eee}.muted{color:#656d76}
section{border-top:1px solid #d0d7de;margin-top:20px}code{background:#f6f8fa;padding:0 3px}
"""

Rows = Sequence[Sequence[object]]


def html_table(header: Sequence[str], rows: Rows, *, raw: bool = False, cls: str = "") -> str:
    """An HTML table, every cell escaped unless ``raw`` (cells that are already HTML);
    ``cls``: its CSS class."""
    e = (lambda c: str(c)) if raw else (lambda c: escape(str(c)))
    head = "".join(f"<th>{escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in rows)
    table = f' class="{cls}"' if cls else ""
    return f"<table{table}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def text_table(header: Sequence[str], rows: Rows) -> str:
    """A plain-text table with padded columns, for the terminal."""
    w = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    line = lambda cs: "  ".join(str(c).ljust(n) for c, n in zip(cs, w, strict=True))  # noqa: E731
    return "\n".join([line(header), line(["-" * n for n in w])] + [line(r) for r in rows])


def img(title: str, png: bytes) -> str:
    """An ``<img>`` with the PNG embedded as base64, so the page needs no other file."""
    b64 = base64.b64encode(png).decode("ascii")
    return f"<img alt='{escape(title)}' src='data:image/png;base64,{b64}'>"


def figure(nrows: int = 1, ncols: int = 1, *, figsize=(6.4, 3.6), squeeze: bool = True):
    """A headless matplotlib figure and its axes, as ``Figure.subplots`` returns them."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, squeeze=squeeze)


def png(fig, dpi: int = 90) -> bytes:
    """The figure as PNG bytes, tidied (:func:`tidy`)."""
    tidy(fig)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


# --------------------------------------------------------------------------------------------
# the look of every plot

FONT = 8  # legends and their titles: readable where the PNG is shown at its own size
LEGEND_INSIDE = 4  # more entries than this and the legend stands beside the axes, off the data
# A linear axis whose range is below this fraction of its values (Post-LN's residual RMS: all
# 0.99999x) is widened to it: matplotlib would otherwise label 1e-6 steps behind an offset
# (9.99996×10⁻¹ on every tick), noise drawn as if it were the signal.
MIN_SPAN = 1e-3
MIN_RATIO = 1.2  # the same for a log axis: hi/lo below this is widened to it
SHORT_LOG = 4.0  # a log axis spanning less than this ratio gets evenly spaced ticks
PLAIN_LOG = (1e-3, 1e4)  # a log axis within this range is labelled 0.001 … 1000, not 10⁻³ …


def legend(ax, *, title: str | None = None, among=None, inside: int = LEGEND_INSIDE) -> None:
    """``ax``'s legend (with the entries of the axes ``among`` too, each label once): inside at
    the best place when it has at most ``inside`` entries, else beside the axes, in one column
    (two past 12)."""
    entries: dict[str, object] = {}
    for a in (ax,) if among is None else among:
        for h, label in zip(*a.get_legend_handles_labels(), strict=True):
            entries.setdefault(label, h)
    if not entries:
        return
    kw = {"fontsize": FONT, "title": title, "title_fontsize": FONT, "framealpha": 0.9}
    if len(entries) <= inside:
        kw["loc"] = "best"
    else:
        ncol = 1 if len(entries) <= 12 else 2
        kw.update(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, ncol=ncol)
    ax.legend(list(entries.values()), list(entries), **kw)


def whole_ticks(axis) -> None:
    """Ticks only at whole numbers on ``axis`` (blocks, layers: counted things)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def tidy(fig) -> None:
    """Every axis of ``fig`` made readable: tick labels as plain numbers (no offset or
    multiplier above the axis, no 2×10⁻¹ on a log axis), a range too narrow to mean anything
    widened, axis labels longer than their axis wrapped. Formatters a plot chose stay."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            _plain_ticks(ax, axis)
        _wrap_labels(fig, ax)


def _number(x: float, decimals: int | None = None) -> str:
    """A tick value as a reader writes it (0.5, 20, 3e-05; 0 never as -0), with ``decimals``
    places where the magnitude allows plain digits."""
    if not x:
        return "0"
    if decimals is not None and 1e-3 <= abs(x) < 1e5:
        return f"{x:.{decimals}f}"
    return f"{x:.4g}"


def _decimals(locs) -> int:
    """The fewest decimal places that write every tick in ``locs`` exactly and tell them apart
    (0.9996, 0.9998, 1.0000 rather than 1, 1, 1)."""
    locs = sorted(float(x) for x in locs)
    step = min((b - a for a, b in zip(locs, locs[1:], strict=False)), default=1.0) or 1.0
    for d in range(11):
        written = [round(x, d) for x in locs]
        if len(set(written)) == len(locs) and all(
            abs(w - x) <= 1e-6 * step for w, x in zip(written, locs, strict=True)
        ):
            return d
    return 10


def _plain_ticks(ax, axis) -> None:
    from matplotlib import ticker

    is_x = axis is ax.xaxis
    lo, hi = sorted(ax.get_xlim() if is_x else ax.get_ylim())
    widen = ax.set_xlim if is_x else ax.set_ylim
    inverted = bool(axis.get_inverted())  # numpy's bool, which sorted() refuses
    if axis.get_scale() == "log":
        if lo > 0 and hi / lo < MIN_RATIO:
            mid = math.sqrt(lo * hi)
            lo, hi = mid / math.sqrt(MIN_RATIO), mid * math.sqrt(MIN_RATIO)
            widen(*sorted((lo, hi), reverse=inverted))
        default = type(axis.get_major_locator()) is ticker.LogLocator
        if default and lo > 0 and hi / lo < SHORT_LOG:
            # Within a factor 4 the log ticks are one or two: a 0.55 … 1.8 axis read 0.6 and 1.
            # Evenly spaced ticks (0.6, 0.8, … 1.6) label it; the scale stays logarithmic.
            axis.set_major_locator(ticker.MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
            axis.set_minor_locator(ticker.NullLocator())
            axis.set_major_formatter(_formatters()[0]())
            return
        if type(axis.get_major_formatter()) is ticker.LogFormatterSciNotation:
            axis.set_major_formatter(_formatters()[1](labelOnlyBase=False))
        if type(axis.get_minor_formatter()) is ticker.LogFormatterSciNotation:
            # Some of 2…9 labelled up to two decades, not one: on a 0.6…20 axis, 1 and 10
            # alone leave the reader counting gridlines.
            axis.set_minor_formatter(
                _formatters()[1](labelOnlyBase=False, minor_thresholds=(2, 0.5))
            )
    elif (
        axis.get_scale() == "linear" and type(axis.get_major_formatter()) is ticker.ScalarFormatter
    ):
        size = max(abs(lo), abs(hi))
        if size > 0 and hi - lo < MIN_SPAN * size:
            mid, half = (lo + hi) / 2, MIN_SPAN * size / 2
            widen(*sorted((mid - half, mid + half), reverse=inverted))
        axis.set_major_formatter(_formatters()[0]())


def _wrap_labels(fig, ax) -> None:
    """An axis label longer than its axis, wrapped onto lines that fit it (a label past the
    axis runs into the next panel or off the figure)."""
    width, height = fig.get_size_inches()
    box = ax.get_position()
    for label, inches in (
        (ax.xaxis.label, box.width * width),
        (ax.yaxis.label, box.height * height),
    ):
        text = label.get_text()
        chars = max(12, int(inches * 72 / (label.get_fontsize() * 0.5)))
        if len(text) > chars and "\n" not in text:
            label.set_text(textwrap.fill(text, chars))


@functools.cache
def _formatters():
    """The tick formatters :func:`tidy` sets, made when matplotlib is first needed."""
    from matplotlib import ticker

    class Plain(ticker.Formatter):
        """Plain numbers with the decimals the ticks need, and no offset text."""

        decimals: int | None = None

        def set_locs(self, locs):
            super().set_locs(locs)
            self.decimals = _decimals(locs) if len(locs) else None

        def __call__(self, x, pos=None):
            return _number(x, self.decimals)

    class PlainLog(ticker.LogFormatter):
        """matplotlib's choice of which log ticks get a label, written as plain numbers on an
        axis within 0.001 … 10⁴, and decades as powers of ten (10⁻⁶) on one reaching past it:
        one style per axis, not 10⁻⁴ next to 0.001."""

        def __call__(self, x, pos=None):
            if not super().__call__(x, pos):
                return ""
            lo, hi = sorted(abs(v) for v in self.axis.get_view_interval())
            # the decades the axis shows, not its margins: 0.0007 … 1.4 shows 0.001 … 1
            first, last = 10.0 ** math.ceil(math.log10(lo)), 10.0 ** math.floor(math.log10(hi))
            k = round(math.log10(abs(x)))
            decade = math.isclose(abs(x), 10.0**k, rel_tol=1e-9)
            if decade and not (PLAIN_LOG[0] <= first * 1.0001 and last < PLAIN_LOG[1]):
                return f"$\\mathdefault{{10^{{{k}}}}}$"
            return _number(x)

    return Plain, PlainLog
