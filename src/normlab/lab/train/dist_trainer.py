"""The study's trainer on N processes, with checkpoints and resume (what ``normlab train`` runs).

``DistributedTrainer`` only overrides the seams of :class:`~normlab.lab.train.trainer.Trainer`, so a
run here is the study's run: same model, same data stream, same loop. What it adds:

- the model is moved to the device and wrapped (DDP, or FSDP2 per block); every rank draws the
  same global batch and keeps its share, so N ranks train as one process on the global batch;
- the logged loss is the global batch's (mean over ranks), and a stop is agreed by all ranks;
- rank 0 writes ``metrics.jsonl`` (one line per step, and one per evaluation: the lines with
  ``val_loss``) and, every ``ckpt_every`` steps and at the end, ``checkpoint.pt``: unsharded
  plain tensors (loadable with ``weights_only=True``) keyed by parameter name, so a run saved by
  N ranks resumes on any number of ranks, DDP or FSDP; :func:`load_model` reads one back as a
  ``Transformer``;
- with ``RunOptions.tensorboard``, rank 0 also writes TensorBoard event files there
  (``normlab.lab.train.tblog``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import open_append, write_file, write_json
from normlab.lab.train import distributed as D
from normlab.lab.train.config import INT64, flat_fields
from normlab.lab.train.data import Corpus, RandomBatches
from normlab.lab.train.result import RunResult
from normlab.lab.train.trainer import TrainConfig, Trainer
from normlab.models import Transformer

CHECKPOINT, METRICS, RESULT, CONFIG = "checkpoint.pt", "metrics.jsonl", "result.json", "config.json"


class ResumeRefused(UsageError, ValueError):
    """``--resume`` into a checkpoint of another run (other options, another corpus)."""


@dataclass(frozen=True)
class RunOptions:
    """How a run is executed and recorded (``TrainConfig`` says what is computed)."""

    out: Path | None = None
    """Directory for config, metrics, checkpoint and result; None = write nothing."""
    fsdp: bool = False
    ckpt_every: int = 0
    """Save a checkpoint every this many steps (0 = only at the end); needs ``out``."""
    resume: bool = False
    """Continue from ``out/checkpoint.pt`` if there is one (the run's config must be the same),
    else start afresh: the same command can then be rerun after any interruption."""
    log_every: int = 10
    """Print a progress line every this many steps (rank 0; 0 = never)."""
    tensorboard: Path | None = None
    """Also write TensorBoard event files to this directory (rank 0; needs ``tensorboard``)."""

    def __post_init__(self) -> None:
        if self.ckpt_every < 0 or self.log_every < 0:
            raise ValueError("ckpt_every and log_every must be >= 0")
        if self.out is None and (self.resume or self.ckpt_every):
            raise ValueError("resume and ckpt_every need an output directory (out)")


class DistributedTrainer(Trainer):
    def __init__(self, cfg: TrainConfig, data: Corpus, info: D.DistInfo, opts: RunOptions):
        super().__init__(cfg, data)
        if cfg.batch_size % info.world_size:
            raise ValueError(
                f"batch_size={cfg.batch_size} (the global batch) must be divisible by the "
                f"number of processes ({info.world_size})"
            )
        if cfg.eval_serving and info.world_size > 1:
            raise ValueError(
                "eval_serving measures one process's batches; with several processes "
                "BatchNorm's statistics span the ranks' shards: train with one process"
            )
        self.info, self.opts = info, opts
        self.device = info.device  # this rank's own GPU, or the CPU
        self.out = None if opts.out is None else Path(opts.out)
        self._ckpt = self._read_checkpoint() if opts.resume else None
        self._start = 0 if self._ckpt is None else int(self._ckpt["step"])
        self.tb = None  # a TensorBoardLog on rank 0 with RunOptions.tensorboard (run_training)
        if self._ckpt is not None and info.is_main:
            print(f"resuming at step {self._start} from {self.out / CHECKPOINT}", flush=True)

    # ---- seams of Trainer

    def build_model(self) -> nn.Module:
        model = super().build_model()  # on this rank's device
        return D.wrap(model, self.info, fsdp=self.opts.fsdp, blocks=getattr(model, "blocks", ()))

    def build_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        self.optimizer = opt = super().build_optimizer(model)
        if self._ckpt is not None:
            D.load_full_state(model, opt, self._ckpt["model"], self._ckpt["optim"])
        return opt

    def train_batches(self) -> RandomBatches:
        # Every rank evaluates the whole validation set (the base's ``eval_batches``): the probes
        # then see what one process sees, and all_reduce_mean of identical numbers is the number.
        it = super().train_batches(self.info.rank, self.info.world_size)
        for _ in range(self._start):  # the stream is seeded: replay it up to the checkpoint
            next(it)
        return it

    def all_reduce_mean(self, value: float) -> float:
        return D.mean_over_ranks(value, self.info)

    def any_rank(self, flag: bool) -> bool:
        return D.any_rank(flag, self.info)

    def resume(self, res: RunResult) -> int:
        self._res = res
        if self._ckpt is None:
            if self.info.is_main and self.out is not None:
                write_file(self.out / METRICS, "")
            return 0
        done = self._ckpt["result"]
        res.history, res.evals, res.probes = done["history"], done["evals"], done["probes"]
        if self.info.is_main:  # drop the lines a killed run logged after its checkpoint
            lines = "".join(json.dumps(r) + "\n" for r in _records(res.history, res.evals))
            write_file(self.out / METRICS, lines)
        return self._start

    def log(self, step: int, record: dict[str, float]) -> None:
        done = step + 1
        if self.info.is_main:
            every = self.opts.log_every
            if every and (step % every == 0 or done == self.cfg.steps):
                print(
                    f"step {done:>6}/{self.cfg.steps}  loss {record['loss']:.4f}  grad_norm "
                    f"{record['grad_norm']:.3g}  lr {record['lr']:.3g}  {record['step_ms']:.0f} ms",
                    flush=True,
                )
            self._append(record)
            if self.tb is not None:
                self.tb.step(step, record)
        every = self.opts.ckpt_every
        if self.out is not None and ((every and done % every == 0) or done == self.cfg.steps):
            self.save_checkpoint(done)

    def log_eval(self, record: dict) -> None:
        if self.info.is_main:
            self._append(record)
            if self.tb is not None:
                self.tb.evaluation(record)

    def _append(self, record: dict) -> None:
        if self.out is not None:
            fd = open_append(self.out / METRICS)
            try:
                os.write(fd, (json.dumps(record) + "\n").encode())
            finally:
                os.close(fd)

    # ---- checkpoints

    def save_checkpoint(self, done: int) -> None:
        """Collective (every rank gathers its shards); rank 0 writes ``out/checkpoint.pt``."""
        model_sd, optim_sd = D.full_state(self.model, self.optimizer)
        if self.info.is_main:
            res = self._res
            D.save_atomic(
                {
                    "step": done,
                    "config": self.cfg.to_dict(),
                    "corpus_sha256": self.data.sha256,  # --resume refuses another corpus
                    "world_size": self.info.world_size,
                    "model": model_sd,
                    "optim": optim_sd,
                    "result": {"history": res.history, "evals": res.evals, "probes": res.probes},
                },
                self.out / CHECKPOINT,
            )
        D.barrier(self.info)  # nobody runs ahead (or exits) before the file is complete

    def _read_checkpoint(self) -> dict | None:
        path = self.out / CHECKPOINT
        if not os.path.lexists(path):
            if self.info.is_main:
                print(f"--resume: no checkpoint at {path} yet; starting at step 0", flush=True)
            return None
        ckpt = _load_checkpoint(path)
        if diff := _config_diff(ckpt["config"], self.cfg.to_dict()):
            raise ResumeRefused(f"--resume: the options differ from the checkpoint's run: {diff}")
        if (corpus := ckpt.get("corpus_sha256")) != self.data.sha256:
            was = f"corpus SHA-256 {corpus[:16]}..." if corpus else "no corpus SHA-256 (older)"
            raise ResumeRefused(
                f"--resume: {path} was trained on another corpus ({was}; --data now is "
                f"{self.data.sha256[:16]}...): give the same --data, or another --out"
            )
        return ckpt


# What --resume reads from a checkpoint, and its type: a file cut short, emptied, replaced by a
# bare tensor or written by something else is refused in one line, not a traceback mid-setup.
_CHECKPOINT_KEYS = {"step": int, "config": dict, "model": dict, "optim": dict, "result": dict}


def _load_checkpoint(path: Path) -> dict:
    """``torch.load(path, weights_only=True)`` of a checkpoint this trainer wrote, checked; a
    :class:`ResumeRefused` saying what is wrong otherwise."""
    if not path.is_file() or path.is_symlink():
        raise ResumeRefused(f"--resume: {path} is not a regular file; remove it or choose --out")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - truncated, empty, not a torch file: all one refusal
        why = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise ResumeRefused(f"--resume: {path} cannot be read as a checkpoint ({why})") from e
    if not isinstance(ckpt, dict):
        raise ResumeRefused(f"--resume: {path} holds a {type(ckpt).__name__}, not a checkpoint")
    for key, kind in _CHECKPOINT_KEYS.items():
        if not isinstance(ckpt.get(key), kind) or isinstance(ckpt.get(key), bool):
            raise ResumeRefused(
                f"--resume: {path} is not a normlab train checkpoint (its {key!r} is missing or "
                f"not a {kind.__name__})"
            )
    if not 0 <= ckpt["step"] <= INT64:
        raise ResumeRefused(f"--resume: {path}: step {ckpt['step']} is out of range")
    return ckpt


def _config_diff(saved: dict, wanted: dict) -> str:
    """``field: checkpoint X, now Y`` for each field that decides the numbers and differs."""
    a, b = flat_fields(saved), flat_fields(wanted)
    keys = sorted((set(a) | set(b)) - {"threads"})
    return "; ".join(
        f"{k}: checkpoint {a.get(k)!r}, now {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)
    )


def _records(history: dict[str, list], evals: list[dict]) -> list[dict]:
    """``metrics.jsonl``'s lines: a step's record per step (the ones with a ``loss``), each
    evaluation before the step of its number (it ran before that update), as the live run
    writes them."""
    steps = [dict(zip(history, row, strict=True)) for row in zip(*history.values(), strict=True)]
    return sorted(steps + evals, key=lambda r: (r["step"], "loss" in r))


def load_model(path: str | Path, *, device: str = "cpu") -> Transformer:
    """The ``Transformer`` a ``normlab train`` checkpoint holds (``path``: the
    ``checkpoint.pt``, or the run's ``--out`` directory), in eval mode on ``device``. The run's
    config is ``torch.load(path, weights_only=True)["config"]`` (``TrainConfig.from_dict``)."""
    p = Path(path)
    if p.is_dir():
        p = p / CHECKPOINT
    ckpt = torch.load(p, map_location="cpu", weights_only=True)
    model = Transformer(TrainConfig.from_dict(ckpt["config"]).model)
    model.load_state_dict(ckpt["model"])
    return model.to(device).eval()


def run_training(
    cfg: TrainConfig,
    data: Corpus,
    info: D.DistInfo,
    opts: RunOptions,
) -> RunResult:
    """One run on this process's share; rank 0 writes ``out/config.json`` and ``result.json``."""
    trainer = DistributedTrainer(cfg, data, info, opts)  # checks first: a refusal writes nothing
    if opts.out is not None and info.is_main:
        Path(opts.out).mkdir(parents=True, exist_ok=True)
        write_json(Path(opts.out) / CONFIG, cfg.to_dict(), "\n", indent=1)
    D.barrier(info)
    if opts.tensorboard is not None and info.is_main:
        from normlab.lab.train.tblog import TensorBoardLog

        trainer.tb = TensorBoardLog(opts.tensorboard, cfg.to_dict(), start=trainer._start)
    try:
        res = trainer.run()
        if trainer.tb is not None:
            trainer.tb.finish(res.summary)  # the config as hparams, the final losses
    finally:
        if trainer.tb is not None:
            trainer.tb.close()
    res.summary.update(world_size=info.world_size, parallel=_mode(opts, info, none="none"))
    if opts.out is not None and info.is_main:
        write_json(Path(opts.out) / RESULT, res.to_dict(), "\n", indent=1)
    return res


def _mode(opts: RunOptions, info: D.DistInfo, *, none: str) -> str:
    return ("fsdp" if opts.fsdp else "ddp") if info.distributed else none


def train_process(
    cfg: TrainConfig, data: Corpus, opts: RunOptions, *, timeout_s: float
) -> RunResult:
    """This process's part of one run (``normlab train``) on ``cfg.device``: join the process
    group torchrun set up (if any), train, print a line before and after on rank 0, leave the
    group."""
    info = D.setup(cfg.device, timeout_s=timeout_s)
    try:
        if info.is_main:
            note = " (--fsdp needs torchrun with > 1 process; ignored)" if opts.fsdp else ""
            if info.distributed:
                note = f", backend {D.backend_for(info.device)}"
            m = cfg.model
            print(
                f"normlab train: {info.world_size} x {_mode(opts, info, none='one process')} on "
                f"{info.device} in {cfg.precision}{note}; {m.arch} {m.norm}/{m.placement} "
                f"d={m.dim} L={m.n_layers}, {cfg.steps} steps of {cfg.batch_size}x{cfg.seq_len} "
                f"tokens -> {opts.out}",
                flush=True,
            )
        res = run_training(cfg, data, info, opts)
        if info.is_main:
            s = res.summary
            tail = f"final val loss {s['final_val_loss']:.4f}" if res.status == "ok" else res.reason
            print(f"{res.status}: {s['steps_done']} steps, {tail}", flush=True)
        return res
    finally:
        D.teardown(info)
