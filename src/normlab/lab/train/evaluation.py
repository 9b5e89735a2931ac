"""What a ``Trainer`` measures of its model besides the training loss: the validation loss along
the way, the probes at chosen steps, and the evaluation-only measures of the trained model."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from torch import Tensor, nn

from normlab.lab.train.data import fixed_batches
from normlab.lab.train.result import RunResult, finite
from normlab.lab.train.serving import buffers_restored, probe_set, serving_measures
from normlab.models import Probes


class Evaluation:
    """The measuring half of ``Trainer`` (its base): it reads the trainer's ``cfg``, ``device``
    and seams (``autocast``, ``all_reduce_mean``, ``train_split``, ``log_eval``), and keeps the
    probe batches' logits at step 0 in its ``_logits0``."""

    def _forward(self, model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
        """``model``'s logits on ``x`` in the run's precision, and their mean cross-entropy
        against ``y`` (in FP32): the one forward of training, validation and the probes."""
        with self.autocast():
            logits = model(x)  # (B, T, V)
            return logits, nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten())

    def _probe(
        self, model: nn.Module, batches: list[tuple[Tensor, Tensor]], step: int | None = None
    ) -> dict:
        """Probe a forward+backward on each of ``batches``; every number is the mean over them.
        Leaves no gradient behind. At a training ``step``, also the model update since step 0."""
        raw = getattr(model, "module", model)
        outs = []
        for i, (x, y) in enumerate(batches):
            with buffers_restored(model), Probes(raw) as probes:
                logits, loss = self._forward(model, x, y)
                loss.backward()
                out = probes.collect()
            out.update(self._output_change(i, logits, step))
            outs.append(out)
            model.zero_grad(set_to_none=True)
        return finite(_mean_of(outs))

    def _output_change(self, i: int, logits: Tensor, step: int | None) -> dict[str, float]:
        """DeepNet's model update on the probe batches: ``output_change`` = RMS(F(x, θ_t) −
        F(x, θ_0)) of the logits on probe batch ``i``, from the probe at step 0 (kept here)."""
        logits = logits.detach().float()
        if step == 0:
            self._logits0[i] = logits
        ref = self._logits0.get(i) if step else None  # none at step 0, or outside training
        return {} if ref is None else {"output_change": float((logits - ref).pow(2).mean().sqrt())}

    @torch.no_grad()
    def _validate(self, res: RunResult, model: nn.Module, val: list, step: int, on_eval) -> None:
        """An evaluation at ``step``: its record into ``res.evals``, the log and ``on_eval``."""
        rec = {"step": step, "val_loss": self._mean_loss(model, val, train_mode=False)}
        if self.cfg.train_slice:  # the gap along the curve, at equal training loss
            # on the training bytes, in eval mode, as many batches drawn once with the
            # validation set's seed: the train side of the train-validation gap
            cfg, dev = self.cfg, self.device
            train = fixed_batches(self.train_split(), len(val), cfg.batch_size, cfg.seq_len)
            train = [(x.to(dev), y.to(dev)) for x, y in train]
            rec["train_loss"] = self._mean_loss(model, train, train_mode=False)
        if self.cfg.eval_train_mode:
            rec["val_loss_train_mode"] = self._mean_loss(model, val, train_mode=True)
        res.evals.append(rec)
        self.log_eval(rec)
        if on_eval is not None:
            on_eval(rec)

    @torch.no_grad()
    def _mean_loss(self, model: nn.Module, batches: list, *, train_mode: bool) -> float:
        model.train(train_mode)
        with buffers_restored(model) if train_mode else contextlib.nullcontext():
            total = sum(float(self._forward(model, x, y)[1]) for x, y in batches)
        model.train()
        return self.all_reduce_mean(total / len(batches))

    # ---- evaluation-only measures of the trained model, by the process that trained it

    def _after_training(self, model: nn.Module, val: list, last: dict) -> dict[str, Any]:
        """``last``: the final validation's record (its loss on the training bytes is the gap's
        train side, on the same batches: not computed twice)."""
        out: dict[str, Any] = {}
        if self.cfg.eval_serving:  # normlab.lab.train.serving
            x, y = probe_set(val, self.cfg.batch_size)
            out.update(serving_measures(model, x, y, self.cfg.batch_size, self.autocast))
        if self.cfg.block_drop_batches:
            out["block_drop_loss"] = self._block_drop(model, val[: self.cfg.block_drop_batches])
        if self.cfg.train_slice:
            out["final_train_loss"] = last["train_loss"]
        for n in self.cfg.eval_lengths:  # served at another length than trained
            short = [(x[:, :n], y[:, :n]) for x, y in val]
            for key, train in (("val_loss_at", False), ("val_loss_train_mode_at", True)):
                if not train or self.cfg.eval_train_mode:
                    loss = self._mean_loss(model, short, train_mode=train)
                    out.setdefault(key, {})[str(n)] = loss
        return out

    @torch.no_grad()
    def _block_drop(self, model: nn.Module, batches: list) -> list[float]:
        """Per block, the validation loss on ``batches`` with that block skipped (an identity)
        minus the loss with every block: how much of the model's work that block does."""
        blocks = getattr(model, "module", model).blocks
        full = self._mean_loss(model, batches, train_mode=False)
        out = []
        for i in range(len(blocks)):
            kept, blocks[i] = blocks[i], _Skip()
            try:
                out.append(self._mean_loss(model, batches, train_mode=False) - full)
            finally:
                blocks[i] = kept
        return out


def _mean_of(outs: list[Any]) -> Any:
    """The elementwise mean of equally shaped probe outputs (dicts, lists, numbers)."""
    first = outs[0]
    if len(outs) == 1 or first is None or isinstance(first, bool | str):
        return first
    if isinstance(first, dict):
        return {k: _mean_of([o[k] for o in outs]) for k in first}
    if isinstance(first, list | tuple):
        return [_mean_of(list(col)) for col in zip(*outs, strict=True)]
    if any(o is None for o in outs):
        return None
    return sum(float(o) for o in outs) / len(outs)


class _Skip(nn.Module):
    """A block left out: its input passes through unchanged."""

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        return x
