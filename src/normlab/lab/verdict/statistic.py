"""The statistics a verdict is decided on, as objects: the mean, the trimmed mean and the median,
each with its estimate and interval, its pilot spread, the fewest values that give an interval,
and its words. ``statistic(trim)`` picks one: 0 the mean, (0, ½) the trimmed mean, ½ the median
(the trimmed mean's limit, so one number in a spec names all three).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LEVEL = 0.95  # confidence of every interval
POWER = 0.8  # for the minimal detectable effect
MEDIAN = 0.5  # the trim whose limit is the median


@dataclass(frozen=True)
class Estimate:
    """A statistic of per-seed (or per-round) values with its interval at ``level``."""

    effect: float | None
    lo: float | None
    hi: float | None
    n: int
    mde: float | None  # the smallest true effect this n finds with POWER at this level
    level: float = LEVEL
    values: tuple[float, ...] = ()

    def text(self, digits: int = 3, number: Callable[[float], str] | None = None) -> str:
        """``+0.123 [+0.050, +0.196], n=8``: each number ``signed`` to ``digits``, or written by
        ``number``."""
        if self.effect is None:
            return f"no data, n={self.n}"
        f = number or (lambda x: signed(x, digits))
        return f"{f(self.effect)} [{f(self.lo)}, {f(self.hi)}], n={self.n}"

    def to_dict(self) -> dict[str, Any]:
        fin = lambda x: x if x is None or math.isfinite(x) else None  # noqa: E731
        return {
            "effect": self.effect,
            "lo": fin(self.lo),
            "hi": fin(self.hi),
            "n": self.n,
            "level": self.level,
            "mde": self.mde,
            "values": list(self.values),
        }


def signed(x: float | None, digits: int = 3) -> str:
    """``+0.123``, ``−∞``, ``?`` for a missing bound."""
    if x is None:
        return "?"
    if not math.isfinite(x):
        return "−∞" if x < 0 else "+∞"
    # from 1e12 on, fixed-point would write hundreds of digits
    return f"{x:+.{digits}g}" if abs(x) >= 1e12 else f"{x:+.{digits}f}"


def detectable(sd: float, n: int, level: float = LEVEL, power: float = POWER) -> float:
    """The smallest true effect ``n`` paired values with spread ``sd`` find with ``power`` at
    ``level``: ``(t_{1-α/2, n-1} + t_{power, n-1}) · sd / √n``."""
    from scipy import stats

    t = stats.t.ppf(1 - (1 - level) / 2, n - 1) + stats.t.ppf(power, n - 1)
    return t * sd / math.sqrt(n)


# Beyond this magnitude a value's square leaves float range: the spread, the interval and the
# detectable effect of such values are no numbers.
VALUE_MAX = 1e150


def _finite(estimate) -> Callable[..., Estimate]:
    """``estimate`` given its values as floats and kept from what it cannot estimate: no
    estimate where there is no value or one is infinite (a measure undefined everywhere), and
    none with its values kept, to say why, where its arithmetic would leave float range (finite
    values of 1e308 sum to infinity, and their spread overflows)."""

    @functools.wraps(estimate)
    def checked(self, values, level: float = LEVEL) -> Estimate:
        vals = [float(v) for v in values]
        none = Estimate(None, None, None, len(vals), None, level, tuple(vals))
        if any(abs(v) > VALUE_MAX for v in vals if math.isfinite(v)):
            return none
        if not vals or not all(math.isfinite(v) for v in vals):
            return Estimate(None, None, None, len(vals), None, level)
        try:
            est = estimate(self, vals, level)
        except OverflowError:  # not expected below VALUE_MAX; never a traceback if it is
            return none
        if any(x is not None and not math.isfinite(x) for x in (est.effect, est.mde)):
            return none
        return est

    return checked


@dataclass(frozen=True)
class Mean:
    """The mean with its Student-t interval (``scipy.stats.t``)."""

    trim: float = 0.0
    name: str = "mean"

    @_finite
    def estimate(self, values, level: float = LEVEL) -> Estimate:
        n, mean = len(values), sum(values) / len(values)
        if n == 1:
            return Estimate(mean, -math.inf, math.inf, 1, None, level, tuple(values))
        from scipy import stats

        sd = statistics.stdev(values)
        se, t = sd / math.sqrt(n), stats.t.ppf(1 - (1 - level) / 2, n - 1)
        mde = detectable(sd, n, level)
        return Estimate(mean, mean - t * se, mean + t * se, n, mde, level, tuple(values))

    def spread(self, values) -> float:
        """The per-value spread behind the interval (its standard error times √n)."""
        return statistics.stdev(values)

    def min_seeds(self, level: float = LEVEL) -> int:
        return 2

    def words(self, over: str) -> str:
        return f"mean of v over {over}, {LEVEL:.0%} Student-t interval"


@dataclass(frozen=True)
class TrimmedMean(Mean):
    """The ``trim``-trimmed mean with Yuen's interval (``scipy.stats.mstats``: the winsorized
    variance, Student t on ``n − 2g − 1`` degrees of freedom, ``g = ⌊trim·n⌋`` values cut at each
    end): a stalled round moves neither the mean nor the interval, where one such round widens the
    plain mean's interval past any δ. With nothing to cut (under 1/trim values): the mean."""

    trim: float = 0.2
    name: str = "trimmed mean"

    @_finite
    def estimate(self, values, level: float = LEVEL) -> Estimate:
        g = int(self.trim * len(values))
        if g == 0:
            return Mean().estimate(values, level)
        import numpy as np
        from scipy import stats
        from scipy.stats import mstats

        df = len(values) - 2 * g - 1
        mean = float(stats.trim_mean(values, self.trim))
        limits = (self.trim, self.trim)
        se = float(mstats.trimmed_stde(np.asarray(values, dtype=float), limits=limits))
        t = stats.t.ppf(1 - (1 - level) / 2, df)
        mde = (t + stats.t.ppf(POWER, df)) * se
        return Estimate(mean, mean - t * se, mean + t * se, len(values), mde, level, tuple(values))

    def spread(self, values) -> float:
        """The winsorized standard deviation over ``1 − 2·trim``."""
        if int(self.trim * len(values)) == 0:
            return statistics.stdev(values)
        import numpy as np
        from scipy.stats import mstats

        w = mstats.winsorize(np.asarray(values, dtype=float), limits=(self.trim, self.trim))
        return float(np.std(w, ddof=1)) / (1 - 2 * self.trim)

    def words(self, over: str) -> str:
        return f"{self.trim:.0%} trimmed mean of v over {over}, Yuen's {LEVEL:.0%} interval"


@dataclass(frozen=True)
class Median(Mean):
    """The median with its distribution-free interval: the order statistics the sign test
    inverts (``scipy.stats.quantile_test``), so it holds whatever the tails, where even a trimmed
    mean's interval is widened by two blown-up seeds of eight. Too few values for an interval at
    ``level`` (under 6 at 95 %): unbounded. No detectable effect: the sign test's power depends on
    the whole distribution, not on one spread."""

    trim: float = MEDIAN
    name: str = "median"

    @_finite
    def estimate(self, values, level: float = LEVEL) -> Estimate:
        from scipy import stats

        med = statistics.median(values)
        ci = stats.quantile_test(values, p=0.5).confidence_interval(level)  # not q's p-value
        lo = float(ci.low) if math.isfinite(ci.low) else -math.inf
        hi = float(ci.high) if math.isfinite(ci.high) else math.inf
        return Estimate(float(med), lo, hi, len(values), None, level, tuple(values))

    def spread(self, values) -> float:
        """√(π/2) times the MAD's normal-consistent σ (the median's large-sample standard error
        times √n)."""
        from scipy import stats

        return float(math.sqrt(math.pi / 2) * stats.median_abs_deviation(values, scale="normal"))

    def min_seeds(self, level: float = LEVEL) -> int:
        """The n at which the sign test's outermost order statistics cover ``level``:
        2 · 0.5ⁿ ≤ 1 − level (6 at 95 %)."""
        return math.ceil(math.log2(2 / (1 - level)))

    def words(self, over: str) -> str:
        return (
            f"median of v over {over}, its distribution-free {LEVEL:.0%} interval (the order "
            "statistics the sign test inverts)"
        )


def statistic(trim: float = 0.0) -> Mean:
    """The statistic a rule with ``trim`` decides on: 0 the mean, ½ the median, between them the
    trimmed mean."""
    if not 0 <= trim <= MEDIAN:
        raise ValueError(f"trim must be in [0, {MEDIAN}] (the median), got {trim!r}")
    return Median() if trim >= MEDIAN else TrimmedMean(trim) if trim else Mean()
