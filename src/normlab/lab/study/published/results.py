"""What the lab found, answers first: ``docs/results.md`` (and its HTML twin), every statement
of the articles the lab tests, in plain words, with its verdict, what decided it (the claim or
finding at the largest size it was tested at, every part of a compound one with its own verdict
word and unit) and at what size; a legend (δ, the units, the bar, the presets' sizes, the
articles); and the forest plot (``forest``).

Built by ``normlab study --coverage`` from the same published data as ``claims.md``
(``coverage``), never retyped; the tests fail when the page is stale.
"""

from __future__ import annotations

from pathlib import Path

from normlab.lab.kit import doc as d
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import hold, sub_dir, write_file, write_page
from normlab.lab.study.published import (
    answers,
    answers_page,
    claims_page,
    coverage,
    forest,
    headline,
    legend,
    pages,
)
from normlab.lab.study.report import badge
from normlab.lab.verdict import Word

FOREST = forest.FOREST


# --------------------------------------------------------------------------------------------
# what decided a statement


def _spans(s, e: headline.Evidence, pub, rules: dict[str, dict]) -> list[d.Span]:
    """The verdict of ``e`` (a finding's on the statement's parts) and its effect, or each
    part's with its own verdict, with the unit."""
    where, name = coverage.split_ref(e.ref)
    if e.kind == "claim":
        c = pub.claim(e.ref)
        out: list[d.Span] = [f"{where} ", d.Code(name), ": ", badge(c["verdict"])]
        numbers = answers.claim_numbers(c, rules[where][name])
    else:
        f = pub.finding(e.ref)
        out = [f"{e.ref.replace(':', ' ')}: ", badge(headline.finding_verdict(s, f))]
        numbers = answers.finding_numbers(s, f)
    for i, x in enumerate(numbers):
        out += [";" if i else ",", f" {x.part}: {x.text}" if x.part else f" {x.text}"]
        out += [" ", badge(x.word)] if x.part else []
    if e.kind == "claim" and c["verdict"] == Word.NOT_TESTABLE:
        out.append(f" ({answers.untestable_why(c)}; listed, not counted)")
    return out


def decided_by(s, pub, rules: dict[str, dict]) -> d.Inline:
    """What decided ``s``: the evidence at the largest size it was tested at, whole, and how
    many claims and findings more claims.md lists."""
    found = headline.evidence(s, pub)
    e = answers.strongest(found, pub)
    if e is None:
        return "checked by a library test (in CI)" if headline.tests_decide(s) else "–"
    spans = [*_spans(s, e, pub, rules), f"; at {answers.size_words(e.size)}"]
    more = len(found) - 1
    if more:
        spans += [" (+", d.Link(f"{more} more", f"claims.md#{s.id}"), ")"]
    return tuple(spans)


def verdict_cell(dec: headline.Decision) -> d.Inline:
    """The headline's badge; where sizes disagree or one is undecided, each size's verdict."""
    word = dec.status
    shown = word if word in coverage.HEADLINES else coverage.NOT_DECIDED[word][0]
    out: list[d.Span] = [badge(shown)]
    sizes = [(answers.size_words(s), w) for s, w in dec.sizes]
    if len({w for _, w in sizes}) > 1:
        out += [d.Break(), d.Muted("; ".join(f"{w} at {s}" for s, w in sizes))]
    elif sizes:
        out += [d.Break(), d.Muted("at " + " and ".join(s for s, _ in sizes))]
    if dec.exploratory:
        out += [d.Break(), d.Muted("exploratory: decided after its data was seen")]
    return tuple(out)


# --------------------------------------------------------------------------------------------
# the page


def _table(statements, status, pub, rules) -> d.Table:
    """One row per statement; its source links its row of claims.md."""
    rows = []
    for s in statements:
        source = d.Link(forest.section_words(s), f"claims.md#{s.id}")
        said = (s.statement, " (", source, ")")
        rows.append((said, verdict_cell(status[s.id]), decided_by(s, pub, rules)))
    header = ("statement (our paraphrase)", "verdict", "what decided it, at the largest size")
    return d.Table(header, tuple(rows), cls="summary")


def document(docs: Path) -> d.Document:
    cat = coverage.load()
    pub = coverage.Published.read(docs, cat)
    rules = answers.designs(docs)
    status = {s.id: headline.status(s, pub) for s in cat.statements}
    decided = [s for s in cat.statements if status[s.id].status in coverage.HEADLINES]
    tested = [
        s
        for s in cat.statements
        if s not in decided and headline.evidence(s, pub) and status[s.id].status != s.reason
    ]
    drawn = forest.effects(cat, pub, rules)
    doc = legend.page(
        "What the lab found",
        "What the lab found: the articles' statements, decided",
        "Every statement of the three articles that a study, a finding or a library test "
        "decides, with what decided it and the size it was seen at (a verdict holds there, not "
        "beyond). ",
        {
            "A model builder's choices, answered from these": "answers.md",
            "how a verdict is decided": "study.md#how-a-verdict-is-decided",
            "every statement with all its evidence": "claims.md",
        },
        ".",
    )
    doc.add(
        *legend.blocks(cat, pub, {e.unit for e in drawn} | {"log10 ratio", "share"}),
        _table(decided, status, pub, rules),
        d.Heading(2, "Tested, not decided", id="tested-not-decided"),
        d.Paragraph(
            "A claim or finding tests these, but the evidence is inconclusive, not testable "
            "here, or tests another size or measure (each row of claims.md says which)."
        ),
        _table(tested, status, pub, rules),
        d.Heading(2, "Every decided claim in one figure", id="forest"),
        d.Paragraph(forest.CAPTION),
        d.Figure(forest.TITLE, forest.png(drawn), FOREST),
    )
    return doc


def write(docs: Path) -> list[Path]:
    """``docs/results.md``, ``docs/results.html`` and the forest plot; returns their paths."""
    doc = document(docs)
    (fig,) = [b for b in d.walk(doc.blocks) if isinstance(b, d.Figure)]
    sub_dir(docs, Path(FOREST).parent.name)  # a symlink there is refused, not written through
    write_file(docs / FOREST, fig.png)
    return [*write_page(doc, docs / "results", toc_after=2), docs / FOREST]


def main(docs: str) -> int:
    """``normlab study --coverage [DOCS]``: ``claims.md``, the results and answers pages built
    on it, then every generated block of the other pages (``pages``: the ones that changed are
    printed); UsageError where ``DOCS`` holds no published data."""
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
        paths = [root / "claims.md", *write(root)]
        paths += write_page(answers_page.document(root), root / answers_page.PAGE, toc_after=2)
    for path in [*paths, *changed]:
        print(path)
    return 0
