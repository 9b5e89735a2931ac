"""A report as a document: blocks (heading, paragraph, list, table, figure, details, pre, section)
holding inline text (plain strings, badges, links, bold, emphasis, code), rendered once to HTML
and once to Markdown, so the two renderings of a report cannot drift apart.

The HTML page is self-contained (figures embedded as base64, the CSS inline): its tables scroll
inside their own box, never the page, at any width (a cell wraps at spaces, never inside a
number, so a narrow screen scrolls the table rather than stack 0.182 one digit a line); it opens
with a table of contents built from the ``h2`` headings that have an ``id``, and it prints
without the colours and the scroll boxes.
The Markdown names the figures by their file (``plots/<name>.png``) and folds ``Details`` into
``<details>``, which GitHub renders around Markdown.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from html import escape
from typing import Any

from normlab.lab.kit.render import CSS, html_table, img

# --------------------------------------------------------------------------------------------
# inline


@dataclass(frozen=True)
class _Text:
    """A span of text; every span but a :class:`Break` is one, with its own markup."""

    text: str


@dataclass(frozen=True)
class Badge(_Text):
    """A verdict (or any status) as a coloured pill that carries its word."""

    color: str = "#57606a"


@dataclass(frozen=True)
class Link(_Text):
    href: str


class Strong(_Text):
    """Bold."""


class Code(_Text):
    """Code: monospaced."""


class Em(_Text):
    """Emphasis: italic."""


class Muted(_Text):
    """Secondary text (a source, a note): grey in HTML, emphasis in Markdown."""


@dataclass(frozen=True)
class Break:
    """A line break inside a paragraph or a table cell (``<br>`` in both renderings)."""


Span = str | Badge | Link | Strong | Em | Code | Muted | Break
Inline = Span | Sequence[Span]


def _spans(x: Inline) -> tuple[Span, ...]:
    return (x,) if isinstance(x, Span) else tuple(x)


_MARKED = re.compile(r"\*\*(.+?)\*\*|`([^`]+)`")


def from_markdown(text: str) -> tuple[Span, ...]:
    """Text that marks its bold (``**x**``) and code (`` `x` ``) as Markdown does, as spans: so
    a cell written for a Markdown table reads bold in the HTML, not as literal asterisks."""
    parts = _MARKED.split(text)  # text, bold, code, text, bold, code, ..., text
    return tuple((str, Strong, Code)[i % 3](p) for i, p in enumerate(parts) if p)


def plain(x: Inline, *, badges: bool = True) -> str:
    """The text a reader sees, without markup (``badges=False``: without the badges' words)."""
    shown = (s for s in _spans(x) if badges or not isinstance(s, Badge))
    return "".join(" " if isinstance(s, Break) else getattr(s, "text", s) for s in shown).strip()


# --------------------------------------------------------------------------------------------
# blocks


@dataclass(frozen=True)
class Heading:
    level: int
    text: Inline
    id: str | None = None  # an anchor; an h2 with one is listed in the table of contents


@dataclass(frozen=True)
class Paragraph:
    text: Inline
    muted: bool = False


@dataclass(frozen=True)
class Items:
    """A bulleted list; an item that is itself ``Items`` is the sub-list of the item before."""

    items: tuple[Inline | Items, ...]
    cls: str = ""  # an extra CSS class (``legend``: in two columns on a wide screen)


@dataclass(frozen=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[Inline, ...], ...]
    cls: str = ""  # an extra CSS class (``summary``: the first screen's table)
    dense: bool = False  # Markdown rule ``|---|---|`` (the claims page's, a terminal's)


@dataclass(frozen=True)
class Figure:
    title: str
    png: bytes
    path: str  # where the Markdown finds it, relative to the report


@dataclass(frozen=True)
class Details:
    """Folded away: the machinery a researcher opens and a learner skips."""

    summary: str
    blocks: tuple[Block, ...]


@dataclass(frozen=True)
class Pre:
    """Preformatted text (a config): ``<pre>`` in HTML, a fenced block in Markdown."""

    text: str
    lang: str = ""


@dataclass(frozen=True)
class Section:
    """Blocks that belong together (a claim): one ``<section>`` in HTML, nothing in Markdown."""

    id: str
    blocks: tuple[Block, ...]


Block = Heading | Paragraph | Items | Table | Figure | Details | Pre | Section


@dataclass
class Document:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


def demoted(blocks: Sequence[Block], by: int = 1) -> list[Block]:
    """``blocks`` with every heading ``by`` levels deeper (a page that leads another page)."""
    return [replace(b, level=b.level + by) if isinstance(b, Heading) else b for b in blocks]


def walk(blocks: Sequence[Block]):
    """Every block, depth first, the contents of ``Details`` and ``Section`` included."""
    for b in blocks:
        yield b
        if isinstance(b, Details | Section):
            yield from walk(b.blocks)


# --------------------------------------------------------------------------------------------
# HTML

PAGE_CSS = (
    CSS
    + """
body{max-width:1180px;margin:12px auto}h1{font-size:21px;margin:4px 0}
h2{font-size:18px;margin:18px 0 6px}.scroll{overflow-x:auto;max-width:100%}
.scroll table{margin:4px 0 12px}p,li{overflow-wrap:anywhere}.n{white-space:nowrap}
table.summary,table.seen{font-size:12.5px;line-height:1.25}
table.summary td,table.seen td{padding:3px 6px}.src{color:#656d76;font-size:12px}
table.summary td:first-child,table.seen td:first-child{min-width:300px;width:40%}
table.summary.verdicts td:first-child{min-width:0;width:1%}
@media (min-width:701px){table.summary.answers td:first-child{min-width:150px;width:17%}}
table.summary.answers td:first-child a{white-space:normal}
ul.legend{columns:2 420px;column-gap:28px;font-size:12.5px;line-height:1.3;margin:6px 0 10px;
padding-left:18px}ul.legend li{break-inside:avoid;margin-bottom:2px}
nav.toc{font-size:13px;line-height:1.6}nav.toc a{white-space:nowrap}
table.summary td:first-child a,table.summary td:first-child .src,table.seen td:first-child a,
table.seen td:first-child .src{white-space:nowrap}
pre{max-width:100%}
figure{display:inline-block;vertical-align:top;margin:8px 12px 8px 0;max-width:100%}
figcaption{font-size:12px;color:#656d76}details{margin:8px 0}
summary{cursor:pointer;font-weight:600}
@media (max-width:700px){:is(table.summary,table.seen) thead{display:none}
:is(table.summary,table.seen),:is(table.summary,table.seen) :is(tbody,tr,td){display:block;
border:none;overflow-wrap:anywhere}:is(table.summary,table.seen) tr{border-top:1px solid #d0d7de;
padding:4px 0}:is(table.summary,table.seen) td:first-child{min-width:0;width:auto}
body{padding:0 8px}}
@media print{.scroll{overflow:visible}nav.toc{display:none}
details::details-content{content-visibility:visible;display:block}.v{color:#000!important;background:none!important;
border:1px solid #000}body{max-width:none;margin:0}img{max-width:100%;page-break-inside:avoid}
section{page-break-before:auto}}
"""
)


# A number in exponent form: a browser breaks a cell after its hyphen (6.6e- / 04).
_EXPONENT = re.compile(r"\d[\d.]*e[-+]\d+")


# Each inline span (a plain string aside) as (HTML, Markdown): its fields put in by name,
# escaped in the HTML.
_MARKUP = {
    Badge: ('<span class="v" style="background:{color}">{text}</span>', "**{text}**"),
    Link: ('<a href="{href}">{text}</a>', "[{text}]({href})"),
    Break: ("<br>", "<br>"),
    Strong: ("<b>{text}</b>", "**{text}**"),
    Em: ("<i>{text}</i>", "*{text}*"),
    Code: ("<code>{text}</code>", "`{text}`"),
    Muted: ('<span class="src">{text}</span>', "*{text}*"),
}


def _html_inline(x: Inline, *, cell: bool = False) -> str:
    out = []
    for s in _spans(x):
        if isinstance(s, str):  # in a cell, a number in exponent form kept on one line
            text = escape(s)
            out.append(_EXPONENT.sub(r'<span class="n">\g<0></span>', text) if cell else text)
        else:
            out.append(_MARKUP[type(s)][0].format(**{k: escape(v) for k, v in vars(s).items()}))
    return "".join(out)


def _html_block(b: Block) -> str:
    if isinstance(b, Heading):
        anchor = f' id="{escape(b.id)}"' if b.id else ""
        return f"<h{b.level}{anchor}>{_html_inline(b.text)}</h{b.level}>"
    if isinstance(b, Paragraph):
        cls = ' class="muted"' if b.muted else ""
        return f"<p{cls}>{_html_inline(b.text)}</p>"
    if isinstance(b, Items):
        cls = f' class="{escape(b.cls)}"' if b.cls else ""
        lis = []
        for i in b.items:
            if isinstance(i, Items):  # a sub-list, inside the item before it
                lis[-1] = lis[-1].removesuffix("</li>") + _html_block(i) + "</li>"
            else:
                lis.append(f"<li>{_html_inline(i)}</li>")
        return f"<ul{cls}>" + "".join(lis) + "</ul>"
    if isinstance(b, Table):
        cells = [[_html_inline(c, cell=True) for c in r] for r in b.rows]
        return f'<div class="scroll">{html_table(b.header, cells, raw=True, cls=b.cls)}</div>'
    if isinstance(b, Figure):
        return f"<figure>{img(b.title, b.png)}<figcaption>{escape(b.title)}</figcaption></figure>"
    if isinstance(b, Details):
        return f"<details><summary>{escape(b.summary)}</summary>\n{html(*b.blocks)}\n</details>"
    if isinstance(b, Pre):
        return f"<pre>{escape(b.text)}</pre>"
    if isinstance(b, Section):
        return f'<section id="{escape(b.id)}">\n{html(*b.blocks)}\n</section>'
    raise TypeError(f"not a block: {b!r}")


def html(*blocks: Block) -> str:
    """``blocks`` as HTML with no page around them."""
    return "\n".join(filter(None, map(_html_block, blocks)))


def to_html(doc: Document, *, toc_after: int = 0) -> str:
    """The page; the table of contents (every ``h2`` with an anchor, in order) stands after the
    first ``toc_after`` blocks."""
    links = " · ".join(
        f'<a href="#{escape(b.id)}">{escape(plain(b.text, badges=False))}</a>'
        for b in walk(doc.blocks)
        if isinstance(b, Heading) and b.level == 2 and b.id
    )
    nav = f'<nav class="toc"><b>Contents:</b> {links}</nav>' if links else ""
    parts = [_html_block(b) for b in doc.blocks]
    parts.insert(min(toc_after, len(parts)), nav)
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{escape(doc.title)}</title><style>{PAGE_CSS}</style></head><body>\n"
        + "\n".join(p for p in parts if p)
        + "\n</body></html>\n"
    )


# --------------------------------------------------------------------------------------------
# Markdown


def _md_inline(x: Inline) -> str:
    return "".join(
        s if isinstance(s, str) else _MARKUP[type(s)][1].format(**vars(s)) for s in _spans(x)
    )


def _md_cell(x: Inline) -> str:
    return re.sub(r"\s*\n\s*", " ", _md_inline(x)).replace("|", "\\|")


def _md_block(b: Block) -> list[str]:
    if isinstance(b, Heading):
        anchor = f'<a id="{b.id}"></a>' if b.id else ""
        return ["#" * b.level + " " + _md_inline(b.text) + anchor, ""]
    if isinstance(b, Paragraph):
        return [_md_inline(b.text), ""]
    if isinstance(b, Items):
        out = []
        for i in b.items:  # a sub-list indented under the item before it
            sub = isinstance(i, Items)
            out += ["  " + x for x in _md_block(i)[:-1]] if sub else [f"- {_md_inline(i)}"]
        return out + [""]
    if isinstance(b, Table):
        rows = ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in (b.header, *b.rows)]
        rule = "|" + "---|" * len(b.header) if b.dense else "| --- " * len(b.header) + "|"
        return [rows[0], rule, *rows[1:], ""]
    if isinstance(b, Figure):
        return [f"![{b.title}]({b.path})", ""]
    if isinstance(b, Details):
        inner = [x for blk in b.blocks for x in _md_block(blk)]
        return [f"<details><summary>{escape(b.summary)}</summary>", "", *inner, "</details>", ""]
    if isinstance(b, Pre):
        return [f"```{b.lang}", b.text, "```", ""]
    if isinstance(b, Section):
        return [x for blk in b.blocks for x in _md_block(blk)]
    raise TypeError(f"not a block: {b!r}")


def to_markdown(doc: Document) -> str:
    return markdown(*doc.blocks) + "\n"


def markdown(*blocks: Block) -> str:
    """``blocks`` as Markdown with no page around them and no final newline (a generated block
    of a hand-written page, a table for the terminal)."""
    lines = [x for b in blocks for x in _md_block(b)]
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def dense_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> Table:
    """A dense table of plain cells (numbers written by ``str``)."""
    return Table(tuple(map(str, header)), tuple(tuple(map(str, r)) for r in rows), dense=True)


def column_table(
    columns: Mapping[str, Callable[[Any], Inline]], items, *, cls: str = "", dense: bool = False
) -> Table:
    """A column per entry of ``columns`` (its header: its cell of an item), a row per item;
    ``dense``: plain cells, as :func:`dense_table`."""
    rows = [[cell(x) for cell in columns.values()] for x in items]
    if dense:
        return dense_table(list(columns), rows)
    return Table(tuple(columns), tuple(map(tuple, rows)), cls)


def md_table(header: Sequence[object], rows: Sequence[Sequence[object]]) -> str:
    """:func:`dense_table` as Markdown (``|`` in a cell escaped)."""
    return markdown(dense_table(header, rows))
