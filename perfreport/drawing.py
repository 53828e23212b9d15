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
parent (:mod:`perfreport.lifecycle`) and are reaped before :meth:`FigureDrawing.finish` returns
or when the drawing is stopped. Without ``fork`` everything is drawn in the parent, in order.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from .report.html import draw_svg
from .report.model import BarFigure, LineFigure, RooflineFigure, WaterfallFigure
from .timing import phase, record

Job = tuple[str, Any, "float | None", str]
"""(key in ``svgs``, figure, width in inches or None, element id prefix): :func:`perfreport.report.html.figures_to_draw`."""

MAX_CHILDREN = 7
_TIMES = 0xFFFFFFFF
"""The index of a child's last message: its wall and CPU seconds."""


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


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


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


class _Child:
    """A forked child drawing ``jobs`` (their indices in the drawing's list), streaming each SVG
    back (index: 4 bytes, length: 8 bytes, UTF-8 text); a reader thread here collects them."""

    def __init__(self, jobs: Sequence[Job], indices: list[int]) -> None:
        self.indices = indices
        self.svgs: dict[int, str] = {}
        self.times: tuple[float, ...] = ()  # the child's wall and CPU seconds, sent last
        self.done = threading.Event()  # the child's pipe closed: it has sent all it will
        self.pid = -1
        read_fd, write_fd = os.pipe()
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(read_fd)
            _child(parent, jobs, indices, write_fd)
        os.close(write_fd)
        self.pid = pid
        self._thread = threading.Thread(target=self._read, args=(read_fd,), name="perfreport-figures", daemon=True)
        self._thread.start()

    def _read(self, fd: int) -> None:
        try:
            with os.fdopen(fd, "rb") as f:
                while True:
                    head = f.read(12)
                    if len(head) < 12:
                        return
                    index, size = int.from_bytes(head[:4], "little"), int.from_bytes(head[4:], "little")
                    body = f.read(size)
                    if len(body) < size:
                        return
                    if index == _TIMES:
                        self.times = tuple(float(x) for x in body.decode().split())
                    else:
                        self.svgs[index] = body.decode("utf-8", "surrogatepass")
        except (OSError, ValueError):
            return
        finally:
            self.done.set()

    def wait(self, indices: Sequence[int]) -> None:
        """Until the child has sent each of ``indices`` or stopped sending."""
        while not self.done.is_set() and any(i not in self.svgs for i in indices):
            self.done.wait(0.005)

    def stop(self, kill: bool) -> None:
        """Reap the child (killed first with ``kill``, or when it is still drawing)."""
        if self.pid <= 0:
            return
        pid, self.pid = self.pid, -1
        if kill or not self.done.is_set():
            import signal

            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.waitpid(pid, 0)
        self._thread.join()


def _child(parent: int, jobs: Sequence[Job], indices: list[int], fd: int) -> None:
    """In the forked child: draw each figure of ``indices`` and send it; exit 1 at the first
    failure (the parent draws what was not sent, and meets the error itself)."""
    code = 0
    try:
        from .lifecycle import worker_init

        worker_init(parent)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        for i in indices:
            key, figure, width_in, prefix = jobs[i]
            _send(fd, i, draw_svg(key, figure, width_in, prefix).encode("utf-8", "surrogatepass"))
        _send(fd, _TIMES, f"{time.perf_counter() - wall0} {time.process_time() - cpu0}".encode())
    except BaseException:  # noqa: BLE001 - a child never returns into the parent's code
        code = 1
    finally:
        os._exit(code)


def _send(fd: int, index: int, data: bytes) -> None:
    _write_all(fd, index.to_bytes(4, "little") + len(data).to_bytes(8, "little") + data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class FigureDrawing:
    """The figures of one report, in groups, drawn by the parent and up to ``children`` forked
    children at once. Use :meth:`start`, then :meth:`draw` for each group in order, then
    :meth:`finish` (or :meth:`stop` on failure)."""

    def __init__(self, groups: Sequence[Sequence[Job]], children: int | None = None) -> None:
        self.jobs: list[Job] = [job for group in groups for job in group]
        self._groups: list[range] = []
        start = 0
        for group in groups:
            self._groups.append(range(start, start + len(group)))
            start += len(group)
        total = sum(cost(job[1]) for job in self.jobs)
        if children is None:  # a child for every 0.15 s of drawing, up to the other cores
            children = min(cores() - 1, MAX_CHILDREN, int(total / 0.15))
        if not hasattr(os, "fork"):
            children = 0
        self._children: list[_Child] = []
        self._mine: set[int] = set(range(len(self.jobs)))
        self.drawn_here = self.drawn_there = 0
        if children > 0:
            shares = [split([self.jobs[i] for i in group], children + 1) for group in self._groups]
            mine = [group[i] for group, share in zip(self._groups, shares) for i in share[0]]
            self._mine = set(mine)
            for k in range(1, children + 1):
                indices = [group[i] for group, share in zip(self._groups, shares) for i in share[k]]
                if indices:
                    self._children.append(_Child(self.jobs, indices))

    def draw(self, group: int, svgs: dict[str, str]) -> None:
        """Draw this process's share of ``group``, wait for the children's, and store every SVG
        of the group in ``svgs`` (under its key, and its prefix under ``key + "#prefix"``, as
        :func:`perfreport.report.html.context` does). A figure a child did not send is drawn here."""
        indices = self._groups[group]
        with phase("render:figures (drawn here)"):
            for i in indices:
                if i in self._mine:
                    self._store(i, draw_svg(*self.jobs[i]), svgs)
                    self.drawn_here += 1
        for child in self._children:
            theirs = [i for i in indices if i in child.indices]
            with phase("render:figures (child processes; waited for)"):
                child.wait(theirs)
            for i in theirs:
                if i in child.svgs:
                    self._store(i, child.svgs.pop(i), svgs)
                    self.drawn_there += 1
                else:  # the child failed or died: draw it here (an error here is the command's)
                    with phase("render:figures (drawn here)"):
                        self._store(i, draw_svg(*self.jobs[i]), svgs)
                    self.drawn_here += 1

    def _store(self, i: int, svg: str, svgs: dict[str, str]) -> None:
        key, _, _, prefix = self.jobs[i]
        svgs[key] = svg
        svgs[key + "#prefix"] = prefix

    def finish(self) -> None:
        """Reap the children (each has sent all its figures by now)."""
        for child in self._children:
            child.stop(kill=False)
            if child.times:
                record("render:figures (child process, beside)", *child.times)

    def stop(self) -> None:
        """Kill and reap the children (the command failed or was interrupted)."""
        for child in self._children:
            child.stop(kill=True)
