"""advise's TOML writer: what it writes reads back as the same data, with its comments."""

from __future__ import annotations

import math

import pytest

from normlab.lab.advise.toml_writer import dumps, value

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib


def test_what_it_writes_reads_back_as_the_same_data():
    doc = {
        "name": 'a "quoted" name\nover two lines, tab\t, DEL \x7f, é',
        "n": 3,
        "x": 1e-05,
        "big": 1e300,
        "neg": -0.5,
        "flag": False,
        "xs": [1, 2.5, "s", [True, []]],
        "inline": {"a": 1},
        "odd key": 1,
        "base": {"lr": 0.001, "model": {"dim": 16, "norm": "rmsnorm"}, "empty": {}},
        "arms": [
            {"name": "recipe"},
            {"name": "x", "model": {"qk_norm": True}, "axes": {"lr": [0.003, 0.01]}},
            {"name": "y", "table list": [{"a": 1}, {"b": "c"}]},
        ],
    }
    text = dumps(doc)
    assert tomllib.loads(text) == doc
    assert "[base.model]" in text and text.count("[[arms]]") == 3
    assert "model = { qk_norm = true }" in text  # inside an array of tables: inline
    assert '"odd key" = 1' in text


def test_non_finite_floats():
    got = tomllib.loads(dumps({"a": math.inf, "b": -math.inf, "c": math.nan}))
    assert got["a"] == math.inf and got["b"] == -math.inf and math.isnan(got["c"])


def test_comments_go_where_their_paths_say():
    doc = {"name": "s", "base": {"lr": 0.001}, "arms": [{"name": "a"}, {"name": "b"}]}
    comments = {
        ("base",): "the base\nover two lines",
        ("base", "lr"): "why this lr",
        ("arms", 1): "the second arm",
    }
    text = dumps(doc, header="line one\n\nline three", comments=comments)
    assert text.startswith('# line one\n#\n# line three\n\nname = "s"\n')
    assert "\n# the base\n# over two lines\n[base]\nlr = 0.001  # why this lr\n" in text
    assert '\n# the second arm\n[[arms]]\nname = "b"\n' in text
    assert tomllib.loads(text) == doc
    with pytest.raises(ValueError, match="one line"):
        dumps(doc, comments={("base", "lr"): "two\nlines"})


def test_a_value_without_a_toml_form_is_refused():
    with pytest.raises(TypeError, match="no TOML form"):
        value(None)
