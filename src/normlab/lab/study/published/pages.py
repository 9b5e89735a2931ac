"""No verdict written by hand: every verdict a page of ``docs/`` or the README shows stands in a
generated block, filled from the published data by ``normlab study --coverage``.

A block is an HTML comment pair naming what fills it (``blocks.KINDS``)::

    <!-- from-data claim paper:final-norm-needed -->**inconclusive** (…)<!-- /from-data -->

inline, in a line of prose or a table cell; or, its opening comment alone on a line, a block of
its own (a table). ``write`` fills every block of every page from the data as it is today;
``stale`` names the pages that differ from that; ``loose`` finds each verdict word that stands
outside a block and is not one of the few uses ``EXEMPT`` lists (the words' definitions, the
rule, a dated record of a past rule).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from normlab.lab.kit.io import write_file
from normlab.lab.study.published.blocks import KINDS, BlockError, Data

BLOCK = re.compile(r"<!-- from-data (?P<spec>[^\n]*?) -->(?P<body>.*?)<!-- /from-data -->", re.S)
FENCE = re.compile(r"(^ {0,3}```[^\n]*\n.*?^ {0,3}```[ \t]*$)", re.S | re.M)


def pages(docs: Path) -> list[Path]:
    """Every page that may show a verdict: ``docs/*.md`` and the README beside ``docs/``."""
    readme = docs.parent / "README.md"
    return sorted(docs.glob("*.md")) + ([readme] if readme.is_file() else [])


def fill(text: str, data: Data, where: str = "") -> str:
    """``text`` with every block filled from ``data``; a block whose body starts with a newline
    is a block of its own (blank lines around it), any other is inline (one line; in a table
    row its ``|`` escaped)."""

    def one(m: re.Match) -> str:
        kind, *args = m["spec"].split()
        if kind not in KINDS:
            raise BlockError(f"{where}: unknown block kind {kind!r} (one of {sorted(KINDS)})")
        try:
            body = KINDS[kind](data, args)
        except BlockError as e:
            raise BlockError(f"{where}: <!-- from-data {m['spec']} -->: {e}") from None
        if m["body"].startswith("\n"):
            body = f"\n\n{body}\n\n"
        elif m.string[: m.start()].rpartition("\n")[2].lstrip().startswith("|"):
            body = body.replace("|", "\\|")
        return f"<!-- from-data {m['spec']} -->{body}<!-- /from-data -->"

    # a block shown as an example, in a fenced code block, is text, not a block
    return "".join(p if i % 2 else BLOCK.sub(one, p) for i, p in enumerate(FENCE.split(text)))


def stale(docs: Path) -> dict[Path, str]:
    """The pages whose blocks differ from what they would be today, as ``write`` would write
    them."""
    data = Data.read(docs)
    texts = {page: page.read_text("utf-8") for page in pages(docs)}
    filled = {p: fill(text, data, p.name) for p, text in texts.items() if BLOCK.search(text)}
    return {p: text for p, text in filled.items() if texts[p] != text}


def write(docs: Path) -> list[Path]:
    """Fill every page's blocks; returns the pages that changed."""
    changed = stale(docs)
    for page, text in changed.items():
        write_file(page, text)
    return list(changed)


# --------------------------------------------------------------------------------------------
# verdict words outside the blocks

WORDS = re.compile(
    r"\b(?:does|do|did) not hold\b|\bholds?\b|\binconclusive\b|\bnot testable\b|\bmixed\b", re.I
)
# "holds a lock", "holds 512 MB", "hold `x`": the verb with an object is not a verdict
OBJECT = re.compile(
    r"\s+(?:(?:a|an|the|its|their|it|them|this|that|these|those|one|two|no|any|every|each|some|"
    r"both|several|his|her|our|your)\b|[0-9`$])",
    re.I,
)
QUOTE = "\"'“‘"  # a quoted word is the word mentioned, not a verdict

# The uses of a verdict word that are no verdict, page by page: a whole page the command writes,
# a section (its heading, up to the next heading) that defines the words or the rule, or a
# phrase. A test keeps every entry in use, so the list stays as short as the pages allow.
EXEMPT: dict[str, tuple[tuple[str, str], ...]] = {
    "claims.md": (("*", "written whole by normlab study --coverage from the data"),),
    "results.md": (("*", "written whole by normlab study --coverage from the data"),),
    "answers.md": (("*", "written whole by normlab study --coverage from the data"),),
    "study.md": (
        ("## Glossary", "defines the words"),
        ("## How a verdict is decided", "the rule"),
        ("### What the symmetric rule changed", "a dated record of the rule's change"),
        ("## One standard for rivals", "the standard's rule"),
        ("## Registered plans: confirmatory and exploratory verdicts", "the rule of exploratory"),
        ("### What changed since 7acb7c9", "the generated table's introduction"),
    ),
    "spec.md": (
        ("### `[[claims]]`: what is decided, and how", "the rules a spec may name"),
        ("### What a verdict carries", "the fields of claims.json"),
    ),
    "inspect.md": (("## The articles' statements at real scale", "the findings' rules"),),
    "README.md": (
        ("claims about normalization hold", "what the lab is for"),
        ("decides which claims hold", "what the command does"),
    ),
}


@dataclass(frozen=True)
class Loose:
    """A verdict word outside every block: where, and the line it stands in."""

    page: str
    line: int
    word: str
    text: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.word!r} in: {self.text.strip()[:160]}"


def hidden(text: str) -> str:
    """``text`` without its blocks, code (fenced and inline) and other HTML comments."""
    for pattern in (FENCE, BLOCK, re.compile(r"<!--.*?-->", re.S)):
        # each span cut out with its line breaks kept, so that line numbers stay
        text = pattern.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    return re.sub(r"`[^`\n]*`", "``", text)


def _sections(lines: list[str], raw: list[str], headings: set[str]) -> tuple[set[int], set[str]]:
    """The line indices of the sections whose heading (as written, ``raw``) is in ``headings``,
    and those found; a heading is a ``#`` line outside code (``lines``: ``hidden``)."""
    out, found, inside = set(), set(), False
    for i, line in enumerate(lines):
        if line.startswith("#"):
            inside = raw[i].strip() in headings
            found |= {raw[i].strip()} if inside else set()
        if inside:
            out.add(i)
    return out, found


def _is_verdict(line: str, m: re.Match) -> bool:
    word = m.group(0).lower()
    if word in ("hold", "holds") and OBJECT.match(line, m.end()):
        return False
    if word == "mixed" and re.match(r"[\s-]+precision", line[m.end() :]):
        return False
    return not (m.start() and line[m.start() - 1] in QUOTE)


def loose(page: str, text: str, used: set[tuple[str, str]] | None = None) -> list[Loose]:
    """Every verdict word of ``text`` (the page ``page``) outside its blocks and ``EXEMPT``;
    ``used`` collects the exemptions that applied."""
    used = set() if used is None else used
    exempt = EXEMPT.get(page, ())
    if any(what == "*" for what, _ in exempt):
        used.add((page, "*"))
        return []
    lines, raw = hidden(text).splitlines(), text.splitlines()
    skip, found = _sections(lines, raw, {what for what, _ in exempt if what.startswith("#")})
    used.update((page, heading) for heading in found)
    phrases = [what for what, _ in exempt if not what.startswith("#")]
    out = []
    for i, line in enumerate(lines):
        if i in skip:
            continue
        spans = [(m.start(), m.end(), p) for p in phrases for m in re.finditer(re.escape(p), line)]
        for m in WORDS.finditer(line):
            if not _is_verdict(line, m):
                continue
            within = [p for a, b, p in spans if a <= m.start() < b]
            if within:
                used.add((page, within[0]))
                continue
            out.append(Loose(page, i + 1, m.group(0), raw[i]))
    return out


def loose_words(docs: Path) -> tuple[list[Loose], list[tuple[str, str]]]:
    """Every loose verdict word in the pages, and the exemptions no page needs any more."""
    used: set[tuple[str, str]] = set()
    found = [w for p in pages(docs) for w in loose(p.name, p.read_text("utf-8"), used)]
    unused = [(page, what) for page, ex in EXEMPT.items() for what, _ in ex]
    return found, [e for e in unused if e not in used]
