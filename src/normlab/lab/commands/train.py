"""``normlab train``: one run of the study's trainer (``normlab.lab.train.dist_trainer``), alone
or under ``torchrun``.

Every field of ``TrainConfig`` and ``TransformerConfig`` is an option (generated from the
fields: their types, defaults and help texts, so the two never drift apart; a value is read by
the coercer the spec loader uses), applied on top of the defaults or of one run of a study
preset (``--preset quick --run pre-L24``). Under ``torchrun --nproc_per_node N`` the run is
data-parallel (DDP, or FSDP2 with ``--fsdp``) and computes what one process computes on the
same global batch.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import typing
from pathlib import Path
from typing import Any, Literal

from normlab.lab.commands import FLOAT, NON_NEGATIVE_INT, PATH, SEED_BLOCK, arg_type, options_of
from normlab.lab.commands.options import add_set, add_spec
from normlab.lab.kit.errors import UsageError
from normlab.lab.kit.io import hold, is_main_process, out_dir
from normlab.lab.kit.limits import check_run
from normlab.lab.study.run import find_run, saved_config
from normlab.lab.study.spec import parse as spec
from normlab.lab.train.config import TrainConfig
from normlab.lab.train.data import VOCAB_SIZE, load_data
from normlab.lab.train.device import check_device, concrete_device
from normlab.lab.train.fields import NO_OPTION, Expected, coerce
from normlab.models import TransformerConfig
from normlab.models.config import field_types

# Sizes for a run without --preset: small LLaMA-style, seconds a step on a laptop CPU.
_DEFAULT_SIZES = {"dim": 64, "n_layers": 4, "n_heads": 4}


@dataclasses.dataclass(frozen=True)
class _Default:
    """A default that prints as its value in ``--help`` but tells "not given" from "given the
    default value", so only the options on the command line override a study's run."""

    value: Any

    def __str__(self) -> str:
        return str(self.value)


def _value(v: Any) -> Any:
    return v.value if isinstance(v, _Default) else v


def _options(cls: type) -> list[dataclasses.Field]:
    """The fields of a config dataclass that are options (all but the lab's ``NO_OPTION``)."""
    return [f for f in dataclasses.fields(cls) if f.name not in NO_OPTION]


def _parser(hint: Any):
    """An argparse type: a word of the command line as a value of the field type ``hint``, by the
    coercer the spec loader uses (``normlab.lab.train.fields.coerce``)."""

    def parse(text: str) -> Any:
        try:  # a number parser's ValueError says itself what came and what was expected
            return coerce(hint, text, text=True)
        except Expected as e:
            raise ValueError(f"expected {e}, got {text!r}") from None

    return arg_type(parse, "parse")


def _add_field(group, f: dataclasses.Field, hint, default: Any) -> None:
    flag = "--" + f.name.replace("_", "-")
    kw: dict[str, Any] = {"default": _Default(default), "help": f.metadata["help"], "dest": f.name}
    args = typing.get_args(hint)
    if hint is bool:
        kw["action"] = argparse.BooleanOptionalAction
    elif typing.get_origin(hint) is tuple:
        nargs = "*" if args[-1] is Ellipsis else len(args)
        kw.update(type=_parser(args[0]), nargs=nargs, metavar="X")
    elif type(None) in args:
        kind = next(a for a in args if a is not type(None))
        kind = type(typing.get_args(kind)[0]) if typing.get_origin(kind) is Literal else kind
        kw.update(type=_parser(hint), metavar=kind.__name__.upper())
        kw["help"] += " ('none' for None)"
    else:  # a Literal's values are argparse's choices
        kw.update(type=_parser(hint), choices=args or None)
    group.add_argument(flag, **kw)


def _add_fields(parser: argparse.ArgumentParser) -> None:
    """An option per field of ``TrainConfig`` and ``TransformerConfig``, in a group each."""
    for cls, title in ((TrainConfig, "training"), (TransformerConfig, "model")):
        group = parser.add_argument_group(
            f"{title} ({cls.__name__} fields; override --preset, --spec, --config)"
        )
        for f in _options(cls):
            _add_field(group, f, field_types(cls)[f.name], _DEFAULT_SIZES.get(f.name, f.default))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.epilog = (
        "Options given on the command line override the values of the --preset, --spec or "
        "--config run (the defaults shown apply without them). Several processes: torchrun "
        "--nproc_per_node N -m normlab train ...; rerun the same command with --resume after an "
        "interruption."
    )
    run = parser.add_argument_group("run (how it is executed and recorded)")
    start = run.add_mutually_exclusive_group()
    start.add_argument("--preset", default=None, help="take the run config from this study preset")
    add_spec(start, "take the run config from this study spec")
    start.add_argument(
        "--config",
        type=PATH,
        metavar="PATH",
        default=None,
        help="take the run config from a saved run: normlab train's OUT/config.json or "
        "result.json, a line of a study's results.jsonl, or the whole file with --run and "
        "--seed-index",
    )
    run.add_argument("--run", default=None, help="the arm of --preset/--spec to train (its name)")
    run.add_argument(
        "--seed-index",
        metavar="I",
        type=NON_NEGATIVE_INT,
        default=_Default(0),
        help="with --run: which of the arm's seeds, as the study numbers them",
    )
    run.add_argument(
        "--seed-block",
        metavar="S",
        type=SEED_BLOCK,
        default=_Default(0),
        help="with --run: the study's seed block (normlab study --seed S): the run's seed is "
        "10000*S + I",
    )
    add_set(
        run,
        "with --preset/--spec: override a value of the spec, as normlab study --set does "
        "(repeatable)",
    )
    run.add_argument(
        "--tensorboard",
        type=PATH,
        metavar="DIR",
        default=None,
        help="also write TensorBoard event files to DIR (rank 0; needs tensorboard)",
    )
    run.add_argument(
        "--data", type=PATH, default=None, help="training text file; default: Python's stdlib"
    )
    run.add_argument(
        "--out", type=PATH, default="runs/train", help="config, metrics, checkpoint, result"
    )
    run.add_argument("--resume", action="store_true", help="continue from OUT/checkpoint.pt if any")
    run.add_argument(
        "--ckpt-every", type=NON_NEGATIVE_INT, default=100, help="checkpoint period (0: at end)"
    )
    run.add_argument("--fsdp", action="store_true", help="FSDP2 (fully_shard per block), not DDP")
    run.add_argument(
        "--log-every", type=NON_NEGATIVE_INT, default=10, help="progress line period (0: never)"
    )
    run.add_argument("--timeout", type=FLOAT, default=300.0, help="collective timeout, seconds")

    _add_fields(parser)


def config_from_args(args: argparse.Namespace):
    """The run's ``TrainConfig``: the preset's, spec's or saved run (or the defaults) with the
    given options."""

    def given(cls: type) -> dict[str, Any]:  # the fields given on the command line
        values = {f.name: getattr(args, f.name) for f in _options(cls)}
        return {k: v for k, v in values.items() if not isinstance(v, _Default)}

    # argparse gives a tuple field a list: TrainConfig makes it a tuple
    return _base_config(args).replace(model=given(TransformerConfig), **given(TrainConfig))


def _base_config(args: argparse.Namespace):
    """What the options override: a saved run's config, a study's run, or the defaults."""
    block_given = not isinstance(args.seed_block, _Default)
    seeds = block_given or not isinstance(args.seed_index, _Default)
    if args.config is not None:
        if args.overrides or block_given:
            raise ValueError(
                "--config is a run's whole config: --set and --seed-block go with "
                "--preset or --spec"
            )
        return saved_config(args.config, args.run, _value(args.seed_index))
    if args.preset is None and args.spec is None:
        if args.run is not None or args.overrides or seeds:
            raise ValueError(
                "--run, --seed-index, --seed-block and --set choose a run of a "
                "study: give --preset or --spec too"
            )
        sizes = {k: _value(getattr(args, k)) for k in _DEFAULT_SIZES}
        return TrainConfig(model=TransformerConfig(VOCAB_SIZE, **sizes))
    return _study_run(args)


def _study_run(args: argparse.Namespace):
    """The config the study of ``--preset``/``--spec`` (with ``--set``) trains for ``--run``
    under ``--seed-index`` in ``--seed-block``: its ``Study.runs(block)`` entry, seed included
    (its extended claims' runs too)."""
    sets = args.overrides
    if args.spec is not None:
        study, what = spec.load_spec(args.spec, sets, whole=True), f"spec {args.spec}"
    else:  # an unknown preset is the spec loader's one-line error
        study, what = spec.load_builtin(args.preset, sets, whole=True), f"preset {args.preset!r}"
    arms = [a.name for a in study.arms]
    if args.run not in arms:
        raise ValueError(f"--run must name a run of {what}: {sorted(arms)}")
    index, n = _value(args.seed_index), study.seeds(args.run)
    if index >= n:
        raise ValueError(
            f"--seed-index {index}: the study trains {args.run} under {n} seed(s), "
            f"indices 0 to {n - 1}"
        )
    return find_run(study.runs(_value(args.seed_block)), args.run, index).config


def run(args: argparse.Namespace) -> int:
    from normlab.lab.train.dist_trainer import RunOptions, train_process  # torch.distributed
    from normlab.lab.train.tblog import tensorboard_available

    try:
        cfg = config_from_args(args)
        if args.tensorboard is not None and not tensorboard_available():
            raise UsageError("--tensorboard needs the tensorboard package: pip install tensorboard")
        check_device(cfg.device)
        # Recorded (config.json, the checkpoint) as the device it runs on, never "auto".
        cfg = cfg.replace(device=concrete_device(cfg.device))
        tensorboard = None if args.tensorboard is None else Path(args.tensorboard)
        opts = options_of(RunOptions, args, out=Path(args.out), tensorboard=tensorboard)
    except UsageError:  # a spec's or a saved config's own one-line message
        raise
    except (ValueError, TypeError) as e:  # the dataclasses' validation of the options' values
        raise UsageError(f"bad run config: {e}") from e
    check_run(cfg, "the run")  # sizes, from the config's arithmetic: before anything is built
    # Before the processes meet: a mistake in the options is reported, not a hung collective.
    out_dir(args.out)
    # One process per output directory: rank 0 holds it for the whole job (the other ranks
    # write nothing there).
    with hold(args.out, "train") if is_main_process() else contextlib.nullcontext():
        train_process(cfg, load_data(args.data), opts, timeout_s=args.timeout)
    return 0
