"""The launch table of the Triton norm kernels: block sizes, warps and grid per range of N.

One :class:`Tune` row serves every hidden size ``n`` up to its ``n_max`` (and above the previous
row's); the last row of each table is the looped path, which serves every longer row. The rows
are data, not a formula: ``benchmarks/gpu_bench.py --sweep`` times :func:`candidates` around
each row on a GPU and writes the winners as JSON, which :func:`load` (or the environment
variable ``NORMLAB_TRITON_TUNING`` naming such a file) puts in place of the built-in rows. The
built-in rows are where that sweep starts: the register-resident row lengths follow what ptxas
fits on sm_90, the grid follows flash-attention's and Liger's persistent backward (several
programs per SM, each owning many rows); docs/benchmarks.md holds the measurements.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

import triton


@dataclass(frozen=True)
class LaunchConfig:
    """How one kernel launch tiles the ``(M, N)`` problem."""

    block_m: int  # rows per program (per tile in the backward)
    block_n: int  # columns per block: the whole row, or the chunk of the looped path
    num_warps: int
    looped: bool  # stream the row in block_n chunks instead of holding it in registers
    programs_per_sm: int = 1  # backward: persistent programs per SM
    prefetch: bool = False  # backward: load the next tile while this one is reduced


@dataclass(frozen=True)
class Tune:
    """One row of a table: how rows of at most ``n_max`` elements are launched.

    A register-resident row (``looped=False``) holds ``block_n = next_power_of_2(n)`` columns
    and ``max(1, tile // block_n)`` rows per tile. A looped row (the table's last) holds
    ``block_m`` rows and streams them in chunks of ``tile // block_m`` columns.
    """

    n_max: int
    tile: int  # elements a tile holds in registers
    num_warps: int
    looped: bool = False
    block_m: int = 1  # looped rows only
    programs_per_sm: int = 1
    prefetch: bool = False

    def config(self, n: int) -> LaunchConfig:
        extra = {"programs_per_sm": self.programs_per_sm, "prefetch": self.prefetch}
        if self.looped:
            return LaunchConfig(
                self.block_m, self.tile // self.block_m, self.num_warps, True, **extra
            )
        block_n = triton.next_power_of_2(max(1, n))
        block_m = max(1, min(MAX_BLOCK_M, self.tile // block_n))
        return LaunchConfig(block_m, block_n, self.num_warps, False, **extra)


MAX_BLOCK_M = 64
LOOPED = 1 << 62  # n_max of the looped row: every longer row

# Until a GPU sweep replaces them, the rows follow what ptxas reports for sm_90 (registers and
# spills a thread, benchmarks/triton_registers.py, no GPU needed; figures in docs/kernels.md):
# programs_per_sm is how many CTAs of that size fit one SM's 64K registers, prefetch is on
# where it costs no spills.

# Forward: a row is read once while it fits one CTA (up to N = 32768 at 32 warps; RMSNorm
# spills little there, LayerNorm more: the sweep weighs it against the looped row); longer rows
# take two passes, the second from L2.
FORWARD: tuple[Tune, ...] = (
    Tune(1024, 4096, 8),
    Tune(2048, 4096, 8),
    Tune(4096, 4096, 8),
    Tune(8192, 8192, 16),
    Tune(16384, 16384, 32),
    Tune(32768, 32768, 32),
    Tune(LOOPED, 4096, 8, looped=True),
)

# Backward: a persistent grid of programs_per_sm programs per SM; each keeps its row tile in
# registers for both of dx's passes and its dweight/dbias sums in registers across all its
# tiles. N = 16384 at 32 warps spills (~400 bytes a thread), which Liger's kernel accepts and
# still beat the looped path with; the sweep weighs both. Beyond it a tile of 4 rows streams in
# 1024-column chunks: its partial sums are read and written once per chunk and tile, a quarter
# of what 1-row tiles would cost.
BACKWARD: tuple[Tune, ...] = (
    Tune(1024, 2048, 8, programs_per_sm=3),
    Tune(2048, 2048, 8, programs_per_sm=2, prefetch=True),
    Tune(4096, 4096, 32, programs_per_sm=1, prefetch=True),
    Tune(8192, 8192, 32, programs_per_sm=1),
    Tune(16384, 16384, 32, programs_per_sm=1),
    Tune(LOOPED, 4096, 16, looped=True, block_m=4, programs_per_sm=2),
)

_tables: dict[bool, tuple[Tune, ...]] = {False: FORWARD, True: BACKWARD}


def table(backward: bool) -> tuple[Tune, ...]:
    """The rows in use (the built-in ones unless :func:`load` replaced them)."""
    return _tables[backward]


def row(n: int, backward: bool) -> Tune:
    """The row serving hidden size ``n``."""
    rows = table(backward)
    return next((t for t in rows if triton.next_power_of_2(max(1, n)) <= t.n_max), rows[-1])


def fused_limit(backward: bool) -> int:
    """The longest row held in registers."""
    return max(t.n_max for t in table(backward) if not t.looped)


def candidates(n: int, backward: bool) -> list[Tune]:
    """The sweep's variations of the row serving ``n`` (the row itself first): warps halved
    and doubled, the tile halved and doubled, and in the backward, the grid and prefetch; at
    the fused limit also the other path (register-resident against looped)."""
    base = row(n, backward)
    out = [base]

    def add(**kw):
        t = dataclasses.replace(base, **kw)
        ok = 1 <= t.num_warps <= 32 and t.tile >= t.block_m and t.programs_per_sm >= 1
        if ok and t not in out:
            out.append(t)

    add(num_warps=base.num_warps // 2)
    add(num_warps=base.num_warps * 2)
    if base.looped:
        add(block_m=base.block_m // 2 or 1)
        add(block_m=base.block_m * 2, tile=base.tile * 2)
    elif base.tile > triton.next_power_of_2(n):
        add(tile=base.tile // 2)
    if not base.looped and base.tile < 16384:
        add(tile=base.tile * 2)
    if backward:
        add(programs_per_sm=base.programs_per_sm * 2)
        if base.programs_per_sm > 1:
            add(programs_per_sm=base.programs_per_sm // 2)
        add(prefetch=not base.prefetch)
    p2 = triton.next_power_of_2(n)
    if not base.looped and p2 == fused_limit(backward):
        out.append(dataclasses.replace(table(backward)[-1], n_max=base.n_max))
    elif base.looped and p2 == 2 * fused_limit(backward):
        out.append(Tune(base.n_max, p2, 32))
    return out


def dump(rows: dict[bool, list[Tune]], path: Path) -> None:
    """Write a forward and backward table as JSON (what :func:`load` reads)."""
    data = {
        "forward" if not bwd else "backward": [dataclasses.asdict(t) for t in ts]
        for bwd, ts in rows.items()
    }
    Path(path).write_text(json.dumps(data, indent=1) + "\n")


def load(path: str | os.PathLike | None) -> None:
    """Use the tables in the JSON file ``path`` (None: back to the built-in rows). A table
    must end in a looped row; rows are sorted by ``n_max``."""
    if path is None:
        _tables.update({False: FORWARD, True: BACKWARD})
        return
    data = json.loads(Path(path).read_text())
    for key, bwd in (("forward", False), ("backward", True)):
        if key not in data:
            continue
        rows = tuple(sorted((Tune(**r) for r in data[key]), key=lambda t: t.n_max))
        if not rows or not rows[-1].looped or any(t.looped for t in rows[:-1]):
            raise ValueError(f"{path}: the {key} table must end in its one looped row")
        _tables[bwd] = rows


if os.environ.get("NORMLAB_TRITON_TUNING"):
    load(os.environ["NORMLAB_TRITON_TUNING"])
