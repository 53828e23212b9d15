"""Launch-queue length per GPU stream: how many enqueued GPU ops have not started yet.

Each GPU op (kernel, memcpy, memset) linked to a launch call adds 1 to its stream's queue at the
call's start and removes 1 when the op starts on the GPU. A CUDA-graph launch therefore adds
one per kernel of the graph at once. The queue is a step function of time; CUDA blocks the
launching CPU thread when a stream has about 1024 outstanding ops.

Statistics are **time-weighted** over the span from a stream's first to its last change (a
queue that sits at 500 for 1 ms and at 0 for 1 µs has a mean near 500), unlike HTA's summary,
which describes the change points. At equal times launches are counted before op starts, so
an op that starts the instant it is launched never makes the queue negative.

Per-step variants attribute each interval between two changes to the profiler step of the
event that opened it (a launch's step; a GPU op has its launch's step). Traces without launches
give empty tables with the same columns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import RankTrace, TraceSet
from ..units import pct, pcts
from .grouping import Grouped
from .launch import launch_gpu_ops

MAX_LAUNCH_QUEUE = 1024
"""Outstanding ops per stream at which CUDA blocks the launching thread."""

SERIES_COLUMNS = ("rank", "stream", "iteration", "ts_us", "queue_length", "enqueued")


def rank_queue_length_series(trace: RankTrace) -> pd.DataFrame:
    """Change points of the queue length of every stream of one rank: one row per distinct
    time per stream (several changes at the same µs collapse into the last value), ordered by
    stream then time. ``iteration`` is the step of the last event at that time.

    Memoised on the trace (the queue analyses and the report's series share it); each call
    gets its own (shallow, copy-on-write) frame.
    """
    return trace.memo("queue_length_series", lambda: _rank_queue_length_series(trace)).copy(deep=False)


def _rank_queue_length_series(trace: RankTrace) -> pd.DataFrame:
    _, gpu_rows = launch_gpu_ops(trace)
    if not len(gpu_rows):
        return pd.DataFrame(columns=list(SERIES_COLUMNS))
    launch = trace.linked[gpu_rows]
    stream = np.tile(trace.arg("stream", -1, gpu_rows), 2)  # each op's stream, for its enqueue and its start
    ts = np.concatenate([trace.ts[launch], trace.ts[gpu_rows]])
    delta = np.concatenate([np.ones(len(gpu_rows), np.int64), -np.ones(len(gpu_rows), np.int64)])
    step = np.concatenate([trace.iteration[launch], trace.iteration[gpu_rows]])
    order = np.lexsort((-delta, ts, stream))  # per stream by time; +1 before -1 at equal times
    stream, ts, delta, step = stream[order], ts[order], delta[order], step[order]
    total = np.cumsum(delta)
    new_stream = np.r_[True, stream[1:] != stream[:-1]]
    base = np.maximum.accumulate(np.where(new_stream, np.arange(len(total)), 0))
    queue = total - (total[base] - delta[base])
    last_at_time = np.r_[(stream[1:] != stream[:-1]) | (ts[1:] != ts[:-1]), True]
    first_at_time = np.flatnonzero(np.r_[True, last_at_time[:-1]])
    enqueued = np.add.reduceat(np.maximum(delta, 0), first_at_time)
    return pd.DataFrame({
        "rank": np.full(int(last_at_time.sum()), trace.rank, dtype=np.int64),
        "stream": stream[last_at_time],
        "iteration": step[last_at_time],
        "ts_us": ts[last_at_time],
        "queue_length": queue[last_at_time],
        "enqueued": enqueued,
    }, columns=list(SERIES_COLUMNS), copy=False)  # fresh arrays: no copy into 2-D blocks


def queue_length_series(traces: TraceSet) -> pd.DataFrame:
    """:func:`rank_queue_length_series` for all ranks."""
    frames = [f for f in (rank_queue_length_series(t) for t in traces) if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(SERIES_COLUMNS))


def _segments(series: pd.DataFrame) -> pd.DataFrame:
    """The intervals between consecutive change points of each (rank, stream): value and length."""
    key_change = np.r_[(series["rank"].to_numpy()[1:] != series["rank"].to_numpy()[:-1])
                       | (series["stream"].to_numpy()[1:] != series["stream"].to_numpy()[:-1]), True]
    ts = series["ts_us"].to_numpy(dtype=np.float64)
    length = np.where(key_change, 0.0, np.r_[ts[1:], 0.0] - ts)
    return series.assign(length_us=length, weighted=length * series["queue_length"].to_numpy())


def _grouped(seg: pd.DataFrame, keys: list[str]) -> "Grouped | _SortedRuns":
    """``Grouped(seg, keys)``, or :class:`_SortedRuns` when the rows come sorted by the keys:
    the segments of one rank are, by (rank, stream), so the per-stream tables need no coding of
    the keys."""
    return _SortedRuns.of(seg, keys) or Grouped(seg, keys)


class _SortedRuns:
    """The groups of a frame whose rows come sorted by integer keys, each group one run of
    rows: the aggregations of :class:`~perfreport.analyses.grouping.Grouped` the queue tables
    use (the same numbers: sums in row order, exact integer sums and maxima)."""

    def __init__(self, frame: pd.DataFrame, keys: list[str], starts: np.ndarray):
        self._frame, self.keys, self.first, self.n = frame, list(keys), starts, len(starts)
        self.ids = np.repeat(np.arange(self.n), np.diff(np.append(starts, len(frame))))

    @classmethod
    def of(cls, frame: pd.DataFrame, keys: list[str]) -> "_SortedRuns | None":
        """The runs of ``frame`` by ``keys``, None unless it is sorted by them (and has rows)."""
        columns = [frame[k].to_numpy() for k in keys]
        if not len(frame) or any(c.dtype.kind not in "iu" for c in columns):
            return None
        change = np.zeros(len(frame) - 1, dtype=bool)
        for c in columns:
            change |= c[1:] != c[:-1]
        starts = np.r_[0, np.flatnonzero(change) + 1]
        later = np.zeros(len(starts) - 1, dtype=bool)  # each run's keys above the previous run's
        tied = np.ones(len(starts) - 1, dtype=bool)
        for c in columns:  # lexicographic: the first key that differs decides
            head = c[starts]
            later |= tied & (head[1:] > head[:-1])
            tied &= head[1:] == head[:-1]
        return cls(frame, keys, starts) if later.all() else None

    def _values(self, values) -> np.ndarray:
        return self._frame[values].to_numpy() if isinstance(values, str) else np.asarray(values)

    def sum(self, values) -> np.ndarray:
        v = self._values(values)
        if v.dtype.kind in "biu":
            return np.add.reduceat(v.astype(np.int64), self.first)
        v = v.astype(np.float64)
        return np.bincount(self.ids, weights=np.where(np.isnan(v), 0.0, v), minlength=self.n).astype(np.float64)

    def max(self, values) -> np.ndarray:
        v = self._values(values)
        if v.dtype.kind in "biu":
            return np.maximum.reduceat(v.astype(np.int64), self.first)
        return np.fmax.reduceat(v.astype(np.float64), self.first)  # NaN skipped; NaN for a run of NaN only

    def frame(self, columns: dict) -> pd.DataFrame:
        keys = {k: self._frame[k].to_numpy()[self.first] for k in self.keys}
        return pd.DataFrame({**keys, **columns})


SUMMARY_COLUMNS = ("rank", "stream", "ops", "span_us", "mean_queue_length", "max_queue_length", "empty_pct",
                   "full_us")


def queue_segments(traces: TraceSet) -> pd.DataFrame:
    """:func:`_segments` of :func:`queue_length_series`, computed once per trace set (the three
    queue analyses share it): read it, never modify it."""
    return traces.memo("queue_segments", lambda: _segments(queue_length_series(traces)))


def _summary(seg: pd.DataFrame, keys: list[str], max_queue_length: int) -> pd.DataFrame:
    cols = keys + list(SUMMARY_COLUMNS[2:])
    if not len(seg):
        return pd.DataFrame(columns=cols)
    queue, length = seg["queue_length"].to_numpy(), seg["length_us"].to_numpy()
    g = _grouped(seg, keys)
    span = g.sum("length_us")
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = g.sum("weighted") / np.where(span > 0, span, np.nan)
    out = g.frame({
        "ops": g.sum("enqueued").astype(np.int64),
        "span_us": span,
        "mean_queue_length": mean,
        "max_queue_length": g.max("queue_length").astype(np.int64),
        "empty_pct": pcts(g.sum(np.where(queue <= 0, length, 0.0)), span),
        "full_us": g.sum(np.where(queue >= max_queue_length, length, 0.0)),
    })
    return out[cols]


def queue_length_summary(traces: TraceSet, max_queue_length: int = MAX_LAUNCH_QUEUE) -> pd.DataFrame:
    """Per (rank, stream): time-weighted mean and max queue length over the stream's span
    (first to last change, µs), % of that span with nothing queued, and µs at or above
    ``max_queue_length`` (blocked launches). ``ops`` counts queue increments (≈ GPU ops)."""
    return _summary(queue_segments(traces), ["rank", "stream"], max_queue_length)


def queue_length_by_step(traces: TraceSet, max_queue_length: int = MAX_LAUNCH_QUEUE) -> pd.DataFrame:
    """:func:`queue_length_summary` per (rank, profiler step, stream)."""
    return _summary(queue_segments(traces), ["rank", "iteration", "stream"], max_queue_length)


BLOCKED_COLUMNS = ("rank", "stream", "blocked_us", "blocked_pct", "max_queue_length")


def time_blocked_on_full_queue(traces: TraceSet, max_queue_length: int = MAX_LAUNCH_QUEUE) -> pd.DataFrame:
    """Per (rank, stream): µs the stream's queue held at least ``max_queue_length`` ops (the
    CPU blocks on further launches then), and that time as % of the rank's trace span (first
    event start to last event end). Every stream with launches gets a row (0 when never full)."""
    seg = queue_segments(traces)
    if not len(seg):
        return pd.DataFrame(columns=list(BLOCKED_COLUMNS))
    g = _grouped(seg, ["rank", "stream"])
    blocked = g.sum(np.where(seg["queue_length"].to_numpy() >= max_queue_length, seg["length_us"].to_numpy(), 0.0))
    out = g.frame({"blocked_us": blocked, "max_queue_length": g.max("queue_length")})
    spans = {t.rank: np.subtract(*t.span_us()[::-1]) for t in traces}
    out["blocked_pct"] = [pct(b, spans[r]) for r, b in zip(out["rank"], out["blocked_us"])]
    out["max_queue_length"] = out["max_queue_length"].astype(np.int64)
    return out[list(BLOCKED_COLUMNS)]
