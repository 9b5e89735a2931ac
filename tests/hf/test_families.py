"""normlab.hf.families, the one table of Hugging Face model families, held against the installed
transformers: every row's classes, eps attribute and config defaults exist as the row says, and
every row has its test in tests/hf/test_patching.py."""

from __future__ import annotations

import importlib

import pytest
import torch

from normlab.hf.families import BY_NORM_CLASS, BY_PACKAGE, FAMILIES

transformers = pytest.importorskip("transformers")

RMS_ROWS = [k for k, f in FAMILIES.items() if f.norm == "rmsnorm"]


def _modeling(package: str):
    return importlib.import_module(f"transformers.models.{package}.modeling_{package}")


def test_every_row_has_its_hf_test():
    from test_patching import FAMILIES as TESTED

    assert {f.package for f in FAMILIES.values()} <= set(TESTED)


@pytest.mark.parametrize("model_type", RMS_ROWS)
def test_rmsnorm_rows_name_real_classes_and_eps_attributes(model_type):
    fam = FAMILIES[model_type]
    mod = _modeling(fam.package)
    norm = mod.__dict__[fam.norm_class](8, eps=1e-5)
    assert getattr(norm, fam.eps_attr) == 1e-5
    # the offset: Gemma's weight starts at 0 (gain 1 + w), the others' at 1
    assert torch.all(norm.weight == 1.0 - fam.offset)
    assert hasattr(mod, f"{fam.prefix}DecoderLayer")
    assert BY_NORM_CLASS[fam.norm_class] is fam and BY_PACKAGE[fam.package] is fam


def _class_default(cfg, key: str):
    """``key`` of a config class instance, where transformers 5.x keeps it."""
    if hasattr(cfg, key):
        return getattr(cfg, key)
    rope = getattr(cfg, "rope_parameters", None) or {}
    if key in rope:  # rope_theta, partial_rotary_factor
        return rope[key]
    if key == "hidden_activation":  # GemmaConfig 5.x has hidden_act alone, with that value
        return cfg.hidden_act
    raise AttributeError(key)


@pytest.mark.parametrize(
    "model_type",
    list(FAMILIES),
)
def test_config_defaults_are_the_config_class_defaults(model_type):
    fam = FAMILIES[model_type]
    cfg = getattr(transformers, fam.config_class)()
    assert cfg.model_type == model_type
    assert bool(cfg.tie_word_embeddings) == fam.tie_default
    want = {fam.keys["eps"]: fam.eps_default, **fam.defaults}
    if want.get("num_key_value_heads", 0) is None:  # null: one K/V head per query head
        want["num_key_value_heads"] = cfg.num_attention_heads
    if not want.get("use_sliding_window", True):  # the class nulls a window that is off
        del want["sliding_window"]
    got = {key: _class_default(cfg, key) for key in want}
    assert got == want
