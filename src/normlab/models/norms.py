"""The norm kinds of ``TransformerConfig.norm``, one row each: what builds a kind's module, how
many parameters it has, which config fields it reads, its default eps, the buffers it keeps per
position, and its one-line description. ``NORMS`` (the field's choices), the field's help text,
``make_norm``, the size model (``normlab.models.size``) and the config's checks of options that
only some kinds read all come from ``KINDS``; docs/models.md's table of norm kinds lists the same
rows (tests/models/test_norm_kinds.py checks every row builds, sizes and is documented)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from normlab.modules import BatchNorm, DyT, LayerNorm, RMSNorm, ScaleNorm

# A TransformerConfig: config.py reads this table for its choices and checks, so this module
# cannot import it back (tests/test_architecture.py counts type-only imports as imports too).
TransformerConfig = Any


def _zero(cfg: TransformerConfig) -> int:
    return 0


@dataclass(frozen=True)
class NormKind:
    """One norm kind.

    ``build(cfg, size, attn, eps)`` makes its module over the last ``size`` features (``attn``:
    a norm of an attention sublayer; ``eps``: ``cfg.eps`` or the row's ``eps``); ``params(cfg,
    size)`` is that module's parameter count; ``options`` the config fields ``build`` reads,
    beyond the size (``eps`` among them where the module has one); ``position_buffers(cfg)``
    the buffers of shape (max_seq_len, size) each module keeps, and ``step_floats(cfg)`` the
    floats per token and feature a training step keeps on top of a block's own activations
    (what :func:`normlab.models.size.run_bytes` adds for them).
    """

    key: str
    description: str
    module: type[nn.Module] | None  # None: the identity, no module
    build: Callable[[TransformerConfig, int, bool, Any], nn.Module | None]
    params: Callable[[TransformerConfig, int], int]
    options: tuple[str, ...] = ()
    eps: float | None = None  # the module's default; None: it has no eps
    position_buffers: Callable[[TransformerConfig], int] = _zero
    step_floats: Callable[[TransformerConfig], int] = _zero

    @property
    def identity(self) -> bool:
        return self.module is None

    def make(self, cfg: TransformerConfig, size: int, *, attn: bool = False) -> nn.Module | None:
        """The module over the last ``size`` features (None for the identity)."""
        eps = self.eps if cfg.eps is None else cfg.eps
        return self.build(cfg, size, attn, eps)


def _kernel(cfg: TransformerConfig) -> dict[str, Any]:
    return {"backend": cfg.norm_backend, "memory_efficient": cfg.norm_memory_efficient}


def _batchnorm(cfg: TransformerConfig, size: int, attn: bool, eps: Any) -> nn.Module:
    causal = {"causal": True, "max_positions": cfg.max_seq_len} if cfg.batchnorm_causal else {}
    return BatchNorm(size, eps, **causal)


def _dyt(cfg: TransformerConfig, size: int, attn: bool, eps: Any) -> nn.Module:
    alpha = cfg.dyt_alpha_attn if attn and cfg.dyt_alpha_attn is not None else cfg.dyt_alpha
    return DyT(size, alpha_init=alpha)


# Causal BatchNorm keeps its running prefix mean and variance per position (two buffers), and a
# training step its prefix sums and statistics, (B, T, C) each: 4 floats per token and feature.
def _causal(n: int) -> Callable[[TransformerConfig], int]:
    return lambda cfg: n if cfg.batchnorm_causal else 0


_KERNEL_OPTIONS = ("norm_backend", "norm_memory_efficient")

KINDS: dict[str, NormKind] = {
    k.key: k
    for k in (
        NormKind(
            "layernorm",
            "LayerNorm, mean and variance, a gain and, when the linears have biases, a bias",
            LayerNorm,
            lambda cfg, n, attn, eps: LayerNorm(n, eps, bias=cfg.use_bias, **_kernel(cfg)),
            lambda cfg, n: n * (2 if cfg.use_bias else 1),
            ("eps", "bias", "arch", *_KERNEL_OPTIONS),
            eps=1e-5,
        ),
        NormKind(
            "rmsnorm",
            "RMSNorm, root mean square, a gain: w, or Gemma's 1 + w with norm_offset",
            RMSNorm,
            lambda cfg, n, attn, eps: RMSNorm(
                n, eps, offset=cfg.norm_offset, casting=cfg.casting, **_kernel(cfg)
            ),
            lambda cfg, n: n,
            ("eps", "norm_offset", "rms_casting", *_KERNEL_OPTIONS),
            eps=1e-6,
        ),
        NormKind(
            "batchnorm",
            "BatchNorm, statistics over the batch's tokens, causal by default, a gain and a bias",
            BatchNorm,
            _batchnorm,
            lambda cfg, n: 2 * n,
            ("eps", "batchnorm_causal", "max_seq_len"),
            eps=1e-5,
            position_buffers=_causal(2),
            step_floats=_causal(4),
        ),
        NormKind(
            "dyt",
            "Dynamic Tanh w·tanh(αx) + b, no statistics, a scalar α, a gain and a bias",
            DyT,
            _dyt,
            lambda cfg, n: 2 * n + 1,
            ("dyt_alpha", "dyt_alpha_attn"),
        ),
        NormKind(
            "scalenorm",
            "ScaleNorm g·x / ‖x‖, one scalar gain g",
            ScaleNorm,
            lambda cfg, n, attn, eps: ScaleNorm(n, eps),
            lambda cfg, n: 1,
            ("eps",),
            eps=1e-5,
        ),
        NormKind(
            "none",
            "the identity, no norm",
            None,
            lambda cfg, n, attn, eps: None,
            lambda cfg, n: 0,
        ),
    )
}
NORMS = tuple(KINDS)


def readers(option: str) -> str:
    """The kinds whose module reads ``option``, for a message: "rmsnorm only", "rmsnorm and
    layernorm". The field's default kind (rmsnorm) first, as the docs list the values."""
    keys = sorted(
        (k for k, row in KINDS.items() if option in row.options), key=lambda k: k != "rmsnorm"
    )
    return f"{keys[0]} only" if len(keys) == 1 else f"{', '.join(keys[:-1])} and {keys[-1]}"


# Options a config may set away from their default only under a kind that reads them: an offset
# or a memory-efficient backward silently ignored would be another experiment than the one asked
# for. field -> (set away from its default?, how the message shows it, its note, how to unset it)
_ONLY_WHERE_READ: dict[str, tuple[Callable[[Any], bool], Callable[[Any], str], str, str]] = {
    "norm_memory_efficient": (bool, lambda v: "True", "", "norm_memory_efficient=False"),
    "norm_offset": (bool, lambda v: f"{v:g}", " (Gemma's (1 + w))", "norm_offset = 0"),
}


def check_option(cfg: TransformerConfig, option: str) -> None:
    """Reject ``option`` set away from its default under a norm kind that does not read it."""
    is_set, shown, note, unset = _ONLY_WHERE_READ[option]
    value = getattr(cfg, option)
    if is_set(value) and option not in KINDS[cfg.norm].options:
        raise ValueError(
            f"{option}={shown(value)} applies to {readers(option)}{note}, not "
            f"norm={cfg.norm!r}; set {unset}"
        )
