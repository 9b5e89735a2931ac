"""Multi-process correctness on the CPU (gloo): every test starts its own ``torchrun`` job and
compares the ranks' results with one process on the concatenated batch."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import _distributed_worker as worker
import pytest
import torch
import torch.distributed as dist
from torch import Tensor

from normlab import BatchNorm
from normlab.lab import cli
from normlab.lab.train import distributed as D

WORKER = Path(worker.__file__)
# One tiny run (d=32, 2 layers, T=32), on one thread: each rank gets a core of a 2-core machine.
TRAIN = ["train", "--dim", "32", "--n-layers", "2", "--n-heads", "2", "--seq-len", "32",
         "--batch-size", "8", "--steps", "20", "--eval-batches", "2", "--ckpt-every", "10",
         "--log-every", "0", "--threads", "1"]  # fmt: skip
TIMEOUT_S = 120  # per job: a hang (a rank stuck in a collective) fails the test instead of CI

# torchrun subprocesses: seconds each.
pytestmark = pytest.mark.slow


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


@pytest.fixture(scope="module")
def checks_job(tmp_path_factory) -> tuple[Path, str]:
    """One 2-rank job (each costs seconds of start-up) for the BatchNorm and FSDP2 cases, then a
    diverging ``normlab train`` run: its output directory and the job's output."""
    out = tmp_path_factory.mktemp("checks")
    diverge = ["--lr", "30", "--out", str(out / "diverge")]
    proc = torchrun(str(WORKER), "checks", str(out), *TRAIN, *diverge)
    return out, proc.stdout


@pytest.fixture(scope="module")
def checks(checks_job) -> list[dict]:
    out, _ = checks_job
    return [torch.load(out / f"checks.rank{r}.pt", weights_only=True) for r in range(2)]


def close(actual, expected, **kw):
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5, **kw)


# ------------------------------------------------------------------------------------------
# synchronized BatchNorm


@pytest.mark.parametrize("case", list(worker.BN_CASES))
def test_batchnorm_two_ranks_uneven_masks_equal_one_process(checks, case):
    # bn_far: a mean 1e4 from the running mean; each rank's sums are combined in two passes
    # (mean, then squares around it), so nothing cancels on either side of the comparison.
    # bn_causal: per-position sums are all-reduced before the prefix sums.
    ranks = [c[case] for c in checks]
    kw, offset = worker.BN_CASES[case]
    single = worker.run_bn(BatchNorm(worker.BN_C, **kw), slice(None), offset)
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
    alone = worker.run_bn(BatchNorm(worker.BN_C, **kw), slice(0, 2), offset)
    assert not torch.allclose(alone["y"][0], single["y"][0][:2], rtol=1e-3)


def test_unsynchronized_batchnorm_keeps_each_ranks_statistics(checks):
    # sync=False: each rank computes what one process computes on its rows alone.
    for r, got in enumerate(c["bn_local"] for c in checks):
        alone = worker.run_bn(BatchNorm(worker.BN_C), slice(2 * r, 2 * r + 2))
        for k in ("y", "x_grad"):
            for step in range(worker.BN_STEPS):
                close(got[k][step], alone[k][step])
        close(got["running_mean"], alone["running_mean"])


def test_per_rank_statistics_step_is_accumulation_of_the_shards(checks):
    # quick's batchnorm-split-statistics runs 2 DDP ranks with per-rank statistics as 2
    # accumulated micro-batches (Trainer.train_step with grad_accum=2): the same gradients.
    model, tokens = worker.split_model(), worker.split_tokens()
    for shard in tokens.chunk(2):
        (worker.split_loss(model, shard) / 2).backward()
    accumulated = {n: p.grad for n, p in model.named_parameters()}
    for r in range(2):
        for name, grad in checks[r]["split_grads"].items():
            close(grad, accumulated[name], msg=lambda m, n=name, r=r: f"rank {r} {n}: {m}")
    # ... and not those of the whole batch's statistics, which the split changes.
    whole = worker.split_model()
    worker.split_loss(whole, tokens).backward()
    gaps = [(p.grad - accumulated[n]).abs().max() for n, p in whole.named_parameters()]
    assert max(gaps) > 1e-3


def test_batchnorm_without_process_group_is_local():
    assert not dist.is_initialized()
    bn = BatchNorm(3)
    x = torch.randn(2, 5, 3) + 1
    bn(x)
    close(bn.running_mean, 0.1 * x.reshape(-1, 3).mean(0))


# ------------------------------------------------------------------------------------------
# normlab kernels on FSDP2-sharded parameters


def test_fsdp2_norm_weight_grads_match_one_process(checks):
    ranks = [c["norm_grads"] for c in checks]
    x, w = worker.norm_inputs()
    checked = set()
    for backend in worker.NORM_BACKENDS:
        if backend == "numba" and not worker.numba_ready():
            continue
        model = worker.norm_model(backend)
        worker.norm_loss(model, x, w).backward()
        for name, p in model.named_parameters():
            for r in range(2):  # full_tensor() gathers the same full gradient on every rank
                close(ranks[r][f"{backend}/{name}"], p.grad, msg=lambda m, n=name: f"{n}: {m}")
        checked.add(backend)
    assert {"reference", "auto"} <= checked


# ------------------------------------------------------------------------------------------
# normlab train: 2 ranks compute what one process computes on the global batch


def train_torchrun(out: Path, *extra: str, **kw) -> subprocess.CompletedProcess:
    return torchrun("-m", "normlab", *TRAIN, "--out", str(out), *extra, **kw)


def metrics(out: Path) -> dict[str, list]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "val_loss" not in r]  # the steps' lines, not the evaluations'
    return {k: [r[k] for r in rows] for k in ("step", "loss", "grad_norm")}


def floats(tree, prefix: str = "") -> dict[str, float]:
    """The numbers of a nested dict/list, by path."""
    items = tree.items() if isinstance(tree, dict) else enumerate(tree)
    out = {}
    for k, v in items:
        if isinstance(v, dict | list):
            out.update(floats(v, f"{prefix}/{k}"))
        elif isinstance(v, float):
            out[f"{prefix}/{k}"] = v
    return out


def result(out: Path) -> dict:
    return json.loads((out / "result.json").read_text())


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("single")
    threads = torch.get_num_threads()
    try:
        assert cli.main([*TRAIN, "--out", str(out)]) == 0
    finally:
        torch.set_num_threads(threads)  # --threads 1 must not slow the rest of the session
    return out


@pytest.fixture(scope="module")
def ddp(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ddp")
    train_torchrun(out)
    return out


@pytest.mark.parametrize("mode", ["ddp", "fsdp"])
def test_two_ranks_train_as_one_process(mode, single, ddp, tmp_path):
    out = ddp
    if mode == "fsdp":
        out = tmp_path
        train_torchrun(out, "--fsdp")
    got, want = metrics(out), metrics(single)
    assert got["step"] == want["step"] == list(range(20))
    close(torch.tensor(got["loss"]), torch.tensor(want["loss"]))
    torch.testing.assert_close(torch.tensor(got["grad_norm"]), torch.tensor(want["grad_norm"]))
    res, ref = result(out), result(single)
    assert res["summary"]["world_size"] == 2 and res["summary"]["parallel"] == mode
    for k in ("final_val_loss", "norm_weight_mean"):
        close(res["summary"][k], ref["summary"][k], msg=lambda m, k=k: f"{k}: {m}")
    # The probes (gradient norms, activations at init) read the gathered, not the local, values.
    probes, ref_probes = floats(res["probes"]), floats(ref["probes"])
    assert probes.keys() == ref_probes.keys() and len(probes) > 10
    for k, v in ref_probes.items():
        torch.testing.assert_close(probes[k], v, rtol=1e-4, atol=1e-6, msg=lambda m, k=k: k + m)


def test_killed_run_resumes_to_the_same_loss(ddp, tmp_path):
    crashed = torchrun(str(WORKER), "crash", "13", *TRAIN, "--out", str(tmp_path), check=False)
    assert crashed.returncode != 0, crashed.stdout[-2000:]
    assert not (tmp_path / "result.json").exists()
    # The checkpoint is plain tensors keyed by parameter name, whatever wrapped the model.
    ckpt = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert ckpt["step"] == 10 and ckpt["world_size"] == 2
    assert "tok_emb.weight" in ckpt["model"] and type(ckpt["model"]["tok_emb.weight"]) is Tensor
    assert len(metrics(tmp_path)["step"]) > 10  # steps past the checkpoint were logged, then lost

    resumed = train_torchrun(tmp_path, "--resume")
    assert "resuming at step 10" in resumed.stdout
    got, want = metrics(tmp_path), metrics(ddp)
    assert got["step"] == list(range(20))  # the lines logged after the checkpoint were replaced
    torch.testing.assert_close(got["loss"], want["loss"], rtol=1e-6, atol=1e-6)
    close(result(tmp_path)["summary"]["final_val_loss"], result(ddp)["summary"]["final_val_loss"])


def test_divergence_stops_every_rank_cleanly(checks_job):
    # The job exited 0 (torchrun checks every rank): no rank was left waiting in a collective.
    out, stdout = checks_job
    res = result(out / "diverge")
    assert res["status"] == "diverged" and res["diverged_step"] < 20
    assert "diverged" in stdout


# ------------------------------------------------------------------------------------------
# the pieces, in one process


def test_resume_refuses_other_options(single, capsys):
    assert cli.main([*TRAIN, "--out", str(single), "--resume", "--lr", "0.002"]) == 2
    err = capsys.readouterr().err
    assert "lr: checkpoint 0.001, now 0.002" in err and len(err.splitlines()) == 1
    assert json.loads((single / "config.json").read_text())["lr"] == 0.001


def test_resume_refuses_another_corpus(single, tmp_path, capsys):
    data = tmp_path / "other.txt"
    data.write_text("x = [i * i for i in range(10)]\n" * 300)
    before = (single / "checkpoint.pt").read_bytes()
    assert cli.main([*TRAIN, "--out", str(single), "--resume", "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert "was trained on another corpus (corpus SHA-256 " in err, err
    assert len(err.splitlines()) == 1
    assert (single / "checkpoint.pt").read_bytes() == before


def test_resume_without_a_checkpoint_starts_afresh(tmp_path, capsys):
    threads = torch.get_num_threads()
    try:
        argv = [*TRAIN, "--steps", "2", "--out", str(tmp_path), "--resume"]
        assert cli.main(argv) == 0
    finally:
        torch.set_num_threads(threads)
    assert "no checkpoint" in capsys.readouterr().out
    assert metrics(tmp_path)["step"] == [0, 1] and result(tmp_path)["status"] == "ok"


def test_options_override_a_preset_run():
    from normlab.lab.commands.train import add_arguments, config_from_args
    from normlab.lab.study.spec.parse import load_builtin

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = next(r.config for r in load_builtin("smoke").arms if r.name == "base")
    args = parser.parse_args(["--preset", "smoke", "--run", "base"])
    assert config_from_args(args) == base
    argv = ["--preset", "smoke", "--run", "base", "--steps", "3", "--norm", "layernorm",
            "--betas", "0.9", "0.95", "--grad-clip", "none", "--no-final-norm"]  # fmt: skip
    want = base.replace(steps=3, betas=(0.9, 0.95), grad_clip=None,
                        model={"norm": "layernorm", "final_norm": False})  # fmt: skip
    assert config_from_args(parser.parse_args(argv)) == want
    with pytest.raises(ValueError, match="--run"):
        config_from_args(parser.parse_args(["--preset", "smoke", "--run", "nope"]))


def test_global_batch_must_split_evenly():
    from normlab.lab.train.data import Corpus
    from normlab.lab.train.dist_trainer import DistributedTrainer, RunOptions
    from normlab.lab.train.trainer import TrainConfig
    from normlab.models import TransformerConfig

    cfg = TrainConfig(model=TransformerConfig(256, 32, 2, 2), batch_size=8, seq_len=32)
    data = Corpus(torch.zeros(1000, dtype=torch.uint8), torch.zeros(1000, dtype=torch.uint8),
                  sha256="", source="zeros", n_bytes=2000)  # fmt: skip
    with pytest.raises(ValueError, match="batch_size=8"):
        DistributedTrainer(cfg, data, D.DistInfo(rank=0, world_size=3), RunOptions())


def test_backend_follows_the_device():
    assert D.backend_for(torch.device("cpu")) == "gloo"
    assert D.backend_for(torch.device("cuda", 0)) == "nccl"
    assert D.setup("cpu").world_size == 1  # no torchrun environment: a lone process
