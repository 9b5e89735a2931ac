"""The verdict words, one type for every decider: a claim's, a finding's, a statement's."""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """What the lab says of a claim. A ``str``, so JSON, comparisons with the published strings
    and f-strings read the words themselves."""

    HOLDS = "holds"
    DOES_NOT_HOLD = "does not hold"
    INCONCLUSIVE = "inconclusive"  # the design could decide it; these runs did not
    NOT_TESTABLE = "not testable here"  # no outcome of these runs could: a control, or n
    MIXED = "mixed"  # a statement's headline only: the claims that test it as stated disagree
    DEPENDS = "depends on size"  # a statement's headline only: sizes decided it differently

    __str__ = str.__str__
    __format__ = str.__format__


# A claim's or a finding's words, in the order tables list them (MIXED is a statement's).
CLAIM_WORDS = (Word.HOLDS, Word.DOES_NOT_HOLD, Word.INCONCLUSIVE, Word.NOT_TESTABLE)
DECIDED = (Word.HOLDS, Word.DOES_NOT_HOLD)
