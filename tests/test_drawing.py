"""perfreport.report.drawing: a report's figures drawn by the parent and forked children, the same SVG
text as drawn in one process, a failing child's share drawn by the parent, no child left behind."""

from __future__ import annotations

import functools
import os

import pytest

from perfreport.report import drawing
from perfreport.report import build_report
from perfreport.report.html import draw_svg, figures_to_draw, render_html

from .test_report_build import comparison_document

pytestmark = pytest.mark.usefixtures("figures_drawn_every_time")  # the drawing itself, not a memo's copy


@functools.lru_cache(maxsize=1)
def _report():
    return build_report(comparison_document())


@pytest.fixture(scope="module")
def jobs():
    brief = figures_to_draw(_report(), brief=True)
    rest = figures_to_draw(_report(), svgs={k: v for key, _, _, p in brief for k, v in ((key, ""), (key + "#prefix", p))})
    assert len(brief) >= 2 and len(rest) >= 3  # the first screen's figures, then the analyses'
    return brief, rest


def _reaped(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        return False
    return True


def test_figures_drawn_in_children_are_the_figures_drawn_here(jobs):
    brief, rest = jobs
    figures = drawing.FigureDrawing([brief, rest], children=2)
    pids = [c.pid for c, _ in figures._children]
    assert len(pids) == 2
    svgs: dict[str, str] = {}
    figures.draw(0, svgs)
    assert set(svgs) == {k for key, _, _, _ in brief for k in (key, key + "#prefix")}
    figures.draw(1, svgs)
    figures.finish()
    assert _reaped(pids)
    assert figures.drawn_there > 0 and figures.drawn_here > 0
    assert figures.drawn_here + figures.drawn_there == len(brief) + len(rest)
    for key, figure, width_in, prefix in brief + rest:
        assert svgs[key] == draw_svg(key, figure, width_in, prefix)
        assert svgs[key + "#prefix"] == prefix
    # the page made from them is the page drawn in one process
    assert render_html(_report(), svgs=svgs) == render_html(_report())


def test_a_child_that_fails_leaves_its_figures_to_the_parent(jobs, monkeypatch):
    brief, rest = jobs
    parent = os.getpid()
    real = drawing.draw_svg

    def fails_in_child(*args):
        if os.getpid() != parent:
            raise MemoryError("the child ran out of memory")
        return real(*args)

    monkeypatch.setattr(drawing, "draw_svg", fails_in_child)
    figures = drawing.FigureDrawing([brief, rest], children=1)
    pids = [c.pid for c, _ in figures._children]
    svgs: dict[str, str] = {}
    figures.draw(0, svgs)
    figures.draw(1, svgs)
    figures.finish()
    assert _reaped(pids)
    assert figures.drawn_there == 0 and figures.drawn_here == len(brief) + len(rest)
    assert all(svgs[key] == real(key, f, w, p) for key, f, w, p in brief)


def test_stopping_kills_and_reaps_the_children(jobs):
    brief, rest = jobs
    early = drawing.EarlyFigures(lambda: _report().sections)
    figures = drawing.FigureDrawing([brief, rest], children=2, early=early)
    pids = [c.pid for c, _ in figures._children] + [early._child.pid]
    figures.stop()
    assert pids and _reaped(pids)


def test_the_split_balances_estimated_cost_and_keeps_page_order(jobs):
    brief, rest = jobs
    shares = drawing.split(brief + rest, 2)
    assert sorted(i for s in shares for i in s) == list(range(len(brief) + len(rest)))
    assert all(s == sorted(s) for s in shares)
    loads = [sum(drawing.cost((brief + rest)[i][1]) for i in s) for s in shares]
    biggest = max(drawing.cost(j[1]) for j in brief + rest)
    assert abs(loads[0] - loads[1]) <= biggest


def test_figures_drawn_before_the_gate_are_used_only_where_they_show_the_report_s_data(jobs):
    import dataclasses

    from perfreport.report.model import LineFigure

    brief, rest = jobs
    report = _report()
    early = drawing.EarlyFigures(lambda: report.sections)  # every section's figures, drawn from the start
    pid = early._child.pid
    early.index()
    early._child.wait([0])  # the child has drawn its first figure: the parent cannot claim that one
    figures = drawing.FigureDrawing([brief, rest], children=1, early=early)
    svgs: dict[str, str] = {}
    figures.draw(0, svgs)
    figures.draw(1, svgs)
    figures.finish()
    assert _reaped([pid]) and early.used >= 1
    assert figures.drawn_here + figures.drawn_there == len(brief) + len(rest)
    assert render_html(report, svgs=svgs) == render_html(report)

    # the child drew a figure from other data (a line changed): its SVG is not used
    def altered():
        out = []
        for s in report.sections:
            blocks = tuple(dataclasses.replace(b, title=b.title + " (other data)") if isinstance(b, LineFigure) else b
                           for b in s.blocks)
            out.append(dataclasses.replace(s, blocks=blocks))
        return out

    early = drawing.EarlyFigures(altered)
    early.index()
    early._child.wait([k for k in range(len(early.keys))])  # every figure drawn by the child
    figures = drawing.FigureDrawing([brief, rest], children=0, early=early)
    svgs = {}
    figures.draw(0, svgs)
    figures.draw(1, svgs)
    figures.finish()
    in_sections = [j for j in brief + rest if not j[0].startswith("overview/")]  # what the child drew
    lines = [j for j in in_sections if isinstance(j[1], LineFigure)]
    assert lines and early.used == len(in_sections) - len(lines)
    assert render_html(report, svgs=svgs) == render_html(report)


def test_a_child_that_hangs_is_given_up_on_and_killed(jobs, monkeypatch):
    import time

    brief, rest = jobs
    parent = os.getpid()
    real = drawing.draw_svg

    def hangs_in_child(*args):
        if os.getpid() != parent:
            time.sleep(3600)
        return real(*args)

    monkeypatch.setattr(drawing, "draw_svg", hangs_in_child)
    monkeypatch.setattr(drawing, "patience", lambda jobs: 0.3)
    figures = drawing.FigureDrawing([brief, rest], children=1)
    pids = [c.pid for c, _ in figures._children]
    svgs: dict[str, str] = {}
    started = time.perf_counter()
    figures.draw(0, svgs)
    figures.draw(1, svgs)
    figures.finish()
    assert time.perf_counter() - started < 60
    assert _reaped(pids) and figures.drawn_there == 0
    assert figures.drawn_here == len(brief) + len(rest)


def test_children_draw_what_no_pdf_waits_for_behind_the_rest(jobs, monkeypatch):
    """A drawing child draws the PDF page's figures at its normal priority and the HTML page's
    own ones at nice BEHIND; the early child, whose figures only the HTML page shows, draws all
    of them at BEHIND (with more runnable processes than cores the PDF's chain goes first)."""
    brief, rest = jobs
    parent = os.getpid()
    real = drawing.draw_svg

    def niceness(key, figure, width_in, prefix):  # what the drawing process's priority was
        if os.getpid() == parent:
            return real(key, figure, width_in, prefix)
        return f"<svg>nice {os.getpriority(os.PRIO_PROCESS, 0)}</svg>"

    monkeypatch.setattr(drawing, "draw_svg", niceness)
    start = os.getpriority(os.PRIO_PROCESS, 0)
    figures = drawing.FigureDrawing([brief, rest], children=1, behind_from=len(brief))
    (child, share), = figures._children
    svgs: dict[str, str] = {}
    figures.draw(0, svgs)
    figures.draw(1, svgs)
    figures.finish()
    theirs = {i: svgs[figures.jobs[i][0]] for i in share}
    assert any(i < len(brief) for i in theirs) and any(i >= len(brief) for i in theirs)
    for i, svg in theirs.items():
        assert svg == f"<svg>nice {start if i < len(brief) else max(start, drawing.BEHIND)}</svg>", (i, svg)
    assert os.getpriority(os.PRIO_PROCESS, 0) == start  # the parent keeps its own

    early = drawing.EarlyFigures(lambda: _report().sections, behind=True)
    early.index()
    early._child.wait([0])
    import pickle
    _, _, svg = pickle.loads(early._child.messages[0])
    early.finish()
    assert svg == f"<svg>nice {max(start, drawing.BEHIND)}</svg>"
