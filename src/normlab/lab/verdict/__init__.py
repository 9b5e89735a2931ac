"""The verdict engine: the one place the lab decides anything.

- ``words``: the verdict words, one type (``Word``);
- ``statistic``: the mean, trimmed mean and median as objects (``statistic(trim)``), each with
  its estimate and interval, pilot spread, fewest seeds for an interval, and words;
- ``rule``: the one symmetric rule, an interval against ±δ (``decide``), and its bounded-seed
  form (``decide_rows``);
- ``holm``: the one correction of a compound verdict (Holm's step-down), how its parts
  combine, and a statement's headline from its claims (``headline``);
- ``claim_verdict``: a claim's verdict (``Verdict``: its word, estimate, parts and controls) and
  what became of its seeds (``Seeds``), the type every study rule returns;
- ``finding``: an op-level statement decided from repeated measurements (numerics, bench).

The study's claims, the numerics and bench findings, ``advise`` and the coverage table all
decide through it; nothing here imports the rest of the lab but its bounded reader (a
findings file is read and checked here, `finding.read_findings`).
"""

from normlab.lab.verdict.claim_verdict import Seeds, Verdict
from normlab.lab.verdict.holm import ALL_OF_TEXT, ANY_OF_TEXT, combine, correct, headline
from normlab.lab.verdict.rule import (
    BOUND_TEXT,
    EXPECT,
    check_rule,
    decide,
    decide_rows,
    pick,
)
from normlab.lab.verdict.statistic import (
    LEVEL,
    MEDIAN,
    POWER,
    Estimate,
    Mean,
    Median,
    TrimmedMean,
    detectable,
    signed,
    statistic,
)
from normlab.lab.verdict.words import CLAIM_WORDS, DECIDED, Word

__all__ = [
    "ALL_OF_TEXT",
    "ANY_OF_TEXT",
    "BOUND_TEXT",
    "CLAIM_WORDS",
    "DECIDED",
    "EXPECT",
    "LEVEL",
    "MEDIAN",
    "POWER",
    "Estimate",
    "Mean",
    "Median",
    "Seeds",
    "TrimmedMean",
    "Verdict",
    "Word",
    "check_rule",
    "combine",
    "correct",
    "decide",
    "decide_rows",
    "detectable",
    "headline",
    "pick",
    "signed",
    "statistic",
]
