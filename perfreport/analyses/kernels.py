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

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..model import COMMUNICATION, COMPUTATION, KERNEL_CLASS_NAMES, MEMORY, RankTrace, TraceSet, sorted_unique
from .grouping import Grouped, sorted_codes, string_keys
from .intervals import union
from .segments import Segments, overlap_times, segment_union

CLASSES = (COMPUTATION, COMMUNICATION, MEMORY)
"""Kernel classes that make up GPU busy time, in overlap-label order."""
_CLASS_POSITION = np.array([CLASSES.index(c) if c in CLASSES else -1 for c in KERNEL_CLASS_NAMES])
"""Position in CLASSES of each model kernel class (indexed by ``RankTrace.gpu_class()``)."""
OTHERS = "others"
DEFAULT_NUM_KERNELS = 10
DEFAULT_DURATION_RATIO = 0.8

TYPE_COLUMNS = ("rank", "kernel_type", "time_us", "busy_pct")
METRIC_COLUMNS = ("rank", "kernel_class", "name", "count", "sum_us", "max_us", "min_us", "mean_us", "std_us")
DISTRIBUTION_COLUMNS = ("kernel_class", "name", "ranks", "sum_us_mean", "sum_us_min", "sum_us_max", "sum_us_std",
                        "min_rank", "max_rank", "count_mean")


def gpu_work(trace: RankTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(rows, starts, ends, classes) of the rank's GPU work with a duration, in row order;
    ``classes`` as indices into ``KERNEL_CLASS_NAMES`` (``RankTrace.gpu_class``: integer
    compares, no string per row).

    Memoised on the trace (most GPU analyses start from it); the arrays are read-only.
    """
    def compute() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        rows = trace.gpu_work_rows()
        starts = trace.ts[rows]
        return _read_only(rows, starts, starts + trace.dur[rows], trace.gpu_class()[rows])

    return trace.memo("gpu_work", compute)


def host_collective_spans(trace: RankTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, steps) of the rank's host-side collectives (gloo's ``gloo:*`` spans): the
    communication the temporal and overlap breakdowns count beside the GPU work."""
    host = np.flatnonzero(trace.host_collectives())
    return trace.ts[host], trace.ts[host] + trace.dur[host], trace.iteration[host]


@dataclass(frozen=True)
class StepUnions:
    """The merged intervals of each step's GPU work (work belongs to the step of the launch that
    enqueued it; step -1 is work outside any ProfilerStep): of all of it and of each class in
    CLASSES (by position), one group per step of ``steps`` (ascending, those with GPU work)."""

    steps: np.ndarray
    busy: Segments
    by_class: tuple[Segments, ...]


def gpu_work_step_unions(trace: RankTrace) -> StepUnions:
    """:class:`StepUnions` of the rank's :func:`gpu_work`, memoised: the temporal, kernel-type and
    overlap breakdowns per step all measure them, merged once for all steps together."""
    def compute() -> StepUnions:
        rows, starts, ends, _ = gpu_work(trace)
        classes = gpu_work_classes(trace)
        step, steps = sorted_codes(trace.iteration[rows])  # np.unique's, through a presence table
        n = len(steps)
        by_class = tuple(segment_union(step[mine], n, starts[mine], ends[mine])
                         for mine in (classes == bit for bit in range(len(CLASSES))))
        return StepUnions(steps, segment_union(step, n, starts, ends), by_class)

    return trace.memo("gpu_work_step_unions", compute)


def gpu_work_classes(trace: RankTrace) -> np.ndarray:
    """Per :func:`gpu_work` row: the position of its class in CLASSES (-1 for OTHER).

    Memoised: the breakdowns select classes with integer compares instead of comparing
    class-name strings element by element.
    """
    return trace.memo("gpu_work_classes", lambda: _CLASS_POSITION[trace.gpu_class()[gpu_work(trace)[0]]])


def gpu_work_names(trace: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """:func:`string_keys` of the :func:`gpu_work` kernel names (per row: the rank of its name
    among them; the names sorted), memoised: kernel_metrics and kernel_rank_distribution group
    by them."""
    def compute() -> tuple[np.ndarray, np.ndarray]:
        key, labels = string_keys(trace.name[gpu_work(trace)[0]], trace.strings)
        return _read_only(key, labels)

    return trace.memo("gpu_work_names", compute)


def class_positions(classes: np.ndarray) -> np.ndarray:
    """Position in CLASSES of each class name (-1 for others); integers pass through."""
    if classes.dtype.kind in "iu":
        return classes
    return np.select([classes == cls for cls in CLASSES], np.arange(len(CLASSES)), -1)


def _read_only(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    """The arrays, made read-only: memoised results are shared by every analysis."""
    for a in arrays:
        a.flags.writeable = False
    return arrays


@dataclass(frozen=True)
class WorkUnions:
    """The merged intervals (:func:`~perfreport.analyses.intervals.union`) of a set of GPU work:
    of all of it and of each class in CLASSES (by position). The temporal, kernel-type and
    overlap breakdowns all measure these (a union depends on the intervals only, not on their
    order, so each is merged once)."""

    busy: tuple[np.ndarray, np.ndarray]
    by_class: tuple[tuple[np.ndarray, np.ndarray], ...]

    @classmethod
    def of(cls, starts: np.ndarray, ends: np.ndarray, positions: np.ndarray) -> "WorkUnions":
        return cls(union(starts, ends), tuple(union(starts[positions == bit], ends[positions == bit])
                                              for bit in range(len(CLASSES))))


def gpu_work_unions(trace: RankTrace) -> WorkUnions:
    """:class:`WorkUnions` of the rank's :func:`gpu_work`, memoised: the temporal, kernel-type
    and overlap breakdowns share them (per step: :func:`gpu_work_step_unions`)."""
    def compute() -> WorkUnions:
        _, starts, ends, _ = gpu_work(trace)
        return WorkUnions.of(starts, ends, gpu_work_classes(trace))

    return trace.memo("gpu_work_unions", compute)


def overlap_class_times(starts: np.ndarray, ends: np.ndarray, classes: np.ndarray) -> dict[str, float]:
    """Time (µs) during which exactly each non-empty set of CLASSES runs, by overlap label.

    Each class's intervals are merged, turned into +bit/-bit edges (COMPUTATION 1,
    COMMUNICATION 2, MEMORY 4) and swept in time order; at equal times ends come first, so
    touching intervals create no zero-length overlap. Labels join the classes present with
    " overlapping " (HTA's labels). Only classes with positive time appear. ``classes`` are
    class names or their positions in CLASSES (:func:`class_positions`).
    """
    return class_overlap_times(WorkUnions.of(starts, ends, class_positions(classes)))


def class_overlap_times(unions: WorkUnions) -> dict[str, float]:
    """:func:`overlap_class_times` of work whose class unions are known."""
    times, deltas = [], []
    for bit, (s, e) in enumerate(unions.by_class):
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


def _type_rows(rank: int, unions: WorkUnions, extra: dict) -> list[dict]:
    times = class_overlap_times(unions)
    busy = sum(times.values())
    return [{"rank": rank, **extra, "kernel_type": label, "time_us": t, "busy_pct": 100.0 * t / busy}
            for label, t in sorted(times.items(), key=lambda kv: -kv[1])]


def kernel_type_breakdown(traces: TraceSet) -> pd.DataFrame:
    """Per rank and overlap class: union time (µs) and its % of the rank's GPU busy time."""
    rows = []
    for trace in traces:
        rows += _type_rows(trace.rank, gpu_work_unions(trace), {})
    return pd.DataFrame(rows, columns=list(TYPE_COLUMNS))


def kernel_type_breakdown_per_step(traces: TraceSet) -> pd.DataFrame:
    """:func:`kernel_type_breakdown` per (rank, step); GPU work belongs to its launch's step.

    All steps at once (:func:`~perfreport.analyses.segments.overlap_times`); each step's rows
    in the per-rank order: the longest overlap class first, ties in label order."""
    frames = [_step_type_rows(trace.rank, gpu_work_step_unions(trace)) for trace in traces]
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame([], columns=["rank", "step", *TYPE_COLUMNS[1:]])
    return pd.concat(frames, ignore_index=True)


def _step_type_rows(rank: int, unions: StepUnions) -> pd.DataFrame:
    times = overlap_times(list(unions.by_class))
    busy = np.zeros(len(times))
    for mask in range(1, times.shape[1]):  # the per-rank sum's order: labels ascending, from 0
        busy += times[:, mask]
    step, mask = np.nonzero(times > 0)
    t = times[step, mask]
    order = np.lexsort((mask, -t, step))
    step, mask, t = step[order], mask[order], t[order]
    labels = np.array([_label(m) for m in range(times.shape[1])], dtype=object)
    return pd.DataFrame({"rank": np.full(len(t), rank, dtype=np.int64), "step": unions.steps[step].astype(np.int64),
                         "kernel_type": labels[mask], "time_us": t, "busy_pct": 100.0 * t / busy[step]})


def _statistics_columns(stats: pd.DataFrame) -> pd.DataFrame:
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


def _metric_rows(rank: int, names: tuple[np.ndarray, np.ndarray], durations: np.ndarray, classes: np.ndarray,
                 num_kernels: int, duration_ratio: float) -> list[pd.DataFrame]:
    """Statistics per class and name (``names``: :func:`string_keys` of the rows' names), the
    small names folded.

    All classes are aggregated by one groupby on an integer (class, name) key that sorts as
    the (class position, name string) pairs do; each group holds the same rows in the same
    order as a groupby of one class's names, so the statistics are the same numbers.
    """
    cls = class_positions(classes)
    keep = cls >= 0
    key, labels = names
    cls, key, durations = cls[keep], key[keep], durations[keep]
    if not len(cls):
        return []
    pairs = Grouped({"pair": cls * len(labels) + key, "dur": durations}, ["pair"])
    totals = pd.Series(pairs.sum("dur"), index=pairs.frame({})["pair"].to_numpy())  # per (class, name)
    group = totals.index.to_numpy()
    folded = key.copy()
    for c in sorted_unique(cls):  # a loop over the classes: fold each one's small names into "others"
        of_class = totals[(group // len(labels)) == c]
        if len(of_class) > num_kernels:
            of_class.index = of_class.index.to_numpy() % len(labels)
            kept = np.array(sorted(top_names(of_class, num_kernels, duration_ratio)), dtype=np.int64)
            small = (cls == c) & ~np.isin(key, kept)
            folded[small] = len(labels)
    key, labels = string_keys(folded, np.append(labels, OTHERS))
    g = Grouped({"pair": cls * len(labels) + key, "dur": durations.astype(np.float64)}, ["pair"])
    pair = g.frame({})["pair"].to_numpy()
    stats = pd.DataFrame({
        "rank": rank, "kernel_class": np.array(CLASSES, dtype=object)[pair // len(labels)],
        "name": labels[pair % len(labels)], "count": g.count("dur"), "sum": g.sum("dur"), "max": g.max("dur"),
        "min": g.min("dur"), "mean": g.mean("dur"), "std": g.std("dur"),
    })
    return [_statistics_columns(stats)]


def kernel_metrics(traces: TraceSet, num_kernels: int = DEFAULT_NUM_KERNELS,
                   duration_ratio: float = DEFAULT_DURATION_RATIO) -> pd.DataFrame:
    """Per rank, kernel class and kernel name (top-N, rest as "others"): duration statistics."""
    parts = []
    for trace in traces:
        rows = gpu_work(trace)[0]
        parts += _metric_rows(trace.rank, gpu_work_names(trace), trace.dur[rows], gpu_work_classes(trace),
                              num_kernels, duration_ratio)
    if not parts:
        return pd.DataFrame(columns=list(METRIC_COLUMNS))
    df = pd.concat(parts, ignore_index=True)
    df["others_last"] = df["name"] == OTHERS
    df = df.sort_values(["rank", "kernel_class", "others_last", "sum_us"], ascending=[True, True, True, False],
                        kind="stable")
    return df[list(METRIC_COLUMNS)].reset_index(drop=True)


def _class_name_totals(trace: RankTrace) -> pd.DataFrame | None:
    """Per (kernel_class, name) of the :func:`gpu_work`, sorted: sum and count of the
    durations, and the rank; None for a rank without GPU work.

    Grouped on integer keys that sort as the (class, name) strings do (:func:`string_keys`).
    Memoised: a small per-rank summary, what a worker process sends for the cross-rank spread.
    """
    return trace.memo("class_name_totals", lambda: _compute_class_name_totals(trace))


def _compute_class_name_totals(trace: RankTrace) -> pd.DataFrame | None:
    rows = gpu_work(trace)[0]
    if not len(rows):
        return None
    cls_key, cls_labels = string_keys(trace.gpu_class()[rows], KERNEL_CLASS_NAMES)
    name_key, name_labels = gpu_work_names(trace)
    key = cls_key.astype(np.int64) * len(name_labels) + name_key
    g = Grouped({"pair": key, "dur": trace.dur[rows]}, ["pair"])
    pair = g.frame({})["pair"].to_numpy()
    return pd.DataFrame({"kernel_class": cls_labels[pair // len(name_labels)],
                         "name": name_labels[pair % len(name_labels)], "sum": g.sum("dur"), "count": g.count("dur"),
                         "rank": trace.rank})


def _by_rank(parts: list[pd.DataFrame], ranks: list[int]) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """([kernel_class, name], sums, counts): the per-rank totals of :func:`_class_name_totals`
    as (kernel, rank) matrices, kernels sorted by (class, name), ranks in ``ranks`` order, 0
    where a rank never runs the kernel (a pivot table, built with numpy)."""
    long = {c: np.concatenate([p[c].to_numpy() for p in parts]) for c in ("kernel_class", "name", "rank")}
    cls_labels, cls_key = np.unique(long["kernel_class"].astype(object), return_inverse=True)
    name_labels, name_key = np.unique(long["name"].astype(object), return_inverse=True)
    pair, row = np.unique(cls_key.ravel() * len(name_labels) + name_key.ravel(), return_inverse=True)
    col = np.searchsorted(ranks, long["rank"])
    sums = np.zeros((len(pair), len(ranks)))
    counts = np.zeros((len(pair), len(ranks)), dtype=np.int64)
    sums[row.ravel(), col] = np.concatenate([p["sum"].to_numpy() for p in parts])
    counts[row.ravel(), col] = np.concatenate([p["count"].to_numpy() for p in parts])
    return [cls_labels[pair // len(name_labels)], name_labels[pair % len(name_labels)]], sums, counts


def kernel_rank_distribution(traces: TraceSet) -> pd.DataFrame:
    """Per kernel class and name (every kernel, no folding): spread of its total over ranks.

    A rank that never runs the kernel counts as 0 µs, so an imbalance shows in min/std.
    """
    parts = [p for trace in traces if (p := _class_name_totals(trace)) is not None]
    if not parts:
        return pd.DataFrame(columns=list(DISTRIBUTION_COLUMNS))
    all_ranks = sorted(r for r in traces.rank_ids)
    labels, values, counts = _by_rank(parts, all_ranks)
    out = pd.DataFrame({
        "kernel_class": labels[0],
        "name": labels[1],
        "ranks": (counts > 0).sum(axis=1),
        "sum_us_mean": values.mean(axis=1),
        "sum_us_min": values.min(axis=1),
        "sum_us_max": values.max(axis=1),
        "sum_us_std": values.std(axis=1, ddof=1) if values.shape[1] > 1 else np.zeros(len(values)),
        "min_rank": np.asarray(all_ranks)[values.argmin(axis=1)],
        "max_rank": np.asarray(all_ranks)[values.argmax(axis=1)],
        "count_mean": counts.astype(np.float64).mean(axis=1),
    })
    out = out.sort_values(["kernel_class", "sum_us_mean"], ascending=[True, False], kind="stable")
    return out[list(DISTRIBUTION_COLUMNS)].reset_index(drop=True)
