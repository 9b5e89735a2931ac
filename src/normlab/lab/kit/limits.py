"""What the lab refuses before it starts, and the bounds it checks (docs/refusals.md): names
that are data, and sizes checked from the configs' arithmetic before anything is allocated.

Validators raise ``ValueError`` (names: the spec loader places the message at its key) or
:class:`normlab.lab.kit.errors.UsageError` (sizes: one line saying what is too big, by how much).
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Mapping
from typing import Any

from normlab.lab.kit.errors import UsageError

# ---- names

NAME_MAX = 100
# A name is a path component of reports, plot files and TensorBoard folders: no separators, no
# "." or "..", nothing a shell, a URL or matplotlib's mathtext reads as syntax.
NAME_PATTERN = re.compile(rf"[A-Za-z0-9._+-]{{1,{NAME_MAX}}}")
NAME_RULE = f"letters, digits, '.', '_', '-' or '+', at most {NAME_MAX} characters, not '.' or '..'"
WIDTH_MAX = 20
# The format specs of a name pattern's fields: [[fill]align][sign][#][0][width][,_][.precision]
# [type], as in {lr:g}, {lr:.0e}, {seed:03d}.
_SPEC = re.compile(
    r"(?:[^{}]?[<>^=])?[+ -]?#?0?(?P<width>\d+)?[,_]?(?:\.(?P<prec>\d+))?[bdeEfFgGnoxX%s]?"
)


def check_name(name: str) -> str:
    """``name`` if it matches :data:`NAME_PATTERN`; else ``ValueError`` saying why."""
    if not NAME_PATTERN.fullmatch(name) or name in (".", ".."):
        shown = name if len(name) <= 40 else name[:40] + "..."
        raise ValueError(f"the name {shown!r} is not allowed: expected {NAME_RULE}")
    return name


def format_name(pattern: str, values: Mapping[str, Any]) -> str:
    """``pattern`` with each ``{field}`` or ``{field:spec}`` replaced by ``values[field]``: plain
    values only (no attribute access, indexing or conversion), short format specs (widths and
    precisions <= 20); the result must be a valid name (:func:`check_name`). ``ValueError``
    otherwise."""
    out = []
    try:
        parsed = list(string.Formatter().parse(pattern))
    except ValueError as e:
        raise ValueError(f"not a valid name pattern ({e}); write a literal brace as {{{{") from None
    for literal, field, spec, conversion in parsed:
        out.append(literal)
        if field is None:
            continue
        if not field.isidentifier():
            raise ValueError(
                f"{{{field}}}: a name pattern's field is a field name, e.g. {{lr}}; attribute "
                "access, indexing and positional fields are not allowed"
            )
        if conversion is not None:
            raise ValueError(f"{{{field}!{conversion}}}: conversions are not allowed")
        if field not in values:
            raise ValueError(f"{{{field}}} in {pattern!r} is not a training or model field")
        m = _SPEC.fullmatch(spec or "")
        if m is None or any(int(m[g] or 0) > WIDTH_MAX for g in ("width", "prec")):
            raise ValueError(
                f"{{{field}:{spec}}}: expected a short format spec such as {{{field}:g}} or "
                f"{{{field}:.0e}} (widths and precisions <= {WIDTH_MAX})"
            )
        try:
            out.append(format(values[field], spec))
        except (ValueError, TypeError) as e:
            raise ValueError(f"{{{field}:{spec}}}: {e}") from None
    return check_name("".join(out))


# ---- sizes

MAX_SEEDS = 1_000  # seeds of one claim (a claim's "seeds"); 16 already decides most effects
MAX_ARMS = 10_000  # arms of a study, grids expanded
MAX_RUNS = 100_000  # arms x seeds
MAX_STEPS = 10_000_000  # a run's optimizer steps
MAX_ROWS = 1 << 20  # normlab numerics --rows


def check_bound(what: str, value: int, bound: int) -> None:
    """A :class:`UsageError` if ``value`` exceeds ``bound``, saying by how much."""
    if value > bound:
        raise UsageError(
            f"{what}: {value:,} is more than the {bound:,} the lab allows ({value / bound:.3g}x)"
        )


def machine_memory(device: str = "cpu") -> int | None:
    """Bytes of memory a run on ``device`` can use: the machine's RAM, or the CUDA device's;
    None where it cannot be known (a CUDA run planned on a machine without CUDA)."""
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            return None
        return torch.cuda.get_device_properties(0).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024:
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} PiB"


# Bytes per element of a numerics case at its widest: the input in each dtype, its float64
# copy, the outputs and errors of every implementation (a generous count, not a measurement).
_NUMERICS_BYTES = 64


def check_rows(rows: int, hidden: int, flag: str = "--rows") -> None:
    """A :class:`UsageError` if ``rows`` per case exceed :data:`MAX_ROWS` or, at the widest
    case (``hidden``), a quarter of the machine's memory."""
    check_bound(flag, rows, MAX_ROWS)
    memory = machine_memory()
    need = rows * hidden * _NUMERICS_BYTES
    if memory is not None and need > memory // 4:
        raise UsageError(
            f"{flag} {rows:,}: at hidden {hidden:,} a case needs about {fmt_bytes(need)}, "
            f"{need / memory:.3g}x this machine's {fmt_bytes(memory)} (allowed: a quarter)"
        )


def check_run(cfg, what: str) -> None:
    """A :class:`UsageError` if the run ``cfg`` (a ``TrainConfig``) takes more steps than the
    lab allows, or needs more memory than its device has, from the config's arithmetic
    (``normlab.models.size.run_bytes``: parameters and AdamW state, the buffers that grow with
    max_seq_len, activations, the probes' attention tensors, the validation set): nothing is
    built. A Triton backend on a run without CUDA is refused here too, before it fails mid-run."""
    from normlab.models.size import buffer_bytes, param_count, run_bytes

    check_bound(f"{what}: steps", cfg.steps, MAX_STEPS)
    device = cfg.device if cfg.device != "auto" else "cpu"
    if cfg.model.norm_backend == "triton" and not _has_cuda(cfg.device):
        raise UsageError(f"{what}: norm_backend 'triton' needs a CUDA device; this run has none")
    memory = machine_memory(device)
    need = run_bytes(cfg.model, cfg.batch_size, cfg.seq_len, cfg.val_sequences)
    if memory is not None and need > memory:
        m = cfg.model
        buffers = buffer_bytes(m)
        of = f", {fmt_bytes(buffers)} of it buffers of max_seq_len {m.max_seq_len:,}"
        raise UsageError(
            f"{what}: too big for this machine: a model of {param_count(m):,} parameters (dim "
            f"{m.dim}, {m.n_layers} blocks, MLP {m.hidden_dim:,}) trained at batch "
            f"{cfg.batch_size} x {cfg.seq_len} needs about {fmt_bytes(need)}"
            f"{of if buffers > need // 4 else ''}, {need / memory:.3g}x the "
            f"{fmt_bytes(memory)} of {cfg.device}"
        )


def _has_cuda(device: str) -> bool:
    """Whether a run on ``device`` gets CUDA: ``cuda`` planned anywhere (its machine is asked
    when it runs), ``auto`` where this machine has it, never ``cpu``."""
    import torch

    return device == "cuda" or (device == "auto" and torch.cuda.is_available())


def check_study(study) -> None:
    """:func:`check_run` for each arm of ``study`` and the bound on its runs (arms x seeds)."""
    check_bound(f"study {study.name}: arms", len(study.arms), MAX_ARMS)
    runs = sum(study.seeds(a.name) for a in study.arms)
    check_bound(f"study {study.name}: runs (arms x seeds)", runs, MAX_RUNS)
    for a in study.arms:
        check_run(a.config, f"arm {a.name}")
