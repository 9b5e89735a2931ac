"""``TrainConfig``: everything that decides a training run's numbers, the single source of truth
for a run (it round-trips through JSON). Its fields (their types, defaults and help texts) and
``TransformerConfig``'s are what ``normlab train``'s options and the study spec loader both read
(with the lab's own table of them, ``normlab.lab.train.fields``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from normlab.lab.train.device import DEVICES, PRECISIONS
from normlab.models import TransformerConfig
from normlab.models.config import check_fields, check_known_fields, field_types, setting
from normlab.validation import check_real, shown

SCHEDULES = ("constant", "cosine")
INT64 = 2**63 - 1
# Validation sequences of a run: 1M sequences of 64 bytes is 64 MB of text, beyond any corpus
# the lab trains on; a larger count would loop for hours before the size check could help.
MAX_EVAL_SEQUENCES = 1 << 20
# The int fields that must be >= 1; the others must be >= 0, but seed (any int64) and grad_accum
# (checked against batch_size).
_POSITIVE = ("batch_size", "seq_len", "eval_batches", "probe_batches", "norm_time_every")
# The int fields with an upper bound, and the bound.
_HIGHS = {"steps": INT64, "seed": INT64, "threads": 4096, "eval_sequences": MAX_EVAL_SEQUENCES}


@dataclass
class TrainConfig:
    """Everything that decides a run's numbers (``threads`` only decides its speed)."""

    model: TransformerConfig = setting(help="the model's config (TransformerConfig)")
    steps: int = setting(150, help="optimizer steps")
    batch_size: int = setting(
        16,
        help="global batch, in sequences per step (split evenly over the processes)",
    )
    seq_len: int = setting(64, help="tokens (bytes) per sequence")
    lr: float = setting(1e-3, help="peak learning rate (AdamW)")
    warmup_steps: int = setting(
        0,
        help="Linear warmup from lr/warmup_steps to lr; 0 = none (Post-LN's known failure mode).",
    )
    schedule: Literal[SCHEDULES] = setting(
        "constant",
        help='After warmup: "constant", or "cosine" decay to lr * min_lr_ratio at the last step.',
    )
    min_lr_ratio: float = setting(0.1, help="cosine floor, as a fraction of lr")
    weight_decay: float = setting(0.1, help="AdamW weight decay")
    decay_norms: bool = setting(
        False,
        help="Apply weight decay to norm weights/biases too (normally they are excluded).",
    )
    norm_weight_decay: float | None = setting(
        None,
        help="With decay_norms: the norms' own weight decay (None = weight_decay), so decay on "
        "the gains can be given a budget where it acts (lr·wd·steps) while the other weights "
        "keep theirs.",
    )
    betas: tuple[float, float] = setting((0.9, 0.98), help="AdamW betas")
    adam_eps: float = setting(1e-8, help="AdamW eps")
    grad_clip: float | None = setting(
        None,
        help="Clip the global gradient norm; None (the default) so divergence stays visible.",
    )
    seed: int = setting(0, help="model init and data order")
    eval_interval: int = setting(0, help="Validate every this many steps (0 = only at the end).")
    eval_batches: int = setting(8, help="validation batches per evaluation")
    eval_sequences: int = setting(
        0,
        help="Validate on this many sequences, drawn once with a fixed seed whatever the batch "
        "size (every arm sees the same bytes) and evaluated in batches of ``batch_size``; 0: "
        "the first ``eval_batches`` batches of ``batch_size`` sequences.",
    )
    norm_time_every: int = setting(
        1,
        help="Time the norms (``norm_ms``) on every this many steps; the others run without hooks.",
    )
    eval_train_mode: bool = setting(
        False,
        help="Also validate in train() mode (batch statistics): BatchNorm's train/eval gap.",
    )
    eval_serving: bool = setting(
        False,
        help="After the last step, also measure how the model behaves when served "
        "(``normlab.lab.train.serving``): how far a sequence's logits move when its batch-mates "
        "change, the loss at batch 1 in train mode, and the loss when the mates are padded; "
        "in train and in eval mode. BatchNorm's batch dependence; 0 for batch-free norms.",
    )
    grad_accum: int = setting(
        1,
        help="Micro-batches per optimizer step: each step's batch_size sequences run as this many "
        "forward/backward passes of batch_size / grad_accum, their gradients summed (averaged) "
        "before the one update. The same update for a batch-free norm; BatchNorm's statistics "
        "come from each micro-batch, as in a user's accumulation loop.",
    )
    eval_lengths: tuple[int, ...] = setting(
        (),
        help="After the last step, also validate on the first L positions of every validation "
        "sequence, for each L here (summary ``val_loss_at``, and ``val_loss_train_mode_at`` "
        "with eval_train_mode): trained at one length, served at others.",
    )
    probe_steps: tuple[int, ...] = setting(
        (0,),
        help="Steps (0 = at init, ``steps`` = after the last update) at which the model probes "
        "run.",
    )
    block_drop_batches: int = setting(
        0,
        help="Effective depth, evaluated after training by the run's own process (0 = off): the "
        "validation loss on the first this many validation batches with each block skipped in "
        "turn (the block an identity), minus the loss with every block (summary "
        "``block_drop_loss``, one value per block).",
    )
    train_slice: int = setting(
        0,
        help="Train on the first this many bytes of the training split only (0 = all of it): a "
        "small corpus seen for many epochs. The run then also reports its loss on those bytes "
        "(summary ``final_train_loss``, eval mode, as many sequences as validation; and "
        "``train_loss`` in every validation's record), so the train–validation gap can be read, "
        "at the end and along the curve.",
    )
    freeze_norm_stats: int = setting(
        0,
        help="After this many steps the BatchNorm layers normalize with their running statistics "
        "in training too, no longer updated (0 = never): the same norm without batch noise.",
    )
    probe_batches: int = setting(
        1,
        help="Each probe is the mean over this many validation batches: one batch's gradient "
        "profile is noisy, and at-init claims read little else.",
    )
    diverge_factor: float = setting(
        2.0,
        help="Divergence rule: loss or gradient norm not finite, or training loss above "
        "diverge_factor * ln(vocab_size) (i.e. twice the loss of a uniform guess).",
    )
    stall_step: int = setting(
        0,
        help="A predeclared early stop (0 = none): after this many steps, a run whose training "
        "loss (mean of the last 10 steps) is still above the corpus's unigram entropy minus "
        '``stall_margin`` stops there, status "ok", ``stopped_step`` set: an arm still on '
        "the plateau spends no more of a study's budget.",
    )
    stall_margin: float = setting(
        0.15,
        help="The stall rule's margin below the unigram entropy, in nats per byte (see "
        "stall_step).",
    )
    threads: int = setting(
        0,
        help="torch intra-op threads for this run; 0 = leave torch's setting alone.",
    )
    device: Literal[DEVICES] = setting(
        "auto",
        help='Where the run trains: "cpu", "cuda", or "auto" (CUDA when available, else the CPU); '
        "a study records the concrete one. The norms' kernels follow (Triton on CUDA, Numba on "
        "the CPU), and so do the collectives (nccl on CUDA, gloo on the CPU).",
    )
    precision: Literal[PRECISIONS] = setting(
        "fp32",
        help='"fp32"; "bf16": forward under torch.autocast in bfloat16; "fp16": autocast in '
        "float16 with a GradScaler (an overflowed step is skipped, not a divergence).",
    )

    def __post_init__(self) -> None:
        if isinstance(self.model, dict):
            self.model = TransformerConfig.from_dict(self.model)
        self.betas = tuple(float(b) for b in self.betas)
        self.probe_steps = tuple(sorted({int(s) for s in self.probe_steps}))
        self.eval_lengths = tuple(sorted({int(n) for n in self.eval_lengths}))
        for name, hint in field_types(type(self)).items():
            low = 1 if name in _POSITIVE else 0
            if hint is int and name not in ("seed", "grad_accum") and getattr(self, name) < low:
                raise ValueError(f"{name} must be >= {low}, got {getattr(self, name)}")
        if self.eval_sequences % self.batch_size:
            raise ValueError(
                f"eval_sequences ({self.eval_sequences}) must be a multiple of batch_size "
                f"({self.batch_size}): validation batches are all of one size"
            )
        n_val = self.val_sequences
        if self.eval_serving and n_val < self.batch_size**2:
            raise ValueError(
                f"eval_serving needs at least batch_size² = {self.batch_size**2} validation "
                f"sequences (it regroups blocks of batch_size batches), got {n_val}: raise "
                "eval_sequences or eval_batches"
            )
        check_fields(self)
        self._check_numbers()  # a negative norm_weight_decay among them
        if self.norm_weight_decay is not None and not self.decay_norms:
            raise ValueError(
                f"norm_weight_decay={self.norm_weight_decay!r} needs decay_norms=True and a "
                "value >= 0 (None: the norms decay with weight_decay)"
            )
        if not (1 <= self.grad_accum <= self.batch_size and self.batch_size % self.grad_accum == 0):
            raise ValueError(
                f"grad_accum={self.grad_accum} must divide batch_size={self.batch_size}"
            )
        if any(not 1 <= n <= self.seq_len for n in self.eval_lengths):
            raise ValueError(f"eval_lengths must lie in [1, seq_len={self.seq_len}]")
        if self.freeze_norm_stats and self.model.norm != "batchnorm":  # else it would do nothing
            raise ValueError(
                f"freeze_norm_stats={self.freeze_norm_stats} needs model.norm='batchnorm', got "
                f"{self.model.norm!r}"
            )
        if self.freeze_norm_stats and self.freeze_norm_stats >= self.steps:  # never reached
            raise ValueError(
                f"freeze_norm_stats={self.freeze_norm_stats} must be below steps={self.steps}: "
                "the statistics would never be frozen"
            )
        if self.train_slice and self.train_slice <= self.seq_len + 1:
            raise ValueError(f"train_slice={self.train_slice} must exceed seq_len + 1")
        if self.seq_len > self.model.max_seq_len:
            raise ValueError(f"seq_len={self.seq_len} exceeds model.max_seq_len")
        if any(s < 0 or s > self.steps for s in self.probe_steps):
            raise ValueError(f"probe_steps must lie in [0, steps={self.steps}]")

    def _check_numbers(self) -> None:
        """Finite values in the ranges the optimizer and the rules can use: a value torch would
        refuse mid-run (``betas = [2, 5]``) or that turns a rule off (``diverge_factor =
        nan``) is refused here, where the spec or the option sets it."""
        for name, low, high, low_open in (
            ("lr", 0, 1e3, True),
            ("min_lr_ratio", 0, 1, False),
            ("weight_decay", 0, 1e3, False),
            ("adam_eps", 0, 1, True),
            ("diverge_factor", 0, 1e6, True),
            ("stall_margin", -1e3, 1e3, False),
        ):
            check_real(name, getattr(self, name), low=low, high=high, low_open=low_open)
        for i, b in enumerate(self.betas):
            check_real(f"betas[{i}]", b, low=0, high=1)
            if b == 1:
                raise ValueError(f"betas[{i}] must be < 1, got {b}")
        if self.grad_clip is not None:
            check_real("grad_clip", self.grad_clip, low=0, high=1e12, low_open=True)
        if self.norm_weight_decay is not None:
            check_real("norm_weight_decay", self.norm_weight_decay, low=0, high=1e3)
        for name, high in _HIGHS.items():
            if not getattr(self, name) <= high:
                raise ValueError(f"{name} must be <= {high:,}, got {shown(getattr(self, name))}")
        if self.val_sequences > MAX_EVAL_SEQUENCES or self.probe_batches > MAX_EVAL_SEQUENCES:
            raise ValueError(
                f"eval_batches x batch_size = {self.val_sequences:,} validation sequences; at "
                f"most {MAX_EVAL_SEQUENCES:,} are allowed"
            )

    @property
    def val_sequences(self) -> int:
        """The validation set's size in sequences: ``eval_sequences``, else ``eval_batches``
        batches of ``batch_size``."""
        return self.eval_sequences or self.eval_batches * self.batch_size

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)  # the model's config a dict too
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}  # JSON's lists

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TrainConfig:
        check_known_fields(cls, d)
        return cls(**{**d, "model": TransformerConfig.from_dict(d["model"])})

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with ``changes``; ``model=`` may be a dict of model-field changes."""
        model = changes.pop("model", None)
        if isinstance(model, dict):
            model = dataclasses.replace(self.model, **model)
        return dataclasses.replace(self, model=model or self.model, **changes)

    def lr_at(self, step: int) -> float:
        if self.warmup_steps and step < self.warmup_steps:
            return self.lr * (step + 1) / self.warmup_steps
        if self.schedule == "constant" or self.steps <= self.warmup_steps + 1:
            return self.lr
        frac = (step - self.warmup_steps) / (self.steps - 1 - self.warmup_steps)
        lo = self.lr * self.min_lr_ratio
        return lo + (self.lr - lo) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac)))


def flat_fields(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A config dict (``TrainConfig.to_dict``) with its nested tables' fields as dotted names
    (``model.dim``)."""
    out: dict[str, Any] = {}
    for k, v in config.items():
        out.update(flat_fields(v, f"{prefix}{k}.") if isinstance(v, dict) else {prefix + k: v})
    return out
