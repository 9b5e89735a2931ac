"""``normlab bench``: the harness's arithmetic and its output files, on tiny shapes (the timings
themselves are the benchmark's business, not a test's)."""

import json
from pathlib import Path

import pytest
import torch

from normlab.lab.bench import bandwidth as bench
from normlab.lab.cli import main


def test_time_ms_interleaves_every_function_and_keeps_a_positive_time():
    calls = {"a": 0, "b": 0}

    def fn(name):
        def f():
            calls[name] += 1

        return f

    ms = bench.time_ms({"a": fn("a"), "b": fn("b")}, repeat=2)
    assert ms.keys() == {"a", "b"} and all(0 < v < 1 for v in ms.values())
    # two warm-up calls, then every function in each of the 4 x repeat rounds of a short round
    assert calls["a"] >= 2 + 4 * 2 and calls["b"] >= 2 + 4 * 2


@pytest.mark.parametrize("op", bench.OPS)
def test_run_matrix_columns_follow_from_the_times(op):
    results = bench.run_matrix(
        "cpu", "numba", ops=(op,), dtypes=("float32",), shapes=((8, 64),), repeat=1,
        compile=False, log=lambda _: None,
    )  # fmt: skip
    assert [r.mode for r in results] == ["fwd", "fwd+bwd"]
    nbytes = 8 * 64 * 4
    for r in results:
        tensors = bench.TENSORS[(r.mode, op.startswith("fused"))]
        assert r.gbps == pytest.approx(tensors * nbytes / r.ms / 1e6)
        assert r.pct_of_limit == pytest.approx(100 * r.gbps / r.copy_gbps)
        assert r.x_eager == pytest.approx(r.eager_ms / r.ms)
        assert r.x_compile is None and r.compile_ms is None
        assert (r.op, r.dtype, r.shape, r.backend) == (op, "float32", "8x64", "numba")


def test_cli_writes_table_csv_json_and_chart(tmp_path, capsys):
    argv = ["bench", "--shapes", "8x64", "3x32", "--ops", "layer_norm", "--dtypes", "bfloat16",
            "--no-compile", "--repeat", "1", "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    rows = json.loads((tmp_path / "bench_cpu.json").read_text())
    assert [(r["shape"], r["mode"]) for r in rows] == [
        ("8x64", "fwd"), ("8x64", "fwd+bwd"), ("3x32", "fwd"), ("3x32", "fwd+bwd")
    ]  # fmt: skip
    assert {r["op"] for r in rows} == {"layer_norm"} and {r["dtype"] for r in rows} == {"bfloat16"}
    table = (tmp_path / "bench_cpu.md").read_text()
    assert table.count("| layer_norm | bfloat16 |") == 4 and "![bench_cpu](bench_cpu.png)" in table
    assert len((tmp_path / "bench_cpu.csv").read_text().splitlines()) == 5  # header + 4 rows
    assert (tmp_path / "bench_cpu.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# the articles' cost statements as findings

from normlab.lab.bench import comm, ratio, work  # noqa: E402
from normlab.lab.bench import cost_findings as bf  # noqa: E402
from normlab.lab.verdict import CLAIM_WORDS, Word  # noqa: E402


def _round_values(log_ratio: float, n: int = 9) -> list[float]:
    return [log_ratio + 0.01 * ((-1) ** i) * (i % 3) for i in range(n)]


def test_rmsnorm_faster_rule_on_synthetic_rounds():
    f = bf.rmsnorm_faster("eager", sizes=(64, 4096))
    faster = {p: _round_values(0.3) for p, _ in f.parts}  # RMSNorm 26 % faster everywhere
    assert f.decide(faster)["verdict"] == Word.HOLDS
    slower = dict(faster, **{"d=64": _round_values(-1.3)})  # F.rms_norm 3.7x slower
    v = f.decide(slower)
    assert v["verdict"] == Word.DOES_NOT_HOLD
    assert [p["verdict"] for p in v["parts"]] == [Word.DOES_NOT_HOLD, Word.HOLDS]
    same = {p: _round_values(0.0) for p, _ in f.parts}  # no difference that matters
    assert f.decide(same)["verdict"] == Word.DOES_NOT_HOLD
    # each implementation is its own finding: one slow implementation decides only its own
    names = [x.name for x in bf.all_findings()]
    assert names[:3] == ["rmsnorm-faster-normlab", "rmsnorm-faster-eager", "rmsnorm-faster-compile"]


def test_a_stalled_round_moves_neither_mean_nor_interval():
    f = bf.rmsnorm_faster("eager", sizes=(64,))
    vals = _round_values(0.3, n=10)
    stalled = vals[:-1] + [-5.0]  # one round where the machine stalled the RMSNorm batch
    assert f.decide({"d=64": stalled})["verdict"] == Word.HOLDS


def test_layernorm_does_more_work_than_rmsnorm_counted_from_the_articles_code():
    """000 §3.3: LayerNorm takes two passes over the row (mean, then variance) and, with γ and
    β, 4 more operations per element (4d per token) than RMSNorm, counted from the traced
    forwards of the articles' code."""
    ln, rms = work.count("layer_norm", 128), work.count("rms_norm", 128)
    assert (ln.passes, rms.passes) == (2, 1)
    assert ln.per_element - rms.per_element == 4
    assert work.count("layer_norm", 7) == ln  # per element: the same at any d
    with pytest.raises(ValueError, match="op must be"):
        work.count("batch_norm")


def _counts(bn_extra: int, world: int = 2, steps: int = 3) -> dict:
    def step(extra):
        return {
            "calls": {"gradients": 1, "buffers": 1, "other": extra},
            "bytes": {"gradients": 5000, "buffers": 100, "other": 400 * extra},
        }

    norms = {"batchnorm": [step(bn_extra)] * steps, "layernorm": [step(0)] * steps}
    return {"world_size": world, "steps": steps, "norms": norms}


def test_communication_rule_on_synthetic_counts():
    holds = bf.decide_counts(_counts(15))
    assert holds["verdict"] == Word.HOLDS
    assert holds["means"]["batchnorm calls other"] == 15
    assert bf.decide_counts(_counts(0))["verdict"] == Word.DOES_NOT_HOLD  # BatchNorm without a sync
    lone = bf.decide_counts(_counts(15, world=1))
    assert lone["verdict"] == Word.NOT_TESTABLE


def test_counter_counts_collectives_by_kind():
    import torch

    c = comm.Counter()
    c.add("other", [torch.zeros(3, 4)])
    c.in_hook = True
    c.add("gradients", [torch.zeros(10, dtype=torch.float64)])
    snap = c.snapshot()
    assert snap["calls"] == {"gradients": 1, "buffers": 0, "other": 1}
    assert snap["bytes"] == {"gradients": 80, "buffers": 0, "other": 48}
    c.reset()
    assert sum(c.snapshot()["calls"].values()) == 0


def test_findings_ratio_writes_verdict_json_and_plot(tmp_path):
    o = bf.FindingsOptions(out=tmp_path, kinds=("ratio",), sizes=(64,), impls=("eager",), rounds=3)
    md = bf.run_findings(o, log=lambda s: None)
    saved = json.loads((tmp_path / "bench-findings.json").read_text())
    (v,) = saved
    assert v["name"] == "rmsnorm-faster-eager" and v["verdict"] in CLAIM_WORDS
    assert v["parts"][0]["n"] == 3 and len(v["parts"][0]["values"]) == 3
    assert "rmsnorm-faster-eager" in md.read_text() and "passes over the row" in md.read_text()
    assert (tmp_path / "bench-ratio-vs-d.png").read_bytes()[:4] == b"\x89PNG"


def test_fused_and_unfused_compute_the_same_and_the_finding_records_when_it_ran(
    tmp_path, monkeypatch
):
    from normlab.lab.bench import fused

    sides = fused.contenders(256, elements=1 << 12)
    (y1, h1), (y2, h2) = sides["fused"](), sides["unfused"]()
    torch.testing.assert_close(h1, h2, rtol=0, atol=0)
    torch.testing.assert_close(y1, y2)  # the same norm of the same sum: only the fusion differs
    monkeypatch.setattr(fused, "ELEMENTS", 1 << 12)  # the design's 2 GB is the benchmark's
    monkeypatch.setattr(fused, "working_set_why", lambda device: None)
    o = bf.FindingsOptions(out=tmp_path, kinds=("fused",), sizes=(256,), rounds=3)
    bf.run_findings(o, log=lambda s: None)
    (v,) = json.loads((tmp_path / "bench-findings.json").read_text())
    assert v["name"] == "fused-add-norm-saves-traffic" and v["verdict"] in CLAIM_WORDS
    assert v["began"] and v["record"]["traffic"] == {"fused": 4, "unfused": 5}
    assert [p["part"] for p in v["parts"]] == ["d=256"] and v["parts"][0]["n"] == 3


def test_the_fusion_finding_decides_nothing_where_the_cache_holds_its_working_set(monkeypatch):
    from normlab.lab.bench import fused

    monkeypatch.setattr(fused, "llc_bytes", lambda: 1 << 40)  # a 1 TB cache: all in cache
    why = fused.working_set_why("cpu")
    assert why and "last-level cache" in why
    got = bf.decide_fused(bf.FindingsOptions(kinds=("fused",)), log=lambda s: None)
    assert {p["verdict"] for p in got["parts"]} == {Word.NOT_TESTABLE} and got["began"]
    monkeypatch.setattr(fused, "llc_bytes", lambda: None)
    assert "cannot be read" in fused.working_set_why("cpu")
    assert fused.working_set_why("cuda") is None


def test_interleaved_times_every_function_every_round():
    calls = []
    fns = {k: (lambda k=k: calls.append(k)) for k in "ab"}
    times = ratio.interleaved(fns, rounds=4)
    assert all(len(t) == 4 and min(t) > 0 for t in times.values())
    assert set(calls) == {"a", "b"}


@pytest.mark.slow
def test_batchnorm_communication_under_torchrun(tmp_path):
    """Two gloo processes: normlab's BatchNorm all-reduces its statistics, LayerNorm does not;
    the gradient buckets are the same size."""
    counts = comm.launch(tmp_path / "counts.json", steps=1)
    bn, ln = counts["norms"]["batchnorm"][0], counts["norms"]["layernorm"][0]
    assert counts["world_size"] == 2
    assert bn["calls"]["other"] > 0 and ln["calls"]["other"] == 0
    assert bn["calls"]["gradients"] == ln["calls"]["gradients"] >= 1
    assert bf.decide_counts(counts)["parts"][0]["verdict"] == Word.INCONCLUSIVE  # n=1: no interval


def test_a_torchrun_job_that_hangs_makes_the_communication_finding_not_testable(
    monkeypatch, tmp_path
):
    import subprocess

    def hangs(path, **kw):
        raise subprocess.TimeoutExpired(["torchrun"], comm.TIMEOUT_S)

    monkeypatch.setattr(comm, "launch", hangs)
    got = bf.decide_comm(None, tmp_path)
    assert {p["verdict"] for p in got["parts"]} == {Word.NOT_TESTABLE}
    assert all("timed out" in p["why"] for p in got["parts"]), got


def test_published_findings_follow_from_their_values():
    """docs/bench-findings.json: every verdict is what today's rule decides on its values."""
    path = Path(__file__).parents[3] / "docs/bench-findings.json"
    published = json.loads(path.read_text())
    rules = {f.name: f for f in bf.all_findings()}
    assert [v["name"] for v in published] == list(rules)
    for v in published:
        assert rules[v["name"]].redecide(v) == v
