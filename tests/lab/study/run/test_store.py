"""Run keys: a run is keyed by the fields its config sets away from their defaults (a field added
with a default keeps every key), and a results file written when every field was keyed is read
back under today's keys, so an old study still resumes and redecides (``tests/data/quick-s0``,
keyed so at commit 2db8868)."""

import gzip
import hashlib
import json

from conftest import QUICK_S0

from normlab.lab.study.run import store
from normlab.lab.study.run.store import ResultStore, run_key
from normlab.lab.train.config import TrainConfig
from normlab.models import TransformerConfig


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(model=TransformerConfig(256, 16, 2, 2), device="cpu", **kw)


def test_a_field_added_with_a_default_keeps_every_key(monkeypatch):
    cfg = _cfg(steps=20)
    k = run_key(cfg, "abc")
    older = cfg.to_dict()
    del older["freeze_norm_stats"], older["model"]["scale_embeddings"]  # written before them
    assert store._key(older, "abc") == k
    monkeypatch.setitem(store._DEFAULTS, "new_field", 3)
    assert store._key({**cfg.to_dict(), "new_field": 3}, "abc") == k
    assert store._key({**cfg.to_dict(), "new_field": 4}, "abc") != k


def _old_key(config: dict, corpus: str) -> str:
    """The key as every study before run keys took only the changed fields wrote it."""
    plain = {"device": "cpu", "precision": "fp32", "norm_weight_decay": None}
    plain |= {"eval_serving": False, "block_drop_batches": 0, "train_slice": 0}
    plain |= {"freeze_norm_stats": 0, "grad_accum": 1, "eval_lengths": []}
    d = {k: v for k, v in config.items() if k != "threads" and plain.get(k, ...) != v}
    blob = json.dumps({"config": d, "corpus": corpus}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def test_a_line_keyed_the_old_way_is_read_back_under_todays_key(tmp_path):
    cfg = _cfg(steps=20, threads=2)
    result = {"config": cfg.to_dict(), "status": "ok", "reason": "", "history": {}}
    result |= {"evals": [], "probes": {}, "summary": {}}
    old = _old_key(cfg.to_dict(), "abc")
    assert old != run_key(cfg, "abc")
    path = tmp_path / "results.jsonl"
    line = {"key": old, "name": "a", "seed_index": 0, "corpus_sha256": "abc"}
    ResultStore(path).append({**line, "result": result})
    assert list(ResultStore(path).load(results=True)) == [run_key(cfg, "abc")]


def test_the_stored_quick_study_resumes_under_todays_keys(tmp_path):
    path = tmp_path / "results.jsonl"
    path.write_bytes(gzip.open(QUICK_S0 / "results.jsonl.gz").read())
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    records = ResultStore(path).load(results=True)
    assert len(records) == len(lines) == 266
    for line in lines:
        cfg = TrainConfig.from_dict(line["result"]["config"])
        assert line["key"] == _old_key(line["result"]["config"], line["corpus_sha256"])
        assert records[run_key(cfg, line["corpus_sha256"])]["name"] == line["name"]
