"""``normlab vision``: its help, its listing, a refusal, and a tiny run end to end."""

import pytest

from normlab.lab.cli import main
from normlab.lab.verdict.finding import read_findings
from normlab.lab.vision.cnn_findings import Plan
from normlab.lab.vision.grid import FILES, VisionOptions, run_vision
from normlab.lab.vision.net import Recipe


def test_help_names_every_option(capsys):
    with pytest.raises(SystemExit) as e:
        main(["vision", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for option in ("--out", "--seed", "--list", "--seeds", "--epochs", "--jobs"):
        assert option in out


def test_list_shows_the_runs_and_the_rules_and_runs_nothing(capsys, tmp_path):
    assert main(["vision", "--list", "--seed", "12", "--out", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "seeds 120000" in out and "15 arms × 14 seeds = 210 runs" in out
    assert "batchnorm-fits-cnns:" in out and "batchnorm-needs-large-batches:" in out
    assert "LayerNorm B=4 lr ×3" in out
    assert not (tmp_path / "o").exists()


def test_one_seed_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["vision", "--seeds", "1"])
    assert e.value.code == 2
    assert "--seeds" in capsys.readouterr().err


def test_a_tiny_run_writes_its_findings_decided_with_their_design(tmp_path):
    # 1 epoch over 5 % of the digits, 2 seeds: 30 runs in a few seconds
    plan = Plan(Recipe(epochs=1, val_share=0.95), seeds=2)
    options = VisionOptions(out=tmp_path, seed_block=3, plan=plan, progress=False)
    decided, runs = run_vision(options)
    assert len(runs) == 30 and {s for _, s in runs} == {30000, 30001}
    assert all((tmp_path / f).is_file() for f in FILES)
    found = read_findings(tmp_path / FILES[0])
    assert [f["name"] for f in found] == ["batchnorm-fits-cnns", "batchnorm-needs-large-batches"]
    for f in decided:
        assert f["design"] == plan.design(
            next(g for g in plan.findings() if g.finding.name == f["name"])
        )
        assert f["seed_block"] == 3 and f["seeds"] == [30000, 30001] and f["began"]
        assert len(f["rate_checks"]) == 2 and all(len(p["values"]) == 2 for p in f["parts"])


def test_a_tampered_rate_check_is_refused_by_the_findings_reader(tmp_path):
    import json

    from normlab.lab.kit.reading import ReadError

    decided = [{"name": "f", "verdict": "holds", "parts": [], "rate_checks": [{"factor": "x"}]}]
    (tmp_path / "f.json").write_text(json.dumps(decided))
    with pytest.raises(ReadError, match="rate_checks"):
        read_findings(tmp_path / "f.json")
