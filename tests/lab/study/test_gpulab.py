"""The lab on a GPU, checked on any machine: a device and a precision for every run (keyed and
recorded apart), the GPU each worker gets and what a Ray task asks for (with a faked device
count), ``--device cuda`` without CUDA as one line and status 2, the GPU preset's plan, and a
study in fp32 and bf16 on the CPU into the same --out."""

import json
import queue
import re
from pathlib import Path

import pytest
import torch

from normlab.lab.cli import main
from normlab.lab.kit.errors import UsageError
from normlab.lab.study.run import executors, plan
from normlab.lab.study.run.executors import (
    Job,
    claim_gpu,
    gpu_assignment,
    ray_resources,
    visible_gpus,
)
from normlab.lab.study.run.runner import StudyOptions, configure
from normlab.lab.study.run.store import run_key
from normlab.lab.study.spec.parse import load_builtin
from normlab.lab.train.data import load_corpus
from normlab.lab.train.trainer import TrainConfig, Trainer, train

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks a machine without CUDA")


def _base() -> TrainConfig:
    return next(a.config for a in load_builtin("smoke").arms if a.name == "base")


# ---- the config: device and precision


def test_config_takes_device_and_precision_and_rejects_others():
    cfg = _base()
    assert (cfg.device, cfg.precision) == ("auto", "fp32")
    assert TrainConfig.from_dict(cfg.replace(precision="bf16").to_dict()).precision == "bf16"
    with pytest.raises(ValueError, match="precision must be one of"):
        cfg.replace(precision="int8")
    with pytest.raises(ValueError, match="device must be one of"):
        cfg.replace(device="tpu")


def test_run_key_tells_devices_and_precisions_apart():
    cfg, sha = _base().replace(device="cpu"), "abc"
    keys = {run_key(cfg.replace(device=d, precision=p), sha)
            for d in ("cpu", "cuda") for p in ("fp32", "bf16", "fp16")}  # fmt: skip
    assert len(keys) == 6
    if not torch.cuda.is_available():  # "auto" is keyed as the device it resolves to
        assert run_key(cfg.replace(device="auto"), sha) == run_key(cfg, sha)


def test_a_run_keys_the_fields_set_away_from_their_defaults_and_its_device():
    import hashlib

    from normlab.models import TransformerConfig

    model = TransformerConfig(256, 16, 2, 2, norm="layernorm")
    cfg = TrainConfig(model=model, steps=12, device="cpu", precision="bf16", threads=3)
    d = {"model": {"vocab_size": 256, "dim": 16, "n_layers": 2, "n_heads": 2, "norm": "layernorm"}}
    d |= {"steps": 12, "device": "cpu", "precision": "bf16"}  # not threads: speed only
    blob = json.dumps({"config": d, "corpus": "abc"}, sort_keys=True)
    assert run_key(cfg, "abc") == hashlib.sha256(blob.encode()).hexdigest()[:16]


def test_bf16_runs_the_forward_in_bf16_and_fp16_trains_with_a_scaler():
    corpus = load_corpus(None)
    t = Trainer(_base().replace(precision="bf16"), corpus)
    x = torch.zeros(2, 8, dtype=torch.long)
    with t.autocast():
        assert t.build_model()(x).dtype == torch.bfloat16
    res = train(_base().replace(precision="fp16", steps=4, probe_steps=(0, 4)), corpus)
    assert res.status == "ok" and res.summary["precision"] == "fp16"
    assert res.summary["device"] == "cpu" and res.config["precision"] == "fp16"


def test_configure_resolves_auto_and_applies_the_options_to_every_arm():
    study = load_builtin("smoke")
    out = configure(study, "cpu", "bf16")
    assert {(a.config.device, a.config.precision) for a in out.arms} == {("cpu", "bf16")}
    kept = configure(study)  # the spec's own: auto, resolved here; fp32
    here = "cuda" if torch.cuda.is_available() else "cpu"
    assert {(a.config.device, a.config.precision) for a in kept.arms} == {(here, "fp32")}


@NO_CUDA
def test_configure_refuses_cuda_here_unless_only_planning():
    study = load_builtin("smoke")
    with pytest.raises(UsageError, match="--device cuda: no CUDA device here"):
        configure(study, "cuda")
    assert configure(study, "cuda", check=False).arms[0].config.device == "cuda"
    gpu = load_builtin("gpu")  # the spec says device = "cuda"
    with pytest.raises(UsageError, match=r"device cuda: no CUDA device here"):
        configure(gpu)


def test_study_options_check_device_and_precision(tmp_path):
    with pytest.raises(UsageError, match="precision: expected one of"):
        StudyOptions(tmp_path, precision="int8")
    with pytest.raises(UsageError, match="device: expected one of"):
        StudyOptions(tmp_path, device="tpu")


# ---- the executors' GPUs


def test_gpu_assignment_gives_each_worker_its_own_gpu():
    assert gpu_assignment(2, ["0", "1"]) == ["0", "1"]
    assert gpu_assignment(4, ["0", "1"]) == ["0", "1", "0", "1"]  # more workers: round-robin
    assert gpu_assignment(1, ["3", "5"]) == ["3"]
    assert gpu_assignment(3, []) == [None, None, None]  # a CPU study: the environment untouched


def test_visible_gpus_follows_the_environment_then_the_device_count(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 5")
    assert visible_gpus() == ["2", "5"]  # the ids the user already restricted the study to
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert visible_gpus() == ["0", "1", "2", "3"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert visible_gpus() == []


def test_a_worker_claims_its_gpu_from_the_queue(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    # setenv first: delenv records nothing for an unset variable, and claim_gpu sets it.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    q = queue.SimpleQueue()
    for g in gpu_assignment(2, executors.visible_gpus()):
        q.put(g)
    assert claim_gpu(q) == "0"
    assert claim_gpu(q) == "1"
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    q.put(None)
    assert claim_gpu(q) is None and claim_gpu(None) is None
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"  # None leaves it alone


def test_ray_tasks_ask_for_a_gpu_only_on_cuda():
    assert ray_resources(Job(None, "sha", 2)) == {"num_cpus": 2, "num_gpus": 0}
    assert ray_resources(Job(None, "sha", 2, cuda=True)) == {"num_cpus": 2, "num_gpus": 1}


# ---- --device cuda on a machine without CUDA: one line, status 2, before any work


def _fails(argv: list[str], capsys) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"normlab {argv[0]}: ") and "no CUDA device here" in err, err
    return err


@NO_CUDA
@pytest.mark.parametrize("argv", [
    ["study", "--preset", "smoke", "--device", "cuda"],
    ["study", "--preset", "gpu"],  # the preset itself asks for CUDA
    ["advise", "--hf-config", "llama-3.2-1b.json", "--preset", "smoke", "--device", "cuda"],
    ["train", "--steps", "1", "--device", "cuda"],
    ["bench", "--device", "cuda", "--quick"],
])  # fmt: skip
def test_device_cuda_without_cuda_is_a_usage_error(argv, capsys, tmp_path):
    out = tmp_path / "out"
    _fails([*argv, "--out", str(out)], capsys)
    assert not out.exists()  # nothing done, not even the output directory


# ---- the GPU preset's plan


def test_gpu_preset_lists_anywhere_with_an_estimate_not_a_measurement(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["study", "--preset", "gpu", "--list"]) == 0
    text = capsys.readouterr().out
    assert "on CUDA in bf16" in text and "NVIDIA H200" in text and "no CUDA device here" in text
    assert "estimate, not measured" in text and "est. GPU s" in text
    total = float(text.split("in bf16, estimated ", 1)[1].split(" s ", 1)[0])
    # The one GPU call runs the preset as a stage of benchmarks/gpu_lab.sh under its own time
    # limit: the estimate (start-up included) leaves that limit a 5 % margin.
    script = (Path(__file__).parents[3] / "benchmarks" / "gpu_lab.sh").read_text()
    limit = int(re.search(r"^stage gpu-preset (\d+) ", script, re.M).group(1))
    assert total <= 0.95 * limit


def test_gpu_calibration_is_marked_unmeasured_and_used_for_unknown_gpus():
    assert all(c.measured is None for c in plan.GPU_CALIBRATION.values())  # until a GPU run
    name, _, note = plan.calibration("NVIDIA H200")
    assert name == "NVIDIA H200" and note.startswith("this machine's NVIDIA H200")
    name, _, note = plan.calibration("NVIDIA A10")
    assert name == plan.REFERENCE_GPU and "no calibration for NVIDIA A10" in note


def test_gpu_preset_meets_the_issue():
    study = load_builtin("gpu")
    cfgs = {a.name: a.config for a in study.arms}
    assert {c.device for c in cfgs.values()} == {"cuda"}
    assert {c.precision for c in cfgs.values()} == {"bf16"}
    assert {cfgs[n].model.n_layers for n in ("post-L1000", "deepnorm-L1000")} == {1000}
    rms = cfgs["rms-50M"]
    assert rms.steps * rms.batch_size * rms.seq_len >= 50e6
    assert {c.model.dim for n, c in cfgs.items() if "-lr" in n} == {256, 512}


# ---- the same tiny study in fp32 and bf16, on the CPU, into one --out

TINY = """
name = "tiny"
description = "two precisions, one --out"

[base]
steps = 6
batch_size = 4
seq_len = 16
eval_batches = 2
probe_steps = [0]

[base.model]
dim = 16
n_layers = 2
n_heads = 2
max_seq_len = 16

[[arms]]
name = "base"

[[claims]]
name = "base-trains"
statement = "It learns something."
rule = "trains"
arm = "base"
seeds = 2
"""


def test_fp32_and_bf16_studies_resume_into_one_out_keyed_apart(tmp_path, capsys):
    spec, out = tmp_path / "tiny.toml", tmp_path / "out"
    spec.write_text(TINY)
    common = ["study", "--spec", str(spec), "--out", str(out), "--device", "cpu", "--workers",
              "1", "--threads", "1", "--quiet", "--resume"]  # fmt: skip
    for precision in ("fp32", "bf16", "fp32"):  # the last: everything is there already
        assert main([*common, "--precision", precision]) == 0
    recs = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert len(recs) == 4 and len({r["key"] for r in recs}) == 4
    by = {}
    for r in recs:
        c = r["result"]["config"]
        assert c["device"] == "cpu" and r["result"]["summary"]["device"] == "cpu"
        by.setdefault(c["precision"], []).append(r)
    assert sorted(by) == ["bf16", "fp32"] and all(len(v) == 2 for v in by.values())
    assert by["bf16"][0]["result"]["summary"]["precision"] == "bf16"
    meta = json.loads((out / "study.json").read_text())
    assert meta["environment"]["device"] == "cpu" and meta["reused_runs"] == 2
