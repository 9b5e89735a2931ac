"""Golden outputs of ``normlab advise``, in tests/data/advise/CASE/ for each shipped config and
scale (and a GPT-2, whose recipe is a LayerNorm's): the spec the twin's study was written as
(``spec.toml``), and the advice written from made-up results of that study (``advice.md``, the
report's lead as ``lead.md`` and ``lead.html``, the terminal's ``headline.md``; and advice.md
from odder results, ``advice-*.md``).
tests/lab/advise/test_advise_golden.py checks that today's code writes a spec that parses to
the same study and the same advice, byte for byte. Regenerate
(``PYTHONPATH=src python tests/lab/advise/advise_golden.py``) only when the study or the advice
is meant to change, and say so in the commit.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from normlab.lab.advise import hf_config
from normlab.lab.advise.advice import blocks, headline, lead, page
from normlab.lab.advise.engine import shipped_config
from normlab.lab.advise.twin import SCALES, make_twin
from normlab.lab.advise.twin_spec import spec_text
from normlab.lab.kit import doc
from normlab.lab.study.decide import decide_all
from normlab.lab.study.run.runner import StudyResult
from normlab.lab.study.run.study_json import StudyMeta
from normlab.lab.study.spec.parse import parse_spec
from normlab.lab.train.result import RunResult

GOLDEN = Path(__file__).parents[2] / "data" / "advise"
SHIPPED = ("llama-3.2-1b.json", "gemma-3-1b.json", "qwen3-0.6b.json")
GPT2 = {
    "model_type": "gpt2",
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_inner": None,
    "n_positions": 1024,
    "vocab_size": 50257,
    "layer_norm_epsilon": 1e-5,
}


def models() -> dict[str, hf_config.HFModel]:
    out = {name: hf_config.read(shipped_config(name)) for name in SHIPPED}
    out["gpt2"] = hf_config.from_dict(GPT2, "gpt2.json")
    return out


def study_dict(study) -> dict[str, Any]:
    """Everything a parsed study holds, as JSON data."""
    return json.loads(
        json.dumps(
            {
                "name": study.name,
                "description": study.description,
                "arms": [[a.name, a.config.to_dict()] for a in study.arms],
                "claims": [
                    {
                        "name": c.name,
                        "statement": c.statement,
                        "source": c.source,
                        "plots": list(c.plots),
                        "rule": type(c.rule).__name__,
                        "fields": dataclasses.asdict(c.rule),
                        "describe": c.rule.describe(),
                        "seeds": c.seeds,
                    }
                    for c in study.claims
                ],
            }
        )
    )


# The made-up results each advice file is written from (see fake_results).
VARIANTS = {"advice.md": "", "advice-no-runs.md": "no-runs", "advice-odd.md": "odd"}


def fake_results(study, variant: str = "") -> tuple[dict, dict]:
    """Made-up results for every run of ``study`` (Sandwich better, Post-LN diverging at high
    learning rates, LayerNorm slower) and timings of its timed arms. ``variant`` "no-runs":
    nothing finished and nothing timed; "odd": LayerNorm faster, with no step timings and a
    timed arm untimed, the LayerNorm arm never run, the recipe's first seed diverged."""
    if variant == "no-runs":
        return {}, {}
    results: dict = {}
    for t in study.runs():
        lr, placement = t.config.lr, t.config.model.placement
        loss = 2.0 + 0.01 * t.index + 0.1 * math.log10(lr / 1e-3)
        loss += 0.003 * len(t.arm)  # the arms differ a little, so the ranking has an order
        if placement == "sandwich":
            loss -= 0.05
        if placement == "post" and lr > 0.005:
            loss = None
        if variant == "odd" and t.arm == "layernorm":
            continue
        if variant == "odd" and t.arm == "recipe" and t.index == 0:
            loss = None
        status = "ok" if loss is not None else "diverged"
        results.setdefault(t.arm, {})[t.index] = RunResult(
            t.config.to_dict(), status, summary={"final_val_loss": loss}
        )
    fast = {"norm_ms": [1.0, 1.1, 1.0, 1.05], "step_ms": [10.0, 10.5, 10.2, 10.1]}
    slow = {"norm_ms": [1.5, 1.6, 1.5, 1.55], "step_ms": [10.4, 10.8, 10.6, 10.5]}
    timed = next(c.rule for c in study.claims if c.timed)
    if variant == "odd":
        return results, {
            timed.fast: {"norm_ms": slow["norm_ms"]},
            timed.slow: {"norm_ms": fast["norm_ms"]},
        }
    return results, {timed.fast: fast, timed.slow: slow}


def case_name(name: str, preset: str) -> str:
    return f"{name.removesuffix('.json')}-{preset}"


def twins():
    """(case name, twin, the command named in its spec) for every golden case."""
    for name, hf in models().items():
        for preset in SCALES:
            yield case_name(name, preset), make_twin(hf, preset), f"normlab advise {name} {preset}"


def advice_files(twin, study) -> dict[str, str]:
    """The advice written from made-up results of ``study``: file name -> text."""
    out = {}
    for name, variant in VARIANTS.items():
        results, timings = fake_results(study, variant)
        verdicts = decide_all(study, results, 3.0, timings)
        bl = blocks(twin, StudyResult(study, results, verdicts, StudyMeta(timings=timings)))
        out[name] = doc.to_markdown(page(bl))
        if not variant:
            out |= {
                "lead.md": doc.markdown(lead(bl)) + "\n",
                "lead.html": doc.html(lead(bl)) + "\n",
                "headline.md": headline(bl) + "\n",
            }
    return out


def write() -> None:
    for case, twin, command in twins():
        d = GOLDEN / case
        d.mkdir(parents=True, exist_ok=True)
        text = spec_text(twin, command)
        (d / "spec.toml").write_text(text, encoding="utf-8")
        for f, body in advice_files(twin, parse_spec(text, "spec.toml")).items():
            (d / f).write_text(body, encoding="utf-8")
        print(f"wrote {d}")


if __name__ == "__main__":
    write()
