"""Probes: what the norms do to a Transformer's signal, measured with hooks during training.

Nothing is measured unless a :class:`Probes` is attached, and attaching adds forward hooks only
(no second forward pass). Gradient norms are read from ``.grad`` when :meth:`Probes.collect` runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from normlab.models.transformer import Transformer


class Probes:
    """Hooks on a :class:`Transformer` that record, on each forward pass (the last one wins):

    - ``residual_rms[i]``: RMS of the residual stream after block ``i`` (over real tokens);
    - ``residual_cos[i]``: mean over tokens of cos(stream after block ``i``, after ``i + 1``);
    - ``attn_logit_max[i]``: largest causal attention logit ``q·k/√Dh`` in block ``i``;
    - ``massive[i]``: max |h| / median |h| of the stream after block ``i``, the ratio by which
      "massive activations" (Sun et al. 2024) stand out;
    - ``logit_rms``: RMS of the output logits, the output scale a final norm controls;
    - ``logit_absmax``: the largest |logit|, the output's range;
    - ``branch_ratio[sublayer][i]`` (``"attn"``, ``"mlp"``): Var f / Var(x + f) of block ``i``,
      where f is what the sublayer adds to its skip x (α·x under DeepNorm): the share of the
      sum that comes from the branch (Liu et al. 2020's amplification; over all tokens);
    - ``sum_rms[sublayer][i]``: RMS of that sum x + f, the LayerNorm's input under Post-LN and
      DeepNorm (whose growth early in training DeepNet's argument rests on; over all tokens);

    and, read at :meth:`collect` after ``backward()`` (before ``zero_grad``):

    - ``grad_norm[matrix][i]``: ‖∇W‖ of each weight matrix (``"attn.wq"``, ..., ``"mlp.w_out"``);
    - ``grad_norm_block[i]``: ‖∇‖ over all parameters of block ``i``;
    - ``input_grad_norm[i]``: ‖∂loss/∂x_i‖ of block ``i``'s input x_i, the residual stream it
      reads (000 §5.2's gradient: under Pre-Norm it keeps a direct identity term).

    Values are plain floats (None where there was no forward pass or no gradient). Use as a
    context manager, or call :meth:`remove` to detach.
    """

    def __init__(self, model: Transformer):
        if not isinstance(model, Transformer):
            raise TypeError(f"model must be a normlab Transformer, got {type(model).__name__}")
        self.model = model
        n = len(model.blocks)
        self._rms: list[Tensor | None] = [None] * n
        self._cos: list[Tensor | None] = [None] * max(n - 1, 0)
        self._logit: list[Tensor | None] = [None] * n
        self._massive: list[Tensor | None] = [None] * n
        self._out_rms: Tensor | None = None
        self._out_max: Tensor | None = None
        self._in_grad: list[Tensor | None] = [None] * n
        self._ratio: dict[str, list[Tensor | None]] = {"attn": [None] * n, "mlp": [None] * n}
        self._sum: dict[str, list[Tensor | None]] = {"attn": [None] * n, "mlp": [None] * n}
        self._handles = [model.lm_head.register_forward_hook(self._head_hook)]
        for i, block in enumerate(model.blocks):
            self._handles.append(block.register_forward_hook(self._block_hook(i)))
            self._handles.append(block.attn.sdpa.register_forward_hook(self._attn_hook(i)))
            block.on_branch = self._branch_hook(i)

    # ---- hooks

    def _block_hook(self, i: int):
        @torch.no_grad()
        def hook(module, args, out: Tensor) -> None:
            x, mask = args[0], (args[1] if len(args) > 1 else None)
            y = out.detach().float()
            self._rms[i] = _masked_mean(y.pow(2).mean(-1), mask).sqrt()
            a = (y if mask is None else y[mask]).abs().flatten()
            self._massive[i] = a.max() / a.median().clamp_min(torch.finfo(a.dtype).tiny)
            if i > 0:  # a block's input is the previous block's output
                cos = F.cosine_similarity(x.detach().float(), y, dim=-1)  # (B, T)
                self._cos[i - 1] = _masked_mean(cos, mask)
            if x.requires_grad:  # read when backward reaches it: every use of x summed
                x.register_hook(self._input_grad_hook(i))

        return hook

    def _input_grad_hook(self, i: int):
        def hook(grad: Tensor) -> None:
            self._in_grad[i] = grad.detach().float().norm()

        return hook

    def _branch_hook(self, i: int):
        @torch.no_grad()
        def hook(is_attn: bool, skip: Tensor, added: Tensor) -> None:
            f = added.detach().float()
            h = skip.detach().float() + f
            key = "attn" if is_attn else "mlp"
            self._ratio[key][i] = f.var() / h.var().clamp_min(1e-30)
            self._sum[key][i] = h.pow(2).mean().sqrt()

        return hook

    def _attn_hook(self, i: int):
        @torch.no_grad()
        def hook(module, args, out: Tensor) -> None:
            q, k = args[0].detach().float(), args[1].detach().float()  # (B, H, T, Dh)
            logits = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5  # (B, H, T, T)
            t = logits.shape[-1]
            causal = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
            self._logit[i] = logits.masked_fill(~causal, float("-inf")).amax()

        return hook

    @torch.no_grad()
    def _head_hook(self, module, args, out: Tensor) -> None:
        out = out.detach().float()
        self._out_rms = out.pow(2).mean().sqrt()
        self._out_max = out.abs().amax()

    # ---- results

    def collect(self) -> dict:
        """The latest measurements as a JSON-ready dict (see the class docstring)."""
        grad_norm: dict[str, list[Tensor | None]] = {}
        grad_norm_block: list[Tensor | None] = []
        for block in self.model.blocks:
            for name, p in _matrices(block):
                grad_norm.setdefault(name, []).append(_norm([p]))
            grad_norm_block.append(_norm(list(block.parameters())))
        return {
            "grad_norm": {name: _floats(norms) for name, norms in grad_norm.items()},
            "grad_norm_block": _floats(grad_norm_block),
            "input_grad_norm": _floats(self._in_grad),
            "residual_rms": _floats(self._rms),
            "residual_cos": _floats(self._cos),
            "attn_logit_max": _floats(self._logit),
            "massive": _floats(self._massive),
            "logit_rms": None if self._out_rms is None else self._out_rms.item(),
            "logit_absmax": None if self._out_max is None else self._out_max.item(),
            "branch_ratio": {k: _floats(v) for k, v in self._ratio.items()},
            "sum_rms": {k: _floats(v) for k, v in self._sum.items()},
        }

    def remove(self) -> None:
        """Detach every hook; the model runs exactly as without probes afterwards."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        for block in self.model.blocks:
            block.on_branch = None

    def __enter__(self) -> Probes:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _matrices(block) -> list[tuple[str, Tensor]]:
    mods = {f"attn.{n}": getattr(block.attn, n) for n in ("wq", "wk", "wv", "wo")}
    mods.update({f"mlp.{n}": getattr(block.mlp, n) for n in ("w_in", "w_gate", "w_out")})
    return [(name, m.weight) for name, m in mods.items() if m is not None]


def _masked_mean(t: Tensor, mask: Tensor | None) -> Tensor:
    """Mean of a (B, T) tensor over the real tokens."""
    return t.mean() if mask is None else t[mask].mean()


def _norm(params: list[Tensor]) -> Tensor | None:
    """‖∇‖ over ``params`` as a 0-d FP32 tensor (no device sync); None if none has a gradient."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return None
    norm = torch.linalg.vector_norm(torch.stack([g.float().norm() for g in grads]))
    # Under FSDP2 the gradients are DTensor shards: gather the norm (every rank collects).
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


def _floats(values: list[Tensor | None]) -> list[float | None]:
    if all(v is not None for v in values) and values:
        return torch.stack(values).tolist()  # one device sync for the whole list
    return [None if v is None else v.item() for v in values]
