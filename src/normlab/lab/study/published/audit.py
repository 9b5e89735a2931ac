"""The three tables that say how the published verdicts were reached, generated beside the claims
page from the data (never kept by hand): every verdict decided after its data was seen
(exploratory, from the registry), every claim against the one standard for rivals, and every
statement whose status changed since a frozen earlier reading (``docs/data/verdicts-*.json``).
"""

from __future__ import annotations

from pathlib import Path

from normlab.lab.kit import doc as d
from normlab.lab.kit.reading import read_json
from normlab.lab.study.decide import rivals
from normlab.lab.study.published.coverage import NOT_DECIDED, Catalogue, Published, stored_design
from normlab.lab.study.published.headline import Decision
from normlab.lab.study.spec import load_builtin

BEFORE = "data/verdicts-7acb7c9.json"  # the statuses before #69, read by ``changes``


def _word(status: str) -> str:
    """A status as the claims page's status column names it."""
    return NOT_DECIDED[status][0] if status in NOT_DECIDED else str(status)


def exploratory(cat: Catalogue, pub: Published, decisions: dict[str, Decision]) -> d.Block:
    """Every published verdict and headline decided after its data was seen, and why."""
    rows = []
    for preset, found in pub.rows.items():
        for name, row in found.items():
            why = pub.standing(f"{preset}:{name}").why
            if why:
                rows.append([f"{preset} `{name}`", row.entry["verdict"], why])
    for command, found in pub.findings.items():
        for name, f in found.items():
            why = pub.standing(f"{command}:{name}").why
            if why:
                rows.append([f"{command} finding `{name}`", f["verdict"], why])
    rows += [
        [f"statement {s.id}", decisions[s.id].status, decisions[s.id].exploratory]
        for s in cat.statements
        if decisions[s.id].exploratory
    ]
    if not rows:
        return d.Paragraph("No published verdict was decided after its data was seen.")
    return d.dense_table(["verdict of", "as published", "exploratory because"], rows)


def rival_standard(cat: Catalogue, pub: Published) -> d.Table:
    """Each claim of the covered presets that compares arms: the standard its design meets, and
    the standard the design that decided its published verdict met."""
    rows = []
    for preset in cat.reports:
        study = load_builtin(preset, whole=True)
        for claim in study.claims:
            kind = rivals.standard(study, claim)
            row = pub.rows.get(preset, {}).get(claim.name)
            if row is None:
                shown = "not published"
            else:
                shown = f"{row.entry['verdict']} ({row.where}: {_met(pub, row.where, claim.name)})"
            rows.append([f"{preset} `{claim.name}`", kind, shown])
    return d.dense_table(["claim", "the standard its design meets", "published verdict"], rows)


def changes(cat: Catalogue, decisions: dict[str, Decision], docs: Path) -> d.Table:
    """Every statement whose status differs from the frozen earlier reading."""
    before = read_json(docs / BEFORE)
    rows = [
        [s.id, s.statement, _word(before["statuses"].get(s.id, "new")), _word(now.status)]
        for s in cat.statements
        if (now := decisions[s.id]).status != before["statuses"].get(s.id)
    ]
    head = [f"before ({before['commit']})", "now"]
    return d.dense_table(["id", "statement (our paraphrase)", *head], rows)


def _met(pub: Published, where: str, name: str) -> str:
    """The standard the design stored beside a published study met for claim ``name``."""
    ran = stored_design(pub.docs / "data" / where)
    if ran is None:
        return "its design is not stored beside it"
    old = next((c for c in ran.claims if c.name == name), None)
    return rivals.standard(ran, old) if old else "not in its design"
