"""``RunResult`` across a process or a file: ``to_dict`` and back with ``from_dict``, checked."""

import json
import re

import pytest

from normlab.lab.train.result import RunResult


def _result() -> RunResult:
    return RunResult(
        {"model": {"vocab_size": 256}, "lr": 1e-3},
        "diverged",
        diverged_step=7,
        reason="loss is NaN",
        history={"loss": [5.5, float("nan")]},
        evals=[{"step": 5, "val_loss": 5.0}],
        probes={"0": {"grad_norm_block": [1.0, 2.0]}},
        summary={"final_val_loss": None, "steps_done": 7},
    )


def test_a_result_comes_back_from_its_json_as_it_was_written():
    d = json.loads(json.dumps(_result().to_dict(), allow_nan=False))
    back = RunResult.from_dict(d, "results.jsonl")
    assert back.to_dict() == d and back.history["loss"] == [5.5, None]  # NaN: null in the file
    # a result written before the steps were recorded has neither: None
    old = {k: v for k, v in d.items() if k not in ("diverged_step", "stopped_step")}
    assert RunResult.from_dict(old, "old").diverged_step is None


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.pop("summary"), "r.jsonl line 3: result.summary: expected a JSON object"),
        (lambda d: d.update(evals={}), "r.jsonl line 3: result.evals: expected a JSON list"),
        (lambda d: d.update(status=1), "r.jsonl line 3: result.status: expected a JSON str"),
        (lambda d: d.update(stopped_step="9"), "result.stopped_step: expected an int or null"),
        (lambda d: d.update(diverged_step=True), "result.diverged_step: expected an int or null"),
    ],
)
def test_a_missing_or_mistyped_field_is_an_error_naming_where_and_the_field(change, message):
    d = _result().to_dict()
    change(d)
    with pytest.raises(ValueError, match=re.escape(message)):
        RunResult.from_dict(d, "r.jsonl line 3")
    with pytest.raises(ValueError, match="w: result: expected a JSON object"):
        RunResult.from_dict([1], "w")
