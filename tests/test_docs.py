"""The reference docs list what the code has: every model field, every spec measure, plot, rule
and preset."""

import dataclasses
import re
from importlib import resources
from pathlib import Path

from normlab.lab.study.decide.measures import MEASURES
from normlab.lab.study.decide.rules import RULES
from normlab.lab.study.report.plots import PLOTS
from normlab.models import TransformerConfig

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_models_md_field_table_lists_every_config_field():
    text = (DOCS / "models.md").read_text()
    table = re.search(r"\| field \| values \(default first\) \|\n\|---\|---\|\n((?:\|.*\n)+)", text)
    assert table, "docs/models.md: the field table"
    documented = set()
    for row in table.group(1).splitlines():
        documented |= set(re.findall(r"`(\w+)`", row.split("|")[1]))
    fields = {f.name for f in dataclasses.fields(TransformerConfig)}
    assert fields - documented == set(), "TransformerConfig fields missing from docs/models.md"
    assert documented - fields == set(), "docs/models.md lists fields TransformerConfig lacks"


def test_spec_md_names_every_measure_plot_rule_and_preset():
    text = (DOCS / "spec.md").read_text()
    presets = [
        Path(p.name).stem
        for p in resources.files("normlab.lab.study.spec").joinpath("specs").iterdir()
        if p.name.endswith(".toml")
    ]
    assert presets
    for what, names in (
        ("measure", MEASURES),
        ("plot", [f'"{p}"' for p in PLOTS]),
        ("rule", RULES),
        ("preset", presets),
    ):
        missing = [n for n in names if f"`{n}`" not in text]
        assert not missing, f"docs/spec.md does not name the {what}(s) {missing}"


def test_no_machine_path_in_the_repository():
    """What is published (docs, data, study.json) and shipped says where nothing lies on the
    machine it was made on: a home, a build or a tool directory."""
    import subprocess

    root = DOCS.parent
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    pattern = re.compile(r"(?<![\w.])/(?:root|home/\w+|work|tmp/pytest)/")
    found = []
    for name in filter(None, files):
        path = root / name
        if path.suffix in {".gz", ".png", ".svg", ".pt"} or not path.is_file():
            continue
        try:
            text = path.read_text("utf-8")
        except UnicodeDecodeError:
            continue
        found += [
            f"{name}:{i}" for i, line in enumerate(text.splitlines(), 1) if pattern.search(line)
        ]
    assert not found, f"machine paths: {found[:10]}"


def test_every_image_in_docs_is_shown_or_linked_by_a_page():
    """No image is kept that no page shows: each is named, relative to the page, by a page
    in its folder or above it (the README for docs/ itself)."""
    root = DOCS.parent
    pages = {p: p.read_text(encoding="utf-8") for p in [root / "README.md", *DOCS.rglob("*.md")]}
    orphans = []
    for img in sorted(DOCS.rglob("*.png")):
        named = any(
            img.is_relative_to(page.parent) and img.relative_to(page.parent).as_posix() in text
            for page, text in pages.items()
        )
        if not named:
            orphans.append(img.relative_to(root).as_posix())
    assert not orphans, orphans
