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
