"""``study.json``'s start (``began``): the first run's, kept across a resume even when the study
was killed before it wrote its study.json."""

import json

from normlab.lab.study.run.study_json import BEGAN_FILE, first_began, mark_began

T0, T1, T2 = "2026-12-06T21:13:36Z", "2026-12-06T21:56:24Z", "2026-12-06T23:00:00Z"


def test_a_study_killed_before_its_study_json_keeps_its_first_start(tmp_path):
    assert first_began(tmp_path, T1) == T1  # nothing recorded: now
    mark_began(tmp_path, T0)
    mark_began(tmp_path, T1)  # a resume does not move the start
    assert (tmp_path / BEGAN_FILE).read_text() == T0 + "\n"
    assert first_began(tmp_path, T1) == T0


def test_the_earliest_of_study_json_and_the_mark_is_the_start(tmp_path):
    (tmp_path / "study.json").write_text(json.dumps({"began": T1}))
    assert first_began(tmp_path, T2) == T1
    mark_began(tmp_path, T0)
    assert first_began(tmp_path, T2) == T0


def test_an_unreadable_start_is_ignored(tmp_path):
    (tmp_path / "study.json").write_text('{"began": "yesterday"}')
    (tmp_path / BEGAN_FILE).write_text("not a time\n")
    assert first_began(tmp_path, T2) == T2
