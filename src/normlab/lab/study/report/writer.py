"""``DIR/report.html`` (self-contained: plots embedded), ``DIR/report.md`` and ``DIR/claims.json``
(the same verdicts, effects, intervals and n, for programs: ``claims_json.py``).

The report is built once as a document (``normlab.lab.kit.doc``) and rendered to HTML and Markdown.
Order: the summary (one row per claim: title and source, the verdict, one sentence of what was
seen, the scope), how verdicts are decided (what every rule shares, said once), then per claim
its plots, its parts, controls and seeds and its rule in words, the machinery folded away; then
the arms, their configs and the environment, folded (``arms.py``).
"""

from __future__ import annotations

from pathlib import Path

from normlab.lab.kit import doc as d
from normlab.lab.kit.io import sub_dir, write_file, write_json, write_page
from normlab.lab.study.decide import H_TEXT, Claim
from normlab.lab.study.report import claim_text
from normlab.lab.study.report.arms import arms_section, fmt
from normlab.lab.study.report.claims_json import claims_json, family, scope
from normlab.lab.study.report.plots import PLOTS
from normlab.lab.verdict import BOUND_TEXT, EXPECT, LEVEL, POWER, Verdict, Word

COLORS = {
    Word.HOLDS: "#1a7f37",
    Word.DOES_NOT_HOLD: "#cf222e",
    Word.MIXED: "#8250df",  # a statement's headline (the results page)
    Word.DEPENDS: "#0969da",  # a statement's headline that differs by size
    Word.INCONCLUSIVE: "#9a6700",
    Word.NOT_TESTABLE: "#57606a",
}
HOW = "how-verdicts-are-decided"  # the anchor of the section every claim links to

# One line in every study report: the report lives outside the repository.
REPORT_LINK = (
    "Which statements of the three source articles the claims of every preset decide, with "
    "their published verdicts: docs/claims.md in the normlab repository."
)


def badge(status: str) -> d.Badge:
    return d.Badge(status, COLORS.get(status, "#57606a"))


def format_table(verdicts, plateau_h: float | None = None) -> str:
    """The summary as a Markdown table: what a study prints at its end."""
    rows = [
        [f"**{c.name}**", f"**{v.status}**", claim_text.sentence(c, v, plateau_h)]
        for c, v in verdicts
    ]
    return d.md_table(["claim", "verdict", "what was seen"], rows)


# --------------------------------------------------------------------------------------------
# the document


def _plots(claim: Claim, verdict: Verdict, results, timings, plot_dir: Path) -> list[d.Figure]:
    out = []
    for kind in claim.plots:
        title, fn = PLOTS[kind]
        png = fn(results, claim, verdict, timings)
        if png is not None:
            fname = f"{claim.name}-{kind}.png"
            write_file(plot_dir / fname, png)
            out.append(d.Figure(title, png, f"plots/{fname}"))
    return out


def _verdicts(verdicts) -> list[d.Block]:
    """The first screen: every claim's verdict and its statement, one line each (the statement
    cut short, linked to the claim's section); what was seen follows in the summary."""
    rows = tuple(
        ((badge(v.status),), (d.Link(claim_text.short_statement(c.statement), f"#{c.name}"),))
        for c, v in verdicts
    )
    return [
        d.Heading(2, "Verdicts", "verdicts"),
        d.Table(("verdict", "statement (its section)"), rows, cls="summary verdicts"),
    ]


def _summary(study, verdicts, h: float | None) -> list[d.Block]:
    rows = []
    for c, v in verdicts:
        # the statement in words leads; the claim's id links to its section
        source = d.Muted(claim_text.short_source(c.source))
        statement = (c.statement, " ", d.Link(c.name, f"#{c.name}"), " ", source)
        seen = (
            claim_text.sentence(c, v, h),
            " ",
            d.Muted(claim_text.short_scope(scope(study, c))),
        )
        rows.append((statement, (badge(v.status),), seen))
    header = ("statement (claim)", "verdict", "what the lab saw (scope)")
    return [
        d.Heading(2, "Summary", "summary"),
        d.Table(header, tuple(rows), cls="seen"),
        d.Paragraph(
            (
                REPORT_LINK,
                " The words used here (δ, n, interval, Holm, not testable here): ",
                d.Link("glossary", "#glossary"),
                ".",
            ),
            muted=True,
        ),
    ]


def _how(verdicts, h: float | None) -> list[d.Block]:
    """What every rule shares, said once."""
    fam = family(verdicts)
    alpha = 1 - LEVEL
    items = [
        "Pairing: seed i gives every arm the same data order and, where the shapes agree, the "
        "same initial weights, so arms are compared seed by seed: a rule computes one value v "
        "per seed from the runs of that seed.",
        f"Seeds are never dropped silently: {BOUND_TEXT}.",
        f"The statistic: the mean of v over the n paired seeds with a {LEVEL:.0%} Student-t "
        f"interval (scipy.stats), and the detectable effect at n: the true effect n seeds find "
        f"with {POWER:.0%} power. δ is the smallest effect that matters, fixed before the runs. "
        "A rule whose seeds have heavy tails (a BatchNorm model that blows up in eval mode) says "
        "so in its spec and uses the 20 % trimmed mean with Yuen's interval instead, or, where "
        "even that is moved by the tails, the median with its distribution-free interval (the "
        "order statistics the sign test inverts).",
        f"The decision, by what the claim expects. Directed (>0 or <0): {EXPECT['>0']}. "
        f"Differs (≠0): {EXPECT['≠0']}. As good as (≈0): {EXPECT['≈0']}.",
        f"Compound claims correct their looks by Holm's step-down: with m parts not yet "
        f"confirmed, each is tested with its interval at 1 − {alpha:.0%}/m; those that reach the "
        "decision are confirmed, m shrinks, and the rest are tested again. 'All of' holds iff "
        "every part holds (each at 95 %) and does not hold iff some part does not after Holm; "
        "'any of' is the reverse. A part that reaches a decision alone but not after the "
        "correction is inconclusive, and says so.",
        "Controls: 'X fails' means something only where a recipe trains in the same setting. "
        f"If a claim's control does not hold, the verdict is '{Word.NOT_TESTABLE}' with the "
        "control's result as the reason, never 'does not hold'. So is a claim the study runs "
        "too few seeds for to have any interval (one; a median under 6): no outcome of its "
        "runs could decide it.",
        "Timing claims are decided over fresh processes of a serial phase after the training "
        "(one after the other, nothing else of the study running; in each, interleaved ABBA "
        "rounds, the process's value the median of its rounds), not over seeds: the 20 % "
        "trimmed mean over processes with Yuen's interval, so the interval covers run-to-run "
        "variation and a stalled process moves neither.",
        f"Error rates: {fam['text']}",
        "Scope: every verdict holds at the size it was found at (width d, blocks, tokens seen "
        "= steps × B × T), not beyond.",
    ]
    if h is not None:
        items.insert(
            4, f"H = {h:.3f} nats/byte, the plateau bar of the 'fails'/'trains' rules: {H_TEXT}."
        )
    glossary = tuple((d.Strong(t), ": ", *d.from_markdown(x)) for t, x in claim_text.GLOSSARY)
    return [
        d.Heading(2, "How verdicts are decided", HOW),
        d.Items(tuple(items)),
        d.Heading(2, "Glossary", "glossary"),
        d.Items(glossary),
    ]


def _estimate_row(label: str, rule, v: Verdict) -> tuple:
    e = v.estimate
    return (
        label or "–",
        (badge(v.status),),
        claim_text.effect_text(e, rule),
        str(e.n) if e else "–",
        f"{rule.delta:.3g}",
        f"{e.mde:.3g}" if e and e.mde is not None else "–",
        v.correction or "–",
    )


PARTS_HEADER = ("part", "verdict", "effect [95 % interval]", "n", "δ", "detectable at n", "Holm")


def _claim(study, c: Claim, v: Verdict, figures: list[d.Figure], h) -> d.Section:
    parts = zip(c.rule.parts(), v.parts or (("", v),), strict=True)
    estimates = tuple(_estimate_row(label, rule, pv) for (label, rule), (_, pv) in parts)
    blocks: list[d.Block] = [
        d.Heading(2, (c.name, " ", badge(v.status)), c.name),
        d.Paragraph((c.statement, " ", d.Muted(f"— {c.source}"))),
        d.Paragraph((d.Strong("Seen:"), " ", claim_text.sentence(c, v, h))),
        *figures,
        d.Table(PARTS_HEADER, estimates),
    ]
    controls = list(v.controls) + [
        (f"[{n}] {lab}", cv) for n, p in v.parts for lab, cv in p.controls
    ]
    if controls:
        rows = tuple(
            (label, (badge(cv.status),), claim_text.interval(cv.estimate), _seeds(cv))
            for label, cv in controls
        )
        blocks.append(d.Table(("control", "verdict", "effect [95 % interval]", "seeds"), rows))
    seeds = v.seeds.text() if v.seeds else "decided over timing rounds, not seeds"
    tested = (d.Strong("Tested at:"), f" {claim_text.compact_size(scope(study, c))}.")
    blocks.append(d.Paragraph((d.Strong("Seeds:"), f" {seeds}; {c.seeds} per arm. ", *tested)))
    lines, text = claim_text.rule_words(c)
    how = d.Link("How verdicts are decided", f"#{HOW}")
    rule = (d.Strong("Rule (fixed before the runs):"), f" {text} ", how)
    blocks += [d.Paragraph(rule), d.Items(tuple(lines))]
    why = [("claim", v.why)] + [(f"[{n}]", p.why) for n, p in v.parts]
    why += [(f"control '{label}'", cv.why) for label, cv in controls]
    means = tuple((k, fmt(x)) for k, x in v.means.items())
    numbers = [
        d.Table(("what", "why"), tuple(why)),
        d.Table(("mean over the paired seeds", "value"), means),
    ]
    if v.correction:
        numbers.append(d.Paragraph(f"Correction: {v.correction}."))
    blocks.append(d.Details("The numbers behind the verdict", tuple(numbers)))
    return d.Section(c.name, tuple(blocks))


def _seeds(v: Verdict) -> str:
    return v.seeds.text() if v.seeds else "–"


def _summary_line(study, results, meta) -> str:
    n = sum(map(len, results.values()))
    cpu = [x.summary.get("cpu_s") for arm in results.values() for x in arm.values()]
    cpu_s = f" ({sum(cpu):.0f} CPU s in the runs)" if cpu and None not in cpu else ""
    reused = meta.reused_runs
    again = f"; {reused} run(s) reused from an earlier invocation (--resume)" if reused else ""
    decided = (
        f" Decided again from its results on {meta.decided_again} with {meta.decided_with} "
        "(nothing retrained)."
        if meta.decided_again
        else ""
    )
    return (
        f"{study.description}. {n}/{len(study.runs())} runs (seed block "
        f"{meta.seed_block}), {meta.wall_s:.0f} s wall{cpu_s}{again}, finished "
        f"{meta.finished}.{decided}"
    )


def write_reports(result, out: Path, *, lead: d.Block | None = None) -> None:
    """``OUT/report.html``, ``report.md`` and ``claims.json`` of a finished study (a
    ``run.StudyResult``: its study, results, verdicts and meta); ``lead``
    (``normlab advise``'s advice) opens the reports, right after their title. The report is one
    document: summary first, the shared explanation once, then the claims."""
    study, results, verdicts, meta = result.study, result.results, result.verdicts, result.meta
    plot_dir = sub_dir(out, "plots")  # a symlink there is refused, not written through
    timings, h, env = meta.timings, meta.plateau_h, meta.environment
    doc = d.Document(f"normlab study: {study.name}")
    doc.add(
        d.Heading(1, ("normlab study: ", d.Code(study.name))),
        d.Paragraph(
            f"{_summary_line(study, results, meta)} On {env['cpu']} ({env['threads']} threads, "
            f"{env['workers']} worker(s)); torch {env['torch']}, numba {env['numba']}.",
            muted=True,
        ),
    )
    if lead is not None:
        doc.add(lead)
    doc.add(*_verdicts(verdicts), *_summary(study, verdicts, h), *_how(verdicts, h))
    doc.add(d.Heading(2, "Claims", "claims"))
    for c, v in verdicts:
        doc.add(_claim(study, c, v, _plots(c, v, results, timings, plot_dir), h))
    doc.add(*arms_section(out, study, results, meta))
    # The contents stand after the title, the meta line, any lead, the verdicts (heading,
    # table) and the summary (heading, table, the link to the coverage table).
    write_page(doc, out / "report", toc_after=7 + (lead is not None))
    claims = claims_json(study, verdicts, meta)
    write_json(out / "claims.json", claims, indent=1, ensure_ascii=False)
