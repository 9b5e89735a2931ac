"""The first word of ``normlab advise`` (its advice's and its console's): per model, keep the
recipe, switch, or cannot tell at this budget, with the reason and the size it was tested at (a
twin's verdicts, never the model's); and what the study lacks, which every verdict is decided
without."""

from __future__ import annotations

from normlab.lab.advise.ranking import FAILS_MARGIN, Ranking
from normlab.lab.advise.twin import Twin, plural
from normlab.lab.kit import doc as d
from normlab.lab.study.run import StudyResult
from normlab.lab.verdict import Word

BOTTOM_LINE = "Bottom line"  # its heading


def missing_runs(result: StudyResult) -> list[d.Block]:
    """The study's runs that are not in its results (``result.failed``: those that raised, or,
    decided again from an advise stopped early, those it never trained), named, and a timing
    phase that never ran: every verdict and mean of the advice is without them."""
    untimed = result.meta.untimed  # set by --redecide of an unfinished advise
    if not result.failed and not untimed:
        return []
    n, k = len(result.study.runs(result.meta.seed_block)), len(result.failed)
    text = ""
    if k:
        text = f"{k} of the study's {n} runs {'is' if k == 1 else 'are'} not in results.jsonl: "
        text += f"{', '.join(result.failed)}. "
    if untimed:
        text += "The advise stopped before its serial timing phase: speed is not measured. "
    text += "Everything below is decided without what is missing; rerunning the advise into "
    text += "this directory with --resume completes it."
    return [d.Heading(2, "Missing from this study"), d.Paragraph(text)]


def bottom_line(twin: Twin, r: Ranking, label: dict[str, str], missing: int = 0) -> list[d.Block]:
    """Keep, switch or cannot tell at this budget, with the reason and the size tested at
    (``missing``: how many of the study's runs are not in its results):
    switch only to an alternative some claim says is better (quality or stability) and none
    says is worse; keep where every alternative is decided no better; else cannot tell."""
    m, s = twin.config().model, twin.scale
    size = f"a d={m.dim}, {m.n_layers}-block twin, {s.steps} steps, {plural(s.seeds, 'seed')}"
    stab = {a.arm: a for a in (r.stability.arms if r.stability else ())}
    better, open_ = [], []
    q = r.quality
    for a in q.arms[1:]:
        st = stab.get(a.arm)
        wins = a.beats == Word.HOLDS or (st is not None and st.alt_stabler == Word.HOLDS)
        # decided no better: the recipe at least as good, or the alternative short of δ
        loses = (a.beats != Word.HOLDS and a.as_good == Word.HOLDS) or a.beats == Word.DOES_NOT_HOLD
        worse = st is not None and st.recipe_stabler == Word.HOLDS
        if wins and not worse and a.arm not in q.unlearned:  # better than nothing is no win
            better.append(a.arm)
        elif not loses:
            open_.append(a.arm)
    learned = [a for a in q.arms if a.mean is not None and a.arm not in q.unlearned]
    if q.unlearned and not learned:
        word = "cannot tell at this budget"
        why = f"no twin learned past the bytes' frequencies ({_bar(q)}): nothing to rank"
    elif better:
        word = f"switch to {', '.join(label[a] for a in better)}"
        why = "a claim found it better than the recipe (quality or stability) and none worse"
    elif not open_:
        word = f"keep {label['recipe']}"
        why = "every alternative was decided no better than the recipe"
    else:
        word = "cannot tell at this budget"
        why = f"undecided against the recipe: {', '.join(label[a] for a in open_)}"
    if q.unlearned and learned:
        why += f"; did not learn past the bytes' frequencies ({_bar(q)}): "
        why += ", ".join(label[a] for a in q.unlearned)
    return [
        d.Heading(2, BOTTOM_LINE),
        d.Paragraph(
            f"{twin.name}: {word}. Why: {why}; tested at {size}"
            + (f" with {missing} of its runs missing" if missing else "")
            + ", not at the model's size.",
        ),
    ]


def _bar(q) -> str:
    """What "did not learn" means, with its numbers."""
    return (
        f"mean final loss above H − {FAILS_MARGIN:g} = {q.plateau_h - FAILS_MARGIN:.3f} "
        f"nats/byte, H the loss of predicting bytes by their frequencies"
    )
