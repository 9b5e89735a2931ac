"""What fills each generated block of a page (``pages``): a verdict, a table of verdicts, a
statement's headline, read from the published data and never retyped.

Every word comes from the data or the code that decides a headline: a claim's from its study's
``docs/data/<dir>/claims.json``, a finding's from ``docs/numerics-findings.json`` or
``docs/bench-findings.json``, a statement's headline from ``headline.status``, one claim across
studies from ``compare``; a verdict decided after its data was seen (``Published.standing``)
says so. A block names its kind and arguments (``KINDS``); a kind is a
function of the data and those arguments that returns Markdown.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from normlab.lab.kit import doc as d
from normlab.lab.study.published import answers, audit, compare, coverage, headline
from normlab.lab.study.report.claims_json import read_claims
from normlab.lab.verdict import Word
from normlab.lab.verdict.finding import interval_text


class BlockError(ValueError):
    """A block names a kind, a data directory, a claim, a finding or a statement that does not
    exist."""


@dataclass(frozen=True)
class Data:
    """Everything published: each data directory's claims.json (by the directory's name), the
    statements and the verdicts as ``coverage`` reads them."""

    docs: Path
    dirs: dict[str, dict]  # "paper-round3" -> its claims.json
    cat: coverage.Catalogue
    pub: coverage.Published

    @classmethod
    def read(cls, docs: Path) -> Data:
        cat = coverage.load()
        dirs = {where.name: doc for where, doc in coverage.data_dirs(docs)}
        return cls(docs, dirs, cat, coverage.Published.read(docs, cat))

    def claims(self, where: str) -> dict[str, dict]:
        """``docs/data/WHERE/claims.json``'s claims by name: a preset's study, or a study no
        preset ran, one level deeper (``advise/llama-3.2-1b``: the coverage reads it not)."""
        doc = self.dirs.get(where)
        path = self.docs / "data" / where / "claims.json"
        if doc is None and ".." not in Path(where).parts and path.is_file():
            doc = read_claims(path)  # bounded, checked to the leaves
        if doc is None:
            raise BlockError(f"no docs/data/{where}/claims.json")
        return {c["name"]: c for c in doc["claims"]}

    def claim(self, ref: str) -> dict:
        where, name = coverage.split_ref(ref)
        found = self.claims(where).get(name)
        if found is None:
            raise BlockError(f"{ref}: no claim {name!r} in docs/data/{where}/claims.json")
        return found

    def standing(self, ref: str) -> str:
        """`` (exploratory)`` where the published verdict of ``ref`` (a finding, or a claim in
        ``docs/data/WHERE``: the one its preset publishes) was decided after its data was seen,
        `` (replaced by …)`` where a later round's row replaces the claim's, else ``""``."""
        where, name = coverage.split_ref(ref)
        if where not in self.pub.findings:
            preset = (self.dirs.get(where) or {}).get("preset")
            row = self.pub.rows.get(preset, {}).get(name)
            if row is None:
                return ""
            if row.where != where:
                return f" (replaced by {row.where})"
            ref = f"{preset}:{name}"
        return "" if self.pub.standing(ref).confirmatory else " (exploratory)"

    def finding(self, ref: str) -> dict:
        found = self.pub.finding(ref)
        if found is None:
            raise BlockError(f"{ref}: no such published finding")
        return found

    def statement(self, sid: str) -> coverage.Statement:
        if (found := self.cat.statement(sid)) is None:
            raise BlockError(f"{sid}: no such statement in statements.toml")
        return found


# --------------------------------------------------------------------------------------------
# a claim's or a finding's verdict in words


def _part(p: dict, shown: str | None = None) -> str:
    """``label: +0.23 [+0.07, +0.38], n=24, holds`` (a part without an effect: its verdict);
    ``shown``: the interval as its report writes it (a finding's: ``interval_text``)."""
    if p.get("effect") is None:
        return f"{p['part']}: {p['verdict']}"
    return f"{p['part']}: {shown or interval_text(p)}, {p['verdict']}"


def detail(c: dict) -> str:
    """What decided a claim: the engine's reason (its interval against δ, a control, too few
    seeds), or a compound's parts each with its interval and verdict."""
    if c["verdict"] != Word.NOT_TESTABLE and c.get("parts"):
        shown = {label: e.text() for label, e in compare.effects(c).items()}
        return "; ".join(_part(p, shown.get(p["part"])) for p in c["parts"])
    return c["why"]


def bold(word: str) -> str:
    return f"**{word}**"


# --------------------------------------------------------------------------------------------
# the kinds

KINDS: dict[str, Callable[[Data, list[str]], str]] = {}


def kind(usage: str, least: int = 0, most: int | None = 0):
    """Register a function of the data and a block's arguments as the kind ``usage`` names
    (its first word), taking ``least`` to ``most`` arguments (None: any number)."""

    def register(fill: Callable[[Data, list[str]], str]) -> Callable[[Data, list[str]], str]:
        @functools.wraps(fill)
        def checked(data: Data, args: list[str]) -> str:
            if not least <= len(args) <= (len(args) if most is None else most):
                raise BlockError(f"expected {usage}, got {' '.join(args)!r}")
            return fill(data, args)

        KINDS[usage.split()[0]] = checked
        return checked

    return register


@kind("claims DIR [NAME ...]", 1, None)
def claims_table(data: Data, args: list[str]) -> str:
    """``claims DIR [NAME ...]``: the claims of ``docs/data/DIR/claims.json`` (or those named,
    in that order), each with its verdict, what decided it and the sizes it was tested at."""
    claims = data.claims(args[0])
    names = args[1:] or list(claims)
    rows = []
    for name in names:
        c = data.claim(f"{args[0]}:{name}")
        said = bold(c["verdict"]) + data.standing(f"{args[0]}:{name}")
        rows.append([f"`{name}`", said, detail(c), coverage.scope(c)])
    return d.md_table(["claim", "verdict", "what decided it", "tested at"], rows)


@kind("verdict DIR:NAME [PART] or verdict COMMAND:NAME [PART]", 1, None)
def verdict(data: Data, args: list[str]) -> str:
    """``verdict REF [PART]``: one word: the verdict of a claim (``DIR:NAME``) or a finding
    (``numerics:NAME``, ``bench:NAME``), or of its part labelled ``PART``, for a line of prose
    that says what it means."""
    ref, part = args[0], " ".join(args[1:])
    is_finding = coverage.split_ref(ref)[0] in data.cat.findings
    entry = data.finding(ref) if is_finding else data.claim(ref)
    if not part:
        return bold(entry["verdict"]) + data.standing(ref)
    found = [p for p in entry.get("parts") or [] if p["part"] == part]
    if not found:
        labels = [p["part"] for p in entry.get("parts") or []]
        raise BlockError(f"{ref}: no part {part!r} (its parts: {labels})")
    return bold(found[0]["verdict"])


@kind("statement ID", 1, 1)
def statement(data: Data, args: list[str]) -> str:
    """``statement ID``: a statement's headline (``headline.status``)."""
    return _headline(data, data.statement(args[0]))


def _headline(data: Data, s: coverage.Statement) -> str:
    """A statement's headline as every page shows it: the verdict (each size's where sizes
    disagree; exploratory where it was decided after its data was seen), or why it has none."""
    d = headline.status(s, data.pub)
    if d.status not in coverage.HEADLINES:
        return coverage.NOT_DECIDED[d.status][0]
    said = bold(d.status)
    if d.status == Word.DEPENDS:
        said += ": " + "; ".join(f"{w} at {size}" for size, w in d.sizes)
    return said + (" (exploratory)" if d.exploratory else "")


def _tested_at(data: Data, s: coverage.Statement) -> str:
    """Where the evidence that tests ``s`` as stated was measured: each claim's size, each
    finding by name, or the library's tests."""
    where = [
        answers.size_words(e.size) if e.kind == "claim" else f"{e.ref.replace(':', ' finding `')}`"
        for e in headline.evidence(s, data.pub)
    ]
    if headline.tests_decide(s):
        where.append("library tests, in CI")
    return "; ".join(dict.fromkeys(where)) or "–"


@kind("statements ID ...", 1, None)
def statements_table(data: Data, args: list[str]) -> str:
    """``statements ID ...``: those statements with their headlines and where they were
    tested."""
    rows = []
    for sid in args:
        s = data.statement(sid)
        said = f"{s.statement} ({s.article} §{s.section.rstrip('abcdefgh')})"
        rows.append([said, _headline(data, s), _tested_at(data, s)])
    return d.md_table(["statement (source article)", "verdict", "tested at"], rows)


def _rules(command: str) -> dict:
    """The findings ``normlab numerics``, ``bench --findings`` or ``vision`` decides, by name."""
    if command == "numerics":
        from normlab.lab.numerics.findings import FINDINGS

        return FINDINGS
    if command == "vision":
        from normlab.lab.vision.cnn_findings import Plan

        return {f.finding.name: f.finding for f in Plan().findings()}
    from normlab.lab.bench.cost_findings import all_findings

    return {f.name: f for f in all_findings()}


@kind("findings-table COMMAND", 1, 1)
def findings_table(data: Data, args: list[str]) -> str:
    """``findings-table COMMAND``: the findings table ``normlab numerics`` or ``normlab bench
    --findings`` writes, by its own renderer (``numerics.tables``), of the published findings:
    each finding's verdict and every part's value and verdict."""
    from normlab.lab.numerics import tables

    if args[0] not in data.pub.findings:
        raise BlockError(f"expected findings-table COMMAND, one of {sorted(data.pub.findings)}")
    published = list(data.pub.findings[args[0]].values())
    return d.md_table(tables.FINDINGS_HEADER, tables.table_rows(published, _rules(args[0])))


@kind("parts COMMAND:NAME ...", 1, None)
def parts_table(data: Data, args: list[str]) -> str:
    """``parts COMMAND:NAME ...``: findings over the same parts (sizes) side by side, one row
    per part, each cell the part's value and verdict."""
    found = [data.finding(ref) for ref in args]
    labels = list(dict.fromkeys(p["part"] for f in found for p in f["parts"]))
    cells = [{p["part"]: f"{interval_text(p)}, {p['verdict']}" for p in f["parts"]} for f in found]
    rows = [[label, *(c.get(label, "–") for c in cells)] for label in labels]
    header = ["part", *(f"`{f['name']}`: {bold(f['verdict'])}" for f in found)]
    return d.md_table(header, rows)


@kind("checks COMMAND:NAME", 1, 1)
def checks_table(data: Data, args: list[str]) -> str:
    """``checks COMMAND:NAME``: a finding's control and rate checks as published beside it
    (``normlab vision``): per part, its value and verdict at the shared rate and at each
    check's, and each rate's control."""
    (ref,) = args
    f = data.finding(ref)
    if "rate_checks" not in f:
        raise BlockError(f"{ref}: published without rate checks")
    rates = [("shared", f["parts"], f["control"])]
    rates += [(f"×{c['factor']:g}", c["parts"], c["control"]) for c in f["rate_checks"]]
    cell = lambda p: f"{interval_text(p)}, {p['verdict']}"  # noqa: E731
    rows = [
        [p["part"], *(cell(next(q for q in ps if q["part"] == p["part"])) for _, ps, _ in rates)]
        for p in f["parts"]
    ]
    rows.append(["control: every arm trains", *(bold(c["verdict"]) for _, _, c in rates)])
    verdicts = [bold(f["verdict"]), *(bold(c["verdict"]) for c in f["rate_checks"])]
    rows.append(["the finding", *verdicts])
    return d.md_table(["part", *(f"lr {label}" for label, _, _ in rates)], rows)


@kind("compare")
def across(data: Data, args: list[str]) -> str:
    """``compare``: every claim more than one published study decides, as ``normlab study
    --compare`` prints it, over the rows each study publishes today (a later round's rows
    replace its preset's)."""
    studies = []
    for where, doc in data.dirs.items():
        rows = data.pub.rows[doc["preset"]]  # the row each claim's preset publishes
        claims = [c for c in doc["claims"] if rows[c["name"]].where == where]
        studies.append({**doc, "claims": claims, "label": compare.label(doc), "where": where})
    studies.sort(key=lambda s: (s["preset"], s["where"]))
    rows, changes = compare.compare(studies)
    text = d.md_table(compare.HEADER, rows)
    return text + ("\n\nSign changes:\n\n" + "\n".join(changes) if changes else "")


@kind("agreement DIR DIR...", 2, None)
def agreement(data: Data, args: list[str]) -> str:
    """``agreement DIR DIR...``: how well these published studies (runs of one preset on
    different seed blocks) agree, and every claim more than one of them decides, as ``normlab
    study --compare`` prints it for their directories."""
    studies = []
    for where in args:
        doc = data.dirs.get(where)
        if doc is None:
            raise BlockError(f"agreement: no docs/data/{where}/claims.json")
        studies.append({**doc, "label": compare.label(doc)})
    return compare.studies_markdown(studies).rstrip("\n")


@kind("answers")
def answers_table(data: Data, args: list[str]) -> str:
    """``answers``: the answers for a model builder (``answers_page``), each with its n and the
    statement it rests on, links from the repository's root (the README's first table)."""
    from normlab.lab.study.published import answers_page

    read_ = answers_page.read(data.docs, data.pub)
    return d.markdown(answers_page.table(read_, data.cat, "docs/", compact=True))


@kind("figures DIR", 1, 1)
def figures(data: Data, args: list[str]) -> str:
    """``figures DIR``: every image in ``docs/DIR``, a row per claim (its name: the file's stem
    before its last ``-``, which names the plot), each plot linked."""
    (where,) = args
    pngs = sorted((data.docs / where).glob("*.png"))
    if not pngs:
        raise BlockError(f"figures: no image in docs/{where}")
    by: dict[str, list[str]] = {}
    for p in pngs:
        claim, _, plot = p.stem.rpartition("-")
        by.setdefault(claim, []).append(f"[{plot.replace('_', ' ')}]({where}/{p.name})")
    return d.md_table(["claim", "plots"], [[f"`{c}`", " · ".join(v)] for c, v in by.items()])


@kind("changes")
def changes(data: Data, args: list[str]) -> str:
    """``changes``: every statement whose status differs from the frozen earlier reading
    (``audit.changes``)."""
    decisions = {s.id: headline.status(s, data.pub) for s in data.cat.statements}
    return d.markdown(audit.changes(data.cat, decisions, data.docs))
