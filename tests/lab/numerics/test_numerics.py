"""normlab numerics: the reduced sweep, the FP32-statistics guarantee and the generated report."""

import copy
import json
from pathlib import Path

import pytest
import torch

from normlab import functional, reference
from normlab.lab.commands import numerics as numerics_command
from normlab.lab.kit.doc import to_markdown
from normlab.lab.numerics import report as numerics_report
from normlab.lab.numerics import sentences as ns
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
    g = ns.guarantee(result)
    expected = ["reference"] + [b for b in ("numba", "triton") if _usable(b)]
    print(f"\nbackends measured: {result.backends}; guarantee checked: {g.checked}")
    for be in expected:
        assert be in result.backends
        for name in (f"RMSNorm {be}/llama", f"RMSNorm {be}/gemma", f"LayerNorm {be}"):
            assert name in g.checked
    n_cases = len({ns.case_key(r) for r in result.records})
    assert g.n == n_cases * 3 * len(expected)  # llama, gemma, LayerNorm per backend per case


def test_guarantee_holds_on_reduced_sweep(result):
    g = ns.guarantee(result)
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
    v = ns.guarantee(bad).violations
    assert any("3 inf/NaN" in m for m in v) and any("max_ulp" in m for m in v), v


def _first_fp16_failure(result, op):
    rows = [
        r
        for r in result.records
        if r["op"] == op and r["impl"] == "naive" and r["dtype"] == "float16"
        and "scale" in r["axes"] and r["scale"] >= 1.0
    ]  # fmt: skip
    bad = sorted(r["scale"] for r in rows if ns.failure(r["y"]))
    return bad[0] if bad else None


def test_naive_fp16_visibly_fails_and_report_says_where(result):
    firsts = {op: _first_fp16_failure(result, op) for op in ns.OPS}
    assert any(s is not None for s in firsts.values()), "naive FP16 never failed"
    md = (result.files and open(result.files["md"]).read()) or ""
    for op, s in firsts.items():
        text = next(f for f in result.findings if f.startswith(f"Naive FP16 {ns.OPS[op]}"))
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
        (ns.case_key(r), r["op"]): r["y"]
        for r in fake.records
        if r["impl"] in ("reference/llama", "reference")
    }
    for r in fake.records:
        if r["impl"] == "naive":
            r["y"] = good[(ns.case_key(r), r["op"])]
    texts = [f for f in ns.sentences(fake) if f.startswith("Naive FP16")]
    assert len(texts) == 2
    assert all("does not visibly fail" in t and "first visibly fails" not in t for t in texts)


def test_output_files_are_self_contained(result):
    page = open(result.files["html"]).read()
    # the sweep's two plots and the findings' three (LayerNorm vs RMSNorm inside the range,
    # error vs scale, gradient vs eps)
    assert page.count("data:image/png;base64,") == 5
    assert "http://" not in page and "https://" not in page
    data = json.load(open(result.files["json"]))
    assert len(data["records"]) == len(result.records) and data["findings"] == result.findings
    assert [v["name"] for v in data["verdicts"]] == [v["name"] for v in result.verdicts]


def test_ulp_and_metrics_definitions():
    t = torch.tensor([1.0, 0.0, 3.0, 70000.0, 2.0**-20], dtype=torch.float64)
    assert ulp(t.numpy(), torch.float16).tolist() == [2.0**-10, 2.0**-24, 2.0**-9, 2.0**6, 2.0**-24]
    assert ulp(torch.tensor([1.0], dtype=torch.float64).numpy(), torch.bfloat16).item() == 2.0**-7
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
    again = numerics.NumericsResult(**json.loads(Path(result.files["json"]).read_text()))
    text = to_markdown(numerics_report.document(again))
    assert text == Path(result.files["md"]).read_text()
    assert all(f in text for f in result.findings)


# --------------------------------------------------------------------------------------------
# the articles' statements as findings

from normlab.lab.numerics import findings, measuring  # noqa: E402
from normlab.lab.verdict import Word  # noqa: E402
from normlab.lab.verdict.finding import Finding, Part  # noqa: E402


def synthetic(finding: Finding, holds: bool, n: int = 6) -> dict[str, list[float]]:
    """Per part, values on the side of δ its rule calls "holds" (or "does not hold")."""
    out = {}
    for label, rule in finding.parts:
        d = rule.delta or 0.1
        noise = [(-1) ** i * d * 0.05 * (1 + i % 3) for i in range(n)]
        if rule.expect == "≈0":
            centre = 0.0 if holds else 4 * d
        else:
            centre = (4 * d) if holds else -4 * d
            centre = -centre if rule.expect == "<0" else centre
        out[label] = [centre + e for e in noise]
    return out


@pytest.mark.parametrize("name", list(findings.FINDINGS))
def test_each_finding_rule_decides_synthetic_measurements(name):
    f = findings.FINDINGS[name]
    assert f.decide(synthetic(f, True))["verdict"] == Word.HOLDS
    v = f.decide(synthetic(f, False))
    assert v["verdict"] == Word.DOES_NOT_HOLD
    assert all(
        p["verdict"] == Word.DOES_NOT_HOLD and p["lo"] <= p["effect"] <= p["hi"] for p in v["parts"]
    )


def test_one_part_that_does_not_hold_decides_the_finding():
    f = findings.FINDINGS["rmsnorm-more-stable"]
    values = synthetic(f, True)
    first = f.parts[0][0]
    values[first] = [-0.46, -0.47, -0.45, -0.46]
    v = f.decide(values)
    assert v["verdict"] == Word.DOES_NOT_HOLD
    assert [p["verdict"] for p in v["parts"]] == [Word.DOES_NOT_HOLD] + [Word.HOLDS] * (
        len(f.parts) - 1
    )


def test_a_part_failing_only_at_95_percent_is_inconclusive_after_holm():
    rule = Part("v", ">0", 0.1)
    f = Finding("f", "s", "src", (("a", rule), ("b", rule), ("c", rule)))
    # n=3: the interval is below 0 at 95 % (t=4.30) but not at 1 − 5 %/3 (t=7.65)
    a = [-0.6, -0.45, -0.3]
    v = f.decide({"a": a, "b": [2.0, 2.1, 2.2], "c": [2.0, 2.1, 2.2]})
    alone = Finding("f", "s", "src", (("a", rule),)).decide({"a": a})
    assert alone["verdict"] == Word.DOES_NOT_HOLD
    assert v["parts"][0]["verdict"] == Word.INCONCLUSIVE and "Holm" in v["parts"][0]["why"]
    assert v["verdict"] == Word.INCONCLUSIVE


def test_a_part_without_measurement_is_not_testable_here():
    f = findings.FINDINGS["rmsnorm-on-sphere"]
    v = f.decide({}, untestable={"on the sphere": "no FP32 here"})
    assert v["verdict"] == Word.NOT_TESTABLE
    assert v["parts"][0]["why"] == "no FP32 here"
    half = f.decide({"inside with eps": [0.005, 0.005, 0.005]})
    assert half["verdict"] == Word.NOT_TESTABLE  # holds in one part, the other not testable


def test_threshold_bisects_to_one_percent():
    assert measuring.threshold(lambda s: s > 257.0, 1.0, 6e4, rising=True) == pytest.approx(
        257.0, rel=0.011
    )
    assert measuring.threshold(lambda e: e < 6e-4, 1e-12, 1e-2, rising=False) == pytest.approx(
        6e-4, rel=0.011
    )
    assert measuring.threshold(lambda s: False, 1.0, 10.0, rising=True) == 10.0  # clamped


def test_findings_measured_in_the_reduced_run(result):
    """The run decides every statement; the measurements the docs quote are what they are:
    naive FP16 RMSNorm overflows at a lower input scale than LayerNorm (x² > 65504 at
    |x| > 256, var > 65504 only at a std of 256), and normalized rows lie on the sphere."""
    by = {v["name"]: v for v in result.verdicts}
    assert list(by) == list(findings.FINDINGS)
    parts = {p["part"]: p for p in by["fp16-squares-overflow"]["parts"]}
    assert parts["FP16 overflow scale"]["verdict"] == Word.HOLDS
    assert 250 < by["fp16-squares-overflow"]["means"]["mean RMSNorm overflow scale"] < 265
    assert by["rmsnorm-on-sphere"]["verdict"] == Word.HOLDS
    grows = {p["part"]: p for p in by["small-eps-explodes"]["parts"]}
    assert grows["RMSNorm: true max|dx| grows"]["verdict"] == Word.HOLDS
    # inside the range, on rows far from 0, LayerNorm's rounded mean costs it percents where
    # RMSNorm stays near FP16's rounding
    means = by["rmsnorm-more-stable"]["means"]
    assert 0.01 < means["mean LayerNorm FP16 forward worst error, large-mean rows"] < 0.5
    assert means["mean RMSNorm FP16 forward worst error, large-mean rows"] < 3e-3
    # stable_rmsnorm: past the naive overflow, failing first in its gradient; 001's never fails
    means = by["stable-rmsnorm"]["means"]
    assert means["mean RMSNorm all-FP32 FP16 overflow scale"] == 6e4
    assert means["mean LayerNorm FP32 statistics FP16 overflow scale"] == 6e4
    assert 1e3 < means["mean RMSNorm stable FP16 overflow scale"] < 6e4
    assert means["mean stable FP16 fails first in dx only"] == 1.0
    for v in result.verdicts:  # each verdict names its design and its draws
        assert v["design"] == findings.FINDINGS[v["name"]].design()
        assert v["seed_block"] == 0 and v["seeds"] == [0, 1, 2]
    saved = json.loads(Path(result.files["findings"]).read_text())
    assert [v["verdict"] for v in saved] == [v["verdict"] for v in result.verdicts]
    md = Path(result.files["md"]).read_text()
    assert "## The articles' statements, decided" in md and "rmsnorm-more-stable" in md
    assert Path(result.files["error-vs-scale"]).read_bytes()[:4] == b"\x89PNG"


def test_published_findings_follow_from_their_values():
    """docs/numerics-findings.json: every verdict is what today's rule decides on its values."""
    published = json.loads((Path(__file__).parents[3] / "docs/numerics-findings.json").read_text())
    assert [v["name"] for v in published] == list(findings.FINDINGS)
    for v in published:
        assert findings.FINDINGS[v["name"]].redecide(v) == v


# --------------------------------------------------------------------------------------------
# the large-mean rows, stable_rmsnorm and the small eps per precision

from normlab.lab.numerics import eps as eps_findings  # noqa: E402
from normlab.lab.numerics import naive, overflow, stability  # noqa: E402


def test_large_mean_rows_lie_off_the_dtypes_grid():
    """A data row's mean is almost never a number the dtype holds: the rows' means lie off the
    grid by a uniform fraction of a gap (a mean such as 1e3 in FP16 would not be rounded, and
    nothing would cancel)."""
    for dt in (torch.float16, torch.bfloat16):
        for m, k, (x, *_) in stability.large_mean_rows(0, dt):
            gap = measuring.spacing(m, dt)
            mean = x.double().mean(-1)
            assert ((mean - m).abs() < gap).all(), (dt, m, k)
            off = (mean - m) / gap
            assert off.std() > 0.1 and ((off > 0.25) & (off < 0.75)).any(), (dt, m, k)


def test_spacing_is_the_dtypes_gap():
    assert measuring.spacing(1000.0, torch.float16) == 0.5
    assert measuring.spacing(1e4, torch.float16) == 8.0
    assert measuring.spacing(1000.0, torch.bfloat16) == 4.0
    assert measuring.spacing(1.0, torch.float16) == 2.0**-10


def test_stable_rmsnorm_is_the_articles_code():
    """000 §7.1: statistics in FP32, the scale cast back, γ·x then ·r in the input's dtype;
    001: all in FP32, one cast. Both are RMSNorm (a float64 input agrees with the reference to
    FP32's precision: ``x.float()``), and only 000's can overflow in FP16 where γ·x passes
    65504."""
    x, w = torch.randn(4, 64, dtype=torch.float64), 1 + 0.1 * torch.randn(64, dtype=torch.float64)
    for fn in (naive.stable_rms_norm, naive.fp32_rms_norm):
        y = fn(x, w, None, 1e-6).double()
        torch.testing.assert_close(y, reference.rms_norm(x, w, 1e-6), rtol=1e-6, atol=1e-6)
    h, wh = (x / x.abs().amax() * 6e4).half(), torch.full((64,), 1.25).half()
    r = torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True) + 1e-6).half()
    assert torch.equal(naive.stable_rms_norm(h, wh, None, 1e-6), wh * h * r)
    assert not naive.stable_rms_norm(h, wh, None, 1e-6).isfinite().all()  # 1.25 · 6e4 > 65504
    y = naive.fp32_rms_norm(h, wh, None, 1e-6)
    assert y.dtype == torch.float16 and y.isfinite().all()


def test_stable_rmsnorm_finding_is_the_fix_and_parity_its_own():
    """000 §7.1 claims the fix (FP32 statistics against the naive code); parity with 001's
    all-FP32 version is a finding of its own, which the article never claims."""
    fix, parity = (
        dict(findings.FINDINGS["stable-rmsnorm"].parts),
        findings.FINDINGS["stable-rmsnorm-parity"],
    )
    assert {r.expect for r in fix.values()} == {">0"}
    assert not any("all-FP32" in label for label in fix)
    assert all("all-FP32" in label and r.expect == "≈0" for label, r in parity.parts)
    assert set(overflow.RMS_FNS) == {"naive", "stable", "all-FP32"}
    assert overflow.RMS_FNS["stable"] is naive.stable_rms_norm


def test_small_eps_gets_one_verdict_per_precision():
    """FP16 holding and BF16 not: each finding says its own, none merges them."""
    fp16, bf16 = eps_findings.WORSE["float16"], eps_findings.WORSE["bfloat16"]
    assert [f.name for f in eps_findings.FINDINGS] == [
        "small-eps-explodes",
        "small-eps-worse-in-fp16",
        "small-eps-worse-in-bf16",
    ]
    assert all("FP16" in label for label, _ in fp16.parts)
    assert all("BF16" in label for label, _ in bf16.parts)
    assert fp16.decide(synthetic(fp16, True))["verdict"] == Word.HOLDS
    assert bf16.decide({label: [0.0] * 8 for label, _ in bf16.parts})["verdict"] == (
        Word.DOES_NOT_HOLD
    )
    assert not any("BF16" in label for label, _ in eps_findings.EXPLODES.parts)


def test_decide_all_measures_a_group_once_and_keeps_the_order(monkeypatch):
    calls = []

    def fake(seeds):
        calls.append(seeds)
        return {
            f.name: ({label: [1.0, 1.1, 1.2] for label, _ in f.parts}, {"x": [1.0, 3.0]})
            for f in eps_findings.FINDINGS
        }

    groups = tuple((g, fake if "small-eps-explodes" in g else None) for g, _ in findings.GROUPS)
    monkeypatch.setattr(findings, "GROUPS", groups)
    names = ["small-eps-worse-in-bf16", "small-eps-explodes"]
    out = findings.decide_all(3, names=names)
    assert len(calls) == 1 and [v["name"] for v in out] == names[::-1]
    assert out[0]["means"] == {"mean x": 2.0}


def test_large_mean_rows_make_the_naive_layer_norm_cancel():
    """The mechanism the parts measure: at a spread of 2 FP16 gaps the naive LayerNorm's mean,
    rounded to FP16, is off by up to half a gap, a large share of x − mean; LayerNorm with FP32
    statistics is not. (On a mean FP16 holds exactly, nothing would cancel: hence the offset.)"""
    inputs = measuring.draw_shifted(0, torch.float16, 1e3, 2.0)
    naive_err = measuring.run(measuring.NAIVE["layer_norm"], "layer_norm", inputs, 1e-6)["y"]
    fp32_err = measuring.run(measuring.FP32_STATS["layer_norm"], "layer_norm", inputs, 1e-6)["y"]
    assert naive_err["max_rel"] > 0.01 > 10 * fp32_err["max_rel"]
