"""Optimizer parameter groups: weight decay on matrices, not on norm parameters or biases."""

from __future__ import annotations

from torch import nn

from normlab.modules import ANY_NORM


def param_groups(
    model: nn.Module,
    weight_decay: float,
    *,
    decay_norms: bool = False,
    norm_weight_decay: float | None = None,
) -> list[dict]:
    """Parameter groups for ``torch.optim.AdamW(param_groups(model, wd), lr=...)``.

    - ``"decay"``: the weight matrices of linear and embedding layers (``weight_decay``);
    - ``"norm"``: every parameter of a norm module (LayerNorm/RMSNorm weight and bias, DyT's
      alpha, ScaleNorm's g, BatchNorm's weight and bias): no decay, or ``weight_decay`` with
      ``decay_norms=True`` (decaying a norm's gain pulls it toward 0, not toward identity),
      then ``norm_weight_decay`` instead where it is given;
    - ``"no_decay"``: every bias and any other vector; other matrices go to ``"decay"``.

    Each parameter lands in exactly one group (tied weights once); empty groups are left out.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    if not weight_decay >= 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
    groups = {"decay": [], "norm": [], "no_decay": []}
    seen: set[int] = set()
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen or not p.requires_grad:
                continue
            seen.add(id(p))
            if isinstance(module, ANY_NORM):
                groups["norm"].append(p)
            elif name == "bias" or p.dim() < 2:
                groups["no_decay"].append(p)
            else:  # Linear/Embedding weights, and any other matrix
                groups["decay"].append(p)
    norm_wd = weight_decay if norm_weight_decay is None else norm_weight_decay
    decay = {"decay": weight_decay, "norm": norm_wd if decay_norms else 0.0, "no_decay": 0.0}
    return [
        {"name": name, "params": params, "weight_decay": decay[name]}
        for name, params in groups.items()
        if params
    ]
