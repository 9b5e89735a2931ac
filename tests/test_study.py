import json
import os
import signal
import subprocess
import sys
import time

import pytest

from normlab.lab.study.claims import (
    FAILS,
    HOLDS,
    UNSURE,
    Contrast,
    FailsWhereOthersTrain,
    GrowsTowardOutput,
    MoreEven,
)
from normlab.lab.study.presets import PRESETS
from normlab.lab.study.store import ResultStore, run_key


def res(val=None, status="ok", probe=None, **summary):
    return {"status": status, "summary": {"final_val_loss": val, **summary},
            "probes": {"0": probe or {}}}  # fmt: skip


def prof(*xs):
    return {"grad_norm": {"mlp.w_out": list(xs)}, "grad_norm_block": list(xs)}


# ---- rules: each decides from the numbers, and says so


def test_contrast_greater_three_zones_and_noise():
    rule = Contrast(((1, "a", "final_val_loss"), (-1, "b", "final_val_loss")), ">0", 0.02,
                    noise=("b", "b2"))  # fmt: skip
    base = {"b": res(2.0), "b2": res(2.005)}  # noise 0.005 -> threshold max(0.02, 0.01)
    assert rule.decide({**base, "a": res(2.03)}, {}).status == HOLDS
    assert rule.decide({**base, "a": res(1.99)}, {}).status == FAILS
    v = rule.decide({**base, "a": res(2.01)}, {})
    assert v.status == UNSURE and v.numbers["threshold"] == 0.02
    noisy = {"b": res(2.0), "b2": res(2.05), "a": res(2.03)}  # threshold 0.1 now
    assert rule.decide(noisy, {}).status == UNSURE
    # A diverged run is infinitely worse; a missing one leaves the claim open.
    assert rule.decide({**base, "a": res(status="diverged")}, {}).status == HOLDS
    assert rule.decide(base, {}).status == UNSURE
    assert "value" in rule.describe() and "noise" in rule.describe()


def test_contrast_equal_and_ratio():
    eq = Contrast(((1, "a", "final_val_loss"), (-1, "b", "final_val_loss")), "≈0", 0.02)
    assert eq.decide({"a": res(2.0), "b": res(2.01)}, {}).status == HOLDS
    assert eq.decide({"a": res(2.0), "b": res(2.1)}, {}).status == FAILS
    assert eq.decide({"a": res(2.0), "b": res(2.03)}, {}).status == UNSURE
    faster = Contrast(((1, "a", "norm_ms"), (-1, "b", "norm_ms")), "<0", 0.05, ratio=True)
    assert faster.decide({"a": res(1, norm_ms=0.8), "b": res(1, norm_ms=1.0)}, {}).status == HOLDS
    v = faster.decide({"a": res(1, norm_ms=1.2), "b": res(1, norm_ms=1.0)}, {})
    assert v.status == FAILS and v.numbers["value"] == pytest.approx(0.2)


def test_fails_where_others_train():
    rule = FailsWhereOthersTrain("p24", ("q24", "d24"), "p6")
    ctx = {"unigram_entropy": 3.0}
    ok = {"q24": res(2.5), "d24": res(2.6), "p6": res(2.5)}
    assert rule.decide({**ok, "p24": res(2.98)}, ctx).status == HOLDS
    assert rule.decide({**ok, "p24": res(status="diverged")}, ctx).status == HOLDS
    assert rule.decide({**ok, "p24": res(2.5)}, ctx).status == FAILS
    assert rule.decide({**ok, "p24": res(2.8)}, ctx).status == UNSURE  # between the bars
    stalled_ctl = {**ok, "p6": res(3.1), "p24": res(3.1)}
    assert rule.decide(stalled_ctl, ctx).status == UNSURE  # not the depth's doing


def test_gradient_profile_rules():
    grows = GrowsTowardOutput(("p6", "p24"), "mlp.w_out")
    good = {"p6": res(probe=prof(1, 1.5)), "p24": res(probe=prof(1, 2, 3))}
    assert grows.decide(good, {}).status == HOLDS
    flat = {"p6": res(probe=prof(1, 1.5)), "p24": res(probe=prof(2, 1))}
    assert grows.decide(flat, {}).status == FAILS
    even = MoreEven(("a6", "a24"), ("p6", "p24"))
    r = {"p6": res(probe=prof(1, 2)), "p24": res(probe=prof(1, 4)),
         "a6": res(probe=prof(1, 1.2)), "a24": res(probe=prof(1, 8))}  # fmt: skip
    assert even.decide(r, {}).status == UNSURE
    r["a24"] = res(probe=prof(1, 3))
    assert even.decide(r, {}).status == HOLDS
    assert even.decide({**r, "a6": res(probe={})}, {}).status == UNSURE


# ---- presets are valid data


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_are_consistent(name):
    p = PRESETS[name]()
    names = {r.name for r in p.runs}
    for c in p.claims:
        assert set(c.runs) <= names and c.rule.describe()
    for r in p.runs:
        d = json.loads(json.dumps(r.config.to_dict()))
        assert type(r.config).from_dict(d) == r.config
        assert r.config.model.init == "xavier" and r.config.grad_clip is None


def test_quick_and_deep_test_what_they_say():
    quick = PRESETS["quick"]()
    runs = {r.name: r.config for r in quick.runs}
    assert {c.name for c in quick.claims} >= {
        "post-ln-grad-grows", "post-ln-fails-deep", "rmsnorm-matches-quality",
        "rmsnorm-faster", "batchnorm-train-eval-gap", "batchnorm-batch-sensitive",
        "final-norm-needed", "no-decay-on-norms",
    }  # fmt: skip
    assert runs["post-L24"].warmup_steps == 0 and runs["post-L24"].model.placement == "post"
    assert runs["init-post-L48"].steps == 0 and runs["init-post-L48"].probe_steps == (0,)
    deep = {r.name: r.config for r in PRESETS["deep"]().runs}
    assert all(c.model.n_layers >= 500 and c.model.dim == 32 for c in deep.values())


# ---- the results store


def test_store_appends_whole_lines_and_skips_torn_ones(tmp_path):
    store = ResultStore(tmp_path / "results.jsonl")
    store.append({"key": "a", "x": 1})
    with open(store.path, "a") as f:
        f.write('{"key": "b", "x"')  # a write torn by a crash
    store.append({"key": "c", "x": 3})
    store.append({"key": "a", "x": 99})  # a duplicate: the first one wins
    assert {k: v["x"] for k, v in store.load().items()} == {"a": 1, "c": 3}


def test_run_key_ignores_threads_not_config_or_corpus():
    cfg = PRESETS["smoke"]().runs[0].config
    k = run_key(cfg, "abc")
    assert run_key(cfg.replace(threads=7), "abc") == k
    assert run_key(cfg.replace(seed=1), "abc") != k and run_key(cfg, "abd") != k


# ---- kill mid-study, resume: every run exactly once, the finished lines untouched


def _study(out, *extra):
    cmd = [sys.executable, "-m", "normlab", "study", "--preset", "smoke", "--out", str(out),
           "--threads", "1", "--quiet", *extra]  # fmt: skip
    return subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip


@pytest.mark.slow
def test_killed_study_resumes_with_each_run_once(tmp_path):
    path = tmp_path / "results.jsonl"
    proc = _study(tmp_path, "--workers", "1")  # in-process runs; the resume uses 2 processes
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if path.exists() and path.read_text().count("\n") >= 3:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the study ended before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = path.read_bytes()
    n_before = before.count(b"\n")
    assert 3 <= n_before < len(PRESETS["smoke"]().runs)

    proc = _study(tmp_path, "--resume", "--workers", "2")
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err.decode()[-2000:]
    after = path.read_bytes()
    assert after.startswith(before)  # finished runs are kept, byte for byte
    lines = [json.loads(ln) for ln in after.decode().splitlines()]
    keys = [ln["key"] for ln in lines]
    assert len(keys) == len(set(keys)) == len(PRESETS["smoke"]().runs)
    assert {ln["name"] for ln in lines} == {r.name for r in PRESETS["smoke"]().runs}
    assert (tmp_path / "report.html").stat().st_size > 10_000
    assert "## Claims" in (tmp_path / "report.md").read_text()
