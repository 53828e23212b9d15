"""Time series for the report's plots, downsampled so a report stays small and fast.

The report is rendered from a JSON document, never from the traces, so every plotted point
must be in that document. Raw change-point series are long (a launch queue changes twice per
kernel, hundreds of thousands of times in a big trace); a plot 1,000 px wide cannot show more
than a few hundred points anyway. :func:`downsample` keeps, per bucket of equal time width, the
lowest and the highest point, so every peak and every trough survives (an average would flatten
a 1 µs spike to the 1,024-op queue limit into nothing): right for joined points (step time).
A steps-post line (queue length, copy bandwidth) is cut by :func:`steps_downsample` instead,
which never holds a value longer than the raw data did: the time the line is non-zero and its
area stay those of the raw line, and merged buckets carry their range of values as a ``band``.

:func:`time_series` builds the ``series`` key of the summary document: one entry per kind of
plot, each a dict with ``x_unit``, ``y_unit``, ``drawstyle`` (``"steps-post"``: the value holds
until the next point; ``"line"``: points joined), ``lines_total`` and ``lines`` (at most
``max_lines``, the ones with the highest peaks), each line ``{"rank", "label", "x", "y",
"points_total"}`` and, for a steps-post line with merged buckets, ``"band"`` (``{"x", "lo", "hi"}``). Times are ms since the first event of the whole trace set (ranks on the
common clock of :meth:`TraceSet.aligned_ts`). Kinds:

* ``queue_length`` - outstanding GPU ops per (rank, stream) (y: ops), from
  :func:`perfreport.analyses.queue.queue_length_series`;
* ``memory_bw`` - summed bandwidth of the copies in flight per (rank, direction) (y: GB/s),
  from :func:`perfreport.analyses.memory_bw.memory_bw_series`;
* ``step_time`` - wall time of each profiler step per rank (x: step number, y: ms), from
  :func:`perfreport.analyses.steps.profiler_steps`;
* ``memory`` - allocated and reserved bytes per (rank, device) (y: bytes), from
  :func:`perfreport.analyses.memory.memory_timeline`, which keeps its own peaks.

Edge cases: a trace without launches, copies or steps gives an entry with no lines; an empty
TraceSet gives entries with no lines; a series of at most ``max_points`` points is kept whole.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import RankTrace, TraceSet, search_sorted, sorted_unique
from ..units import us_to_ms
from .memory import memory_timeline
from .memory_bw import bw_change_points
from .queue import queue_length_series
from .steps import profiler_steps

MAX_POINTS = 500
"""Points per line: more than a 1,280 px wide plot can show, small enough for a PR artifact."""
MAX_LINES = 32
"""Lines per plot: beyond this a legend is unreadable; the ones with the highest peaks are kept."""
TIME_DECIMALS = 4
"""Times are ms rounded to 0.1 µs (trace timestamps are µs, sometimes ns)."""
VALUE_DECIMALS = 4


def downsample(x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> np.ndarray:
    """Indices (ascending) of the points of (x, y) to keep so that at most ``max_points`` remain
    and every local extreme of width at least one bucket survives.

    ``x`` must be ascending. The x range is cut into ``(max_points - 2) // 2`` buckets of equal
    width; each keeps its lowest and highest point (first occurrence; NaN is neither), and the
    first and last points are always kept. Series of at most ``max_points`` points, and
    ``max_points`` below 4, keep every point.

    >>> downsample(np.arange(10.0), np.array([0, 1, 0, 0, 9, 0, 0, 0, -3, 0.]), 6).tolist()
    [0, 4, 5, 8, 9]
    """
    n = len(x)
    if n <= max_points or max_points < 4:
        return np.arange(n)
    buckets = (max_points - 2) // 2
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    width = x[-1] - x[0]
    if not width > 0:
        bucket = (np.arange(n) * buckets // n).astype(np.int64)
    else:
        bucket = np.minimum(((x - x[0]) / width * buckets).astype(np.int64), buckets - 1)
    hi = np.where(np.isnan(y), -np.inf, y)
    lo = np.where(np.isnan(y), np.inf, y)
    first = np.r_[True, bucket[1:] != bucket[:-1]]
    by_max = np.lexsort((np.arange(n), -hi, bucket))  # per bucket: highest first, then earliest
    by_min = np.lexsort((np.arange(n), lo, bucket))
    starts = np.flatnonzero(first)
    keep = np.concatenate([by_max[starts], by_min[starts], [0, n - 1]])
    return sorted_unique(keep)


def steps_downsample(x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray,
                                                                                      dict | None]:
    """A steps-post line (each value holds until the next point) cut to at most ``max_points``
    points without drawing what never happened: ``(x, y, band)``.

    Picking a bucket's lowest and highest points (:func:`downsample`) is wrong for such a line:
    the highest value then holds until the next kept point, and a copy burst of 0.1 ms draws as a
    plateau across the bucket. Here the x range is cut into ``(max_points - 1) // 4`` buckets
    of equal width. A bucket with at most 3 points keeps them as they are (every rise and fall).
    A busier bucket is replaced by one pulse: 0 until its first non-zero instant, then its mean
    value while non-zero (area / non-zero time) for exactly its non-zero time, then 0. So the
    time the line is non-zero, and its area (copied bytes, queued op·µs), stay those of the
    raw line in every bucket. ``band`` gives, for those buckets, the lowest and highest value
    within them (``{"x": bucket edges (buckets + 1), "lo", "hi": per bucket, NaN where the
    bucket kept its points}``) so a plot draws the envelope as a band; None when no bucket
    was merged. NaN values count as no data (neither zero nor busy)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = len(x)
    if n <= max_points or max_points < 8 or not x[-1] > x[0]:
        keep = downsample(x, y, max_points)
        return x[keep], y[keep], None
    buckets = (max_points - 1) // 4
    edges = x[0] + (x[-1] - x[0]) * np.arange(buckets + 1) / buckets
    edges[-1] = x[-1]
    grid, value = _grid(x, y, edges)
    start, dur, v = grid[:-1], np.diff(grid), value[:-1]
    seg_bucket = np.minimum(search_sorted(edges, start, side="right") - 1, buckets - 1)
    finite = np.isfinite(v)
    on = finite & (v != 0)
    busy = np.bincount(seg_bucket, weights=np.where(on, dur, 0.0), minlength=buckets)
    area = np.bincount(seg_bucket, weights=np.where(on, dur * np.where(finite, v, 0.0), 0.0), minlength=buckets)
    first_on = _per_bucket(np.minimum, seg_bucket[on], start[on], buckets, np.inf)
    lo = _per_bucket(np.minimum, seg_bucket[finite], v[finite], buckets, np.inf)
    hi = _per_bucket(np.maximum, seg_bucket[finite], v[finite], buckets, -np.inf)
    point_bucket = np.minimum(search_sorted(edges, x, side="right") - 1, buckets - 1)
    merged = np.bincount(point_bucket, minlength=buckets) > 3
    left = edges[:-1]
    at_edge = y[search_sorted(x, left, side="right") - 1]
    mean = np.divide(area, busy, out=np.zeros(buckets), where=busy > 0)
    pulse = merged & (busy > 0)
    starts_late = pulse & (first_on > left)
    end = np.minimum(first_on + busy, edges[1:])
    ends_early = pulse & (end < edges[1:] - 1e-9 * (x[-1] - x[0]))
    raw = ~merged[point_bucket]
    xs = np.concatenate([left, first_on[starts_late], end[ends_early], x[raw], x[-1:]])
    ys = np.concatenate([np.where(merged, np.where(pulse & ~starts_late, mean, 0.0), at_edge), mean[starts_late],
                         np.zeros(int(ends_early.sum())), y[raw], y[-1:]])
    order_key = np.concatenate([np.zeros(buckets), np.ones(int(starts_late.sum())), np.full(int(ends_early.sum()), 2),
                                np.full(int(raw.sum()), 3), [4]])
    order = np.lexsort((order_key, xs))
    xs, ys = xs[order], ys[order]
    same = np.r_[False, (ys[1:] == ys[:-1]) | (np.isnan(ys[1:]) & np.isnan(ys[:-1]))]
    same[-1] = False  # the last point ends the line
    xs, ys = xs[~same], ys[~same]
    band = None
    if merged.any():
        band = {"x": edges, "lo": np.where(merged & np.isfinite(lo), lo, np.nan),
                "hi": np.where(merged & np.isfinite(hi), hi, np.nan)}
    return xs, ys, band


def _per_bucket(ufunc: np.ufunc, bucket: np.ndarray, values: np.ndarray, n: int, empty: float) -> np.ndarray:
    """``ufunc.at(np.full(n, empty), bucket, values)`` for ``bucket`` in ascending order (the
    segments of a line come in time order): one ``reduceat`` over each bucket's run of values,
    where ``ufunc.at`` took 3-4 ms a call on the bandwidth lines of HTA's tiny trace grown to 1 GB.
    A zero comes back as +0.0: which of 0.0 and -0.0 the minimum or maximum of both is depends
    on numpy's loop for the machine (AVX2 and AVX-512 differ), and a report must not."""
    out = np.full(n, empty)
    if len(bucket):
        heads = np.flatnonzero(np.r_[True, bucket[1:] != bucket[:-1]])
        out[bucket[heads]] = ufunc.reduceat(values, heads)
    out += 0.0  # -0.0 + 0.0 is +0.0; every other value is unchanged
    return out


def _grid(x: np.ndarray, y: np.ndarray, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(every change point and bucket edge, ascending and distinct: ``np.union1d(x, edges)``;
    the value holding from each on: ``y[np.searchsorted(x, grid, side="right") - 1]``).

    One merge of the two sorted runs (a timsort) that counts the points of ``x`` up to each
    entry, instead of a binary search of every grid point among the points. Points ending in
    NaN (not ascending) take the search."""
    if not np.isfinite(x[-1]):
        grid = np.sort(np.concatenate([x, edges]), kind="stable")
        grid = grid[np.r_[True, grid[1:] != grid[:-1]]]
        return grid, y[search_sorted(x, grid, side="right") - 1]
    merged = np.concatenate([x, edges])
    order = np.argsort(merged, kind="stable")  # two sorted runs: a linear merge
    ordered = merged[order]
    last = np.r_[ordered[1:] != ordered[:-1], True]  # the last entry of each distinct value
    points_up_to = np.cumsum(order < len(x))  # points of x at or before each entry
    return ordered[last], y[points_up_to[last] - 1]


def _line(rank: int, label: str, x: np.ndarray, y: np.ndarray, max_points: int) -> dict:
    keep = downsample(x, y, max_points)
    return _finished({"rank": int(rank), "label": label, "x": np.asarray(x)[keep], "y": np.asarray(y)[keep],
                      "points_total": int(len(x))}, lambda v: v)


def _raw_line(rank: int, label: str, x_us: np.ndarray, y: np.ndarray, max_points: int, *,
              steps: bool = False) -> dict:
    """A line downsampled on the rank's own clock (µs), not yet shifted: per-rank data.
    ``steps``: a steps-post line, cut by :func:`steps_downsample` (it may carry a ``band``)."""
    line = {"rank": int(rank), "label": label, "points_total": int(len(x_us))}
    if steps:
        x, v, band = steps_downsample(x_us, y, max_points)
        return {**line, "x": x, "y": v, **({"band": band} if band is not None else {})}
    keep = downsample(x_us, y, max_points)
    return {**line, "x": np.asarray(x_us, dtype=np.float64)[keep], "y": np.asarray(y, dtype=np.float64)[keep]}


def _values(y) -> list:
    return [None if not np.isfinite(v) else v for v in np.round(np.asarray(y, dtype=np.float64),
                                                                 VALUE_DECIMALS).tolist()]


def _finished(line: dict, to_x) -> dict:
    """A raw line with ``to_x`` applied to its x values, rounded: a line of the document."""
    out = {
        "rank": line["rank"],
        "label": line["label"],
        "x": np.round(to_x(line["x"]), TIME_DECIMALS).tolist(),
        "y": _values(line["y"]),
        "points_total": line["points_total"],
    }
    if line.get("band") is not None:
        band = line["band"]
        out["band"] = {"x": np.round(to_x(np.asarray(band["x"], dtype=np.float64)), TIME_DECIMALS).tolist(),
                       "lo": _values(band["lo"]), "hi": _values(band["hi"])}
    return out


def line_peak(raw: dict) -> float:
    """The peak :func:`time_series` ranks a raw line (:func:`rank_series`) by: its highest
    finite y as the document rounds it (rounding keeps order, so the rounded maximum is the
    maximum of the rounded values); -inf for a line without one."""
    y = np.asarray(raw["y"], dtype=np.float64)
    if raw.get("band") is not None:  # a merged bucket's highest value is in its band
        y = np.concatenate([y, np.asarray(raw["band"]["hi"], dtype=np.float64)])
    y = y[np.isfinite(y)]
    peak = float(np.round(y.max(), VALUE_DECIMALS)) if len(y) else float("-inf")
    return peak if np.isfinite(peak) else float("-inf")


def _entry(lines: list[dict], x_unit: str, y_unit: str, drawstyle: str, max_lines: int) -> dict:
    peaks = [max((v for v in [*line["y"], *(line.get("band") or {}).get("hi", ())] if v is not None),
                 default=float("-inf")) for line in lines]
    order = sorted(range(len(lines)), key=lambda i: -peaks[i])[:max_lines]
    return {"x_unit": x_unit, "y_unit": y_unit, "drawstyle": drawstyle, "lines_total": len(lines),
            "lines": [lines[i] for i in sorted(order)]}


def _common_clock(traces: TraceSet) -> tuple[dict[int, float], float]:
    """(per rank: µs to add to its ``ts`` for the common clock, the common-clock µs of the trace
    set's first event). A trace set without complete events starts at 0."""
    shift = {t.rank: float(t.meta.ts_origin_us - traces.origin_us) for t in traces}
    starts = [t.span_us()[0] + shift[t.rank] for t in traces]
    starts = [s for s in starts if np.isfinite(s)]
    return shift, (min(starts) if starts else 0.0)


def _grouped_lines(table: pd.DataFrame, key: str, label: str, value: str, max_points: int) -> list[dict]:
    """One raw line per (rank, ``key``) of a change-point table (``ts_us``: the rank's clock)."""
    runs = _sorted_runs(table, ["rank", key])
    if runs is None:  # not sorted by the keys: pandas finds the groups
        groups = [(k, g["ts_us"].to_numpy(dtype=np.float64), g[value].to_numpy(dtype=np.float64))
                  for k, g in table.groupby(["rank", key], sort=True)]
    else:
        ts, v = table["ts_us"].to_numpy(dtype=np.float64), table[value].to_numpy(dtype=np.float64)
        groups = [(k, ts[rows], v[rows]) for k, rows in runs]
    return [_raw_line(int(rank), label.format(k), x, y, max_points, steps=True)
            for (rank, k), x, y in groups]  # a loop over (rank, stream) lines


def _sorted_runs(table: pd.DataFrame, keys: list[str]) -> list[tuple[tuple, slice]] | None:
    """The groups of ``table.groupby(keys, sort=True)`` as (key values, slice of rows) when the
    rows come sorted by the keys (the change-point tables do: each group is one run of rows);
    None when they do not, or a key is missing."""
    n = len(table)
    columns = [table[k].to_numpy() for k in keys]
    change = np.zeros(max(n - 1, 0), dtype=bool)
    for c in columns:
        change |= c[1:] != c[:-1]
    starts = np.r_[0, np.flatnonzero(change) + 1] if n else np.empty(0, np.int64)
    heads = list(zip(*(c[starts].tolist() for c in columns)))
    if pd.isna(np.array([v for h in heads for v in h], dtype=object)).any():
        return None
    try:
        if any(not a < b for a, b in zip(heads, heads[1:])):  # a key seen again later, or out of order
            return None
    except TypeError:  # keys that do not compare
        return None
    ends = np.r_[starts[1:], n].tolist()
    return [(h, slice(a, b)) for h, a, b in zip(heads, starts.tolist(), ends)]


def _bw_lines(points: tuple[np.ndarray, ...] | None, max_points: int) -> list[dict]:
    """One raw line per (rank, direction) of :func:`~.memory_bw.bw_change_points` (sorted by
    both): what :func:`_grouped_lines` makes of :func:`~.memory_bw.memory_bw_series`, without the
    table."""
    if points is None:
        return []
    rank, kind, labels, ts, level = points
    heads = np.flatnonzero(np.r_[True, (rank[1:] != rank[:-1]) | (kind[1:] != kind[:-1])])
    ends = np.r_[heads[1:], len(rank)]
    return [_raw_line(int(rank[a]), str(labels[kind[a]]), ts[a:b].astype(np.float64), level[a:b].astype(np.float64),
                      max_points, steps=True) for a, b in zip(heads.tolist(), ends.tolist())]  # a loop over lines


def rank_series(trace: RankTrace, max_points: int = MAX_POINTS) -> dict[str, list[dict]]:
    """The raw lines of one rank, per kind, downsampled on its own clock (x in trace µs; the
    step-time x are step numbers). Memoised: the per-rank part of :func:`time_series`, small
    (at most ``max_points`` points per line), what a worker process sends back."""
    return trace.memo(("series", max_points), lambda: _rank_series(trace, max_points))


def _rank_series(trace: RankTrace, max_points: int) -> dict[str, list[dict]]:
    one = TraceSet(ranks={trace.rank: trace}, source="")
    steps = profiler_steps(one).sort_values("step", kind="stable")
    step_lines = []
    if len(steps):
        step_lines.append(_raw_line(trace.rank, f"rank {trace.rank}", steps["step"].to_numpy(dtype=np.float64),
                                    us_to_ms(steps["wall_us"].to_numpy(dtype=np.float64)), max_points))
    memory_lines = []
    memory = memory_timeline(one, max_points=max_points)  # its own, peak-keeping downsampling
    for (rank, device), g in memory.groupby(["rank", "device"], sort=True):  # a loop over devices
        for column, what in (("allocated_bytes", "allocated"), ("reserved_bytes", "reserved")):
            values = g[column].to_numpy(dtype=np.float64)
            if np.isfinite(values).any():
                memory_lines.append(_raw_line(int(rank), f"{device} {what}", g["ts_us"].to_numpy(dtype=np.float64),
                                              values, max_points))
    return {"queue_length": _grouped_lines(queue_length_series(one), "stream", "stream {}", "queue_length", max_points),
            "memory_bw": _bw_lines(bw_change_points(one), max_points),
            "step_time": step_lines, "memory": memory_lines}


def time_series(traces: TraceSet, max_points: int = MAX_POINTS, max_lines: int = MAX_LINES) -> dict:
    """The ``series`` document (see the module docstring): queue length, copy bandwidth and
    step time, each downsampled to ``max_points`` points per line.

    Each rank's lines are downsampled on its own clock (:func:`rank_series`), then moved onto
    the common clock: the same document whether the ranks were analysed here or elsewhere."""
    shift, zero = _common_clock(traces)
    lines: dict[str, list[dict]] = {"queue_length": [], "memory_bw": [], "step_time": [], "memory": []}
    for t in traces:  # a loop over ranks
        raw = rank_series(t, max_points)
        offset, s = shift[t.rank] - zero, shift[t.rank]
        lines["queue_length"] += [_finished(x, lambda v: us_to_ms(v + offset)) for x in raw["queue_length"]]
        lines["memory_bw"] += [_finished(x, lambda v: us_to_ms(v + offset)) for x in raw["memory_bw"]]
        lines["step_time"] += [_finished(x, lambda v: v) for x in raw["step_time"]]
        lines["memory"] += [_finished(x, lambda v: us_to_ms((v + s) - zero)) for x in raw["memory"]]
    return {
        "queue_length": _entry(lines["queue_length"], "ms", "ops", "steps-post", max_lines),
        "memory_bw": _entry(lines["memory_bw"], "ms", "GB/s", "steps-post", max_lines),
        "step_time": _entry(lines["step_time"], "step", "ms", "line", max_lines),
        "memory": _entry(lines["memory"], "ms", "bytes", "steps-post", max_lines),
    }
