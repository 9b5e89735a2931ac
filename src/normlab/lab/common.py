"""What every lab command shares: argument validators, the output directory, the training data,
and whether the lab's packages are installed (the one-line usage error is
:class:`normlab.lab.errors.UsageError`).

Validators raise ``ValueError`` with a message fit for the user; ``normlab.lab.commands`` turns
them into argparse types, and engines call them directly on their options.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from normlab.lab.errors import UsageError
from normlab.lab.reading import bounded_int

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


# ``text`` as an int >= 1 (>= 0); ``ValueError`` with the user's value otherwise.
positive_int, non_negative_int = bounded_int(1), bounded_int(0)


def out_dir(path: str | Path, flag: str = "--out") -> Path:
    """Create the output directory now, before any work whose results it would hold."""
    from normlab.lab.io import no_symlink

    out = Path(path)
    no_symlink(out)  # an --out linked to another study's directory is not written through
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot create the directory ({e.strerror or e})") from e
    return out


def load_data(path: str | None, flag: str = "--data"):
    """``load_corpus(path)``, with a missing, unreadable or too small file as a UsageError."""
    from normlab.lab.reading import ReadError
    from normlab.lab.train.data import load_corpus

    try:
        return load_corpus(path)
    except ReadError as e:  # no such file, not a regular file, too big: it names the file
        raise UsageError(f"{flag} {e}") from e
    except FileNotFoundError as e:
        raise UsageError(f"{flag} {path}: no such file" if path else str(e)) from e
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot read it ({e.strerror or e})") from e
    except ValueError as e:  # empty, or too small to split into training and validation
        raise UsageError(f"{flag} {path or '(the standard library)'}: {e}") from e


def check_device(device: str | None, flag: str = "--device") -> None:
    """A :class:`UsageError` for ``cuda`` on a machine without CUDA, before any work."""
    if device != "cuda":
        return
    import torch

    if not torch.cuda.is_available():
        raise UsageError(
            f"{flag} cuda: no CUDA device here (torch {torch.__version__}, "
            "torch.cuda.is_available() is False)"
        )
