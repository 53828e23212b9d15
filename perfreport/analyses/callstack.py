"""Call-stack nesting of CPU events and the GPU work under each of them.

:func:`call_stack` nests each rank's CPU events per (pid, tid) thread with
:func:`perfreport.analyses.nesting.nest` (the sweep and its tie rules live there) and hangs
GPU events (kernels, memcpy, memset) under the CPU launch that enqueued them
(``RankTrace.linked``). The tree helpers here work on the resulting parent/depth arrays level
by level (a loop over depth levels, never over events): :func:`kernel_totals` sums GPU work up
the tree, :func:`topmost_match` finds outermost matching ancestors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..model import CPU_OP_CATEGORIES, GPU_SIDE_CATEGORIES, RankTrace, TraceSet, narrow
from .grouping import Grouped, string_keys
from .nesting import NO_PARENT, _nest, nest_rows, stable_order, thread_ids

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


class Levels(list):
    """Node positions grouped by depth, deepest first (a list of arrays), and ``order``: the
    same positions as one array (the groups are views of it), for the one-loop passes of the
    C extension."""

    def __init__(self, groups: list[np.ndarray], order: np.ndarray):
        super().__init__(groups)
        self.order = order


def levels(depth: np.ndarray) -> Levels:
    """Node positions grouped by depth, deepest first (for bottom-up passes); each group in
    ascending position. A counting sort in C when the extension is built: int32 positions for
    an int32 depth (the call stack's: :func:`tree_ints`), else int64."""
    if hasattr(_nest, "level_order") and depth.dtype in _tree_dtypes() and len(depth):
        counts = np.zeros(max(int(depth.max()), -1) + 1, dtype=np.int64)
        order = np.empty(len(depth), dtype=depth.dtype)
        order = order[:_nest.level_order(np.ascontiguousarray(depth), counts, order)]
        return Levels(np.split(order, np.cumsum(counts[::-1])[:-1]) if len(order) else [], order)
    nodes = np.flatnonzero(depth >= 0)
    if len(nodes) == 0:
        return Levels([], nodes)
    order = nodes[stable_order(-depth[nodes])]
    d = depth[order]
    cuts = np.flatnonzero(d[1:] != d[:-1]) + 1
    return Levels(np.split(order, cuts), order)


def subtree_reduce(parent: np.ndarray, depth: np.ndarray, values: np.ndarray, ufunc) -> np.ndarray:
    """``ufunc`` (np.add / np.minimum / np.maximum) of ``values`` over each node's subtree."""
    return reduce_levels(parent, levels(depth), values, ufunc)


def _in_one_loop(by_level: list[np.ndarray], parent: np.ndarray) -> np.ndarray | None:
    """The nodes in level order as one array when the C extension can do the pass."""
    order = getattr(by_level, "order", None)
    if not hasattr(_nest, "tree_sum") or order is None or parent.dtype not in _tree_dtypes() \
            or order.dtype not in _tree_dtypes():  # an older build lacks it, or takes int64 only
        return None
    return np.ascontiguousarray(order)


def tree_ints(n: int) -> type:
    """The integers of a call stack of ``n`` events (its parents and depths, the positions of its
    levels): int32 where the rows fit and the C extension takes them, half the bytes of the
    int64 ones, held through a rank's analyses (the V100-grown 200 MB rank's 1 M events: 16 MB
    of parents and depths, 8 MB of level positions); else int64."""
    return np.int32 if n < np.iinfo(np.int32).max and np.dtype(np.int32) in _tree_dtypes() else np.int64


def _tree_dtypes() -> tuple[np.dtype, ...]:
    """The integer dtypes the C tree passes take: int32 and int64 from the build that added the
    first (``INT32_TREES``), int64 before."""
    return (np.dtype(np.int32), np.dtype(np.int64)) if getattr(_nest, "INT32_TREES", 0) else (np.dtype(np.int64),)


def reduce_levels(parent: np.ndarray, by_level: list[np.ndarray], values: np.ndarray, ufunc) -> np.ndarray:
    """:func:`subtree_reduce` given the :func:`levels` (deepest first), so that several
    reductions over one tree group its nodes by depth only once. A sum over :class:`Levels`
    is one loop in C when the extension is built (the same additions in the same order)."""
    order = _in_one_loop(by_level, parent) if ufunc is np.add and values.dtype in (np.float64, np.int64) else None
    if order is not None:
        acc = np.array(values)  # a contiguous copy
        _nest.tree_sum(order, np.ascontiguousarray(parent), acc, acc.dtype == np.int64)
        return acc
    acc = values.copy()
    for lv in by_level:
        p = parent[lv]
        ok = p >= 0
        ufunc.at(acc, p[ok], acc[lv[ok]])
    return acc


def topmost_match(parent: np.ndarray, by_level: list[np.ndarray], matches: np.ndarray) -> np.ndarray:
    """Per node: the outermost node on its path to the root, itself included, where
    ``matches`` holds; -1 if none. ``by_level`` is :func:`levels` (deepest first).

    One top-down pass over the depth levels (children inherit their parent's answer), so the
    cost is one visit per node whatever the depth. A matching node whose answer is itself is
    an *outermost* match (no matching ancestor).
    """
    top = _self_where(matches)
    order = _in_one_loop(by_level, parent)
    if order is not None:
        _nest.tree_inherit(order, np.ascontiguousarray(parent), top, False)
        return top
    for lv in reversed(by_level):  # shallowest first: a parent's answer is final before its children
        p = parent[lv]
        ok = p >= 0
        child, inherited = lv[ok], top[p[ok]]
        has = inherited >= 0
        top[child[has]] = inherited[has]
    return top


def nearest_match(parent: np.ndarray, by_level: list[np.ndarray], matches: np.ndarray) -> np.ndarray:
    """Per node: the innermost node on its path to the root, itself included, where ``matches``
    holds; -1 if none (the counterpart of :func:`topmost_match`, one top-down pass as well)."""
    near = _self_where(matches)
    order = _in_one_loop(by_level, parent)
    if order is not None:
        _nest.tree_inherit(order, np.ascontiguousarray(parent), near, True)
        return near
    for lv in reversed(by_level):  # shallowest first: a parent's answer is final before its children
        p = parent[lv]
        take = (near[lv] < 0) & (p >= 0)
        near[lv[take]] = near[p[take]]
    return near


def _self_where(matches: np.ndarray) -> np.ndarray:
    """Per node: itself where ``matches`` holds, else -1 (``np.where(matches, np.arange(n), -1)``
    without a temporary over every event)."""
    out = np.full(len(matches), -1, dtype=np.int64)
    rows = np.flatnonzero(matches)
    out[rows] = rows
    return out


def roots_of(top: np.ndarray) -> np.ndarray:
    """Rows that are their own answer in a :func:`topmost_match` result (``top[i] == i``):
    the outermost matches, ascending."""
    return np.flatnonzero(top == np.arange(len(top)))  # one comparison per row, no gathers


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
    parent = np.full(n, NO_PARENT, dtype=tree_ints(n))
    depth = np.full(n, -1, dtype=tree_ints(n))
    # threads told apart by their id codes (one code per distinct id): the same groups as the
    # ids themselves, without gathering two int64 id columns (0.1 s per GB of trace)
    nest_rows(thread_ids(trace.pid_code[rows], trace.tid_code[rows]), rows, trace.ts, trace.dur, parent, depth)
    gpu = np.flatnonzero(trace.gpu_activity() & (trace.linked >= 0))
    launch = trace.linked[gpu]
    launch_depth = depth[launch]
    in_tree = launch_depth >= 0  # launched from a CPU event of the tree
    gpu, launch = gpu[in_tree], launch[in_tree]
    parent[gpu] = launch
    depth[gpu] = launch_depth[in_tree] + 1
    return CallStack(parent=parent, depth=depth, is_node=depth >= 0)


def stack_levels(trace: RankTrace) -> list[np.ndarray]:
    """:func:`levels` of the rank's :func:`call_stack`, memoised: shared by every pass over it."""
    return trace.memo("call_stack_levels", lambda: levels(call_stack(trace).depth))


def outermost_ops(trace: RankTrace) -> np.ndarray:
    """Per event: its outermost enclosing CPU operator (``cpu_op``, itself included), -1 if
    none (see :func:`topmost_match`). Memoised: op_kernels, kernel_sequences and the op–kernel
    efficiency table share it.

    A ``ProfilerStep#N`` span is the step, not an operator, although 2021 traces record it as
    one (category ``Operator``; later ones as a ``user_annotation``): it owns nothing, and the
    operators below it are outermost, as in a trace of any other version. Otherwise a 2021
    trace's whole forward pass was one "operator" per step, and the kernel sequences a pattern
    per step (a 1 GB trace of 12,307 steps: 12,307 patterns of 4.5 KB each, 56 MB of its
    report.json). Held as int32 where the rows fit (:func:`~perfreport.model.narrow`): it is
    held through most of a rank's analyses, beside the call stack, at their peak."""
    def compute() -> np.ndarray:
        stack = call_stack(trace)
        return narrow(topmost_match(stack.parent, stack_levels(trace), cpu_ops(trace, stack) & operators(trace)))

    return trace.memo("outermost_cpu_ops", compute)


def operators(trace: RankTrace) -> np.ndarray:
    """Per event, whether it is a CPU operator that owns what runs below it: a ``cpu_op`` that is
    not a ``ProfilerStep#N`` span (2021 traces file the step under ``Operator``; it is the step).
    The one rule of :func:`outermost_ops` and of the memory events' owners."""
    return trace.is_cat(CPU_OP_CATEGORIES) & ~trace.steps()


def cpu_ops(trace: RankTrace, stack: CallStack) -> np.ndarray:
    """CPU operators (``cpu_op`` events) that are nodes of the call stack."""
    return trace.complete & trace.is_cat(CPU_OP_CATEGORIES) & stack.is_node


def subtree_gpu_work(trace: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """(num_kernels, kernel_dur_sum_us) per event over the rank's :func:`call_stack`: the two
    columns of :func:`kernel_totals` that op_kernels and kernel_sequences use, memoised and
    computed alone (no first/last reductions, no frame); the counts held as int32 where they fit,
    as :func:`outermost_ops` is."""
    def compute() -> tuple[np.ndarray, np.ndarray]:
        stack = call_stack(trace)
        gpu, dur = _gpu_nodes(trace, stack)
        by_level = stack_levels(trace)
        order = _in_one_loop(by_level, stack.parent)
        if order is not None and hasattr(_nest, "tree_sum2"):  # both sums in one loop over the tree
            count, total = gpu.astype(np.int64), dur
            _nest.tree_sum2(order, np.ascontiguousarray(stack.parent), count, total)
        else:
            count = reduce_levels(stack.parent, by_level, gpu.astype(np.int64), np.add)
            total = reduce_levels(stack.parent, by_level, dur, np.add)
        count = narrow(count)
        count.flags.writeable = total.flags.writeable = False
        return count, total

    return trace.memo("subtree_gpu_work", compute)


def _gpu_nodes(trace: RankTrace, stack: CallStack) -> tuple[np.ndarray, np.ndarray]:
    """(GPU work in the tree, its duration: 0 elsewhere and for a missing duration)."""
    gpu = stack.is_node & trace.gpu_activity()
    dur = np.zeros(trace.n_events)
    rows = np.flatnonzero(gpu)
    dur[rows] = np.nan_to_num(trace.dur[rows])
    return gpu, dur


def kernel_totals(trace: RankTrace, stack: CallStack) -> pd.DataFrame:
    """Per event: GPU work in its subtree (a GPU event counts itself).

    Columns (one row per event, index = row): ``num_kernels`` (GPU events: kernels, memcpy,
    memset), ``kernel_dur_sum_us``, ``first_kernel_start_us``, ``last_kernel_end_us`` (NaN
    without GPU work) and ``kernel_span_us`` (last end - first start, 0 without GPU work).
    """
    n = trace.n_events
    gpu, dur = _gpu_nodes(trace, stack)
    by_level = levels(stack.depth)
    count = reduce_levels(stack.parent, by_level, gpu.astype(np.int64), np.add)
    total = reduce_levels(stack.parent, by_level, dur, np.add)
    first = reduce_levels(stack.parent, by_level, np.where(gpu, trace.ts, np.inf), np.minimum)
    last = reduce_levels(stack.parent, by_level, np.where(gpu, trace.ts + dur, -np.inf), np.maximum)
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
    ``aten::addmm`` is counted once, as ``aten::linear``; a 2021 trace's ``ProfilerStep#N`` span is
    the step, not an operator: :func:`outermost_ops`), so the GPU times add up to the GPU
    work launched from operators. Columns: rank, name, calls, cpu_dur_us, num_kernels,
    kernel_dur_sum_us (µs). Empty when no rank has CPU operators.
    """
    frames = []
    for t in traces:
        num_kernels, kernel_dur = subtree_gpu_work(t)
        rows = roots_of(outermost_ops(t))
        if len(rows) == 0:
            continue
        key, labels = string_keys(t.name[rows], t.strings)  # groups as the names do, without hashing them
        g = Grouped({"key": key}, ["key"])
        frames.append(pd.DataFrame({"rank": t.rank, "name": labels[key[g.first]], "calls": g.size(),
                                    "cpu_dur_us": g.sum(t.dur[rows]), "num_kernels": g.sum(num_kernels[rows]),
                                    "kernel_dur_sum_us": g.sum(kernel_dur[rows])}))
    cols = ["rank", "name", "calls", "cpu_dur_us", "num_kernels", "kernel_dur_sum_us"]
    if not frames:
        return pd.DataFrame(columns=cols)
    return pd.concat(frames, ignore_index=True)[cols]
