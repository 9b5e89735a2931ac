"""The ``"numba"`` backend: fused Numba CPU kernels.

Importing this module registers the backend (the registry does it lazily on first use) and the
``normlab::numba_*`` custom ops.
"""

from __future__ import annotations

import torch

from normlab.kernels.numba import launch
from normlab.kernels.ops import Launchers, make_kernel_ops
from normlab.kernels.registry import kernel_backend, register

OPS = make_kernel_ops(
    "numba",
    Launchers(
        rms_fwd=launch.rms_fwd,
        rms_bwd=launch.rms_bwd,
        ln_fwd=launch.ln_fwd,
        ln_bwd=launch.ln_bwd,
        rms_bwd_y=launch.rms_bwd_y,
        ln_bwd_y=launch.ln_bwd_y,
    ),
)


def _on_cpu(device: torch.device) -> bool:
    return device.type == "cpu"


register(kernel_backend("numba", OPS.rms_norm, OPS.layer_norm, _on_cpu))
