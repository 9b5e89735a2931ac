"""``normlab study --register``: today's fingerprints of every covered preset claim's design,
statement's test plan and published finding's design, held against the registry
(``registry``), and the changed ones stamped as fixed now."""

from __future__ import annotations

from pathlib import Path

from normlab.lab.kit.io import UTC
from normlab.lab.kit.reading import read_json
from normlab.lab.study.published.coverage import load
from normlab.lab.study.published.registry import Data, Registry, plan_fingerprint
from normlab.lab.study.spec.fingerprint import claim_design, fingerprint


def current(docs: Path) -> dict[str, dict[str, str]]:
    """Today's fingerprints: each covered preset claim's design and each published finding's
    (``designs``), each statement's plan (``plans``)."""
    from normlab.lab.study.spec import load_builtin

    cat = load()
    designs = {}
    for preset in cat.reports:
        study = load_builtin(preset, whole=True)
        for c in study.claims:
            designs[f"{preset}:{c.name}"] = fingerprint(claim_design(study, c))
    for command, where in cat.findings.items():
        path = docs / where["data"]
        for f in read_json(path) if path.is_file() else []:
            if "design" in f:
                designs[f"{command}:{f['name']}"] = fingerprint(f["design"])
        for name, design in planned(command).items():  # fixed before its first data
            designs.setdefault(f"{command}:{name}", fingerprint(design))
    return {"designs": designs, "plans": {s.id: plan_fingerprint(s) for s in cat.statements}}


def planned(command: str) -> dict[str, dict]:
    """The designs of a findings command that fixes them in code before it runs (``normlab
    vision``, ``normlab bench --findings``), by finding name: registered before their first data,
    so their first published verdicts can be confirmatory (a published design takes precedence)."""
    if command == "vision":
        from normlab.lab.vision.cnn_findings import Plan

        return Plan().designs()
    if command == "bench":
        from normlab.lab.bench.cost_findings import all_findings

        return {f.name: f.design() for f in all_findings()}
    return {}


def unregistered(reg: Registry, docs: Path) -> list[str]:
    """Every design or plan whose fingerprint today is not its latest registered version."""
    return [
        f"{table} {key}"
        for table, prints in current(docs).items()
        for key, fp in prints.items()
        if not getattr(reg, table).get(key) or getattr(reg, table)[key][-1].fingerprint != fp
    ]


def register(docs: Path, when: str, commit: str) -> list[str]:
    """Stamp every changed design and plan as fixed at ``when`` on top of ``commit`` (the
    registering commit holds the change), and each published study's data not yet registered
    (``began``: when its runs began); what was stamped, in words."""
    reg = Registry.read(docs)
    done = []
    for table, prints in current(docs).items():
        for key, fp in prints.items():
            if reg.stamp(table, key, fp, when, commit):
                done.append(f"{table} {key}")
    for command, found in _findings_data(docs).items():
        if reg.data.get(command) != found:
            reg.data[command] = found
            done.append(f"data {command}")
    for path in sorted(docs.glob("data/*/study.json")):
        if path.parent.name not in reg.data:
            from normlab.lab.study.run.study_json import StudyMeta

            meta = StudyMeta.from_dict(read_json(path), str(path))
            began = meta.began or _earliest(meta)
            reg.data[path.parent.name] = Data(
                meta.preset, meta.seed_block, began, meta.code["commit"]
            )
            done.append(f"data {path.parent.name}")
    reg.write(docs)
    return done


def _earliest(meta) -> str:
    """When a study without ``began`` began at the latest: its finish less its wall time (a
    resumed study's runs may be older: its ``began`` records the first start)."""
    from datetime import datetime, timedelta, timezone

    end = datetime.strptime(meta.finished, "%Y-%m-%d %H:%M:%S UTC").replace(tzinfo=timezone.utc)
    return (end - timedelta(seconds=float(meta.wall_s))).strftime(UTC)


def main(docs: str) -> int:
    """``normlab study --register [DOCS]``: stamp what changed, print it."""
    import subprocess
    from datetime import datetime, timezone

    from normlab.lab.kit.errors import UsageError

    root = Path(docs)
    if not (root / "data").is_dir():
        raise UsageError(f"--register {docs}: no {root / 'data'} directory")
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=root
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        head = "uncommitted"
    done = register(root, datetime.now(timezone.utc).strftime(UTC), head)
    print("\n".join(f"registered {d}" for d in done) or "nothing changed since the registry")
    return 0


def _findings_data(docs: Path) -> dict[str, Data]:
    """Each published findings file's data (its seed block, when it began, from the entries
    that record it: ``began`` and ``seed_block``), where every entry records both; a file
    whose entries were measured apart (some record ``began``, some not) registers each that
    does on its own, as ``command:name`` (a timing has no seed block: each is its own data)."""
    out = {}
    for command, where in load().findings.items():
        path = docs / where["data"]
        entries = read_json(path) if path.is_file() else []
        began = {e.get("began") for e in entries}
        blocks = {e.get("seed_block") for e in entries}
        if entries and None not in began and len(blocks) == 1:
            out[command] = Data(command, blocks.pop(), min(began), "recorded in the file")
            continue
        for e in entries:
            if e.get("began") is not None:
                ref = f"{command}:{e['name']}"
                out[ref] = Data(ref, e.get("seed_block", 0), e["began"], "recorded in the file")
    return out
