"""Kernel launch statistics: how long each launch call took on the CPU, how long its GPU work
ran, and how long the GPU op waited after the call returned; and aten-op -> launch delays.

A *launch* is a runtime/driver call that enqueues GPU work (``RankTrace.launches()``):
``cudaLaunchKernel``, ``cuLaunchKernel`` (Triton), ``cudaGraphLaunch`` (one call, many kernels),
``cudaMemcpyAsync``/``cudaMemsetAsync`` and their HIP equivalents. Its GPU ops are the kernels,
memcpys and memsets whose ``RankTrace.linked`` row is the call.

Definitions (all µs):

* ``cpu_dur_us``: duration of the launch call;
* ``gpu_dur_us``: summed duration of its GPU ops; ``gpu_span_us``: first op start to last op end
  (they differ only for graph launches);
* ``launch_delay_us``: first GPU op start minus the end of the call, clipped at 0 (a kernel that
  starts while the call is still returning did not wait);
* flags, given ``runtime_cutoff_us`` and ``launch_delay_cutoff_us``: ``short_kernel`` (the GPU
  work is shorter than the call that launched it, and the call is not itself an outlier),
  ``runtime_outlier`` (call longer than the cutoff), ``launch_delay_outlier`` (delay longer than
  the cutoff).

A launch without GPU ops in the trace (the op fell outside the profiling window) has
``gpu_ops`` 0, NaN times and no flags. Empty traces give empty tables with the same columns.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import RankTrace, TraceSet, distinct_codes, search_sorted
from .grouping import Grouped, run_ids, string_keys, value_order
from .nesting import _nest
from .ordering import span_order

RUNTIME_CUTOFF_US = 50.0
"""HTA's default: a launch call longer than this is a runtime outlier."""
LAUNCH_DELAY_CUTOFF_US = 100.0
"""HTA's default: a GPU op starting this long after its launch returned is a delay outlier."""

LAUNCH_COLUMNS = (
    "rank", "iteration", "row", "correlation", "launch", "stream", "cpu_start_us", "cpu_dur_us", "gpu_ops",
    "gpu_start_us", "gpu_dur_us", "gpu_span_us", "launch_delay_us", "short_kernel", "runtime_outlier",
    "launch_delay_outlier",
)


def last_at_or_before(values: np.ndarray, pos: np.ndarray, threshold: np.ndarray, *,
                      use_c: bool | None = None) -> np.ndarray:
    """For each query q, the largest j <= pos[q] with values[j] >= threshold[q]; -1 if none.

    A search in a max segment tree, all queries at once: O(n + queries · log n), no loop over
    queries. The C extension, when built, answers instead by jumping from ``pos[q]`` to the
    previous larger value (on nested spans: to the enclosing one), a few jumps per query; a
    query still open after :data:`_MAX_JUMPS` goes to the tree. ``use_c`` forces one path
    (tests). Used to find the latest-starting interval that still covers a point: with
    intervals sorted by start and ``pos`` the last one starting at or before the point,
    ``values`` = ends and ``threshold`` = the point's end. "values[j] >= threshold" reads as
    "not values[j] < threshold", so a NaN value or threshold counts as a match.

    >>> last_at_or_before(np.array([5., 1., 9., 2.]), np.array([3, 3, 1]), np.array([3., 9.5, 0.]))
    array([ 2, -1,  1])
    """
    pos = np.ascontiguousarray(pos, dtype=np.int64)
    threshold = np.ascontiguousarray(threshold, dtype=np.float64)
    out = np.full(len(pos), -1, dtype=np.int64)
    if len(values) == 0 or len(pos) == 0:
        return out
    values = np.ascontiguousarray(values, dtype=np.float64)
    if use_c is not False and hasattr(_nest, "last_at_or_before"):  # an older build lacks it
        _nest.last_at_or_before(values, pos, threshold, out, _MAX_JUMPS)
        left = np.flatnonzero(out == -2)  # a long climb: the tree settles those
        if len(left):
            out[left] = last_at_or_before(values, pos[left], threshold[left], use_c=False)
        return out
    tree, size = _max_tree(values)
    q = np.flatnonzero(pos >= 0)
    node, thr = size + pos[q], threshold[q]
    found = ~(tree[node] < thr)
    # climb: the nearest subtree left of the current range whose maximum matches
    climbing = np.flatnonzero(~found & (node > 1))
    while len(climbing):
        nd = node[climbing]
        right_child = (nd & 1) == 1
        hit = right_child & ~(tree[nd - right_child] < thr[climbing])
        node[climbing] = np.where(hit, nd - 1, nd >> 1)
        found[climbing] = hit
        climbing = climbing[~hit & ((nd >> 1) > 1)]
    # descend in that subtree to its last matching leaf
    falling = np.flatnonzero(found & (node < size))
    while len(falling):
        right = 2 * node[falling] + 1
        node[falling] = np.where(~(tree[right] < thr[falling]), right, right - 1)
        falling = falling[node[falling] < size]
    out[q[found]] = node[found] - size
    return out


_MAX_JUMPS = 64
"""Jumps the C search makes for one query before leaving it to the segment tree (bounds its
worst case, a long run of decreasing values, at O(queries · 64))."""


def _max_tree(values: np.ndarray) -> tuple[np.ndarray, int]:
    """(tree, size): a max segment tree over ``values``; leaves at ``size + i``, node k covers
    its children 2k and 2k + 1; padding leaves are -inf (never searched: they lie right of
    every query)."""
    size = 1 << max(0, (len(values) - 1).bit_length())
    tree = np.full(2 * size, -np.inf)
    tree[size:size + len(values)] = values
    width = size
    while width > 1:
        tree[width // 2:width] = np.maximum(tree[width:2 * width:2], tree[width + 1:2 * width:2])
        width //= 2
    return tree, size


def launch_gpu_ops(trace: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """(launch rows, GPU op rows linked to one of them): the GPU work each launch enqueued.

    Memoised on the trace (launch, queue and aten-op analyses share it); read-only arrays.
    """
    return trace.memo("launch_gpu_ops", lambda: _launch_gpu_ops(trace))


def _launch_gpu_ops(trace: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    launch_rows = np.flatnonzero(trace.launches())
    gpu_rows = trace.gpu_work_rows()
    gpu_rows = gpu_rows[trace.linked[gpu_rows] >= 0]
    gpu_rows = gpu_rows[trace.launches()[trace.linked[gpu_rows]]]
    launch_rows.flags.writeable = gpu_rows.flags.writeable = False
    return launch_rows, gpu_rows


def rank_launches(trace: RankTrace, runtime_cutoff_us: float = RUNTIME_CUTOFF_US,
                  launch_delay_cutoff_us: float = LAUNCH_DELAY_CUTOFF_US) -> pd.DataFrame:
    """One row per launch call of one rank (see the module docstring for the columns).

    Memoised per trace and cutoffs (the summaries per name and per step share it); each call
    gets its own (shallow, copy-on-write) frame.
    """
    key = ("launch_table", float(runtime_cutoff_us), float(launch_delay_cutoff_us))
    return trace.memo(key, lambda: _rank_launches(trace, runtime_cutoff_us, launch_delay_cutoff_us)).copy(deep=False)


def _rank_launches(trace: RankTrace, runtime_cutoff_us: float, launch_delay_cutoff_us: float) -> pd.DataFrame:
    launch_rows, gpu_rows = launch_gpu_ops(trace)
    n = len(launch_rows)
    owner = search_sorted(launch_rows, trace.linked[gpu_rows])  # each GPU op's launch, a launch row (ascending)
    g_start = trace.ts[gpu_rows]
    g_dur = trace.dur[gpu_rows]
    ops = np.bincount(owner, minlength=n)
    dur_sum = np.bincount(owner, weights=g_dur, minlength=n)
    first = np.full(n, np.inf)
    np.minimum.at(first, owner, g_start)
    last_end = np.full(n, -np.inf)
    np.maximum.at(last_end, owner, g_start + g_dur)
    # stream of the first GPU op of each launch
    order = np.lexsort((g_start, owner))
    head = order[np.r_[True, owner[order][1:] != owner[order][:-1]]] if len(order) else order
    stream = np.full(n, -1, dtype=np.int64)
    stream[owner[head]] = trace.arg("stream", -1, gpu_rows[head])
    has = ops > 0
    cpu_start = trace.ts[launch_rows]
    cpu_dur = trace.dur[launch_rows]
    gpu_start = np.where(has, first, np.nan)
    gpu_dur = np.where(has, dur_sum, np.nan)
    delay = np.maximum(gpu_start - (cpu_start + cpu_dur), 0.0)
    with np.errstate(invalid="ignore"):
        short = has & (cpu_dur <= runtime_cutoff_us) & (gpu_dur < cpu_dur)
        runtime_outlier = cpu_dur > runtime_cutoff_us
        delay_outlier = has & (delay > launch_delay_cutoff_us)
    return pd.DataFrame({
        "rank": np.full(n, trace.rank, dtype=np.int64),
        "iteration": trace.iteration[launch_rows],
        "row": launch_rows,
        "correlation": trace.arg("correlation", -1, launch_rows),
        "launch": trace.decode(trace.name[launch_rows]).astype(object),
        "stream": stream,
        "cpu_start_us": cpu_start,
        "cpu_dur_us": cpu_dur,
        "gpu_ops": ops,
        "gpu_start_us": gpu_start,
        "gpu_dur_us": gpu_dur,
        "gpu_span_us": np.where(has, last_end - first, np.nan),
        "launch_delay_us": delay,
        "short_kernel": short,
        "runtime_outlier": runtime_outlier,
        "launch_delay_outlier": delay_outlier,
    }, columns=list(LAUNCH_COLUMNS), copy=False)  # fresh arrays: no copy into 2-D blocks


def launches(traces: TraceSet, runtime_cutoff_us: float = RUNTIME_CUTOFF_US,
             launch_delay_cutoff_us: float = LAUNCH_DELAY_CUTOFF_US) -> pd.DataFrame:
    """One row per launch call, all ranks (see the module docstring). Computed once per trace
    set and cutoffs (the summaries per name and per step share it); each call gets its own
    (shallow, copy-on-write) frame."""
    def compute() -> pd.DataFrame:
        frames = [rank_launches(t, runtime_cutoff_us, launch_delay_cutoff_us) for t in traces]
        frames = [f for f in frames if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else rank_launches_empty()

    return traces.memo(("launch_table", float(runtime_cutoff_us), float(launch_delay_cutoff_us)), compute).copy(deep=False)


def rank_launches_empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c == "launch" else bool if c.endswith(("kernel", "outlier"))
                                      else np.float64 if c.endswith("_us") else np.int64) for c in LAUNCH_COLUMNS})


SUMMARY_COLUMNS = (
    "launches", "gpu_ops", "cpu_dur_mean_us", "cpu_dur_p50_us", "cpu_dur_p95_us", "gpu_dur_mean_us",
    "launch_delay_mean_us", "launch_delay_p50_us", "launch_delay_p95_us", "launch_delay_max_us",
    "short_kernels", "runtime_outliers", "launch_delay_outliers",
)


def _summarise(table: pd.DataFrame, keys: list[str], value_orders: dict | None = None,
               coded: dict[str, np.ndarray] | None = None) -> pd.DataFrame:
    """Per group of ``keys``: the summary columns. ``coded``: per key column, integers that group
    and order as its values do, grouped on instead (the key's values are still what is shown)."""
    if not len(table):
        return pd.DataFrame(columns=keys + list(SUMMARY_COLUMNS))
    g = Grouped({**{c: table[c] for c in table.columns}, **(coded or {})}, keys, value_orders)
    out = g.frame({
        "launches": g.size(),
        "gpu_ops": g.sum("gpu_ops"),
        "cpu_dur_mean_us": g.mean("cpu_dur_us"),
        "cpu_dur_p50_us": g.median("cpu_dur_us"),
        "cpu_dur_p95_us": g.quantile("cpu_dur_us", 0.95),
        "gpu_dur_mean_us": g.mean("gpu_dur_us"),
        "launch_delay_mean_us": g.mean("launch_delay_us"),
        "launch_delay_p50_us": g.median("launch_delay_us"),
        "launch_delay_p95_us": g.quantile("launch_delay_us", 0.95),
        "launch_delay_max_us": g.max("launch_delay_us"),
        "short_kernels": g.sum("short_kernel"),
        "runtime_outliers": g.sum("runtime_outlier"),
        "launch_delay_outliers": g.sum("launch_delay_outlier"),
    })
    for k in coded or {}:
        out[k] = table[k].to_numpy()[g.first]
    return out


def launch_summary(traces: TraceSet) -> pd.DataFrame:
    """Per (rank, launch call name): count, CPU/GPU durations, launch-delay statistics (µs)
    and how many launches each flag marks (default cutoffs 50 µs / 100 µs)."""
    return _summarise(launches(traces), ["rank", "launch"], _value_orders(traces),
                      {"launch": _launch_name_keys(traces)})


def launch_summary_by_step(traces: TraceSet) -> pd.DataFrame:
    """:func:`launch_summary` per (rank, profiler step) over all launch names; step -1 holds
    launches outside any ProfilerStep."""
    return _summarise(launches(traces), ["rank", "iteration"], _value_orders(traces))


def _launch_name_keys(traces: TraceSet) -> np.ndarray:
    """Per row of :func:`launches`: an integer that groups and orders as its ``launch`` name
    does. Each rank's names are decoded once per distinct name code and sorted once over all
    ranks, instead of hashing a string per launch."""
    labels, inverses = [], []
    for t in traces:  # the ranks :func:`launches` holds rows of, in its order
        rows = launch_gpu_ops(t)[0]
        if len(rows):
            uniq, inverse = distinct_codes(t.name[rows], len(t.strings))
            labels.append(t.decode(uniq))
            inverses.append(inverse)
    if not labels:
        return np.empty(0, dtype=np.int64)
    _, key = np.unique(np.concatenate(labels), return_inverse=True)
    key = key.ravel()
    offsets = np.cumsum([0] + [len(lab) for lab in labels])
    return np.concatenate([key[lo:hi][inverse] for lo, hi, inverse in zip(offsets[:-1], offsets[1:], inverses)])


def _value_orders(traces: TraceSet) -> dict[str, np.ndarray]:
    """The launch table's CPU durations and launch delays sorted once (:func:`value_order`),
    shared by its summaries per name and per step (memoised on the trace set)."""
    def compute() -> dict[str, np.ndarray]:
        table = launches(traces)
        return {c: value_order(table[c].to_numpy()) for c in ("cpu_dur_us", "launch_delay_us")}

    return traces.memo("launch_value_orders", compute)


# --- aten op -> kernel launch delays ---------------------------------------------------------
ATEN_PREFIX = "aten::"

ATEN_INSTANCE_COLUMNS = (
    "rank", "iteration", "tid", "aten_op", "aten_start_us", "launches", "kernel_sequence",
    "aten_op_delay_us", "runtime_delay_us",
)


def join_runs(codes: np.ndarray, table, starts: np.ndarray, sep: str = " -> ") -> np.ndarray:
    """Object array: for each run ``codes[starts[i]:starts[i+1]]``, its strings (``table[code]``)
    joined by ``sep``. Each distinct string is decorated once; the joins are whole-array
    object additions (no fixed-width unicode copies of long kernel names).

    >>> join_runs(np.array([0, 1, 1, 0]), ["a", "b"], np.array([0, 1])).tolist()
    ['a', 'b -> b -> a']
    """
    if not len(codes):
        return np.empty(0, dtype=object)
    uniq, inverse = distinct_codes(codes, len(table))
    plain = np.array([table[c] for c in uniq.tolist()] + [""], dtype=object)[:-1]
    with_sep = np.array([sep + table[c] for c in uniq.tolist()] + [""], dtype=object)[:-1]
    first = np.zeros(len(codes), dtype=bool)
    first[starts] = True
    pieces = np.where(first, plain[inverse], with_sep[inverse])
    return np.add.reduceat(pieces, starts)


def rank_aten_op_launches(trace: RankTrace) -> pd.DataFrame:
    """One row per aten op instance that launched GPU work directly, for one rank.

    The launching op of a launch call is the innermost ``aten::*`` op on the same thread whose
    span covers the call (latest start; on equal starts the shorter one). ``kernel_sequence``
    is the names of the GPU ops of its launches in launch order, joined by " -> ";
    ``aten_op_delay_us`` = first launch start - op start; ``runtime_delay_us`` = first GPU op
    start - first launch start (for its first launch).

    Memoised on the trace (the per-op and per-step delay tables share it); each call gets its
    own (shallow, copy-on-write) frame.
    """
    return _aten_instances(trace)[0].copy(deep=False)


def _aten_instances(trace: RankTrace) -> tuple[pd.DataFrame, np.ndarray]:
    """(:func:`rank_aten_op_launches` table, per row an integer key that groups and sorts as
    the (aten_op, kernel_sequence) strings do), memoised on the trace."""
    return trace.memo("aten_op_launches", lambda: _build_aten_instances(trace))


def _build_aten_instances(trace: RankTrace) -> tuple[pd.DataFrame, np.ndarray]:
    empty = (pd.DataFrame(columns=list(ATEN_INSTANCE_COLUMNS)), np.empty(0, dtype=np.int64))
    launch_rows, gpu_rows = launch_gpu_ops(trace)
    aten_codes = trace.codes_where(lambda s: s.startswith(ATEN_PREFIX), no_step_names=True)
    aten = np.flatnonzero(trace.name_in(aten_codes))
    aten = aten[trace.complete[aten] & np.isfinite(trace.dur[aten])]
    if not len(aten) or not len(launch_rows) or not len(gpu_rows):
        return empty
    a_tid, a_ts, a_end = trace.tid_at(aten), trace.ts[aten], trace.ts[aten] + trace.dur[aten]
    order = span_order(a_tid, a_ts, -a_end)  # by thread, start; on equal starts outer first
    aten, a_tid, a_ts, a_end = aten[order], a_tid[order], a_ts[order], a_end[order]
    # GPU ops in launch order, each with the aten op that covers its launch
    g_launch = trace.linked[gpu_rows]
    g_order = np.lexsort((trace.ts[gpu_rows], g_launch, trace.ts[g_launch]))  # launch time, launch, op time
    gpu_rows, g_launch = gpu_rows[g_order], g_launch[g_order]
    l_tid, l_ts, l_end = trace.tid_at(g_launch), trace.ts[g_launch], trace.ts[g_launch] + trace.dur[g_launch]
    pos = _last_key_at_or_before(a_tid, a_ts, l_tid, l_ts)
    found = last_at_or_before(a_end, pos, l_end)
    ok = found >= 0
    ok[ok] = a_tid[found[ok]] == l_tid[ok]
    if not ok.any():
        return empty
    op = aten[found[ok]]
    gpu_rows, g_launch = gpu_rows[ok], g_launch[ok]
    # group = aten op instance; rows are already in launch order within an op (stable sort)
    grp_order = np.argsort(op, kind="stable")
    op, gpu_rows, g_launch = op[grp_order], gpu_rows[grp_order], g_launch[grp_order]
    starts = np.flatnonzero(np.r_[True, op[1:] != op[:-1]])
    sequences, seq_key = _kernel_sequences(trace.name[gpu_rows], trace.strings, starts)
    first_launch = g_launch[starts]
    heads = op[starts]
    n_launches = np.add.reduceat(np.r_[True, g_launch[1:] != g_launch[:-1]].astype(np.int64), starts)
    op_key = string_keys(trace.name[heads], trace.strings)[0]
    key = op_key * (int(seq_key.max()) + 1) + seq_key
    key.flags.writeable = False
    table = pd.DataFrame({
        "rank": np.full(len(heads), trace.rank, dtype=np.int64),
        "iteration": trace.iteration[heads],
        "tid": trace.tid_at(heads),
        "aten_op": trace.decode(trace.name[heads]).astype(object),
        "aten_start_us": trace.ts[heads],
        "launches": n_launches,
        "kernel_sequence": sequences.astype(object),
        "aten_op_delay_us": trace.ts[first_launch] - trace.ts[heads],
        "runtime_delay_us": trace.ts[gpu_rows[starts]] - trace.ts[first_launch],
    }, columns=list(ATEN_INSTANCE_COLUMNS), copy=False)  # fresh arrays: no copy into 2-D blocks
    return table, key


def _kernel_sequences(codes: np.ndarray, table: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(text, key) of each run ``codes[starts[i]:starts[i+1]]``: its names joined by " -> "
    (:func:`join_runs`) and an integer that groups and sorts as that text does.

    Equal runs are found on the codes (:func:`run_ids`), so each distinct sequence is joined
    and compared as text once instead of once per aten op instance.
    """
    ids, first = run_ids(codes, starts)
    lengths = np.diff(np.append(starts, len(codes)))[first]
    rep_starts = np.cumsum(lengths) - lengths
    gather = np.repeat(starts[first] - rep_starts, lengths) + np.arange(int(lengths.sum()))
    texts = join_runs(codes[gather], table, rep_starts)
    _, text_key = np.unique(texts, return_inverse=True)  # distinct runs may still join to one text
    return texts[ids], text_key.ravel()[ids]


def _last_key_at_or_before(key_sorted: np.ndarray, ts_sorted: np.ndarray, key: np.ndarray,
                           ts: np.ndarray, *, use_c: bool | None = None) -> np.ndarray:
    """Position of the last pair <= (key[q], ts[q]) among (key, ts) pairs sorted
    lexicographically; -1 if none. A query whose key is absent gets -1 too (the caller
    rejects an answer from another key's pairs by comparing keys).

    One ``searchsorted`` per distinct key (thread) on its slice of ``ts_sorted``: a loop over
    keys, not over queries. The C extension, when built, keeps a cursor per key instead (the
    launches come in time order: a few steps each); ``use_c`` forces one path (tests).
    """
    out = np.full(len(key), -1, dtype=np.int64)
    if not len(key_sorted) or not len(key):
        return out
    if use_c is not False and hasattr(_nest, "last_key_at_or_before"):  # an older build lacks it
        if _nest.last_key_at_or_before(*(np.ascontiguousarray(a, dtype=d) for a, d in (
                (key_sorted, np.int64), (ts_sorted, np.float64), (key, np.int64), (ts, np.float64))), out):
            return out
    lo = np.flatnonzero(np.r_[True, key_sorted[1:] != key_sorted[:-1]])
    hi = np.append(lo[1:], len(key_sorted))
    block = np.clip(np.searchsorted(key_sorted[lo], key), 0, len(lo) - 1)
    present = key_sorted[lo][block] == key
    queries = np.flatnonzero(present)
    queries = queries[np.argsort(block[queries], kind="stable")]
    q_bounds = np.searchsorted(block[queries], np.arange(len(lo) + 1))
    for b in np.flatnonzero(np.diff(q_bounds)):  # a loop over the keys that have queries
        q = queries[q_bounds[b]:q_bounds[b + 1]]
        out[q] = lo[b] + np.searchsorted(ts_sorted[lo[b]:hi[b]], ts[q], side="right") - 1
    return out


def aten_op_launches(traces: TraceSet) -> pd.DataFrame:
    """:func:`rank_aten_op_launches` for all ranks."""
    frames = [f for f in (rank_aten_op_launches(t) for t in traces) if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(ATEN_INSTANCE_COLUMNS))


def aten_op_launch_delays(traces: TraceSet) -> pd.DataFrame:
    """Per (rank, aten op, kernel sequence): occurrences and the mean/median delay from the op
    start to its first launch and from that launch to its first GPU op (µs)."""
    cols = ["rank", "aten_op", "kernel_sequence", "occurrences", "aten_op_delay_mean_us", "aten_op_delay_p50_us",
            "runtime_delay_mean_us", "runtime_delay_p50_us"]
    parts = [_rank_delays(*_aten_instances(t)) for t in traces]
    parts = [p for p in parts if len(p)]
    if not parts:
        return pd.DataFrame(columns=cols)
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(["rank", "occurrences"], ascending=[True, False], kind="stable", ignore_index=True)[cols]


def _rank_delays(table: pd.DataFrame, key: np.ndarray) -> pd.DataFrame:
    """One rank's rows of :func:`aten_op_launch_delays`, sorted by (aten op, kernel sequence):
    grouped on the integer ``key`` of :func:`_aten_instances`, which orders as the strings do."""
    if not len(table):
        return table
    g = Grouped(table[["aten_op_delay_us", "runtime_delay_us"]].assign(key=key), ["key"])
    labels = table[["rank", "aten_op", "kernel_sequence"]].iloc[g.first].reset_index(drop=True)
    return labels.assign(
        occurrences=g.size(),
        aten_op_delay_mean_us=g.mean("aten_op_delay_us"),
        aten_op_delay_p50_us=g.median("aten_op_delay_us"),
        runtime_delay_mean_us=g.mean("runtime_delay_us"),
        runtime_delay_p50_us=g.median("runtime_delay_us"),
    )


def aten_op_launch_delays_by_step(traces: TraceSet) -> pd.DataFrame:
    """Per (rank, profiler step): aten op instances that launched GPU work, and the mean
    delays (µs) from op start to first launch and from that launch to its GPU op."""
    table = aten_op_launches(traces)
    cols = ["rank", "iteration", "aten_ops", "aten_op_delay_mean_us", "runtime_delay_mean_us"]
    if not len(table):
        return pd.DataFrame(columns=cols)
    g = Grouped(table, ["rank", "iteration"])
    return g.frame({
        "aten_ops": g.size(),
        "aten_op_delay_mean_us": g.mean("aten_op_delay_us"),
        "runtime_delay_mean_us": g.mean("runtime_delay_us"),
    })[cols]
