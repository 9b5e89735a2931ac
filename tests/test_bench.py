"""``normlab bench``: the harness's arithmetic and its output files, on tiny shapes (the timings
themselves are the benchmark's business, not a test's)."""

import json

import pytest

from normlab.lab.bench import runner as bench
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
