"""Report figures (perfreport.report.figures): drawn once when saved, the same SVG as matplotlib's
own two-pass save gives."""

from __future__ import annotations

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


def _line_figure(n: int, spike_at: int) -> LineFigure:
    """One run's per-step line of ``n`` steps at 0.1 ms, one step at 1 ms."""
    y = tuple(1000.0 if i == spike_at else 100.0 for i in range(n))
    return LineFigure("step_time_judged", "Step time per step", "profiler step", "step time", "step", "us",
                      (Panel("", (Line("candidate", tuple(range(1, n + 1)), y, faded=(0,)),)),), "line")


def test_a_line_of_thousands_of_points_is_an_image_that_draws_its_shape():
    """Past RASTER_POINTS, a line is drawn as a PNG inside the SVG (axes, ticks and labels stay
    vector text): the image, flipped back as the SVG places it, is the line's shape: at 0.1 ms
    (a tenth of the way up) across, and the one slow step a stroke to the top at its x.
    A line of RASTER_POINTS points stays a vector path."""
    import base64
    import io
    import re

    import numpy as np
    from matplotlib.image import imread

    n = figures.RASTER_POINTS + 2_000
    svg = figures.render_svg(_line_figure(n, spike_at=n // 2))
    images = re.findall(r'<image xlink:href="data:image/png;base64,([^"]+)"[^>]*transform="scale\(1 -1\)', svg)
    assert len(images) == 1 and "step time (ms)" in svg and len(svg) < 200_000
    pixels = imread(io.BytesIO(base64.b64decode(images[0])), format="png")[::-1]  # as placed: top row first
    ink = pixels[..., 3] > 0.5  # the line's pixels (the image is transparent elsewhere)
    rows, columns = ink.shape
    top_of = [np.flatnonzero(ink[:, c]).min() if ink[:, c].any() else rows for c in range(columns)]
    spike = int(np.argmin(top_of))
    assert abs(spike / columns - 0.5) < 0.05  # the slow step, half way along
    assert top_of[spike] < 0.15 * rows  # up to 1 ms: the top of the axes
    level = [top_of[c] for c in range(columns) if abs(c - spike) > 0.05 * columns and top_of[c] < rows]
    assert len(level) > 0.8 * columns and all(0.8 * rows < t < rows for t in level)  # 0.1 ms: near the bottom
    vector = figures.render_svg(_line_figure(figures.RASTER_POINTS, spike_at=10))
    assert "<image" not in vector
