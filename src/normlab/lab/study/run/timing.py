"""The serial timing phase: speed claims measured with nothing else of the study running.

Each arm's model is built once; then, in rounds that are ABBA blocks (arm A, arm B, arm B,
arm A, so that a load drift on a shared machine hits every arm alike, whatever its place), each
round times per arm, as the mean of its two measurements in the block:

- ``step_ms``: the fastest of a few whole AdamW training steps (forward, backward, update);
- ``norm_ms``: the arm's norm modules alone at the shapes they see in the model, forward and
  backward, summed over the modules: the norms' cost per step;
- ``torch_norm_ms``: the same with PyTorch's own ``F.rms_norm``/``F.layer_norm`` at the same
  shapes, reported beside normlab's.

On the arm's device and in its precision (the step under the same autocast as training, the
norms fed the dtype they see in the model). On CUDA a pass is timed with CUDA events around the
launches (``perf_counter`` would time only the launches of asynchronous kernels).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normlab.lab.kit.threads import set_threads
from normlab.lab.train.data import Corpus, RandomBatches
from normlab.lab.train.trainer import TrainConfig, adamw, autocast, concrete_device
from normlab.models import Transformer, param_groups
from normlab.modules import LayerNorm, RMSNorm

WARMUP_ROUNDS = 2
# The serial timing phase: fresh processes (as many as the timing claims ask, 8 by default), one
# after the other, each timing TIMING_ROUNDS ABBA rounds. The process is the unit the timing
# interval is over: a run-to-run effect (where a process's memory and threads land) shows
# between processes, not between the rounds of one.
TIMING_ROUNDS = 3
# Passes per measurement, the fastest of which counts: whole training steps, and the norms'.
STEP_REPS = 3
NORM_REPS = 5


class _Arm:
    """One model ready to time: its optimizer, a batch, and its norms' input shapes."""

    def __init__(self, cfg: TrainConfig, corpus: Corpus):
        self.device = torch.device(concrete_device(cfg.device))
        self.precision = cfg.precision
        torch.manual_seed(cfg.seed)
        self.model = Transformer(cfg.model).to(self.device)
        self.opt = adamw(param_groups(self.model, cfg.weight_decay), cfg)
        batch = next(RandomBatches(corpus.train, cfg.batch_size, cfg.seq_len, seed=0))
        self.x, self.y = (t.to(self.device) for t in batch)
        self.norms = self._norm_inputs()

    def autocast(self):
        return autocast(self.device.type, self.precision)

    def _norm_inputs(self) -> list[tuple[nn.Module, torch.Size, torch.dtype]]:
        seen: list[tuple[nn.Module, torch.Size, torch.dtype]] = []
        record = lambda m, args: seen.append((m, args[0].shape, args[0].dtype))
        hooks = [m.register_forward_pre_hook(record) for m in self.model.norm_modules()]
        with torch.no_grad(), self.autocast():
            self.model(self.x)
        for h in hooks:
            h.remove()
        return seen

    def step(self) -> None:
        with self.autocast():
            logits = self.model(self.x)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), self.y.flatten())
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def norm_calls(self, torch_ops: bool) -> list[Callable[[], None]]:
        """One closure per norm call of a step: forward and backward of the module alone, on
        the arm's device, its input in the dtype the model gives it."""
        calls = []
        for mod, shape, dtype in self.norms:
            x = torch.randn(shape, dtype=dtype, device=self.device, requires_grad=True)
            fn = _torch_equivalent(mod) if torch_ops else mod
            if fn is None:
                continue

            def call(fn=fn, x=x) -> None:
                with self.autocast():
                    y = fn(x)
                y.float().sum().backward()

            calls.append(call)
        return calls


def _torch_equivalent(mod: nn.Module) -> Callable[[Tensor], Tensor] | None:
    shape = getattr(mod, "normalized_shape", None)
    if isinstance(mod, RMSNorm):
        return lambda x: F.rms_norm(x, shape, mod.weight, mod.eps)
    if isinstance(mod, LayerNorm):
        return lambda x: F.layer_norm(x, shape, mod.weight, mod.bias, mod.eps)
    return None


def _time(fns: Sequence[Callable[[], None]], reps: int, device: torch.device) -> float:
    """The fastest of ``reps`` passes over ``fns``, in milliseconds: other load on the machine
    only ever adds time, so the fastest pass is the least disturbed measurement. On a CUDA
    ``device``, each pass is timed by CUDA events recorded before and after its launches."""
    if device.type == "cuda":
        return _time_cuda(fns, reps, device)
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        for fn in fns:
            fn()
        out.append(1e3 * (time.perf_counter() - t))
    return min(out)


def _time_cuda(fns: Sequence[Callable[[], None]], reps: int, device: torch.device) -> float:
    out = []
    with torch.cuda.device(device):
        torch.cuda.synchronize()  # nothing queued before the first pass
        for _ in range(reps):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for fn in fns:
                fn()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end))
    return min(out)


def time_arms(
    configs: dict[str, TrainConfig], corpus: Corpus, *, rounds: int = 7, threads: int = 0
) -> dict[str, dict[str, list[float]]]:
    """``arm -> {"step_ms", "norm_ms", "torch_norm_ms": one value per round}``."""
    set_threads(threads)
    arms = {name: _Arm(cfg, corpus) for name, cfg in configs.items()}
    calls = {n: (a.norm_calls(False), a.norm_calls(True)) for n, a in arms.items()}
    out = {n: {"step_ms": [], "norm_ms": [], "torch_norm_ms": []} for n in arms}
    # A round is an ABBA block (each arm, then each again in reverse order), and its value per
    # arm the mean of that arm's two measurements: a load drift that is linear over the round
    # hits every arm alike, whatever its place in the list. Two rounds of warm-up, discarded,
    # pay the first steps' one-off allocations, optimizer state and kernel compiles.
    order = list(arms) + list(reversed(arms))
    for r in range(WARMUP_ROUNDS + rounds):
        got = {n: {k: [] for k in out[n]} for n in arms}
        for name in order:
            arm, (ours, theirs) = arms[name], calls[name]
            got[name]["step_ms"].append(_time([arm.step], STEP_REPS, arm.device))
            # ours and PyTorch's in alternating order too, for the same reason
            pair = (("norm_ms", ours), ("torch_norm_ms", theirs))
            for key, fns in pair if len(got[name]["norm_ms"]) == 0 else reversed(pair):
                got[name][key].append(_time(fns, NORM_REPS, arm.device))
        if r >= WARMUP_ROUNDS:
            for name in arms:
                for key, xs in got[name].items():
                    out[name][key].append(sum(xs) / len(xs))
    return out
