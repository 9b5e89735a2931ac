"""What every report shares: tables that escape what they hold, embedded images, atomic
writes."""

import base64

from normlab.lab.kit import render

EVIL = "<b>a|b</b> & 'c'"


def test_html_table_escapes_cells_unless_raw():
    escaped = render.html_table(["h<"], [[EVIL]])
    assert "<b>" not in escaped and "&lt;b&gt;" in escaped and "<th>h&lt;</th>" in escaped
    raw = render.html_table(["h"], [["<i>ok</i>"]], raw=True)
    assert "<td><i>ok</i></td>" in raw


def test_text_table_pads_every_column_to_its_widest_cell():
    lines = render.text_table(["a", "long header"], [["wide cell", 1], ["x", 22]]).splitlines()
    assert len({len(ln.rstrip()) for ln in lines[:2]}) == 1
    assert lines[1].split("  ") == ["-" * len("wide cell"), "-" * len("long header")]
    assert lines[3].startswith("x" + " " * (len("wide cell") - 1) + "  22")


def test_img_embeds_the_png_bytes():
    png = b"\x89PNG\r\n\x1a\nfake"
    tag = render.img(EVIL, png)
    b64 = tag.split("base64,", 1)[1].rstrip("'>")
    assert base64.b64decode(b64) == png and "&lt;b&gt;" in tag


def test_figure_and_png_make_a_png():
    fig, ax = render.figure()
    ax.plot([0, 1], [1, 0])
    assert render.png(fig).startswith(b"\x89PNG")


# --------------------------------------------------------------------------------------------
# the look of every plot (render.png tidies each figure before it saves)


def _labels(axis) -> list[str]:
    return [t.get_text() for t in axis.get_ticklabels() if t.get_text()]


def test_a_flat_axis_gets_plain_distinct_tick_labels_and_no_offset():
    fig, (lin, log) = render.figure(1, 2)
    flat = [0.999996, 0.999997, 0.999996]  # Post-LN's residual RMS: 1 to five digits
    lin.plot([0, 1, 2], flat)
    log.plot([0, 1, 2], flat)
    log.set_yscale("log")
    render.png(fig)
    for ax in (lin, log):
        assert ax.yaxis.get_offset_text().get_text() == ""
        labels = _labels(ax.yaxis)
        assert labels and len(set(labels)) == len(labels)
        assert not any("times" in s or "×" in s for s in labels), labels
        lo, hi = ax.get_ylim()
        # widened: 1e-6 of noise is not drawn across the whole axis as if it were a slope
        assert lo < min(flat) and hi > max(flat) and hi - lo > 100 * (max(flat) - min(flat))


def test_log_ticks_are_plain_numbers_within_a_few_decades():
    fig, ax = render.figure()
    ax.plot([0, 1], [0.3, 20])
    ax.set_yscale("log")
    render.png(fig)
    labels = _labels(ax.yaxis) + [t.get_text() for t in ax.yaxis.get_minorticklabels()]
    assert {"1", "10"} <= set(labels) and not any("$" in s for s in labels), labels


def test_a_legend_of_many_series_stands_beside_the_axes_in_a_readable_size():
    fig, (few, many) = render.figure(1, 2, figsize=(10, 3))
    for k in range(2):
        few.plot([0, 1], [k, k + 1], label=f"s{k}")
    for k in range(8):
        many.plot([0, 1], [k, k + 1], label=f"series {k}")
    render.legend(few)
    render.legend(many)
    render.png(fig)
    for ax, outside in ((few, False), (many, True)):
        leg = ax.get_legend()
        assert len(leg.get_texts()) == len(ax.get_lines())
        assert min(t.get_fontsize() for t in leg.get_texts()) >= render.FONT
        box, axes = leg.get_window_extent(), ax.get_window_extent()
        assert bool(box.x0 >= axes.x1) == outside


def test_a_label_longer_than_its_axis_is_wrapped():
    fig, ax = render.figure(figsize=(2.5, 2))
    ax.set_xlabel("a label far longer than the axis it stands under, which it would overrun")
    render.png(fig)
    assert "\n" in ax.get_xlabel()


def test_a_log_axis_within_a_factor_4_gets_evenly_spaced_labels():
    fig, ax = render.figure()
    ax.plot([0, 1], [0.6, 1.7])  # a residual-RMS profile: log ticks would be 0.6 and 1 alone
    ax.set_yscale("log")
    render.png(fig)
    labels = _labels(ax.yaxis)
    assert len(labels) >= 4 and all(float(s) for s in labels), labels
    assert ax.get_yscale() == "log"
