"""The package's metadata: one version (``normlab.__version__``, which pyproject.toml reads) and
the MIT license that pyproject.toml declares."""

import importlib.metadata
import sys
from pathlib import Path

import pytest

import normlab

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_is_kept_in_one_place():
    project = _pyproject()
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "normlab.__version__"


def test_installed_metadata_has_the_package_version():
    # The metadata is written at install time: after a version change, reinstall (pip install
    # -e .), as CI does on every run.
    try:
        installed = importlib.metadata.version("normlab")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("normlab is not installed (run from a source tree)")
    assert installed == normlab.__version__


def test_license_file_matches_pyproject():
    assert _pyproject()["project"]["license"] == {"text": "MIT"}
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "normlab developers" in text
