"""The ``"numba"`` backend: fused Numba CPU kernels.

Importing this module registers the backend (the registry does it lazily on first use) and the
``normlab::numba_*`` custom ops.
"""

from __future__ import annotations

import torch

from normlab.kernels import layer_norm, rms_norm
from normlab.kernels.numba import launch
from normlab.kernels.registry import kernel_backend, register

RMS = rms_norm.bind("numba", launch)
LN = layer_norm.bind("numba", launch)


def _on_cpu(device: torch.device) -> bool:
    return device.type == "cpu"


register(kernel_backend("numba", RMS.rms_norm, LN.layer_norm, _on_cpu))
