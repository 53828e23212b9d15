"""CPU edges of the critical-path graph: HTA 0.5.0's call-stack walk, vectorised.

HTA 0.5.0 builds one call stack per CPU thread with its *older* ``hta.common.call_stack``
(the newer one made cycles, HTA issue #113) and walks it depth first:

* A thread is a (pid, tid) group of the clipped frame; groups with a stream > 0 are GPU and
  skipped, and so is a group unless all its streams are < 0.
* The stack is built by sweeping start and end points ordered by time; at equal times ends
  come before starts, longer events open first and shorter ones close first, index breaks
  ties. A start is a child of the event on top of the stack; an end pops the top of the stack
  (whatever event it is), so partly overlapping events nest under the earlier one.
* The walk visits events in that order (enter at a start, exit at the pop). Only events with
  graph nodes (cpu_op / cuda_runtime / cuda_driver rows; not user annotations or python
  functions) take part; their nesting depth counts only such events:
  - entering a top-level event: a 0-weight DEPENDENCY edge from the previous top-level end;
  - entering a nested event: an OPERATOR edge from the previous node (start of the parent or
    end of the previous sibling);
  - exiting: an OPERATOR edge from the previous node to the end (weight 0 for blocking calls).
  OPERATOR edges are attributed to the source event when the source is a start, to the
  destination when both are ends, and to the parent (in the full stack) of the source event
  when an end leads to a start.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .cp_types import DEPENDENCY, NO_EVENT, OPERATOR, EdgeList


def _last_start_before(start_pos: np.ndarray, start_depth: np.ndarray, pos: np.ndarray,
                       depth: np.ndarray, size: int) -> np.ndarray:
    """For each query (pos, depth): the latest start position < pos opened at ``depth``."""
    stride = size + 1
    keys = start_depth * stride + start_pos
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    found = np.searchsorted(sorted_keys, depth * stride + pos, side="left") - 1
    return start_pos[order[found]]


def _sweep(group: np.ndarray, ts: np.ndarray, dur: np.ndarray, index: np.ndarray):
    """Sorted sweep of start/end points: (row of each point, is_start, popped row, parent row).

    ``popped`` gives, for an end point, the row the stack pops there; ``parent`` gives, for a
    start point, the row on top of the stack (-1 at top level). Every group's starts and ends
    balance, so one running sum over all groups is the stack size within each group.
    """
    n = len(ts)
    rows = np.arange(n)
    dur = np.maximum(dur, 0)
    p_row = np.concatenate([rows, rows])
    p_start = np.concatenate([np.ones(n, bool), np.zeros(n, bool)])
    p_time = np.concatenate([ts, ts + dur]).astype(np.float64)
    p_dur = np.concatenate([dur, dur]).astype(np.float64)
    p_idx = np.concatenate([index, index])
    # HTA's compare_events as a sort key: (time, end before start, start: longer first then
    # lower index; end: shorter first then higher index). All clipped CPU events have dur > 0,
    # where this is the comparator's exact total order.
    k_dur = np.where(p_start, -p_dur, p_dur)
    k_idx = np.where(p_start, p_idx, -p_idx)
    order = np.lexsort((k_idx, k_dur, p_start, p_time, group[p_row]))
    p_row, p_start = p_row[order], p_start[order]
    delta = np.where(p_start, 1, -1)
    level_before = np.cumsum(delta) - delta
    size = 2 * n
    start_pos = np.flatnonzero(p_start)
    start_depth = level_before[start_pos]
    end_pos = np.flatnonzero(~p_start)
    popped = np.full(size, -1)
    popped[end_pos] = p_row[_last_start_before(start_pos, start_depth, end_pos,
                                               level_before[end_pos] - 1, size)]
    parent = np.full(n, -1)
    nested = start_depth > 0
    parent_pos = _last_start_before(start_pos, start_depth, start_pos[nested], start_depth[nested] - 1, size)
    parent[p_row[start_pos[nested]]] = p_row[parent_pos]
    visit_row = np.where(p_start, p_row, popped)
    return visit_row, p_start, parent


def cpu_thread_groups(frame: pd.DataFrame) -> np.ndarray:
    """Group number (pandas' sorted (pid, tid) order) of each row in a CPU thread, else -1."""
    if len(frame) == 0:
        return np.zeros(0, dtype=np.int64)
    group = frame.groupby(["pid", "tid"], sort=True).ngroup().to_numpy()
    stream = frame["stream"].to_numpy()
    n_groups = group.max() + 1
    any_gpu = np.bincount(group, weights=stream > 0, minlength=n_groups) > 0
    all_cpu = np.bincount(group, weights=stream >= 0, minlength=n_groups) == 0
    cpu = ~any_gpu & all_cpu
    return np.where(cpu[group], group, -1)


def call_stack_edges(frame: pd.DataFrame, is_node: np.ndarray, blocking: np.ndarray,
                     start_node: np.ndarray, end_node: np.ndarray) -> EdgeList:
    """The CPU edges in HTA's insertion order (threads in (pid, tid) order, walk order within).

    ``frame`` is the clipped frame; ``is_node``/``blocking``/``start_node``/``end_node`` are
    per-row arrays (node ids are -1 for rows without nodes).
    """
    group_all = cpu_thread_groups(frame)
    rows = np.flatnonzero(group_all >= 0)
    if len(rows) == 0:
        return EdgeList.empty()
    ts = frame["ts"].to_numpy()[rows]
    dur = frame["dur"].to_numpy()[rows]
    index = frame["index"].to_numpy()[rows]
    group = group_all[rows]
    visit, entering, parent = _sweep(group, ts, dur, index)

    keep = is_node[rows][visit]
    visit, entering = visit[keep], entering[keep]
    if len(visit) == 0:
        return EdgeList.empty()
    vgroup = group[visit]
    delta = np.where(entering, 1, -1)
    depth_before = np.cumsum(delta) - delta
    has_prev = np.zeros(len(visit), bool)
    has_prev[1:] = vgroup[1:] == vgroup[:-1]
    prev = np.concatenate([[0], visit[:-1]])
    prev_entering = np.concatenate([[False], entering[:-1]])

    g_start = start_node[rows]
    g_end = end_node[rows]
    parent_index = np.where(parent >= 0, index[np.maximum(parent, 0)], -1)
    prev_node = np.where(prev_entering, g_start[prev], g_end[prev])

    dependency = entering & (depth_before == 0) & has_prev
    nested_enter = entering & (depth_before > 0)
    exiting = ~entering
    src = np.where(dependency, g_end[prev], prev_node)
    dst = np.where(entering, g_start[visit], g_end[visit])
    etype = np.where(dependency, DEPENDENCY, OPERATOR)
    zero = exiting & blocking[rows][visit]
    attr = np.where(prev_entering, index[prev], np.where(entering, parent_index[prev], index[visit]))
    attr = np.where(dependency, NO_EVENT, attr)
    take = dependency | nested_enter | exiting
    return EdgeList(src[take], dst[take], etype[take], attr[take], zero[take])
