"""The last word of ``normlab advise``: per model, keep the recipe, switch, or cannot tell at this
budget, with the reason and the size it was tested at (a twin's verdicts, never the model's)."""

from __future__ import annotations

from normlab.lab.advise.ranking import Ranking
from normlab.lab.advise.twin import Twin
from normlab.lab.verdict import Word

Block = tuple


def bottom_line(twin: Twin, r: Ranking, label: dict[str, str]) -> list[Block]:
    """Keep, switch or cannot tell at this budget, with the reason and the size tested at:
    switch only to an alternative some claim says is better (quality or stability) and none
    says is worse; keep where every alternative is decided no better; else cannot tell."""
    m, s = twin.config().model, twin.scale
    size = f"a d={m.dim}, {m.n_layers}-block twin, {s.steps} steps, {s.seeds} seeds"
    stab = {a.arm: a for a in (r.stability.arms if r.stability else ())}
    better, worse, open_ = [], set(), []
    for a in r.quality.arms[1:]:
        st = stab.get(a.arm)
        wins = a.beats == Word.HOLDS or (st is not None and st.alt_stabler == Word.HOLDS)
        # decided no better: the recipe at least as good, or the alternative short of δ
        loses = a.beats != Word.HOLDS and Word.HOLDS == a.as_good or a.beats == Word.DOES_NOT_HOLD
        if st is not None and st.recipe_stabler == Word.HOLDS:
            worse.add(a.arm)
        if wins and a.arm not in worse:
            better.append(a.arm)
        elif not loses:
            open_.append(a.arm)
    if better:
        word = f"switch to {', '.join(label[a] for a in better)}"
        why = "a claim found it better than the recipe (quality or stability) and none worse"
    elif not open_:
        word = f"keep {label['recipe']}"
        why = "every alternative was decided no better than the recipe"
    else:
        word = "cannot tell at this budget"
        why = f"undecided against the recipe: {', '.join(label[a] for a in open_)}"
    return [
        ("h", 1, "Bottom line"),
        ("p", f"{twin.name}: {word}. Why: {why}; tested at {size}, not at the model's size."),
    ]
