"""Where and in what precision a run trains: the device names a config takes, the concrete one
it runs on, and the forward's autocast."""

from __future__ import annotations

import contextlib

import torch

from normlab.lab.kit.errors import UsageError

DEVICES = ("auto", "cpu", "cuda")
PRECISIONS = ("fp32", "bf16", "fp16")
_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


def concrete_device(name: str) -> str:
    """``"cpu"`` or ``"cuda"``: ``"auto"`` (the configs check the name) is CUDA when available,
    else the CPU."""
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def check_device(device: str | None, flag: str = "--device") -> None:
    """A :class:`UsageError` for ``cuda`` on a machine without CUDA, before any work."""
    if device == "cuda" and not torch.cuda.is_available():
        raise UsageError(
            f"{flag} cuda: no CUDA device here (torch {torch.__version__}, "
            "torch.cuda.is_available() is False)"
        )


def device_name(device: torch.device) -> str:
    """What the run trained on, for the record: the GPU's name, or ``cpu``."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def autocast(device_type: str, precision: str):
    """``torch.autocast`` for bf16/fp16 on ``device_type``; fp32: nothing."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type, dtype=_AUTOCAST[precision])
