"""The report's document model: one document, two renderings that carry the same headings,
tables and figures; what comes from the data is escaped; the page has its contents and its
scroll boxes."""

import re
from html.parser import HTMLParser

from normlab.lab.kit import doc as d

EVIL = "<b>a|b</b> & 'c'"
PNG = b"\x89PNG\r\n\x1a\nfake"


def sample() -> d.Document:
    doc = d.Document(f"title {EVIL}")
    doc.add(
        d.Heading(1, ("study ", d.Code(EVIL))),
        d.Paragraph(("seen: ", d.Strong("bold"), " ", d.Badge("holds", "#1a7f37")), muted=True),
        d.Heading(2, ("first ", d.Badge("inconclusive")), "first"),
        d.Table(("x", "y"), ((EVIL, d.Link("to", "#first")), ("a\nb", (d.Muted("m"),)))),
        d.Section(
            "sec",
            (
                d.Heading(2, "second", "second"),
                d.Figure("a plot", PNG, "plots/a.png"),
                d.Items(("one", ("two ", d.Code("x")))),
                d.Details("more", (d.Table(("k",), (("v",),)), d.Pre("r"))),
            ),
        ),
    )
    return doc


class Outline(HTMLParser):
    """Headings (level, text), tables (header cells, row count) and images (alt) of a page."""

    def __init__(self):
        super().__init__()
        self.headings, self.tables, self.figures = [], [], []
        self._h = None
        self._th = None

    def handle_starttag(self, tag, attrs):
        if re.fullmatch(r"h[1-6]", tag):
            self._h = [int(tag[1]), ""]
        elif tag == "table":
            self.tables.append([[], 0])
        elif tag == "th":
            self._th = ""
        elif tag == "tr" and self.tables:
            self.tables[-1][1] += 1
        elif tag == "img":
            self.figures.append(dict(attrs)["alt"])

    def handle_endtag(self, tag):
        if self._h and tag == f"h{self._h[0]}":
            self.headings.append((self._h[0], " ".join(self._h[1].split())))
            self._h = None
        elif tag == "th":
            self.tables[-1][0].append(self._th.strip())
            self._th = None

    def handle_data(self, data):
        if self._h is not None:
            self._h[1] += data
        if self._th is not None:
            self._th += data


def outline_html(html: str):
    p = Outline()
    p.feed(html)
    tables = [(tuple(h), n - 1) for h, n in p.tables]  # n counts the header row
    return p.headings, tables, p.figures


def outline_md(md: str):
    headings, tables, figures = [], [], []
    lines = md.splitlines()
    for i, line in enumerate(lines):
        if m := re.match(r"(#{1,6}) (.*)", line):
            text = re.sub(r"<a id=\"[^\"]*\"></a>", "", m.group(2)).replace("**", "")
            headings.append((len(m.group(1)), " ".join(text.replace("`", "").split())))
        elif line.startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("| ---"):
            header = tuple(c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1])
            n = 0
            while i + 2 + n < len(lines) and lines[i + 2 + n].startswith("|"):
                n += 1
            tables.append((header, n))
        figures += re.findall(r"!\[([^\]]*)\]\(", line)
    return headings, tables, figures


def test_both_renderings_carry_the_same_outline():
    doc = sample()
    html, md = d.to_html(doc), d.to_markdown(doc)
    got_html, got_md = outline_html(html), outline_md(md)
    assert got_html == got_md
    assert got_html[2] == ["a plot"] and len(got_html[1]) == 2


def test_html_escapes_embeds_and_scrolls_its_tables():
    html = d.to_html(sample(), toc_after=2)
    assert "<b>a|b</b>" not in html and "&lt;b&gt;a|b&lt;/b&gt;" in html
    assert "<title>title &lt;b&gt;" in html and "data:image/png;base64," in html
    assert html.count('<div class="scroll"><table') == html.count("<table") == 2
    assert "@media print" in html and "<details><summary>more</summary>" in html
    # The contents list the h2 anchors, without the badges' words, after the first two blocks.
    nav = re.search(r'<nav class="toc">(.*?)</nav>', html).group(1)
    assert re.findall(r'href="#(\w+)">([^<]*)<', nav) == [("first", "first"), ("second", "second")]
    assert html.index("<nav") > html.index("seen: ")
    assert '<span class="v" style="background:#1a7f37">holds</span>' in html


def test_markdown_keeps_tables_whole_and_folds_details():
    md = d.to_markdown(sample())
    assert "| <b>a\\|b</b> & 'c' | [to](#first) |" in md  # a | in a cell is escaped
    assert "| a b | *m* |" in md  # a newline in a cell does not break the row
    assert "<details><summary>more</summary>\n\n| k |" in md and md.endswith("</details>\n")
    assert "![a plot](plots/a.png)" in md and "**holds**" in md and "`x`" in md


def test_the_study_report_renders_the_same_outline_twice(quick_report):
    html = (quick_report / "report.html").read_text()
    md = (quick_report / "report.md").read_text()
    headings, tables, figures = outline_html(html)
    assert (headings, tables, figures) == outline_md(md)
    assert len([h for h in headings if h[0] == 2]) >= 12 + 3 and len(figures) >= 12
    # every verdict with its statement first, one line each; then what was seen
    assert tables[0] == (("verdict", "statement (its section)"), 12)
    assert tables[1] == (("statement (claim)", "verdict", "what the lab saw (scope)"), 12)


def test_a_narrow_screen_scrolls_a_table_rather_than_break_its_numbers():
    css = d.PAGE_CSS.split("@media")[0]  # the narrow-screen card layout is the summary's own
    assert ".scroll{overflow-x:auto" in css
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", css):
        if "overflow-wrap:anywhere" in body:
            assert "td" not in selectors.split(","), selectors
    html = d.to_html(d.Document("t", [d.Table(("x",), (("6.6e-04 and 2e+03",),))]))
    assert '<span class="n">6.6e-04</span> and <span class="n">2e+03</span>' in html
    assert ".n{white-space:nowrap}" in html


def test_markdown_marks_in_text_become_spans():
    spans = d.from_markdown("**does not hold** at `eps` and **holds**")
    assert spans == (d.Strong("does not hold"), " at ", d.Code("eps"), " and ", d.Strong("holds"))
    assert d.from_markdown("plain") == ("plain",)
    html = d.to_html(d.Document("t", [d.Paragraph((d.Em("s"), *spans))]))
    assert "<i>s</i><b>does not hold</b>" in html and "**" not in html


def test_md_table_is_a_dense_table_that_escapes_pipes():
    lines = d.md_table(["x", "y"], [[EVIL, 1], ["plain", 2.5]]).splitlines()
    assert lines[0] == "| x | y |" and lines[1] == "|---|---|"
    assert lines[2] == "| <b>a\\|b</b> & 'c' | 1 |"
    # every row has as many unescaped separators as the header
    assert all(ln.replace("\\|", "").count("|") == 3 for ln in lines)
    assert d.to_markdown(d.Document("t", [d.Table(("x",), (("1",),))])).splitlines()[1] == "| --- |"


def test_a_sub_list_stands_under_its_item_in_both_renderings():
    items = d.Items(("a", d.Items(("b", d.Items(("c",)))), "d"))
    assert d.markdown(items) == "- a\n  - b\n    - c\n- d"
    html = d.to_html(d.Document("t", [items]))
    assert "<ul><li>a<ul><li>b<ul><li>c</li></ul></li></ul></li><li>d</li></ul>" in html


def test_demoted_blocks_lead_another_page():
    blocks = [d.Heading(1, "lead", "x"), d.Paragraph("p"), d.Heading(2, "part")]
    section = d.Section("lead", tuple(d.demoted(blocks)))
    assert d.markdown(section) == '## lead<a id="x"></a>\n\np\n\n### part'
    assert (
        d.html(section)
        == '<section id="lead">\n<h2 id="x">lead</h2>\n<p>p</p>\n<h3>part</h3>\n</section>'
    )
