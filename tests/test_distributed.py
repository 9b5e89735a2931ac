"""Multi-process correctness on the CPU (gloo): every test starts its own ``torchrun`` job and
compares the ranks' results with one process on the concatenated batch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import _distributed_worker as worker
import pytest
import torch
import torch.distributed as dist

from normlab import BatchNorm

WORKER = Path(worker.__file__)
TIMEOUT_S = 120  # per job: a hang (a rank stuck in a collective) fails the test instead of CI


def torchrun(*args: str, nproc: int = 2, env: dict | None = None, check: bool = True):
    """``torchrun --standalone`` (a free port per job) in its own session, killed whole on
    timeout. Returns the CompletedProcess; ``check`` fails the test on a non-zero exit."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", "--monitor-interval=0.1", *args]  # fmt: skip
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env,
        start_new_session=True,
    )  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"torchrun {' '.join(args)} hung for {TIMEOUT_S} s:\n{out[-4000:]}")
    if check and proc.returncode != 0:
        pytest.fail(f"torchrun {' '.join(args)} exited {proc.returncode}:\n{out[-4000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out)


def run_case(case: str, tmp_path: Path) -> list[dict]:
    torchrun(str(WORKER), case, str(tmp_path))
    return [torch.load(tmp_path / f"{case}.rank{r}.pt", weights_only=True) for r in range(2)]


def close(actual, expected, **kw):
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, **kw)


# ------------------------------------------------------------------------------------------
# synchronized BatchNorm


def test_batchnorm_two_ranks_uneven_masks_equal_one_process(tmp_path):
    ranks = run_case("bn", tmp_path)
    single = worker.run_bn(BatchNorm(worker.BN_C), slice(None))
    for r, got in enumerate(ranks):
        for k in ("running_mean", "running_var", "num_batches_tracked"):
            close(got[k], single[k], msg=lambda m, k=k, r=r: f"rank {r} {k}: {m}")
    for step in range(worker.BN_STEPS):
        for k in ("y", "x_grad"):
            close(torch.cat([ranks[0][k][step], ranks[1][k][step]]), single[k][step])
    # Each rank's parameter gradient is its share of the sum (the loss is a sum over tokens).
    for k in ("weight_grad", "bias_grad"):
        close(ranks[0][k] + ranks[1][k], single[k])

    # The masks are uneven enough that rank 0 alone sees other statistics: the sync is what
    # made the numbers above agree.
    alone = worker.run_bn(BatchNorm(worker.BN_C), slice(0, 2))
    assert not torch.allclose(alone["running_mean"], single["running_mean"], rtol=1e-3)


def test_batchnorm_without_process_group_is_local():
    assert not dist.is_initialized()
    bn = BatchNorm(3)
    x = torch.randn(2, 5, 3) + 1
    bn(x)
    close(bn.running_mean, 0.1 * x.reshape(-1, 3).mean(0))


# ------------------------------------------------------------------------------------------
# normlab kernels on FSDP2-sharded parameters


def test_fsdp2_norm_weight_grads_match_one_process(tmp_path):
    from normlab.functional import available_backends

    ranks = run_case("norm_grads", tmp_path)
    x, w = worker.norm_inputs()
    checked = set()
    for backend in worker.NORM_BACKENDS:
        if backend == "numba" and "numba" not in available_backends():
            continue
        model = worker.norm_model(backend)
        worker.norm_loss(model, x, w).backward()
        for name, p in model.named_parameters():
            for r in range(2):  # full_tensor() gathers the same full gradient on every rank
                close(ranks[r][f"{backend}/{name}"], p.grad, msg=lambda m, n=name: f"{n}: {m}")
        checked.add(backend)
    assert {"reference", "auto"} <= checked
