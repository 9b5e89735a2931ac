"""A rule kind is one place: a dataclass in a ``rules_*.py`` module and a row of ``RULES``. A toy
kind defined here runs a whole study (spec, decisions, report, plots) with nothing else told about
it, and no module outside the rules' modules asks which kind a rule is."""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest

from normlab.lab.cli import main
from normlab.lab.study.decide.measures import MEASURES
from normlab.lab.study.decide.rules import RULES
from normlab.lab.study.decide.rules_protocol import ARM, SEEDS, OnePartRule, Rule
from normlab.lab.study.decide.stats import Context, Results
from normlab.lab.study.spec.parse import SpecError, parse_spec
from normlab.lab.verdict import Seeds, Verdict, Word, decide_rows

SRC = Path(__file__).resolve().parents[4] / "src" / "normlab" / "lab"


@dataclass(frozen=True)
class Below(OnePartRule):
    """Toy: ``arm``'s final validation loss is below ``bar``, per seed ``v = bar − loss``."""

    arm: str = field(metadata=ARM)
    seeds: int = field(metadata=SEEDS)
    bar: float = 10.0  # no metadata: read by its type, as a config field is
    delta: ClassVar[float] = 0.0

    def arms(self) -> tuple[str, ...]:
        return (self.arm,)

    def describe(self) -> str:
        return f"per seed, v = {self.bar:g} − final_val_loss[{self.arm}]; holds if above 0."

    def decide(self, results: Results, ctx: Context) -> Verdict:
        seeds = Seeds.of(results, self.arms())
        loss = MEASURES["final_val_loss"].read
        rows = [(self.bar - loss(results[self.arm][i], None),) * 2 for i in seeds.paired]
        status, why, est = decide_rows(">0", rows, self.delta, ctx.level)
        return Verdict(status, why, est, seeds=seeds)


SPEC = """
name = "toy"

[base]
steps = 6
batch_size = 2
seq_len = 8
eval_batches = 1

[base.model]
dim = 16
n_layers = 1
n_heads = 2
max_seq_len = 8

[[arms]]
name = "rms"

[[arms]]
name = "ln"
model = { norm = "layernorm" }

[[claims]]
name = "below"
statement = "rms ends below 10 nats"
rule = "below"
arm = "rms"
seeds = 2

[[claims]]
name = "some-below"
statement = "one of them ends below 10 nats"
rule = "any_of"
seeds = 2
[[claims.parts]]
label = "ln"
rule = "below"
arm = "ln"
bar = 11
[[claims.parts]]
label = "rms"
rule = "below"
arm = "rms"
controls = ["ln"]
"""


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(RULES, "below", Below)


def test_the_spec_builds_a_new_kind_from_its_fields(toy):
    study = parse_spec(SPEC, "toy.toml")
    assert study.claims[0].rule == Below("rms", 2)
    assert [r for _, r in study.claims[1].rule.parts()][0] == Below("ln", 2, bar=11.0)
    with pytest.raises(SpecError, match=r"toy.toml: claims\[0\].bar: expected a number"):
        parse_spec(SPEC.replace('seeds = 2\n\n[[claims]]', 'seeds = 2\nbar = "x"\n\n[[claims]]', 1),
                   "toy.toml")  # fmt: skip
    with pytest.raises(SpecError, match=r"claims\[0\].arm: missing \(required by the rule"):
        parse_spec(SPEC.replace('arm = "rms"\nseeds = 2\n\n', "seeds = 2\n\n", 1), "toy.toml")


def test_a_toy_rule_kind_runs_a_whole_study(toy, tmp_path):
    path, out = tmp_path / "toy.toml", tmp_path / "out"
    path.write_text(SPEC)
    assert main(["study", "--spec", str(path), "--out", str(out), "--quiet", "--workers", "1"]) == 0
    claims = {c["name"]: c for c in json.loads((out / "claims.json").read_text())["claims"]}
    assert claims["below"]["verdict"] == Word.HOLDS and claims["below"]["n"] == 2
    assert claims["below"]["rule"].startswith("per seed, v = 10 − final_val_loss[rms]")
    assert [p["part"] for p in claims["some-below"]["parts"]] == ["ln", "rms"]
    assert claims["some-below"]["verdict"] == Word.HOLDS
    assert "below" in (out / "report.md").read_text()


def _asks_for_a_kind(node: ast.AST, kinds: set[str]) -> bool:
    """``isinstance(x, Kind)``, ``issubclass``, ``type(x) is Kind``, or a kind's name compared."""
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    attrs = {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("isinstance", "issubclass"):
        return bool((names | attrs) & kinds)
    if isinstance(node, ast.Compare):
        strings = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant)}
        # a kind's class by name, or its spec name as a string (a local called ``fails`` is not)
        return bool((names | attrs) & kinds or strings & set(RULES)) or "__name__" in attrs
    return False


# A kind's own fields and names (those no other kind has): the ``Rule`` protocol's members and
# the fields every rule kind has are not a kind's.
PROTOCOL = {*Rule.__annotations__, *vars(Rule), *vars(OnePartRule), "arm", "rule"}
OWN = {
    n
    for cls in RULES.values()
    for n in [*cls.__dataclass_fields__, *vars(cls)]
    if not n.startswith("__")
} - PROTOCOL


def _probes_a_kind(node: ast.AST) -> bool:
    """``hasattr(rule, "fast")``, ``getattr(claim.rule, "terms", ...)``: a rule (a name ``rule``
    or ``r``, or ``….rule``) probed for a field of its kind."""
    if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("hasattr", "getattr")):
        return False
    if len(node.args) < 2 or not isinstance(node.args[1], ast.Constant):
        return False
    obj = node.args[0]
    is_rule = getattr(obj, "id", None) in ("rule", "r") or getattr(obj, "attr", None) == "rule"
    return is_rule and node.args[1].value in OWN


def test_nothing_outside_rules_asks_which_kind_a_rule_is():
    kinds = {cls.__name__ for cls in RULES.values()} | {"Controlled", "OnePartRule"}
    assert all(
        cls.__module__.startswith("normlab.lab.study.decide.rules") for cls in RULES.values()
    )
    assert {"fast", "stable", "terms", "const_h", "formula", "what"} <= OWN
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path.name.startswith("rules") and path.parent.name == "decide":
            continue
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if _asks_for_a_kind(node, kinds) or _probes_a_kind(node):
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not found


def test_the_probe_check_sees_what_words_did():
    probes = 'hasattr(rule, "fast")', 'getattr(claim.rule, "terms", ())', 'getattr(r, "const_h")'
    for code in probes:
        assert _probes_a_kind(ast.parse(code).body[0].value), code
    for code in ('getattr(rule, "delta")', 'getattr(model, "fast")', "getattr(rule, name)"):
        assert not _probes_a_kind(ast.parse(code).body[0].value), code
