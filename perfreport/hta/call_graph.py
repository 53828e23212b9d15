"""HTA 0.5.0's call graph (``hta.common.trace_call_graph.CallGraph``) over one rank's HTA frame.

HTA builds one call stack per (pid, tid) with a Python sort and an event-by-event stack walk,
then writes eight columns into the rank's frame: ``depth``, ``height``, ``parent``,
``num_kernels``, ``kernel_dur_sum``, ``kernel_span``, ``first_kernel_start``,
``last_kernel_end``. Here the same tree comes from the numpy sweep of
:mod:`perfreport.analyses.callstack` with HTA's choices applied:

* threads whose rows are all on GPU streams, or whose pid or tid is 0 throughout, are skipped;
  only rows with ``stream == -1`` are nested; ties are broken by the raw event ``index``;
* a top-level op's ``parent`` is HTA's per-thread root id, ``-abs(tid)``;
* kernels (stream > 0) hang under the row ``index_correlation`` points to, when that row is
  on a nested thread;
* the backward thread (ops named ``autograd::…``) is linked to the main thread (the one with
  ``ProfilerStep#`` rows): its top-level ops that fall inside a ``## backward ##`` annotation
  (else inside a ``ProfilerStep#`` row) are re-parented under it;
* ``depth`` counts from 0 at the top level; ``height`` is 0 for kernels and
  max(1, max child height + 1) for CPU ops; the kernel columns total every GPU row in the
  subtree (a kernel counts itself); rows outside the graph keep -1 / 0 defaults.

Deviations (docs/hta-differences.md):

* HTA raises "Unexpected case" on negative durations (HTA issue #254); the frame clamps them
  to 0, so the graph is built.
* HTA's event comparator is cyclic when one op ends, another starts and a zero-duration op
  lies at the same instant; its sort then returns an order that depends on the input order and
  can open the next op inside the ending one, after which every close pops the wrong op
  (cudagraph trace: unsqueeze 869 nested in unsqueeze 867, a 1 µs ``aten::item`` ending up
  the parent of 606 ops). Here the file order places the zero-duration op (see
  :mod:`perfreport.analyses.callstack`).
* ``parent`` is not wrapped: on a repeated call HTA casts it to the int8 dtype of the previous
  call's ``height`` column (1154 becomes -126).
* ``end`` is ts + dur in trace time (HTA 0.5.0 left it unshifted on some traces, which made
  kernel_span and last_kernel_end absolute times).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..analyses.callstack import ancestor_at_depth, levels, subtree_reduce, tree_depth
from ..analyses.nesting import nest
from ._frame import SymbolTable

log = logging.getLogger(__name__)

CALL_STACK_COLUMNS = ["depth", "height", "parent", "num_kernels", "kernel_dur_sum", "kernel_span",
                      "first_kernel_start", "last_kernel_end"]
BWD_ANNOTATION = "## backward ##"
MAIN_MARK = "ProfilerStep#"
BWD_MARK = "autograd::"


@dataclass
class HtaCallGraph:
    """The call tree of one rank frame, by row position (0..len(frame)-1).

    ``parent``: position of the parent row, -1 for top-level ops and rows outside the graph;
    ``depth``/``height``: HTA's values (-1 outside); ``is_node``: rows in the graph;
    ``is_gpu``: kernel nodes; ``thread``: (pid, tid) group number of each row.
    """

    frame: pd.DataFrame
    parent: np.ndarray
    depth: np.ndarray
    height: np.ndarray
    is_node: np.ndarray
    is_gpu: np.ndarray
    thread: np.ndarray

    def subtree_members(self, roots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(member positions, position of the root each belongs to) for the given roots.

        A root's subtree holds the root itself, every CPU op below it and their kernels.
        """
        members, owners = [], []
        is_root = np.zeros(len(self.parent), bool)
        is_root[roots] = True
        for d in np.unique(self.depth[roots]):
            anc = ancestor_at_depth(self.parent, np.where(self.is_node, self.depth, -1), int(d))
            hit = np.flatnonzero((anc >= 0) & is_root[np.clip(anc, 0, None)] & (self.depth[np.clip(anc, 0, None)] == d))
            members.append(hit)
            owners.append(anc[hit])
        if not members:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(members), np.concatenate(owners)

    def ancestor_pairs(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(k, ancestor position) for each rows[k] and every node on its path to the root,
        the row itself included (a loop over depth levels)."""
        who, anc = [], []
        cur = np.where(self.is_node[rows], rows, -1)
        k = np.arange(len(rows))
        while (cur >= 0).any():
            live = cur >= 0
            who.append(k[live])
            anc.append(cur[live])
            cur = np.where(live, self.parent[np.clip(cur, 0, None)], -1)
        if not who:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        return np.concatenate(who), np.concatenate(anc)


def _thread_groups(frame: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """Group number of each row by (pid, tid), in HTA's groupby order, and the group keys."""
    try:
        g = frame.groupby(["pid", "tid"], sort=True)
        gid = g.ngroup().to_numpy()
    except TypeError:  # pid/tid mixing text and numbers cannot be sorted
        g = frame.groupby(["pid", "tid"], sort=False)
        gid = g.ngroup().to_numpy()
    keys = frame[["pid", "tid"]].groupby(gid, sort=True).first()
    return gid.astype(np.int64), keys


def _all_per_group(gid: np.ndarray, n_groups: int, mask: np.ndarray) -> np.ndarray:
    return np.bincount(gid, weights=mask, minlength=n_groups) == np.bincount(gid, minlength=n_groups)


def _any_per_group(gid: np.ndarray, n_groups: int, mask: np.ndarray) -> np.ndarray:
    return np.bincount(gid, weights=mask, minlength=n_groups) > 0


def build_call_graph(frame: pd.DataFrame, symbols: SymbolTable) -> HtaCallGraph:
    """Build the tree of one rank frame (see the module docstring); the frame is not changed."""
    n = len(frame)
    idx = frame["index"].to_numpy(np.int64)
    stream = frame["stream"].to_numpy(np.int64)
    ts = frame["ts"].to_numpy(np.float64)
    dur = frame["dur"].to_numpy(np.float64)
    end = frame["end"].to_numpy(np.float64)
    names = frame["name"].to_numpy(np.int64)
    gid, keys = _thread_groups(frame)
    n_groups = len(keys)
    gpu_thread = (_all_per_group(gid, n_groups, stream > 0)
                  | _all_per_group(gid, n_groups, frame["pid"].eq(0).to_numpy())
                  | _all_per_group(gid, n_groups, frame["tid"].eq(0).to_numpy()))
    root_id = np.array([-abs(t) if isinstance(t, (int, np.integer)) else -1 for t in keys["tid"]], dtype=np.int64)

    # nest the stream == -1 rows of each CPU thread
    nested = ~gpu_thread[gid] & (stream == -1)
    rows = np.flatnonzero(nested)
    par, dep = nest(gid[rows], ts[rows], np.maximum(dur[rows], 0.0), idx[rows])
    parent = np.full(n, -1, np.int64)
    parent[rows] = np.where(par >= 0, rows[np.clip(par, 0, None)], -1)
    is_node = nested.copy()

    # kernels under their launch
    ic = frame["index_correlation"].to_numpy(np.int64)
    kern = np.flatnonzero((stream > 0) & (ic > 0))
    partner = pd.Index(idx).get_indexer(ic[kern])
    ok = partner >= 0
    ok[ok] = is_node[partner[ok]]
    kern, partner = kern[ok], partner[ok]
    parent[kern] = partner
    is_gpu = np.zeros(n, bool)
    is_gpu[kern] = True
    is_node[kern] = True

    _link_backward_thread(symbols, gid, gpu_thread, root_id, parent, is_node, ts, end, names)

    depth = np.where(is_node, tree_depth(np.where(is_node, parent, -1)), -1)
    height = np.where(is_gpu, 0, np.where(is_node, 1, -1)).astype(np.int64)
    for lv in levels(depth):
        p = parent[lv]
        has = p >= 0
        np.maximum.at(height, p[has], height[lv[has]] + 1)
    return HtaCallGraph(frame=frame, parent=parent, depth=depth, height=height, is_node=is_node,
                        is_gpu=is_gpu, thread=gid)


def _link_backward_thread(symbols: SymbolTable, gid: np.ndarray, gpu_thread: np.ndarray, root_id: np.ndarray,
                          parent: np.ndarray, is_node: np.ndarray, ts: np.ndarray, end: np.ndarray,
                          names: np.ndarray) -> None:
    """Re-parent (in ``parent``) the backward thread's top-level ops under the main thread's
    annotations, in annotation order; when that empties the backward root, HTA carries on
    from the annotation's own root, which we follow (minus self-parenting, which would make
    HTA recurse forever)."""
    table = symbols.sym_table
    main_ids = [i for i, s in enumerate(table) if s.startswith(MAIN_MARK)]
    bwd_ids = [i for i, s in enumerate(table) if BWD_MARK in s]
    n_groups = len(root_id)
    has_main = _any_per_group(gid, n_groups, np.isin(names, main_ids))
    has_bwd = _any_per_group(gid, n_groups, np.isin(names, bwd_ids))
    cpu_groups = np.flatnonzero(~gpu_thread)
    labels = [("main" if has_main[g] else "bwd") for g in cpu_groups if has_main[g] or has_bwd[g]]
    groups = [g for g in cpu_groups if has_main[g] or has_bwd[g]]
    if len(groups) != 2:
        return
    order = sorted(range(2), key=lambda k: labels[k])  # HTA sorts the two stacks by label
    bwd_g, main_g = groups[order[0]], groups[order[1]]
    in_main = gid == main_g
    annotations = np.empty(0, np.int64)
    for prefix in (BWD_ANNOTATION, MAIN_MARK):
        ids = [i for i, s in enumerate(table) if s.startswith(prefix)]
        annotations = np.flatnonzero(in_main & np.isin(names, ids))
        if len(annotations):
            break
    top = is_node & (parent < 0)
    row_root = np.where(top, root_id[gid], 0)
    cur_root = root_id[bwd_g]
    for a in annotations:  # a loop over annotations (one or two per step)
        if not is_node[a]:
            continue
        children = top & (row_root == cur_root) & (parent < 0)
        guarded = children & (ts >= ts[a]) & (end <= end[a])
        guarded[a] = False
        parent[guarded] = a
        top &= ~guarded
        if guarded.any() and not (top & (row_root == cur_root)).any():
            # HTA deletes the emptied root and continues from the root of the annotation
            r = a
            while parent[r] >= 0:
                r = parent[r]
            cur_root = row_root[r]


def add_call_stack_columns(frame: pd.DataFrame, graph: HtaCallGraph) -> None:
    """Write HTA's eight call-stack columns into ``frame`` (in place, as HTA does)."""
    n = len(frame)
    idx = frame["index"].to_numpy(np.int64)
    ts = frame["ts"].to_numpy(np.float64)
    dur = frame["dur"].to_numpy(np.float64)
    end = frame["end"].to_numpy(np.float64)
    parent_col = np.full(n, -1, np.int64)
    inner = graph.is_node & (graph.parent >= 0)
    parent_col[inner] = idx[graph.parent[inner]]
    top = graph.is_node & (graph.parent < 0)
    keys_tid = frame["tid"].to_numpy()
    parent_col[top] = [-abs(t) if isinstance(t, (int, np.integer)) else -1 for t in keys_tid[top]] if top.any() else []
    g = graph.is_gpu
    tree_depth_arr = np.where(graph.is_node, graph.depth, -1)
    count = subtree_reduce(graph.parent, tree_depth_arr, g.astype(np.int64), np.add)
    total = subtree_reduce(graph.parent, tree_depth_arr, np.where(g, dur, 0.0), np.add)
    first = subtree_reduce(graph.parent, tree_depth_arr, np.where(g, ts, np.inf), np.minimum)
    last = subtree_reduce(graph.parent, tree_depth_arr, np.where(g, end, -np.inf), np.maximum)
    has = graph.is_node & (count > 0)
    values = {
        "depth": graph.depth,
        "height": graph.height,
        "parent": parent_col,
        "num_kernels": np.where(has, count, 0),
        "kernel_dur_sum": np.where(has, total, 0.0),
        "kernel_span": np.where(has, last - first, 0.0),
        "first_kernel_start": np.where(has, first, -1.0),
        "last_kernel_end": np.where(has, last, -1.0),
    }
    for col in CALL_STACK_COLUMNS:
        v = values[col]
        frame[col] = pd.to_numeric(pd.Series(v, index=frame.index), downcast="integer") if v.dtype.kind == "i" \
            else pd.Series(v.astype(np.float64), index=frame.index)


def call_graph_for_rank(frame: pd.DataFrame, symbols: SymbolTable) -> HtaCallGraph:
    """Build the rank's graph and write its columns into the frame (HTA's side effect)."""
    graph = build_call_graph(frame, symbols)
    add_call_stack_columns(frame, graph)
    return graph
