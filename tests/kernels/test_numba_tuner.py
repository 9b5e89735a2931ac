"""The Numba kernels' launch choices and their tuner: every candidate is as accurate as the
default (the checks of test_numba_cpu.py, on small shapes), the tuner's pick, its cache (corrupt
files, two processes at once) and NORMLAB_TUNE=0."""

import glob
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import replace

import numba
import numpy as np
import pytest
import torch
from kernel_checks import make_inputs
from test_numba_cpu import check

import normlab
from normlab.kernels.numba import choices, tune_cache, tuner
from normlab.kernels.numba import launch as numba_launch
from normlab.kernels.numba.bf16 import VW, vector_width
from normlab.kernels.numba.choices import OLD, OPS, Launch

BF16, F32 = torch.bfloat16, torch.float32
BIG = (1024, 1024)  # choices.MIN_ELEMENTS: the smallest call that is tuned
# The bfloat16 pairs loops, at both vector widths: the accuracy shapes of every_candidate have an
# odd N, which never reads pairs, so the tests below run them on even ones.
PAIRS_LOOPS = [
    Launch(p, bf16_pairs=True, vector_512=v) for v in (False, True) for p in (False, True)
]


@pytest.mark.parametrize(
    ("dtype", "cand"),
    [
        (dt, c)
        for dt in (F32, BF16)
        for c in choices.every_candidate(str(dt).removeprefix("torch."))
    ],
    ids=lambda v: v.name if isinstance(v, Launch) else str(v),
)
def test_every_candidate_passes_the_accuracy_checks(dtype, cand):
    # (37, 123): 16 chunks of 3 rows or 2 of 19 (the pipelined loops' first, middle and last
    # rows); (130, 257): above the parallel threshold, so the thread share applies.
    assert 130 * 257 >= numba_launch.PAR_MIN_ELEMENTS
    with tuner.forced(dict.fromkeys(OPS, cand)):
        for shape in ((37, 123), (130, 257)):
            x, w, b, r = make_inputs(shape, dtype)
            for me in (False, True):
                for casting in ("llama", "gemma", "none"):
                    if casting == "none" and dtype == BF16:
                        continue  # all-bf16 math in the reference: test_numba_cpu.py's choice
                    kw = {"casting": casting, "offset": float(casting == "gemma"), "eps": 1e-2}
                    check(me, "rms_norm", x, weight=w, residual=r, eps_inside=False, **kw)
                    check(me, "rms_norm", x, weight=w, **kw)
                check(me, "rms_norm", x, residual=r)  # no weight
                check(me, "layer_norm", x, weight=w, bias=b, residual=r)
                check(me, "layer_norm", x, weight=w)


@pytest.mark.skipif("avx512f" not in choices.cpu_info()[1], reason="a CPU without AVX-512")
def test_vector_512_builds_a_row_loop_for_512_bit_vectors():
    # a row loop as the kernels write one, specialized on the width tag: 512-bit registers (zmm)
    # where asked, LLVM's preferred width otherwise: 256 bits (ymm) where builds_256_bit says so
    # (and the tuner tries both), else already 512 (the tag changes nothing)
    @numba.njit(fastmath={"reassoc", "contract"})
    def scale(x, y, vw):
        vector_width(vw)
        s = np.float32(0)
        for j in range(x.size):
            s += x[j] * x[j]
        for j in range(x.size):
            y[j] = x[j] * s

    x = np.ones(1024, np.float32)
    regs = {}
    for vw in VW:
        scale(x, np.empty_like(x), vw)
        asm = scale.inspect_asm(scale.signatures[-1])
        regs[vw.dtype.name] = (asm.count("zmm"), asm.count("ymm"))
    (z8, y8), (z16, y16) = regs["int8"], regs["int16"]
    assert z16 > 2 * y16, regs
    assert z8 < y8 if choices.builds_256_bit() else (z8, y8) == (z16, y16), regs


@pytest.mark.parametrize("dtype", [F32, BF16, torch.float16], ids=str)
def test_two_pass_layer_norm_backward_on_long_rows_takes_two_rows_a_step(dtype):
    # from TWO_ROWS_MIN_N, pass 1 sums two rows a step: 3 rows a chunk (two a step, then one)
    # and 1 (one) in (37, N), 4 (two steps) in (64, N); N odd, so bfloat16 runs this reference
    # loop, not pairs
    assert numba_launch.B.TWO_ROWS_MIN_N <= 2049
    with tuner.forced({"ln_bwd": Launch(pipelined=False)}):
        for shape in ((37, 2049), (64, 2049)):
            x, w, b, r = make_inputs(shape, dtype)
            check("layer_norm", x, weight=w, bias=b, residual=r)
            check("layer_norm", x)


@pytest.mark.parametrize("pairs", PAIRS_LOOPS, ids=lambda c: c.name)
def test_bf16_pairs_layer_norm_backward_is_accurate_where_used_and_skipped_elsewhere(
    pairs, monkeypatch
):
    calls = []
    par = numba_launch.BP.ln_bwd_pairs_par
    monkeypatch.setattr(numba_launch.BP, "ln_bwd_pairs_par", lambda *a: calls.append(1) or par(*a))
    wide = make_inputs((37, 132), BF16)[0]
    with tuner.forced({"ln_bwd": pairs}):
        # rows from TWO_ROWS_MIN_N in the 2-pass loop: 3 rows a chunk (two a step, then one), 4
        # (two steps), 1 (one)
        assert numba_launch.B.TWO_ROWS_MIN_N <= 2050
        for shape in ((37, 124), (130, 258), (37, 2050), (64, 2050), (2, 3, 2050), (0, 64)):
            x, w, b, r = make_inputs(shape, BF16)
            check("layer_norm", x, weight=w, bias=b, residual=r)  # with dh
            check("layer_norm", x, weight=w)
        used = len(calls)
        assert used >= 4  # the (130, 258) calls run on the pool
        check("layer_norm", wide[:, 2:126], weight=make_inputs((1, 124), BF16)[1])  # stride 132
        assert len(calls) > used
        used = len(calls)
        for x in (wide[:, 1:125], torch.randn(130, 257).to(BF16), torch.randn(130, 258)):
            check("layer_norm", x, weight=make_inputs((1, x.shape[1]), x.dtype)[1])
        assert len(calls) == used  # an odd address or N, and float32: the reference kernel


@pytest.mark.parametrize("pairs", PAIRS_LOOPS, ids=lambda c: c.name)
def test_bf16_pairs_rms_norm_backward_is_accurate_where_used_and_skipped_elsewhere(
    pairs, monkeypatch
):
    # as the LayerNorm one above; llama rounds xhat to bfloat16 in dweight, gemma does not
    calls = []
    par = numba_launch.BPR.rms_bwd_pairs_par
    monkeypatch.setattr(
        numba_launch.BPR, "rms_bwd_pairs_par", lambda *a: calls.append(1) or par(*a)
    )
    wide, odd = make_inputs((37, 132), BF16)[0], make_inputs((37, 131), BF16)[0]
    with tuner.forced({"rms_bwd": pairs}):
        for shape in ((37, 124), (130, 258), (2, 3, 64), (3, 2), (0, 64)):
            x, w, b, r = make_inputs(shape, BF16)
            for casting in ("llama", "gemma"):
                kw = {"casting": casting, "offset": float(casting == "gemma")}
                check("rms_norm", x, weight=w, residual=r, eps_inside=casting == "llama", **kw)
                check("rms_norm", x, weight=w, eps_inside=casting == "gemma", eps=1e-2, **kw)
            check("rms_norm", x)  # no weight: no dweight partial sums in the 2-pass loop
            check("rms_norm", x, residual=r, eps_inside=False)
        used = len(calls)
        assert used >= 24  # 6 backwards of each shape with rows
        check("rms_norm", wide[:, 2:126], weight=make_inputs((1, 124), BF16)[1])  # stride 132
        assert len(calls) == used + 1
        used = len(calls)
        # an odd address, row stride or N, and float32: the reference kernel (without a residual:
        # with one, h is a new contiguous tensor)
        for x in (wide[:, 1:125], odd[:, :124], torch.randn(130, 257).to(BF16), torch.randn(9, 8)):
            check("rms_norm", x, weight=make_inputs((1, x.shape[1]), x.dtype)[1])
        assert len(calls) == used


@pytest.mark.parametrize("pairs", PAIRS_LOOPS, ids=lambda c: c.name)
def test_bf16_pairs_forwards_are_accurate_where_used_and_skipped_elsewhere(pairs, monkeypatch):
    calls = []
    for name in ("rms_fwd_pairs_par", "ln_fwd_pairs_par"):
        par = getattr(numba_launch.FP, name)
        monkeypatch.setattr(numba_launch.FP, name, lambda *a, par=par: calls.append(1) or par(*a))
    wide = make_inputs((37, 132), BF16)[0]
    with tuner.forced({"rms_fwd": pairs, "ln_fwd": pairs}):
        for shape in ((37, 124), (130, 258), (2, 3, 64), (3, 2), (0, 64)):
            x, w, b, r = make_inputs(shape, BF16)
            for casting in ("llama", "gemma"):  # llama rounds x * rstd to bfloat16
                kw = {"casting": casting, "offset": float(casting == "gemma")}
                check("rms_norm", x, weight=w, eps_inside=casting == "gemma", **kw)
            check("rms_norm", x)
            check("layer_norm", x, weight=w, bias=b)
            check("layer_norm", x)
        used = len(calls)
        assert used >= 20  # 5 forwards of each shape with rows
        check("layer_norm", wide[:, 2:126], weight=make_inputs((1, 124), BF16)[1])  # stride 132
        check("rms_norm", wide[:, 2:126])
        check("layer_norm", 300 + wide[:, :124])  # mean² > var / 8: the two-pass variance
        assert len(calls) == used + 3
        used = len(calls)
        x, w, b, r = make_inputs((37, 124), BF16)
        check("rms_norm", x, weight=w, residual=r)
        check("layer_norm", x, weight=w, bias=b, residual=r)
        for x in (wide[:, 1:125], torch.randn(130, 257).to(BF16), torch.randn(130, 258)):
            check("rms_norm", x)
            check("layer_norm", x, weight=make_inputs((1, x.shape[1]), x.dtype)[1])
        assert len(calls) == used  # a residual, an odd address or N, float32: the reference
        # a NaN whose rounding carry would make -0: the gain's NaN asks for the exact store
        x, w = torch.randn(37, 124).to(BF16), torch.ones(124)
        w[5] = torch.tensor(0x7FFFFFFF, dtype=torch.int32).view(F32)
        with torch.no_grad():
            ys = (
                normlab.rms_norm(x, w, casting="gemma", backend="numba"),
                normlab.layer_norm(x, w, backend="numba"),
            )  # (llama casting: a float32 gain makes a float32 y)
        assert len(calls) == used + 2
        for y in ys:
            assert y[:, 5].isnan().all() and not y[:, 4].isnan().any()


def test_the_old_choices_are_candidates_and_every_choice_is_a_valid_launch():
    for op in OPS:
        cands = choices.candidates(op)
        assert cands[0] == OLD[op] and len(set(cands)) == len(cands)
    assert OLD["rms_fwd"].pipelined and not OLD["rms_bwd"].pipelined
    for c in choices.every_candidate():
        assert Launch.from_name(c.name) == c  # what bench_cpu_limit.py --force reads
    for bad in ("pipe", "pipe/c0/t1/x", "fused/c0/t1"):
        with pytest.raises(ValueError, match="not a launch choice name"):
            Launch.from_name(bad)
    for op in OPS:
        has_pairs = op in ("rms_fwd", "ln_fwd", "rms_bwd", "ln_bwd")
        for wide in (False, True):
            cands = choices.candidates(op, dtype="bfloat16", wide=wide)
            pairs = [c for c in cands if c.bf16_pairs]
            assert len(pairs) == (2 + 2 * wide if has_pairs else 0)
            v512 = [c for c in cands if c.vector_512]  # the row loops, on pairs where there are
            assert len(v512) == wide * (2 if has_pairs else 1)
            assert all(c.bf16_pairs == has_pairs for c in v512)
            assert {replace(c, vector_512=False) for c in v512} <= set(cands)
        assert not any(c.bf16_pairs or c.vector_512 for c in choices.candidates(op, wide=True))
        # streamed stores: for calls from memory only, of the launchers with streamed kernels
        for dtype in ("float32", "bfloat16"):
            assert not any(c.stream for c in choices.candidates(op, dtype=dtype))
            streamed = [c for c in choices.candidates(op, dtype=dtype, memory=True) if c.stream]
            assert streamed == ([Launch(False, stream=True)] if op in choices.STREAM_OPS else [])
    for bad in (
        {"pipelined": 1},
        {"pipelined": True, "threads": 0},
        {"pipelined": True, "chunks_per_cpu": -1},
        {"pipelined": True, "bf16_pairs": 1},
    ):
        with pytest.raises((TypeError, ValueError)):
            Launch(**bad)


def test_buckets_and_keys(monkeypatch):
    assert [choices.bucket(n) for n in (1, 128, 129, 1000, 1024, 4097, 10**6)] == [
        128, 128, 256, 1024, 1024, 8192, 32768
    ]  # fmt: skip
    assert choices.key("ln_bwd", "bfloat16", 3000) == "ln_bwd/bfloat16/4096"
    monkeypatch.setattr(choices, "llc_bytes", lambda: 1 << 20)  # rows beyond it: from memory
    assert choices.key("ln_bwd", "bfloat16", 1024, 1 << 19) == "ln_bwd/bfloat16/1024"
    assert choices.key("ln_bwd", "bfloat16", 1024, (1 << 19) + 1) == "ln_bwd/bfloat16/1024/mem"
    assert choices.key("ln_bwd", "float32", 1024, (1 << 18) + 1) == "ln_bwd/float32/1024/mem"
    monkeypatch.setattr(choices, "llc_bytes", lambda: 0)  # unknown: one regime
    assert choices.key("ln_bwd", "float32", 1024, 1 << 30) == "ln_bwd/float32/1024"


def test_the_last_level_cache_size_is_read_where_sysfs_lists_it():
    listed = glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size")
    assert choices.llc_bytes() >= (1 << 20 if listed else 0)


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A tuner with an empty cache under ``tmp_path`` and no pick in memory."""
    monkeypatch.setenv("NORMLAB_TUNE_DIR", str(tmp_path))
    monkeypatch.setenv("NORMLAB_TUNE", "always")  # this machine may be busy
    monkeypatch.setenv("NORMLAB_TUNE_BUDGET_S", "0.1")
    monkeypatch.setattr(choices, "llc_bytes", lambda: 1 << 30)  # the tests' calls: in the cache
    tuner.reset()
    yield tune_cache.cache_file()
    tuner.reset()


def _median(t) -> float:
    return statistics.median(t.seconds)


def test_first_large_call_tunes_and_the_pick_is_within_5_percent_of_the_best(fresh):
    x = torch.randn(*BIG)
    t0 = time.perf_counter()
    normlab.rms_norm(x, backend="numba")
    first_call_s = time.perf_counter() - t0
    tuned = tune_cache.load(fresh)["rms_fwd/float32/1024"]
    assert [t.launch for t in tuned.timed] == list(choices.candidates("rms_fwd"))
    rounds = {len(t.seconds) for t in tuned.timed}
    assert len(rounds) == 1 and next(iter(rounds)) >= 1
    # the pick against the look that decided it: the second where there was one
    last = tuned.second or tuned.timed
    best = min(_median(t) for t in last)
    pick = next(t for t in last if t.launch == tuned.pick)
    assert _median(pick) <= 1.05 * best
    # the budget bounds the timing: every round but the last started within it (the first
    # round runs whatever the budget)
    last_round = sum(t.seconds[-1] for t in tuned.timed)
    assert (
        next(iter(rounds)) == 1
        or sum(sum(t.seconds) for t in tuned.timed) - last_round <= tuned.budget_s
    )
    assert first_call_s < 30  # a generous bound: the budget plus making inputs, on a busy machine
    # a second call, and a second process's lookup, use the cached pick
    assert numba_launch._launch("rms_fwd", x, None) == tuned.pick
    tuner.reset()
    assert numba_launch._launch("rms_fwd", x, None) == tuned.pick


def test_calls_from_memory_are_tuned_apart_on_inputs_beyond_the_last_level_cache(
    fresh, monkeypatch
):
    monkeypatch.setattr(choices, "llc_bytes", lambda: 6 << 20)
    sizes, real = [], numba_launch._tuning_calls
    monkeypatch.setattr(numba_launch, "_tuning_calls", lambda *a: sizes.append(a[3]) or real(*a))
    normlab.rms_norm(torch.randn(*BIG), backend="numba")  # 4 MiB of rows: served by the cache
    normlab.rms_norm(torch.randn(2 * BIG[0], BIG[1]), backend="numba")  # 8 MiB: from memory
    assert sorted(tune_cache.load(fresh)) == ["rms_fwd/float32/1024", "rms_fwd/float32/1024/mem"]
    assert sizes == [tuner.TUNE_ELEMENTS, 2 * (6 << 20) // 4]  # twice the cache, in elements


def test_pick_keeps_the_old_choice_unless_clearly_beaten():
    old, new = choices.candidates("rms_bwd")[:2]
    timed = lambda a, b: (tune_cache.Timed(old, (a,) * 3), tune_cache.Timed(new, (b,) * 3))  # noqa: E731
    assert tuner.pick(timed(1.02, 1.0)) == old  # within KEEP_OLD_WITHIN: noise
    assert tuner.pick(timed(1.10, 1.0)) == new
    assert tuner.pick(timed(1.0, 1.2)) == old


@pytest.mark.parametrize("again, kept", [(1.10, True), (1.02, False)])
def test_a_pick_away_from_the_old_choice_stands_only_if_a_second_look_agrees(
    fresh, monkeypatch, again, kept
):
    old, new, other = choices.candidates("rms_bwd")[:3]
    looks = []

    def look(cands, runs, budget):  # the first look: new 10 % faster; the second: `again`
        looks.append(cands)
        times = {old: 1.10, new: 1.0, other: 1.2} if len(looks) == 1 else {old: again, new: 1.0}
        return tuple(tune_cache.Timed(c, (times[c],) * 3) for c in cands)

    monkeypatch.setattr(tuner, "_look", look)
    tuned = tuner.tune("k", lambda c: lambda: None, (old, new, other), budget=0.0)
    assert looks == [(old, new, other), (old, new)]
    assert tuned.pick == (new if kept else old)
    assert [t.launch for t in tuned.second] == [old, new]
    tune_cache.store(fresh, {"k": tuned})
    assert tune_cache.load(fresh)["k"] == tuned  # the second look round-trips the cache


def test_a_first_look_that_keeps_the_old_choice_takes_no_second(monkeypatch):
    cands = choices.candidates("rms_bwd")[:2]
    looks = []

    def look(cands, runs, budget):  # the old choice within KEEP_OLD_WITHIN of the other
        looks.append(cands)
        return tuple(tune_cache.Timed(c, (t,) * 3) for c, t in zip(cands, (1.02, 1.0), strict=True))

    monkeypatch.setattr(tuner, "_look", look)
    tuned = tuner.tune("k", lambda c: lambda: None, cands, budget=0.0)
    assert (tuned.pick, tuned.second, len(looks)) == (cands[0], (), 1)


def test_small_calls_use_the_old_choices_and_never_tune(fresh, monkeypatch):
    monkeypatch.setattr(tuner, "tune", lambda *a, **k: pytest.fail("tuned a small call"))
    x = torch.randn(512, 1024, requires_grad=True)
    normlab.layer_norm(x, backend="numba").sum().backward()
    assert numba_launch._launch("ln_bwd", x.detach(), None) == OLD["ln_bwd"]
    assert not fresh.exists()


@pytest.mark.parametrize(
    "text", ["{not json", '{"format": 1, "entries": {"k": {"pick": 3}}}', "[]"]
)
def test_a_corrupt_cache_is_ignored_with_a_warning_and_replaced(fresh, text):
    fresh.parent.mkdir(parents=True, exist_ok=True)
    fresh.write_text(text)
    with pytest.warns(UserWarning, match="tuning cache .* corrupt"):
        normlab.layer_norm(torch.randn(*BIG), backend="numba")
    assert list(tune_cache.load(fresh)) == ["ln_fwd/float32/1024"]


def test_a_pick_cached_among_other_candidates_is_tuned_again(fresh, monkeypatch):
    # a cache written before the candidates changed (same normlab version): its pick stands
    # only while its timed candidates are today's
    k, cands = "rms_fwd/float32/1024", choices.candidates("rms_fwd")
    stale = tune_cache.Tuned(
        k, cands[1], tuple(tune_cache.Timed(c, (1.0,)) for c in cands[:2]), 0.1
    )
    tune_cache.store(fresh, {k: stale})
    x = torch.randn(*BIG)
    numba_launch._launch("rms_fwd", x, None)
    tuned = tune_cache.load(fresh)[k]
    assert [t.launch for t in tuned.timed] == list(cands)
    tuner.reset()
    monkeypatch.setattr(tuner, "tune", lambda *a, **kw: pytest.fail("a current entry re-timed"))
    assert numba_launch._launch("rms_fwd", x, None) == tuned.pick


def test_a_busy_machine_runs_the_shipped_choices_and_tunes_later(fresh, monkeypatch):
    monkeypatch.setenv("NORMLAB_TUNE", "1")
    monkeypatch.setattr(os, "getloadavg", lambda: (2.0 * choices.cpu_count(), 0.0, 0.0))
    monkeypatch.setattr(tuner, "tune", lambda *a, **k: pytest.fail("timed on a busy machine"))
    x = torch.randn(*BIG)
    assert numba_launch._launch("rms_fwd", x, None) == choices.shipped(
        "rms_fwd/float32/1024", "rms_fwd"
    )
    assert not fresh.exists()


def test_the_shipped_table_holds_keys_and_candidates_the_tuner_could_pick():
    for cls, table in choices.SHIPPED.items():
        assert table, cls
        for k, pick in table.items():
            op, dtype, n, *mem = k.split("/")
            assert mem in ([], ["mem"]) and k.startswith(choices.key(op, dtype, int(n))), k
            wide = cls.startswith("intel-avx512")
            cands = choices.candidates(op, dtype=dtype, wide=wide, memory=bool(mem))
            assert pick in cands and pick != OLD[op], k


def test_tune_0_takes_the_shipped_choices_without_timing_or_cache(fresh, monkeypatch):
    monkeypatch.setenv("NORMLAB_TUNE", "0")
    monkeypatch.setattr(tuner, "tune", lambda *a, **k: pytest.fail("timed with NORMLAB_TUNE=0"))
    shipped = {"rms_fwd/bfloat16/4096": Launch(pipelined=False, chunks_per_cpu=1)}
    monkeypatch.setitem(choices.SHIPPED, choices.machine_class(), shipped)
    x = torch.randn(256, 4096).to(BF16)
    normlab.rms_norm(x, backend="numba")
    assert tuner._memo["rms_fwd/bfloat16/4096"] == shipped["rms_fwd/bfloat16/4096"]
    assert numba_launch._launch("ln_fwd", x, None) == OLD["ln_fwd"]  # not in the table
    assert not fresh.exists()


_TUNE_IN_A_PROCESS = """
import sys, time, torch
from normlab.kernels.numba import launch
start, keys = float(sys.argv[1]), sys.argv[2:]
while time.time() < start:  # both processes tune at the same moment
    time.sleep(0.005)
for k in keys:
    op, dtype, n = k.split("/")
    launch._launch(op, torch.empty(1024, int(n), dtype=getattr(torch, dtype)), None)
"""


def test_two_processes_tuning_at_once_leave_a_valid_cache_with_both_picks(fresh):
    a = ["rms_fwd/float32/1024", "ln_fwd/float32/2048", "rms_bwd/float32/1024"]
    b = ["rms_bwd/float32/1024", "ln_fwd/float32/1024", "rms_fwd/float32/2048"]
    env = {**os.environ, "NORMLAB_TUNE_DIR": str(fresh.parent), "NORMLAB_TUNE_BUDGET_S": "0.05"}
    env["NORMLAB_TUNE"] = "always"
    env["PYTHONWARNINGS"] = "error::UserWarning"  # a torn file read by the other would fail
    start = time.time() + 8  # time for both interpreters to import torch and normlab
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _TUNE_IN_A_PROCESS, str(start), *keys],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for keys in (a, b)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    data = json.loads(fresh.read_text())
    assert sorted(data["entries"]) == sorted(set(a) | set(b))
    assert tune_cache.load(fresh).keys() == set(a) | set(b)
