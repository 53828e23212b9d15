"""Call-stack nesting of CPU events and the GPU work under each of them.

Kineto writes every CPU event (operator, annotation, runtime call) as a flat ``[ts, ts+dur)``
span on its thread; the call stack is implied by containment. :func:`call_stack` recovers it
per (pid, tid) with one sort and a stack sweep done in numpy: the sweep order is a sort key,
and the parent of an event is found from the running stack height with ``searchsorted``, so
there is no Python loop over events. GPU events (kernels, memcpy, memset) hang under the CPU
launch that enqueued them (``RankTrace.linked``); :func:`kernel_totals` sums them up the tree
level by level (a loop over depth levels, never over events).

Sweep order at one instant (the rules HTA's call stack uses, written as a sort key):

* an event that ends at t closes before one that starts at t opens (back-to-back siblings);
* of events opening together the longer is outer; of events closing together the shorter
  (inner) closes first; equal spans nest in file order;
* a zero-duration event at t opens after events opening at t and closes before events closing
  at t, so it is a child of the innermost event touching t. When one event ends and another
  starts at that instant, file order decides: written before the starting event, it belongs
  to the ending one (Kineto writes a thread's ops in start order, callers first). HTA's
  comparator has no answer there (it is cyclic) and its sort then mis-nests siblings.
  Zero-duration events at the same instant nest in file order.

A close always pops the newest open event, so spans that overlap without nesting (rare on one
thread) are treated as if the later one were a child of the earlier one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..model import GPU_SIDE_CATEGORIES, RankTrace, TraceSet

NO_PARENT = -1


def sweep_order(group: np.ndarray, start: np.ndarray, dur: np.ndarray,
                row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The stack sweep over intervals: (event position, is_open) for each of the 2·n points.

    ``group`` separates threads (points of different groups never interleave), ``start``/
    ``dur`` are the spans (dur ≥ 0), ``row`` breaks ties (file order). Positions index the
    input arrays. See the module docstring for the order at equal times.
    """
    n = len(start)
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, bool)
    pos = np.arange(n, dtype=np.int64)
    ev = np.concatenate([pos, pos])
    is_open = np.concatenate([np.ones(n, bool), np.zeros(n, bool)])
    zero = np.concatenate([dur == 0, dur == 0])
    time = np.concatenate([start, start + dur])
    grp = np.concatenate([group, group])
    d = np.concatenate([dur, dur])
    r = np.concatenate([row, row]).astype(np.float64)
    # which kinds of points share each (group, time): positive opens / positive closes
    t_order = np.lexsort((time, grp))
    ts_sorted, g_sorted = time[t_order], grp[t_order]
    new = np.ones(len(ev), bool)
    new[1:] = (ts_sorted[1:] != ts_sorted[:-1]) | (g_sorted[1:] != g_sorted[:-1])
    bucket = np.empty(len(ev), np.int64)
    bucket[t_order] = np.cumsum(new) - 1
    n_buckets = int(bucket.max()) + 1
    pos_open = is_open & ~zero
    has_open = np.bincount(bucket, weights=pos_open, minlength=n_buckets) > 0
    has_close = np.bincount(bucket, weights=(~is_open & ~zero), minlength=n_buckets) > 0
    both = (has_open & has_close)[bucket]
    first_open_row = np.full(n_buckets, np.inf)
    np.minimum.at(first_open_row, bucket[pos_open], r[pos_open])
    zero_before = r < first_open_row[bucket]  # a zero-length event written before the opening one
    # class rank within an instant: positive closes, positive opens, zero-duration points
    cls = np.where(zero, np.where(both, np.where(zero_before, -1, 3), 1),
                   np.where(is_open, np.where(both, 2, 0), np.where(both, 0, 2)))
    # within a class: opens longer first then file order; closes shorter first then reverse
    # file order; zero points: all opens (file order) before all closes (reverse file order)
    sub1 = np.where(zero, np.where(is_open, 0.0, 1.0), np.where(is_open, -d, d))
    sub2 = np.where(is_open, r, -r)
    order = np.lexsort((sub2, sub1, cls, time, grp))
    return ev[order], is_open[order]


def parents_from_sweep(ev: np.ndarray, is_open: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(parent position or -1, depth) of the n events of a balanced sweep.

    The stack height before an open is the event's depth; its parent is the newest earlier
    open one level up (the top of the stack), found by ``searchsorted`` on (level, position).
    """
    parent = np.full(n, NO_PARENT, dtype=np.int64)
    depth = np.full(n, -1, dtype=np.int64)
    if len(ev) == 0:
        return parent, depth
    step = np.where(is_open, 1, -1)
    level = np.cumsum(step) - step  # height before each point
    opens = np.flatnonzero(is_open)
    lvl = level[opens]
    span = len(ev) + 1
    keys = lvl * span + opens
    order = np.argsort(keys, kind="stable")
    keys_sorted = keys[order]
    q = np.searchsorted(keys_sorted, (lvl - 1) * span + opens) - 1
    found = (lvl > 0) & (q >= 0)
    q = np.clip(q, 0, None)
    found &= lvl[order][q] == lvl - 1
    par_point = opens[order][q]
    parent[ev[opens[found]]] = ev[par_point[found]]
    depth[ev[opens]] = lvl
    return parent, depth


def tree_depth(parent: np.ndarray) -> np.ndarray:
    """Depth of every node of a forest given by parent positions (-1 = root, depth 0).

    Pointer doubling: log2(depth) whole-array passes. Raises ValueError on a cycle.
    """
    n = len(parent)
    anc = parent.copy()
    dist = np.where(parent >= 0, 1, 0).astype(np.int64)
    for _ in range(max(1, int(np.ceil(np.log2(n + 1))) + 2)):
        live = anc >= 0
        if not live.any():
            return dist
        a = anc[live]
        dist[live] += dist[a]
        anc[live] = anc[a]
    raise ValueError("the parent links contain a cycle")


def levels(depth: np.ndarray) -> list[np.ndarray]:
    """Node positions grouped by depth, deepest first (for bottom-up passes)."""
    nodes = np.flatnonzero(depth >= 0)
    if len(nodes) == 0:
        return []
    order = nodes[np.argsort(-depth[nodes], kind="stable")]
    d = depth[order]
    cuts = np.flatnonzero(d[1:] != d[:-1]) + 1
    return np.split(order, cuts)


def subtree_reduce(parent: np.ndarray, depth: np.ndarray, values: np.ndarray, ufunc) -> np.ndarray:
    """``ufunc`` (np.add / np.minimum / np.maximum) of ``values`` over each node's subtree."""
    acc = values.copy()
    for lv in levels(depth):
        p = parent[lv]
        ok = p >= 0
        ufunc.at(acc, p[ok], acc[lv[ok]])
    return acc


def ancestor_at_depth(parent: np.ndarray, depth: np.ndarray, target: int) -> np.ndarray:
    """For each node, its ancestor (or itself) at depth ``target``; -1 if shallower or outside."""
    cur = np.where(depth >= target, np.arange(len(parent)), -1)
    k = np.where(cur >= 0, depth - target, 0)
    jump = parent.copy()
    bit = 0
    while (k >> bit).any():
        take = (cur >= 0) & (((k >> bit) & 1) == 1)
        cur[take] = jump[cur[take]]
        ok = jump >= 0
        nxt = np.full_like(jump, -1)
        nxt[ok] = jump[jump[ok]]
        jump = nxt
        bit += 1
    return cur


def thread_ids(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Dense id of each (pid, tid) pair, numbered in sorted (pid, tid) order."""
    if len(pid) == 0:
        return np.empty(0, np.int64)
    return np.unique(np.stack([pid, tid], axis=1), axis=0, return_inverse=True)[1].ravel().astype(np.int64)


@dataclass(frozen=True, slots=True)
class CallStack:
    """Nesting of one rank: arrays over all events (row = event of the RankTrace).

    ``parent``: row of the enclosing CPU event (for a GPU event: its launch), -1 for top-level
    CPU events and for events outside the tree. ``depth``: 0 for top-level CPU events, -1
    outside the tree. ``is_node``: CPU events and linked GPU events.
    """

    parent: np.ndarray
    depth: np.ndarray
    is_node: np.ndarray


def cpu_events(trace: RankTrace) -> np.ndarray:
    """Complete CPU-side events with a duration: what the call stack is built from."""
    return trace.complete & ~trace.is_cat(GPU_SIDE_CATEGORIES) & np.isfinite(trace.dur) & np.isfinite(trace.ts)


def call_stack(trace: RankTrace) -> CallStack:
    """Nest CPU events per (pid, tid) and attach GPU activity to its launch (see module doc).

    Computed once per trace (memoised on it): several analyses share it.
    """
    return trace.memo("call_stack", lambda: _build_call_stack(trace))


def _build_call_stack(trace: RankTrace) -> CallStack:
    n = trace.n_events
    rows = np.flatnonzero(cpu_events(trace))
    gid = thread_ids(trace.pid[rows], trace.tid[rows])
    ev, is_open = sweep_order(gid, trace.ts[rows], np.maximum(trace.dur[rows], 0.0), rows)
    par, dep = parents_from_sweep(ev, is_open, len(rows))
    parent = np.full(n, NO_PARENT, dtype=np.int64)
    depth = np.full(n, -1, dtype=np.int64)
    is_node = np.zeros(n, bool)
    parent[rows] = np.where(par >= 0, rows[np.clip(par, 0, None)], NO_PARENT)
    depth[rows] = dep
    is_node[rows] = True
    gpu = np.flatnonzero(trace.gpu_activity() & (trace.linked >= 0))
    gpu = gpu[is_node[trace.linked[gpu]]]
    parent[gpu] = trace.linked[gpu]
    depth[gpu] = depth[trace.linked[gpu]] + 1
    is_node[gpu] = True
    return CallStack(parent=parent, depth=depth, is_node=is_node)


def kernel_totals(trace: RankTrace, stack: CallStack) -> pd.DataFrame:
    """Per event: GPU work in its subtree (a GPU event counts itself).

    Columns (one row per event, index = row): ``num_kernels`` (GPU events: kernels, memcpy,
    memset), ``kernel_dur_sum_us``, ``first_kernel_start_us``, ``last_kernel_end_us`` (NaN
    without GPU work) and ``kernel_span_us`` (last end - first start, 0 without GPU work).
    """
    n = trace.n_events
    gpu = stack.is_node & trace.gpu_activity()
    dur = np.where(gpu, np.nan_to_num(trace.dur), 0.0)
    count = subtree_reduce(stack.parent, stack.depth, gpu.astype(np.int64), np.add)
    total = subtree_reduce(stack.parent, stack.depth, dur, np.add)
    first = subtree_reduce(stack.parent, stack.depth, np.where(gpu, trace.ts, np.inf), np.minimum)
    last = subtree_reduce(stack.parent, stack.depth, np.where(gpu, trace.ts + dur, -np.inf), np.maximum)
    has = count > 0
    return pd.DataFrame({
        "num_kernels": count,
        "kernel_dur_sum_us": total,
        "first_kernel_start_us": np.where(has, first, np.nan),
        "last_kernel_end_us": np.where(has, last, np.nan),
        "kernel_span_us": np.where(has, last - first, 0.0),
    }, index=pd.RangeIndex(n))


def op_kernels(traces: TraceSet) -> pd.DataFrame:
    """Per (rank, CPU operator name): calls, CPU time and the GPU work launched under them.

    Only ``cpu_op`` events that have no ``cpu_op`` ancestor count (an ``aten::linear`` calling
    ``aten::addmm`` is counted once, as ``aten::linear``), so the GPU times add up to the GPU
    work launched from operators. Columns: rank, name, calls, cpu_dur_us, num_kernels,
    kernel_dur_sum_us (µs). Empty when no rank has CPU operators.
    """
    frames = []
    for t in traces:
        stack = call_stack(t)
        tot = kernel_totals(t, stack)
        ops = t.complete & t.is_cat(("cpu_op", "Operator")) & stack.is_node
        # an op is outermost if no ancestor is an op: walk up level by level
        outer = ops.copy()
        anc = stack.parent.copy()
        while (anc >= 0).any():
            live = anc >= 0
            outer[live & ops] &= ~ops[anc[live & ops]]
            anc[live] = stack.parent[anc[live]]
        rows = np.flatnonzero(outer)
        if len(rows) == 0:
            continue
        f = pd.DataFrame({"rank": t.rank, "name": t.decode(t.name[rows]), "calls": 1, "cpu_dur_us": t.dur[rows],
                          "num_kernels": tot["num_kernels"].to_numpy()[rows],
                          "kernel_dur_sum_us": tot["kernel_dur_sum_us"].to_numpy()[rows]})
        frames.append(f.groupby(["rank", "name"], as_index=False, sort=True).sum())
    cols = ["rank", "name", "calls", "cpu_dur_us", "num_kernels", "kernel_dur_sum_us"]
    if not frames:
        return pd.DataFrame(columns=cols)
    return pd.concat(frames, ignore_index=True)[cols]
