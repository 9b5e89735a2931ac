"""Fused residual-add + RMSNorm against the same two steps unfused, for the finding
``fused-add-norm-saves-traffic`` of ``normlab bench --findings`` (001: production code fuses
kernels to cut extra memory reads and writes).

Both sides are normlab's own kernels on the same FP32 rows, so the only difference is the fusion:
fused, ``normlab.rms_norm(x, w, residual=r)`` reads ``x`` and ``r`` once and writes ``h = x + r``
and ``y`` (4 row-sized tensors of traffic); unfused, ``h = x + r`` (read 2, write 1) and then
``normlab.rms_norm(h, w)`` (read 1, write 1): 5. A memory-bound op's time follows its bytes, so
the fusion should save up to a fifth of the time — where the bytes come from memory: each call
streams ``ELEMENTS`` per tensor, 2 GB across the fused call's four, past a last-level cache of a
few hundred MB (a server's L3 can hold the 16 MB of 2^20 elements a tensor, where the saved
traffic costs little time). ``llc_bytes`` reads the cache's size; a run on a CPU whose cache
holds a quarter of the working set decides nothing (``working_set_why``). A round's value is
``ln(t_unfused / t_fused)`` from one serially interleaved measurement (``ratio.interleaved``).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import torch

from normlab.lab.bench.bandwidth import norm_call
from normlab.lab.bench.ratio import interleaved

SIZES = (256, 1024, 4096)
ELEMENTS = 1 << 27  # per tensor and call: 512 MB of FP32, 2 GB across the fused call's four
TRAFFIC = {"fused": 4, "unfused": 5}  # row-sized tensors read or written per call


def llc_bytes() -> int | None:
    """The size of CPU 0's last-level cache (Linux sysfs), None where it cannot be read."""
    sizes = []
    for d in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (d / "size").read_text().strip()
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            sizes.append(int(text.rstrip("KMG")) * scale)
        except (OSError, ValueError):  # no such file, or a size this parser does not know
            continue
    return max(sizes, default=None)


def working_set_why(device: str = "cpu") -> str | None:
    """Why a run here cannot decide the finding (the cache holds a quarter of the fused call's
    working set, or its size is unknown), None where it can."""
    if device != "cpu":
        return None  # a GPU's L2 is tens of MB at most
    llc, working = llc_bytes(), TRAFFIC["fused"] * ELEMENTS * 4
    if llc is None:
        return "the last-level cache's size cannot be read here"
    if 4 * llc > working:
        return (
            f"the last-level cache ({llc >> 20} MB) holds a quarter of the {working >> 20} MB read"
        )
    return None


def contenders(d: int, device: str = "cpu", elements: int = ELEMENTS) -> dict[str, object]:
    """``"fused"``/``"unfused"`` -> no-argument forward on ``elements // d`` FP32 rows of ``d``,
    each norm called as ``normlab bench`` calls it (``bandwidth.norm_call``)."""
    backend = "triton" if device == "cuda" else "numba"
    g = torch.Generator(device=device).manual_seed(d)
    x = torch.randn(max(1, elements // d), d, generator=g, device=device)
    r = torch.randn(x.shape, generator=g, device=device)
    w = 1 + 0.1 * torch.randn(d, generator=g, device=device)
    fused = norm_call("fused_add_rms_norm", d, backend)
    norm = norm_call("rms_norm", d, backend)

    def unfused():
        h = x + r
        return norm(h, w, None, None), h

    return {"fused": lambda: fused(x, w, None, r), "unfused": unfused}


def measure(
    sizes=SIZES, rounds: int = 15, device: str = "cpu", log=print
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per ``"d=<d>"`` the round values ``ln(t_unfused / t_fused)``, and per side the median
    milliseconds at each size."""
    values: dict[str, list[float]] = {}
    ms: dict[str, list[float]] = {"fused": [], "unfused": []}
    for d in sizes:
        times = interleaved(contenders(d, device), rounds, device)
        pairs = zip(times["fused"], times["unfused"], strict=True)
        values[f"d={d}"] = [math.log(u / f) for f, u in pairs]
        for side in ms:
            ms[side].append(1e3 * statistics.median(times[side]))
        saved = 1 - math.exp(-statistics.median(values[f"d={d}"]))
        log(f"d={d}: fused saves {saved:.0%} of the unfused time")
    return values, ms
