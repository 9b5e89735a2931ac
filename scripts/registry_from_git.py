"""Build docs/data/registry.json from the repository's history: when each preset claim's design
and each statement's test plan was first fixed as it is (or was) published, and when each
published study's runs began. Run once, from the repository's root, when the registry was
introduced (#69). From then on the registry is kept by `normlab study --register`, which stamps
a changed design or plan in the commit that changes it and each newly published study's data
(from its study.json's `began`, or a findings file's `began` and `seed_block`); running this
script again would forget those stamps.

    python scripts/registry_from_git.py

A version is registered at the first commit whose file holds it, read with today's spec loader
(a spec version it cannot read registers nothing: a later version's registration stands).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from normlab.lab.study.published.coverage import Statement
from normlab.lab.study.published.registry import Data, Registry, plan_fingerprint
from normlab.lab.study.spec import parse_spec
from normlab.lab.study.spec.fingerprint import claim_design, fingerprint

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

DOCS = Path("docs")
SPECS = ("src/normlab/lab/study/specs", "src/normlab/lab/study/spec/specs")
STATEMENTS = (
    "src/normlab/lab/study/statements.toml",
    "src/normlab/lab/study/published/statements.toml",
)
# Published studies without a study.json: the commit their runs ran at (docs/data/README.md).
RAN_AT = {"paper": "feb256b", "deep": "388c39c"}
# The findings files: the commit that fixed the designs they publish, before their data began.
# numerics: af7122b registered 000 §7's findings before seed block 9's draws (its message says
# so); the other findings' rules were fixed earlier and kept. bench: the measurement published in
# 1c02a3b ran under the rules of its parent; the later edits of bench/findings.py (#63)
# reorganized its code without changing a part (the published designs are today's). inspect:
# its findings' rules were written in its first commit, 5ca6053, before any run (unchanged since).
FINDINGS_FIXED_AT = {"numerics": "af7122b", "bench": "1c02a3b~1", "inspect": "5ca6053"}
FINDINGS = {
    "numerics": "numerics-findings.json",
    "bench": "bench-findings.json",
    "inspect": "inspect-findings.json",
}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def utc(commit: str) -> str:
    when = datetime.fromisoformat(git("show", "-s", "--format=%cI", commit).strip())
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def history(*paths: str) -> list[str]:
    """The commits that touched any of ``paths``, oldest first."""
    return git("log", "--reverse", "--first-parent", "--format=%H", "--", *paths).split()


def show(commit: str, path: str) -> str | None:
    try:
        return git("show", f"{commit}:{path}")
    except subprocess.CalledProcessError:
        return None


def designs(reg: Registry) -> None:
    for commit in history(*SPECS):
        when = utc(commit)
        for d in SPECS:
            names = (
                git("ls-tree", "--name-only", f"{commit}:{d}").split() if show(commit, d) else []
            )
            for name in (n for n in names if n.endswith(".toml")):
                text = show(commit, f"{d}/{name}")
                preset = name.removesuffix(".toml")
                try:
                    study = parse_spec(text, name, default_name=preset)
                except Exception:  # an older format today's loader does not read
                    continue
                for c in study.claims:
                    fp = fingerprint(claim_design(study, c))
                    reg.stamp("designs", f"{preset}:{c.name}", fp, when, commit)


def published_designs(reg: Registry) -> None:
    """A published study's own spec.toml decides its claims: a design found there and in no
    preset's history is registered when that file first held it."""
    for path in sorted(DOCS.glob("data/*/spec.toml")):
        for commit in history(str(path)):
            study = parse_spec(show(commit, str(path)), str(path))
            preset = json.loads(show(commit, str(path.parent / "claims.json")) or "{}").get(
                "preset", study.name
            )
            for c in study.claims:
                key, fp = f"{preset}:{c.name}", fingerprint(claim_design(study, c))
                if not any(e.fingerprint == fp for e in reg.designs.get(key, [])):
                    reg.stamp("designs", key, fp, utc(commit), commit)
                    reg.designs[key].sort(key=lambda e: e.registered)


def plans(reg: Registry) -> None:
    fields = set(Statement.__dataclass_fields__)
    for commit in history(*STATEMENTS):
        text = next(filter(None, (show(commit, p) for p in STATEMENTS)))
        for e in tomllib.loads(text).get("statements", []):
            e = dict(e)
            found = e.pop("finding", ())
            e["findings"] = (found,) if isinstance(found, str) else tuple(found)
            e.update({k: tuple(e.get(k, ())) for k in ("claims", "related", "tests", "parts")})
            s = Statement(**{k: v for k, v in e.items() if k in fields})
            reg.stamp("plans", s.id, plan_fingerprint(s), utc(commit), commit)


def data(reg: Registry) -> None:
    for path in sorted(DOCS.glob("data/*/claims.json")):
        doc = json.loads(path.read_text("utf-8"))
        meta = path.parent / "study.json"
        if meta.is_file():
            commit = json.loads(meta.read_text("utf-8"))["code"]["commit"]
        else:
            commit = git("rev-parse", RAN_AT[path.parent.name]).strip()
        # the runs began after the commit they ran at: its time is the earliest they can be
        reg.data[path.parent.name] = Data(doc["preset"], doc["seed_block"], utc(commit), commit)


def findings(reg: Registry) -> None:
    for command, name in FINDINGS.items():
        fixed = git("rev-parse", FINDINGS_FIXED_AT[command]).strip()
        when = utc(fixed)
        doc = json.loads((DOCS / name).read_text("utf-8"))
        for f in doc:
            reg.stamp("designs", f"{command}:{f['name']}", fingerprint(f["design"]), when, fixed)
        block = doc[0].get("seed_block", 0)
        reg.data[command] = Data(command, block, when, fixed)  # measured after its design


def main() -> None:
    reg = Registry()
    designs(reg)
    published_designs(reg)
    plans(reg)
    data(reg)
    findings(reg)
    reg.write(DOCS)
    n = sum(map(len, reg.designs.values())), sum(map(len, reg.plans.values()))
    print(f"{n[0]} design versions, {n[1]} plan versions, {len(reg.data)} data directories")


if __name__ == "__main__":
    main()
