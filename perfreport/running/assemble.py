"""The parent's half of a many-rank run: each rank's digest folded in as it arrives.

The per-rank tasks (:mod:`perfreport.running.executor`) send :class:`~perfreport.running.digest.RankDigest`\\ s
in whatever order they finish. :class:`Assembler` keeps of each only what the end needs, in
the smallest form, so that a rank costs the parent little more than its rows of the output:

* **strings once**: a kernel name is on every rank; past a side's first :data:`POOL_FROM`
  ranks, each digest's strings are swapped for the run's one copy (:class:`StringPool`) before
  anything is kept;
* **tables stacked**: a rank's per-rank tables join one frame per table every
  :data:`STACK_EVERY` ranks (dozens of small frames cost more than their rows), its strings
  pooled then;
* **op profile folded**: per-step op sums go into :class:`~perfreport.analyses.op_profile.
  OpProfileFold` in job order (so the sums round the same on any executor) and are dropped,
  unless the gate reads them per rank (a compare);
* **summaries as columns**: a rank's summary tables arrive and are kept as their columns
  (:class:`~perfreport.running.digest.FrozenFrame`, made in the worker), not as DataFrames,
  and their strings are pooled column by column;
* **series cut**: of the time-series lines only the :data:`~perfreport.analyses.series.
  MAX_LINES` with the highest peaks so far keep their points (:class:`LineCut`).

:meth:`Assembler.finish` then runs the other cross-rank analyses on the
:class:`~perfreport.running.digest.DigestTrace` stand-ins and puts each per-rank table together.
Measured on 64 ranks of 50 MB: ~135 kB kept a rank, of which ~60 kB are the per-rank rows the
output lists (``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from ..analyses.op_profile import OpProfileFold
from ..analyses.series import MAX_LINES, line_peak
from .digest import COMMON_CLOCK_COLUMNS, CROSS_RANK, DigestTrace, FrozenFrame, RankDigest, frozen, frozen_column, memo_kind
from ..model import TraceSet
from ..timing import phase


STACK_EVERY = 16
"""Ranks' parts of a table held as separate frames before they are joined into one."""
POOL_FROM = STACK_EVERY
"""Ranks of a side whose summaries keep their own strings; the later ones share the pool's. A
job of a few ranks gains nothing from the pool (a digest's repeated names are already one
object each: pickle keeps them so), and pooling a many-step rank's summaries, a name per
(step, part) row, took 0.08 s a digest (37,000 steps); thousands of ranks still hold each
name once, past the first few ranks' copies."""
FOLDED = "op_profile"
"""The cross-rank table built by a fold rather than from the kept summaries."""
READ_IN_THE_REDUCE_ONLY = ("matched_calls",)
"""Views of the trace set that only the cross-rank analyses read (the calls matched across
ranks: the skew and the straggler evidence start from them), let go when they are done: 16
gloo-grown ranks of 50 MB match 1,644,080 calls a side into 112 MB, which the parent held to the
command's end, the first side's through the second side's matching (the parent's peak)."""
_PAIRS = "op_pairs"


JOINED_CALLS = "collectives"
"""The cross-rank table that joins every rank's memoised collective calls (see
:func:`calls_held_once`)."""


def calls_held_once(traces: TraceSet, calls: pd.DataFrame) -> None:
    """Make each rank's memoised collective calls its rows of ``calls``, the job's table that
    joined them in rank order, so that the parent holds the calls once: their starts stay the
    rank's own (the table's are on the job's clock), the other columns become slices of the
    table's (the text columns with the job's categories: the same texts). 16 gloo-grown ranks of
    50 MB: 1.6 M calls a side, 150 MB held twice from the table's making to the command's end.
    Nothing is changed where the table's rows are not the ranks' calls one after the other."""
    own = [(t, f) for t in traces if isinstance(f := t._memo.get(JOINED_CALLS), FrozenFrame) and len(f.index)]
    if len(own) < 2 or sum(len(f.index) for _, f in own) != len(calls) \
            or any(list(f.columns) != list(calls.columns) for _, f in own):
        return
    columns = {c: frozen_column(calls[c]) for c in calls.columns}
    at = 0
    for t, frame in own:  # a loop over ranks, in the table's order
        n = len(frame.index)
        t._memo[JOINED_CALLS] = FrozenFrame(
            {c: frame.columns[c] if c == "ts_us" else v[at:at + n] for c, v in columns.items()}, frame.index)
        at += n


class StringPool:
    """One copy of each string of a run: the strings of a digest's tables and summaries are
    replaced by the pool's equal ones (a dict lookup each), so 1,000 ranks naming one kernel
    hold one string, not 1,000."""

    def __init__(self) -> None:
        self._strings: dict[str, str] = {}

    def array(self, values: np.ndarray) -> np.ndarray:
        pool = self._strings
        items = values.ravel().tolist()
        if len(items) > 64 and set(map(type, items)) == {str}:  # a text column (a row per step: 10,000s)
            codes, distinct = pd.factorize(values.ravel())  # one lookup per distinct text
            pooled = np.array([pool.setdefault(v, v) for v in distinct.tolist()], dtype=object)
            return pooled[codes].reshape(values.shape)
        out = [pool.setdefault(v, v) if type(v) is str else v for v in items]
        return np.array(out, dtype=object).reshape(values.shape)

    def texts(self, values, dtype) -> Any:
        """A text column's values (object or pandas strings) with the pool's strings, in ``dtype``."""
        pooled = self.array(np.asarray(values, dtype=object))
        return pooled if dtype == object else pd.array(pooled, dtype=dtype)

    def frame(self, df: pd.DataFrame) -> pd.DataFrame:
        """``df`` with its text columns' strings from the pool (a new frame: ``df`` is left as it is)."""
        pooled = {}
        for column in df.columns:
            dtype = df[column].dtype
            if dtype == object or isinstance(dtype, pd.StringDtype):
                pooled[column] = self.texts(df[column].to_numpy(dtype=object), dtype)
        out = df.assign(**pooled) if pooled else df
        return out.set_axis([self(c) for c in out.columns], axis=1)  # column names, too

    def __call__(self, value: Any) -> Any:
        """``value`` (a summary: frames, arrays, containers, dataclasses of them) with pooled strings."""
        if isinstance(value, FrozenFrame):  # its columns' strings and its column names
            return FrozenFrame({self(k): self(v) for k, v in value.columns.items()}, value.index)
        if isinstance(value, pd.DataFrame):
            return self.frame(value)
        if isinstance(value, pd.api.extensions.ExtensionArray) and isinstance(value.dtype, pd.StringDtype):
            return self.texts(value.to_numpy(dtype=object), value.dtype)
        if isinstance(value, np.ndarray):
            return self.array(value) if value.dtype == object else value
        if isinstance(value, str):
            return self._strings.setdefault(value, value)
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple
            return type(value)(*(self(v) for v in value))
        if isinstance(value, (list, tuple)):
            return type(value)(self(v) for v in value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.replace(value, **{f.name: self(getattr(value, f.name))
                                                 for f in dataclasses.fields(value) if f.init})
        return value


class TableStack:
    """One per-rank table of every rank, as parts arrive in any order: the parts are joined
    into one frame every :data:`STACK_EVERY` ranks (its strings then taken from ``strings``),
    each row tagged with its rank, and :meth:`frame` puts them in rank order (a rank's rows in
    their own order), as joining the ranks' tables in rank order gives."""

    _RANK = "__rank__"

    def __init__(self, strings: StringPool) -> None:
        self.strings = strings
        self.empty: tuple[int, pd.DataFrame] | None = None
        """The empty table of the lowest rank that had no rows (the result when none has)."""
        self.pending: list[tuple[int, pd.DataFrame]] = []
        self.joined: list[pd.DataFrame] = []

    def add(self, rank: int, table: pd.DataFrame) -> None:
        if not len(table):
            if self.empty is None or rank < self.empty[0]:
                self.empty = (rank, table)
            return
        self.pending.append((rank, table))
        if len(self.pending) >= STACK_EVERY:
            self.joined.append(self.strings.frame(self._tagged(self.pending)))
            self.pending = []

    def _tagged(self, parts: list[tuple[int, pd.DataFrame]]) -> pd.DataFrame:
        """The parts joined, each row tagged with its rank: one column added to the joined frame,
        not one to each part (a rank's 37 tables each took a frame copy, ~2.6 ms a digest)."""
        tables = [t for _, t in parts]
        joined = pd.concat(tables, ignore_index=True) if len(tables) > 1 else tables[0]
        return joined.assign(**{self._RANK: np.repeat([r for r, _ in parts], [len(t) for t in tables])})

    def frame(self, shifts: dict[int, float], columns: Iterable[str] = ()) -> pd.DataFrame:
        """The table of every rank; ``columns`` (times on the job's common clock) have the
        rank's ``shifts`` (µs) added. Once: the parts are let go (the table is a copy)."""
        if not self.joined and len(self.pending) == 1:  # one rank's rows: no tag, no reordering
            (rank, table), = self.pending
            self.pending = []
            table = table.reset_index(drop=True)
            ranks, order = np.full(len(table), rank), slice(None)
        else:
            parts = self.joined + ([self._tagged(self.pending)] if self.pending else [])
            self.joined, self.pending = [], []
            if not parts:
                return self.empty[1] if self.empty is not None else pd.DataFrame()
            joined = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
            ranks = joined[self._RANK].to_numpy()
            order = np.argsort(ranks, kind="stable")
            table = joined.drop(columns=self._RANK).take(order).reset_index(drop=True)
        present = [c for c in columns if c in table.columns]
        if present:
            row_shift = pd.Series(shifts, dtype=np.float64).loc[ranks[order]].to_numpy()
            table = table.assign(**{c: table[c].to_numpy() + row_shift for c in present})
        return table


class LineCut:
    """The time-series lines of many ranks cut, as they arrive, to the ones that can still be
    drawn: a plot keeps the ``max_lines`` with the highest peaks (earlier rank, earlier line
    first on a tie, :func:`perfreport.analyses.series.time_series`), so a line beaten by that
    many keeps only its peak point. It still counts in ``lines_total`` and is never drawn."""

    def __init__(self, max_lines: int = MAX_LINES) -> None:
        self.max_lines = max_lines
        self.best: dict[str, list] = {}

    def add(self, rank: int, lines: dict[str, list[dict]]) -> None:
        for kind, kind_lines in lines.items():
            best = self.best.setdefault(kind, [])
            for i, line in enumerate(kind_lines):  # a loop over a rank's few lines
                heapq.heappush(best, (line_peak(line), -rank, -i, line))
                if len(best) > self.max_lines:
                    _peak_only(heapq.heappop(best)[3])


def _peak_only(line: dict) -> None:
    """Keep only the point of ``line`` that gives its peak (none when it has no finite value)."""
    y = np.asarray(line["y"], dtype=np.float64)
    finite = np.flatnonzero(np.isfinite(y))
    keep = finite[np.argmax(y[finite])] if len(finite) else None
    line["x"] = np.asarray(line["x"])[keep:keep + 1].copy() if keep is not None else np.empty(0)
    line["y"] = y[keep:keep + 1].copy() if keep is not None else np.empty(0)  # copies: a view would keep every point


class Assembler:
    """One side's digests, folded in by :meth:`add` as they arrive; :meth:`finish` gives the
    TraceSet of :class:`DigestTrace` stand-ins and every analysis table.

    ``keep_pairs``: keep each rank's per-step op sums (the gate's per-rank samples in a compare);
    otherwise they live only in the op-profile fold. ``max_lines``: the lines per plot the
    series document will keep (:func:`perfreport.analyses.series.time_series`)."""

    def __init__(self, source: str, keep_pairs: bool = False, max_lines: int = MAX_LINES) -> None:
        self.source, self.keep_pairs = source, keep_pairs
        self.strings = StringPool()
        self.ranks: dict[int, DigestTrace] = {}
        self.tables: dict[str, TableStack] = {}
        self.lines = LineCut(max_lines)
        self.profile = OpProfileFold()
        self._early: dict[int, tuple] = {}
        self._next = 0
        self._busy: dict[tuple[str, int], list[float]] = {}
        """Per process (host, pid): the wall seconds of its ranks' loads and of their analyses."""
        self.checksums: dict[int, str | None] = {}
        self.worker_peak_rss = 0
        self.rank_timings: list[dict] = []
        """Each rank's task: process, peak RSS and phases (:mod:`perfreport.timing`)."""
        self.tables_cut: list[dict] = []
        """The ``tables_cut`` entries of the per-step tables the workers cut (in arrival order)."""

    def add(self, d: RankDigest, position: int) -> None:
        """The digest of the side's job number ``position``."""
        from ..load import claim

        claim(self.ranks, d)  # a second file of one rank: the error line; a default rank, dropped events: warned
        rank = d.meta.rank
        pooled = self.strings if len(self.ranks) > POOL_FROM else _as_is  # (this rank counted: claimed above)
        memo = {key: pooled(frozen(value)) for key, value in d.memo.items()}  # frozen first: columns pool cheaply
        for name, table in d.tables.items():
            self.tables.setdefault(name, TableStack(self.strings)).add(rank, table)
        own, whole = memo.get((_PAIRS, "own", False)), memo.get((_PAIRS, (), False))
        self._early[position] = (memo["step_numbers"], own, whole)
        while self._next in self._early:  # fold in job order: the same sums on any executor
            self.profile.add(*self._early.pop(self._next))
            self._next += 1
        if not self.keep_pairs:
            memo = {k: v for k, v in memo.items() if memo_kind(k) != _PAIRS}
        for key, value in memo.items():
            if memo_kind(key) == "series":
                self.lines.add(rank, value)
        self.ranks[rank] = DigestTrace(self.strings(d.meta), memo, d.n_events)
        busy = self._busy.setdefault((getattr(d, "host", ""), d.pid), [0.0, 0.0])
        busy[0] += d.load_s
        busy[1] += d.analyze_s
        self.checksums[rank] = d.checksum
        self.worker_peak_rss = max(self.worker_peak_rss, d.worker_peak_rss)
        self.rank_timings.append({"rank": rank, "pid": d.pid, "peak_rss_bytes": d.worker_peak_rss,
                                  "wall_s": round(d.load_s + getattr(d, "waited_s", 0.0) + d.analyze_s, 4),
                                  "load_s": round(d.load_s, 4), "analyze_s": round(d.analyze_s, 4),
                                  "phases": d.timings})
        self.tables_cut += getattr(d, "tables_cut", [])  # (a digest pickled before the field: none)

    def busiest(self) -> tuple[float, float]:
        """(load s, analyses s): the wall time the side's rank tasks spent loading, and analysing,
        in the process that spent the most on each. Ranks in different processes run side by
        side, a process's ranks one after the other: so the side's load took this long, not
        the sum. Measured where each happened (:attr:`RankDigest.load_s`, ``analyze_s``), not
        apportioned from the per-rank stage's span, which also holds the workers' start, the
        hand-off and, in a compare, the other side's work in this process: the A100-grown 1 GB
        rank's ``compare`` reported 1.02-1.16 s of load that way for a scan and decode of
        0.92-1.06 s in its worker."""
        if not self._busy:
            return 0.0, 0.0
        return max(b[0] for b in self._busy.values()), max(b[1] for b in self._busy.values())

    def finish(self) -> tuple[TraceSet, dict[str, pd.DataFrame]]:
        from ..analyses import ANALYSES

        if self._early:
            raise RuntimeError(f"{self.source}: jobs {sorted(self._early)} arrived, but not the ones before them")
        traces = TraceSet(ranks=dict(sorted(self.ranks.items())), source=self.source)
        shifts = {r: float(t.meta.ts_origin_us - traces.origin_us) for r, t in traces.ranks.items()}
        tables = {}
        for name, fn in ANALYSES:
            if name == FOLDED:
                tables[name] = self.profile.table()
            elif name in CROSS_RANK:
                with phase(f"cross-rank:{name}"):
                    tables[name] = fn(traces)
                if name == JOINED_CALLS:
                    calls_held_once(traces, tables[name])
            else:
                with phase("gather per-rank tables"):
                    tables[name] = self.tables[name].frame(shifts, COMMON_CLOCK_COLUMNS.get(name, ()))
        for key in READ_IN_THE_REDUCE_ONLY:
            traces._memo.pop(key, None)
        return traces, tables


def assemble(digests: Iterable[RankDigest], source: str, keep_pairs: bool = False,
             max_lines: int = MAX_LINES) -> tuple[TraceSet, dict[str, pd.DataFrame]]:
    """:meth:`Assembler.finish` of ``digests``, folded in in the order given."""
    assembler = Assembler(source, keep_pairs, max_lines)
    for position, d in enumerate(digests):
        assembler.add(d, position)
    return assembler.finish()


def _as_is(value: Any) -> Any:
    return value

