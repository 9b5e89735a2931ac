"""The study's plots as a reader sees them: whole blocks on a block axis, no offset above a flat
one, a legend of eight series beside the axes (each plot's figure, caught before it is saved)."""

import types

import pytest

from normlab.lab.kit import render
from normlab.lab.study.report import plots
from normlab.lab.train.result import RunResult


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plots save, in order."""
    figs = []

    def keep(fig, dpi=90):
        figs.append(fig)
        return render.png(fig, dpi)

    monkeypatch.setattr(plots, "png", keep)
    return figs


def _probed(values_by_step: dict, key: str = "residual_rms") -> RunResult:
    return RunResult({}, probes={s: {key: v} for s, v in values_by_step.items()})


def test_a_block_axis_has_whole_blocks_and_a_flat_profile_no_offset(drawn):
    # Post-LN's residual RMS: 1 to five digits in every block, at init and after training.
    flat = {"0": [1 - 4e-6] * 4, "150": [1 - 3e-6] * 4}
    results = {a: {i: _probed(flat) for i in range(3)} for a in ("post-L4", "post-L4-b")}
    assert plots.residual_rms(results, types.SimpleNamespace(arms=list(results)), None, None)
    ax = drawn[-1].axes[0]
    assert all(float(x).is_integer() for x in ax.get_xticks())  # no block 0.5 on 4 blocks
    assert ax.yaxis.get_offset_text().get_text() == ""
    ticks = ax.yaxis.get_ticklabels() + ax.yaxis.get_minorticklabels()
    labels = [t.get_text() for t in ticks if t.get_text()]
    assert len(set(labels)) == len(labels) > 1  # not 9.99996×10⁻¹ on every tick
    assert not any("times" in s for s in labels), labels


def test_eight_series_get_a_readable_legend_off_the_data(drawn):
    arms = [f"arm-{c}" for c in "abcd"]
    results = {
        a: {i: _probed({"0": [0.5 + k * 0.1] * 6, "20": [0.6 + k * 0.1] * 6}) for i in range(2)}
        for k, a in enumerate(arms)
    }
    assert plots.residual_rms(results, types.SimpleNamespace(arms=arms), None, None)
    fig = drawn[-1]
    ax = fig.axes[0]
    leg = ax.get_legend()
    assert len(leg.get_texts()) == 8 and leg.get_texts()[0].get_fontsize() >= render.FONT
    assert leg.get_window_extent().x0 >= ax.get_window_extent().x1


@pytest.mark.parametrize("delta", [0.0, 0.02])
def test_the_seeds_plot_names_the_delta_band_only_where_it_draws_one(drawn, delta):
    est = types.SimpleNamespace(values=[0.1, 0.2, 0.3], n=3, lo=0.0, hi=0.4, effect=0.2)
    rule = types.SimpleNamespace(delta=delta)
    rule.parts = lambda: [("c", rule)]
    claim = types.SimpleNamespace(name="c", rule=rule)
    assert plots.seeds({}, claim, types.SimpleNamespace(parts=(), estimate=est), None)
    ax = drawn[-1].axes[0]
    dashes = [x for x in ax.lines if x.get_linestyle() == "--"]
    assert ("±δ (orange)" in ax.get_xlabel()) == bool(dashes) == bool(delta)
    lo, hi = ax.get_xlim()
    assert all(lo < x < hi for line in dashes for x in line.get_xdata())  # in view, as named


def test_the_delta_lines_stay_in_view_however_far_the_values_lie(drawn):
    # values around 0.2 with δ = 0.02: the −δ line lay left of the axis and the label named it
    est = types.SimpleNamespace(values=[0.19, 0.2, 0.21], n=3, lo=0.18, hi=0.22, effect=0.2)
    rule = types.SimpleNamespace(delta=0.02)
    rule.parts = lambda: [("c", rule)]
    claim = types.SimpleNamespace(name="c", rule=rule)
    assert plots.seeds({}, claim, types.SimpleNamespace(parts=(), estimate=est), None)
    ax = drawn[-1].axes[0]
    lo, hi = ax.get_xlim()
    assert lo < -0.02 and hi > 0.22
