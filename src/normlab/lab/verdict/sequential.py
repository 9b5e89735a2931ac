"""Group-sequential designs: a claim looked at after each batch of seeds, stopped once it decides.

A sequential design (``Design``: seeds per look, the seeds at the first look, a spending
function) looks at a claim whose cap is ``N`` seeds after ``n_1 < n_2 < … < n_K = N`` of them.
Deciding every look with the plain 95 % interval would let chance decide a claim at one of the
K looks far more often than 5 %; instead each look takes a **repeated confidence interval**
(Jennison & Turnbull 1989): at look k, at the nominal two-sided level ``1 − 2(1 − Φ(c_k))``, the
bounds ``c_k`` chosen so that under the normal model the K intervals cover the true effect
*together* with probability ``level`` — ``P(|Z_j| ≤ c_j for every j ≤ k) = 1 − α(t_k)`` for each k,
with ``t_k = n_k / N`` the information fraction and ``α(t)`` the spending function (Lan & DeMets
1983), each tail spending half of ``α = 1 − level``:

- O'Brien–Fleming type: ``α(t) = 4 · (1 − Φ(z_{1−α/4} / √t))``: next to nothing at the first
  looks, almost all of α at the last (its last interval is close to the fixed design's);
- Pocock type: ``α(t) = α · ln(1 + (e − 1) · t)``: about even across the looks (early stops
  for large effects, a wider last interval).

Since the intervals cover the effect at every look at once, a decision read off any of them is
wrong with probability at most α, *whatever rule decides when to stop*; stopping a claim at the
first look whose interval decides it (the lab's rule) is one such rule, and so is stopping it
for any other reason. Each look's interval is the statistic's own at that nominal level (Student
t on the look's seeds for the mean, Yuen's for the trimmed mean, the sign test's order
statistics for the median): the normal bounds carried to the statistic at the same tail
probability, Jennison & Turnbull's (2000, §9.3) approach for an unknown variance. A simulation
test checks the resulting error rates (tests/lab/verdict/test_sequential.py).

The bounds are computed by numerical integration over the looks (the recursion of Armitage,
McPherson and Rowe 1969, Simpson's rule on a grid), solved look by look with
``scipy.optimize.brentq``: deterministic, to about 1e-6 in each look's level.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from normlab.lab.verdict.statistic import LEVEL

SPENDING = ("obrien-fleming", "pocock")
SPENDING_TEXT = {
    "obrien-fleming": "O'Brien–Fleming-type spending (Lan–DeMets)",
    "pocock": "Pocock-type spending (Lan–DeMets)",
}
GRID = 401  # Simpson points across a look's continuation region (odd)


def spent(kind: str, alpha: float, t: float) -> float:
    """The two-sided error spent by information fraction ``t`` (0 < t ≤ 1) of a design whose
    intervals together miss with probability ``alpha``."""
    from scipy.stats import norm

    if kind == "obrien-fleming":
        return 4 * norm.sf(norm.isf(alpha / 4) / math.sqrt(t))
    if kind == "pocock":
        return alpha * math.log(1 + (math.e - 1) * t)
    raise ValueError(f"spending must be one of {SPENDING}, got {kind!r}")


def _simpson(lo: float, hi: float):
    import numpy as np

    x = np.linspace(lo, hi, GRID)
    w = np.ones(GRID)
    w[1:-1:2], w[2:-1:2] = 4, 2
    return x, w * (hi - lo) / (3 * (GRID - 1))


def _bound(x, mass, step: float, target: float) -> float:
    """The bound b on S at the next look (an increment of sd ``step`` away) that the runs
    still going, ``mass`` at the points ``x``, cross with probability ``target``."""
    import numpy as np
    from scipy.optimize import brentq
    from scipy.stats import norm

    def crossed(b: float) -> float:
        return float(np.sum(mass * (norm.cdf((-b - x) / step) + norm.sf((b - x) / step))))

    if target <= 1e-14 or crossed(40.0) >= target:  # nothing (left) to spend at this look
        return math.inf
    hi = max(abs(x[0]), 1.0) + 40 * step
    return brentq(lambda b: crossed(b) - target, 0.0, hi, xtol=1e-10)


@functools.lru_cache(maxsize=512)
def bounds(fractions: tuple[float, ...], alpha: float, kind: str) -> tuple[float, ...]:
    """The two-sided bounds ``c_k`` on the standardized statistic at each look (``fractions``:
    the information fractions t_1 < … < t_K, the last 1): the K intervals at levels
    ``1 − 2(1 − Φ(c_k))`` cover the effect together with probability ``1 − alpha``."""
    from scipy.stats import norm

    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not fractions or any(b <= a for a, b in zip((0.0, *fractions), fractions, strict=False)):
        raise ValueError(f"fractions must increase from above 0, got {fractions!r}")
    if abs(fractions[-1] - 1) > 1e-12:
        raise ValueError(f"the last look's fraction must be 1, got {fractions[-1]!r}")
    out = [float(norm.isf(spent(kind, alpha, fractions[0]) / 2))]
    # S_k = Z_k·√t_k is a Brownian motion in t: track its density where no look has stopped.
    x, w = _simpson(-out[0] * math.sqrt(fractions[0]), out[0] * math.sqrt(fractions[0]))
    dens = norm.pdf(x, scale=math.sqrt(fractions[0]))
    for k in range(1, len(fractions)):
        step = math.sqrt(fractions[k] - fractions[k - 1])
        target = spent(kind, alpha, fractions[k]) - spent(kind, alpha, fractions[k - 1])
        mass = dens * w  # the probability at each grid point of running past look k-1
        b = _bound(x, mass, step, target)
        out.append(b / math.sqrt(fractions[k]))
        edge = b if math.isfinite(b) else abs(x[0]) + 10 * step  # no bound: all that runs on
        new_x, new_w = _simpson(-edge, edge)
        kernel = norm.pdf((new_x[:, None] - x[None, :]) / step) / step
        x, w, dens = new_x, new_w, kernel @ mass
    return tuple(out)


@functools.lru_cache(maxsize=512)
def nominal_levels(fractions: tuple[float, ...], level: float, kind: str) -> tuple[float, ...]:
    """Each look's nominal two-sided level, for intervals that together cover at ``level``."""
    from scipy.stats import norm

    if len(fractions) == 1:  # one look: the fixed design's interval
        return (level,)
    cs = bounds(tuple(float(t) for t in fractions), round(1 - level, 12), kind)
    return tuple(1.0 if math.isinf(c) else float(1 - 2 * norm.sf(c)) for c in cs)


@dataclass(frozen=True)
class Design:
    """A group-sequential design of a study: every seeded claim is looked at after ``first``
    seeds and then after every ``batch`` more, up to its own cap (the seeds its rule asks for),
    with the spending function ``spending`` (``SPENDING``)."""

    batch: int
    spending: str = "obrien-fleming"
    first: int = 0  # the seeds at the first look; 0: batch

    def __post_init__(self) -> None:
        for name, low in (("batch", 1), ("first", 0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ValueError(f"{name} must be an int >= {low}, got {v!r}")
        if self.spending not in SPENDING:
            raise ValueError(f"spending must be one of {SPENDING}, got {self.spending!r}")

    def looks(self, cap: int) -> tuple[int, ...]:
        """The seeds at each look of a claim whose cap is ``cap``: ``first``, then every
        ``batch`` more, the last look at ``cap``."""
        return (*range(self.first or self.batch, cap, self.batch), cap)

    def levels(self, cap: int, level: float = LEVEL) -> tuple[float, ...]:
        """Each look's nominal level for a claim with cap ``cap`` whose looks together cover at
        ``level``."""
        return nominal_levels(tuple(n / cap for n in self.looks(cap)), level, self.spending)

    def words(self) -> str:
        first = f"{self.first} seeds, then " if self.first and self.first != self.batch else ""
        return (
            f"group-sequential: looks after {first}every {self.batch} seeds up to each claim's "
            f"cap, repeated {LEVEL:.0%} intervals with {SPENDING_TEXT[self.spending]}; a claim "
            "stops at the first look that decides it"
        )


@dataclass(frozen=True)
class Look:
    """One look of a claim under a sequential ``design``: the ``k``-th (0-based) of its looks at
    cap ``cap``. ``level(overall)`` is the nominal level of this look's interval for intervals
    that cover together at ``overall`` (a compound's Holm step asks for 1 − α/m)."""

    design: Design
    cap: int
    k: int

    @property
    def n(self) -> int:
        return self.design.looks(self.cap)[self.k]

    @property
    def count(self) -> int:
        return len(self.design.looks(self.cap))

    def level(self, overall: float = LEVEL) -> float:
        return self.design.levels(self.cap, overall)[self.k]

    def words(self) -> str:
        return (
            f"look {self.k + 1} of {self.count} at n={self.n} (cap {self.cap}): repeated "
            f"interval at {self.level():.4g} ({SPENDING_TEXT[self.design.spending]})"
        )
