"""``normlab advise --redecide DIR``: an advise's advice, reports and claims.json rebuilt from its
output directory without training, as ``normlab study --redecide`` rebuilds a study's.

The design is the one that ran, never today's defaults: the twin from ``DIR/twin.json`` (its
scale, fields and alternatives as recorded) and the study from the spec ``DIR/study.json``
stores, as the study's redecide reads it. An advise stopped before its study finished has no
study.json: its study is then the spec file twin.json names (``DIR/advise-spec.toml``), its seed
block and device those its recorded runs were trained under, its H from the corpus (``--data``,
checked against the runs' corpus), and nothing was timed. Either way the runs missing from
``DIR/results.jsonl`` are named in the advice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

from normlab.lab.advise.engine import SPEC_FILE, AdviseResult
from normlab.lab.advise.hf_config import HFModel
from normlab.lab.advise.twin import Alt, Scale, Twin
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.limits import check_name
from normlab.lab.kit.reading import ReadError, check_strings, checked
from normlab.lab.kit.shapes import SCALAR, Int, Num, check_shape
from normlab.lab.study.run import StudyResult


@dataclass
class _RecordedModel(HFModel):
    """The model as twin.json recorded it: its parameter counts as counted then."""

    counts: tuple[int, int] = (0, 0)  # all, and in the blocks

    def params(self, embeddings: bool = True) -> int:
        return self.counts[0] if embeddings else self.counts[1]


# What twin.json holds, to the leaves (``twin.twin_json``): its strings reach advice.md and the
# reports, its lists are iterated.
TWIN_JSON = {
    **dict.fromkeys(("hf_config", "model_type", "family"), str),
    "scale": {
        **dict.fromkeys(("name", "about"), str),
        **dict.fromkeys(("dim", "n_layers", "head_dim", "seq_len", "batch_size"), Int(1)),
        **dict.fromkeys(("steps", "warmup_steps", "eval_batches", "seeds"), Int(0)),
        "lr": Num(0),
        "sweep": [Num(0)],
    },
    "model_sizes": {"*": Int(0)},
    "params": {"*": Int(0)},
    "fields": {"*": {"value": SCALAR, "from": str}},
    "train": {"*": {"value": SCALAR, "why": str}},
    "alternatives": [
        {"arm": str, "label": str, "kind": str, "model": {"*": SCALAR}, "swept": bool}
    ],
    "not_reproduced": [str],
    "spec_file?": str,
}


def twin_from_json(doc: dict, where: str) -> Twin:
    """The twin ``twin.json`` (``twin.twin_json``) records; a file it did not write is a
    :class:`UsageError` naming ``where``."""
    from normlab.hf.families import FAMILIES

    try:
        check_shape(check_strings(doc, ""), TWIN_JSON, "")
    except ReadError as e:
        detail = str(e).removeprefix(": ")
        raise UsageError(f"{where}: not a twin.json normlab advise wrote ({detail})") from None
    try:
        fields = {k: (f["value"], f["from"]) for k, f in doc["fields"].items()}
        family = replace(FAMILIES[doc["model_type"]], name=doc["family"])
        p = doc["params"]
        hf = _RecordedModel(
            doc["hf_config"], doc["model_type"], family, doc["model_sizes"], fields,
            list(doc["not_reproduced"]), counts=(int(p["model"]), int(p["model_blocks"])),
        )  # fmt: skip
        scale = Scale(**{**doc["scale"], "sweep": tuple(doc["scale"]["sweep"])})
        train = {k: (t["value"], t["why"]) for k, t in doc["train"].items()}
        twin = Twin(hf, scale, fields, train, [Alt(**a) for a in doc["alternatives"]])
        twin.config()  # the dataclasses' own checks
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise UsageError(f"{where}: not a twin.json normlab advise wrote ({e!r})") from None
    return twin


def redecide_advise(
    out: Path, *, data: str | None, device: str | None, precision: str | None
) -> AdviseResult:
    """The advise in ``out`` decided again from its files (nothing trained, nothing written);
    ``data``/``device``/``precision``: the advise's ``--data``, ``--device``, ``--precision``,
    read where study.json does not record them."""
    from normlab.lab.advise import advice
    from normlab.lab.kit.reading import read_json

    flag = f"--redecide {out}"
    if not out.is_dir():
        raise UsageError(f"{flag}: no such directory")
    doc = read_json(out / "twin.json", f"{flag}: cannot read {out / 'twin.json'}")
    twin = twin_from_json(doc, f"{flag}: {out / 'twin.json'}")  # an object of twin.json's shape
    where = f"{flag}: {out / 'twin.json'}: spec_file"  # a file in DIR, never a path out of it
    spec = out / checked(where, check_name, doc.get("spec_file") or SPEC_FILE)
    if (out / "study.json").exists():
        from normlab.lab.study.run import redecide_study

        result = redecide_study(out, device=device, precision=precision)
    else:
        result = _unfinished(out, spec, flag, data, device, precision)
    _check_twin(twin, result.study, flag)
    return AdviseResult(result, advice.blocks(twin, result), spec)


def _check_twin(twin: Twin, study, flag: str) -> None:
    """The study's recipe arm is twin.json's recipe: else one of the two was replaced or edited
    after the run, and the advice would describe a twin that did not run."""
    recipe = next((a.config for a in study.arms if a.name == "recipe"), None)
    want = twin.config()
    if recipe is None or (recipe.model, recipe.steps) != (want.model, want.steps):
        raise UsageError(f"{flag}: the study's recipe arm is not the twin twin.json records")


def _unfinished(out: Path, spec: Path, flag: str, data, device, precision) -> StudyResult:
    """An advise stopped before its study finished (no study.json): its runs so far, decided."""
    from normlab.lab.study.decide import decide_all
    from normlab.lab.study.run import ResultStore, configure, environment, run_key
    from normlab.lab.study.run.store import results_of
    from normlab.lab.study.run.study_json import StudyMeta
    from normlab.lab.study.spec import SEED_STRIDE, load_spec
    from normlab.lab.train.data import load_data

    if not spec.is_file():
        raise UsageError(f"{flag}: no study.json and no {spec.name}: not an advise's directory")
    loaded = load_spec(spec)
    records = ResultStore(out / "results.jsonl").load(results=True)
    if not records:
        raise UsageError(
            f"{flag}: no study.json and no run in results.jsonl: nothing to decide (the advise "
            "stopped before its first run finished; continue it with --resume)"
        )
    corpus = load_data(data)
    if corpus.sha256 not in {r.get("corpus_sha256") for r in records.values()}:
        raise UsageError(
            f"{flag}: the runs in results.jsonl were trained on another corpus than "
            f"{corpus.source}: pass the --data FILE the advise ran with"
        )
    # Without study.json, the seed block and the device are those the recorded runs name: the
    # pair under which the most of the study's runs are found.
    ids = [(r.get("seed"), r.get("seed_index")) for r in records.values()]
    blocks = {(s - i) // SEED_STRIDE for s, i in ids if isinstance(s, int) and isinstance(i, int)}

    def found(dev: str, block: int):
        configured = configure(loaded, dev, precision, check=False)
        runs, where = configured.runs(block), f"{out}/results.jsonl"
        got = results_of(records, runs, lambda r: run_key(r.config, corpus.sha256), where)
        return sum(map(len, got.values())), configured, block, got, dev

    devices = [device] if device else ["cpu", "cuda"]
    tries = (found(dev, block) for dev in devices for block in sorted(blocks or {0}))
    n, study, block, results, dev = max(tries, key=lambda t: t[0])  # the first of the most
    if not n:
        raise UsageError(
            f"{flag}: none of the study's runs is in results.jsonl (a different spec, "
            "--device or --precision than the advise ran with?)"
        )
    runs = study.runs(block)
    missing = [r.label for r in runs if r.index not in results.get(r.arm, {})]
    unknown = SimpleNamespace(threads="?", workers="?", limit=None)  # how it ran: not recorded
    wall = sum(x.summary.get("wall_s") or 0.0 for arm in results.values() for x in arm.values())
    meta = StudyMeta.of(
        study,
        corpus,
        seed_block=block,
        environment=environment(unknown, "cuda" if dev == "cuda" else "cpu"),
        wall_s=wall,
        # The study's own wall time and timing rounds were never recorded: the runs' walls, summed.
        finished="never: stopped before its study finished (no study.json, nothing timed; the "
        "wall time is its runs', summed)",
        untimed=True,  # the advice says so (bottom.missing_runs)
        decided_again=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        decided_with=f"the spec {spec.name}",
    )
    verdicts = decide_all(study, results, meta.plateau_h, {})
    return StudyResult(study, results, verdicts, meta, missing)
