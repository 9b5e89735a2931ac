"""The table of norm kinds (normlab.models.norms): every row builds its module, counts that
module's parameters and per-position buffers, reads exactly the config fields it names, and is
documented in docs/models.md; the config's choices, help text and option checks come from it."""

from __future__ import annotations

import copy
import dataclasses
import re
import typing
from pathlib import Path

import pytest
import torch

from normlab.models import TransformerConfig
from normlab.models.config import NORMS, field_types
from normlab.models.layers import make_norm
from normlab.models.norms import KINDS, NormKind
from normlab.models.size import norm_params

DOCS = Path(__file__).resolve().parents[2] / "docs"
BASE = {"vocab_size": 32, "dim": 16, "n_layers": 1, "n_heads": 2, "max_seq_len": 16}
# A value away from the base config's for every field some kind reads: a new option needs one.
CHANGED = {
    "eps": 1e-3,
    "bias": True,
    "arch": "gpt2",
    "norm_backend": "reference",
    "norm_memory_efficient": True,
    "norm_offset": 1.0,
    "rms_casting": "gemma",
    "batchnorm_causal": False,
    "max_seq_len": 32,
    "dyt_alpha": 2.0,
    "dyt_alpha_attn": 3.0,
}

pytestmark = pytest.mark.usefixtures("one_thread")


def _config(kind: NormKind, **kw) -> TransformerConfig:
    return TransformerConfig(**{**BASE, "norm": kind.key, **kw})


def _built(cfg: TransformerConfig, size: int, attn: bool):
    """What tells two modules apart: type, public attributes, state (shapes and values)."""
    torch.manual_seed(0)
    m = make_norm(cfg, size, attn=attn)
    if m is None:
        return None
    attrs = {k: v for k, v in vars(m).items() if not k.startswith("_")}
    state = {k: (tuple(t.shape), t.tolist()) for k, t in m.state_dict().items()}
    return type(m), attrs, state


def test_norms_are_the_table_in_its_order():
    assert NORMS == tuple(KINDS) and all(k == row.key for k, row in KINDS.items())
    assert typing.get_args(field_types(TransformerConfig)["norm"]) == NORMS


@pytest.mark.parametrize("key", NORMS)
def test_every_kind_builds_its_module_and_counts_its_parameters(key):
    kind = KINDS[key]
    for size, bias, attn in ((6, None, False), (8, True, True), (5, False, True)):
        cfg = _config(kind, bias=bias)
        m = make_norm(cfg, size, attn=attn)
        if kind.identity:
            assert m is None and kind.params(cfg, size) == 0
            continue
        assert type(m) is kind.module
        assert sum(p.numel() for p in m.parameters()) == kind.params(cfg, size)
        assert norm_params(cfg, size) == kind.params(cfg, size)
        assert getattr(m, "eps", None) == kind.eps  # the row's eps is the module's default
        y = m(torch.randn(3, 4, size))  # (B, T, C): a causal BatchNorm needs the T axis
        assert y.shape == (3, 4, size) and torch.isfinite(y).all()


@pytest.mark.parametrize("key", NORMS)
def test_every_kind_counts_the_buffers_that_grow_with_max_seq_len(key):
    kind = KINDS[key]
    for causal in (True, False):
        short = _config(kind, batchnorm_causal=causal, max_seq_len=16)
        long = dataclasses.replace(short, max_seq_len=48)
        numel = [
            0 if (m := make_norm(c, 8)) is None else sum(b.numel() for b in m.buffers())
            for c in (short, long)
        ]
        assert numel[1] - numel[0] == kind.position_buffers(short) * (48 - 16) * 8
        assert kind.position_buffers(short) == kind.position_buffers(long)


@pytest.mark.parametrize("key", NORMS)
def test_every_kind_reads_exactly_its_options(key):
    kind = KINDS[key]
    every = {o for row in KINDS.values() for o in row.options}
    assert every <= set(CHANGED), "a value for each option in CHANGED"
    base = _config(kind)
    for option in sorted(CHANGED):  # the listed ones, and those a row may read unlisted
        changed = copy.copy(base)
        setattr(changed, option, CHANGED[option])  # past the config's checks of combinations
        differs = any(_built(base, 8, a) != _built(changed, 8, a) for a in (False, True))
        assert differs == (option in kind.options), (key, option)


@pytest.mark.parametrize("key", NORMS)
def test_options_only_some_kinds_read_are_rejected_elsewhere(key):
    kind = KINDS[key]
    for option, value in (("norm_offset", 1.0), ("norm_memory_efficient", True)):
        if option in kind.options:
            assert getattr(_config(kind, **{option: value}), option) == value
        else:
            with pytest.raises(ValueError, match=f"{option}=\\S+ applies to .*, not norm="):
                _config(kind, **{option: value})


def test_help_texts_come_from_the_table():
    meta = {f.name: f.metadata for f in dataclasses.fields(TransformerConfig)}
    for kind in KINDS.values():
        assert f"{kind.key} ({kind.description})" in meta["norm"]["help"]
        if kind.eps is not None:
            assert f"{kind.key} {kind.eps:.0e}".replace("e-0", "e-") in meta["eps"]["help"]


def test_models_md_documents_every_kind_as_the_table_has_it():
    text = (DOCS / "models.md").read_text()
    table = re.search(r"\| kind \| module \| what it is \| reads \| default eps \|\n\|[-|]+\|\n"
                      r"((?:\|.*\n)+)", text)  # fmt: skip
    assert table, "docs/models.md: the table of norm kinds"
    rows = [[c.strip() for c in r.strip("|").split("|")] for r in table.group(1).splitlines()]
    assert [r[0] for r in rows] == [f"`{k}`" for k in NORMS]
    for (_, module, what, reads, eps), kind in zip(rows, KINDS.values(), strict=True):
        assert module == (f"`{kind.module.__name__}`" if kind.module else "—"), kind.key
        assert what == kind.description, kind.key
        assert re.findall(r"`(\w+)`", reads) == list(kind.options), kind.key
        shown = f"{kind.eps:.0e}".replace("e-0", "e-") if kind.eps is not None else "—"
        assert eps == shown, kind.key
