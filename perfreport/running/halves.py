"""A single rank's analyses in two processes: this one and a forked child on the spare core.

``analyze`` of one rank in the command's own process has a second core idle while the analyses
run. With it (:func:`spare_core`) the analyses that read the call stack (:data:`CHILD_SHARE`)
run in a forked child, which shares the loaded rank's pages (nothing is pickled on the way in),
builds the call stack itself and sends its tables and views back, while this process runs the
others (:func:`perfreport.running.digest.digest`).

The halves' costs depend on the trace: this process waited 0.01-0.04 s for the child on the
A100-grown 200 MB and 1 GB ranks and the resnet50 and GP100 ones grown to 200 MB, 0.28 s on the
triton-grown 1 GB rank (345,319 steps: the child's ``time_at_stake`` took 1.26 of its 1.79 s).
Where this process's half is the longer one, a child that is done takes more: before each of
its analyses this process hands the back half of those it has left to an idle child
(:meth:`Halves.keep`), which runs them and sends their tables too; halving again as often as the
child is idle again. Every table is the one a single process makes; only where it is made moves.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import pandas as pd

from ..model import GPU_SIDE_CATEGORIES, MEMSET_CATEGORIES, RankTrace
from ..timing import phase

CHILD_SHARE = frozenset({
    "time_at_stake", "memory_by_op", "collectives", "collective_summary", "collectives_per_step", "collective_skew",
    "straggler_evidence", "op_kernels", "kernel_sequences", "efficiency_summary", "op_efficiency",
})
"""With a spare core, the analyses a forked child runs: those that read the rank's call stack
(its CPU ops' nesting; the memory events' and the collectives' owners, the op tables, the
efficiency model), so that only the child builds it. It was built before the fork, for both
halves, while the other core idled (0.04-0.09 s of a 200 MB rank's views made first, 0.26-0.31
of the A100-grown 1 GB rank's 0.41). report.json's ``timings_s`` analyses, medians of 12 alternating
runs: A100-grown 200 MB 0.508 -> 0.495 s, GP100-grown 0.609 -> 0.573, the resnet50 V100
dataloader trace 0.430 -> 0.389 (its command's wall 1.168 -> 1.078 s); the 1 GB ranks' within
the noise (the halves run slower side by side on the VM's two vCPUs than one alone). This
process never reads the call stack: tests/test_digest.py checks it on real traces. An idle
child is handed more (:meth:`Halves.keep`)."""
SHARE_MIN_EVENTS = 200_000
"""Below this many events a fork (~10 ms) and the child's results' pickling cost more than the half
they save."""
PARENT_LAST_READER = {
    "gpu_side": "step_metrics", ("cat", GPU_SIDE_CATEGORIES): "temporal_breakdown",
    "gpu_work": "kernel_rank_distribution", "host_collectives": "comm_comp_overlap_per_step",
    ("cat", MEMSET_CATEGORIES): "memory_bw", "kernels": "stragglers",
}
"""When a forked child runs :data:`CHILD_SHARE`: this process's last reader of each view where it
is not ``LAST_READER``'s (:mod:`perfreport.running.digest`). Views whose last reader is in the
child's share go earlier here, instead of being held to the end of this half (the child keeps
its own copy); two go later, where a view of the child's share made them from it in one process
and this one makes it alone (the memsets' mask, ``time_at_stake``'s there; the kernels).
tests/test_digest.py checks on real traces that no view is made twice."""

MIN_HANDED = 4
"""The fewest analyses (or finishing steps) handed to an idle child at once. A child is handed
work at a cost: it makes again the views this process made since the fork, and sends its
tables back. With hand-overs of any size (two left sufficed) the MI250-grown 200 MB rank's
analyses took 0.26-0.28 s against 0.25 without; at least four at once, it is handed its last
analysis and the three finishing steps, once, and takes 0.256-0.263 s against 0.260-0.265 (2
pairs; measured when the child's share was the analyses from ``launch_stats`` on). Now the
A100-grown 200 MB rank hands six (``kernel_efficiency`` to the finishing steps), the other ranks
above nothing or two."""

CHILD_ROOM = 1.0
"""Free memory (MemAvailable), per byte of the rank's JSON, without which no child is forked: the
two halves then grow the process tree by more than one process would. Measured on 1 GB ranks
from the fork to the peaks (the parent's RSS; the child's share: the tree's proportional
anonymous memory, sampled every 20 ms, less the parent's peak): HTA's trace_compare tiny grown
(173,318 steps) 0.30 x in the parent and ~0.55 x in the child (the tree 1.57 x; a ``compare``
worker, which analyses it alone, peaks at 1.06-1.08 x), the triton-grown 0.27 x and 0.30 x, the
A100-grown 0.06 x in the parent. The workers' budget
(:data:`~perfreport.load.memory.PEAK_PER_JSON_BYTE`, checked before the load) covers one
process; the child is the spare core's, taken only with room to spare."""

_spare_core: ContextVar[bool] = ContextVar("perfreport_spare_core", default=False)

Run = Callable[[Sequence[tuple[str, Callable]], list[dict], bool], dict[str, pd.DataFrame]]
"""``run(analyses, cut, keep_views)``: their per-rank tables, made in the calling process
(:func:`perfreport.running.digest._run_analyses`); ``keep_views``: drop no view after its last
reader (the analyses a child is handed come in no set order)."""


@contextmanager
def spare_core(spare: bool = True) -> Iterator[None]:
    """Within the block, a rank's analyses may be shared with a forked child
    (:func:`start`): the rank runs in the command's own process and no other rank runs beside it
    (the executor knows)."""
    token = _spare_core.set(spare)
    try:
        yield
    finally:
        _spare_core.reset(token)


class Halves:
    """The forked child running the analyses of :data:`CHILD_SHARE`, then any this process
    hands it; its messages: ``0`` its own half's results, ``k`` those of the ``k``-th hand-over."""

    def __init__(self, analyses: Sequence[tuple[str, Callable]], finishing: Sequence[tuple[str, Callable]], run: Run,
                 views: Callable[[set], dict[Hashable, Any]]) -> None:
        from .forked import Child

        self.theirs = [(name, fn) for name, fn in analyses if name in CHILD_SHARE]
        self.handed: list[list[tuple[str, Callable]]] = []
        read_end, self._orders = os.pipe()
        orders = self._orders

        def work(send) -> None:
            os.close(orders)  # (the child's copy: the pipe ends when this process closes its own)
            _child_work(send, read_end, dict([*analyses, *finishing]), self.theirs, run, views)

        try:
            self.child = Child(work)
        except OSError:
            os.close(self._orders)
            raise
        finally:
            os.close(read_end)

    def idle(self) -> bool:
        """Whether the child has sent the results of all it was given (and waits for more)."""
        return self._orders >= 0 and len(self.handed) in self.child.messages

    def keep(self, remaining: list[tuple[str, Callable]]) -> list[tuple[str, Callable]]:
        """Of the analyses this process has left (the next one first), those it runs: all of them,
        or, when the child is idle and there are at least twice :data:`MIN_HANDED`, their front
        half, the back half handed to the child."""
        if len(remaining) < 2 * MIN_HANDED or not self.idle():
            return remaining
        keep = (len(remaining) + 1) // 2
        given = remaining[keep:]
        try:
            _write_order(self._orders, [name for name, _ in given])
        except OSError:  # the child is gone: this process runs them (finish() says what it lost)
            return remaining
        self.handed.append(given)
        return remaining[:keep]

    def finish(self, run: Run, merge: Callable[[dict], None], cut: list[dict]) -> dict[str, pd.DataFrame]:
        """Every table the child made; its views to ``merge``, its ``tables_cut`` entries to
        ``cut`` and its phases to this task's recording, as phases that ran beside this one (no
        self time). What a child that failed or died did not send, this process runs itself
        (and meets its error)."""
        from .forked import _TIMES
        from ..timing import current, record

        self._close_orders()
        sent = [self.theirs, *self.handed]
        with phase("wait for the forked analyses"):
            try:
                self.child.wait([*range(len(sent)), _TIMES])
            finally:  # reaped, even when a signal ends the wait
                self.child.stop(kill=False)
        tables: dict[str, pd.DataFrame] = {}
        timings = current()
        for index, analyses in enumerate(sent):
            if index not in self.child.messages:
                tables.update(run(analyses, cut, index > 0))
                continue
            made, views, phases, their_cut = pickle.loads(self.child.messages.pop(index))  # (its text goes once read)
            tables.update(made)
            cut += their_cut
            merge(views)
            if timings is not None:
                for p in phases:
                    timings.add(p["phase"], p["wall_s"], p["cpu_s"], self_s=0.0, calls=p["calls"],
                                faults=p.get("minor_faults", 0))
        if self.child.times:
            record("forked analyses (child process)", *self.child.times)
        return tables

    def stop(self) -> None:
        """Kill and reap the child (an error or a signal in this process)."""
        self._close_orders()
        self.child.stop(kill=True)

    def _close_orders(self) -> None:
        """No more hand-overs: the child, done with what it has, ends."""
        if self._orders >= 0:
            os.close(self._orders)
            self._orders = -1


def start(trace: RankTrace, analyses: Sequence[tuple[str, Callable]], finishing: Sequence[tuple[str, Callable]],
          run: Run, views: Callable[[set], dict[Hashable, Any]]) -> Halves | None:
    """A forked child running those of ``analyses`` in :data:`CHILD_SHARE`, when a core is spare
    (:func:`spare_core`), the rank is big enough and this system forks; else None. This process
    runs the others, then the ``finishing`` steps; the child may be handed any of them.
    ``views(sent)``: the digest's views the child made that are not in ``sent`` (which it adds
    them to)."""
    if not _spare_core.get() or trace.n_events < SHARE_MIN_EVENTS or not hasattr(os, "fork") \
            or not _room_for_a_child(trace):
        return None
    _views_both_halves_read(trace)
    try:
        return Halves(analyses, finishing, run, views)
    except OSError:  # no fork (memory, process limits): all of them here
        return None


def _room_for_a_child(trace: RankTrace) -> bool:
    """Whether free memory holds what a child and this process's half add (:data:`CHILD_ROOM`);
    True where the system does not say how much is free."""
    from ..load.memory import available_memory

    try:
        free = available_memory()
    except (OSError, ValueError):  # no /proc/meminfo and no sysconf name for it
        return True
    return free >= CHILD_ROOM * max(trace.meta.json_bytes or 0, 0)


def _child_work(send, orders: int, by_name: dict[str, Callable], theirs: list[tuple[str, Callable]], run: Run,
                views: Callable[[set], dict[Hashable, Any]]) -> None:
    """In the child: its half, then each hand-over until this process closes the pipe; after
    each, the tables, the views not sent yet, the phases and the ``tables_cut`` entries."""
    from ..timing import recording

    sent: set = set()
    work, index = theirs, 0
    while True:
        cut: list[dict] = []
        with recording() as timings:
            tables = run(work, cut, index > 0)
        send(index, pickle.dumps((tables, views(sent), timings.records(), cut), pickle.HIGHEST_PROTOCOL))
        names = _read_order(orders)
        if not names:
            return
        work, index = [(name, by_name[name]) for name in names], index + 1


def _write_order(fd: int, names: list[str]) -> None:
    from .forked import write_all

    data = "\n".join(names).encode()
    write_all(fd, len(data).to_bytes(4, "little") + data)


def _read_order(fd: int) -> list[str]:
    """The next hand-over's analyses; [] once this process closed the pipe."""
    from .forked import read_exactly

    head = read_exactly(fd, 4)
    if len(head) < 4:
        return []
    data = read_exactly(fd, int.from_bytes(head, "little"))
    return data.decode().split("\n") if data else []


def _views_both_halves_read(trace: RankTrace) -> None:
    """Make, before the fork, the views that the analyses of both halves read, so that they are
    made once and the child inherits them (shared pages, not a copy of its own): the launches
    and the GPU work they enqueued, the GPU classes, the steps. On a 1 GB rank each half made
    them itself. Not the call stack: only the child's share reads it (:data:`CHILD_SHARE`)."""
    from ..analyses.launch import launch_gpu_ops
    from ..analyses.steps import rank_steps

    with phase("views both halves read (before the fork)"):
        launch_gpu_ops(trace)
        trace.gpu_class()
        rank_steps(trace)
