"""``TransformerConfig``: the single source of truth for a model's shape, norm and placement."""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from dataclasses import dataclass
from typing import Any, Literal

from normlab.kernels import registry
from normlab.models.norms import KINDS, NORMS, NormKind, check_option, readers
from normlab.reference import CASTINGS
from normlab.validation import finite, shown

PLACEMENTS = ("post", "pre", "sandwich", "deepnorm", "mix", "reorder")
# placement -> (norm on the branch input, norm after the branch / after the add); "mix" is
# resolved per block (TransformerConfig.block_placement)
NORM_SLOTS = {
    "pre": (True, False),
    "sandwich": (True, True),
    "post": (False, True),
    "deepnorm": (False, True),
    "reorder": (False, True),
}
ARCHS = ("llama", "gpt2")
INITS = ("xavier", "normal", "default")
NORM_BACKENDS = registry.names()
RMS_CASTINGS = CASTINGS

# Placements whose blocks end in a norm of the residual stream, so a final norm would be a
# second norm in a row.
_ENDS_IN_NORM = ("post", "deepnorm")


# The bound of the size fields and of the MLP's width: far above any model trained here, low
# enough that the size arithmetic (normlab.models.size) stays in int64 and float range.
MAX_SIZE = 2**40
# The largest init σ, DyT α and RMSNorm offset: far above any model's (0.02, 0.5, 1), where
# init_std = 1e308 would make every float32 weight infinite.
SCALE_MAX = 1e3


def setting(default: Any = dataclasses.MISSING, *, help: str) -> Any:
    """A config field with its ``help`` text as the field's metadata (``normlab train``'s
    options show it). A field's choices are its type, ``Literal[...]`` (:func:`check_fields`)."""
    return dataclasses.field(default=default, metadata={"help": " ".join(help.split())})


def _eps_defaults() -> list[str]:
    has_eps = [k for k in KINDS.values() if k.eps is not None]
    return [f"{k.key} {k.eps:.0e}".replace("e-0", "e-") for k in has_eps]


@dataclass
class TransformerConfig:
    """A decoder-only Transformer. The four sizes are positional; everything else is keyword."""

    vocab_size: int = setting(help="size of the token vocabulary")
    dim: int = setting(help="model width")
    n_layers: int = setting(help="number of blocks")
    n_heads: int = setting(help="attention heads")

    norm: Literal[NORMS] = setting(
        "rmsnorm",
        help="Norm kind everywhere in the model: "
        + " | ".join(f"{k.key} ({k.description})" for k in KINDS.values())
        + ".",
    )

    placement: Literal[PLACEMENTS] = setting(
        "pre",
        help="Where the norms sit: post ``x = N(x + F(x))``; pre ``x = x + F(N(x))``; sandwich ``x "
        "= x + N_out(F(N_in(x)))``; deepnorm ``x = N(α·x + F(x))`` with β-scaled init; mix "
        "(Mix-LN) post in the first ``max(1, n_layers // 4)`` blocks (none for a 1-layer "
        "model), pre after; reorder (OLMo 2's reordered norm) ``x = x + N(F(x))``: the norm "
        "on each sublayer's output, inside the residual, none on its input.",
    )

    deepnorm_alpha: float | None = setting(
        None,
        help="DeepNorm's skip scale α; None = DeepNet's (2·n_layers)^¼. Set, it changes α alone, "
        "the β-scaled init kept: 1.0 is the ablation of α (a Post-LN block in DeepNet's init). "
        "Only placement='deepnorm' reads it.",
    )

    final_norm: bool = setting(
        True,
        help="Norm the residual stream before the LM head. Only applies to pre, sandwich and mix: "
        "post and deepnorm blocks already end in a norm, so they never get a second one.",
    )

    qk_norm: bool = setting(
        False,
        help="Norm q and k over the head dimension (before RoPE), with the same norm kind.",
    )

    depth_scaled_norm: bool = setting(
        False,
        help='LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth"): the output of each norm '
        "on a sublayer's input in block ``l`` (1-based) is multiplied by ``1/√l``, which "
        "curbs the growth of a Pre-LN residual stream's variance with depth. Needs input "
        "norms: pre, sandwich, mix.",
    )

    batchnorm_causal: bool = setting(
        True,
        help="BatchNorm's training statistics from positions ``<= t`` only "
        "(``BatchNorm(causal=True)``); False pools every token of the batch, as "
        "``torch.nn.BatchNorm1d``, which lets position t see its own sequence's future in "
        "train mode (docs/models.md).",
    )

    dyt_alpha: float = setting(
        0.5,
        help="DyT's initial α (``y = w·tanh(αx) + b``). 0.5 is the paper's default outside "
        "language models; for LLMs Zhu et al. 2025 tune it, larger for narrower models.",
    )

    dyt_alpha_attn: float | None = setting(
        None,
        help="DyT's initial α for the norms of the attention sublayers (and QK-norm); None = "
        "dyt_alpha. Zhu et al.'s LLaMA recipe uses a larger α₀ there than for the MLP and "
        "final norms (e.g. 0.8 against 0.2 at width 4096).",
    )

    learn_embed_scale: bool = setting(
        False,
        help="A learnable scalar, initialized to √dim, multiplies the token embeddings on the way "
        "into the first block (DyT's LLaMA recipe: the stream then starts at RMS ~1 under the "
        '"xavier" init, where tanh(αx) is neither linear nor saturated).',
    )

    arch: Literal[ARCHS] = setting(
        "llama",
        help='"llama": RoPE, SwiGLU MLP, no biases; "gpt2": learned positions, GELU MLP, biases.',
    )

    max_seq_len: int = setting(
        256,
        help="Longest sequence: size of the position table (gpt2) or the RoPE cache (llama).",
    )

    mlp_ratio: float | None = setting(
        None,
        help="MLP hidden size over dim; None = 8/3 for llama (SwiGLU, same parameter count as a 4x "
        "GELU MLP), 4 for gpt2. The hidden size is rounded up to a multiple of 8.",
    )

    bias: bool | None = setting(
        None,
        help="Biases in the linear layers; None = the arch's default (llama: no, gpt2: yes).",
    )

    init: Literal[INITS] = setting(
        "xavier",
        help='Weight init: "xavier" (Xavier-normal linears, embeddings N(0, 1/dim)), "normal" '
        "(N(0, init_std) linears and embeddings, as GPT-2 and the HF Llama family), "
        '"default" (torch\'s own module defaults); biases 0 except under "default" '
        "(docs/models.md has what each weight gets). DeepNorm then multiplies its β-scaled "
        'weights by β, so "xavier" + deepnorm is the paper\'s init.',
    )

    init_std: float = setting(
        0.02,
        help='σ of init="normal" (a model\'s ``initializer_range``); the other inits ignore it.',
    )

    scale_branch_init: bool | None = setting(
        None,
        help="Multiply the init of each branch's last projection (attention ``wo``, MLP ``w_out``) "
        'by 1/√(2·n_layers), GPT-2\'s residual scaling. None = only for norm="none": with no '
        "norm nothing bounds the residual stream, and a 12-layer SwiGLU stack with Xavier "
        "init overflows at init.",
    )

    norm_backend: Literal[NORM_BACKENDS] = setting(
        "auto",
        help="Kernel backend passed to normlab's RMSNorm/LayerNorm (DyT, ScaleNorm and BatchNorm "
        "have a single eager implementation).",
    )

    norm_memory_efficient: bool = setting(
        False,
        help="RMSNorm/LayerNorm backward recomputing xhat from the saved output instead of saving "
        "the input (``memory_efficient=True`` of the modules): one (B, T, dim) activation "
        "less kept per norm whose output the next layer saves anyway (docs/kernels.md, "
        f'"Memory-efficient backward"). {readers("norm_memory_efficient")} only; '
        'norm_backend="torch" has no such backward.',
    )

    eps: float | None = setting(
        None,
        help="Norm epsilon; None = each norm's default (" + ", ".join(_eps_defaults()) + ").",
    )

    rms_casting: Literal[RMS_CASTINGS] | None = setting(
        None,
        help='RMSNorm cast order; None = "llama", or "gemma" when norm_backend="torch" (the only '
        "order F.rms_norm implements; both give identical results in FP32).",
    )

    tie_embeddings: bool = setting(False, help="Share the token embedding matrix with the LM head.")

    norm_offset: float = setting(
        0.0,
        help="RMSNorm's gain is ``norm_offset + weight``, the weight initialised to ``1 - "
        'norm_offset`` so the gain starts at 1 either way; 1.0 with rms_casting="gemma" is '
        f"Gemma's ``(1 + w)``. {readers('norm_offset')}: the other norm kinds have no such "
        "offset and reject a non-zero one.",
    )

    scale_embeddings: bool = setting(
        False,
        help="Multiply the token embeddings by √dim on the way into the first block, as Gemma does "
        "(the LM head, tied or not, reads the unscaled matrix).",
    )

    def __post_init__(self) -> None:
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "max_seq_len"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be a positive int, got {shown(value)}")
            if not 0 < value <= MAX_SIZE:  # beyond it the size arithmetic leaves int64
                raise ValueError(f"{name} must be an int in [1, 2**40], got {shown(value)}")
        if self.dim % self.n_heads:
            raise ValueError(f"dim={self.dim} must be divisible by n_heads={self.n_heads}")
        if self.arch == "llama" and self.head_dim % 2:
            raise ValueError(f"RoPE needs an even head_dim (dim // n_heads), got {self.head_dim}")
        check_fields(self)
        if self.mlp_ratio is not None and not (
            isinstance(self.mlp_ratio, int | float)
            and not isinstance(self.mlp_ratio, bool)
            and 0 < self.mlp_ratio * self.dim <= MAX_SIZE
        ):
            raise ValueError(
                f"mlp_ratio must be a positive number (mlp_ratio x dim <= 2**40) or None, got "
                f"{shown(self.mlp_ratio)}"
            )
        for name in ("dyt_alpha", "dyt_alpha_attn", "init_std"):
            value = getattr(self, name)
            if value is None and name == "dyt_alpha_attn":
                continue
            if isinstance(value, bool) or not (
                isinstance(value, (int, float)) and 0 < value <= SCALE_MAX and finite(value)
            ):
                raise ValueError(
                    f"{name} must be a positive number, at most {SCALE_MAX:g}, got {shown(value)}"
                )
        if self.deepnorm_alpha is not None:
            a = self.deepnorm_alpha
            if isinstance(a, bool) or not (
                isinstance(a, (int, float)) and 0 < a <= SCALE_MAX and finite(a)
            ):
                raise ValueError(
                    f"deepnorm_alpha must be a positive number, at most {SCALE_MAX:g}, or None, "
                    f"got {shown(a)}"
                )
            if self.placement != "deepnorm":
                raise ValueError(
                    f"deepnorm_alpha scales DeepNorm's skip: placement={self.placement!r} has "
                    "none; use placement='deepnorm' or leave it None"
                )
        if self.eps is not None and not (
            isinstance(self.eps, (int, float)) and 0 <= self.eps <= 1 and finite(self.eps)
        ):
            raise ValueError(f"eps must be a number in [0, 1] or None, got {shown(self.eps)}")
        if self.depth_scaled_norm and self.placement in ("post", "deepnorm", "reorder"):
            raise ValueError(
                f"depth_scaled_norm scales the norms on the sublayers' inputs, which "
                f"placement={self.placement!r} does not have; use pre, sandwich or mix"
            )
        if self.placement == "deepnorm" and self.norm_kind.identity:
            # N(α·x + F(x)) without N multiplies the residual stream by α every sublayer.
            raise ValueError(
                f"placement='deepnorm' needs a norm: with norm={self.norm!r} the skip scaling α "
                "grows the residual stream as α^(2·n_layers); choose another norm or placement"
            )
        check_option(self, "norm_memory_efficient")
        if self.norm_memory_efficient and self.norm_backend == "torch":
            raise ValueError(
                "norm_memory_efficient=True needs normlab's kernels or reference: "
                "norm_backend='torch' runs PyTorch's norms, which save their input"
            )
        if isinstance(self.norm_offset, bool) or not isinstance(self.norm_offset, int | float):
            raise TypeError(f"norm_offset must be a number, got {self.norm_offset!r}")
        if not (finite(self.norm_offset) and abs(self.norm_offset) <= SCALE_MAX):
            got = shown(self.norm_offset)
            raise ValueError(f"norm_offset must be finite and within ±{SCALE_MAX:g}, got {got}")
        check_option(self, "norm_offset")

    # ---- derived values (the model reads these, never the raw None defaults)

    @property
    def norm_kind(self) -> NormKind:
        """The row of ``norm`` in the table of norm kinds (normlab.models.norms)."""
        return KINDS[self.norm]

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def use_bias(self) -> bool:
        return self.arch == "gpt2" if self.bias is None else self.bias

    @property
    def hidden_dim(self) -> int:
        ratio = (
            self.mlp_ratio
            if self.mlp_ratio is not None
            else {"llama": 8 / 3, "gpt2": 4.0}[self.arch]
        )
        return 8 * math.ceil(ratio * self.dim / 8)

    @property
    def branch_init_scale(self) -> float:
        on = self.norm_kind.identity if self.scale_branch_init is None else self.scale_branch_init
        return (2 * self.n_layers) ** -0.5 if on else 1.0

    @property
    def casting(self) -> str:
        if self.rms_casting is not None:
            return self.rms_casting
        return "gemma" if self.norm_backend == "torch" else "llama"

    @property
    def n_post_layers(self) -> int:
        """How many leading blocks are Post-LN under placement="mix" (Mix-LN, α = 1/4).

        Rounded down, but at least one whenever there are two blocks or more, so "mix" differs
        from "pre" at every depth where it can keep a Pre-LN block too.
        """
        return max(1, self.n_layers // 4) if self.n_layers > 1 else 0

    def block_placement(self, i: int) -> str:
        """The placement of block ``i``: mix resolves to post or pre; the others are uniform."""
        if self.placement == "mix":
            return "post" if i < self.n_post_layers else "pre"
        return self.placement

    @property
    def has_final_norm(self) -> bool:
        ends_in_norm = self.placement in _ENDS_IN_NORM
        return self.final_norm and not self.norm_kind.identity and not ends_in_norm

    # ---- JSON round trip for the lab

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TransformerConfig:
        check_known_fields(cls, d)
        return cls(**d)


def check_known_fields(cls: type, d: dict[str, Any]) -> None:
    """Reject keys of ``d`` that are not fields of the dataclass ``cls`` (a stale or mistyped
    results file must fail loudly, not be half-read)."""
    unknown = sorted(set(d) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ValueError(f"unknown {cls.__name__} field(s): {unknown}")


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """A config dataclass's field types, evaluated (the annotations are strings here)."""
    return typing.get_type_hints(cls)


def check_fields(cfg: Any) -> None:
    """What a config's field types say of their values, checked in one place for every field:
    a ``Literal[...]`` field holds one of its values, a ``bool`` field a bool (``| None``: or
    None)."""
    for name, hint in field_types(type(cfg)).items():
        value, args = getattr(cfg, name), typing.get_args(hint)
        optional = type(None) in args
        if optional:
            if value is None:
                continue
            (hint,) = (a for a in args if a is not type(None))
        if typing.get_origin(hint) is Literal and value not in typing.get_args(hint):
            one_of = f"{'None or ' * optional}one of {typing.get_args(hint)}"
            raise ValueError(f"{name} must be {one_of}, got {value!r}")
        if hint is bool and not isinstance(value, bool):
            raise TypeError(f"{name} must be a bool{' or None' * optional}, got {value!r}")
