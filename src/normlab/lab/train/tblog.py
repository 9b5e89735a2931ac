"""One run's scalars as TensorBoard event files (``normlab train --tensorboard DIR``, and
``normlab study --tensorboard DIR``: one run directory per arm and seed).

Written with ``torch.utils.tensorboard.SummaryWriter``, imported when a log is opened, never
before: neither the library nor a lab command without the option needs ``tensorboard``. The
process that trains writes the log (a study's worker process, or rank 0 under torchrun).

Tags: ``train/loss``, ``train/grad_norm``, ``train/lr``, ``train/tokens_per_s`` per step (the
step as in ``metrics.jsonl``: the update's index), ``val/loss`` and ``val/loss_train_mode``
(when the run validates in train mode too) per evaluation (at the steps done), the config as
text (``config``, its JSON) and, at the end, as hparams: the flattened config fields
(``model.dim``, ...) with ``hparam/final_val_loss`` and ``hparam/train_loss_last``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from normlab.lab.train.config import flat_fields

TRAIN_TAGS = ("loss", "grad_norm", "lr", "tokens_per_s")
VAL_TAGS = {"val_loss": "val/loss", "val_loss_train_mode": "val/loss_train_mode"}


def tensorboard_available() -> bool:
    """Whether ``torch.utils.tensorboard`` can be imported here (it needs ``tensorboard``)."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError:
        return False
    return True


def flat_hparams(config: dict[str, Any]) -> dict[str, Any]:
    """A config dict as TensorBoard hparams: nested tables as dotted names (``model.dim``),
    lists as their text, None as ``"none"``; numbers, strings and bools as they are."""
    return {
        k: "none" if v is None else v if isinstance(v, bool | int | float | str) else json.dumps(v)
        for k, v in flat_fields(config).items()
    }


class TensorBoardLog:
    """The event files of one run in ``logdir``. ``start``: the first step this process trains
    (a resumed run's checkpoint step; 0 for a fresh one): what an earlier attempt logged from
    there on is purged from TensorBoard's view, so a retried or resumed run shows once."""

    def __init__(self, logdir: str | Path, config: dict[str, Any], *, start: int = 0):
        from torch.utils.tensorboard import SummaryWriter

        self.config = config
        self.writer = SummaryWriter(log_dir=str(logdir), purge_step=start)
        text = json.dumps(config, indent=1)
        self.writer.add_text("config", f"```json\n{text}\n```", global_step=start)

    def step(self, step: int, record: dict[str, Any]) -> None:
        """A training step's record (what the trainer's ``on_step`` gets)."""
        for k in TRAIN_TAGS:
            _scalar(self.writer, f"train/{k}", record.get(k), step)

    def evaluation(self, record: dict[str, Any]) -> None:
        """An evaluation (``{"step", "val_loss", ["val_loss_train_mode"]}``)."""
        for k, tag in VAL_TAGS.items():
            _scalar(self.writer, tag, record.get(k), record["step"])

    def finish(self, summary: dict[str, Any]) -> None:
        """The run's config as hparams, with its final losses as the metrics (the caller then
        closes the log, as after a run that raised)."""
        from torch.utils.tensorboard.summary import hparams

        metrics = {
            f"hparam/{k}": float("nan") if summary.get(k) is None else float(summary[k])
            for k in ("final_val_loss", "train_loss_last")
        }
        exp, ssi, sei = hparams(flat_hparams(self.config), metrics)
        steps = int(summary.get("steps_done") or 0)
        fw = self.writer._get_file_writer()  # the run's own event file, not a subdirectory
        for s in (exp, ssi, sei):
            fw.add_summary(s, steps)
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, steps)

    def close(self) -> None:
        self.writer.close()


def _scalar(writer, tag: str, value: Any, step: int) -> None:
    if value is not None and math.isfinite(float(value)):
        writer.add_scalar(tag, float(value), step)
