"""Drawing a report's figures on every core: the parent and forked children, each a share.

matplotlib is most of what rendering a report costs (0.05–0.5 s a figure, a dozen or more
figures, all in one thread), and the gate is done by the time they are drawn, so the other cores
are idle. :class:`FigureDrawing` forks children once the report is built (a fork shares the
report: nothing is pickled), gives each a share of the figures by estimated cost, draws its own
share meanwhile, and gathers the SVG texts, which a child streams back one by one as it draws
them. The figures come in groups (the PDF's brief first, then the rest of the HTML page), so the
parent can hand the PDF's page to its renderer as soon as the first group is drawn.

A child draws with :func:`perfreport.report.html.draw_svg`, the same function the page uses, so
the SVG is the same wherever it was drawn. A child that fails or dies leaves its figures to the
parent, which draws them itself (and raises what drawing them raises). Children die with the
parent (:mod:`perfreport.running.lifecycle`) and are reaped before :meth:`FigureDrawing.finish` returns
or when the drawing is stopped. Without ``fork`` everything is drawn in the parent, in order.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from .html import draw_svg
from .model import BarFigure, LineFigure, RooflineFigure, WaterfallFigure
from ..running.collector import no_collection, paused
from ..running.forked import Child as _Child, cores
from ..timing import phase, record

Job = tuple[str, Any, "float | None", str]
"""(key in ``svgs``, figure, width in inches or None, element id prefix): :func:`perfreport.report.html.figures_to_draw`."""

MAX_CHILDREN = 7
BEHIND = 10
"""The nice value of drawing that no PDF waits for (the HTML page's own figures, while a PDF is
laid out): with more runnable processes than cores, the figures of the PDF's page and the PDF's
layout, which the command's end waits for, get the cores first; on an idle core a nice value
changes nothing. A child only ever lowers its own priority (raising it back needs privileges)."""
_KEYS = 0xFFFFFFFE
"""The index of an early child's first message: the keys of the figures it draws."""


def cost(figure: Any) -> float:
    """A rough drawing time (seconds on a 2-core CI machine): enough to split figures evenly."""
    if isinstance(figure, LineFigure):
        lines = [line for p in figure.panels for line in p.lines]
        return 0.06 + 0.05 * len(figure.panels) + 0.01 * len(lines) + 0.00008 * sum(len(line.x) for line in lines)
    if isinstance(figure, RooflineFigure):
        return 0.1 + 0.015 * len(figure.points) + 0.02 * len(figure.peaks)
    if isinstance(figure, BarFigure):
        return 0.04 + 0.004 * len(figure.bars) * max(len(figure.segments), 1)
    if isinstance(figure, WaterfallFigure):
        return 0.05 + 0.006 * len(figure.steps)
    return 0.1


def patience(jobs: Sequence[Job]) -> float:
    """How long the parent waits for a child's figures before drawing them itself: far more
    than drawing them takes even on a loaded machine, so only a child that hangs (it should
    not) is given up on."""
    return 5.0 + 10.0 * sum(cost(job[1]) for job in jobs)


def split(jobs: Sequence[Job], shares: int) -> list[list[int]]:
    """Indices of ``jobs`` in ``shares`` lists of about equal :func:`cost` (longest first to the
    least loaded), each in page order. Share 0 is the parent's."""
    loads = [0.0] * shares
    out: list[list[int]] = [[] for _ in range(shares)]
    for i in sorted(range(len(jobs)), key=lambda i: -cost(jobs[i][1])):
        k = loads.index(min(loads))
        out[k].append(i)
        loads[k] += cost(jobs[i][1])
    return [sorted(share) for share in out]


def _draw_share(jobs: Sequence[Job], indices: list[int], behind_from: int | None = None
                ) -> Callable[[Callable[[int, bytes], None]], None]:
    """A child's work: draw ``indices`` and send each SVG; from job ``behind_from`` on (figures
    no PDF waits for) at the lower priority :data:`BEHIND`."""
    def work(send: Callable[[int, bytes], None]) -> None:
        no_collection()  # a child that draws, then exits (perfreport.running.collector)
        for i in indices:
            if behind_from is not None and i >= behind_from:
                _yield_cores()
            send(i, draw_svg(*jobs[i]).encode("utf-8", "surrogatepass"))
    return work


def _yield_cores() -> None:
    """This process (a drawing child) at nice :data:`BEHIND` (an absolute value: again is a no-op)."""
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) < BEHIND:
            os.setpriority(os.PRIO_PROCESS, 0, BEHIND)
    except (AttributeError, OSError):
        pass


class EarlyFigures:
    """The analyses' figures, drawn by a child forked before the gate runs: they show each
    side's analysis tables, which the gate does not change, and the gate leaves a core idle.

    ``sections`` (called in the child) makes the report sections those figures are in, as the
    report will hold them. The child sends the list of their keys (as in
    :func:`perfreport.report.html.figure_key`), then each figure with its SVG. The parent uses
    an SVG only for a figure equal to the one its report holds, and draws the rest itself; it
    may claim a figure the child has not started (one byte per figure in memory shared with the
    child: at worst both draw it, and the parent's is used)."""

    def __init__(self, sections: Callable[[], Sequence[Any]], *, limit: int = 512, behind: bool = False) -> None:
        import mmap

        self._claims = mmap.mmap(-1, limit)  # anonymous and shared with the child: 0 free, 1 child's, 2 parent's
        self.keys: list[str] = []
        self._child = _Child(self._work(sections, limit, behind)) if hasattr(os, "fork") else None
        self.used = 0

    def _work(self, sections: Callable[[], Sequence[Any]], limit: int, behind: bool):
        claims = self._claims

        def work(send: Callable[[int, bytes], None]) -> None:
            import pickle

            no_collection()  # a child that draws, then exits (perfreport.running.collector)
            if behind:  # no PDF waits for these figures: the gate and the PDF's go first
                _yield_cores()

            from .html import figure_key

            jobs = [(figure_key(s.id, b.id, None), b, None, f"fig-{_clean_id(b.id)}")
                    for s in sections() for b in s.blocks if isinstance(b, (LineFigure, BarFigure, WaterfallFigure,
                                                                                RooflineFigure))][:limit]
            send(_KEYS, "\n".join(job[0] for job in jobs).encode("utf-8", "surrogatepass"))
            for k, job in enumerate(jobs):
                if claims[k] == 0:
                    claims[k] = 1
                    send(k, pickle.dumps((job[1], job[3], draw_svg(*job))))
        return work

    def index(self) -> dict[str, int]:
        """{figure key: its number} of the figures the child draws (waits for the list)."""
        child = self._child
        if child is None:
            return {}
        child.wait([_KEYS])
        if not self.keys and _KEYS in child.messages:
            self.keys = child.messages[_KEYS].decode("utf-8", "surrogatepass").split("\n")
        return {key: k for k, key in enumerate(self.keys) if key}

    def claim(self, k: int) -> bool:
        """Whether the parent may draw figure ``k`` itself (the child has not started it)."""
        if self._claims[k] == 0:
            self._claims[k] = 2
            return True
        return self._claims[k] == 2

    def take(self, k: int, job: Job, svgs: dict[str, str]) -> bool:
        """Store the child's SVG of figure ``k`` in ``svgs`` when it sent one for ``job``'s very
        figure; False when it did not (the parent draws it). Waits while the child draws it
        (for at most :func:`patience`: a child that hangs does not hang the command)."""
        import pickle

        child = self._child
        if child is None or self.claim(k):
            return False
        child.wait([k], timeout=patience([job]))
        if k not in child.messages:
            return False
        figure, prefix, svg = pickle.loads(child.messages.pop(k))
        if figure != job[1]:
            return False
        svgs[job[0]] = svg
        svgs[job[0] + "#prefix"] = prefix
        self.used += 1
        return True

    def finish(self) -> None:
        """Reap the child: killed when still drawing (what it did not send was drawn here)."""
        if self._child is not None:
            self._child.stop(kill=not self._child.done.is_set())
            if self._child.times:
                record("render:figures early (child process, beside the gate)", *self._child.times)
            self._child = None

    stop = finish


def _clean_id(block_id: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_-]", "-", block_id)


class FigureDrawing:
    """The figures of one report, in groups, drawn by the parent and up to ``children`` forked
    children at once, and by ``early`` (:class:`EarlyFigures`) for the figures it draws. Call
    :meth:`draw` for each group in order, then :meth:`finish` (or :meth:`stop` on failure).
    ``behind_from``: the first job no PDF waits for; children draw it and the rest at the lower
    priority :data:`BEHIND`."""

    def __init__(self, groups: Sequence[Sequence[Job]], children: int | None = None,
                 early: EarlyFigures | None = None, behind_from: int | None = None) -> None:
        self.jobs: list[Job] = [job for group in groups for job in group]
        self._groups: list[range] = []
        start = 0
        for group in groups:
            self._groups.append(range(start, start + len(group)))
            start += len(group)
        self._early = early
        index = early.index() if early is not None else {}
        self._early_of = {i: index[job[0]] for i, job in enumerate(self.jobs) if job[0] in index}
        rest = [[i for i in group if i not in self._early_of] for group in self._groups]
        total = sum(cost(self.jobs[i][1]) for group in rest for i in group)
        if children is None:  # a child for every 0.15 s of drawing, up to the other cores
            children = min(cores() - 1, MAX_CHILDREN, int(total / 0.15))
        if not hasattr(os, "fork"):
            children = 0
        self._children: list[tuple[_Child, set[int]]] = []
        self._mine: set[int] = {i for group in rest for i in group}
        self.drawn_here = self.drawn_there = 0
        if children > 0:
            shares = [split([self.jobs[i] for i in group], children + 1) for group in rest]
            self._mine = {group[i] for group, share in zip(rest, shares) for i in share[0]}
            for k in range(1, children + 1):
                indices = [group[i] for group, share in zip(rest, shares) for i in share[k]]
                try:
                    if indices:
                        self._children.append((_Child(_draw_share(self.jobs, indices, behind_from)), set(indices)))
                except OSError:  # no process to spare: this share is drawn here
                    self._mine.update(indices)

    def draw(self, group: int, svgs: dict[str, str]) -> None:
        """Draw this process's share of ``group``, take the children's, and store every SVG of
        the group in ``svgs`` (under its key, and its prefix under ``key + "#prefix"``, as
        :func:`perfreport.report.html.context` does). A figure a child did not send is drawn here."""
        indices = self._groups[group]
        with paused():  # (perfreport.running.collector)
            with phase("render:figures (drawn here)"):
                for i in indices:
                    if i in self._mine:
                        self._store(i, draw_svg(*self.jobs[i]), svgs)
            self._take_early([i for i in indices if i in self._early_of], svgs)
        for child, share in self._children:
            theirs = [i for i in indices if i in share]
            with phase("render:figures (child processes; waited for)"):
                child.wait(theirs, timeout=patience([self.jobs[i] for i in theirs]))
            for i in theirs:
                if i in child.messages:
                    key, _, _, prefix = self.jobs[i]
                    svgs[key] = child.messages.pop(i).decode("utf-8", "surrogatepass")
                    svgs[key + "#prefix"] = prefix
                    self.drawn_there += 1
                else:  # the child failed or died: draw it here (an error here is the command's)
                    with phase("render:figures (drawn here)"):
                        self._store(i, draw_svg(*self.jobs[i]), svgs)

    def _take_early(self, pending: list[int], svgs: dict[str, str]) -> None:
        """The early child's figures of ``pending``: the parent draws those the child has not
        started, from the last (the child draws from the first), and takes the others."""
        early = self._early
        for i in sorted(pending, key=lambda i: -self._early_of[i]):
            k = self._early_of[i]
            if early.claim(k):
                with phase("render:figures (drawn here)"):
                    self._store(i, draw_svg(*self.jobs[i]), svgs)
                continue
            with phase("render:figures (early child; waited for)"):
                taken = early.take(k, self.jobs[i], svgs)
            if taken:
                self.drawn_there += 1
            else:  # not sent, or drawn from other data than the report's: draw it here
                with phase("render:figures (drawn here)"):
                    self._store(i, draw_svg(*self.jobs[i]), svgs)

    def _store(self, i: int, svg: str, svgs: dict[str, str]) -> None:
        key, _, _, prefix = self.jobs[i]
        svgs[key] = svg
        svgs[key + "#prefix"] = prefix
        self.drawn_here += 1

    def finish(self) -> None:
        """Reap the children (each has sent all its figures by now)."""
        for child, _ in self._children:
            child.stop(kill=False)
            if child.times:
                record("render:figures (child process, beside)", *child.times)
        if self._early is not None:
            self._early.finish()

    def stop(self) -> None:
        """Kill and reap the children (the command failed or was interrupted)."""
        for child, _ in self._children:
            child.stop(kill=True)
        if self._early is not None:
            self._early.stop()
