"""The first screen of ``normlab inspect``'s report: what the measurements say, in words.

Every sentence is computed from the result, so a model whose norms overflow says where and how
often, and one whose norms do not says how much room is left.
"""

from __future__ import annotations

from normlab.lab.inspect import formats_replay
from normlab.lab.inspect.inspect_plots import FP16_SQUARE

ROOM = 0.5  # a largest input past this share of 256 leaves "little room" in FP16


def num(v: float | None) -> str:
    return "–" if v is None else f"{v:.3g}"


def pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.2g} %"


def _errors(result, fmt: str) -> str:
    """The worst row error of the naive code and of FP32 statistics in ``fmt``, and the rows
    that fail."""
    own = [r for r in result.replay if r.own and r.format == fmt]
    naive, stats, kern = ([r for r in own if r.impl == i] for i in formats_replay.IMPLS)
    worst = lambda rs: max((r.worst for r in rs if r.worst is not None), default=None)  # noqa: E731
    failed = [r for r in naive if r.failures]
    text = (
        f"the worst row error is {pct(worst(naive))} in the naive {fmt} code, "
        f"{pct(worst(stats))} with FP32 statistics and {pct(worst(kern))} in normlab's kernels"
    )
    if failed:
        rows = sum(r.failures for r in failed)
        where = max(failed, key=lambda r: r.failures)
        text += (
            f"; the naive code fails visibly on {rows:,} rows, most in {where.layer} "
            f"({pct(where.failures / where.rows)} of its rows)"
        )
    else:
        text += "; no row fails"
    if kern_failed := sum(r.failures for r in kern):
        text += f"; normlab's kernels fail on {kern_failed:,} rows"
    return text


def _overflow(result, fmt: str) -> list[tuple[str, float, str]]:
    """(layer, share of rows, what) for each layer whose naive statistics overflow ``fmt``."""
    out = []
    for s in result.layers:
        if s.square_overflow[fmt]:
            out.append((s.layer, s.square_overflow[fmt], "x²"))
        elif s.stat_overflow[fmt]:
            out.append((s.layer, s.stat_overflow[fmt], "statistic"))
    return out


def _eps(result, fmt: str) -> str:
    s = result.layers[0]
    held = s.eps_held[fmt]
    if held == s.eps:
        return f"eps {num(s.eps)} is exact in {fmt}"
    if held == 0:
        return f"eps {num(s.eps)} is 0 in {fmt}"
    return f"eps {num(s.eps)} is held as {held:.4g} in {fmt}"


def _near_constant(result) -> str:
    near = [s for s in result.layers if s.near_constant]
    low = min(result.layers, key=lambda s: s.min_stat / s.eps)
    if not near:
        return (
            f"harmless here: no row's statistic comes within 100× of eps (the smallest is "
            f"{num(low.min_stat)}, {low.min_stat / low.eps:.2g}× eps, in {low.layer})"
        )
    worst = max(near, key=lambda s: s.near_constant)
    return (
        f"and that matters: {pct(worst.near_constant)} of {worst.layer}'s rows are "
        "near-constant (statistic below 100× eps), where eps decides the output"
    )


def bf16(result) -> tuple[str, str]:
    if over := _overflow(result, "BF16"):
        layer, share, what = max(over, key=lambda t: t[1])
        lead, head = "BF16 overflows.", f"The naive {what} in {layer} on {pct(share)} of rows"
    else:
        lead, head = "Safe in BF16.", "No norm input's x² or statistic overflows"
    return lead, f"{head}; {_eps(result, 'BF16')}; {_errors(result, 'BF16')}."


def fp16(result) -> tuple[str, str]:
    top = max(result.layers, key=lambda s: s.max_abs)
    if over := _overflow(result, "FP16"):
        layer, share, what = max(over, key=lambda t: t[1])
        more = f" and {len(over) - 1} more layers" if len(over) > 1 else ""
        lead = f"FP16 overflows in {layer}'s {top.cls} on {pct(share)} of rows{more}."
        head = (
            f"The naive {what} overflows (largest |x| {num(top.max_abs)}, past the 256 where "
            "x² overflows)"
        )
    else:
        room = "little room" if top.max_abs > ROOM * FP16_SQUARE else "room"
        lead = f"No overflow in FP16, with {room}."
        head = (
            f"On these {result.sample.tokens:,} tokens the largest norm input is "
            f"{num(top.max_abs)} ({top.layer}), {pct(top.max_abs / FP16_SQUARE)} of the 256 "
            "where the naive x² overflows"
        )
    eps = _eps(result, "FP16")
    eps += ", " + _near_constant(result) if result.layers[0].eps_held["FP16"] == 0 else ""
    return lead, f"{head}; {eps}; {_errors(result, 'FP16')}."


def _measured(c, kind: str) -> str:
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    task = (
        f"the similarity ranks by 1 − ρ = {num(mean(c.task))}"
        if kind == "embedding"
        else f"{pct(mean(c.task))} of the top-1 predictions change"
    )
    return (
        f"turns the outputs by 1 − cos = {num(mean(c.direction))} on average (worst chunk: cos "
        f"{num(1 - max(c.direction))}), and {task}"
    )


def recentering(result) -> tuple[str, str]:
    c = next(c for c in result.changes if c.name == "swap")
    shares = [s.mean_share_median for s in result.layers]
    swap = "LayerNorm → RMSNorm" if result.layers[0].kind == "layernorm" else "RMSNorm → LayerNorm"
    size = "small" if max(shares) < 0.1 else "large"
    return f"Re-centering: the mean's share is {size}.", (
        f"Median |mean|/RMS {pct(min(shares))} – {pct(max(shares))} per layer; swapping "
        f"{swap} at inference {_measured(c, result.model.kind)}."
    )


def train_mode(result) -> tuple[str, str]:
    c = next(c for c in result.changes if c.name == "train")
    if c.identical:
        return "Forgetting eval() changes nothing.", "The model has no active dropout."
    return "Forgetting eval() changes the outputs.", (
        f"Train mode (dropout active) {_measured(c, result.model.kind)}."
    )


def activations(result) -> tuple[str, str]:
    top = max(result.layers, key=lambda s: s.massive)
    gains = [s for s in result.layers if s.gain_near_zero]
    text = f"The largest |x| is {num(top.massive)}× the median |x| ({top.layer})"
    if gains:
        g = max(gains, key=lambda s: s.gain_near_zero)
        layers = "1 layer has" if len(gains) == 1 else f"{len(gains)} layers have"
        text += (
            f"; {layers} gains near 0 (|gain| < 0.01), the most {g.layer}: "
            f"{pct(g.gain_near_zero)} of its features"
        )
    else:
        text += "; no gain is near 0 (|gain| < 0.01)"
    return "Massive activations.", text + "."


def hazards(result) -> list[tuple[str, str]]:
    """The first screen's sentences, in order, each a lead (set in bold) and the rest."""
    return [say(result) for say in (bf16, fp16, recentering, train_mode, activations)]
