"""A study with a sequential design run end to end (tiny models): it trains the looks its
claim needs and no more, ``--redecide`` decides its stored runs alike, and a fixed design run
into the same directory with ``--resume`` reuses every run under its key."""

import json

from normlab.lab.cli import main

SPEC = """
name = "seq"
{sequential}
[base]
steps = 2
batch_size = 2
seq_len = 8
eval_batches = 1
[base.model]
dim = 8
n_layers = 1
n_heads = 1
max_seq_len = 8
[[arms]]
name = "base"
[[claims]]
name = "far"
statement = "the loss is above 100 (one recipe against a bar: no rate check)"
source = "a test"
rule = "contrast"
terms = [[1, "base", "final_val_loss"]]
expect = ">0"
delta = 100
seeds = 6
"""
SEQUENTIAL = '[sequential]\nbatch = 2\nspending = "pocock"'


def _lines(out):
    return (out / "results.jsonl").read_text().splitlines()


def test_a_sequential_study_trains_its_looks_and_reuses_them(tmp_path, capsys):
    spec, out = tmp_path / "seq.toml", tmp_path / "out"
    spec.write_text(SPEC.format(sequential=SEQUENTIAL))
    argv = ["study", "--spec", str(spec), "--out", str(out), "--workers", "1", "--quiet"]
    assert main(argv) == 0
    # far below δ after the first look's two seeds: it stops there
    (claim,) = json.loads((out / "claims.json").read_text())["claims"]
    assert claim["verdict"] == "does not hold" and claim["n"] == 2
    assert claim["sequential"] == claim["sequential"] | {"look": 1, "looks": 3, "stopped": True}
    assert len(_lines(out)) == 2
    decided = (out / "claims.json").read_bytes()
    assert main(["study", "--redecide", str(out), "--quiet"]) == 0
    assert (out / "claims.json").read_bytes() == decided
    # the same claim in a fixed design: its six seeds, the first two reused
    spec.write_text(SPEC.format(sequential=""))
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 0
    assert len(_lines(out)) == 6
    (fixed,) = json.loads((out / "claims.json").read_text())["claims"]
    assert fixed["n"] == 6 and "sequential" not in fixed
