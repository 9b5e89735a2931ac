"""normlab advise end to end at the smoke size on the shipped configs (Llama's at a budget given by
--seeds and --steps), each trained once for the module; and those directories rebuilt with
--redecide: the same advice byte for byte, the runs missing named, a stopped advise decided from
what it has, and the refusals."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest

from normlab.lab.advise.engine import shipped_config
from normlab.lab.cli import main
from normlab.lab.study.spec.parse import load_spec

SHIPPED = {"llama": "llama-3.2-1b.json", "qwen3": "qwen3-0.6b.json", "gemma3": "gemma-3-1b.json"}
# Each advise costs ~45 CPU s (most of it its 8 fresh timing processes): Llama's runs in the fast
# suite, Qwen3's and Gemma 3's (QK-norm, the offset) in the slow one.
NAMES = [n if n == "llama" else pytest.param(n, marks=pytest.mark.slow) for n in SHIPPED]
# Llama's runs at a budget between the presets: smoke's twin, fewer steps, the same seeds.
BUDGET = {"llama": ["--seeds", "2", "--steps", "8"]}
WRITTEN = ("advice.md", "report.md", "report.html", "claims.json")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``trained(name)``: the output directory of a smoke advise of that shipped config, trained
    the first time it is asked for, and what it printed."""
    done: dict[str, tuple[Path, str]] = {}

    def get(name: str) -> tuple[Path, str]:
        if name not in done:
            out = tmp_path_factory.mktemp(name) / "out"
            argv = ["advise", "--hf-config", shipped_config(SHIPPED[name]), "--preset", "smoke"]
            argv += ["--out", str(out), "--workers", "1", "--threads", "1", *BUDGET.get(name, [])]
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                assert main(argv) == 0
            done[name] = out, printed.getvalue()
        return done[name]

    return get


def _copy(src: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(src, out)
    for f in WRITTEN:
        (out / f).unlink()  # --redecide must write them again
    return out


@pytest.mark.parametrize("name", NAMES)
def test_advise_end_to_end_at_the_smoke_size(trained, name):
    out, printed = trained(name)
    # the bottom line on the first screen of the console, before the twin's fields
    assert any(x.startswith("Bottom line: ") for x in printed.splitlines()[:10]), printed
    assert "not reproduced by the twin" in printed and "grouped KV heads" in printed
    assert "eps" in printed and "rms_norm_eps" in printed  # every field with its source
    for f in (*WRITTEN, "advise-spec.toml", "twin.json", "results.jsonl", "study.json"):
        assert (out / f).is_file(), f
    with open(shipped_config(SHIPPED[name]), encoding="utf-8") as f:
        cfg = json.load(f)
    twin = json.loads((out / "twin.json").read_text())
    fields = twin["fields"]
    assert fields["eps"] == {"value": cfg["rms_norm_eps"], "from": "rms_norm_eps"}
    assert fields["qk_norm"]["value"] == (name != "llama")
    assert fields["norm_offset"]["value"] == (1.0 if name == "gemma3" else 0.0)
    assert fields["n_layers"]["value"] == 2
    assert str(cfg["num_hidden_layers"]) in fields["n_layers"]["from"]
    assert twin["params"]["model"] > 1e8 > twin["params"]["twin"]
    assert twin["spec_file"] == "advise-spec.toml"
    report = (out / "report.md").read_text()
    advice = (out / "advice.md").read_text()
    # The advice leads the report: right after the title and the run's summary line.
    assert report.index("## Advice for") < report.index("## Claims")
    summary_row = next(ln for ln in advice.splitlines() if ln.startswith("| Quality"))
    assert summary_row in report
    assert "Advice for" in (out / "report.html").read_text()
    claims = json.loads((out / "claims.json").read_text())["claims"]
    assert len(claims) == 2 * 5 + 2  # two per alternative, two timing
    assert all(c["verdict"] in ("holds", "does not hold", "inconclusive") for c in claims)
    assert "Not measured at smoke" in advice
    # The written spec reruns as a study: at the budget given, which the advice says.
    spec = load_spec(out / "advise-spec.toml")
    assert spec.name.startswith("advise-")
    steps = 8 if name in BUDGET else 12
    assert {a.config.steps for a in spec.arms} == {steps} and twin["scale"]["steps"] == steps
    assert f"2-block twin, {steps} steps, 2 seeds, not at the model's size" in advice
    assert "Missing from this study" not in advice


@pytest.mark.parametrize("name", NAMES)
def test_redecide_rebuilds_the_advice_byte_for_byte(trained, tmp_path, capsys, name):
    out, _ = trained(name)
    capsys.readouterr()  # what training the fixture printed, if this test trained it
    copy = _copy(out, tmp_path)
    assert main(["advise", "--redecide", str(copy)]) == 0
    assert (copy / "advice.md").read_bytes() == (out / "advice.md").read_bytes()
    claims = [json.loads((d / "claims.json").read_text())["claims"] for d in (out, copy)]
    assert claims[0] == claims[1]
    assert "Decided again from its results" in (copy / "report.md").read_text()
    printed = capsys.readouterr()
    assert "-> " in printed.out and printed.err == ""


def _drop(copy: Path, arms_seeds: set[tuple[str, int]]) -> None:
    """Remove those runs' lines from ``copy``'s results.jsonl."""
    path = copy / "results.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    kept = [ln for ln in lines if (lambda r: (r["name"], r["seed_index"]))(json.loads(ln))
            not in arms_seeds]  # fmt: skip
    assert len(kept) == len(lines) - len(arms_seeds)
    path.write_text("".join(kept))


def test_redecide_names_the_runs_missing(trained, tmp_path, capsys):
    out, _ = trained("llama")
    copy = _copy(out, tmp_path)
    _drop(copy, {("recipe", 1), ("post", 0)})
    assert main(["advise", "--redecide", str(copy), "--quiet"]) == 1  # as a study's redecide
    advice = (copy / "advice.md").read_text()
    assert "2 of the study's 36 runs are not in results.jsonl: recipe#1, post#0." in advice
    assert "with 2 of its runs missing, not at the model's size." in advice
    assert (
        "before its serial timing phase" not in advice
    )  # this one finished: its timings are in study.json
    assert "recipe#1" in capsys.readouterr().err


def test_redecide_of_an_advise_stopped_before_its_study_finished(trained, tmp_path, capsys):
    """No study.json (the runner writes it at the end): the spec advise-spec.toml, the seed
    block and device of the runs recorded, H from the corpus; nothing was timed."""
    out, _ = trained("llama")
    copy = _copy(out, tmp_path)
    (copy / "study.json").unlink()
    _drop(copy, {("layernorm", 0), ("layernorm", 1), ("deepnorm", 1)})
    assert main(["advise", "--redecide", str(copy), "--quiet"]) == 1
    advice = (copy / "advice.md").read_text()
    assert "3 of the study's 36 runs are not in results.jsonl: layernorm#0, layernorm#1, " in advice
    assert "stopped before its serial timing phase: speed is not measured" in advice
    claims = {c["name"]: c for c in json.loads((copy / "claims.json").read_text())["claims"]}
    assert claims["rmsnorm-faster"]["verdict"] == "inconclusive"
    # The runs that are there decide what they can, as the finished advise did.
    done = {c["name"]: c for c in json.loads((out / "claims.json").read_text())["claims"]}
    for k in ("recipe-as-good-as-post", "post-beats-recipe", "sandwich-beats-recipe"):
        assert claims[k]["verdict"] == done[k]["verdict"], k
    assert "finished never: stopped before its study finished" in (copy / "report.md").read_text()
    assert "layernorm#0" in capsys.readouterr().err


def _refused(argv: list[str], capsys) -> str:
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def test_redecide_refusals_are_one_line_and_write_nothing(trained, tmp_path, capsys):
    out, _ = trained("llama")
    err = _refused(["advise", "--redecide", str(tmp_path / "nope")], capsys)
    assert err == f"normlab advise: --redecide {tmp_path / 'nope'}: no such directory"
    (tmp_path / "empty").mkdir()
    err = _refused(["advise", "--redecide", str(tmp_path / "empty")], capsys)
    assert "twin.json: no such file" in err
    copy = _copy(out, tmp_path)
    (copy / "study.json").unlink()
    (copy / "advise-spec.toml").unlink()
    err = _refused(["advise", "--redecide", str(copy)], capsys)
    assert err.endswith("no study.json and no advise-spec.toml: not an advise's directory")
    (copy / "twin.json").write_text('{"fields": []}')
    assert "not a twin.json normlab advise wrote" in _refused(["advise", "--redecide", str(copy)],
                                                              capsys)  # fmt: skip
    err = _refused(["advise", "--redecide", str(out), "--preset", "quick", "--steps", "9"], capsys)
    assert err.endswith(
        "--redecide does not go with --preset, --steps: it reads the twin and its study from "
        "DIR, and writes there"
    )
    assert sorted(p.name for p in (tmp_path / "empty").iterdir()) == []
    assert not any((copy / f).exists() for f in WRITTEN)
    err = _refused(["advise", "--preset", "smoke"], capsys)
    assert "type normlab advise path/to/config.json" in err


def test_a_signal_stops_the_runs_trained_in_this_process(monkeypatch):
    """With --workers 1 the runs train in the driver, whose run wrapper turns a run's exception
    into a failed run: SIGTERM's Interrupted must pass it (it failed one run and went on)."""
    from types import SimpleNamespace

    from normlab.lab.study.run import executors
    from normlab.lab.study.run.runner import Interrupted
    from normlab.lab.train import trainer

    def stopped(*a, **k):
        raise Interrupted(143)

    monkeypatch.setattr(trainer, "train", stopped)
    done = []
    runs = [SimpleNamespace(config=None, arm=a, index=0) for a in ("a", "b")]
    job = executors.Job(None, "sha", 1)
    with pytest.raises(Interrupted):
        executors.LocalExecutor(1).run(
            runs, job, None, on_step=print, on_done=lambda *a: done.append(a)
        )
    assert done == []
