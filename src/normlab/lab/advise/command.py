"""``normlab advise``: read a Hugging Face decoder's config.json, build a scaled-down twin that
keeps its normalization recipe, set that recipe against the alternatives in a study (a spec file
the user can edit and rerun with ``normlab study --spec``), run it through the study's own
machinery and write the report, led by the advice.
"""

from __future__ import annotations

import argparse
import json
from importlib import resources
from pathlib import Path

from normlab.lab.advise.twin import SCALES

SPEC_FILE = "advise-spec.toml"


def shipped_configs() -> list[str]:
    """The example config.json files shipped in the package (configs/)."""
    root = resources.files("normlab.lab.advise").joinpath("configs")
    return sorted(p.name for p in root.iterdir() if p.name.endswith(".json"))


def shipped_config(name: str) -> str:
    """The path of a shipped example config (e.g. ``llama-3.2-1b.json``)."""
    return str(resources.files("normlab.lab.advise").joinpath("configs", name))


def add_arguments(p: argparse.ArgumentParser) -> None:
    from normlab.lab.study.command import add_run_options

    p.add_argument(
        "--hf-config",
        metavar="FILE",
        required=True,
        help="a Hugging Face decoder's config.json (read as JSON; transformers is not "
        "needed), or the name of an example shipped with normlab: " + ", ".join(shipped_configs()),
    )
    p.add_argument(
        "--preset",
        choices=tuple(SCALES),
        default="quick",
        help="the twin's size: smoke (toy, seconds) or quick (a Llama twin: 63 runs, ~12 min "
        "on 2 cores)",
    )
    add_run_options(
        p, out="normlab-advise", listed="the twin and the plan (runs, claims, estimated CPU time)"
    )


def describe(twin, params: tuple[int, int]) -> str:
    """The twin as text: its scale, every field with its source."""
    from normlab.lab.advise.advice import fmt_params, ratio
    from normlab.lab.render import text_table

    hf, s, sz = twin.hf, twin.scale, twin.hf.sizes
    m = twin.config().model
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


def run(args: argparse.Namespace) -> int:
    from normlab.lab.advise import advice, hf_config
    from normlab.lab.advise.twin import make_twin, spec_text
    from normlab.lab.cli import load_data, out_dir
    from normlab.lab.study.command import execute, finish
    from normlab.lab.study.plan import format_plan
    from normlab.lab.study.spec import load_spec, parse_spec

    path = args.hf_config
    if not Path(path).exists() and path in shipped_configs():  # a shipped example, by name
        path = shipped_config(path)
    hf = hf_config.read(path)
    twin = make_twin(hf, args.preset)
    command = f"normlab advise --hf-config {hf.name} --preset {args.preset}"
    text = spec_text(twin, command)
    params = advice.twin_params(twin)
    if not args.quiet or args.list:
        print(describe(twin, params), end="\n\n")
    # What the twin leaves out is printed even with --quiet: no difference may go unsaid.
    print(gaps_text(twin), end="\n\n")
    if args.list:
        plan = format_plan(parse_spec(text, SPEC_FILE), args.seed).split("\n", 1)[1]
        print(f"{command} --seed {args.seed}: the study (written to DIR/{SPEC_FILE})\n{plan}")
        return 0
    out = out_dir(args.out)
    corpus = load_data(args.data)
    (out / SPEC_FILE).write_text(text, encoding="utf-8")
    # The file the user will edit and rerun is the one that runs here.
    preset = load_spec(out / SPEC_FILE)
    (out / "twin.json").write_text(json.dumps(advice.twin_json(twin), indent=1, ensure_ascii=False))
    done = execute(preset, args, out, corpus)
    if isinstance(done, int):
        return done
    results, verdicts, meta, failed = done
    bl = advice.blocks(twin, preset, results, verdicts, meta)
    (out / "advice.md").write_text(advice.to_markdown(bl, top=1), encoding="utf-8")
    code = finish(
        args,
        out,
        preset,
        results,
        verdicts,
        meta,
        failed,
        lead_md=advice.to_markdown(bl, top=2),
        lead_html=advice.to_html(bl, top=2),
    )
    if not args.quiet:
        print(
            f"\n{advice.headline(bl)}\n\n-> {out / 'advice.md'}; edit and rerun the study: "
            f"normlab study --spec {out / SPEC_FILE}"
        )
    return code
