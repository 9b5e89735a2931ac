"""The design a study ran, as ``study.json`` records it, and the study rebuilt from that record.

A preset changes between commits: deciding an old study's runs with today's preset counts the
runs it never had as missing and judges claims it never made. So a study stores the spec's text
as it read it with the ``--set`` overrides it applied (the two rebuild the same ``Study``), the
``--device``/``--precision`` it ran with (its runs' keys depend on them), and the code that ran
it; ``normlab study --redecide`` rebuilds the study from that record, or from ``--spec FILE``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from normlab.lab.kit.errors import UsageError
from normlab.lab.study.run.study_json import StudyMeta
from normlab.lab.study.spec import Study


def record(study: Study, device: str | None, precision: str | None) -> dict:
    """What ``study.json`` stores of ``study``'s design (``device``/``precision``: the command's
    ``--device``/``--precision``, None where the spec's own)."""
    return {
        "spec": study.spec_text,
        "overrides": list(study.overrides),  # normlab study --set KEY=VALUE
        "run_with": {"device": device, "precision": precision},
        "code": code_version(),
    }


def code_version() -> dict:
    """normlab's version and, when it runs from a git checkout, the commit and whether the
    package's files differ from it (a study run on uncommitted code names the commit it started
    from, marked modified)."""
    import normlab

    where = Path(normlab.__file__).parent
    commit = _git(where, "rev-parse", "HEAD")
    # Installed into some other project's repository (a virtual environment inside it), the
    # package's files are not tracked there and that repository's commit says nothing.
    tracked = commit is not None and _git(where, "ls-files", "--error-unmatch", "__init__.py")
    out: dict = {"version": normlab.__version__}
    if tracked and re.fullmatch(r"[0-9a-f]{40}", commit):
        changed = _git(where, "status", "--porcelain", "--untracked-files=no", "--", ".")
        out.update(commit=commit, modified=bool(changed))
    return out


def _git(where: Path, *args: str) -> str | None:
    try:
        p = subprocess.run(
            ["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def study_of(meta: StudyMeta, source: str, spec_file: str | None = None) -> Study:
    """The study that wrote ``meta`` (``source``: where ``meta`` was read, for messages): from
    ``spec_file`` if given, else from the spec text it stores; with the ``--set`` overrides it
    recorded either way."""
    from normlab.lab.study.spec import parse as spec

    sets = list(meta.overrides)
    if spec_file:
        return spec.load_spec(spec_file, sets)
    text = meta.spec
    if not isinstance(text, str) or not text.strip():
        raise UsageError(
            f"--redecide: {source} stores no spec (a study from before studies stored theirs); "
            "pass the spec it ran with: --spec FILE (a preset's: --print-spec NAME at its commit)"
        )
    name = "study" if meta.preset is None else meta.preset
    return spec.parse_spec(text, f"{source}: spec", default_name=name, overrides=sets)


def run_with(meta: StudyMeta) -> tuple[str | None, str | None]:
    """The ``--device`` and ``--precision`` the study in ``meta`` ran with (None: not given,
    or not recorded)."""
    return meta.run_with.get("device"), meta.run_with.get("precision")
