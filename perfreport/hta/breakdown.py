"""HTA-compatible methods of TraceAnalysis: breakdown (see ../../docs/hta-differences.md).

Temporal, idle-time, kernel, communication/computation-overlap and user-annotation breakdowns
with HTA 0.5.0's names, arguments, defaults, return shapes and numbers, computed on the HTA
frames of ``self.t`` with whole-array numpy/pandas operations.

HTA's choices are kept where they are choices (a "GPU event" is any row with ``stream != -1``,
so ``cuda_sync`` rows count in the temporal breakdown; idle gaps are measured to the previous
kernel's end in ts order; kernel metrics fold into "others" by HTA's cumsum-quantile rule; ties
in its sorts are broken as pandas' quicksort breaks them). Two things are done right instead:

* **Kernel class of memcpy/memset events** is MEMORY by category (``gpu_memcpy``/``gpu_memset``),
  whatever their name; HTA classifies by name only, so a ROCm ``hipMemcpy…``/``hipMemset…``
  GPU event is OTHER in 0.5.0 (COMMUNICATION at HEAD) and silently drops out of every breakdown.
* **Kernel metrics after folding into "others"** hold true per-invocation statistics (sum, max,
  min, mean, sample std of the invocations of each kept kernel, and of all invocations folded
  into "others"). HTA re-aggregates the per-kernel totals instead, so every kept kernel gets
  max = min = mean = its total and std 0, and "others" gets statistics of totals.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..analyses.annotations import innermost_overlapping
from ..analyses.grouping import distinct_rows
from ..analyses.intervals import intersection_length, union
from ..model import COMMUNICATION, COMPUTATION, MEMCPY_CATEGORIES, MEMORY, MEMSET_CATEGORIES, OTHER
from . import _plots
from .trace_diff import shorten_name

# HTA 0.5.0's name rules (hta/utils/utils.py), applied with re.match (anchored at the start)
_HTA_COMM = re.compile(r"^nccl.*Kernel")
_HTA_MEMORY = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_HTA_NOT_COMPUTE = re.compile(r"(^nccl.*Kernel)|(.*(Memcpy)|(Memset))|(.*Sync)")
_IDLE_KERNEL_CATS = ("kernel", "Kernel", "gpu_memset", "Memset", "gpu_memcpy", "Memcpy", "mtia_ccp_events")
_IDLE_CATEGORIES = ("host_wait", "kernel_wait", "other")  # HTA's IdleTimeType order
_SYNC_NAMES = ("Event Sync", "Context Sync")
_METRIC_COLUMNS = ["name", "sum (us)", "max (us)", "min (us)", "stddev", "mean (us)"]
_METRIC_RENAME = {"sum": "sum (us)", "max": "max (us)", "min": "min (us)", "std": "stddev", "mean": "mean (us)"}


def hta_kernel_type(name: str, category: str) -> str:
    """HTA 0.5.0's kernel type of a GPU row, except that memcpy/memset events are MEMORY."""
    if category in MEMCPY_CATEGORIES or category in MEMSET_CATEGORIES:
        return MEMORY
    if _HTA_COMM.match(name):
        return COMMUNICATION
    if _HTA_MEMORY.match(name):
        return MEMORY
    if not _HTA_NOT_COMPUTE.match(name):
        return COMPUTATION
    return OTHER


def _pandas_order(values: np.ndarray, ascending: bool = True) -> np.ndarray:
    """The row order pandas' ``sort_values`` (default quicksort) gives ``values``.

    HTA sorts with pandas' unstable default; ties (equal timestamps, equal totals) decide
    which zero-length overlap rows appear and which equal-total kernel is folded, so the
    same permutation is reproduced here (no NaN in ``values``).
    """
    idx = np.arange(len(values))
    if ascending:
        return np.argsort(values, kind="quicksort")
    order = idx[::-1][values[::-1].argsort(kind="quicksort")]
    return order[::-1]


class BreakdownMixin:
    """Mixed into :class:`perfreport.hta.TraceAnalysis`; uses self.t (an HtaTrace)."""

    # --- helpers ---------------------------------------------------------------------------
    def _sym_ids(self, names) -> list[int]:
        index = self.t.symbol_table.sym_index
        return [index[n] for n in names if n in index]

    def _kernel_types(self, frame: pd.DataFrame) -> np.ndarray:
        """hta_kernel_type of every row of ``frame``, classified once per (name, cat) pair."""
        if len(frame) == 0:
            return np.empty(0, dtype=object)
        table = self.t.symbol_table.sym_table
        pairs = np.stack([frame["name"].to_numpy(np.int64), frame["cat"].to_numpy(np.int64)], axis=1)
        first, inverse = distinct_rows(pairs)
        labels = np.array([hta_kernel_type(table[n], table[c]) for n, c in pairs[first]], dtype=object)
        return labels[inverse]

    def _gpu_rows(self, rank: int) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, np.ndarray]:
        """HTA's GPU rows of a rank (``stream != -1``): (rows, ts, end, kernel types)."""
        frame = self.t.get_trace(rank)
        gpu = frame[frame["stream"].to_numpy() != -1]
        ts = gpu["ts"].to_numpy(np.float64)
        end = ts + gpu["dur"].to_numpy(np.float64)
        return gpu, ts, end, self._kernel_types(gpu)

    # --- temporal breakdown (spec §4) --------------------------------------------------------
    def get_temporal_breakdown(self, visualize: bool = True) -> pd.DataFrame:
        """Per rank: GPU idle, compute and non-compute time (µs) and their % of the GPU span.

        kernel_time = last GPU end - first GPU start; idle = kernel_time - union of all GPU
        rows; compute = union of COMPUTATION rows; non-compute = the rest. A rank without GPU
        rows (HTA raises there) gets zero times and NaN percentages.
        """
        rows = []
        for rank in self.t.traces:
            _, ts, end, types = self._gpu_rows(rank)
            s, e = union(ts, end)
            kernel_time = float(e[-1] - s[0]) if len(s) else 0.0
            idle = kernel_time - float((e - s).sum())
            cs, ce = union(ts[types == COMPUTATION], end[types == COMPUTATION])
            compute = float((ce - cs).sum())
            rows.append((rank, idle, compute, kernel_time - compute - idle, kernel_time))
        df = pd.DataFrame(rows, columns=["rank", "idle_time(us)", "compute_time(us)", "non_compute_time(us)",
                                         "kernel_time(us)"])
        with np.errstate(invalid="ignore", divide="ignore"):
            for what in ("idle_time", "compute_time", "non_compute_time"):
                df[f"{what}_pctg"] = np.round(100 * df[f"{what}(us)"] / df["kernel_time(us)"], 2)
        if visualize:
            _plots.stacked_bars(df, "rank", ["idle_time_pctg", "compute_time_pctg", "non_compute_time_pctg"],
                                "Temporal breakdown across ranks", "Rank", "Percentage", "Time Breakdown")
        return df

    # --- idle time breakdown (spec §5) -------------------------------------------------------
    def get_idle_time_breakdown(self, ranks: list[int] | None = None, streams: list[int] | None = None,
                                visualize: bool = True, visualize_pctg: bool = True,
                                show_idle_interval_stats: bool = False, consecutive_kernel_delay: int = 30,
                                ) -> tuple[pd.DataFrame, pd.DataFrame | None]:
        """Idle gaps on each stream split into host_wait / kernel_wait / other (rank 0 by default).

        A gap is a kernel's start minus the previous kernel's end on its stream (ts order);
        host_wait if the kernel's launch started after that end, kernel_wait if the gap is
        below ``consecutive_kernel_delay`` µs, else other. Returns (idle time per category,
        describe() of the gaps if ``show_idle_interval_stats`` else None).
        """
        if not ranks:
            ranks = [0]
        times, stats = [], []
        for rank in ranks:
            t_df, s_df = self._idle_time_for_rank(rank, streams, consecutive_kernel_delay)
            times.append(t_df)
            stats.append(s_df)
            if visualize and len(t_df):
                ycol = "idle_time_ratio" if visualize_pctg else "idle_time"
                wide = t_df.pivot_table(index="stream", columns="idle_category", values=ycol, aggfunc="sum")
                _plots.stacked_bars(wide.reset_index(), "stream", list(wide.columns),
                                    f"Idle time breakdown on rank {rank} per CUDA stream", "Stream",
                                    "Percentage" if visualize_pctg else "Idle time (us)", "Idle Time Breakdown")
        time_df = pd.concat(times) if times else _empty_idle_time()
        stats_df = (pd.concat(stats) if stats else _empty_idle_stats()) if show_idle_interval_stats else None
        return time_df, stats_df

    def _idle_time_for_rank(self, rank: int, streams, delay: float) -> tuple[pd.DataFrame, pd.DataFrame]:
        frame = self.t.get_trace(rank)
        is_kernel = (frame["stream"].to_numpy() != -1) & frame["cat"].isin(self._sym_ids(_IDLE_KERNEL_CATS)).to_numpy()
        kernels = frame[is_kernel]
        # launch time: the row whose event index is the kernel's index_correlation (HTA joins
        # on it, so index_correlation 0 finds raw event 0 when that event was kept)
        ts_by_index = pd.Series(frame["ts"].to_numpy(np.float64), index=frame.index)
        ts_runtime = ts_by_index.reindex(kernels["index_correlation"].to_numpy()).to_numpy(np.float64)
        stream_col = kernels["stream"].to_numpy()
        if not streams:
            streams = list(pd.unique(stream_col))
        time_parts, stat_parts = [], []
        for stream in streams:
            sel = np.flatnonzero(stream_col == stream)
            ts = kernels["ts"].to_numpy()[sel]
            order = _pandas_order(ts)
            ts = ts[order].astype(np.float64)
            end = ts + kernels["dur"].to_numpy(np.float64)[sel][order]
            prev_end = np.concatenate([[np.nan], end[:-1]])
            gap = ts - prev_end
            with np.errstate(invalid="ignore"):
                host = ts_runtime[sel][order] > prev_end
                kernel_wait = ~host & (gap < delay)
            category = np.where(host, 0, np.where(kernel_wait, 1, 2))
            gaps = pd.Series(gap).groupby(category)
            per_cat = pd.DataFrame({"idle_time": gaps.sum()})
            per_cat["stream"] = stream
            per_cat["idle_time_ratio"] = per_cat["idle_time"] / per_cat["idle_time"].sum()
            time_parts.append(per_cat)
            described = gaps.describe()
            described.insert(0, "stream", stream)
            stat_parts.append(described)
        if not time_parts:
            return _empty_idle_time(), _empty_idle_stats()
        names = dict(enumerate(_IDLE_CATEGORIES))
        times = pd.concat(time_parts).rename(index=names).rename_axis("idle_category").reset_index()
        times["rank"] = rank
        times = times[["rank", "stream", "idle_category", "idle_time", "idle_time_ratio"]].round(2)
        stats = pd.concat(stat_parts).round(2)
        stats.insert(0, "rank", rank)
        stats = stats.rename(index=names).rename_axis("idle_category")
        return times, stats

    # --- kernel breakdown (spec §6.1, §6.2) --------------------------------------------------
    def get_gpu_kernel_breakdown(self, visualize: bool = True, duration_ratio: float = 0.8, num_kernels: int = 10,
                                 include_memory_kernels: bool = True, image_renderer: str = "",
                                 ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(time per kernel type and overlap class over all ranks, per-kernel metrics per rank).

        The first frame sums, over ranks, the union time of each overlap class
        ("COMPUTATION", "COMPUTATION overlapping COMMUNICATION", …) with its percentage;
        the second has per (rank, type, kernel name) sum/max/min/std/mean of durations (µs),
        the top ``num_kernels`` within ``duration_ratio`` of the type's time kept by name and the
        rest folded into "others" (true per-invocation statistics, unlike HTA; see the module
        docstring). ``visualize``: HTA's figures (see :mod:`._plots`; ``image_renderer`` is
        plotly's renderer): the kernel-type pie, per kernel type the per-rank pies of its top
        kernels and, per kernel, its mean duration on each rank with min/max error bars.
        """
        types_analysed = [COMPUTATION, COMMUNICATION] + ([MEMORY] if include_memory_kernels else [])
        table = np.asarray(self.t.symbol_table.sym_table, dtype=object)
        type_parts, metric_parts = [], []
        for rank in self.t.traces:
            gpu, ts, end, types = self._gpu_rows(rank)
            type_parts.append(_overlap_class_times(ts, end, types, types_analysed))
            names = table[gpu["name"].to_numpy(np.int64)]
            dur = gpu["dur"].to_numpy(np.float64)
            for kernel_type in types_analysed:
                sel = types == kernel_type
                metrics = _aggregate_durations(names[sel], dur[sel], duration_ratio, num_kernels)
                metrics["kernel_type"] = kernel_type
                metrics["rank"] = int(rank)
                metric_parts.append(metrics)
        kernel_type_df = _kernel_type_table(type_parts)
        metrics_df = pd.concat(metric_parts, ignore_index=True) if metric_parts else _empty_metrics(True)
        metrics_df = metrics_df.sort_values(by=["kernel_type", "name", "rank"], ignore_index=True, kind="mergesort")
        metrics_df = metrics_df.rename(columns=_METRIC_RENAME)[_METRIC_COLUMNS + ["kernel_type", "rank"]]
        metrics_df["rank"] = metrics_df["rank"].astype(np.int64)
        if visualize:
            _plot_kernel_breakdown(kernel_type_df, metrics_df, image_renderer or None)
        return kernel_type_df, metrics_df

    # --- user annotations (spec §6.4, §6.5) --------------------------------------------------
    def get_gpu_user_annotation_breakdown(self, use_gpu_annotation: bool = True, visualize: bool = True,
                                          duration_ratio: float = 0.8, num_kernels: int = 1000,
                                          allowlist_patterns: list[str] | None = None,
                                          image_renderer: str | None = None) -> pd.DataFrame | None:
        """Per rank and annotation name: sum/max/min/std/mean of the annotation spans (µs).

        GPU spans (``gpu_user_annotation``) by default, CPU spans (``user_annotation``, which
        include ProfilerStep#N) with ``use_gpu_annotation=False``; None when the trace has none.
        Names containing any of ``allowlist_patterns`` (literal substrings) are never folded
        into "others".
        """
        category = "gpu_user_annotation" if use_gpu_annotation else "user_annotation"
        cat_id = self.t.symbol_table.sym_index.get(category)
        if cat_id is None or not any((f["cat"].to_numpy() == cat_id).any() for f in self.t.traces.values()):
            return None
        table = np.asarray(self.t.symbol_table.sym_table, dtype=object)
        allow = None
        if allowlist_patterns is not None:
            allow = [s for s in self.t.symbol_table.sym_table if any(p in s for p in allowlist_patterns)]
        parts = []
        for rank, frame in self.t.traces.items():
            rows = frame[frame["cat"].to_numpy() == cat_id]
            metrics = _aggregate_durations(table[rows["name"].to_numpy(np.int64)], rows["dur"].to_numpy(np.float64),
                                           duration_ratio, num_kernels, allow)
            metrics["rank"] = int(rank)
            parts.append(metrics)
        df = pd.concat(parts, ignore_index=True).sort_values(by=["rank", "name"], ignore_index=True, kind="mergesort")
        df = df.rename(columns=_METRIC_RENAME)[_METRIC_COLUMNS + ["rank"]]
        if visualize:  # HTA's: per-rank pies, then per annotation its duration per rank
            panels = [(f"Rank {rank}", part["name"].tolist(), part["sum (us)"].to_numpy())
                      for rank, part in df.groupby("rank")]
            _plots.pies(panels, "User annotation distribution on each rank", image_renderer)
            _plots.range_bars([(f"User annotation = {name}", name, part) for name, part in df.groupby("name", sort=False)
                               if name != "others"], "User annotation duration per rank", image_renderer)
        return df

    def get_gpu_kernels_with_user_annotations(self, rank: int, expand_names: bool = True,
                                              shorten_names: bool = True,
                                              shortern_names: bool | None = None) -> pd.DataFrame | None:
        """The rank's GPU kernels with ``user_annotation``: the innermost GPU user annotation.

        Kernels (HTA's GPUKernelFilter: stream >= 0 and correlation >= 0, plus Event/Context
        Sync) get the name id of the shortest ``gpu_user_annotation`` on the same pid/tid whose
        [ts, end) overlaps theirs, -1 if none. ``expand_names`` adds ``s_name``, ``s_cat`` and
        ``s_user_annotation`` (shortened unless ``shorten_names=False``; HTA spells that
        argument ``shortern_names``, also accepted). None when the trace has no GPU annotations.
        """
        if shortern_names is not None:
            shorten_names = shortern_names
        symbols = self.t.symbol_table
        cat_id = symbols.sym_index.get("gpu_user_annotation")
        if cat_id is None:
            return None
        frame = self.t.get_trace(rank)
        stream, corr = frame["stream"].to_numpy(), frame["correlation"].to_numpy()
        is_kernel = ((stream >= 0) & (corr >= 0)) | frame["name"].isin(self._sym_ids(_SYNC_NAMES)).to_numpy()
        kernels = frame[is_kernel].copy()
        kernels["end"] = kernels["ts"] + kernels["dur"]
        annos = frame[frame["cat"].to_numpy() == cat_id]
        kernels["user_annotation"] = _innermost_annotation(kernels, annos)
        if expand_names:
            table = symbols.sym_table
            short = shorten_name if shorten_names else str
            for col in ("name", "cat", "user_annotation"):
                ids = kernels[col].to_numpy(np.int64)
                uniq, inverse = np.unique(ids, return_inverse=True)
                decoded = np.array([short(table[i]) if i >= 0 else "" for i in uniq], dtype=object)
                kernels[f"s_{col}"] = decoded[inverse.ravel()] if len(ids) else np.empty(0, dtype=object)
        return kernels.reset_index(drop=True)

    # --- communication / computation overlap (spec §7) ---------------------------------------
    def get_comm_comp_overlap(self, visualize: bool = True) -> pd.DataFrame:
        """Per rank: % of communication-kernel time that overlaps computation kernels.

        NaN for a rank without communication kernels.
        """
        rows = []
        for rank in self.t.traces:
            _, ts, end, types = self._gpu_rows(rank)
            comm, comp = types == COMMUNICATION, types == COMPUTATION
            cs, ce = union(ts[comm], end[comm])
            overlap = intersection_length((ts[comm], end[comm]), (ts[comp], end[comp]))
            comm_time = float((ce - cs).sum())
            rows.append((rank, overlap / comm_time if comm_time else np.nan))
        df = pd.DataFrame(rows, columns=["rank", "comp_comm_overlap_ratio"])
        df["comp_comm_overlap_pctg"] = np.round(100 * df["comp_comm_overlap_ratio"], 2)
        if visualize:
            _plots.bars(df["rank"], df["comp_comm_overlap_pctg"].fillna(0), "Computation-Communication Overlap",
                        "Rank", "Computation-Communication Overlap Percentage")
        return df[["rank", "comp_comm_overlap_pctg"]]


# --- computations --------------------------------------------------------------------------
def _overlap_class_times(ts: np.ndarray, end: np.ndarray, types: np.ndarray, analysed: list[str]) -> pd.DataFrame:
    """Union time per overlap class on one rank, as HTA's ``_get_gpu_kernel_type_time``.

    Each type's merged intervals become +bit / -bit edges (COMPUTATION 1, COMMUNICATION 2,
    MEMORY 4); edges are sorted as HTA sorts them (cumulatively, type after type, pandas
    quicksort), so zero-length classes at equal timestamps appear exactly when HTA's do.
    """
    times = np.empty(0, dtype=np.float64)
    status = np.empty(0, dtype=np.int64)
    for i, kernel_type in enumerate(analysed):
        s, e = union(ts[types == kernel_type], end[types == kernel_type])
        times = np.concatenate([times, s, e])
        status = np.concatenate([status, np.full(len(s), 1 << i), np.full(len(e), -(1 << i))])
        order = _pandas_order(times)
        times, status = times[order], status[order]
    running = np.cumsum(status)
    keep = running[:-1] > 0
    if not keep.any():
        return pd.DataFrame({"kernel_type": pd.Series(dtype=object), "sum": pd.Series(dtype=np.int64)})
    durations = (times[1:] - times[:-1])[keep].astype(np.int64)
    masks = running[:-1][keep]
    labels = np.array([" overlapping ".join(t for i, t in enumerate(analysed) if m & (1 << i))
                       for m in range(1 << len(analysed))], dtype=object)
    out = pd.DataFrame({"kernel_type": labels[masks], "dur": durations}).groupby("kernel_type")["dur"].sum()
    return out.rename("sum").reset_index()


def _kernel_type_table(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """Sum the per-rank overlap-class times, largest first, with % rounded to 0.1."""
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame({"kernel_type": [], "sum": []})
    if len(df) == 0:
        return pd.DataFrame({"kernel_type": pd.Series(dtype=object), "sum": pd.Series(dtype=np.int64),
                             "percentage": pd.Series(dtype=np.float64)})
    sums = df.groupby("kernel_type")["sum"].sum().reset_index()
    sums = sums.iloc[_pandas_order(sums["sum"].to_numpy(), ascending=False)].reset_index(drop=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        sums["percentage"] = np.round(sums["sum"] / sums["sum"].sum() * 100, 1)
    return sums


def _aggregate_durations(names: np.ndarray, durations: np.ndarray, duration_ratio: float, num_kernels: int,
                         allowlist_names: list[str] | None = None) -> pd.DataFrame:
    """Per name: sum, max, min, mean, std (sample, 0 for one invocation) of the durations.

    With more than ``num_kernels`` names, names are ranked by total (descending, HTA's tie
    order) and a name is folded into "others" when its position is >= ``num_kernels`` or the
    running total at its position exceeds the ``duration_ratio`` quantile of the running
    totals (HTA's rule), unless it is in ``allowlist_names``. Statistics are then taken over
    the invocations of each remaining name and of "others" (HTA takes them over totals).
    """
    if len(names) == 0:
        return _empty_metrics(False)
    names = np.asarray(names, dtype=object)
    stats = _name_stats(names, durations)
    if len(stats) > num_kernels:
        order = _pandas_order(stats["sum"].to_numpy(), ascending=False)
        ranked = stats.iloc[order].reset_index(drop=True)
        cumsum = ranked["sum"].cumsum()
        threshold = cumsum.quantile(duration_ratio)
        keep = ranked["name"].isin(allowlist_names).to_numpy() if allowlist_names is not None else \
            np.zeros(len(ranked), dtype=bool)
        fold = ~keep & ((cumsum.to_numpy() > threshold) | (np.arange(len(ranked)) >= num_kernels))
        folded = set(ranked["name"].to_numpy()[fold])
        if folded:
            mapped = np.where(pd.Series(names).isin(folded).to_numpy(), "others", names)
            stats = _name_stats(mapped.astype(object), durations)
    return stats


def _name_stats(names: np.ndarray, durations: np.ndarray) -> pd.DataFrame:
    grouped = pd.Series(durations, dtype=np.float64).groupby(pd.Series(names, dtype=object))
    stats = grouped.agg(["sum", "max", "min", "mean", "std"]).rename_axis("name").reset_index()
    stats["std"] = stats["std"].fillna(0)
    stats["name"] = stats["name"].astype(object)
    return stats


def _innermost_annotation(kernels: pd.DataFrame, annos: pd.DataFrame) -> np.ndarray:
    """Name id of the innermost annotation overlapping each kernel (same pid and tid), else -1.

    HTA walks the annotations from the longest to the shortest (pandas' quicksort order on
    dur, descending) and lets every overlapping kernel take the name, so the last one wins:
    each annotation's priority is its position in that walk, and each kernel gets the
    highest-priority annotation whose [ts, end) overlaps its own.
    """
    result = np.full(len(kernels), -1, dtype=np.int64)
    if len(annos) == 0 or len(kernels) == 0:
        return result
    walk = _pandas_order(annos["dur"].to_numpy(np.float64), ascending=False)
    priority = np.empty(len(annos), dtype=np.int64)
    priority[walk] = np.arange(len(annos))
    keys = pd.MultiIndex.from_arrays([np.concatenate([kernels["pid"].to_numpy(), annos["pid"].to_numpy()]),
                                      np.concatenate([kernels["tid"].to_numpy(), annos["tid"].to_numpy()])])
    codes = pd.factorize(keys)[0]
    k_ts, a_ts = kernels["ts"].to_numpy(np.float64), annos["ts"].to_numpy(np.float64)
    best = innermost_overlapping(k_ts, k_ts + kernels["dur"].to_numpy(np.float64), codes[:len(kernels)],
                                 a_ts, a_ts + annos["dur"].to_numpy(np.float64), codes[len(kernels):], priority)
    found = best >= 0
    result[found] = annos["name"].to_numpy(np.int64)[best[found]]
    return result


# --- empty results -------------------------------------------------------------------------
def _empty_idle_time() -> pd.DataFrame:
    return pd.DataFrame({"rank": pd.Series(dtype=np.int64), "stream": pd.Series(dtype=np.int64),
                         "idle_category": pd.Series(dtype=object), "idle_time": pd.Series(dtype=np.float64),
                         "idle_time_ratio": pd.Series(dtype=np.float64)})


def _empty_idle_stats() -> pd.DataFrame:
    cols = ["rank", "stream", "count", "mean", "std", "min", "25%", "50%", "75%", "max"]
    return pd.DataFrame({c: pd.Series(dtype=np.float64) for c in cols}).rename_axis("idle_category")


def _empty_metrics(with_type: bool) -> pd.DataFrame:
    cols = {"name": pd.Series(dtype=object)}
    cols.update({c: pd.Series(dtype=np.float64) for c in ("sum", "max", "min", "mean", "std")})
    if with_type:
        cols.update({"kernel_type": pd.Series(dtype=object), "rank": pd.Series(dtype=np.int64)})
    return pd.DataFrame(cols)


# --- figures (HTA's, through _plots: plotly or matplotlib; the returned data never depends on them) ---
def _plot_kernel_breakdown(kernel_type_df: pd.DataFrame, metrics_df: pd.DataFrame, image_renderer) -> None:
    """HTA's figures for get_gpu_kernel_breakdown (titles as HTA's)."""
    shown = kernel_type_df[kernel_type_df["percentage"] > 0]
    if len(shown):
        _plots.pie(shown["kernel_type"], shown["percentage"], "Kernel Type Percentage Across All Ranks",
                   image_renderer)
    for kernel_type, part in metrics_df.groupby("kernel_type", sort=False):
        panels = [(f"Rank {rank}", [shorten_name(n) for n in by_rank["name"]], by_rank["sum (us)"].to_numpy())
                  for rank, by_rank in part.groupby("rank")]
        _plots.pies(panels, f'Kernel type "{kernel_type}" - kernel distribution on each rank', image_renderer)
        named = part[part["name"] != "others"]
        _plots.range_bars([(f'Kernel type "{kernel_type}" - {name}', shorten_name(name), by_name)
                           for name, by_name in named.groupby("name", sort=False)],
                          f'Kernel type "{kernel_type}" - mean duration per rank (min/max bars)', image_renderer)
