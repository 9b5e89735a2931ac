import json
import math

import pytest
import torch

from normlab.lab.train.data import load_corpus
from normlab.lab.train.trainer import TrainConfig, Trainer, train
from normlab.models import TransformerConfig


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def tiny(**kw) -> TrainConfig:
    model = kw.pop("model", {})
    m = TransformerConfig(256, 16, 2, 2, max_seq_len=16, **model)
    base = dict(steps=20, batch_size=4, seq_len=16, eval_batches=2, lr=3e-3, threads=1)
    return TrainConfig(model=m, **{**base, **kw})


def test_config_round_trips_through_json():
    cfg = tiny(model={"norm": "layernorm", "placement": "post"}, warmup_steps=5,
               probe_steps=(20, 0), grad_clip=1.0)  # fmt: skip
    d = json.loads(json.dumps(cfg.to_dict()))
    back = TrainConfig.from_dict(d)
    assert back == cfg and back.probe_steps == (0, 20) and back.model.placement == "post"
    assert cfg.replace(model={"n_layers": 3}).model.n_layers == 3 and cfg.model.n_layers == 2
    with pytest.raises(ValueError, match="unknown"):
        TrainConfig.from_dict({**d, "bogus": 1})


@pytest.mark.parametrize(
    "kw, name",
    [({"steps": -1}, "steps"), ({"batch_size": 0}, "batch_size"), ({"lr": 0.0}, "lr"),
     ({"schedule": "linear"}, "schedule"), ({"probe_steps": (21,)}, "probe_steps"),
     ({"seq_len": 32}, "seq_len")],
)  # fmt: skip
def test_bad_config_names_the_field(kw, name):
    with pytest.raises(ValueError, match=name):
        tiny(**kw)


def test_schedule_warmup_then_cosine():
    cfg = tiny(steps=11, warmup_steps=4, schedule="cosine", lr=1.0, min_lr_ratio=0.1)
    assert [cfg.lr_at(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert cfg.lr_at(4) == pytest.approx(1.0) and cfg.lr_at(10) == pytest.approx(0.1)
    assert tiny(lr=2.0).lr_at(7) == 2.0


def test_training_learns_records_and_is_deterministic(corpus):
    cfg = tiny(steps=30, eval_interval=10, probe_steps=(0, 30))
    a, b = train(cfg, corpus), train(cfg, corpus)
    assert a.status == "ok" and a.history["loss"] == b.history["loss"]
    h = a.history
    assert len(h["loss"]) == 30 and h["step"] == list(range(30))
    assert sum(h["loss"][-5:]) / 5 < h["loss"][0] - 0.5  # from ~ln 256 toward byte statistics
    assert [e["step"] for e in a.evals] == [10, 20, 30]
    assert set(a.probes) == {"0", "30"}
    p0 = a.probes["0"]
    assert len(p0["grad_norm_block"]) == 2 and all(v > 0 for v in p0["grad_norm_block"])
    s = a.summary
    assert s["final_val_loss"] == a.evals[-1]["val_loss"] < math.log(256)
    assert 0 < s["norm_ms"] < s["fwd_ms"] < s["step_ms"] and s["tokens_per_s"] > 0
    json.dumps(a.to_dict(), allow_nan=False)


def test_nonfinite_loss_is_a_result_not_a_crash(corpus):
    class Poisoned(Trainer):
        def build_model(self):
            model = super().build_model()
            with torch.no_grad():
                model.lm_head.weight[0, 0] = float("nan")
            return model

    res = Poisoned(tiny(), corpus).run()
    assert res.status == "diverged" and res.diverged_step == 0 and "not finite" in res.reason
    assert res.summary["final_val_loss"] is None and res.history["loss"] == []
    json.dumps(res.to_dict(), allow_nan=False)


def test_loss_blowup_rule(corpus):
    # A limit below the loss at init (ln 256 ≈ 5.5) must stop the run at step 0.
    res = train(tiny(diverge_factor=0.5), corpus)
    assert res.status == "diverged" and res.diverged_step == 0
    assert "0.5 * ln V" in res.reason


def test_stall_rule_stops_a_run_on_the_plateau_and_spares_one_that_learns(corpus):
    # The bar is the unigram entropy minus the margin: 10 nats puts it below any loss.
    stalled = train(tiny(steps=12, stall_step=5, stall_margin=10.0, probe_steps=[0, 12]), corpus)
    assert stalled.status == "ok" and stalled.stopped_step == 5 and "stalled" in stalled.reason
    assert len(stalled.history["loss"]) == 5 and stalled.summary["final_val_loss"] is not None
    assert set(stalled.probes) == {"0", "5"}  # the after-training probe where it stopped
    assert [e["step"] for e in stalled.evals] == [5]
    # and -10 above any loss (ln 256 ≈ 5.5 is the worst a model starts at).
    learns = train(tiny(steps=12, stall_step=5, stall_margin=-10.0), corpus)
    assert learns.stopped_step is None and len(learns.history["loss"]) == 12


def test_batchnorm_train_mode_validation_leaves_running_stats(corpus):
    cfg = tiny(model={"norm": "batchnorm"}, eval_train_mode=True, steps=5)
    t = Trainer(cfg, corpus)
    res = t.run()
    assert res.summary["final_val_loss_train_mode"] is not None
    assert res.summary["final_val_loss"] != res.summary["final_val_loss_train_mode"]
    before = {k: v.clone() for k, v in t.model.named_buffers()}
    val = [next(t.train_batches())]
    t._mean_loss(t.model, val, train_mode=True)
    assert all(torch.equal(before[k], v) for k, v in t.model.named_buffers())


def test_serving_measures_run_after_training_and_change_nothing_else(corpus):
    cfg = tiny(model={"norm": "batchnorm"}, steps=5, eval_batches=4)
    plain, served = Trainer(cfg, corpus), Trainer(cfg.replace(eval_serving=True), corpus)
    a, b = plain.run(), served.run()
    assert b.summary["batchmate_shift_train"] > 0 and b.summary["batchmate_shift_eval"] == 0
    assert "batchmate_shift_train" not in a.summary
    assert a.history["loss"] == b.history["loss"] and a.evals == b.evals
    for (k, x), (_, y) in zip(
        plain.model.named_buffers(), served.model.named_buffers(), strict=True
    ):
        assert torch.equal(x, y), k  # the running statistics as training left them


def test_serving_needs_a_block_of_batch_size_squared_validation_sequences():
    with pytest.raises(ValueError, match="eval_serving needs at least"):
        tiny(eval_serving=True, eval_batches=3)  # 12 < 4² sequences
    tiny(eval_serving=True, eval_batches=4)


def test_decay_on_norms_shrinks_their_gains(corpus):
    kw = dict(steps=15, weight_decay=5.0, lr=1e-2)
    off = train(tiny(**kw), corpus).summary["norm_weight_mean"]
    on = train(tiny(decay_norms=True, **kw), corpus).summary["norm_weight_mean"]
    assert on < 0.8 * off


def test_probe_does_not_move_batchnorm_running_statistics(corpus):
    trainer = Trainer(tiny(model={"norm": "batchnorm"}), corpus)
    model = trainer.build_model()
    before = {k: b.clone() for k, b in model.named_buffers()}
    x = torch.randint(0, 256, (4, 16))
    out = trainer._probe(model, [(x, x)])
    assert out["residual_rms"] and all(p.grad is None for p in model.parameters())
    for k, b in model.named_buffers():
        assert torch.equal(b, before[k]), k


def test_the_validation_set_is_the_same_bytes_whatever_the_batch_size(corpus):
    from normlab.lab.train.data import validation_set

    a = validation_set(corpus.val, 32, 4, 16)
    b = validation_set(corpus.val, 32, 16, 16)
    assert len(a) == 8 and len(b) == 2 and a[0][0].shape == (4, 16)
    assert torch.equal(torch.cat([x for x, _ in a]), torch.cat([x for x, _ in b]))
    assert torch.equal(torch.cat([y for _, y in a]), torch.cat([y for _, y in b]))
    with pytest.raises(ValueError, match="multiple of batch_size"):
        TrainConfig(model=TransformerConfig(256, 16, 1, 2), batch_size=3, eval_sequences=32)


def test_the_norms_are_timed_on_the_sampled_steps_only(corpus):
    cfg = tiny(steps=6, norm_time_every=3)
    res = train(cfg, corpus)
    timed = [t is not None for t in res.history["norm_ms"]]
    assert timed == [True, False, False, True, False, False]
    assert res.summary["norm_ms"] > 0
    from normlab.lab.train.norm_timer import NormTimer
    from normlab.models import Transformer

    model = Transformer(cfg.model)

    with NormTimer(model):
        assert any(m._forward_hooks for m in NormTimer.norm_modules(model))
    assert not any(m._forward_hooks for m in NormTimer.norm_modules(model))


def test_a_probe_over_several_batches_is_their_mean(corpus):
    from normlab.lab.train import evaluation as T

    assert T._mean_of([{"a": [1.0, 3.0], "b": 2}, {"a": [3.0, 5.0], "b": 4}]) == {
        "a": [2.0, 4.0],
        "b": 3.0,
    }
    assert T._mean_of([[1.0, None], [3.0, 2.0]]) == [2.0, None]
    one = train(tiny(steps=0, probe_batches=1, eval_batches=3), corpus).probes["0"]
    three = train(tiny(steps=0, probe_batches=3, eval_batches=3), corpus).probes["0"]
    assert set(one) == set(three)
    assert one["grad_norm_block"] != three["grad_norm_block"]
    with pytest.raises(ValueError, match="probe_batches"):
        train(tiny(steps=0, probe_batches=4, eval_batches=3), corpus)


# ---- evaluation-only measures: the model update, block drop, the train split's loss


def test_probes_record_the_model_update_from_step_0(corpus):
    res = train(tiny(steps=6, probe_steps=(0, 3, 6)), corpus)
    assert "output_change" not in res.probes["0"]  # no update yet: nothing to compare
    moved = [res.probes[s]["output_change"] for s in ("3", "6")]
    assert all(math.isfinite(v) and v > 0 for v in moved)
    # without a probe at init there is no reference: no value, not a wrong one
    assert "output_change" not in train(tiny(steps=6, probe_steps=(3,)), corpus).probes["3"]
    # lr that makes no update (tiny): the output does not move
    still = train(tiny(steps=2, probe_steps=(0, 2), lr=1e-30), corpus)
    assert still.probes["2"]["output_change"] < 1e-6


def test_block_drop_measures_each_block_and_restores_the_model(corpus):
    cfg = tiny(steps=0, model={"norm": "layernorm", "placement": "pre"})
    cfg = cfg.replace(model={"n_layers": 3})
    t = Trainer(cfg, corpus)
    t.model = model = t.build_model()
    with torch.no_grad():  # block 1 adds nothing to its stream: skipping it changes nothing
        model.blocks[1].attn.wo.weight.zero_()
        model.blocks[1].mlp.w_out.weight.zero_()
    val = t.eval_batches()
    before = t._mean_loss(model, val, train_mode=False)
    drops = t._block_drop(model, val)
    assert len(drops) == 3 and drops[1] == pytest.approx(0.0, abs=1e-6)
    assert abs(drops[0]) > 1e-4 and abs(drops[2]) > 1e-4
    assert t._mean_loss(model, val, train_mode=False) == before  # every block back in place
    res = train(tiny(steps=4, block_drop_batches=1).replace(model={"n_layers": 3}), corpus)
    assert len(res.summary["block_drop_loss"]) == 3
    assert "block_drop_loss" not in train(tiny(steps=4), corpus).summary  # off by default


def test_train_slice_trains_on_the_first_bytes_and_reports_their_loss(corpus):
    cfg = tiny(steps=100, lr=1e-2, train_slice=256)
    t = Trainer(cfg, corpus)
    assert torch.equal(t.train_split(), corpus.train[:256])
    x, _ = next(t.train_batches())
    head = bytes(corpus.train[:256].tolist())
    assert all(bytes(row.tolist()) in head for row in x)  # every sequence from the slice
    res = train(cfg, corpus)
    s = res.summary
    # 100 steps of 4 x 16 bytes over 256: the model fits its few bytes better than unseen ones
    assert math.isfinite(s["final_train_loss"]) and s["final_train_loss"] < s["final_val_loss"]
    assert "final_train_loss" not in train(tiny(steps=2), corpus).summary
    with pytest.raises(ValueError, match="train_slice"):
        tiny(train_slice=16)
    # Along the curve: every validation also reads the training bytes' loss (at equal fit).
    curve = train(cfg.replace(eval_interval=50), corpus).evals
    assert [e["step"] for e in curve] == [50, 100] and all("train_loss" in e for e in curve)
    assert curve[-1]["train_loss"] == pytest.approx(s["final_train_loss"])
    assert "train_loss" not in train(tiny(steps=4, eval_interval=2), corpus).evals[0]


def test_freeze_norm_stats_trains_batchnorm_on_its_running_statistics_from_that_step(corpus):
    from normlab import BatchNorm

    cfg = tiny(steps=6, model={"norm": "batchnorm"}, freeze_norm_stats=3)
    t = Trainer(cfg, corpus)
    seen = []
    res = t.run(on_step=lambda step, rec: seen.append(
        (step, [m.frozen for m in t.model.modules() if isinstance(m, BatchNorm)])))  # fmt: skip
    assert res.status == "ok"
    assert all(not any(f) for s, f in seen if s < 3) and all(all(f) for s, f in seen if s >= 3)
    stats = [m.running_mean.clone() for m in t.model.modules() if isinstance(m, BatchNorm)]
    t.model.train()(next(t.train_batches())[0])  # frozen: a train-mode pass leaves them as they are
    assert all(torch.equal(a, m.running_mean) for a, m in zip(stats, (
        m for m in t.model.modules() if isinstance(m, BatchNorm)), strict=True))  # fmt: skip
    with pytest.raises(ValueError, match="freeze_norm_stats"):
        tiny(freeze_norm_stats=-1)
    with pytest.raises(ValueError, match="needs model.norm='batchnorm'"):  # it would do nothing
        tiny(freeze_norm_stats=3)


def test_gradient_accumulation_is_the_whole_batch_for_layernorm_not_for_batchnorm(corpus):
    """k micro-batches of B/k give LayerNorm the whole batch's update (to float rounding) and
    BatchNorm another one: its statistics come from each micro-batch."""

    def gradients(norm: str, k: int) -> tuple[float, list[torch.Tensor]]:
        t = Trainer(tiny(model={"norm": norm}, grad_accum=k), corpus)
        t.model = t.build_model()
        params = [p for p in t.model.parameters() if p.requires_grad]
        x, y = next(t.train_batches())
        scaler = torch.amp.GradScaler("cpu", enabled=False)
        loss, _, _ = t.train_step(x, y, t.build_optimizer(t.model), scaler, params, None)
        return loss, [p.grad.clone() for p in params]

    (loss1, g1), (loss4, g4) = gradients("layernorm", 1), gradients("layernorm", 4)
    assert loss4 == pytest.approx(loss1, rel=1e-5)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-7) for a, b in zip(g1, g4, strict=True))
    (_, g1), (_, g4) = gradients("batchnorm", 1), gradients("batchnorm", 4)
    assert not all(torch.allclose(a, b, rtol=1e-4, atol=1e-7) for a, b in zip(g1, g4, strict=True))
    with pytest.raises(ValueError, match="grad_accum"):
        tiny(grad_accum=3)


def test_eval_lengths_validate_the_first_positions_in_both_modes(corpus):
    cfg = tiny(model={"norm": "batchnorm", "batchnorm_causal": False}, steps=4,
               eval_train_mode=True, eval_lengths=(4, 8))  # fmt: skip
    s = Trainer(cfg, corpus).run().summary
    assert set(s["val_loss_at"]) == set(s["val_loss_train_mode_at"]) == {"4", "8"}
    assert s["val_loss_at"]["4"] != s["val_loss_at"]["8"]
    assert cfg.to_dict()["eval_lengths"] == [4, 8]
    with pytest.raises(ValueError, match="eval_lengths"):
        tiny(eval_lengths=(32,))
