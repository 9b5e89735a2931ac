"""RMSNorm's time against LayerNorm's by hidden size and implementation, for the findings
``rmsnorm-faster-<impl>`` of ``normlab bench --findings``.

Per size ``d`` the six contenders (RMSNorm and LayerNorm in normlab's kernels, PyTorch eager and
``torch.compile``) run serially interleaved: one round times a batch (>= ~2 ms) of each in turn,
the order reversed every other round, so a load spike of the shared machine lands on one round of
every contender rather than on one contender. A round's value per implementation is
``ln(t_LayerNorm / t_RMSNorm)``: > 0 where RMSNorm is faster, symmetric in the two, and not
thrown far by one stalled batch the way a plain ratio is.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from normlab.lab.bench.bandwidth import norm_call, seconds_per_call

SIZES = (64, 128, 256, 512, 1024, 2048, 4096)
ELEMENTS = 1 << 20  # rows x d per call: 4 MB of FP32 input at every d
ROUNDS = 15
IMPLS = ("normlab", "eager", "compile")
BATCH_S = 2e-3


def contenders(d: int, impls=IMPLS, device: str = "cpu") -> dict[tuple[str, str], Callable]:
    """``(impl, op) -> no-argument forward`` on ``ELEMENTS // d`` FP32 rows of ``d``, the ops
    as ``normlab bench`` times them (:func:`normlab.lab.bench.bandwidth.norm_call`)."""
    g = torch.Generator(device=device).manual_seed(d)
    x = torch.randn(max(1, ELEMENTS // d), d, generator=g, device=device)
    w = 1 + 0.1 * torch.randn(d, generator=g, device=device)
    b = 0.1 * torch.randn(d, generator=g, device=device)
    backend = "triton" if device == "cuda" else "numba"
    fns: dict[tuple[str, str], Callable] = {}
    for impl in impls:
        if impl == "compile":
            torch._dynamo.reset()  # one lambda per op for every d: fresh caches, no limit hit
        for op in ("rms_norm", "layer_norm"):
            call = norm_call(op, d, backend if impl == "normlab" else None)
            fn = lambda call=call: call(x, w, b, None)
            fns[impl, op] = torch.compile(fn, dynamic=False) if impl == "compile" else fn
    return fns


def interleaved(fns: dict, rounds: int, device: str = "cpu") -> dict[object, list[float]]:
    """Seconds per call of each of ``fns`` in each of ``rounds`` interleaved rounds (synced on
    ``device``)."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    number = {}
    out: dict[object, list[float]] = {k: [] for k in fns}
    order = list(fns)
    with torch.no_grad():  # the warm-up too: a compiled function is guarded on grad mode
        for key, fn in fns.items():
            seconds_per_call(fn, 1, sync)  # compile / warm up
            number[key] = max(1, int(BATCH_S / max(seconds_per_call(fn, 1, sync), 1e-7)))
        for r in range(rounds):
            for key in order if r % 2 == 0 else order[::-1]:
                out[key].append(seconds_per_call(fns[key], number[key], sync))
    return out


def measure(
    sizes=SIZES, rounds: int = ROUNDS, impls=IMPLS, device: str = "cpu", log=print
) -> tuple[dict[str, list[float]], dict]:
    """Per ``"<impl> d=<d>"`` the round values ``ln(t_ln / t_rms)``, and per ``"<impl> <op>"``
    the median milliseconds at each size."""
    import math
    import statistics

    values: dict[str, list[float]] = {}
    ms: dict[str, list[float]] = {}
    for d in sizes:
        times = interleaved(contenders(d, impls, device), rounds, device)
        for impl in impls:
            rms, ln = times[impl, "rms_norm"], times[impl, "layer_norm"]
            values[f"{impl} d={d}"] = [math.log(b / a) for a, b in zip(rms, ln, strict=True)]
            for op, ts in (("rms_norm", rms), ("layer_norm", ln)):
                ms.setdefault(f"{impl} {op}", []).append(1e3 * statistics.median(ts))
        shown = {i: math.exp(-statistics.median(values[f"{i} d={d}"])) for i in impls}
        log(f"d={d}: " + ", ".join(f"{i} t_rms/t_ln {r:.2f}" for i, r in shown.items()))
    return values, ms


def ratio_plot(findings: list[dict]) -> bytes | None:
    """t_RMSNorm / t_LayerNorm vs d per implementation (one ``rmsnorm-faster-<impl>`` finding
    each): the trimmed mean with its interval, 1 = no difference, below 1 = RMSNorm faster."""
    import math

    from matplotlib.ticker import NullLocator

    from normlab.lab.kit.render import figure, png

    timed = [f for f in findings if (f.get("record") or {}).get("impl")]
    if not timed:
        return None
    fig, ax = figure(figsize=(6.4, 3.8))
    sizes = timed[0]["record"]["sizes"]
    for k, finding in enumerate(timed):
        impl, parts = finding["record"]["impl"], {p["part"]: p for p in finding["parts"]}
        xs, ys, below, above = [], [], [], []  # the interval's ends as distances from y
        for d in finding["record"]["sizes"]:
            p = parts.get(f"d={d}")
            if p is None or p.get("effect") is None:
                continue
            y = math.exp(-p["effect"])  # t_rms / t_ln
            xs.append(d)
            ys.append(y)
            below.append(y - math.exp(-p["hi"]) if p.get("hi") is not None else 0.0)
            above.append(math.exp(-p["lo"]) - y if p.get("lo") is not None else 0.0)
        if xs:
            ax.errorbar(xs, ys, [below, above], marker="o", capsize=3, label=impl, ls="-:"[k % 2])
    ax.axhline(1, color="k", lw=0.8)
    ax.set(xscale="log", yscale="log", xlabel="hidden size d")
    ax.set_ylabel("time RMSNorm / time LayerNorm (log)")
    ax.set_xticks(sizes, [str(d) for d in sizes])
    ax.xaxis.set_minor_locator(NullLocator())  # the log axis' own labels overprint the sizes
    ax.set_title("forward, FP32, 2^20 elements per call (95 % intervals)", fontsize=9)
    ax.legend(fontsize=8)
    return png(fig)
