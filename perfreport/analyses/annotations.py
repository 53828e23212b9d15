"""GPU user-annotation breakdown: time per ``record_function`` region as seen on the GPU.

PyTorch mirrors each ``record_function`` range onto the GPU timeline as a
``gpu_user_annotation`` span (on the stream, i.e. the pid/tid, of the kernels it covers).
Per rank and annotation name this reports the spans' count and duration statistics (µs),
and the GPU work attributed to the annotation: each kernel/memcpy/memset belongs to the
*innermost* annotation on its pid/tid that overlaps it (the shortest one; nested regions
therefore do not double count), with its invocations and summed duration. A rank without
GPU annotations contributes no rows.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import RankTrace, TraceSet, sorted_unique
from .nesting import thread_ids

GPU_ANNOTATION_CATEGORY = "gpu_user_annotation"
COLUMNS = ("rank", "name", "count", "sum_us", "max_us", "min_us", "mean_us", "std_us", "kernels", "kernel_us")


def innermost_overlapping(k_ts: np.ndarray, k_end: np.ndarray, k_group: np.ndarray,
                          a_ts: np.ndarray, a_end: np.ndarray, a_group: np.ndarray,
                          a_priority: np.ndarray) -> np.ndarray:
    """Index of the highest-priority annotation overlapping each item, -1 if none.

    Item k and annotation a overlap when they share a group (e.g. a pid/tid code) and their
    [ts, end) intervals intersect: k_ts < a_end and a_ts < k_end (a zero-length item counts
    when it lies strictly inside). Per group, items are sorted by start; the items that can
    overlap annotation a form one slice (from the first whose running-max end passes a_ts to
    the last starting before a_end), expanded for all annotations at once, so the work is the
    number of items inside annotations rather than items x annotations.
    """
    best = np.full(len(k_ts), -1, dtype=np.int64)
    best_priority = np.full(len(k_ts), np.iinfo(np.int64).min, dtype=np.int64)
    if len(k_ts) == 0 or len(a_ts) == 0:
        return best
    for group in sorted_unique(a_group):  # loop over groups (streams), not events
        a_sel = np.flatnonzero(a_group == group)
        k_sel = np.flatnonzero(k_group == group)
        if len(k_sel) == 0:
            continue
        k_order = k_sel[np.argsort(k_ts[k_sel], kind="stable")]
        reach = np.maximum.accumulate(k_end[k_order])
        lo = np.searchsorted(reach, a_ts[a_sel], side="right")
        hi = np.searchsorted(k_ts[k_order], a_end[a_sel], side="left")
        counts = np.maximum(hi - lo, 0)
        total = int(counts.sum())
        if total == 0:
            continue
        pair_a = np.repeat(a_sel, counts)
        offsets = np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)
        pair_k = k_order[np.repeat(lo, counts) + offsets]
        hit = (k_ts[pair_k] < a_end[pair_a]) & (a_ts[pair_a] < k_end[pair_k])
        pair_k, pair_a = pair_k[hit], pair_a[hit]
        # highest priority per item: sort pairs by (item, priority) and keep each item's last
        order = np.lexsort((a_priority[pair_a], pair_k))
        pair_k, pair_a = pair_k[order], pair_a[order]
        last = np.ones(len(pair_k), dtype=bool)
        last[:-1] = pair_k[1:] != pair_k[:-1]
        k_last, a_last = pair_k[last], pair_a[last]
        better = a_priority[a_last] > best_priority[k_last]
        best[k_last[better]] = a_last[better]
        best_priority[k_last[better]] = a_priority[a_last[better]]
    return best


def annotated_gpu_work(trace: RankTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(GPU work rows, annotation rows, index into annotation rows of each work row or -1)."""
    work = trace.gpu_work_rows()
    annos = np.flatnonzero(trace.is_cat([GPU_ANNOTATION_CATEGORY]))
    annos = annos[trace.complete[annos] & np.isfinite(trace.dur[annos])]
    if len(annos) == 0:
        return work, annos, np.full(len(work), -1, dtype=np.int64)
    # (pid, tid) groups from the id codes (a code per distinct id): the same groups as the ids
    # themselves, without pandas' tuples of them (28 ms for 90,000 kernels)
    rows = np.concatenate([work, annos])
    codes = thread_ids(trace.pid_code[rows], trace.tid_code[rows])
    a_dur = trace.dur[annos]
    # innermost = shortest; among equal durations the later-starting one (nested inside)
    priority = np.empty(len(annos), dtype=np.int64)
    priority[np.lexsort((trace.ts[annos], -a_dur))] = np.arange(len(annos))
    k_ts, a_ts = trace.ts[work], trace.ts[annos]
    best = innermost_overlapping(k_ts, k_ts + trace.dur[work], codes[:len(work)],
                                 a_ts, a_ts + a_dur, codes[len(work):], priority)
    return work, annos, best


def gpu_user_annotation_breakdown(traces: TraceSet) -> pd.DataFrame:
    """Per rank and GPU annotation name: span statistics and attributed GPU work (µs)."""
    parts = []
    for trace in traces:
        work, annos, best = annotated_gpu_work(trace)
        if len(annos) == 0:
            continue
        names = trace.decode(trace.name[annos])
        spans = pd.DataFrame({"name": names, "dur": trace.dur[annos]}).groupby("name")["dur"]
        stats = spans.agg(count="count", sum_us="sum", max_us="max", min_us="min", mean_us="mean", std_us="std")
        stats["std_us"] = stats["std_us"].fillna(0.0)
        hit = best >= 0
        attributed = pd.DataFrame({"name": names[best[hit]], "dur": trace.dur[work[hit]]}).groupby("name")["dur"]
        stats["kernels"] = attributed.count().reindex(stats.index, fill_value=0).astype(np.int64)
        stats["kernel_us"] = attributed.sum().reindex(stats.index, fill_value=0.0)
        stats = stats.reset_index()
        stats.insert(0, "rank", trace.rank)
        parts.append(stats.sort_values("sum_us", ascending=False, kind="stable"))
    if not parts:
        return pd.DataFrame(columns=list(COLUMNS))
    return pd.concat(parts, ignore_index=True)[list(COLUMNS)]
