"""A published claims.json decided again from its stored per-seed values (``study.replay``): the
published files are what today's rule decides, and the replay is the claim machinery itself."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from claims_golden import QUICK, quick_results

from normlab.lab.study.decide import decide_all
from normlab.lab.study.published.replay import published_design, replay
from normlab.lab.study.report.claims_json import claims_json
from normlab.lab.study.run.study_json import StudyMeta

DATA = Path(__file__).resolve().parents[4] / "docs" / "data"


def _replayed(study, doc: dict) -> dict:
    meta = StudyMeta(seed_block=doc["seed_block"], plateau_h=doc["plateau_h"])
    return json.loads(json.dumps(claims_json(study, replay(study, doc), meta), ensure_ascii=False))


# every published study: a preset's (docs/data/quick), and one no preset ran a level deeper
# (docs/data/advise/llama-3.2-1b: an advise's study, with the spec it ran as spec.toml)
PUBLISHED = sorted(str(p.parent.relative_to(DATA)) for p in DATA.glob("**/claims.json"))


@pytest.mark.parametrize("preset", PUBLISHED)
def test_every_published_study_is_what_todays_rule_decides_on_its_values(preset):
    doc = json.loads((DATA / preset / "claims.json").read_text("utf-8"))
    assert _replayed(published_design(DATA.parent, preset), doc) == doc, (
        f"docs/data/{preset}/claims.json is not what today's rule decides: replay it"
    )


def test_the_replay_of_a_stored_study_equals_deciding_its_runs():
    study, results, meta = quick_results()
    decided = json.loads(
        json.dumps(
            claims_json(study, decide_all(study, results, meta.plateau_h, meta.timings), meta)
        )
    )
    replayed = _replayed(study, decided)
    for a, b in zip(decided["claims"], replayed["claims"], strict=True):
        assert (a["name"], a["verdict"], a.get("lo"), a.get("hi")) == (
            b["name"],
            b["verdict"],
            b.get("lo"),
            b.get("hi"),
        )
        assert [p["verdict"] for p in a["parts"]] == [p["verdict"] for p in b["parts"]]


def test_a_stricter_delta_changes_the_replayed_verdict():
    study, results, meta = quick_results()
    doc = json.loads((QUICK / "claims.json").read_text("utf-8"))
    name = "batchnorm-train-eval-gap"  # one recipe against a bar: no rival, no rate check
    (claim,) = [c for c in study.claims if c.name == name]
    huge = dataclasses.replace(claim, rule=dataclasses.replace(claim.rule, delta=10.0))
    strict = dataclasses.replace(study, claims=(huge,))
    (entry,) = [c for c in doc["claims"] if c["name"] == name]
    assert entry["verdict"] == "inconclusive"
    ((_, v),) = replay(strict, doc)
    # no interval of these seeds reaches a gap of 10 nats/byte
    assert v.status == "does not hold"


def test_the_published_quick_study_is_rebuilt_from_its_stored_runs(tmp_path):
    """docs/data/quick keeps its runs and design: --redecide on them writes the published
    claims.json byte for byte (no training)."""
    import gzip
    import shutil

    from normlab.lab.cli import main

    src = DATA / "quick"
    out = tmp_path / "quick"
    out.mkdir()
    shutil.copy(src / "study.json", out / "study.json")
    with gzip.open(src / "results.jsonl.gz", "rb") as f:
        (out / "results.jsonl").write_bytes(f.read())
    assert main(["study", "--redecide", str(out), "--quiet"]) == 0
    assert (out / "claims.json").read_text() == (src / "claims.json").read_text()
