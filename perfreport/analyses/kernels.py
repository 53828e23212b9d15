"""GPU kernel breakdown: time per kernel class and overlap class, and per-kernel statistics.

GPU work is every kernel, memcpy and memset (:meth:`RankTrace.gpu_activity`), classified once
by :func:`perfreport.model.kernel_class` (COMPUTATION, COMMUNICATION, MEMORY; memcpy/memset by
category, so ROCm ``hip…`` names are never mistaken for collectives).

* :func:`kernel_type_breakdown` - per rank, the union time of each *overlap class*: the time
  during which exactly a given set of classes runs ("COMPUTATION", "COMPUTATION overlapping
  COMMUNICATION", …). The classes partition the GPU busy time, so their percentages (of busy
  time) add up to 100. Per step too (:func:`kernel_type_breakdown_per_step`).
* :func:`kernel_metrics` - per rank, class and kernel name: invocations, total, max, min, mean
  and sample standard deviation of the durations. The largest kernels are kept by name (at
  most ``num_kernels``, and only while the running total is below ``duration_ratio`` of the
  class's time); the rest are folded into one "others" row whose statistics are over all its
  invocations.
* :func:`kernel_rank_distribution` - per class and kernel name, how its total time spreads
  over ranks (mean, min, max, std of the per-rank totals; the ranks with min and max).

All times are µs. A rank without GPU work contributes no rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import COMMUNICATION, COMPUTATION, MEMORY, RankTrace, TraceSet
from .intervals import union

CLASSES = (COMPUTATION, COMMUNICATION, MEMORY)
"""Kernel classes that make up GPU busy time, in overlap-label order."""
OTHERS = "others"
DEFAULT_NUM_KERNELS = 10
DEFAULT_DURATION_RATIO = 0.8

TYPE_COLUMNS = ("rank", "kernel_type", "time_us", "busy_pct")
METRIC_COLUMNS = ("rank", "kernel_class", "name", "count", "sum_us", "max_us", "min_us", "mean_us", "std_us")
DISTRIBUTION_COLUMNS = ("kernel_class", "name", "ranks", "sum_us_mean", "sum_us_min", "sum_us_max", "sum_us_std",
                        "min_rank", "max_rank", "count_mean")


def gpu_work(trace: RankTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rows, starts, ends, classes) of the rank's GPU work with a duration, in row order."""
    rows = np.flatnonzero(trace.gpu_activity() & np.isfinite(trace.dur) & np.isfinite(trace.ts))
    starts = trace.ts[rows]
    return rows, starts, starts + trace.dur[rows], trace.kernel_classes(rows)


def steps_of(iteration: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(step, positions) for each distinct value of ``iteration``, ascending (-1 first)."""
    if len(iteration) == 0:
        return []
    order = np.argsort(iteration, kind="stable")
    values, first = np.unique(iteration[order], return_index=True)
    bounds = np.append(first, len(order))
    return [(int(v), order[bounds[i]:bounds[i + 1]]) for i, v in enumerate(values)]


def overlap_class_times(starts: np.ndarray, ends: np.ndarray, classes: np.ndarray) -> dict[str, float]:
    """Time (µs) during which exactly each non-empty set of CLASSES runs, by overlap label.

    Each class's intervals are merged, turned into +bit/-bit edges (COMPUTATION 1,
    COMMUNICATION 2, MEMORY 4) and swept in time order; at equal times ends come first, so
    touching intervals create no zero-length overlap. Labels join the classes present with
    " overlapping " (HTA's labels). Only classes with positive time appear.
    """
    times, deltas = [], []
    for bit, cls in enumerate(CLASSES):
        s, e = union(starts[classes == cls], ends[classes == cls])
        times += [s, e]
        deltas += [np.full(len(s), 1 << bit), np.full(len(e), -(1 << bit))]
    t, d = np.concatenate(times), np.concatenate(deltas).astype(np.int64)
    if len(t) == 0:
        return {}
    order = np.lexsort((d, t))
    t, mask = t[order], np.cumsum(d[order])
    seg = np.diff(t)
    active = (mask[:-1] > 0) & (seg > 0)
    totals = np.bincount(mask[:-1][active], weights=seg[active], minlength=8)
    return {_label(m): float(totals[m]) for m in range(1, 8) if totals[m] > 0}


def _label(mask: int) -> str:
    return " overlapping ".join(cls for bit, cls in enumerate(CLASSES) if mask & (1 << bit))


def _type_rows(rank: int, starts, ends, classes, extra: dict) -> list[dict]:
    times = overlap_class_times(starts, ends, classes)
    busy = sum(times.values())
    return [{"rank": rank, **extra, "kernel_type": label, "time_us": t, "busy_pct": 100.0 * t / busy}
            for label, t in sorted(times.items(), key=lambda kv: -kv[1])]


def kernel_type_breakdown(traces: TraceSet) -> pd.DataFrame:
    """Per rank and overlap class: union time (µs) and its % of the rank's GPU busy time."""
    rows = []
    for trace in traces:
        _, starts, ends, classes = gpu_work(trace)
        rows += _type_rows(trace.rank, starts, ends, classes, {})
    return pd.DataFrame(rows, columns=list(TYPE_COLUMNS))


def kernel_type_breakdown_per_step(traces: TraceSet) -> pd.DataFrame:
    """:func:`kernel_type_breakdown` per (rank, step); GPU work belongs to its launch's step."""
    rows = []
    for trace in traces:
        work, starts, ends, classes = gpu_work(trace)
        for step, pos in steps_of(trace.iteration[work]):
            rows += _type_rows(trace.rank, starts[pos], ends[pos], classes[pos], {"step": step})
    return pd.DataFrame(rows, columns=["rank", "step", *TYPE_COLUMNS[1:]])


def name_statistics(names: np.ndarray, durations: np.ndarray) -> pd.DataFrame:
    """Per name: count, sum, max, min, mean and sample std (0 for one invocation), µs."""
    grouped = pd.Series(durations, dtype=np.float64).groupby(pd.Series(names, dtype=object))
    stats = grouped.agg(["count", "sum", "max", "min", "mean", "std"]).rename_axis("name").reset_index()
    stats["std"] = stats["std"].fillna(0.0)
    stats["name"] = stats["name"].astype(object)
    return stats.rename(columns={"sum": "sum_us", "max": "max_us", "min": "min_us", "mean": "mean_us",
                                 "std": "std_us"})


def top_names(totals: pd.Series, num_kernels: int, duration_ratio: float) -> set:
    """Names kept by name: the largest totals, at most ``num_kernels``, while the time before
    each is below ``duration_ratio`` of the whole (so the kept ones cover about that share)."""
    ranked = totals.sort_values(ascending=False, kind="stable")
    before = ranked.cumsum().to_numpy() - ranked.to_numpy()
    keep = (np.arange(len(ranked)) < num_kernels) & (before < duration_ratio * ranked.sum())
    return set(ranked.index[keep])


def _metric_rows(rank: int, names: np.ndarray, durations: np.ndarray, classes: np.ndarray,
                 num_kernels: int, duration_ratio: float) -> list[pd.DataFrame]:
    parts = []
    for cls in CLASSES:
        sel = classes == cls
        if not sel.any():
            continue
        n, d = names[sel], durations[sel]
        totals = pd.Series(d).groupby(pd.Series(n, dtype=object)).sum()
        if len(totals) > num_kernels:
            kept = top_names(totals, num_kernels, duration_ratio)
            n = np.where(pd.Series(n, dtype=object).isin(kept).to_numpy(), n, OTHERS).astype(object)
        stats = name_statistics(n, d)
        stats.insert(0, "kernel_class", cls)
        stats.insert(0, "rank", rank)
        parts.append(stats)
    return parts


def kernel_metrics(traces: TraceSet, num_kernels: int = DEFAULT_NUM_KERNELS,
                   duration_ratio: float = DEFAULT_DURATION_RATIO) -> pd.DataFrame:
    """Per rank, kernel class and kernel name (top-N, rest as "others"): duration statistics."""
    parts = []
    for trace in traces:
        rows, _, _, classes = gpu_work(trace)
        parts += _metric_rows(trace.rank, trace.decode(trace.name[rows]), trace.dur[rows], classes,
                              num_kernels, duration_ratio)
    if not parts:
        return pd.DataFrame(columns=list(METRIC_COLUMNS))
    df = pd.concat(parts, ignore_index=True)
    df["others_last"] = df["name"] == OTHERS
    df = df.sort_values(["rank", "kernel_class", "others_last", "sum_us"], ascending=[True, True, True, False],
                        kind="stable")
    return df[list(METRIC_COLUMNS)].reset_index(drop=True)


def kernel_rank_distribution(traces: TraceSet) -> pd.DataFrame:
    """Per kernel class and name (every kernel, no folding): spread of its total over ranks.

    A rank that never runs the kernel counts as 0 µs, so an imbalance shows in min/std.
    """
    parts = []
    for trace in traces:
        rows, _, _, classes = gpu_work(trace)
        if len(rows) == 0:
            continue
        df = pd.DataFrame({"kernel_class": classes, "name": trace.decode(trace.name[rows]), "dur": trace.dur[rows]})
        agg = df.groupby(["kernel_class", "name"])["dur"].agg(["sum", "count"]).reset_index()
        agg["rank"] = trace.rank
        parts.append(agg)
    if not parts:
        return pd.DataFrame(columns=list(DISTRIBUTION_COLUMNS))
    all_ranks = sorted(r for r in traces.rank_ids)
    long = pd.concat(parts, ignore_index=True)
    sums = long.pivot_table(index=["kernel_class", "name"], columns="rank", values="sum", fill_value=0.0)
    sums = sums.reindex(columns=all_ranks, fill_value=0.0)
    counts = long.pivot_table(index=["kernel_class", "name"], columns="rank", values="count", fill_value=0)
    counts = counts.reindex(columns=all_ranks, fill_value=0)
    values = sums.to_numpy(np.float64)
    out = pd.DataFrame({
        "ranks": (counts.to_numpy() > 0).sum(axis=1),
        "sum_us_mean": values.mean(axis=1),
        "sum_us_min": values.min(axis=1),
        "sum_us_max": values.max(axis=1),
        "sum_us_std": values.std(axis=1, ddof=1) if values.shape[1] > 1 else np.zeros(len(values)),
        "min_rank": np.asarray(all_ranks)[values.argmin(axis=1)],
        "max_rank": np.asarray(all_ranks)[values.argmax(axis=1)],
        "count_mean": counts.to_numpy(np.float64).mean(axis=1),
    }, index=sums.index).reset_index()
    out = out.sort_values(["kernel_class", "sum_us_mean"], ascending=[True, False], kind="stable")
    return out[list(DISTRIBUTION_COLUMNS)].reset_index(drop=True)
