"""normlab study --compare: one claim across studies' claims.json files."""

from __future__ import annotations

import json

import pytest

from normlab.lab.study.published.compare import base_name, markdown


def _study(tmp_path, name, preset, claims):
    d = tmp_path / name
    d.mkdir()
    (d / "claims.json").write_text(
        json.dumps({"preset": preset, "seed_block": 0, "claims": claims})
    )
    return d


def _claim(name, verdict, effect, d=64, init="xavier", parts=()):
    scope = [{"d": d, "blocks": 4, "T": 64, "B": 16, "steps": 200, "tokens": 0, "init": init}]
    c = {"name": name, "verdict": verdict, "scope": scope, "parts": list(parts)}
    if effect is not None:
        c.update(effect=effect, lo=effect - 0.01, hi=effect + 0.01, n=3)
    return c


def test_a_claim_in_two_studies_is_shown_with_what_differs_where_its_sign_changes(tmp_path):
    a = _study(tmp_path, "a", "quick", [_claim("final-norm-needed", "does not hold", -0.03),
                                        _claim("only-here", "holds", 0.1)])  # fmt: skip
    b = _study(tmp_path, "b", "paper", [_claim("final-norm-needed", "holds", 0.04, d=128)])
    text = markdown([a, b])
    assert "only-here" not in text  # decided by one study only
    rows = [ln for ln in text.splitlines() if ln.startswith("| final-norm-needed")]
    assert len(rows) == 2 and "quick (--seed 0)" in rows[0] and "paper (--seed 0)" in rows[1]
    assert "changes sign" in text and "d 64 vs 128" in text


def test_a_sign_change_inside_an_interval_that_holds_zero_is_said_to_be_unresolved(tmp_path):
    wide = {"lo": -0.02, "hi": 0.03, "n": 3}
    a = _study(tmp_path, "a", "quick", [_claim("rmsnorm-matches-quality", "holds", -0.03)])
    b = _study(
        tmp_path, "b", "paper", [{**_claim("rmsnorm-matches-quality", "holds", 0.005), **wide}]
    )
    text = markdown([a, b])
    assert "effect (unresolved: an interval holds 0) changes sign" in text
    c = _study(tmp_path, "c", "paper", [_claim("rmsnorm-matches-quality", "holds", 0.02)])
    assert "changes sign" in markdown([a, c]) and "unresolved" not in markdown([a, c])


def test_init_variants_are_matched_and_compound_claims_compare_their_parts(tmp_path):
    part = lambda e: {"part": "L24", "verdict": "holds", "effect": e, "lo": e, "hi": e, "n": 3}  # noqa: E731
    a = _study(tmp_path, "a", "paper", [
        _claim("post-ln-fails-deep", "holds", None, parts=[part(0.1)]),
        _claim("post-ln-fails-deep-default-init", "does not hold", None, init="default",
               parts=[part(-0.2)]),
    ])  # fmt: skip
    text = markdown([a])
    assert base_name("post-ln-fails-deep-default-init") == "post-ln-fails-deep"
    assert "L24 changes sign" in text and "init default vs xavier" in text.replace(
        "xavier vs default", "default vs xavier"
    )


def test_a_directory_without_claims_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="claims.json"):
        markdown([tmp_path])


def test_the_command_prints_the_table(tmp_path, capsys):
    from normlab.lab.cli import main

    a = _study(tmp_path, "a", "quick", [_claim("x", "holds", 0.1)])
    b = _study(tmp_path, "b", "paper", [_claim("x", "holds", 0.2)])
    assert main(["study", "--compare", str(a), str(b)]) == 0
    assert "| x | quick (--seed 0) |" in capsys.readouterr().out
    assert main(["study", "--compare", str(tmp_path)]) == 2


def test_agreement_counts_the_claims_decided_alike_and_the_intervals_that_do_not_overlap(
    tmp_path,
):
    a = _study(tmp_path, "a", "quick", [
        _claim("alike", "holds", 0.10),
        _claim("apart", "holds", 0.10),  # alike in words, intervals [0.09, 0.11] vs [0.19, 0.21]
        _claim("differ", "holds", 0.05),
        _claim("open", "inconclusive", 0.01),
        _claim("once", "holds", 0.3),  # run by one study: not compared
    ])  # fmt: skip
    b = _study(tmp_path, "b", "quick", [
        _claim("alike", "holds", 0.105),
        _claim("apart", "holds", 0.20),
        _claim("differ", "inconclusive", 0.045),
        _claim("open", "inconclusive", 0.012),
    ])  # fmt: skip
    from normlab.lab.study.published.compare import agreement, load

    got = agreement(load([a, b]))
    assert got.decided == ("alike", "apart", "differ") and got.alike == ("alike", "apart")
    assert got.disjoint == ("apart (quick (--seed 0) vs quick (--seed 0))",)
    text = markdown([a, b])
    assert "of the 3 claims that one of these studies decides" in text
    assert "2 are decided alike by every study that ran them (67 %)" in text
    assert (
        "decided differently: differ." in text
        and "do not overlap between two studies: apart" in text
    )
