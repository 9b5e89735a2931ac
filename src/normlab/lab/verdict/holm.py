"""The one correction of a compound verdict: Holm's step-down over its parts.

``all of`` the parts (a study's ``all_of`` claim, a numerics or bench finding) does not hold if
*some* part does not; ``any of`` holds if *some* part holds: each is a union of k tests, decided
by Holm's step-down: with m parts not yet confirmed, every such part is tested with its interval
at level 1 − α/m (α = 1 − 0.95); the parts that reach the decision there are confirmed, m
shrinks, and the rest are tested again, until none is confirmed. This is Holm's procedure with
each part's p-value the smallest α' at which its interval reaches the decision (the interval
decisions are monotone in the level), so the family-wise error of that decision is at most α. A
part that reaches it alone at 95 % but is not confirmed is inconclusive, and says so. The other
direction ("all of holds": every part holds; "any of does not hold": no part does) is an
intersection-union test: each part at the plain 95 % bounds the error by α, and needs no
correction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from normlab.lab.verdict.words import Word

# the compound's decision in words, for each target
ALL_OF_TEXT = (
    "Holds iff every part holds (each at 95 %: all must hold, which needs no correction); "
    "does not hold iff some part does not hold after Holm's step-down across the k parts "
    "(the part with the strongest evidence against it tested at 1 − 5 %/k, the next at "
    "1 − 5 %/(k−1), …; family-wise 5 %); a part that cannot be tested here is not testable here."
)
ANY_OF_TEXT = (
    "Holds iff some part holds after Holm's step-down across the k parts (the part with "
    "the strongest evidence tested at 1 − 5 %/k, the next at 1 − 5 %/(k−1), …; family-wise "
    "5 %); does not hold iff every part does not (each at 95 %, which needs no correction); "
    "a part that cannot be tested here is not testable here."
)


def holm(
    plain: Sequence[str], decide_at: Callable[[int, float], str], target: str, level: float
) -> tuple[dict[int, float], int]:
    """Holm's step-down for ``target`` over parts whose plain decisions (at ``level``) are
    ``plain``; ``decide_at(j, lvl)`` decides part ``j`` at ``lvl``. Returns part -> the level
    it was confirmed at, and how many parts were left unconfirmed at the last look."""
    alpha, m = 1 - level, len(plain)
    confirmed: dict[int, float] = {}
    left = [j for j, s in enumerate(plain) if s == target]  # monotone: no other part can
    while left:
        lvl = 1 - alpha / m
        hits = [j for j in left if decide_at(j, lvl) == target]
        if not hits:
            break
        confirmed.update((j, lvl) for j in hits)
        left = [j for j in left if j not in hits]
        m -= len(hits)
    return confirmed, m


def correct(
    plain: Sequence[tuple[str, str]],
    decide_at: Callable[[int, float], str],
    target: str,
    level: float,
) -> list[tuple[str, str, str]]:
    """Per part ``(word, why, correction)``: the plain ``(word, why)`` at ``level``, with a
    ``target`` Holm does not confirm turned inconclusive (its note says which level it needed)."""
    confirmed, m = holm([w for w, _ in plain], decide_at, target, level)
    out = []
    for j, (word, why) in enumerate(plain):
        if word == target and j in confirmed:
            out.append((word, why, f"confirmed by Holm at {confirmed[j]:.4g}"))
        elif word == target:
            note = (
                f"'{target}' alone at {level:.0%} ({why}), but not after Holm's correction "
                f"across the {len(plain)} parts (needed its interval at {1 - (1 - level) / m:.4g})"
            )
            out.append((Word.INCONCLUSIVE, note, note))
        else:
            out.append((word, why, ""))
    return out


def combine(target: str, words: Sequence[str]) -> Word:
    """A compound's word from its parts' (after ``correct``): ``target`` if some part reached it;
    the other decision if every part did; else not testable here if every other part is,
    inconclusive if not."""
    other = Word.HOLDS if target == Word.DOES_NOT_HOLD else Word.DOES_NOT_HOLD
    if target in words:
        return Word(target)
    if words and all(w == other for w in words):
        return other
    rest = [w for w in words if w != other]
    if rest and all(w == Word.NOT_TESTABLE for w in rest):
        return Word.NOT_TESTABLE
    return Word.INCONCLUSIVE


def headline(words: Sequence[str]) -> Word:
    """A statement's headline from the words of every claim and finding that tests it as
    stated: holds (or does not hold) only if every one does; mixed if some hold and some do not;
    not testable here if none is testable; inconclusive otherwise. Never more than its weakest
    evidence; an intersection-union rule (each word at 95 % bounds the headline's error), so no
    correction across the claims is needed."""
    for word in (Word.HOLDS, Word.DOES_NOT_HOLD, Word.NOT_TESTABLE):
        if words and all(w == word for w in words):
            return word
    return Word.MIXED if Word.HOLDS in words and Word.DOES_NOT_HOLD in words else Word.INCONCLUSIVE
