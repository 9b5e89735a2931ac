"""``docs/claims.md``, the page: every statement of the three source articles with where the lab
decides it and its headline (``coverage``: the statements and how a headline is decided),
rendered from the published verdicts; ``normlab study --coverage`` writes it with the results
page (``results``)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from normlab.lab.kit import doc as d
from normlab.lab.study.published import audit
from normlab.lab.study.published.compare import effect_text
from normlab.lab.study.published.coverage import (
    HEADLINES,
    NOT_DECIDED,
    Catalogue,
    Published,
    Statement,
    load,
    scope,
    split_ref,
)
from normlab.lab.study.published.headline import Decision, finding_verdict, status, tests_decide
from normlab.lab.verdict import CLAIM_WORDS, Word
from normlab.lab.verdict.finding import interval_text


def _claim_line(ref: str, cat: Catalogue, verdicts) -> str:
    preset, name = split_ref(ref)
    c = verdicts.get(preset, {}).get(name)
    if c is None and preset in verdicts:
        return f"{preset} `{name}`: {NOT_RUN} ({_report(preset, cat)})"
    if c is None:
        return f"{preset} `{name}`: {_unpublished(preset, cat)}"
    line = f"{preset} `{name}`: **{c['verdict']}**, {effect_text(c)}; at {scope(c)}"
    # Why a compound claim is undecided (which parts), or which control failed.
    if c["verdict"] not in (Word.HOLDS, Word.DOES_NOT_HOLD) and (
        c.get("parts") or c.get("controls")
    ):
        line += f" ({c['why']})"
    return line


UNPUBLISHED = "published as prose only; claims.json arrives when rerun"
NOT_RUN = "not run yet: added to the preset after its published study"


def _report(preset: str, cat: Catalogue) -> str:
    """A link to the preset's published report."""
    return _link(cat.reports[preset]["report"])


def _link(target: str) -> str:
    """A Markdown link to a docs/ page (and section), named by the page."""
    return f"[{target.partition('#')[0]}]({target})"


def _unpublished(preset: str, cat: Catalogue) -> str:
    return f"{cat.reports[preset].get('unpublished', UNPUBLISHED)} ({_report(preset, cat)})"


def _finding_line(s: Statement, ref: str, cat: Catalogue, pub: Published) -> str:
    """The finding's verdict with every part's (or the named parts') effect and interval."""
    command, name = split_ref(ref)
    where = cat.findings[command]
    report = _link(where["report"])
    f = pub.finding(ref)
    if f is None:
        return f"{command} finding `{name}`: not in {where['data']} ({report})"
    parts = s.parts_of(f)
    ns = {p.get("n") for p in parts}
    shown = "; ".join(_part(p, len(ns) > 1) for p in parts)
    if len(ns) == 1 and None not in ns:
        shown += f" (n={ns.pop()} each)"
    if f.get("why"):  # what overturned its parts' verdict (a control, a rate check)
        shown = f"{f['why']}; its parts at the shared rate: {shown}"
    if not s.parts:
        return f"{command} finding `{name}`: **{f['verdict']}**; {shown}; {report}"
    return (
        f"{command} finding `{name}`, the parts this statement is about: "
        f"**{finding_verdict(s, f)}**; {shown}; the whole finding: {f['verdict']}, {report}"
    )


def _part(p: dict, with_n: bool) -> str:
    """``label +0.52 [+0.50, +0.54] holds`` (with ``, n=8`` where the parts' n differ)."""
    if p.get("effect") is None:
        return f"{p['part']}: {p['verdict']} ({p['why']})"
    text = interval_text(p)
    return f"{p['part']} {text if with_n else text.rpartition(', n=')[0]} {p['verdict']}"


def _where(s: Statement, cat: Catalogue, pub: Published) -> str:
    lines = [_mark(ref, _claim_line(ref, cat, pub.claims), pub) for ref in s.claims]
    lines += [_mark(ref, _finding_line(s, ref, cat, pub), pub) for ref in s.findings]
    lines += [f"*related, not the headline:* {_related(s, r, cat, pub)}" for r in s.related]
    if tests_decide(s):
        lines += [f"test `{t}` (passes in CI): **{s.by_test}**" for t in s.tests]
    else:
        lines += [f"also checked by the test `{t}`" for t in s.tests]
    if s.note:
        lines.append(f"*Note:* {s.note}")
    return "<br>".join(lines) or "–"


def _related(s: Statement, ref: str, cat: Catalogue, pub: Published) -> str:
    if split_ref(ref)[0] in cat.findings:
        return _finding_line(Statement(s.id, s.article, s.section, s.statement), ref, cat, pub)
    return _claim_line(ref, cat, pub.claims)


def _mark(ref: str, line: str, pub: Published) -> str:
    """A line of headline evidence, marked where its verdict was decided after its data."""
    published = pub.claim(ref) if split_ref(ref)[0] in pub.rows else pub.finding(ref)
    if published is None:
        return line
    why = pub.standing(ref).why
    return f"{line} *(exploratory: {why})*" if why else line


def _status(s: Statement, d: Decision) -> str:
    """The headline with the sizes it rests on (each size's verdict where they differ), how
    many claims and findings said each word where they differ, and whether it is exploratory."""
    parts = f" ({', '.join(f'{n} {w}' for w, n in d.counts)})" if len(d.counts) > 1 else ""
    if d.status in HEADLINES:
        if d.status == Word.DEPENDS:
            sizes = ": " + "; ".join(f"{w} at {size}" for size, w in d.sizes)
        else:
            sizes = " at " + "; ".join(size for size, _ in d.sizes) if d.sizes else ""
        explore = f" — *exploratory: {d.exploratory}*" if d.exploratory else ""
        return f"**{d.status}**{sizes}{parts}{explore}"
    short = NOT_DECIDED[d.status][0]
    why = f" — {s.why}" if s.why and d.status == s.reason else ""
    why = f" — {s.scale}" if d.status == "scale" else why
    if d.status == Word.INCONCLUSIVE and len(d.sizes) > 1:
        why = " — " + "; ".join(f"{w} at {size}" for size, w in d.sizes)
    return f"not decided: {short}{parts}{why}"


# --------------------------------------------------------------------------------------------
# the page


def render(docs: Path) -> str:
    """``docs/claims.md``: the summary, the published studies, one table per article, and the
    preset claims that go beyond the articles."""
    cat = load()
    pub = Published.read(docs, cat)
    decisions = {s.id: status(s, pub) for s in cat.statements}
    page = d.Document("The articles' statements and what the lab decided")
    page.add(
        d.Heading(1, page.title),
        d.Paragraph(
            "Every statement of the three source articles (000 *LayerNorm vs RMSNorm*, 001 "
            "*RMSNorm*, 003 *BatchNorm, LayerNorm, RMSNorm, Pre-LN/Post-LN*), paraphrased, with "
            "where the lab decides it and the verdict its published study measured: effect [95 % "
            "interval], n, and the sizes it was tested at (a verdict holds at those sizes, not "
            "beyond); for a `numerics`/`bench` finding, each part's effect [95 % interval], n and "
            "verdict. How a verdict is decided: [study.md](study.md#how-a-verdict-is-decided); a "
            "finding: [numerics.md](numerics.md#the-articles-statements-decided)."
        ),
        d.Paragraph(
            "A statement's headline is decided by every claim and finding that tests it *as the "
            "article states it* (its measure and setting), at whatever size the lab ran it; "
            "evidence with another measure is listed as *related*, never as the headline. The "
            "evidence is grouped by size (a model's width and depth; a numerics/bench finding is "
            "op-level), and a claim that is not testable here (its control cannot pass there, or "
            "it does not meet the standard for rivals) is listed, not counted. At each size the "
            "claims combine as one: **holds** only if every one holds, **does not hold** only if "
            "none does, **mixed** if some hold and some do not, undecided while any is "
            "inconclusive. Across sizes: agreeing sizes give that verdict *at* those sizes, "
            "decided sizes that disagree **depends on size** (each size's verdict shown), and an "
            "undecided size leaves the headline undecided. No correction across a statement's "
            "claims is needed: a headline that needs all of them to agree is an intersection-union "
            "test, each at 95 %. A statement about a scale the lab does not reach is not testable "
            "here (scale). A verdict or headline decided after its data was seen is marked "
            "*exploratory* (below)."
        ),
        d.Paragraph(
            "Generated by `normlab study --coverage` from the statements "
            "(`src/normlab/lab/study/statements.toml`) and the published verdicts "
            "(`docs/data/<preset>/claims.json`, `docs/numerics-findings.json`, "
            "`docs/bench-findings.json`): edit those, not this file."
        ),
        d.Heading(2, "Summary"),
        *_summary(cat, decisions),
        d.Heading(2, "Published studies and findings"),
        _studies(cat, pub.claims),
        _findings(cat, pub.findings),
    )
    for article, info in cat.articles.items():
        section = info["sections"]
        # each row an anchor of its statement's id: the answers and results link to it
        rows = [
            [f'<a id="{s.id}"></a>{section[s.section]}', s.statement, _status(s, decisions[s.id])]
            + [_where(s, cat, pub)]
            for s in cat.statements
            if s.article == article
        ]
        header = ["section", "statement (our paraphrase)", "status", "where decided"]
        page.add(d.Heading(2, f"{article}: {info['title']}"), d.dense_table(header, rows))
    page.add(
        d.Heading(2, "Claims beyond the articles"),
        d.Paragraph(
            "Preset claims from later papers, decided by the lab though no statement of the "
            "articles names them:"
        ),
        d.dense_table(
            ["claim: verdict", "from"],
            [[_claim_line(ref, cat, pub.claims), src] for ref, src in cat.beyond.items()],
        ),
        d.Heading(2, "Decided after the data was seen"),
        d.Paragraph(
            "A verdict is *exploratory* when the design that decided it was fixed after its data "
            "began, or on a seed block already seen; a headline, when its test plan was. Each "
            "design and plan is registered with the commit that fixed it "
            "(`docs/data/registry.json`, `normlab study --register`); a fresh seed block confirms."
        ),
        audit.exploratory(cat, pub, decisions),
        d.Heading(2, "One standard for rivals"),
        d.Paragraph(
            "Two trained recipes are compared at one shared learning rate with a registered check: "
            "the same claim at ×0.3 and ×3 that rate on the same seeds; a check that decides the "
            "opposite makes the claim not testable here, and a claim without the check does not "
            "meet the standard ([study.md](study.md#one-standard-for-rivals)). Each claim of the "
            "presets, the standard its design meets, and the one its published verdict met:"
        ),
        audit.rival_standard(cat, pub),
        d.Heading(2, f"Changed since {audit.BEFORE.split('-')[-1].removesuffix('.json')}"),
        d.Paragraph(
            "Every statement whose status differs from the reading frozen in "
            f"`docs/{audit.BEFORE}` (before the headlines over sizes, the standard for rivals and "
            "the registered plans of issue 69):"
        ),
        audit.changes(cat, decisions, docs),
    )
    return d.to_markdown(page)


def _summary(cat: Catalogue, decisions: dict[str, Decision]) -> list[d.Block]:
    n = len(cat.statements)
    per = Counter(s.article for s in cat.statements)
    status = Counter(d.status for d in decisions.values())
    decided = [d for d in decisions.values() if d.status in HEADLINES]
    by = Counter(d.by for d in decided)
    mixed = status[Word.MIXED]
    mixed = f", {mixed} mixed (some claims hold, others do not)" if mixed else ""
    if status[Word.DEPENDS]:
        mixed += f", {status[Word.DEPENDS]} depend on size (decided differently at two sizes)"
    explored = sum(bool(d.exploratory) for d in decided)
    if explored:
        mixed += f"; {explored} of them exploratory (decided after the data was seen)"
    sources = ", ".join(f"{by[k]} {words}" for k, words in DECIDED_BY.items() if by[k])
    undecided: list = []
    for k, (_, words) in NOT_DECIDED.items():
        if status[k]:
            undecided.append(f"{status[k]}: {words}")
        if k == "not-testable-here":
            whys = Counter(s.why for s in cat.statements if decisions[s.id].status == k)
            undecided.append(d.Items(tuple(f"{n}: {why}" for why, n in whys.items())))
    items = (
        f"**{len(decided)} decided**: **{status[Word.HOLDS]} hold**, "
        f"**{status[Word.DOES_NOT_HOLD]} do not hold**{mixed}; {sources}.",
        f"**{n - len(decided)} not decided**:",
        d.Items(tuple(undecided)),
    )
    lead = f"**{n} statements** ({', '.join(f'{a}: {per[a]}' for a in cat.articles)})."
    return [d.Paragraph(lead), d.Items(items)]


# What decided a statement (``Decision.by``), in the summary's words.
DECIDED_BY = {
    "claim": "by a preset claim's published verdict",
    "finding": "by a numerics/bench finding's published verdict",
    "claim and finding": "by both",
    "test": "by a library test alone",
}


def _counts(verdicts) -> str:
    counts = Counter(v["verdict"] for v in verdicts)
    return ", ".join(f"{k} {counts[k]}" for k in CLAIM_WORDS if counts[k])


def _studies(cat: Catalogue, verdicts) -> d.Table:
    from normlab.lab.study.spec import load_builtin

    rows = []
    for preset in cat.reports:
        n = len(load_builtin(preset, whole=True).claims)
        if preset in verdicts:
            data = f"`data/{preset}/claims.json`: {_counts(verdicts[preset].values())}"
        else:
            data = _unpublished(preset, cat)
        rows.append([f"`{preset}`", n, _report(preset, cat), data])
    return d.dense_table(["preset", "claims", "report", "verdicts as data"], rows)


def _findings(cat: Catalogue, findings) -> d.Table:
    """The op-level findings ``normlab numerics`` and ``normlab bench --findings`` published."""
    rows = []
    for command, where in cat.findings.items():
        got = findings.get(command, {})
        data = f"`{where['data']}`: {_counts(got.values())}" if got else "not published"
        rows.append([f"`{command}`", len(got), _link(where["report"]), data])
    return d.dense_table(["command", "findings", "report", "verdicts as data"], rows)


HELP = (
    "write DOCS/claims.md and the results page DOCS/results.md, .html with its forest plot "
    "(default: docs, run from the repository's root): which statements of the source articles "
    "the lab decides, with the verdicts published in DOCS/data/<preset>/claims.json and "
    "DOCS/numerics-findings.json, DOCS/bench-findings.json; and exit"
)
