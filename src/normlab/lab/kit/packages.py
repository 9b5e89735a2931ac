"""Whether the lab's own packages are installed (``pip install "normlab[lab]"``): the command
line checks before any command runs, the ray executor before it starts."""

from __future__ import annotations

import importlib.util
import sys

# What `pip install "normlab[lab]"` adds; the library itself never imports these.
LAB_PACKAGES = ("matplotlib", "tqdm", "scipy") + (("tomli",) if sys.version_info < (3, 11) else ())


def importable(name: str) -> bool:
    """Whether ``name`` can be imported here, found without importing it."""
    if name in sys.modules:
        return sys.modules[name] is not None
    return importlib.util.find_spec(name) is not None


def missing_lab_packages() -> list[str]:
    """The lab's packages that cannot be imported here."""
    return [name for name in LAB_PACKAGES if not importable(name)]
