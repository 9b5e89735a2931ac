"""What every report shares: tables that escape what they hold, embedded images, atomic
writes."""

import base64

from normlab.lab import render

EVIL = "<b>a|b</b> & 'c'"


def test_md_table_escapes_pipes_and_keeps_the_shape():
    text = render.md_table(["x", "y"], [[EVIL, 1], ["plain", 2.5]])
    lines = text.splitlines()
    assert lines[0] == "| x | y |" and lines[1] == "|---|---|"
    assert lines[2] == "| <b>a\\|b</b> & 'c' | 1 |"
    # every row has as many unescaped separators as the header
    assert all(ln.replace("\\|", "").count("|") == 3 for ln in lines)


def test_html_table_escapes_cells_unless_raw():
    escaped = render.html_table(["h<"], [[EVIL]])
    assert "<b>" not in escaped and "&lt;b&gt;" in escaped and "<th>h&lt;</th>" in escaped
    raw = render.html_table(["h"], [["<i>ok</i>"]], raw=True)
    assert "<td><i>ok</i></td>" in raw


def test_text_table_pads_every_column_to_its_widest_cell():
    lines = render.text_table(["a", "long header"], [["wide cell", 1], ["x", 22]]).splitlines()
    assert len({len(ln.rstrip()) for ln in lines[:2]}) == 1
    assert lines[1].split("  ") == ["-" * len("wide cell"), "-" * len("long header")]
    assert lines[3].startswith("x" + " " * (len("wide cell") - 1) + "  22")


def test_html_page_is_self_contained_and_escapes_its_title():
    page = render.html_page(EVIL, ["<p>body</p>"])
    assert page.startswith("<!doctype html>") and render.CSS in page
    assert "<title>&lt;b&gt;" in page and "<p>body</p>" in page


def test_img_embeds_the_png_bytes():
    png = b"\x89PNG\r\n\x1a\nfake"
    tag = render.img(EVIL, png)
    b64 = tag.split("base64,", 1)[1].rstrip("'>")
    assert base64.b64decode(b64) == png and "&lt;b&gt;" in tag


def test_figure_and_png_make_a_png():
    fig, ax = render.figure()
    ax.plot([0, 1], [1, 0])
    assert render.png(fig).startswith(b"\x89PNG")
