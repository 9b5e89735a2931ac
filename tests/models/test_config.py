"""The config fields as one typed table: a field's choices are its ``Literal`` type (the public
tuples are its values), checked once for every such field; the lab's own table of them
(``NOT_IN_SPEC``, ``NO_OPTION``) names real fields; one coercer reads a value from a spec's TOML
and from ``normlab train``'s command line."""

import argparse
import dataclasses
import typing

import pytest

from normlab.lab.commands.train import add_arguments, config_from_args
from normlab.lab.train.config import SCHEDULES, TrainConfig
from normlab.lab.train.device import DEVICES, PRECISIONS
from normlab.lab.train.fields import NO_OPTION, NOT_IN_SPEC, Expected, coerce
from normlab.models import TransformerConfig
from normlab.models.config import (
    ARCHS,
    INITS,
    NORM_BACKENDS,
    NORMS,
    PLACEMENTS,
    RMS_CASTINGS,
    field_types,
)

LITERALS = {
    (TransformerConfig, "norm"): NORMS,
    (TransformerConfig, "placement"): PLACEMENTS,
    (TransformerConfig, "arch"): ARCHS,
    (TransformerConfig, "init"): INITS,
    (TransformerConfig, "norm_backend"): NORM_BACKENDS,
    (TrainConfig, "schedule"): SCHEDULES,
    (TrainConfig, "device"): DEVICES,
    (TrainConfig, "precision"): PRECISIONS,
}


def _model(**kw) -> TransformerConfig:
    return TransformerConfig(256, 16, 2, 2, **kw)


def _set(cls: type, name: str, value):
    if cls is TransformerConfig:
        return _model(**{name: value})
    return TrainConfig(model=_model(), **{name: value})


@pytest.mark.parametrize(("cls", "name"), list(LITERALS))
def test_a_literal_field_takes_its_values_and_names_them_when_refusing(cls, name):
    values = LITERALS[cls, name]
    assert typing.get_args(field_types(cls)[name]) == values
    assert getattr(_set(cls, name, values[-1]), name) == values[-1]
    with pytest.raises(ValueError) as e:
        _set(cls, name, "nope")
    assert str(e.value) == f"{name} must be one of {values}, got 'nope'"


def test_an_optional_literal_and_the_bool_fields_are_checked_by_their_types():
    assert _model(rms_casting=None).rms_casting is None
    with pytest.raises(ValueError, match=r"rms_casting must be None or one of \('llama'"):
        _model(rms_casting="mistral")
    assert RMS_CASTINGS == typing.get_args(
        typing.get_args(field_types(TransformerConfig)["rms_casting"])[0]
    )
    with pytest.raises(TypeError, match="qk_norm must be a bool, got 1"):
        _model(qk_norm=1)
    with pytest.raises(TypeError, match="bias must be a bool or None, got 'yes'"):
        _model(bias="yes")
    with pytest.raises(TypeError, match="eval_serving must be a bool, got 0"):
        TrainConfig(model=_model(), eval_serving=0)


def test_the_labs_field_table_names_fields_and_the_library_carries_only_help():
    names = {f.name for c in (TrainConfig, TransformerConfig) for f in dataclasses.fields(c)}
    assert set(NOT_IN_SPEC) | set(NO_OPTION) <= names
    for cls in (TrainConfig, TransformerConfig):
        assert all(set(f.metadata) == {"help"} for f in dataclasses.fields(cls))


@pytest.mark.parametrize(
    ("hint", "toml", "word", "value"),
    [
        (int, 5, "5", 5),
        (float, 1, "1", 1.0),
        (bool, True, "true", True),
        (str, "pre", "pre", "pre"),
        (float | None, 0.5, "0.5", 0.5),
        (field_types(TransformerConfig)["placement"], "post", "post", "post"),
        (tuple[float, float], [0.9, 0.95], None, (0.9, 0.95)),
    ],
)
def test_one_coercer_reads_toml_and_the_command_line(hint, toml, word, value):
    assert coerce(hint, toml) == value and type(coerce(hint, toml)) is type(value)
    if word is not None:
        assert coerce(hint, word, text=True) == value


def test_the_coercers_refusals():
    refused = [(int, "5", "an int"), (float, True, "a number"), (bool, 1, "true or false")]
    for hint, v, what in [*refused, (tuple[float, float], [1.0], "a list of 2 numbers")]:
        with pytest.raises(Expected, match=what):
            coerce(hint, v)
    assert coerce(int | None, "none", text=True) is None
    with pytest.raises(ValueError, match="expected an int within 64 bits"):
        coerce(int, "1" + "0" * 30, text=True)
    with pytest.raises(ValueError, match="expected a finite number, got inf"):
        coerce(float, "inf", text=True)


def test_train_options_are_read_by_the_coercer(capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    argv = ["--rms-casting", "gemma", "--bias", "none", "--betas", "0.8", "0.9"]
    args = parser.parse_args([*argv, "--eval-lengths", "4", "8", "--placement", "post"])
    cfg = config_from_args(args)
    assert (cfg.model.rms_casting, cfg.model.bias, cfg.model.placement) == ("gemma", None, "post")
    assert (cfg.betas, cfg.eval_lengths) == ((0.8, 0.9), (4, 8))
    for flag, word, says in (
        ("--bias", "maybe", "expected true or false, got 'maybe'"),
        ("--placement", "side", "invalid choice: 'side'"),
    ):
        with pytest.raises(SystemExit):
            parser.parse_args([flag, word])
        assert f"argument {flag}: {says}" in capsys.readouterr().err
