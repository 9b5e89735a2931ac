"""``normlab inspect`` on tiny random-weight models built from configs: the hooks find every
norm, the replay's errors are the direct computation's, the findings follow from their values,
and the report says what it measured."""

import json
import math
from pathlib import Path

import pytest
import torch
from tiny_models import tiny_dirs

from normlab.lab.cli import main
from normlab.lab.inspect import formats_replay, load, record, scale_findings, text
from normlab.lab.numerics.measuring import wrong_fraction

NORM_CLASSES = {"LayerNorm", "LlamaRMSNorm", "GemmaRMSNorm"}


def _loaded(path):
    return load.load(path, path.name)


def _sample(m, chunks=4, chunk=16):
    vocab = m.model.config.vocab_size
    return text.sample(text.Encoder(m.tokenizer, vocab), chunks, chunk)


@pytest.mark.parametrize("kind", ["llama", "gemma", "bert"])
def test_the_hooks_find_every_norm(kind):
    m = _loaded(tiny_dirs()[kind])
    norms = [n for n, mod in m.model.named_modules() if type(mod).__name__ in NORM_CLASSES]
    assert [s.name for s, _ in m.sites] == norms
    assert len(norms) == 2 * 2 + 1  # two per block and one more (final norm, or embeddings')
    sample = _sample(m)
    out, inputs = record.record(m.model, m.sites, sample.ids, m.kind, m.pooling)
    assert set(inputs) == set(norms)
    for x in inputs.values():
        assert x.shape == (4, 16, 32) and x.dtype == torch.float32
    assert m.kind == ("embedding" if kind == "bert" else "lm")
    assert (out.top1 is None) == (kind == "bert")
    if kind == "gemma":
        assert {s.offset for s, _ in m.sites} == {1.0} and {s.casting for s, _ in m.sites} == {
            "gemma"
        }


@pytest.mark.parametrize("kind", ["llama", "gemma", "bert"])
def test_the_replays_fp32_error_is_the_layer_run_on_its_own_input(kind):
    """The replay's FP32-statistics error at each layer is the direct computation's: normlab's
    reference (LayerNorm: torch's own kernel sums in another order) or the HF layer itself
    (Llama's and Gemma's RMSNorm, 1 + w: the same cast order) run on the recorded input in FP32,
    against a float64 computation written out here (to its rounding: the truths' last bits
    differ by the order of their float64 operations)."""
    from normlab import reference

    m = _loaded(tiny_dirs()[kind])
    _, inputs = record.record(m.model, m.sites, _sample(m).ids, m.kind, m.pooling)
    rep = formats_replay.Replay()
    for site, module in m.sites:
        x = inputs[site.name]
        formats_replay.replay_layer(rep, site, module, x)
        with torch.no_grad():
            if site.kind == "layernorm":
                y = reference.layer_norm(x, module.weight, module.bias, site.eps)
            else:
                y = module(x)
        y = y.reshape(-1, x.shape[-1])
        x64, w = x.reshape(-1, x.shape[-1]).double(), site.offset + module.weight.double()
        if site.kind == "layernorm":
            xc = x64 - x64.mean(-1, keepdim=True)
            t = xc / torch.sqrt(xc.pow(2).mean(-1, keepdim=True) + site.eps) * w
            t = t + module.bias.double()
        else:
            t = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + site.eps) * w
        direct = ((y.double() - t).abs().amax(-1) / t.abs().amax(-1)).max().item()
        row = next(
            r
            for r in rep.layers
            if r.layer == site.name and r.own and r.format == "FP32" and r.impl == "FP32 statistics"
        )
        assert row.failures == 0 and math.isclose(row.worst, direct, rel_tol=1e-6), site.name


def test_the_true_gradient_is_autograds():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(6, 20, generator=g, dtype=torch.float64) * 3 + 1
    dy = torch.randn(6, 20, generator=g, dtype=torch.float64)
    w = 1 + 0.2 * torch.randn(20, generator=g, dtype=torch.float64)
    b = 0.1 * torch.randn(20, generator=g, dtype=torch.float64)
    for op in (
        formats_replay.Op("LayerNorm", w, b, 1e-5),
        formats_replay.Op("RMSNorm", w, None, 1e-5, 0.5),
    ):
        xi = x.clone().requires_grad_()
        y = formats_replay.run_op(op, "truth", xi)
        (dx,) = torch.autograd.grad(y, xi, dy)
        assert torch.allclose(formats_replay.true_dx(op, x, dy, 1e-5), dx, rtol=1e-10, atol=1e-12)


def test_wrong_entries_count_as_numerics_does():
    g = torch.Generator().manual_seed(2)
    t = torch.randn(5, 16, generator=g, dtype=torch.float64)
    a = (t + 0.08 * torch.randn(5, 16, generator=g, dtype=torch.float64)).half()
    a[1, 3], a[2, 4] = float("inf"), float("nan")
    counts = formats_replay.wrong_entries(a, t)
    # the definition written out: inf/NaN, or off by >= 10 % of the row's max |truth|
    bad = ~torch.isfinite(a.double()) | ((a - t).abs() >= 0.1 * t.abs().amax(-1, keepdim=True))
    assert counts.tolist() == bad.sum(-1).double().tolist()
    assert counts[1] >= 1 and counts[2] >= 1
    for i in range(5):
        assert counts[i] == wrong_fraction(a[i : i + 1], t[i : i + 1]) * 16


def test_row_errors_flag_every_visible_failure():
    t = torch.ones(4, 8, dtype=torch.float64)
    y = t.clone().half()
    y[1, 0] = float("inf")  # inf/NaN
    y[2, 5] = 0  # flushed to 0
    y[3] = 1.2  # off by 20 %
    err, fails = formats_replay.row_errors(y, t)
    assert fails.tolist() == [False, True, True, True]
    assert err[0] == 0 and math.isclose(err[3], 0.2, rel_tol=1e-3)


def _run(kind, tmp_path, *extra):
    out = tmp_path / kind
    argv = ["inspect", str(tiny_dirs()[kind]), "--out", str(out), "--tokens", "96", "--chunk", "24"]
    assert main([*argv, "--quiet", *extra]) == 0
    return out


@pytest.mark.parametrize("kind", ["bert", "llama"])
def test_inspect_writes_the_report_and_decides_every_finding(kind, tmp_path):
    out = _run(kind, tmp_path)
    result = json.loads((out / "inspect.json").read_text())
    published = json.loads((out / "inspect-findings.json").read_text())
    assert [f["name"] for f in published] == [
        f.name for f in scale_findings.all_findings(result["model"]["kind"])
    ]
    for f in published:
        assert scale_findings.redecide(f) == f  # each verdict follows from its values
        measured = [p for p in f["parts"] if p.get("values")]
        assert all(p["n"] == 4 for p in measured)
    eval_ = published[-1]
    if kind == "llama":  # no dropout: forgetting eval() is not testable here
        assert eval_["verdict"] == "not testable here"
        assert "no active dropout" in eval_["parts"][0]["why"]
    else:
        assert all(p.get("values") for p in eval_["parts"])
    md = (out / "report.md").read_text()
    assert "## What its norms say" in md and "FP16" in md and "BF16" in md
    assert "plots/range-vs-fp16.png" in md and (out / "plots" / "range-vs-fp16.png").is_file()
    assert len(result["layers"]) == 5 and result["sample"]["tokenizer"].startswith(
        "the text's UTF-8"
    )


def test_the_progress_bar_ends_full(tmp_path, monkeypatch):
    """The bar's total is the steps it ticks: no run ends with the bar short of its end."""
    import tqdm.auto

    bars = []

    class Bar(tqdm.auto.tqdm):  # counts the ticks, shown or not
        def __init__(self, *args, desc=None, **kw):
            super().__init__(*args, desc=desc, **kw)
            self.label, self.ticks = desc, 0
            bars.append(self)

        def update(self, n=1):
            self.ticks += n
            return super().update(n)

    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    _run("llama", tmp_path)
    [bar] = [b for b in bars if b.label == "inspect"]
    assert bar.ticks == bar.total == 5 + 3  # five norms; the eval pass, the other two, the decision


def test_the_findings_part_labels_are_numerics_own():
    """A statement that names parts of a finding names the same parts in numerics' and here."""
    from normlab.lab.numerics.findings import FINDINGS

    same = [
        "fp32-statistics-needed",
        "small-eps-explodes",
        *(f.name for f in scale_findings.WORSE.values()),
    ]
    for f in (f for f in scale_findings.all_findings("embedding") if f.name in same):
        assert [p for p, _ in f.parts] == [p for p, _ in FINDINGS[f.name].parts]


# --------------------------------------------------------------------------------------------
# the published MiniLM run (docs/inspect-minilm/)

PUBLISHED = Path(__file__).resolve().parents[3] / "docs" / "inspect-minilm"


def test_the_published_findings_follow_from_their_values():
    """docs/inspect-findings.json (the MiniLM run's): every verdict is what today's rule decides
    on its values, the findings are the ones inspect decides, and the run's inspect.json holds
    the same."""
    published = json.loads((PUBLISHED.parent / "inspect-findings.json").read_text())
    kind = published[0]["record"]["kind"]
    assert [f["name"] for f in published] == [f.name for f in scale_findings.all_findings(kind)]
    for f in published:
        assert scale_findings.redecide(f) == f
    assert json.loads((PUBLISHED / "inspect.json").read_text())["findings"] == published


def test_the_published_report_is_what_the_writer_makes_of_its_data():
    """docs/inspect-minilm/report.md is today's report of docs/inspect-minilm/inspect.json: no
    number or verdict on it is typed by hand."""
    from normlab.lab.inspect.inspect_plots import PLOTS
    from normlab.lab.inspect.inspect_report import document
    from normlab.lab.inspect.run import read_result
    from normlab.lab.kit import doc as d

    result = read_result(PUBLISHED / "inspect.json")
    md = d.to_markdown(document(result, {name: b"" for name in PLOTS}))
    assert md == (PUBLISHED / "report.md").read_text()
    for name in PLOTS:
        assert (PUBLISHED / "plots" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
