"""Report figures (perfreport.report.figures): drawn once when saved, the same SVG as matplotlib's
own two-pass save gives."""

from __future__ import annotations

import matplotlib
import pytest
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from perfreport.report import figures
from perfreport.report.model import (
    Bar, BarFigure, Line, LineFigure, Panel, RooflineFigure, RooflinePoint, WaterfallFigure,
)

FIGURES = [
    BarFigure("bars", "GPU time by kind", "time (µs)", "us", ("compute", "idle"),
              (Bar("rank 0", (1200.0, 300.0)), Bar("rank 1", (900.0, None)))),
    LineFigure("lines", "step time", "step", "step time", "step", "us",
               (Panel("baseline", (Line("rank 0 · baseline", (1, 2, 3, 4), (10.0, 12.0, None, 11.0), marked=(1,)),)),
                Panel("candidate", (Line("rank 0 · candidate", (1, 2, 3, 4), (13.0, 12.5, 14.0, 13.0),
                                         faded=(0,)),)))),
    WaterfallFigure("waterfall", "step time change", "step time", "us", ("baseline", 1000.0),
                    (("compute kernels", 250.0), ("GPU idle", -80.0)), ("candidate", 1170.0)),
    RooflineFigure("roofline", "roofline", (RooflinePoint("aten::mm", 120.0, 400.0), RooflinePoint("add", 0.2, 0.5)),
                   3.35, (("bf16", 989.4),)),
]


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.id)
def test_a_figure_is_drawn_once_and_its_svg_is_matplotlibs(figure, monkeypatch):
    draws = []
    real_draw = Axes.draw
    monkeypatch.setattr(Axes, "draw", lambda self, renderer: (draws.append(self), real_draw(self, renderer))[1])
    once = figures.render_svg(figure)
    assert len(draws) == len({id(ax) for ax in draws})  # each axes drawn once: the measuring pass only lays out
    monkeypatch.setattr(figures, "_Figure", Figure)  # matplotlib's own save: measure by drawing, then draw
    draws.clear()
    twice = figures.render_svg(figure)
    assert len(draws) == 2 * len({id(ax) for ax in draws})
    assert once == twice and once.startswith("<svg") and "<path" in once


def test_text_measured_once_per_process_gives_the_same_svgs(monkeypatch, figures_drawn_every_time):
    """figures._measured_once keeps text sizes and font tables across figures: each figure's
    SVG is the one drawn with matplotlib measuring everything anew, text is shaped fewer times,
    and matplotlib is as it was once the figure is drawn."""
    import contextlib

    from matplotlib import text
    from matplotlib.backends.backend_svg import RendererSVG
    from matplotlib.textpath import TextToPath

    shaped = []
    real_shape = TextToPath.get_text_width_height_descent
    monkeypatch.setattr(TextToPath, "get_text_width_height_descent",
                        lambda self, s, prop, ismath: (shaped.append(s), real_shape(self, s, prop, ismath))[1])
    measure, get_font = RendererSVG.get_text_width_height_descent, text.get_font
    with monkeypatch.context() as m:
        m.setattr(figures, "_measured_once", contextlib.nullcontext)
        anew = [figures.render_svg(f) for f in FIGURES * 2]
    anew_shaped = list(shaped)
    shaped.clear()
    figures._TEXT_SIZES.clear()
    figures._FONT_TABLES.clear()
    kept = [figures.render_svg(f) for f in FIGURES * 2]
    assert kept == anew
    assert RendererSVG.get_text_width_height_descent is measure and text.get_font is get_font  # restored
    # each (text, font) shaped once, not once per figure and per measuring
    assert set(shaped) == set(anew_shaped) and len(shaped) == len(figures._TEXT_SIZES) < len(anew_shaped) / 3


def test_many_marked_points_are_drawn_once_per_cell_of_a_few_pixels():
    """Past MAX_MARKS marked points, one cross per MARK_CELL_PX grid cell is drawn: every cell
    that holds a marked point keeps one (the picture is the same: a cross covers ~11 pixels),
    the SVG stays small, and a line with few marks keeps them all."""
    import numpy as np

    rng = np.random.default_rng(0)
    n = 40_000
    x = tuple(float(v) for v in range(1, n + 1))
    y = tuple(float(v) for v in 100.0 + 20.0 * rng.standard_normal(n))
    marked = tuple(range(0, n, 2))
    line = Line("rank 0 · candidate", x, y, marked=marked)
    shown = figures._shown_marks(x, y, marked, x, y, figures.WIDTH_IN)
    grid = (figures.WIDTH_IN * figures.DPI / figures.MARK_CELL_PX) * (2.3 * figures.DPI / figures.MARK_CELL_PX)
    assert set(shown) <= set(marked) and len(shown) < len(marked) / 2 and len(shown) <= grid
    cell_x = (n - 1) / (figures.WIDTH_IN * figures.DPI / figures.MARK_CELL_PX)
    cell_y = max(y) / (2.3 * figures.DPI / figures.MARK_CELL_PX)
    cells = lambda idx: {(int((x[i] - 1) // cell_x), int(y[i] // cell_y)) for i in idx}  # noqa: E731
    assert cells(shown) == cells(marked)  # every cell with a marked point has its cross
    svg, bare = (figures.render_svg(LineFigure("l", "t", "step", "v", "step", "us", (Panel("", (one,)),)))
                 for one in (line, Line(line.label, x, y)))
    assert svg.count("<use") - bare.count("<use") == len(shown) and len(svg) < 2_000_000  # a <use> per cross
    few = tuple(range(0, n, n // 50))
    assert figures._shown_marks(x, y, few, x, y, figures.WIDTH_IN) == list(few)


def test_m4_keeps_each_columns_first_last_lowest_and_highest_point_and_every_gap():
    """perfreport.report.decimate.m4_indices against its definition on random lines with gaps:
    per pixel column and run of finite values, the kept points hold the run's first and last
    point and its lowest and highest value; the first point of each gap is kept (the line stays
    broken there), and nothing is kept that is not one of these."""
    import numpy as np

    from perfreport.report.decimate import m4_indices

    rng = np.random.default_rng(7)
    for trial in range(20):
        n, columns = int(rng.integers(2_000, 20_000)), int(rng.integers(50, 400))
        x = np.sort(rng.uniform(0, 1_000, n)) if trial % 2 else np.arange(n, dtype=np.float64)
        y = rng.normal(0, 1, n) + (rng.random(n) < 0.001) * 50  # noise and a few spikes
        y[rng.random(n) < 0.01] = np.nan  # gaps
        keep = m4_indices(x, y, columns)
        col = np.minimum(((x - x[0]) * (columns / (x[-1] - x[0]))).astype(int), columns - 1)
        finite = np.isfinite(y)
        run = np.cumsum(finite & np.r_[True, ~finite[:-1]])
        expected = set(np.flatnonzero(~finite & np.r_[True, finite[:-1]]).tolist())
        for key in set(zip(run[finite].tolist(), col[finite].tolist())):
            rows = np.flatnonzero(finite & (run == key[0]) & (col == key[1]))
            expected |= {rows[0], rows[-1], rows[np.argmin(y[rows])], rows[np.argmax(y[rows])]}
        assert keep is not None and set(keep.tolist()) == expected
    assert m4_indices(np.arange(100.0), np.zeros(100), 25) is None  # four points a column: drawn whole
    assert m4_indices(np.arange(1000.0)[::-1], np.zeros(1000), 25) is None  # x descending: drawn whole


def test_a_long_line_is_drawn_through_fewer_points_with_the_same_pixels(figures_drawn_every_time):
    """A per-step line of 37,500 steps, noisy with spikes and a gap, drawn through M4's points
    (perfreport.report.decimate) paints what the full line paints: drawn both ways by matplotlib
    at the figure's size, under 0.5 % of the pixels differ by more than an eighth of full scale
    (anti-aliasing where the columns do not fall on the axes' pixels), every spike is there, and
    the SVG is a third of the size or less."""
    import io

    import numpy as np
    from matplotlib.image import imread

    rng = np.random.default_rng(3)
    n = 37_500
    y = 4_700 + 150 * np.sin(np.arange(n) / 3_000) + rng.normal(0, 40, n)
    y[rng.integers(0, n, 25)] += 3_000
    y[20_000:20_050] = np.nan
    figure = LineFigure("step_time_judged", "Step time per step", "profiler step", "step time", "step", "us",
                        (Panel("", (Line("candidate", tuple(range(1, n + 1)), tuple(y.tolist()), faded=(0,)),)),),
                        "line")

    def pixels(decimated: bool) -> np.ndarray:
        draw = figures.drawn_points
        try:
            if not decimated:
                figures.drawn_points = lambda x, y, columns: (x, y)
            with matplotlib.rc_context(figures.RC):
                fig = figures._draw_lines(figure)
                buf = io.BytesIO()
                fig.savefig(buf, format="png", dpi=figures.DPI)
        finally:
            figures.drawn_points = draw
        return imread(io.BytesIO(buf.getvalue()), format="png")

    full, drawn = pixels(False), pixels(True)
    assert full.shape == drawn.shape
    differ = (np.abs(full - drawn).max(axis=2) > 1 / 8).mean()
    assert differ < 0.005, differ
    svg = figures.render_svg(figure)
    original = figures.drawn_points
    try:
        figures.drawn_points = lambda x, y, columns: (x, y)
        whole = figures.render_svg(figure)
    finally:
        figures.drawn_points = original
    assert 3 * len(svg) < len(whole), (len(svg), len(whole))
    from perfreport.report.decimate import m4_indices
    kept = set(m4_indices(np.arange(1.0, n + 1), y, int(figures.WIDTH_IN * figures.DPI)).tolist())
    assert set(np.flatnonzero(y > 6_000).tolist()) <= kept  # every spike drawn
