"""Idle time on each GPU stream, split by its likely cause.

On each stream, GPU work (kernels, memcpy, memset) is taken in start order. The gap before a
piece of work is its start minus the latest end of all earlier work on that stream (so work
that overlaps, or touches, leaves no gap). Each positive gap is one idle interval:

* ``host_wait`` - the work's launch call (its linked CPU runtime event) started only after
  the stream had drained: the GPU waited for the host to enqueue work;
* ``kernel_wait`` - otherwise, if the gap is shorter than ``consecutive_kernel_delay_us``
  (default 30 µs): the usual launch overhead between back-to-back kernels;
* ``other`` - anything else (e.g. waiting on another stream's event).

Work without a known launch can only be kernel_wait or other. The time before the first
piece of work on a stream is not idle (the stream's span starts there). Per step, a gap
belongs to the step of the work that ends it (the launch's ProfilerStep; -1 outside steps).
Times are µs; ``idle_share_pct`` is a category's share of the stream's idle time (NaN when
the stream has none).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import RankTrace, TraceSet
from .grouping import Grouped, presence_codes
from .intervals import running_max_per_run

DEFAULT_CONSECUTIVE_KERNEL_DELAY_US = 30.0
"""HTA's default: gaps below 30 µs between kernels are taken as launch overhead."""
CATEGORIES = ("host_wait", "kernel_wait", "other")

BREAKDOWN_COLUMNS = ("rank", "stream", "idle_category", "idle_us", "gaps", "idle_share_pct")
STATS_COLUMNS = ("rank", "stream", "idle_category", "count", "mean_us", "std_us", "min_us", "p25_us", "p50_us",
                 "p75_us", "max_us")


def stream_gaps(trace: RankTrace, consecutive_kernel_delay_us: float = DEFAULT_CONSECUTIVE_KERNEL_DELAY_US,
                ) -> pd.DataFrame:
    """One row per piece of GPU work: stream, step, gap_us before it (NaN for the first on its
    stream) and idle_category (None unless the gap is positive)."""
    gaps = coded_gaps(trace, consecutive_kernel_delay_us)
    category = np.array([*CATEGORIES, None], dtype=object)[gaps["category"].to_numpy()]  # -1: None
    return pd.DataFrame({"rank": trace.rank, "stream": gaps["stream"].to_numpy(), "step": gaps["step"].to_numpy(),
                         "gap_us": gaps["gap_us"].to_numpy(), "idle_category": category})


def coded_gaps(trace: RankTrace, consecutive_kernel_delay_us: float = DEFAULT_CONSECUTIVE_KERNEL_DELAY_US,
               ) -> pd.DataFrame:
    """:func:`stream_gaps` with the category as its index in CATEGORIES (-1: not idle).

    Memoised per trace and delay (the three idle analyses share it): read it, never modify
    it. Integer categories keep the groupings on integers.
    """
    return trace.memo(("stream_gaps", float(consecutive_kernel_delay_us)),
                      lambda: _coded_gaps(trace, consecutive_kernel_delay_us))


def _coded_gaps(trace: RankTrace, consecutive_kernel_delay_us: float) -> pd.DataFrame:
    rows = trace.gpu_work_rows()
    stream, ts = trace.arg("stream", -1, rows), trace.ts[rows]
    end = ts + trace.dur[rows]
    order = np.lexsort((end, ts, stream))
    rows, stream, ts, end = rows[order], stream[order], ts[order], end[order]
    first = np.ones(len(rows), dtype=bool)
    first[1:] = stream[1:] != stream[:-1]
    reach = running_max_per_run(end, np.flatnonzero(first))
    prev_reach = np.concatenate([[np.nan], reach[:-1]])
    prev_reach[first] = np.nan
    gap = ts - prev_reach
    linked = trace.linked[rows]
    launch_ts = np.where(linked >= 0, trace.ts[np.clip(linked, 0, None)], np.nan) if len(rows) else np.empty(0)
    with np.errstate(invalid="ignore"):
        idle = gap > 0
        host = launch_ts > prev_reach
        category = np.where(host, 0, np.where(gap < consecutive_kernel_delay_us, 1, 2))
    category[~idle] = -1
    return pd.DataFrame({"rank": trace.rank, "stream": stream, "step": trace.iteration[rows], "gap_us": gap,
                         "category": category}, copy=False)  # fresh arrays: no copy into 2-D blocks


def _grid(gaps: pd.DataFrame, keys: list[str]) -> tuple[pd.DataFrame, np.ndarray]:
    """(grid, cell): every (keys..., category) combination for the key values present in
    ``gaps`` (key values in order of first appearance, categories in CATEGORIES order), and
    for each row of ``gaps`` the position of its combination in the grid.

    Integer codes (first-appearance order, :func:`_first_seen_codes`) replace a drop_duplicates
    and a cross join, and the cell position replaces a merge.
    """
    present, first = np.zeros(len(gaps), dtype=np.int64), np.zeros(min(len(gaps), 1), dtype=np.int64)
    for k in keys:  # a loop over the key columns
        codes, seen = _first_seen_codes(gaps[k].to_numpy())
        present, first = _first_seen_codes(present * len(seen) + codes, len(first) * len(seen))
    n_cat = len(CATEGORIES)
    grid = pd.DataFrame({k: np.repeat(gaps[k].to_numpy()[first], n_cat) for k in keys})
    grid["category"] = np.tile(np.arange(n_cat), len(first))
    return grid, present * n_cat + gaps["category"].to_numpy()


def _first_seen_codes(values: np.ndarray, n_values: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(code per value, numbered in order of first appearance; the row where each code first
    appears): ``pd.factorize(values)[0]`` up to a renumbering that keeps equal values equal
    and their order of first appearance; integers through
    :func:`~perfreport.analyses.grouping.presence_codes` (``n_values`` as there)."""
    dense = presence_codes(values, n_values)
    if dense is not None:
        uniq, codes = dense
        first = np.full(len(uniq), len(values), dtype=np.int64)
        np.minimum.at(first, codes, np.arange(len(values)))
        by_first = np.argsort(first)
        rank = np.empty(len(uniq), dtype=np.int64)
        rank[by_first] = np.arange(len(uniq))
        return rank[codes], first[by_first]
    codes = pd.factorize(values, use_na_sentinel=False)[0].astype(np.int64, copy=False)  # NaN: a code too
    return codes, np.unique(codes, return_index=True)[1]


def _with_labels(out: pd.DataFrame) -> pd.DataFrame:
    """``out`` with the idle_category names of its integer categories."""
    return out.assign(idle_category=np.array(CATEGORIES, dtype=object)[out["category"].to_numpy()])


def _stream_grid(traces: TraceSet, gaps: pd.DataFrame, consecutive_kernel_delay_us: float,
                 ) -> tuple[pd.DataFrame, np.ndarray]:
    """:func:`_grid` of :func:`_all_gaps` by (rank, stream), computed once per trace set and
    delay (the breakdown and the interval statistics share it): read it, never modify it."""
    return traces.memo(("idle_stream_grid", float(consecutive_kernel_delay_us)),
                       lambda: _grid(gaps, ["rank", "stream"]))


def _breakdown(gaps: pd.DataFrame, keys: list[str], grid_and_cell=None) -> pd.DataFrame:
    grid, cell = grid_and_cell if grid_and_cell is not None else _grid(gaps, keys)
    idle = gaps["category"].to_numpy() >= 0
    gap = gaps["gap_us"].to_numpy()
    idle_us = np.bincount(cell[idle], weights=gap[idle], minlength=len(grid)).astype(np.float64)  # float if empty
    out = grid.assign(idle_us=idle_us, gaps=np.bincount(cell[idle], minlength=len(grid)).astype(np.int64))
    total = np.repeat(idle_us.reshape(-1, len(CATEGORIES)).sum(axis=1), len(CATEGORIES))  # per (keys...)
    with np.errstate(invalid="ignore", divide="ignore"):
        out["idle_share_pct"] = np.where(total > 0, 100.0 * idle_us / total, np.nan)
    return _with_labels(out)


def _all_gaps(traces: TraceSet, consecutive_kernel_delay_us: float) -> pd.DataFrame:
    """:func:`coded_gaps` of every rank, concatenated."""
    parts = [coded_gaps(t, consecutive_kernel_delay_us) for t in traces]
    return pd.concat(parts, ignore_index=True) if parts else _coded_gaps_empty()


def idle_breakdown(traces: TraceSet,
                   consecutive_kernel_delay_us: float = DEFAULT_CONSECUTIVE_KERNEL_DELAY_US) -> pd.DataFrame:
    """Per rank, stream and idle category (all three always listed): idle µs, gaps, share %."""
    gaps = _all_gaps(traces, consecutive_kernel_delay_us)
    if len(gaps) == 0:
        return pd.DataFrame(columns=list(BREAKDOWN_COLUMNS))
    return _breakdown(gaps, ["rank", "stream"], _stream_grid(traces, gaps, consecutive_kernel_delay_us)
                      )[list(BREAKDOWN_COLUMNS)]


def idle_breakdown_per_step(traces: TraceSet,
                            consecutive_kernel_delay_us: float = DEFAULT_CONSECUTIVE_KERNEL_DELAY_US,
                            ) -> pd.DataFrame:
    """:func:`idle_breakdown` per (rank, step, stream) that ran GPU work in the step."""
    gaps = _all_gaps(traces, consecutive_kernel_delay_us)
    columns = ["rank", "step", *BREAKDOWN_COLUMNS[1:]]
    if len(gaps) == 0:
        return pd.DataFrame(columns=columns)
    return _breakdown(gaps, ["rank", "step", "stream"])[columns]


def idle_interval_stats(traces: TraceSet,
                        consecutive_kernel_delay_us: float = DEFAULT_CONSECUTIVE_KERNEL_DELAY_US) -> pd.DataFrame:
    """Per rank, stream and idle category: count, mean, std, min, quartiles, max of the gaps (µs)."""
    gaps = _all_gaps(traces, consecutive_kernel_delay_us)
    if len(gaps) == 0:
        return pd.DataFrame(columns=list(STATS_COLUMNS))
    grid, cell = _stream_grid(traces, gaps, consecutive_kernel_delay_us)
    idle = gaps["category"].to_numpy() >= 0
    g = Grouped({"cell": cell[idle], "gap": gaps["gap_us"].to_numpy()[idle]}, ["cell"])
    at = cell[idle][g.first]  # the grid row of each group; cells without gaps keep count 0, NaN

    def on_grid(values: np.ndarray) -> np.ndarray:
        out = np.full(len(grid), np.nan)
        out[at] = values
        return out

    count = np.zeros(len(grid), dtype=np.int64)
    count[at] = g.count("gap")
    out = grid.assign(count=count, mean_us=on_grid(g.mean("gap")), std_us=on_grid(g.std("gap")),
                      min_us=on_grid(g.min("gap")), max_us=on_grid(g.max("gap")),
                      p25_us=on_grid(g.quantile("gap", 0.25)), p50_us=on_grid(g.quantile("gap", 0.5)),
                      p75_us=on_grid(g.quantile("gap", 0.75)))
    return _with_labels(out)[list(STATS_COLUMNS)]


def _coded_gaps_empty() -> pd.DataFrame:
    return pd.DataFrame({"rank": pd.Series(dtype=np.int64), "stream": pd.Series(dtype=np.int64),
                         "step": pd.Series(dtype=np.int64), "gap_us": pd.Series(dtype=np.float64),
                         "category": pd.Series(dtype=np.int64)})


def stream_gaps_empty() -> pd.DataFrame:
    return pd.DataFrame({"rank": pd.Series(dtype=np.int64), "stream": pd.Series(dtype=np.int64),
                         "step": pd.Series(dtype=np.int64), "gap_us": pd.Series(dtype=np.float64),
                         "idle_category": pd.Series(dtype=object)})
