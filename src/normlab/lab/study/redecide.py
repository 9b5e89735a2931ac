"""Decide a finished study again without training: its runs from ``DIR/results.jsonl``, its H
and timing rounds from ``DIR/study.json`` (nothing is re-timed), its claims from the preset
(or spec file) that ran it, with the overrides it recorded. ``normlab study --redecide DIR``
then rewrites ``claims.json`` and the reports; ``study.json`` and the results stay as they are.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from normlab.lab.common import UsageError
from normlab.lab.study.claims import decide_all
from normlab.lab.study.design import Study
from normlab.lab.study.runner import StudyResult


def load_meta(out: Path) -> dict:
    path = out / "study.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UsageError(f"--redecide {out}: cannot read {path} ({e})") from e


def study_of(meta: dict, spec_file: str | None = None) -> Study:
    """The study that wrote ``meta``: ``spec_file`` if given, else the built-in preset it names,
    with the ``--set`` overrides it recorded."""
    from normlab.lab.study import spec

    sets = list(meta.get("overrides") or [])
    if spec_file:
        return spec.load_spec(spec_file, sets)
    name = meta.get("preset")
    if name not in spec.builtin_names():
        raise UsageError(
            f"--redecide: the study was run from a spec file ({name!r} is not a built-in "
            "preset); pass that file with --spec FILE"
        )
    return spec.load_builtin(name, sets)


def _resolved(study: Study, meta: dict, device: str | None, precision: str | None) -> Study:
    """``study`` on the device it ran on (an arm's ``auto``: the recorded device, not this
    machine's) in ``precision``, so its runs' keys are those the study wrote."""
    ran_on = (meta.get("environment") or {}).get("device", "cpu")
    arms = []
    for a in study.arms:
        dev = device or a.config.device
        dev = ran_on if dev == "auto" else dev
        cfg = a.config.replace(device=dev, precision=precision or a.config.precision)
        arms.append(replace(a, config=cfg))
    return replace(study, arms=tuple(arms))


def redecide(
    out: Path,
    *,
    spec_file: str | None = None,
    device: str | None = None,
    precision: str | None = None,
) -> StudyResult:
    """The verdicts of the finished study in ``out``, from its recorded runs and timings.
    ``device``/``precision``: what the study was run with (``--device``/``--precision``), when
    not the spec's own; its runs are found by the same keys it wrote them under."""
    from normlab.lab.study.store import ResultStore, run_key

    meta = load_meta(out)
    study = _resolved(study_of(meta, spec_file), meta, device, precision)
    records = ResultStore(out / "results.jsonl").load()
    sha = meta["corpus"]["sha256"]
    results: dict[str, dict[int, dict]] = {}
    runs = study.runs(meta.get("seed_block", 0))
    for r in runs:
        rec = records.get(run_key(r.config, sha))
        if rec is not None:
            results.setdefault(r.arm, {})[r.index] = rec["result"]
    found = sum(map(len, results.values()))
    if not found:
        raise UsageError(
            f"--redecide {out}: none of the study's {len(runs)} runs is in results.jsonl (a "
            "different spec, --set, --device or --precision than the study ran with?)"
        )
    verdicts = decide_all(study, results, meta["plateau_h"], meta.get("timings") or {})
    missing = [r.label for r in runs if r.index not in results.get(r.arm, {})]
    shown = {**meta, "decided_again": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    return StudyResult(study, results, verdicts, shown, missing)
