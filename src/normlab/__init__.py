"""normlab: normalization layers, fast kernels and a lab for Transformers."""

from normlab.functional import dyt, layer_norm, rms_norm, scale_norm
from normlab.modules import BatchNorm, DyT, LayerNorm, RMSNorm, ScaleNorm

__version__ = "0.1.0"  # the one place the version is kept: pyproject.toml reads it
__all__ = [
    "BatchNorm",
    "DyT",
    "LayerNorm",
    "RMSNorm",
    "ScaleNorm",
    "dyt",
    "layer_norm",
    "rms_norm",
    "scale_norm",
]
