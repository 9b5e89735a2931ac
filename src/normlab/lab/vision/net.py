"""One training run of a small CNN on scikit-learn's bundled 8×8 digits (no download).

The net: conv 3×3 (1→16), norm, ReLU, max-pool 2 (8×8 → 4×4), conv 3×3 (16→32), norm, ReLU,
global average pool, linear head to the 10 digits. The norm after each conv is one of:

- ``BatchNorm``: ``torch.nn.BatchNorm2d``, per channel over the batch and space (N, H, W): the
  layer the article means. ``normlab.BatchNorm`` normalizes the last dim of ``(..., C)`` tokens;
  an NCHW image would need two permutes around it for the same statistics;
- ``LayerNorm``: ``torch.nn.GroupNorm(1, C)``, per sample over (C, H, W) with a per-channel γ,
  β: the statistics of LayerNorm (one sample's own features, independent of the batch) with
  the same parameters as BatchNorm2d, so the two differ only in the axes of their statistics
  (``nn.LayerNorm([C, H, W])`` would add a γ and β per pixel);
- ``none``: identity, the convs then with a bias (a norm's β replaces it).

A seed fixes the run's train/validation split, its init (the convs are drawn first and the
norms draw nothing, so every norm starts from the same conv weights) and its batch order: runs
of different arms on one seed are paired. The validation loss and error are measured after
``eval()`` (BatchNorm on its running statistics).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import cache

import torch
import torch.nn.functional as F
from torch import nn

NORMS = ("BatchNorm", "LayerNorm", "none")
CLASSES = 10
CHANNELS = (16, 32)


@dataclass(frozen=True)
class Recipe:
    """How every arm trains: SGD with momentum for ``epochs`` passes over the training split,
    at ``lr`` × batch / ``base_batch`` (the linear scaling rule: the same step per sample at
    every batch), a constant rate; ``val_share`` of the 1,797 digits held out."""

    epochs: int = 15
    lr: float = 0.3  # at base_batch
    base_batch: int = 64
    momentum: float = 0.9
    val_share: float = 0.3

    def lr_at(self, batch: int, factor: float = 1.0) -> float:
        return self.lr * factor * batch / self.base_batch

    def words(self) -> str:
        return (
            f"SGD, momentum {self.momentum:g}, {self.epochs} epochs, constant lr "
            f"{self.lr:g}·B/{self.base_batch} (B: the batch), {self.val_share:.0%} of the "
            "digits held out for validation by the seed"
        )


@dataclass(frozen=True)
class Arm:
    """A norm at a batch size and a learning-rate factor (1: the shared rate)."""

    norm: str
    batch: int
    factor: float = 1.0

    @property
    def label(self) -> str:
        rate = "" if self.factor == 1 else f" lr ×{self.factor:g}"
        return f"{self.norm} B={self.batch}{rate}"


@dataclass(frozen=True)
class Outcome:
    """One run's validation loss and error after ``eval()``, and its CPU seconds."""

    arm: Arm
    seed: int
    val_loss: float
    val_error: float
    cpu_s: float


@cache
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    """The 1,797 digits as (N, 1, 8, 8) floats in [0, 1] and their labels."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    return x, torch.tensor(d.target, dtype=torch.long)


def split(seed: int, n: int, val_share: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The seed's (train, validation) indices of ``n`` samples."""
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_val = round(n * val_share)
    return perm[n_val:], perm[:n_val]


def _norm(norm: str, channels: int) -> nn.Module:
    if norm == "BatchNorm":
        return nn.BatchNorm2d(channels)
    if norm == "LayerNorm":
        return nn.GroupNorm(1, channels)
    if norm == "none":
        return nn.Identity()
    raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")


def make_net(norm: str) -> nn.Sequential:
    """The CNN with ``norm`` after each conv; (N, 1, 8, 8) -> (N, 10) logits."""
    c1, c2 = CHANNELS
    bias = norm == "none"
    convs = (nn.Conv2d(1, c1, 3, padding=1, bias=bias), nn.Conv2d(c1, c2, 3, padding=1, bias=bias))
    return nn.Sequential(
        convs[0],  # (N, 16, 8, 8)
        _norm(norm, c1),
        nn.ReLU(),
        nn.MaxPool2d(2),  # (N, 16, 4, 4)
        convs[1],  # (N, 32, 4, 4)
        _norm(norm, c2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),  # (N, 32)
        nn.Linear(c2, CLASSES),
    )


def train(arm: Arm, seed: int, recipe: Recipe = Recipe()) -> Outcome:
    """Train ``arm`` on ``seed``'s split, init and batch order; its validation loss and error
    after ``eval()``. A diverged run's loss is inf (never NaN): the rule reads it as unbounded."""
    began = time.process_time()
    x, y = digits()
    train_idx, val_idx = split(seed, len(x), recipe.val_share)
    torch.manual_seed(seed)
    net = make_net(arm.norm)
    opt = torch.optim.SGD(
        net.parameters(), lr=recipe.lr_at(arm.batch, arm.factor), momentum=recipe.momentum
    )
    order = torch.Generator().manual_seed(seed + 1)
    for _ in range(recipe.epochs):
        shuffled = train_idx[torch.randperm(len(train_idx), generator=order)]
        # the last partial batch is dropped: BatchNorm at a batch of 1 has no statistics
        for i in range(0, len(shuffled) - arm.batch + 1, arm.batch):
            idx = shuffled[i : i + arm.batch]
            loss = F.cross_entropy(net(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        logits = net(x[val_idx])
        val_loss = float(F.cross_entropy(logits, y[val_idx]))
        val_error = float((logits.argmax(1) != y[val_idx]).float().mean())
    if val_loss != val_loss:  # NaN: the weights diverged
        val_loss, val_error = float("inf"), 1.0
    return Outcome(arm, seed, val_loss, val_error, time.process_time() - began)
