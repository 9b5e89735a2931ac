"""The serial timing phase's design, without timing anything real: ABBA rounds."""

from normlab.lab.study.run import timing


class _FakeArm:
    def __init__(self, cfg, corpus):
        self.name, self.device = cfg, None
        self.step = lambda: None
        self.step.__qualname__ = f"{cfg}.step"

    def norm_calls(self, torch_ops: bool):
        fn = lambda: None  # noqa: E731
        fn.__qualname__ = f"{self.name}.{'torch' if torch_ops else 'ours'}"
        return [fn]


def test_each_round_is_an_abba_block_and_reports_the_mean_of_its_two_visits(monkeypatch):
    seen, clock = [], iter(range(1, 1000))

    def fake_time(fns, repeat, device=None):
        seen.append(fns[0].__qualname__)
        return float(next(clock))

    monkeypatch.setattr(timing, "_Arm", _FakeArm)
    monkeypatch.setattr(timing, "_time", fake_time)
    out = timing.time_arms({"A": "A", "B": "B"}, corpus=None, rounds=2)
    per_round = len(seen) // (timing.WARMUP_ROUNDS + 2)
    first = seen[:per_round]
    assert [s.split(".")[0] for s in first[::3]] == ["A", "B", "B", "A"]
    # ours before PyTorch's on an arm's first visit of the round, after it on the second
    assert first[1:3] == ["A.ours", "A.torch"] and first[10:12] == ["A.torch", "A.ours"]
    assert set(out) == {"A", "B"} and all(len(v) == 2 for v in out["A"].values())
    # a clock that ticks once per measurement: A's two step visits in round r are at positions
    # 0 and 9 of the round, so their mean sits halfway, as B's does: linear drift cancels
    r0 = timing.WARMUP_ROUNDS * per_round
    assert out["A"]["step_ms"][0] == out["B"]["step_ms"][0] == (r0 + 1 + r0 + 10) / 2
