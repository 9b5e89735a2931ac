"""Launch choices of the Numba kernels: what a launcher may vary without changing the formula.

A :class:`Launch` is passed to every launcher (``launch=``); without one, the launcher asks
:func:`normlab.kernels.numba.tuner.choice`, which returns the tuner's pick for the call's key
``(op, dtype, hidden-size bucket)`` on this CPU, or :data:`OLD` (the choices the kernels had
before there was a tuner) for calls too small for the choice to matter. Every choice is a
runtime argument of the same compiled kernels: trying one compiles nothing.

The choices, and why each can matter on one CPU and not on another:

- ``pipelined``: the forward fuses the stores of row ``i`` with the reads of row ``i + 1`` (the
  DRAM reads overlap the arithmetic), or makes two passes per row (fewer live registers and
  streams per loop); the backward the same for its two passes. Which wins depends on how many
  streams the core's prefetchers follow and how costly the bfloat16 conversions are.
- ``chunks_per_cpu``: rows are cut into this many chunks per CPU (0: the old
  ``max(16, 2 * cpus)``). Fewer chunks restart the pipelined loop less often and keep fewer
  dweight partial sums; more balance the threads better. A function of the machine, never of
  the thread count, so results stay bitwise identical for any thread count.
- ``threads``: the share of torch's threads the kernel runs on: on a machine whose memory
  bandwidth saturates before its cores do, fewer threads move the same bytes.
- ``bf16_pairs`` (the forwards and the default backwards): bfloat16 rows read and written as
  32-bit pairs of elements (:mod:`normlab.kernels.numba.forward_pairs`,
  :mod:`normlab.kernels.numba.backward_pairs`, :mod:`normlab.kernels.numba.backward_pairs_rms`),
  which converts without shuffles; where a
  machine's bfloat16 kernels are bound by its vector units rather than by memory. The one
  choice with compiled code of its own (compiled by its first use, the tuner's); ignored for
  calls whose rows do not qualify (float32, an odd N, a forward with a residual).
- ``vector_512``: the row kernels built for 512-bit vectors
  (:func:`~normlab.kernels.numba.bf16.vector_width`) instead of LLVM's preference, 256 bits on
  Intel's AVX-512 CPUs: fewer instructions per element where a kernel is bound by its arithmetic, a
  lower clock on older AVX-512 CPUs. Its own compiled code, as ``bf16_pairs``; tried for
  bfloat16 rows where LLVM builds 256-bit loops under AVX-512 (:func:`builds_256_bit`:
  Intel's; elsewhere it builds the same code).
- ``stream`` (the forwards and the default backwards, two-pass, not on pairs): the output
  written by non-temporal stores (:mod:`normlab.kernels.numba.forward_stream`,
  :mod:`normlab.kernels.numba.backward_stream`), which skip reading each of its lines from
  memory before writing it: a third of a forward's DRAM traffic, a quarter of a backward's,
  where the output does not fit in the cache for its reader anyway. So it is tried for calls
  from memory only (:func:`from_memory`); for smaller ones it would push the output out of the
  cache its reader finds it in. Compiled code of its own, as ``bf16_pairs``.

The bfloat16 rounding is not a choice: the integer round to nearest even is exact on every
machine, while AVX512-BF16's ``vcvtneps2bf16`` flushes subnormals to zero (torch keeps them).
"""

from __future__ import annotations

import glob
import os
import platform
import re
from dataclasses import dataclass, replace
from functools import cache, cached_property

# Calls with fewer elements than this use OLD: they are bound by the per-call overhead, which no
# choice here changes, and they never pay for tuning.
MIN_ELEMENTS = 1 << 20
BUCKETS = tuple(1 << k for k in range(7, 16))  # hidden sizes 128 .. 32768; larger rows: the last


@dataclass(frozen=True, order=True)
class Launch:
    """How a launcher runs a kernel (see the module docstring for each field)."""

    pipelined: bool
    chunks_per_cpu: int = 0
    threads: float = 1.0
    bf16_pairs: bool = False
    vector_512: bool = False
    stream: bool = False

    def __post_init__(self):
        for flag in ("pipelined", "bf16_pairs", "vector_512", "stream"):
            if not isinstance(getattr(self, flag), bool):
                raise TypeError(f"{flag} must be a bool, got {getattr(self, flag)!r}")
        if not isinstance(self.chunks_per_cpu, int) or not 0 <= self.chunks_per_cpu <= 64:
            raise ValueError(
                f"chunks_per_cpu must be an int in [0, 64], got {self.chunks_per_cpu!r}"
            )
        if not isinstance(self.threads, (int, float)) or not 0 < self.threads <= 1:
            raise ValueError(f"threads must be a share in (0, 1], got {self.threads!r}")
        if self.stream and (self.pipelined or self.bf16_pairs):
            raise ValueError("stream is a choice of the two-pass reference loops only")

    @property
    def name(self) -> str:
        """A short label: ``pipe`` or ``2pass``, chunks per CPU (``c0``: the old rule), thread
        share, ``/pairs`` for bfloat16 pairs, ``/v512`` for 512-bit vectors, ``/nt`` for streamed
        stores."""
        name = f"{'pipe' if self.pipelined else '2pass'}/c{self.chunks_per_cpu}/t{self.threads:g}"
        return name + "/pairs" * self.bf16_pairs + "/v512" * self.vector_512 + "/nt" * self.stream

    @classmethod
    def from_name(cls, name: str) -> Launch:
        """The launch choice of a :attr:`name` (``pipe/c1/t0.5``, ``2pass/c0/t1/pairs``, ...)."""
        m = re.fullmatch(r"(pipe|2pass)/c(\d+)/t([0-9.]+)(/pairs)?(/v512)?(/nt)?", name)
        if m is None:
            raise ValueError(f"not a launch choice name: {name!r} (e.g. 'pipe/c0/t1/pairs')")
        flags = (m[k] is not None for k in (4, 5, 6))
        return cls(m[1] == "pipe", int(m[2]), float(m[3]), *flags)

    @cached_property
    def chunks(self) -> int:
        """Chunks per call on this machine (before capping at the row count); cached, as
        launchers read it on every call."""
        cpus = cpu_count()
        return self.chunks_per_cpu * cpus if self.chunks_per_cpu else max(16, 2 * cpus)


# The launchers and their choices before the tuner: the forward pipelined, the backwards two-pass
# (the memory-efficient ones have no pipelined form).
FWD_OPS = ("rms_fwd", "ln_fwd")
PIPE_BWD_OPS = ("rms_bwd", "ln_bwd")
OPS = (*FWD_OPS, *PIPE_BWD_OPS, "rms_bwd_y", "ln_bwd_y")
OLD = {op: Launch(pipelined=op in FWD_OPS) for op in OPS}
PAIRS_OPS = (*FWD_OPS, *PIPE_BWD_OPS)  # the launchers with a bf16_pairs kernel
STREAM_OPS = PAIRS_OPS  # the launchers with a streamed kernel (the others ignore the choice)


# A smaller share of the threads is tried only from this many CPUs up: where the memory
# bandwidth may saturate before the cores do. On a 2-core VM the bfloat16 kernels are compute
# bound, and one thread, picked there by a tuning that ran against other processes' load, made
# the bfloat16 forward clearly slower once measured again (docs/benchmarks.md has the figures).
THREAD_SHARE_MIN_CPUS = 8


def candidates(
    op: str,
    cpus: int | None = None,
    dtype: str = "float32",
    wide: bool | None = None,
    memory: bool = False,
) -> tuple[Launch, ...]:
    """What the tuner times for ``op`` on rows of ``dtype`` on a machine of ``cpus`` CPUs (this
    one's if None): the old choice first, then one change at a time, and both kernel-side
    changes together; for bfloat16 rows of the launchers with pairs kernels, both loops on pairs
    too, and, where ``wide`` (LLVM builds 256-bit loops under AVX-512, so 512-bit ones are other
    code; this CPU's :func:`builds_256_bit` if None), those on 512-bit vectors (float32 rows are
    bound by memory: the wider vectors measured no faster there); for calls ``memory``
    (:func:`from_memory`) of the launchers with streamed kernels, the two-pass loop streamed."""
    old = OLD[op]
    out = [old, replace(old, chunks_per_cpu=1)]
    loops = [old]
    if op not in ("rms_bwd_y", "ln_bwd_y"):
        flip = replace(old, pipelined=not old.pipelined)
        out += [flip, replace(flip, chunks_per_cpu=1)]
        loops.append(flip)
    if op in PAIRS_OPS and dtype == "bfloat16":
        loops = [replace(c, bf16_pairs=True) for c in loops]
        out += loops
    if dtype == "bfloat16" and (builds_256_bit() if wide is None else wide):
        out += [replace(c, vector_512=True) for c in loops]
    if memory and op in STREAM_OPS:
        out.append(Launch(pipelined=False, stream=True))
    if (cpu_count() if cpus is None else cpus) >= THREAD_SHARE_MIN_CPUS:
        out.append(replace(old, threads=0.5))
    return tuple(out)


def every_candidate(dtype: str | None = None) -> tuple[Launch, ...]:
    """Every launch choice any op may run on rows of ``dtype`` (either if None) on any machine
    (what the accuracy tests run each kernel with)."""
    many, dts = THREAD_SHARE_MIN_CPUS, (dtype,) if dtype else ("float32", "bfloat16")
    cands = (candidates(op, many, d, True, True) for op in OPS for d in dts)
    return tuple(sorted({c for cs in cands for c in cs}))


def bucket(n: int) -> int:
    """The hidden-size bucket of rows of ``n``: the power of two >= n, within :data:`BUCKETS`."""
    b = 1 << max(0, n - 1).bit_length()
    return min(max(b, BUCKETS[0]), BUCKETS[-1])


ITEMSIZE = {"float32": 4, "bfloat16": 2}  # the rows' storage dtypes of the keys


def key(op: str, dtype: str, n: int, elements: int = 0) -> str:
    """The tuning key of a call on ``elements`` elements in rows of ``n``:
    ``"<op>/<dtype>/<bucket>"``, with ``"/mem"`` appended for calls :func:`from_memory`; dtype is
    the rows' storage (``float32`` or ``bfloat16``: float16 runs through float32)."""
    return f"{op}/{dtype}/{bucket(n)}" + "/mem" * from_memory(dtype, elements)


def from_memory(dtype: str, elements: int) -> bool:
    """Whether a call's input rows alone exceed the last-level cache, so that its reads and
    writes go to DRAM: a regime whose best launch choice can differ from that of a call served
    by the cache (the two-pass forward won in the cache and lost from DRAM on one CPU, see
    docs/kernels.md), so the two are tuned apart. False where the cache size is unknown."""
    return elements * ITEMSIZE[dtype] > llc_bytes() > 0


# ---- the machine ---------------------------------------------------------------------------


@cache
def cpu_info() -> tuple[str, frozenset[str]]:
    """``(model name, flags)`` of this CPU: ``/proc/cpuinfo`` on Linux, else what ``platform``
    says (no flags)."""
    model, flags = "", frozenset()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                name, _, value = line.partition(":")
                name = name.strip()
                if name == "model name" and not model:
                    model = value.strip()
                elif name in ("flags", "Features") and not flags:
                    flags = frozenset(value.split())
                if model and flags:
                    break
    except OSError:
        pass
    return model or platform.processor() or platform.machine() or "unknown", flags


@cache
def llc_bytes() -> int:
    """The size of this CPU's last-level cache in bytes (the highest level sysfs lists for CPU
    0 on Linux); 0 where unknown."""
    level, size = 0, 0
    for d in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*"):
        try:
            with open(f"{d}/level") as f, open(f"{d}/size") as g:
                lv, text = int(f.read()), g.read().strip().upper()
            b = int(text.rstrip("KMG")) << {"K": 10, "M": 20, "G": 30}.get(text[-1:], 0)
        except (OSError, ValueError):
            continue
        if lv > level:
            level, size = lv, b
    return size


@cache
def cpu_count() -> int:
    return os.cpu_count() or 1


def builds_256_bit() -> bool:
    """Whether LLVM builds this CPU's loops for 256-bit vectors though it has AVX-512, where
    :attr:`Launch.vector_512` changes the code: its tuning for Intel's AVX-512 CPUs (whose clock
    fell under 512-bit work), not for AMD's (Zen 4 got 512-bit loops either way)."""
    return machine_class().startswith("intel-avx512")


def machine_class() -> str:
    """The machine class of the shipped table: vendor and vector ISA (``intel-avx512-amx``,
    ``intel-avx512``, ``intel-avx2``, ``amd-avx512``, ``amd-avx2``, else ``other``)."""
    model, flags = cpu_info()
    vendor = "intel" if "intel" in model.lower() else "amd" if "amd" in model.lower() else ""
    if not vendor or "avx2" not in flags:
        return "other"
    if "avx512f" not in flags:
        return f"{vendor}-avx2"
    return f"{vendor}-avx512-amx" if "amx_tile" in flags else f"{vendor}-avx512"


# The shipped table: per machine class, the picks measured there (`python
# benchmarks/bench_cpu_limit.py --tune-budget 2` prints this machine's); keys absent here, and
# every key of an unlisted class, run OLD. What is used with NORMLAB_TUNE=0 and on a busy
# machine. A key is shipped where two runs of that script picked the same choice and it is not
# OLD (docs/benchmarks.md has the runs). Intel: every float32 key kept OLD; the bfloat16 picks
# on 512-bit vectors are those two or three runs under a load average of 1.0-1.6 agreed on, and
# the RMSNorm backward at 8192, where those three disagreed, keeps the two quiet runs' pick
# before there were 512-bit candidates. AMD (Zen 4): the last two runs, with streamed stores
# (the script's rows are calls from memory there); a key where they disagreed keeps the pick
# shipped before (two earlier runs agreed on it) or, where there was none, OLD. AMD (Zen 3,
# AVX2): what the two runs of its first day agreed on.
_PAIRS, _PAIRS_2PASS = Launch(pipelined=True, bf16_pairs=True), Launch(False, bf16_pairs=True)
_STREAM, _SIZES = Launch(False, stream=True), (1024, 4096, 8192)
_WIDE, _WIDE_2PASS = (replace(c, vector_512=True) for c in (_PAIRS, _PAIRS_2PASS))
SHIPPED: dict[str, dict[str, Launch]] = {
    "intel-avx512-amx": {
        **{f"{op}/bfloat16/{n}": _WIDE for op in ("rms_fwd", "ln_fwd") for n in (1024, 4096, 8192)},
        "rms_bwd/bfloat16/1024": _WIDE,
        "rms_bwd/bfloat16/4096": _WIDE_2PASS,
        "rms_bwd/bfloat16/8192": _PAIRS,
        **{f"ln_bwd/bfloat16/{n}": _WIDE_2PASS for n in (1024, 4096, 8192)},
    },
    "amd-avx512": {
        **{f"{op}/{dt}/{n}/mem": _STREAM for op in FWD_OPS for dt in ITEMSIZE for n in _SIZES},
        **{f"rms_bwd/float32/{n}/mem": _STREAM for n in _SIZES},
        **{f"ln_bwd/float32/{n}/mem": _STREAM for n in (4096, 8192)},
        **{f"{op}/bfloat16/1024/mem": _STREAM for op in PIPE_BWD_OPS},
        **{f"rms_bwd/bfloat16/{n}/mem": Launch(True) for n in (4096, 8192)},
    },
    "amd-avx2": {
        **{f"{op}/float32/{n}/mem": _STREAM for op in STREAM_OPS for n in _SIZES},
        **{f"rms_bwd/bfloat16/{n}/mem": _PAIRS for n in (1024, 8192)},
        **{f"ln_bwd/bfloat16/{n}/mem": _PAIRS_2PASS for n in (4096, 8192)},
    },
}


def shipped(k: str, op: str) -> Launch:
    """The shipped choice for key ``k`` (of ``op``) on this machine's class, else OLD."""
    return SHIPPED.get(machine_class(), {}).get(k, OLD[op])
