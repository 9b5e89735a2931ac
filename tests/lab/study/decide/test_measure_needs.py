"""What a measure needs of its run: every measure gets a value from a run configured as its needs
say, and none where a need is unmet (the spec loader refuses such a design: test_spec)."""

import math

import pytest

from normlab.lab.study.decide import MEASURES
from normlab.lab.train.data import load_corpus
from normlab.lab.train.result import RunResult
from normlab.lab.train.trainer import TrainConfig, train
from normlab.models import TransformerConfig

STEPS = 150


def _config(**kw) -> TrainConfig:
    model = TransformerConfig(256, 32, 2, 2, max_seq_len=32, norm="layernorm")
    base = dict(steps=STEPS, batch_size=4, seq_len=32, eval_batches=2, lr=1e-2, threads=1)
    return TrainConfig(model=model, **{**base, **kw})


# Every setting a measure can need; the tiny slice is fitted below MATCHED_TRAIN_LOSS in STEPS.
FULL = dict(eval_train_mode=True, eval_serving=True, eval_sequences=16, eval_lengths=(8,),
            train_slice=512, eval_interval=25, block_drop_batches=1,
            probe_steps=(0, 1, 2, STEPS))  # fmt: skip
BARE = dict(probe_steps=(0,))  # what a plain arm has


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[TrainConfig, RunResult]]:
    """Each run as the driver reads it back: through the file's JSON (``to_dict``/``from_dict``)."""
    corpus = load_corpus()
    return {k: (cfg, RunResult.from_dict(train(cfg, corpus).to_dict(), k)) for k, cfg in
            (("full", _config(**FULL)), ("bare", _config(**BARE)))}  # fmt: skip


def _value(name: str, result: dict) -> float | None:
    v = MEASURES[name].read(result, None)
    return v if v is not None and math.isfinite(v) else None


def test_every_measure_gets_a_value_from_a_run_that_meets_its_needs(runs):
    cfg, result = runs["full"]
    assert result.status == "ok"
    unmet = [(k, n.what) for k, m in MEASURES.items() for n in m.needs if not n.ok(cfg)]
    assert not unmet  # the run meets every need
    missing = [k for k in MEASURES if _value(k, result) is None]
    assert not missing, f"no value from a run that meets their needs: {missing}"


def test_a_measure_gets_no_value_where_a_need_is_unmet_and_one_where_all_are_met(runs):
    cfg, result = runs["bare"]
    met = {k for k, m in MEASURES.items() if all(n.ok(cfg) for n in m.needs)}
    assert met and met != set(MEASURES)  # the bare run splits them
    assert {k for k in MEASURES if _value(k, result) is not None} == met
