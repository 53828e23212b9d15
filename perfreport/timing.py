"""Where the time goes: the wall and CPU seconds of every named phase of a command.

A command records its phases in the parent (planning, waiting for the ranks, each cross-rank
analysis, the gate, the attribution, each renderer) and every per-rank task records its own in
the process that runs it (read, decompress, scan, decode, each analysis), sent back with the
rank's digest. ``-v`` prints them; ``report.json`` keeps them (``timings``), so the next second
to win is found by reading, not guessing.

Phases nest (an analysis computes a shared view the first time it needs it: ``memo:…``): each
phase keeps its inclusive wall time and its *self* time, the wall time not spent in a nested
phase, so the self times of one process add up to the time it spent recording. CPU seconds are
the recording thread's own (:func:`time.thread_time`), so a helper thread (the checksum) is not
charged to the phase that happens to run beside it.

Each phase also counts the recording thread's minor page faults (``minor_faults``, inclusive
like the wall time; Linux, 0 elsewhere): a fresh page costs 1.5-6 µs to fault in on the 2-core
VMs these commands are measured on, so a phase's memory growth is often where its CPU went.

Recording costs two clock reads and two ``getrusage`` calls per phase; nothing is recorded
outside :func:`recording` (a library call, a test), so the analyses can mark their phases
unconditionally.
"""

from __future__ import annotations

import contextvars
import os
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field


try:  # per-thread resource usage: Linux
    import resource

    _RUSAGE_THREAD = getattr(resource, "RUSAGE_THREAD", None)
except ImportError:  # pragma: no cover - Windows
    resource, _RUSAGE_THREAD = None, None


def thread_faults() -> int:
    """The calling thread's minor page faults so far (0 where the system does not count them)."""
    return resource.getrusage(_RUSAGE_THREAD).ru_minflt if _RUSAGE_THREAD is not None else 0


@dataclass
class _Open:
    name: str
    wall0: float
    cpu0: float
    faults0: int
    child_wall: float = 0.0


@dataclass
class Timings:
    """The phases of one process (or one per-rank task): name -> [wall, self, cpu, calls, faults]."""

    phases: dict[str, list[float]] = field(default_factory=dict)
    helper_peaks: list[int] = field(default_factory=list)
    """Peak RSS (bytes) of each forked helper reaped (see :func:`reaped`)."""
    _stack: list[_Open] = field(default_factory=list, repr=False)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.phases.setdefault(name, [0.0, 0.0, 0.0, 0, 0])  # listed in the order phases start
        self._stack.append(_Open(name, time.perf_counter(), time.thread_time(), thread_faults()))
        try:
            yield
        finally:
            self._close()

    def _close(self) -> None:
        top = self._stack.pop()
        wall = time.perf_counter() - top.wall0
        cpu = time.thread_time() - top.cpu0
        self.add(top.name, wall, cpu, self_s=wall - top.child_wall, faults=thread_faults() - top.faults0)
        if self._stack:
            self._stack[-1].child_wall += wall

    def add(self, name: str, wall_s: float, cpu_s: float = 0.0, *, self_s: float | None = None,
            calls: int = 1, faults: int = 0) -> None:
        """Count ``wall_s`` (and ``cpu_s``, ``faults``) against ``name``: a phase timed elsewhere
        (a child process, a thread)."""
        row = self.phases.setdefault(name, [0.0, 0.0, 0.0, 0, 0])
        row[0] += wall_s
        row[1] += wall_s if self_s is None else self_s
        row[2] += cpu_s
        row[3] += calls
        row[4] += faults

    def add_inside(self, name: str, seconds: float) -> None:
        """Count ``seconds`` against ``name``, a step of the open phase timed by the code that ran
        it: its own time, out of that phase's self time (as a nested phase's)."""
        self.add(name, seconds, seconds)
        if self._stack:
            self._stack[-1].child_wall += seconds

    def records(self) -> list[dict]:
        """The phases, in the order they first ran: ``phase``, ``wall_s`` (inclusive),
        ``self_s`` (without nested phases), ``cpu_s`` (this thread's), ``calls``, ``minor_faults``
        (this thread's, inclusive)."""
        return [{"phase": name, "wall_s": round(w, 4), "self_s": round(s, 4), "cpu_s": round(c, 4), "calls": int(n),
                 "minor_faults": int(f)} for name, (w, s, c, n, f) in self.phases.items()]


_current: contextvars.ContextVar[Timings | None] = contextvars.ContextVar("perfreport_timings", default=None)
_outermost: contextvars.ContextVar[Timings | None] = contextvars.ContextVar("perfreport_command", default=None)


@contextmanager
def recording(timings: Timings | None = None) -> Iterator[Timings]:
    """Record the phases run inside this block (in this thread) into ``timings`` (a new one by
    default); a block inside another records into its own, not into the outer one."""
    timings = timings if timings is not None else Timings()
    token = _current.set(timings)
    outer = _outermost.set(timings) if _outermost.get() is None else None
    try:
        yield timings
    finally:
        _current.reset(token)
        if outer is not None:
            _outermost.reset(outer)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the block as phase ``name`` of the current :func:`recording` (nothing outside one)."""
    timings = _current.get()
    if timings is None:
        yield
        return
    with timings.phase(name):
        yield


def current() -> Timings | None:
    """The :class:`Timings` being recorded in this thread, if any."""
    return _current.get()


def reaped(pid: int) -> int:
    """Reap the forked helper ``pid`` (a single rank's second half of the analyses, a figure's
    child, the PDF renderer: none of them the parent or a worker), keep its peak RSS for the
    command's timings (``helpers``: the largest process of a command may be one), and return
    its wait status (:func:`os.waitpid`'s)."""
    if not hasattr(os, "wait4"):
        return os.waitpid(pid, 0)[1]
    _, status, usage = os.wait4(pid, 0)
    command = _outermost.get()  # a rank task's own recording is nested in the command's
    if command is not None:
        command.helper_peaks.append(usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024))
    return status


def nested(name: str, seconds: float) -> None:
    """Add a phase that ran on this thread inside the current phase, timed by the code that ran
    it (a step of a C function, busy on the CPU): its time is its own, no longer the enclosing
    phase's self time."""
    timings = _current.get()
    if timings is not None:
        timings.add_inside(name, seconds)


def record(name: str, wall_s: float, cpu_s: float = 0.0, faults: int = 0) -> None:
    """Add a phase timed elsewhere (another thread or process) to the current recording. It
    ran beside this thread's phases, so it gets no self time: the self times still add up to
    the recording thread's wall time. ``faults``: its minor page faults, where it counted them."""
    timings = _current.get()
    if timings is not None:  # concurrent with this thread's phases: no self time of its own
        timings.add(name, wall_s, cpu_s, self_s=0.0, faults=faults)


def merged(per_rank: Sequence[Sequence[Mapping]]) -> list[dict]:
    """The phases of several tasks summed by name (first-seen order): the whole job's cost of
    each per-rank phase, in CPU-bound seconds across workers."""
    out: dict[str, dict] = {}
    for records in per_rank:
        for r in records:
            row = out.setdefault(r["phase"], {"phase": r["phase"], "wall_s": 0.0, "self_s": 0.0, "cpu_s": 0.0,
                                              "calls": 0, "minor_faults": 0})
            for key in ("wall_s", "self_s", "cpu_s", "calls"):
                row[key] += r[key]
            row["minor_faults"] += r.get("minor_faults", 0)
    return [{**r, **{k: round(r[k], 4) for k in ("wall_s", "self_s", "cpu_s")}} for r in out.values()]


def timings_document(parent: Timings, sides: Mapping[str, Sequence[Mapping]], wall_s: float,
                     parent_pid: int, parent_peak_rss: int) -> dict:
    """``report.json``'s ``timings``: the command's wall time, the parent's phases, and each
    rank task's (process, peak RSS, wall seconds of its load and analyses, self seconds by
    phase) with those phases summed over ranks.

    ``sides``: the rank tasks' records (:attr:`perfreport.pipeline.Analysis.rank_timings`) by
    side (``""`` for an analyze, ``baseline`` / ``candidate`` … for a compare)."""
    ranks = [{"side": side, "rank": r["rank"], "pid": r["pid"], "peak_rss_bytes": r["peak_rss_bytes"],
              "wall_s": r["wall_s"], "load_s": r["load_s"], "analyze_s": r["analyze_s"],
              "phases": {p["phase"]: p["self_s"] for p in r["phases"]}}
             for side, records in sides.items() for r in records]
    workers = {r["pid"]: r["peak_rss_bytes"] for r in ranks if r["pid"] and r["pid"] != parent_pid}
    return {
        "wall_s": round(wall_s, 4),
        "parent": {"pid": parent_pid, "peak_rss_bytes": parent_peak_rss, "phases": parent.records()},
        "workers": {"processes": len(workers), "largest_peak_rss_bytes": max(workers.values(), default=0)},
        "helpers": {"processes": len(parent.helper_peaks), "largest_peak_rss_bytes": max(parent.helper_peaks, default=0)},
        "rank_phases": merged([r["phases"] for records in sides.values() for r in records]),
        "ranks": ranks,
    }


MIN_SHOWN_S = 0.0005
"""``-v`` leaves out phases of less self time than this (0.5 ms): they would be noise."""


def timing_lines(doc: Mapping, max_ranks: int = 8) -> list[str]:
    """The ``-v`` view of :func:`timings_document`: the parent's phases, the rank phases summed
    over ranks, and each rank's wall time (the slowest ``max_ranks``), self seconds first."""
    mb = 1e6
    workers, helpers = doc["workers"], doc.get("helpers") or {"processes": 0}
    lines = [f"timings: {doc['wall_s']:.2f} s wall; parent peak RSS {doc['parent']['peak_rss_bytes'] / mb:,.0f} MB"
             + (f"; {workers['processes']} worker process(es), largest peak RSS "
                f"{workers['largest_peak_rss_bytes'] / mb:,.0f} MB" if workers["processes"] else "")
             + (f"; {helpers['processes']} forked helper(s), largest peak RSS "
                f"{helpers['largest_peak_rss_bytes'] / mb:,.0f} MB" if helpers["processes"] else "")]
    lines += _phase_block("parent (in the order run)", doc["parent"]["phases"], by_self=False)
    n = len(doc["ranks"])
    lines += _phase_block(f"rank tasks, summed over {n} rank(s)", doc["rank_phases"], by_self=True)
    slowest = sorted(doc["ranks"], key=lambda r: -r["wall_s"])[:max_ranks]
    if slowest:
        lines.append(f"  slowest rank task(s) ({len(slowest)} of {n}):")
        lines += [f"    {(r['side'] + ' ') if r['side'] else ''}rank {r['rank']}: {r['wall_s']:.3f} s, pid {r['pid']}, "
                  f"peak RSS {r['peak_rss_bytes'] / mb:,.0f} MB" for r in slowest]
    return lines


def _phase_block(title: str, records: Sequence[Mapping], by_self: bool) -> list[str]:
    shown = [r for r in records if max(r["self_s"], r["wall_s"]) >= MIN_SHOWN_S]
    if by_self:
        shown = sorted(shown, key=lambda r: -r["self_s"])
    if not shown:
        return []
    width = max(len(r["phase"]) for r in shown)
    out = [f"  {title}:", f"    {'phase':<{width}}  {'self s':>8}  {'wall s':>8}  {'CPU s':>8}  calls  {'faults':>9}"]
    out += [f"    {r['phase']:<{width}}  {r['self_s']:>8.3f}  {r['wall_s']:>8.3f}  {r['cpu_s']:>8.3f}  {r['calls']:>5}"
            f"  {r.get('minor_faults', 0):>9,}" for r in shown]
    hidden = len(records) - len(shown)
    if hidden:
        out.append(f"    ({hidden} phase(s) under {MIN_SHOWN_S * 1000:g} ms not shown; report.json keeps them)")
    return out
