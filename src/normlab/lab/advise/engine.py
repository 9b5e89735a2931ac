"""The engine of ``normlab advise``: read a Hugging Face decoder's config.json, build a
scaled-down twin that keeps its normalization recipe, set that recipe against the alternatives in
a study (a spec file the user can edit and rerun with ``normlab study --spec``), run it through
the study's runner and write the report, led by the advice.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import unused_name, write_file, write_json
from normlab.lab.kit.reading import ReadError, printable, read_text
from normlab.lab.study.report import write_reports
from normlab.lab.study.run import StudyOptions, StudyResult, run_study, start_anew
from normlab.lab.study.spec.parse import MAX_SPEC_BYTES

SPEC_FILE = "advise-spec.toml"
EXAMPLE = "llama-3.2-1b"  # the shipped example an error names (docs/advise.md runs it)
PATH_MAX = 1000  # characters of a path in a command an error tells to type
_CONFIGS = resources.files("normlab.lab.advise").joinpath("configs")


def shipped_configs() -> list[str]:
    """The example config.json files shipped in the package (configs/)."""
    return sorted(p.name for p in _CONFIGS.iterdir() if p.name.endswith(".json"))


def example_names() -> str:
    """The shipped examples' names, as a user types them."""
    return ", ".join(n.removesuffix(".json") for n in shipped_configs())


def shipped_config(name: str) -> str:
    """The path of a shipped example config (e.g. ``llama-3.2-1b.json``)."""
    return str(_CONFIGS.joinpath(name))


def config_path(given: str) -> str:
    """The config.json ``given`` names, as a user would write it: a file, a model directory
    (its ``config.json``, as Hugging Face saves a model), or a shipped example's name with or
    without ``.json``; else a UsageError that says what to type."""
    path = Path(given)
    if path.is_dir():
        if (path / "config.json").is_file():
            return str(path / "config.json")
        raise UsageError(
            f"{printable(given)} is a directory without a config.json: give the model's "
            f"directory as saved by save_pretrained, or its config, e.g. normlab advise "
            f"{printable(str(path / 'config.json'), PATH_MAX)}"  # the command whole
        )
    if os.path.lexists(path):
        return given  # a file (or what stands for one): read_json says what is wrong with it
    for name in (given, f"{given}.json"):
        if name in shipped_configs():
            return shipped_config(name)
    raise UsageError(
        f"{printable(given)}: no such file, model directory or shipped example; type normlab "
        f"advise path/to/config.json (or the directory holding it), or an example: normlab "
        f"advise {EXAMPLE} (examples: {example_names()})"
    )


@dataclass
class Plan:
    """A config read, its twin built and its study written as text, before anything runs."""

    twin: object  # normlab.lab.advise.twin.Twin
    command: str  # the command line that reproduces it
    spec_text: str

    def study(self):
        from normlab.lab.study.spec import parse_spec

        return parse_spec(self.spec_text, SPEC_FILE)


def plan(hf_config: str, scale: str, seeds: int | None = None, steps: int | None = None) -> Plan:
    """``hf_config`` (``config_path``: a file, a model directory, a shipped example's name) at
    the twin scale ``scale``, with ``seeds`` and ``steps`` in place of the scale's (None: its
    own)."""
    from normlab.lab.advise import hf_config as hf_reader
    from normlab.lab.advise.twin import make_twin, scale_of
    from normlab.lab.advise.twin_spec import spec_text

    model = hf_reader.read(config_path(hf_config))
    try:
        # make_twin runs the model configs' own checks (an MLP ratio beyond their bound)
        twin = make_twin(model, scale_of(scale, seeds, steps))
    except UsageError:
        raise
    except ValueError as e:  # sizes the file may hold that no twin of them can have
        raise UsageError(f"--hf-config {printable(hf_config)}: its twin: {e}") from None
    command = f"normlab advise --hf-config {twin.hf.name} --preset {scale}"
    command += "".join(f" --{k} {v}" for k, v in (("seeds", seeds), ("steps", steps)) if v)
    return Plan(twin, command, spec_text(twin, command))


def describe(twin) -> str:
    """The twin as text: its scale, every field with its source."""
    from normlab.lab.advise.advice import fmt_params, ratio
    from normlab.lab.advise.twin import twin_params
    from normlab.lab.kit.render import text_table

    hf, s, sz = twin.hf, twin.scale, twin.hf.sizes
    m, params = twin.config().model, twin_params(twin)
    lines = [
        f"{twin.name}: {twin.recipe_label()}; twin at {s.name} scale ({s.about})",
        f"  width {m.dim} (model {sz['hidden']}, {ratio(sz['hidden'], m.dim)}), depth "
        f"{m.n_layers} (model {sz['layers']}, {ratio(sz['layers'], m.n_layers)}), parameters "
        f"{fmt_params(params[0])} (model {fmt_params(hf.params())}, "
        f"{ratio(hf.params(), params[0])})",
        "",
        text_table(["field", "twin", "from"], [[k, v, src] for k, (v, src) in twin.fields.items()]),
    ]
    return "\n".join(lines)


def gaps_text(twin) -> str:
    return "\n".join(
        [f"not reproduced by the twin ({len(twin.hf.gaps)}):", *(f"  - {g}" for g in twin.hf.gaps)]
    )


@dataclass
class AdviseResult:
    study: StudyResult
    blocks: list  # the advice (normlab.lab.advise.advice.blocks)
    spec: Path  # the spec file that ran (OUT/advise-spec.toml or one beside it)


def write_spec(out: Path, text: str) -> Path:
    """``OUT/advise-spec.toml``, unless something else is there (the docs tell users to edit
    it): that is kept, ``text`` goes to the first free ``advise-spec.N.toml`` beside it, and a
    line says so. Returns the file that holds ``text``."""
    path = out / SPEC_FILE
    if os.path.lexists(path):
        if _text_of(path) == text:
            return path
        path = unused_name(path)
        print(f"{out / SPEC_FILE} is not this twin's spec (edited?): kept; the twin's spec is "
              f"written to {path}, which runs", file=sys.stderr)  # fmt: skip
    write_file(path, text)
    return path


def _text_of(path: Path) -> str | None:
    """The text of the regular file ``path``, read bounded; None for anything else (a symlink,
    a FIFO, a directory, a file too big for a spec): that is kept and not read."""
    if path.is_symlink():
        return None
    try:
        return read_text(path, errors="replace", limit=MAX_SPEC_BYTES)
    except ReadError:
        return None


def run_advise(p: Plan, study, options: StudyOptions, corpus) -> AdviseResult:
    """Write ``OUT/advise-spec.toml`` and ``twin.json``, run ``study`` (``p.study()``, the study
    that spec file describes, as ``normlab.lab.study.run.runner.configure`` returns it), write the
    reports led by the advice and ``OUT/advice.md``. Raises
    ``normlab.lab.study.run.runner.Interrupted`` on a signal."""
    from normlab.lab.advise import advice
    from normlab.lab.advise.twin import twin_json

    out = options.out
    start_anew(options, ("twin.json", "advice.md"))  # an earlier advise's, kept whole
    spec_path = write_spec(out, p.spec_text)
    # The spec that runs is named: an edited advise-spec.toml is kept and the twin's written
    # beside it, and --redecide of a study stopped before study.json reads it back from here.
    doc = {**twin_json(p.twin), "spec_file": spec_path.name}
    write_json(out / "twin.json", doc, indent=1, ensure_ascii=False)
    result = run_study(study, options, corpus)
    r = AdviseResult(result, advice.blocks(p.twin, result), spec_path)
    write_advice(r, out)
    return r


def write_advice(r: AdviseResult, out: Path) -> None:
    """``OUT/advice.md``, and the study's reports led by the advice."""
    from normlab.lab.advise import advice
    from normlab.lab.kit import doc as d

    write_file(out / "advice.md", d.to_markdown(advice.page(r.blocks)))
    write_reports(r.study, out, lead=advice.lead(r.blocks))
