"""The ``"numba"`` backend: fused Numba CPU kernels.

``kernels`` (the ``@njit`` forward kernels and what all kernels share), ``backward`` and
``backward_y`` (the backwards) and ``bf16`` (element conversions, row views) are the device side;
``launch`` (host launchers), ``choices`` (their launch choices), ``tuner`` and ``tune_cache``
(which choice runs on this CPU) and ``buffer_pool`` (recycled output buffers) the host side;
``backend`` registers the backend. The registry imports ``backend`` on first use, so ``import
normlab`` compiles no kernel.

The compiled kernels are cached (``cache=True``) under the user's cache directory,
``$XDG_CACHE_HOME/normlab/numba`` (``~/.cache/normlab/numba``; ``~/Library/Caches`` on macOS),
never in the installed package, which may be read-only or shared; ``NUMBA_CACHE_DIR`` overrides.
The tuner's picks go to ``$XDG_CACHE_HOME/normlab/tune`` (``NORMLAB_TUNE_DIR`` overrides).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def user_cache() -> Path:
    """normlab's directory in the user's cache: ``$XDG_CACHE_HOME/normlab`` (``~/.cache``;
    ``~/Library/Caches`` on macOS)."""
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "normlab"


def cache_dir() -> Path:
    """Where the compiled kernels are cached: ``NUMBA_CACHE_DIR``, else the user's cache."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"])
    return user_cache() / "numba"


def _use_cache_dir() -> None:
    # Numba reads NUMBA_CACHE_DIR once, at its import; its cache locator reads config.CACHE_DIR
    # when a function is compiled, so setting it before the kernels are defined is enough.
    try:
        import numba
    except ImportError:  # the registry reports the backend as unavailable
        return
    numba.config.CACHE_DIR = str(cache_dir())


_use_cache_dir()
