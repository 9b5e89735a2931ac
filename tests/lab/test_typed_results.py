"""A run's result and a study's ``study.json`` cross processes and files as dicts and are typed
everywhere else (``RunResult``, ``StudyMeta``): no module but the one that serializes each reads
them by key, so a misspelt field is an ``AttributeError`` where it is written, not a ``None``
(a missing value) that every seed then carries into an inconclusive verdict."""

import ast
import dataclasses
from pathlib import Path

from normlab.lab.study.run.study_json import StudyMeta
from normlab.lab.train.result import RunResult

SRC = Path(__file__).resolve().parents[2] / "src" / "normlab"
RESULT_KEYS = {f.name for f in dataclasses.fields(RunResult)}
META_KEYS = {f.name for f in dataclasses.fields(StudyMeta)}

# The modules that read them by key, and why each may.
SERIALIZERS = {
    "lab/train/result.py": "RunResult.to_dict and from_dict",
    "lab/study/run/store.py": "results.jsonl: each line checked before its result is rebuilt",
    "lab/study/run/study_json.py": "study.json: StudyMeta.to_dict and from_dict",
    "lab/train/dist_trainer.py": "its checkpoint stores the config and a result's history",
}


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    return node.attr if isinstance(node, ast.Attribute) else ""


def reads_by_key(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, key)`` of each ``x["key"]``, ``x.get("key")`` (``pop``, ``setdefault``) in ``tree``
    that reads a result field from any ``x``, or a study.json field from a ``meta``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            target, key = node.value, node.slice
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("get", "pop", "setdefault")
            and node.args
        ):
            target, key = node.func.value, node.args[0]
        else:
            continue
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
            continue
        is_meta = _name(target).endswith("meta") and key.value in META_KEYS
        if key.value in RESULT_KEYS or is_meta:
            out.append((node.lineno, key.value))
    return out


def test_the_check_finds_each_way_of_reading_by_key():
    code = 'r["summary"]; r.get("probes", {}); res.pop("status"); result.meta["plateau_h"]\n'
    code += 'meta.get("seed_block", 0); node.meta["val"]; doc["plateau_h"]; x["name"]'
    assert [k for _, k in reads_by_key(ast.parse(code))] == [
        "summary", "probes", "status", "plateau_h", "seed_block"
    ]  # fmt: skip


def test_no_result_or_metadata_is_read_by_key_outside_the_module_that_serializes_it():
    offenders = [
        f"src/normlab/{rel}:{line}: [{key!r}]"
        for path in sorted(SRC.rglob("*.py"))
        if (rel := path.relative_to(SRC).as_posix()) not in SERIALIZERS
        for line, key in reads_by_key(ast.parse(path.read_text("utf-8")))
    ]
    assert not offenders, "read a field, not a key (RunResult, StudyMeta):\n" + "\n".join(offenders)


def test_the_serializers_named_exist():
    assert all((SRC / rel).is_file() for rel in SERIALIZERS)
