"""The training loop: one run of one model on byte-level data, recorded step by step.

A run is its ``TrainConfig`` (``normlab.lab.train.config``, imported from here too) and produces a
``RunResult`` (``result.py``); ``Trainer`` holds the seams a distributed wrapper overrides —
``build_model``, ``build_optimizer``, ``train_batches``, ``all_reduce_mean`` and ``log`` — and
what it measures besides the training loss (validation, probes, the trained model's measures)
comes from its base, ``evaluation.Evaluation``; ``train()`` is the one-call entry point. A run
that produces a non-finite loss or gradient, or whose loss blows up, is stopped and returned with
``status="diverged"``: a result, never an exception.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from normlab.batchnorm import BatchNorm
from normlab.lab.kit.threads import set_threads
from normlab.lab.train.config import TrainConfig
from normlab.lab.train.data import Corpus, RandomBatches, fixed_batches, validation_set
from normlab.lab.train.device import autocast, concrete_device, device_name
from normlab.lab.train.evaluation import Evaluation
from normlab.lab.train.norm_timer import NormTimer
from normlab.lab.train.result import RunResult
from normlab.models import Transformer, param_groups

StepCallback = Callable[[int, dict[str, float]], None]
EvalCallback = Callable[[dict[str, Any]], None]  # {"step", "val_loss", ["val_loss_train_mode"]}


class Trainer(Evaluation):
    """One run. Override the ``build_*``/``train_batches``/``all_reduce_mean``/``log`` seams to
    wrap the model (DDP/FSDP), shard the batches or log elsewhere; the loop stays the same."""

    def __init__(self, cfg: TrainConfig, data: Corpus):
        self.cfg, self.data = cfg, data
        if cfg.model.vocab_size != data.vocab_size:
            raise ValueError(f"model.vocab_size={cfg.model.vocab_size} != data {data.vocab_size}")
        self.device = torch.device(concrete_device(cfg.device))
        # probe batch -> its logits at step 0: F(x, θ_0) of the model update (``_output_change``)
        self._logits0: dict[int, Tensor] = {}

    # ---- seams

    def build_model(self) -> nn.Module:
        torch.manual_seed(self.cfg.seed)  # on the CPU, then moved: the same init on any device
        return Transformer(self.cfg.model).to(self.device)

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        groups = param_groups(
            model,
            self.cfg.weight_decay,
            decay_norms=self.cfg.decay_norms,
            norm_weight_decay=self.cfg.norm_weight_decay,
        )
        return adamw(groups, self.cfg)

    def train_split(self) -> Tensor:
        """The training bytes this run draws from: the corpus's training split, or its first
        ``train_slice`` bytes."""
        n = self.cfg.train_slice
        return self.data.train[:n] if n else self.data.train

    def train_batches(self, rank: int = 0, world_size: int = 1) -> RandomBatches:
        """The training stream of process ``rank`` of ``world_size``: its share of each global
        batch."""
        cfg = self.cfg
        return RandomBatches(
            self.train_split(),
            cfg.batch_size // world_size,
            cfg.seq_len,
            seed=cfg.seed,
            rank=rank,
            world_size=world_size,
        )

    def eval_batches(self) -> list[tuple[Tensor, Tensor]]:
        cfg = self.cfg
        if cfg.eval_sequences:
            return validation_set(self.data.val, cfg.eval_sequences, cfg.batch_size, cfg.seq_len)
        return fixed_batches(self.data.val, cfg.eval_batches, cfg.batch_size, cfg.seq_len)

    def all_reduce_mean(self, value: float) -> float:
        return value

    def any_rank(self, flag: bool) -> bool:
        """``flag`` agreed by every process (True if any has it): ranks must stop together."""
        return flag

    def resume(self, res: RunResult) -> int:
        """Fill ``res`` with the steps a checkpoint already ran; return the step to continue
        from (0: a fresh run)."""
        return 0

    def log(self, step: int, record: dict[str, float]) -> None:
        """A step's record, once ``res.history`` has it (before ``on_step`` sees it)."""

    def log_eval(self, record: dict[str, Any]) -> None:
        """An evaluation's record, as ``res.evals`` gets it."""

    def autocast(self):
        """The forward's precision context (``cfg.precision`` on this trainer's device)."""
        return autocast(self.device.type, self.cfg.precision)

    # ---- the loop

    def run(
        self, on_step: StepCallback | None = None, on_eval: EvalCallback | None = None
    ) -> RunResult:
        cfg = self.cfg
        set_threads(cfg.threads)
        t_start, cpu_start = time.perf_counter(), time.process_time()
        self.model = model = self.build_model()
        raw = getattr(model, "module", model)  # the unwrapped model (norm timers, probes)
        opt = self.build_optimizer(model)
        batches = self.train_batches()
        dev = self.device
        val = [(x.to(dev), y.to(dev)) for x, y in self.eval_batches()]
        scaler = torch.amp.GradScaler(dev.type, enabled=cfg.precision == "fp16")
        probe_batches = val[: cfg.probe_batches]
        if len(probe_batches) < cfg.probe_batches:
            raise ValueError(
                f"probe_batches={cfg.probe_batches} but the validation set has {len(val)} batches"
            )
        cols = ("step", "loss", "grad_norm", "lr", "tokens_per_s", "step_ms", "fwd_ms", "norm_ms")
        res = RunResult(config=cfg.to_dict(), history={c: [] for c in cols})
        params = [p for p in model.parameters() if p.requires_grad]
        timer = NormTimer(raw)
        start = self.resume(res)

        for step in range(start, cfg.steps + 1):
            if step in cfg.probe_steps:
                res.probes[str(step)] = self._probe(model, probe_batches, step)
            if cfg.eval_interval and step and step % cfg.eval_interval == 0 and step < cfg.steps:
                self._validate(res, model, val, step, on_eval)
            if step == cfg.steps:
                break
            if cfg.freeze_norm_stats and step == max(cfg.freeze_norm_stats, start):
                for m in raw.modules():  # from now on, normalize with the running statistics
                    if isinstance(m, BatchNorm):
                        m.frozen = True
            x, y = (t.to(dev, non_blocking=True) for t in next(batches))
            lr = cfg.lr_at(step)
            for g in opt.param_groups:
                g["lr"] = lr
            timed = step % cfg.norm_time_every == 0
            t0 = time.perf_counter()
            loss_v, gnorm, t1 = self.train_step(x, y, opt, scaler, params, timer if timed else None)
            if self._diverged(res, step, loss_v, gnorm, scaler):
                break
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)  # the step's kernels done, not only launched
            t2 = time.perf_counter()
            rec = {
                "step": step,
                "loss": loss_v,
                "grad_norm": gnorm,
                "lr": lr,
                "tokens_per_s": x.numel() / (t2 - t0),
                "step_ms": 1e3 * (t2 - t0),
                "fwd_ms": 1e3 * (t1 - t0),
                "norm_ms": 1e3 * timer.seconds if timed else None,
            }
            for c in cols:
                res.history[c].append(rec[c])
            self.log(step, rec)
            if on_step is not None:
                on_step(step, rec)
            if step + 1 == cfg.stall_step and step + 1 < cfg.steps and self._stalled(res):
                res.stopped_step = step + 1
                if cfg.steps in cfg.probe_steps:  # the "after training" probe, where it ended
                    res.probes[str(step + 1)] = self._probe(model, probe_batches, step + 1)
                break

        if res.status == "ok" and cfg.steps:  # a probe-only run has nothing to validate
            self._validate(res, model, val, res.stopped_step or cfg.steps, on_eval)
        res.summary = self._summary(res, raw, time.perf_counter() - t_start)
        if res.status == "ok" and cfg.steps:
            res.summary.update(self._after_training(model, val, res.evals[-1]))
        # CPU seconds of this process (all its threads): what a run costs on a busy machine.
        res.summary["cpu_s"] = time.process_time() - cpu_start
        return res

    def train_step(self, x, y, opt, scaler, params, timer: NormTimer | None):
        """Forward (the norms timed by ``timer``) and backward, the gradients unscaled and
        clipped: (the ranks' mean loss, the gradient norm, the last forward's end time).

        With ``grad_accum`` k > 1 the batch runs as k micro-batches, as a user's accumulation
        loop (BatchNorm sees B / k at a time), each loss weighted 1/k so the summed gradients
        are the whole batch's mean."""
        k = self.cfg.grad_accum
        total = 0.0
        for xb, yb in zip(x.chunk(k), y.chunk(k), strict=True):
            with timer or contextlib.nullcontext():
                loss = self._forward(self.model, xb, yb)[1]  # on B / k sequences
            t1 = time.perf_counter()
            scaler.scale(loss / k).backward()
            total = total + loss.detach().cpu() / k  # on the CPU: the recorded losses' sums
        scaler.unscale_(opt)  # a no-op unless fp16: the clip and the rule see true gradients
        max_norm = float("inf") if self.cfg.grad_clip is None else self.cfg.grad_clip
        gnorm = float(torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True))
        return self.all_reduce_mean(float(total)), gnorm, t1

    def _diverged(self, res: RunResult, step: int, loss: float, gnorm: float, scaler) -> bool:
        """The divergence rule on a step, before the optimizer applies it; says why in ``res``."""
        limit = self.cfg.diverge_factor * math.log(self.cfg.model.vocab_size)
        # fp16: an overflowed gradient is the scaler's to handle (it skips the step).
        bad_grad = not math.isfinite(gnorm) and not scaler.is_enabled()
        if not self.any_rank(not math.isfinite(loss) or bad_grad or loss > limit):
            return False
        res.status, res.diverged_step = "diverged", step
        res.reason = (
            f"loss {loss:.4g}, gradient norm {gnorm:.4g} at step {step} "
            f"(rule: not finite, or loss > {self.cfg.diverge_factor:g} * ln V = {limit:.3f})"
        )
        return True

    def _stalled(self, res: RunResult) -> bool:
        """The stall rule at ``stall_step``; says why in ``res.reason`` when it stops the run."""
        loss = _mean(res.history["loss"][-10:])  # already averaged over ranks
        bar = self.data.unigram_entropy() - self.cfg.stall_margin
        if loss <= bar:
            return False
        res.reason = (
            f"stalled: training loss {loss:.3f} at step {self.cfg.stall_step} is above the "
            f"unigram entropy - {self.cfg.stall_margin:g} = {bar:.3f} (rule: stall_step)"
        )
        return True

    def _summary(self, res: RunResult, raw: nn.Module, wall_s: float) -> dict[str, Any]:
        h = res.history
        last = max(1, len(h["loss"]) // 10)
        final = res.evals[-1] if res.evals and res.status == "ok" else {}
        # Skip the first steps' timings: they include one-off allocation and kernel compiles.
        skip = min(len(h["step_ms"]) // 5, 10)
        # the norms' gains (what weight decay on norms would shrink)
        norm_w = [
            _whole(m.weight).detach().float().abs().mean()
            for m in NormTimer.norm_modules(raw)
            if getattr(m, "weight", None) is not None
        ]
        return {
            "final_val_loss": final.get("val_loss"),
            "final_val_loss_train_mode": final.get("val_loss_train_mode"),
            "train_loss_last": _mean(h["loss"][-last:]),
            "steps_done": len(h["loss"]),
            "step_ms": _median(h["step_ms"][skip:]),
            "fwd_ms": _median(h["fwd_ms"][skip:]),
            "norm_ms": _median([t for t in h["norm_ms"][skip:] if t is not None]),
            "tokens_per_s": _median(h["tokens_per_s"][skip:]),
            "norm_weight_mean": float(torch.stack(norm_w).mean()) if norm_w else None,
            "n_params": sum(p.numel() for p in raw.parameters()),
            "threads": torch.get_num_threads(),
            "device": device_name(self.device),
            "precision": self.cfg.precision,
            "wall_s": wall_s,
        }


def adamw(params, cfg: TrainConfig) -> torch.optim.AdamW:
    """The trainer's optimizer. ``fused``: one kernel for all parameters, faster per whole step
    than ``foreach`` at the lab's sizes (``benchmarks/bench_optimizer.py``; docs/benchmarks.md)."""
    return torch.optim.AdamW(params, lr=cfg.lr, betas=cfg.betas, eps=cfg.adam_eps, fused=True)


def _whole(t: Tensor) -> Tensor:
    """An FSDP2 shard (DTensor) gathered whole, a collective; a plain tensor as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _median(xs: list[float]) -> float | None:
    return float(torch.tensor(xs, dtype=torch.float64).median()) if xs else None


def train(
    cfg: TrainConfig,
    data: Corpus,
    *,
    on_step: StepCallback | None = None,
    on_eval: EvalCallback | None = None,
) -> RunResult:
    """Train one model as ``cfg`` says and return what happened (diverged runs included);
    ``on_step(step, record)`` after each step, ``on_eval(record)`` after each evaluation."""
    return Trainer(cfg, data).run(on_step, on_eval)
