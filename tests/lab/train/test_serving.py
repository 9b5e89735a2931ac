"""The serving measures (normlab.lab.train.serving): BatchNorm's batch dependence in train mode,
none in eval mode, none at all for LayerNorm; the running statistics left alone."""

import pytest
import torch

from normlab.lab.train.serving import (
    SERVING_SEQUENCES,
    layout_b,
    n_probes,
    probe_set,
    serving_measures,
)
from normlab.models import Transformer, TransformerConfig

B, T = 4, 16


def model(norm: str) -> Transformer:
    torch.manual_seed(0)
    m = Transformer(TransformerConfig(256, 16, 2, 2, max_seq_len=T, norm=norm))
    if norm == "batchnorm":  # running statistics away from their init: one train-mode pass
        with torch.no_grad():
            m(torch.randint(0, 256, (8, T)))
    return m


@pytest.fixture(scope="module")
def probes():
    g = torch.Generator().manual_seed(1)
    x = torch.randint(1, 256, (2 * B * B, T + 1), generator=g)
    return x[:, :-1], x[:, 1:]


def test_layout_b_gives_every_probe_new_mates():
    n = 2 * B * B
    a = torch.arange(n).view(-1, B)  # layout A's batches
    b = layout_b(n, B).view(-1, B)
    batch_a = {int(s): i for i, row in enumerate(a) for s in row}
    for row in b:  # each batch of layout B takes its probes from B different batches of A
        assert len({batch_a[int(s)] for s in row}) == B
    assert sorted(layout_b(n, B).tolist()) == list(range(n))


def test_the_probe_set_is_whole_blocks_of_batch_size_squared(probes):
    batches = list(zip(probes[0].split(B), probes[1].split(B), strict=True))
    x, y = probe_set(batches, B)
    assert torch.equal(x, probes[0]) and torch.equal(y, probes[1])
    assert n_probes(1024, 16) == SERVING_SEQUENCES and n_probes(1024, 4) == SERVING_SEQUENCES
    assert n_probes(40, 4) == 32 and n_probes(1024, 32) == 1024 and n_probes(1000, 32) == 0
    with pytest.raises(ValueError, match="batch_size²"):
        probe_set(batches[:3], B)


def test_batchnorm_depends_on_its_batch_in_train_mode_only(probes):
    m = model("batchnorm")
    before = {k: b.clone() for k, b in m.named_buffers()}
    out = serving_measures(m, *probes, B)
    assert out["batchmate_shift_train"] > 0.01
    assert out["padding_gap_train"] != 0.0
    assert out["forgot_eval_gap"] != 0.0
    # running statistics: nothing read from the batch
    assert out["batchmate_shift_eval"] == 0.0 and out["padding_gap_eval"] == 0.0
    for k, b in m.named_buffers():  # the measurement learned nothing from the probes
        assert torch.equal(b, before[k]), k
    assert m.training


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_a_batch_free_norm_gives_zero(norm, probes):
    out = serving_measures(model(norm), *probes, B)
    assert set(out) == {
        "batchmate_shift_train",
        "batchmate_shift_eval",
        "forgot_eval_gap",
        "padding_gap_train",
        "padding_gap_eval",
    }
    for k, v in out.items():
        assert abs(v) < 1e-6, (k, v)  # rounding at most (rows move between GEMM slots)
