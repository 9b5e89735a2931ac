"""Decoder-only Transformers with every norm kind and placement, DeepNorm, optimizer groups and
probes (see ``TransformerConfig`` for the fields)."""

from normlab.models.config import TransformerConfig
from normlab.models.deepnorm import deepnorm_constants
from normlab.models.optim import param_groups
from normlab.models.probes import Probes
from normlab.models.transformer import Block, Transformer

__all__ = [
    "Block",
    "Probes",
    "Transformer",
    "TransformerConfig",
    "deepnorm_constants",
    "param_groups",
]
