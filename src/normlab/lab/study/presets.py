"""The built-in presets: named studies (arms plus the claims they test), written as study spec
files in ``specs/`` and read by ``normlab.lab.study.spec``, so a user can copy one
(``normlab study --print-spec NAME``), edit it and run it with ``--spec``."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from normlab.lab.study.design import SEED_STRIDE, Arm, Run, Study
from normlab.lab.study.spec import builtin_names, load_builtin

__all__ = ["PRESETS", "SEED_STRIDE", "Arm", "Run", "Study"]

PRESETS: dict[str, Callable[[], Study]] = {
    name: partial(load_builtin, name) for name in builtin_names()
}
