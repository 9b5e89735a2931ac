import base64
import dataclasses
import json
import re

import pytest

from normlab.lab.study.decide import Claim, decide_all
from normlab.lab.study.decide.rules_contrast import Contrast
from normlab.lab.study.decide.rules_timing import Timing
from normlab.lab.study.report.writer import format_table, write_reports
from normlab.lab.study.run.runner import StudyResult
from normlab.lab.study.run.study_json import StudyMeta
from normlab.lab.study.spec.design import Arm, Study
from normlab.lab.study.spec.parse import load_builtin
from normlab.lab.train.result import RunResult

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
    return RunResult(
        config=cfg.to_dict(), status=status, diverged_step=None, reason=EVIL,
        history={"step": steps, "loss": [5.5 - 0.1 * s for s in steps],
                 "grad_norm": [1.0] * 20, "lr": [1e-3] * 20},
        evals=[{"step": 20, "val_loss": val}],
        probes={"0": probe, "20": probe},
        summary={"final_val_loss": val, "tokens_per_s": 1000.0, "step_ms": 50.0,
                 "fwd_ms": 20.0, "norm_ms": 3.0, "n_params": 1234, "wall_s": 1.0},
    )  # fmt: skip


@pytest.fixture
def study():
    cfg = load_builtin("smoke").arms[0].config
    runs = (Arm(EVIL, cfg), Arm("b", cfg.replace(seed=1)))
    claims = (
        Claim("worse", f"{EVIL} is worse than b", "test",
              Contrast(((1, EVIL, "final_val_loss"), (-1, "b", "final_val_loss")), ">0", 0.01,
                       2), ("loss", "seeds")),
        Claim("grows", "gradients grow", "test",
              Contrast(((1, "b", "log_grad_ratio"),), ">0", 0.1, 2, matrix="mlp.w_out"),
              ("grad_blocks", "residual_rms", "residual_cos")),
        Claim("faster", "b is faster", "test", Timing("b", EVIL, 0.05), ("speed",)),
    )  # fmt: skip
    preset = Study("t", f"a test {EVIL}", runs, claims)
    results = {
        EVIL: {0: fake_result(cfg, 3.0), 1: fake_result(cfg, 3.1)},
        "b": {0: fake_result(cfg, 2.5, layers=6), 1: fake_result(cfg, 2.55, layers=6)},
    }
    timings = {
        a: {
            "step_ms": [5.0, 5.1, 5.2],
            "norm_ms": [x, x, x + 0.01],
            "torch_norm_ms": [1.0, 1.1, 1.0],
        }
        for a, x in ((EVIL, 1.0), ("b", 0.5))
    }
    meta = StudyMeta(
        wall_s=12.0, finished="now", failed_runs=[], timings=timings,
        environment={"cpu": EVIL, "threads": 2, "workers": 1, "torch": "t", "numba": "n"},
        corpus={"source": EVIL, "sha256": "ab" * 32},
    )  # fmt: skip
    return preset, results, meta


def verdicts_of(preset, results, meta):
    return decide_all(preset, results, 3.1, meta.timings)


def test_verdicts_and_table(study):
    preset, results, meta = study
    verdicts = verdicts_of(preset, results, meta)
    assert [v.status for _, v in verdicts] == ["holds", "holds", "holds"]
    table = format_table(verdicts)
    assert table.count("\n") == 4 and "**holds**" in table and "n=2" in table
    assert "3 timing units" in table  # the timing claim: decided over rounds, not seeds


def test_html_is_self_contained_escaped_and_ordered(tmp_path, study):
    preset, results, meta = study
    write_reports(StudyResult(preset, results, verdicts_of(preset, results, meta), meta), tmp_path)
    html = (tmp_path / "report.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html
    imgs = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html)
    assert len(imgs) == 6  # loss, seeds, grad_blocks, residual_rms, residual_cos, speed
    assert all(base64.b64decode(b)[:4] == b"\x89PNG" for b in imgs)
    assert "src='http" not in html and 'src="http' not in html  # nothing fetched from outside
    # The summary comes first, then what every rule shares, the per-claim sections (each with
    # its plots before its tables), then the arms, configs and environment, folded.
    marks = ('id="summary"', 'id="how-verdicts-are-decided"', '<section id="worse"',
             "data:image/png", 'id="arms"', "<summary>Environment")  # fmt: skip
    order = [html.index(s) for s in marks]
    assert order == sorted(order)
    worse = html[html.index('<section id="worse"') : html.index("</section>")]
    assert worse.index("<img") < worse.index("<table") and "<details>" in worse
    assert "normlab numerics --out" in html  # the marked place for the numerics page
    md = (tmp_path / "report.md").read_text()
    assert "## Summary" in md and "](plots/worse-loss.png)" in md
    assert (tmp_path / "plots" / "grows-grad_blocks.png").read_bytes()[:4] == b"\x89PNG"
    claims = json.loads((tmp_path / "claims.json").read_text())["claims"]
    assert [c["verdict"] for c in claims] == ["holds"] * 3
    worse = claims[0]
    assert worse["n"] == 2 and worse["lo"] < worse["effect"] < worse["hi"]
    assert worse["values"] == pytest.approx([0.5, 0.55]) and worse["mde"] > 0


def no_plots(preset):
    """The same preset without plots: the tests below are about text, and plots take time."""
    claims = tuple(dataclasses.replace(c, plots=()) for c in preset.claims)
    return dataclasses.replace(preset, claims=claims)


def test_numerics_page_is_linked_when_present(tmp_path, study):
    preset, results, meta = study
    preset = no_plots(preset)
    (tmp_path / "numerics.html").write_text("<html></html>")
    write_reports(StudyResult(preset, results, verdicts_of(preset, results, meta), meta), tmp_path)
    assert 'href="numerics.html"' in (tmp_path / "report.html").read_text()


def test_missing_and_diverged_runs_do_not_break_the_report(tmp_path, study):
    preset, results, meta = study
    preset = no_plots(preset)
    diverged = dataclasses.replace(
        results["b"][0], status="diverged", history={"step": [], "loss": []}, evals=[],
        summary={"final_val_loss": None})  # fmt: skip
    results = {"b": {0: diverged}}
    verdicts = decide_all(preset, results, 3.1, {})
    assert [v.status for _, v in verdicts] == ["inconclusive"] * 3
    write_reports(StudyResult(preset, results, verdicts, meta), tmp_path)
    assert "inconclusive" in (tmp_path / "report.html").read_text()


def test_claims_json_carries_scope_outcomes_correction_controls_and_the_family(tmp_path, study):
    from normlab.lab.study.decide.rules_contrast import Fails
    from normlab.lab.study.spec.claim_loader import control
    from normlab.lab.verdict import Word

    preset, results, meta = study
    preset = no_plots(preset)
    cfg = preset.arms[1].config
    untestable = Claim("b-fails", "b fails", "test", Fails("b", seeds=2),
                       controls=(control(EVIL, seeds=2),), plots=())  # fmt: skip
    preset = dataclasses.replace(preset, claims=(*preset.claims, untestable))
    verdicts = verdicts_of(preset, results, meta)
    assert (
        verdicts[-1][1].status == Word.NOT_TESTABLE
    )  # EVIL at 3.0-3.1 does not train below 3.1 - 0.3
    write_reports(
        StudyResult(preset, results, verdicts, dataclasses.replace(meta, plateau_h=3.1)), tmp_path
    )
    doc = json.loads((tmp_path / "claims.json").read_text())
    assert doc["plateau_h"] == 3.1 and doc["family"]["claims"] == 4
    assert doc["family"]["expected_false_decisions_at_most"] == pytest.approx(0.2)
    worse, _, faster, fails_ = doc["claims"]
    assert worse["seed_outcomes"]["n"] == 2 and worse["seed_outcomes"]["diverged"] == 0
    assert faster["seed_outcomes"] is None  # timing rounds, not seeds
    m = cfg.model
    want = cfg.steps * cfg.batch_size * cfg.seq_len
    assert worse["scope"][0] == {"d": m.dim, "blocks": m.n_layers, "T": cfg.seq_len,
                                 "B": cfg.batch_size, "steps": cfg.steps, "tokens": want,
                                 "init": m.init, "arms": [EVIL, "b"]}  # fmt: skip
    assert fails_["verdict"] == "not testable here" and fails_["controls"][0]["verdict"] != "holds"
    assert "correction" in worse and "not testable here" in fails_["rule"]
    md = (tmp_path / "report.md").read_text()
    assert "4 claims: 3 hold, 0 do not hold, 0 inconclusive, 1 not testable here" in md
    assert "no correction" in md and "H = 3.100" in md
    assert "0 of 2 seeds diverged, 0 stalled" in md and "tokens) init=" in md
    # The summary says in words which control did not hold; the claim's section shows it.
    row = next(line for line in md.splitlines() if "[b-fails](#b-fails)" in line)
    assert row.startswith("| b fails [b-fails]")  # the statement in words leads the row
    label, got = fails_["controls"][0]["control"], fails_["controls"][0]["verdict"]
    assert f"The control '{label}' did not hold" in row and "would decide it" in row
    assert f"| {label} | **{got}** |" in md


def _pieces(md: str) -> list[str]:
    """The paragraphs, list items and table cells of a Markdown report (code blocks aside)."""
    out, code = [], False
    for line in md.splitlines():
        if line.startswith("```"):
            code = not code
        elif not code and line.startswith("|"):
            out += [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        elif not code:
            out.append(line.removeprefix("- "))
    return out


def test_quick_report_md_says_the_shared_rules_once_and_stays_short(quick_report):
    from normlab.lab.study.decide.measures import H_TEXT
    from normlab.lab.study.decide.rules_compound import AllOf
    from normlab.lab.verdict import BOUND_TEXT

    md = (quick_report / "report.md").read_text()
    doc = json.loads((quick_report / "claims.json").read_text())
    for shared in (BOUND_TEXT, H_TEXT, "with m parts not yet confirmed", doc["family"]["text"]):
        assert md.count(shared) == 1, shared
    assert AllOf.RULE not in md and not [c for c in doc["claims"] if c["rule"] in md]
    assert md.count("](#how-verdicts-are-decided)") == 12  # every claim links to it
    longest = max(_pieces(md), key=len)
    assert len(longest) <= 700, longest
    summary = md[md.index("## Summary") : md.index("\n## ", md.index("## Summary") + 1)]
    assert len(summary) < 5000  # each row leads with its statement in words
    rows = [ln for ln in summary.splitlines() if ln.startswith("| ") and "](#" in ln]
    statements = [c["statement"] for c in doc["claims"]]
    assert [r.split(" [", 1)[0].removeprefix("| ") for r in rows] == statements
    verdicts = [c["verdict"] for c in doc["claims"]]
    assert [re.search(r"\| \*\*([^*]+)\*\* \|", r).group(1) for r in rows] == verdicts
    # Inconclusive rows say why in words, and what would decide it.
    for row, v in zip(rows, verdicts, strict=True):
        if v == "inconclusive":
            assert re.search(r"would (decide|narrow)|spans δ|Holm", row), row


def test_the_report_opens_with_every_verdict_and_its_statement_one_line_each(quick_report):
    # the first screen at 1280 x 900 holds every claim's verdict with its statement: one short
    # line each, what was seen below (a long "seen" sentence made rows three lines tall)
    from normlab.lab.study.report.claim_text import SHORT_STATEMENT, short_statement

    md = (quick_report / "report.md").read_text()
    doc = json.loads((quick_report / "claims.json").read_text())
    top = md[md.index("## Verdicts") : md.index("## Summary")]
    rows = [ln for ln in top.splitlines() if ln.startswith("| **")]
    assert [re.search(r"^\| \*\*([^*]+)\*\* \|", r).group(1) for r in rows] == [
        c["verdict"] for c in doc["claims"]
    ]
    for row, claim in zip(rows, doc["claims"], strict=True):
        text = re.search(r"\| \[(.+)\]\(#" + re.escape(claim["name"]) + r"\) \|$", row).group(1)
        assert len(text) <= SHORT_STATEMENT and claim["statement"].startswith(text.rstrip("…"))
    html = (quick_report / "report.html").read_text()
    assert html.index('class="summary verdicts"') < html.index('id="summary"')
    one = short_statement("One (A et al. 2020) says so. Then more.")
    assert one == "One (A et al. 2020) says so"
    cut = short_statement("word " * 40)
    assert cut.endswith("…") and len(cut) <= SHORT_STATEMENT and not cut.endswith(" …")
