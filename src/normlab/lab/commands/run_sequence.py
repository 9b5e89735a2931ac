"""The one sequence of every command that runs a study (``normlab study``, ``normlab advise``):
configure → check → ``--list`` → options → lock → data → run → interrupted → summary →
failures. What a command adds to it is a :class:`RunSteps`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from normlab.lab.commands import options_of
from normlab.lab.kit.io import hold, out_dir
from normlab.lab.kit.limits import check_study
from normlab.lab.study.run import (
    Interrupted,
    StudyOptions,
    StudyResult,
    checks_device,
    configure,
    summary,
)
from normlab.lab.study.run.plan import check_workers
from normlab.lab.study.spec import Study
from normlab.lab.train.data import Corpus, load_data

R = TypeVar("R")  # what a command's training returns: a StudyResult, or one that holds it


def _nothing(*_) -> None:
    pass


@dataclass(frozen=True)
class RunSteps(Generic[R]):
    """What a command adds to :func:`run_sequence`. The hooks print to stdout; those given the
    options read ``options.quiet`` themselves."""

    lock: str  # the command holding the output directory (``kit.io.hold``)
    listing: Callable[[Study], str]  # --list: printed, and the command exits 0
    train: Callable[[Study, StudyOptions, Corpus], R]  # in the lock: the run and its files
    study_of: Callable[[R], StudyResult] = lambda r: r  # the study's result in ``train``'s
    instead: Callable[[Study], int] | None = None  # a mode run on the checked study, not trained
    started: Callable[[StudyOptions], None] = _nothing  # before the lock
    stopped: Callable[[StudyOptions], None] = _nothing  # on a signal, before the note to resume
    trained: Callable[[R, StudyOptions], None] = _nothing  # before the summary
    closing: Callable[[R, StudyOptions], None] = _nothing  # after the failures


def run_sequence(study: Study, args: argparse.Namespace, steps: RunSteps[R]) -> int:
    """``study`` run as the options of ``add_run_options`` in ``args`` say, with ``steps``;
    the command's exit status."""
    # --device cuda without CUDA stops here, before the output directory or the data (not with
    # --list, which runs nothing)
    check = not args.list and checks_device(args.executor, args.address)
    study = configure(study, args.device, args.precision, check=check)
    check_study(study)  # sizes, from the configs' arithmetic: before anything is allocated
    check_workers([a.config for a in study.arms], args.workers)  # --workers N of them at once
    if args.list:
        print(steps.listing(study))
        return 0
    if steps.instead is not None:
        return steps.instead(study)
    # the runner's options, the output directory created
    tensorboard = None if args.tensorboard is None else Path(args.tensorboard)
    options = options_of(StudyOptions, args, out=out_dir(args.out), tensorboard=tensorboard)
    steps.started(options)
    with hold(options.out, steps.lock):  # one process per output directory, before any work
        corpus = load_data(args.data)
        try:
            r = steps.train(study, options, corpus)
        except Interrupted as e:
            steps.stopped(options)
            print(
                f"\nstudy stopped; finished runs are kept in {options.out / 'results.jsonl'}. "
                "Continue with the same command and --resume.",
                file=sys.stderr,
            )
            return e.code
    steps.trained(r, options)
    result = steps.study_of(r)
    if not options.quiet:
        print(summary(result, options.out))
    if result.failed:
        print(
            f"runs that raised (not recorded; --resume retries them): {result.failed}",
            file=sys.stderr,
        )
    steps.closing(r, options)
    return result.exit_code
