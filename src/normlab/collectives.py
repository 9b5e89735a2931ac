"""The one collective the layers need: a differentiable sum over the ranks of a process group.

Kept apart from ``normlab.lab.train.distributed`` (process start-up, wrapping, checkpoints) so that
``modules.py`` depends on nothing above it. Every call is a no-op without an initialized process
group of more than one rank, so single-process code never pays for it.
"""

from __future__ import annotations

import torch.distributed as dist
from torch import Tensor


def world_size(group: dist.ProcessGroup | None = None) -> int:
    """Ranks in ``group`` (default: the world), or 1 when no process group is initialized."""
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return dist.get_world_size(group)


def all_reduce_sum(t: Tensor, group: dist.ProcessGroup | None = None) -> Tensor:
    """``sum_r t_r`` on every rank, differentiable: ``S = sum_r t_r`` feeds every rank's loss, so
    ``dL/dt_r = sum_r' dL_r'/dS`` and the backward pass is the same all-reduce of the gradients.
    That is what makes N ranks compute the gradients of one process on the concatenated batch.
    """
    if world_size(group) == 1:
        return t
    # Imported here: it pulls in autograd wrappers of every collective, needed only when sharing.
    from torch.distributed.nn.functional import all_reduce

    return all_reduce(t, op=dist.ReduceOp.SUM, group=dist.group.WORLD if group is None else group)
