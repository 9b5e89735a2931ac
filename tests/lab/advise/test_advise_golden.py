"""normlab advise against its golden outputs (advise_golden.py): the spec it writes parses to
the same study, and the advice from the same results is the same text, byte for byte."""

from __future__ import annotations

import pytest
from advise_golden import GOLDEN, advice_files, study_dict, twins

from normlab.lab.advise.twin_spec import spec_text
from normlab.lab.study.spec.parse import parse_spec

CASES = {case: (twin, command) for case, twin, command in twins()}


def test_every_case_has_its_golden_files():
    assert sorted(CASES) == sorted(p.name for p in GOLDEN.iterdir())


@pytest.mark.parametrize("case", CASES)
def test_the_spec_parses_to_the_golden_study(case):
    twin, command = CASES[case]
    golden = parse_spec((GOLDEN / case / "spec.toml").read_text("utf-8"), "golden.toml")
    study = parse_spec(spec_text(twin, command), "spec.toml")
    assert study_dict(study) == study_dict(golden)  # a readable diff, field by field
    assert study == golden  # and the parsed objects themselves (TrainConfigs, rules) are equal


@pytest.mark.parametrize("case", CASES)
def test_the_advice_is_the_golden_text(case):
    twin, _ = CASES[case]
    study = parse_spec((GOLDEN / case / "spec.toml").read_text("utf-8"), "golden.toml")
    for name, text in advice_files(twin, study).items():
        assert text == (GOLDEN / case / name).read_text("utf-8"), name


def test_every_advice_leads_with_a_bottom_line_of_one_of_three_words():
    """Its first section, on the report's first screen; and the terminal's first lines."""
    words = ("keep ", "switch to ", "cannot tell at this budget")
    for path in sorted(GOLDEN.glob("*/advice*.md")):
        first = path.read_text().split("\n## ")[1]
        assert first.startswith("Bottom line"), path
        assert sum(f": {w}" in first for w in words) == 1 and "tested at a d=" in first, path
    for path in sorted(GOLDEN.glob("*/headline.md")):
        assert path.read_text().startswith("Bottom line: "), path


def test_every_advice_names_what_it_does_not_test_with_the_command_that_does():
    for path in sorted(GOLDEN.glob("*/advice*.md")):
        untested = path.read_text().split("## Not tested by advise\n")[1]
        for what, command in (
            ("final norm", "normlab study --preset quick"),
            ("Weight decay", "no-decay-on-norms claim of normlab study --preset quick"),
            ("FP16/BF16", "normlab numerics"),
        ):
            line = next(x for x in untested.splitlines() if what in x)
            assert command in line, (path, line)
