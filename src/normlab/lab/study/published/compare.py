"""One claim across studies: the verdicts that more than one study reached on the same claim,
side by side with their scopes, and where an effect changes sign, what differs between them;
and how well the studies agree (``Agreement``): of the claims one of them decides, the share
every study that ran the claim decides alike, and the intervals that do not overlap.

Read from each study's ``claims.json``; a claim is matched by name. Variants of a claim decided
under another init (``NAME-default-init``) are matched to ``NAME`` too, and their scope says
which init they ran under.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normlab.lab.kit.doc import md_table
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.reading import check_text
from normlab.lab.study.report.claims_json import read_claims
from normlab.lab.verdict import DECIDED, Estimate

VARIANT_SUFFIX = "-default-init"
SCOPE_KEYS = ("d", "blocks", "T", "B", "steps", "init")  # what a sign change may come from


def base_name(name: str) -> str:
    return name.removesuffix(VARIANT_SUFFIX)


def load(dirs: list[Path]) -> list[dict[str, Any]]:
    """Each study's ``claims.json``, with the study's label (its preset and seed block)."""
    seen: dict[Path, Path] = {}
    for d in map(Path, dirs):  # a study beside itself would agree with itself: no comparison
        if (first := seen.setdefault(d.resolve(), d)) is not d:
            raise ValueError(f"{first} and {d} are one directory: name each study once")
    paths = [Path(d) / "claims.json" for d in dirs]
    # Every file read first, so that a hostile string is named before another file's flaws.
    docs = [_read(path) if path.is_file() else None for path in paths]
    for d, path, doc in zip(dirs, paths, docs, strict=True):
        if doc is None:
            raise FileNotFoundError(f"{path}: no claims.json (is {d} a study's output directory?)")
        _check(doc, path)
        doc["label"] = label(doc)
    return docs


def label(doc: dict[str, Any]) -> str:
    """How a study is named in a comparison: its preset and seed block."""
    return f"{doc['preset']} (--seed {doc.get('seed_block', 0)})"


def _read(path: Path) -> Any:
    """``path`` read as a claims.json (``read_claims``: bounded, checked to its leaves), its
    claims' names one short line each: they are copied into the Markdown."""
    doc = read_claims(path)
    for i, c in enumerate(doc["claims"]):
        check_text(c["name"], f"{path}: claims[{i}].name", 200, newlines=False)
    return doc


def _check(doc: Any, path: Path) -> None:
    """``ValueError`` naming ``path`` unless ``doc`` (its shape checked by ``read_claims``:
    preset, seed block, each claim's name and verdict) reads as a study's claims.json: every
    reader of this module run on each of its claims (a claim's scope is optional there)."""
    try:
        for c in doc["claims"]:
            effect_text(c), _scope_text(c), _scope_values(c), effects(c)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        what = f"missing {e}" if isinstance(e, KeyError) else str(e)
        raise ValueError(f"{path}: not a study's claims.json ({what})") from None


def _estimate(x: dict[str, Any]) -> Estimate:
    # claims.json writes an unbounded end as null; the report's text shows it as ∓∞.
    lo = -math.inf if x.get("lo") is None else x["lo"]
    hi = math.inf if x.get("hi") is None else x["hi"]
    return Estimate(float(x["effect"]), lo, hi, x.get("n", 0), None)


def effects(c: dict[str, Any]) -> dict[str, Estimate]:
    """``label -> Estimate`` of a verdict: its own (label ``""``), or each part's for a
    compound claim."""
    if isinstance(c.get("effect"), int | float):
        return {"": _estimate(c)}
    parts = c.get("parts", [])
    return {p["part"]: _estimate(p) for p in parts if isinstance(p.get("effect"), int | float)}


def effect_text(c: dict[str, Any]) -> str:
    """The "effect [lo, hi], n=k" of a claims.json entry, or of each part of a compound one."""

    def one(x: dict[str, Any]) -> str:
        return _estimate(x).text() if isinstance(x.get("effect"), int | float) else "–"

    if isinstance(c.get("effect"), int | float):
        return one(c)
    return "; ".join(f"{p['part']}: {one(p)}" for p in c.get("parts", [])) or "–"


def _flip(part: str, a: Estimate, b: Estimate) -> str | None:
    """The sign change of one effect between two studies, if it changes sign. One whose interval
    holds 0 in either study is noise, not a change of result: listed, but said so."""
    if a.effect * b.effect >= 0:  # same sign, or one is exactly 0
        return None
    resolved = all(e.lo > 0 or e.hi < 0 for e in (a, b))
    return (part or "effect") + ("" if resolved else " (unresolved: an interval holds 0)")


def _scope_text(c: dict[str, Any]) -> str:
    return "; ".join(
        f"d={s['d']} L={s['blocks']} {s['steps']} steps init={s['init']}" for s in c["scope"]
    )


def _scope_values(c: dict[str, Any]) -> dict[str, set]:
    return {k: {s[k] for s in c["scope"]} for k in SCOPE_KEYS}


def _by_name(studies: list[dict[str, Any]], key=lambda name: name) -> dict[str, list]:
    """``key(claim name) -> [(study label, claim)]`` over ``studies``, in their order."""
    out: dict[str, list[tuple[str, dict]]] = {}
    for s in studies:
        for c in s["claims"]:
            out.setdefault(key(c["name"]), []).append((s["label"], c))
    return out


def _pairs(entries: list[tuple[str, dict]]):
    """Each two of ``entries`` (a claim in two studies) with the effects both estimate:
    ``(label a, a, label b, b, [(part, a's, b's)])``."""
    for i, (la, a) in enumerate(entries):
        for lb, b in entries[i + 1 :]:
            ea, eb = effects(a), effects(b)
            yield la, a, lb, b, [(part, ea[part], eb[part]) for part in ea if part in eb]


def compare(studies: list[dict[str, Any]]) -> tuple[list[list[str]], list[str]]:
    """The table rows (claim, study, verdict, effect, scope) of every claim more than one study
    decided, and one line per sign change of an effect between two of them."""
    rows, changes = [], []
    for name, entries in _by_name(studies, base_name).items():
        if len(entries) < 2:
            continue
        for label, c in entries:
            rows.append([name, label, c["name"], c["verdict"], effect_text(c), _scope_text(c)])
        changes += _sign_changes(name, entries)
    return rows, changes


def _sign_changes(name: str, entries: list[tuple[str, dict]]) -> list[str]:
    out = []
    for la, a, lb, b, shared in _pairs(entries):
        flips = [f for part, x, y in shared if (f := _flip(part, x, y))]
        if not flips:
            continue
        va, vb = _scope_values(a), _scope_values(b)
        diff = [
            f"{k} {'/'.join(map(str, sorted(va[k])))} vs {'/'.join(map(str, sorted(vb[k])))}"
            for k in SCOPE_KEYS
            if va[k] != vb[k]
        ]
        what = ", ".join(diff) if diff else "nothing in the scope (seeds only)"
        out.append(
            f"- **{name}**: {', '.join(flips)} changes sign between {a['name']} in {la} "
            f"and {b['name']} in {lb}; what differs: {what}."
        )
    return out


@dataclass(frozen=True)
class Agreement:
    """Claims (matched by their exact name) that more than one study ran: those some study
    decides (holds or does not hold), those every study decides alike, and the effects whose
    intervals in two studies do not overlap (``claim: part`` between two labels)."""

    decided: tuple[str, ...]
    alike: tuple[str, ...]
    disjoint: tuple[str, ...]

    def words(self) -> str:
        """Two lines, or none where no claim of one name was decided twice."""
        if not self.decided and not self.disjoint:
            return ""
        n, k = len(self.decided), len(self.alike)
        share = f" ({100 * k / n:.0f} %)" if n else ""
        head = (
            f"Agreement: of the {n} claim{'s' * (n != 1)} that one of these studies decides "
            f"(holds or does not hold), {k} {'is' if k == 1 else 'are'} decided alike by every "
            f"study that ran {'it' if n == 1 else 'them'}{share}"
        )
        differ = sorted(set(self.decided) - set(self.alike))
        head += f"; decided differently: {', '.join(differ)}." if differ else "."
        disjoint = "; ".join(self.disjoint) if self.disjoint else "none"
        return f"{head}\n\nIntervals that do not overlap between two studies: {disjoint}.\n"


def agreement(studies: list[dict[str, Any]]) -> Agreement:
    """How well ``studies`` (each a claims.json with its ``label``) agree, claim by claim."""
    decided, alike, disjoint = [], [], []
    for name, entries in _by_name(studies).items():
        if len(entries) < 2:
            continue
        words = {c["verdict"] for _, c in entries}
        if words & {w.value for w in DECIDED}:
            decided.append(name)
            if len(words) == 1:
                alike.append(name)
        for la, _, lb, _, shared in _pairs(entries):
            for part, x, y in shared:
                if x.hi < y.lo or y.hi < x.lo:
                    disjoint.append(f"{name}{': ' + part if part else ''} ({la} vs {lb})")
    return Agreement(tuple(decided), tuple(alike), tuple(disjoint))


HEADER = ["claim", "study", "as", "verdict", "effect [95 % interval], n", "scope"]


def markdown(dirs: list[Path]) -> str:
    return studies_markdown(load(dirs))


def studies_markdown(studies: list[dict[str, Any]]) -> str:
    """How well ``studies`` (each a claims.json with its ``label``) agree, the table of every
    claim more than one decides, and its sign changes."""
    rows, changes = compare(studies)
    if not rows:
        return "No claim is decided by more than one of these studies.\n"
    said = agreement(studies).words()
    text = (said and said + "\n") + md_table(HEADER, rows)
    if changes:
        text += "\nSign changes:\n\n" + "\n".join(changes) + "\n"
    return text


def main(dirs: list[str]) -> int:
    """``normlab study --compare DIR...``: the comparison printed as Markdown."""
    try:
        print(markdown([Path(d) for d in dirs]), end="")
    except (OSError, ValueError, KeyError) as e:
        raise UsageError(f"--compare: {e}") from e
    return 0
