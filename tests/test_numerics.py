"""normlab numerics: the reduced sweep, the FP32-statistics guarantee and the generated report."""

import copy
import json
from pathlib import Path

import pytest
import torch

from normlab import functional, reference
from normlab.lab.commands import numerics as numerics_command
from normlab.lab.numerics import findings as nf
from normlab.lab.numerics import report as numerics_report
from normlab.lab.numerics import sweep as numerics
from normlab.lab.numerics.metrics import error_metrics, ulp


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    # one reduced sweep, shared: it is the expensive part (every backend, fwd + bwd)
    options = numerics.NumericsOptions(
        tmp_path_factory.mktemp("numerics"), reduced=True, quiet=True
    )
    return numerics.run_numerics(options)


def _usable(name: str) -> bool:
    try:
        return functional.get_backend(name).supports(torch.device("cpu"))
    except RuntimeError:
        return False


def test_every_usable_backend_ran_and_was_checked(result):
    g = nf.guarantee(result)
    expected = ["reference"] + [b for b in ("numba", "triton") if _usable(b)]
    print(f"\nbackends measured: {result.backends}; guarantee checked: {g.checked}")
    for be in expected:
        assert be in result.backends
        for name in (f"RMSNorm {be}/llama", f"RMSNorm {be}/gemma", f"LayerNorm {be}"):
            assert name in g.checked
    n_cases = len({nf.case_key(r) for r in result.records})
    assert g.n == n_cases * 3 * len(expected)  # llama, gemma, LayerNorm per backend per case


def test_guarantee_holds_on_reduced_sweep(result):
    g = nf.guarantee(result)
    assert g.n > 0
    assert not g.violations, "\n".join(g.violations[:20])


def test_guarantee_detects_violations(result):
    bad = copy.deepcopy(result)
    kernel = next(
        r for r in bad.records if r["backend"] == "reference" and r["dtype"] == "bfloat16"
    )
    kernel["y"]["nonfinite"] = 3
    fp16 = next(
        r
        for r in bad.records
        if r["backend"] == result.backends[-1] and r["dtype"] == "float16" and r["casting"]
    )
    fp16["y"] = dict(fp16["y"], max_ulp=fp16["y"]["max_ulp"] + 1.5)
    v = nf.guarantee(bad).violations
    assert any("3 inf/NaN" in m for m in v) and any("max_ulp" in m for m in v), v


def _first_fp16_failure(result, op):
    rows = [
        r
        for r in result.records
        if r["op"] == op and r["impl"] == "naive" and r["dtype"] == "float16"
        and "scale" in r["axes"] and r["scale"] >= 1.0
    ]  # fmt: skip
    bad = sorted(r["scale"] for r in rows if nf.failure(r["y"]))
    return bad[0] if bad else None


def test_naive_fp16_visibly_fails_and_report_says_where(result):
    firsts = {op: _first_fp16_failure(result, op) for op in nf.OPS}
    assert any(s is not None for s in firsts.values()), "naive FP16 never failed"
    md = (result.files and open(result.files["md"]).read()) or ""
    for op, s in firsts.items():
        text = next(f for f in result.findings if f.startswith(f"Naive FP16 {nf.OPS[op]}"))
        if s is None:
            assert "does not visibly fail" in text
        else:
            assert f"first visibly fails at input scale {s:g}" in text
        assert text in md
    # the naive FP16 failures show in the table itself: flushed zeros or inf/NaN counts
    assert "0×" in md or "inf×" in md


def test_report_says_so_when_naive_does_not_fail(result):
    fake = copy.deepcopy(result)
    good = {
        (nf.case_key(r), r["op"]): r["y"]
        for r in fake.records
        if r["impl"] in ("reference/llama", "reference")
    }
    for r in fake.records:
        if r["impl"] == "naive":
            r["y"] = good[(nf.case_key(r), r["op"])]
    texts = [f for f in nf.findings(fake) if f.startswith("Naive FP16")]
    assert len(texts) == 2
    assert all("does not visibly fail" in t and "first visibly fails" not in t for t in texts)


def test_output_files_are_self_contained(result):
    page = open(result.files["html"]).read()
    assert page.count("data:image/png;base64,") == 2
    assert "http://" not in page and "https://" not in page
    data = json.load(open(result.files["json"]))
    assert len(data["records"]) == len(result.records) and data["findings"] == result.findings


def test_ulp_and_metrics_definitions():
    t = torch.tensor([1.0, 0.0, 3.0, 70000.0, 2.0**-20], dtype=torch.float64)
    assert ulp(t, torch.float16).tolist() == [2.0**-10, 2.0**-24, 2.0**-9, 2.0**6, 2.0**-24]
    assert ulp(torch.tensor([1.0], dtype=torch.float64), torch.bfloat16).item() == 2.0**-7
    # 70000 is beyond FP16's 65504: its inf output is not held against the implementation
    a = torch.tensor([1.0 + 2.0**-10, 0.0, float("inf"), float("inf"), 2.0**-20]).half()
    m = error_metrics(a.view(1, -1), t.view(1, -1))
    assert (m["n"], m["unrepresentable"], m["nonfinite"]) == (4, 1, 1)
    assert m["max_ulp"] == 1.0 and m["row_ulp"] == pytest.approx(2.0**-10 / 2.0**-9)
    assert m["max_rel"] == pytest.approx(2.0**-10 / 3.0)
    z = error_metrics(torch.zeros(1, 4).half(), torch.ones(1, 4, dtype=torch.float64))
    assert z["zeroed"] == 4 and z["max_rel"] == 1.0


def test_naive_layer_norm_is_layer_norm():
    x = torch.randn(4, 32, dtype=torch.float64)
    w, b = torch.randn(32, dtype=torch.float64), torch.randn(32, dtype=torch.float64)
    torch.testing.assert_close(
        numerics.naive_layer_norm(x, w, b, 1e-5), reference.layer_norm(x, w, b, 1e-5)
    )


def test_default_grid_covers_the_spec_and_has_no_duplicates():
    g = numerics.Grid()
    cases = numerics.build_cases(g)
    assert len({c.key for c in cases}) == len(cases) < 150
    assert {c.dtype for c in cases} == {"float16", "bfloat16", "float32"}
    assert {c.shape for c in cases} == set(numerics.SHAPES)
    scales, hiddens, epss = ({getattr(c, k) for c in cases} for k in ("scale", "hidden", "eps"))
    assert (min(scales), max(scales)) == (1e-4, 6e4)
    assert (min(hiddens), max(hiddens)) == (64, 16384)
    assert (min(epss), max(epss)) == (1e-12, 1e-3)


def test_inputs_peak_at_the_scale_in_the_target_dtype():
    case = numerics.Case("float16", 6e4, 64, "outlier", 1e-6, rows=4)
    x, w, b, dy = numerics.make_inputs(case)
    assert x.dtype == w.dtype == dy.dtype == torch.float16 and x.isfinite().all()
    assert x.abs().amax(-1).tolist() == [60000.0] * 4
    x2 = numerics.make_inputs(case)[0]
    assert torch.equal(x, x2)  # deterministic per case


def test_cli_arguments_have_defaults():
    import argparse

    p = argparse.ArgumentParser()
    numerics_command.add_arguments(p)
    args = p.parse_args([])
    assert args.out == "./normlab-out/numerics" and not args.quiet and not args.reduced


def test_markdown_regenerates_from_the_json(result):
    again = numerics.load_result(result.files["json"])
    text = numerics_report.markdown(again)
    assert text == Path(result.files["md"]).read_text()
    assert all(f in text for f in result.findings)
