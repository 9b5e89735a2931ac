"""What every lab report shares: Markdown, HTML and terminal tables, the page and its CSS,
figures as PNG and their embedding (a report file is written whole by ``normlab.lab.io``).

matplotlib is imported only by :func:`figure` (the ``Figure`` class, no pyplot state), so a
report that draws nothing never loads it.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from html import escape

CSS = """
body{font:14px/1.45 system-ui,sans-serif;max-width:1000px;margin:24px auto;padding:0 16px;
color:#1f2328}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #d0d7de;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f6f8fa}.v{color:#fff;padding:1px 7px;
border-radius:10px;font-weight:600;white-space:nowrap}pre{background:#f6f8fa;padding:8px;
overflow:auto;font-size:12px}img{max-width:100%;border:1px solid #eee}.muted{color:#656d76}
section{border-top:1px solid #d0d7de;margin-top:20px}code{background:#f6f8fa;padding:0 3px}
"""

Rows = Sequence[Sequence[object]]


def md_table(header: Sequence[str], rows: Rows) -> str:
    """A Markdown table; ``|`` inside a cell is escaped."""
    cell = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    out = ["| " + " | ".join(map(cell, header)) + " |", "|" + "---|" * len(header)]
    return "\n".join(out + ["| " + " | ".join(map(cell, r)) + " |" for r in rows])


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


def html_page(title: str, body: Sequence[str]) -> str:
    """A self-contained HTML page with the shared CSS; ``body`` parts are HTML already."""
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


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
    """The figure as PNG bytes."""
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()
