"""The numerics findings as registered designs: each finding's design as data, its seed block, and
the measures of 000 §7 checked against direct computations on one draw (the in-range parts of
``rmsnorm-more-stable`` on inputs inside each format's range, the FP16 overflow caveat, and
§7.1's fix). The draws here are block 0's, never a block kept for a confirmation."""

import json
import math
from pathlib import Path

import pytest
import torch

from normlab import reference
from normlab.lab.kit.doc import md_table
from normlab.lab.numerics import findings, measuring, naive, overflow, stability, tables
from normlab.lab.verdict import Word
from normlab.lab.verdict.finding import Finding, Part

LOW = {"FP16": torch.float16, "BF16": torch.bfloat16}


# --------------------------------------------------------------------------------------------
# the design as data, and the seed block


@pytest.mark.parametrize("name", list(findings.FINDINGS))
def test_design_is_canonical_json_of_everything_that_decides(name):
    f = findings.FINDINGS[name]
    d = f.design()
    assert json.loads(json.dumps(d, sort_keys=True)) == d  # JSON-ready, nothing lost
    assert list(d) == ["name", "statement", "source", "unit", "parts"]
    assert [p["label"] for p in d["parts"]] == [label for label, _ in f.parts]
    for p, (_, part) in zip(d["parts"], f.parts, strict=True):
        assert (p["measure"], p["expect"], p["delta"], p["trim"]) == (
            part.what,
            part.expect,
            part.delta,
            part.trim,
        )
        assert p["delta_why"], f"{name}/{p['label']}: no reason for its δ"
    assert f.design() == d  # the same design twice gives the same data


def test_a_changed_design_gives_other_data():
    base = Finding("f", "s", "src", (("a", Part("v", ">0", 0.3)),))
    canon = lambda f: json.dumps(f.design(), sort_keys=True)  # noqa: E731
    for other in (
        Finding("f", "s", "src", (("a", Part("v", ">0", 0.2)),)),  # δ
        Finding("f", "s", "src", (("a", Part("v", "≈0", 0.3)),)),  # expect
        Finding("f", "s", "src", (("a", Part("w", ">0", 0.3)),)),  # measure
        Finding("f", "s", "src", (("a", Part("v", ">0", 0.3, 0.2)),)),  # trim
        Finding("f", "s2", "src", (("a", Part("v", ">0", 0.3)),)),  # statement
    ):
        assert canon(other) != canon(base)


def test_seed_blocks_share_no_draw():
    assert measuring.seeds_of(9, 8) == range(90_000, 90_008)
    assert measuring.seeds_of(0, 8) == range(8)  # the draws every finding used until block 9
    top = set(measuring.seeds_of(0, measuring.SEED_STRIDE))
    assert not top & set(measuring.seeds_of(1, measuring.SEED_STRIDE))
    with pytest.raises(ValueError):
        measuring.seeds_of(-1, 8)


def test_a_published_finding_carries_its_design_and_block_through_redecide(monkeypatch):
    f = findings.FINDINGS["rmsnorm-on-sphere"]

    def fake(seeds):
        return {f.name: ({"on the sphere": [1e-5] * 3, "inside with eps": [5e-3] * 3}, {})}

    monkeypatch.setattr(findings, "GROUPS", (((f.name,), fake),))
    (v,) = findings.decide_all(3, names=[f.name], seed_block=4)
    assert v["seed_block"] == 4 and v["seeds"] == [40_000, 40_001, 40_002]
    assert v["design"] == f.design() and v["verdict"] == Word.HOLDS
    assert f.redecide(v) == v  # the registration is kept, not recomputed


# --------------------------------------------------------------------------------------------
# rmsnorm-more-stable: inputs inside each format's range


@pytest.mark.parametrize("short", list(LOW))
def test_large_mean_rows_lie_inside_the_formats_range(short):
    """Every |x| and x² representable with room (FP16: |x| < 128, so x² ≤ 16384, a quarter of
    65504), both ops' statistics normal numbers of the format, and the true y and dx inside its
    range: nothing of the naive code's overflow or underflow of its statistics is re-tested."""
    dt = LOW[short]
    fi = torch.finfo(dt)
    cells = stability.large_mean_rows(0, dt) + stability.large_mean_rows(5, dt)
    assert len(cells) == 2 * len(stability.MEANS[short]) * len(stability.SPREADS)
    for mean, k, inputs in cells:
        x = inputs[0].double()
        assert x.isfinite().all() and x.pow(2).max() <= fi.max / 4, (mean, k)
        if dt == torch.float16:
            assert x.abs().max() < 128
        ms = x.pow(2).mean(-1)
        var = x.var(-1, unbiased=False)
        assert (ms >= fi.tiny).all() and (ms <= fi.max).all()
        assert (var >= fi.tiny).all(), (mean, k, float(var.min()))
        for op in measuring.NAIVE:
            truth = naive.truth_of(op, *inputs, measuring.EPS)
            assert truth["y"].abs().max() <= fi.max and truth["dx"].abs().max() <= fi.max
        # close together far from 0: the spread is k gaps, the mean many spreads from 0
        gap = measuring.spacing(mean, dt)
        sd = x.std(-1, unbiased=False)
        assert ((sd > 0.5 * k * gap) & (sd < 2 * k * gap)).all() and (mean / sd > 15).all()


@pytest.mark.parametrize("short", list(LOW))
def test_near_constant_rows_are_the_articles_small_variance_case(short):
    dt = LOW[short]
    x, *_ = inputs = stability.near_constant_rows(0, dt)
    xd = x.double()
    assert (xd.mean(-1) - 1).abs().max() < 0.01
    assert xd.var(-1, unbiased=False).max() < 4e-6  # σ² + ε within a few eps: "very small"
    for op in measuring.NAIVE:
        assert naive.truth_of(op, *inputs, measuring.EPS)["dx"].abs().max() < torch.finfo(dt).max


def _closed_form_dx(op: str, x, w, dy, eps: float) -> torch.Tensor:
    """dx of LayerNorm (no bias term in dx) or RMSNorm in float64, from the formula:
    LN: (g − mean g − x̂·mean(g·x̂)) / √(σ² + ε); RMS: (g − x̂·mean(g·x̂)) / √(mean x² + ε),
    g = dy·w, x̂ the normalized row."""
    x, g = x.double(), dy.double() * w.double()
    if op == "layer_norm":
        c = x - x.mean(-1, keepdim=True)
        s = torch.sqrt(c.pow(2).mean(-1, keepdim=True) + eps)
        xh = c / s
        return (g - g.mean(-1, keepdim=True) - xh * (g * xh).mean(-1, keepdim=True)) / s
    s = torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    xh = x / s
    return (g - xh * (g * xh).mean(-1, keepdim=True)) / s


@pytest.fixture(scope="module")
def more_stable_one_draw():
    record: dict = {}
    return stability.measure_more_stable(range(1), record), record


@pytest.mark.parametrize("short", list(LOW))
def test_gradient_size_part_is_the_closed_form(short, more_stable_one_draw):
    """LayerNorm's true max|dx| on near-constant rows ~ max|g − …| / √(σ² + ε), RMSNorm's
    ~ / √(mean x² + ε): the part is the log10 ratio of the two closed forms."""
    values, record = more_stable_one_draw
    x, w, b, dy = stability.near_constant_rows(0, LOW[short])
    size = {op: float(_closed_form_dx(op, x, w, dy, 1e-6).abs().max()) for op in measuring.NAIVE}
    v = values[f"{short} gradient size, near-constant rows"][0]
    assert v == pytest.approx(math.log10(size["layer_norm"] / size["rms_norm"]), abs=1e-9)
    assert record[f"LayerNorm {short} true max|dx|, near-constant rows"][0] == pytest.approx(
        size["layer_norm"], rel=1e-9
    )
    # the scale LayerNorm's gradient takes: 1/√(σ² + ε), hundreds here; RMSNorm's ~1
    xd = x.double()
    scale = 1 / math.sqrt(float(xd.var(-1, unbiased=False).max()) + 1e-6)
    assert scale > 300 and 10**v > 100


@pytest.mark.parametrize("short", list(LOW))
@pytest.mark.parametrize("output", ["forward", "gradient"])
def test_error_parts_are_the_direct_errors(short, output, more_stable_one_draw):
    """The worst normwise error of the naive code over the grid, from its outputs and the
    float64 formula directly (inf/NaN counts as 1)."""
    values, _ = more_stable_one_draw
    worst = {}
    for op, fn in measuring.NAIVE.items():
        errs = []
        for _, _, (x, w, b, dy) in stability.large_mean_rows(0, LOW[short]):
            xi = x.clone().requires_grad_()
            y = fn(xi, w, b, 1e-6) if op == "layer_norm" else fn(xi, w, None, 1e-6)
            if output == "forward":
                got = y.detach().double()
                xd = x.double()
                c = xd - xd.mean(-1, keepdim=True) if op == "layer_norm" else xd
                s = c.pow(2).mean(-1, keepdim=True) + 1e-6
                want = c / s.sqrt() * w.double() + (b.double() if op == "layer_norm" else 0)
            else:
                (got,) = torch.autograd.grad(y, xi, dy)
                got, want = got.double(), _closed_form_dx(op, x, w, dy, 1e-6)
            if not got.isfinite().all():
                errs.append(1.0)
                continue
            row = ((got - want).abs().amax(-1) / want.abs().amax(-1)).max()
            errs.append(min(max(float(row), 1e-8), 1.0))
        worst[op] = max(errs)
    v = values[f"{short} {output} error, large-mean rows"][0]
    assert v == pytest.approx(math.log10(worst["layer_norm"] / worst["rms_norm"]), abs=1e-6)


def test_more_stable_has_each_format_and_each_measure():
    labels = [label for label, _ in stability.MORE_STABLE.parts]
    for short in LOW:
        for what in ("forward error, large-mean rows", "gradient error, large-mean rows"):
            assert f"{short} {what}" in labels
        assert f"{short} gradient size, near-constant rows" in labels
    assert max(stability.MEANS["FP16"]) <= 100  # |x| well under 256: no x² overflow
    assert not any("overflow" in label or "near-zero" in label for label in labels)


# --------------------------------------------------------------------------------------------
# the FP16 caveat and §7.1's fix


def test_naive_fp16_square_overflows_past_256():
    """Direct: the naive FP16 RMSNorm's x² passes 65504 at |x| = 256 (√65504 ≈ 255.9), where
    LayerNorm's variance, the square of the spread, is still far in range."""
    x, w, b, _ = measuring.draw(0, torch.float16, 250.0)
    assert naive.naive_rms_norm(x, w, None, 1e-6).isfinite().all()
    x, w, b, _ = measuring.draw(0, torch.float16, 300.0)
    assert torch.isinf(x.pow(2)).any()
    m = measuring.run(measuring.NAIVE["rms_norm"], "rms_norm", (x, w, b, _), 1e-6)["y"]
    assert m["zeroed"] > 0  # x · rsqrt(inf) = 0
    m = measuring.run(measuring.NAIVE["layer_norm"], "layer_norm", (x, w, b, _), 1e-6)["y"]
    assert m["max_rel"] < 0.01
    # near-zero rows: every x² rounds to 0 in FP16, so the naive statistic is 0 and eps alone
    x = measuring.draw(0, torch.float16, measuring.NEAR_ZERO)[0]
    assert (x.pow(2) == 0).all() and (x != 0).any()
    labels = [label for label, _ in overflow.SQUARES.parts]
    assert labels == ["FP16 overflow scale", "FP16 near-zero rows"]


def test_fp32_statistics_fix_layer_norms_fp16_overflow():
    """The naive FP16 LayerNorm fails at 6e4 (its variance overflows), FP32 statistics do not:
    the part's s_FP32-statistics is then the search's top, a lower bound of the ratio."""
    inputs = measuring.draw(0, torch.float16, 6e4)
    fns = overflow.LN_FNS
    bad = measuring.run(fns["naive"], "layer_norm", inputs, 1e-6, grad=True)
    good = measuring.run(fns["FP32 statistics"], "layer_norm", inputs, 1e-6, grad=True)
    assert measuring.failure(bad["y"]) is not None
    assert measuring.failure(good["y"]) is None and measuring.failure(good["dx"]) is None
    torch.testing.assert_close(
        fns["FP32 statistics"](*inputs[:3], 1e-6),
        reference.layer_norm(*inputs[:3], 1e-6),
    )
    rules = dict(overflow.STABLE.parts)
    assert {r.expect for r in rules.values()} == {">0"}
    assert all(r.expect == "≈0" for _, r in overflow.PARITY.parts)


# --------------------------------------------------------------------------------------------
# the published page


def test_numerics_md_table_is_the_published_findings():
    """docs/numerics.md's findings table is the one the command writes from the published JSON,
    so no verdict on the page is written by hand; the JSON names block 9 and today's designs."""
    docs = Path(__file__).parents[3] / "docs"
    published = json.loads((docs / "numerics-findings.json").read_text())
    page = (docs / "numerics.md").read_text()
    begin = page.index("<!-- from-data findings-table numerics -->")  # filled by study --coverage
    table = page[page.index("\n", begin) + 1 : page.index("<!-- /from-data -->", begin)]
    assert (
        table.strip()
        == md_table(tables.FINDINGS_HEADER, tables.table_rows(published, findings.FINDINGS)).strip()
    )
    for v in published:  # block 10: the fresh block after block 9 (docs/numerics.md)
        assert v["seed_block"] == 10 and v["seeds"] == list(measuring.seeds_of(10, 8))
        assert v["design"] == findings.FINDINGS[v["name"]].design(), v["name"]
