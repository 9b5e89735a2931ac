import base64
import dataclasses
import re

import pytest

from normlab.lab.study.claims import Claim, Contrast, GrowsTowardOutput
from normlab.lab.study.presets import PRESETS, Preset, Run
from normlab.lab.study.report import decide_all, format_table, write_reports

EVIL = "<script>alert('x')</script>&"


def fake_result(cfg, val: float, *, status="ok", layers=4) -> dict:
    steps = list(range(20))
    probe = {
        "grad_norm": {"mlp.w_out": [1.0 + 0.3 * i for i in range(layers)]},
        "grad_norm_block": [2.0 + i for i in range(layers)],
        "residual_rms": [1.0 + 0.1 * i for i in range(layers)],
        "residual_cos": [0.9] * (layers - 1),
        "attn_logit_max": [3.0] * layers,
    }
    return {
        "config": cfg.to_dict(), "status": status, "diverged_step": None, "reason": EVIL,
        "history": {"step": steps, "loss": [5.5 - 0.1 * s for s in steps],
                    "grad_norm": [1.0] * 20, "lr": [1e-3] * 20},
        "evals": [{"step": 20, "val_loss": val}],
        "probes": {"0": probe, "20": probe},
        "summary": {"final_val_loss": val, "tokens_per_s": 1000.0, "step_ms": 50.0,
                    "fwd_ms": 20.0, "norm_ms": 3.0, "n_params": 1234, "wall_s": 1.0},
    }  # fmt: skip


@pytest.fixture
def study():
    cfg = PRESETS["smoke"]().runs[0].config
    runs = (Run(EVIL, cfg), Run("b", cfg.replace(seed=1)))
    claims = (
        Claim("worse", f"{EVIL} is worse than b", "test",
              Contrast(((1, EVIL, "final_val_loss"), (-1, "b", "final_val_loss")), ">0", 0.01),
              ("loss", "speed")),
        Claim("grows", "gradients grow", "test", GrowsTowardOutput((EVIL, "b"), "mlp.w_out"),
              ("grad_blocks", "residual_rms", "residual_cos")),
    )  # fmt: skip
    preset = Preset("t", f"a test {EVIL}", runs, claims)
    results = {EVIL: fake_result(cfg, 3.0), "b": fake_result(cfg, 2.5, layers=6)}
    meta = {
        "wall_s": 12.0, "finished": "now", "failed_runs": [],
        "environment": {"cpu": EVIL, "threads": 2, "workers": 1, "torch": "t", "numba": "n"},
        "corpus": {"source": EVIL, "sha256": "ab" * 32},
    }  # fmt: skip
    return preset, results, meta


def test_verdicts_and_table(study):
    preset, results, _ = study
    verdicts = decide_all(preset, results, 3.1)
    assert [v.status for _, v in verdicts] == ["holds", "holds"]
    table = format_table(preset, verdicts)
    assert table.count("\n") == 3 and "**holds**" in table


def test_html_is_self_contained_escaped_and_ordered(tmp_path, study):
    preset, results, meta = study
    write_reports(tmp_path, preset, results, decide_all(preset, results, 3.1), meta)
    html = (tmp_path / "report.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html
    imgs = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html)
    assert len(imgs) == 5  # loss, speed, grad_blocks, residual_rms, residual_cos
    assert all(base64.b64decode(b)[:4] == b"\x89PNG" for b in imgs)
    assert "src='http" not in html and 'src="http' not in html  # nothing fetched from outside
    # The claim table comes first, then the per-claim sections, then configs and environment.
    order = [html.index(s) for s in ("<h2>Claims", "id='worse'", "<h2>Runs", "<h2>Environment")]
    assert order == sorted(order)
    assert "normlab numerics --out" in html  # the marked place for the numerics page
    md = (tmp_path / "report.md").read_text()
    assert "## Claims" in md and "](plots/worse-loss.png)" in md
    assert (tmp_path / "plots" / "grows-grad_blocks.png").read_bytes()[:4] == b"\x89PNG"


def no_plots(preset):
    """The same preset without plots: the tests below are about text, and plots take time."""
    claims = tuple(dataclasses.replace(c, plots=()) for c in preset.claims)
    return dataclasses.replace(preset, claims=claims)


def test_numerics_page_is_linked_when_present(tmp_path, study):
    preset, results, meta = study
    preset = no_plots(preset)
    (tmp_path / "numerics.html").write_text("<html></html>")
    write_reports(tmp_path, preset, results, decide_all(preset, results, 3.1), meta)
    assert "href='numerics.html'" in (tmp_path / "report.html").read_text()


def test_missing_and_diverged_runs_do_not_break_the_report(tmp_path, study):
    preset, results, meta = study
    preset = no_plots(preset)
    results = {"b": {**results["b"], "status": "diverged", "history": {"step": [], "loss": []},
                     "evals": [], "summary": {"final_val_loss": None}}}  # fmt: skip
    verdicts = decide_all(preset, results, 3.1)
    assert [v.status for _, v in verdicts] == ["inconclusive", "inconclusive"]
    write_reports(tmp_path, preset, results, verdicts, meta)
    assert "inconclusive" in (tmp_path / "report.html").read_text()
