"""GPU edges of the critical-path graph (HTA 0.5.0 ``_construct_graph_from_kernels``), vectorised.

HTA walks the clipped frame's GPU rows (stream != -1, or an Event/Context Sync, with
index_correlation >= 0), kernels by start and cuda_sync rows by end, keeping the last kernel
of each stream. Per kernel it adds, in this order:

1. an OPERATOR edge start -> end (attributed to the kernel);
2. a SYNC edge from the end of the kernel a ``Stream Wait Event`` made it wait for (the latest
   such wait processed before it), if that kernel has nodes;
3. a LAUNCH edge runtime start -> kernel start when the stream was idle at the launch (queue
   length 1 after the launch, 0 after the kernel started) and both the stream's previous
   kernel and the waited-for kernel ended before the launch; otherwise a KERNEL_KERNEL edge
   from the stream's previous kernel (attributed to that kernel) when the waited-for kernel,
   if any, ended before that previous kernel.

A cuda_sync row adds SYNC edges into the end of its runtime call: from the last kernel of
every stream seen so far (Context Sync, in the order the streams first appeared), of its
stream (Stream Sync), or from the kernel launched just before the ``cudaEventRecord`` it waits
for (Event Sync). A Stream Wait Event only schedules step 2 for the next launch onto its
stream.

The processing order is computed once, then every rule is a masked array operation; edges
are ordered by (processing position, step) as HTA inserts them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ._frame import SymbolTable
from .cp_sync import launch_table, queue_lengths, quicksort_order, record_previous_launch, wait_next_launch
from .cp_types import KERNEL_KERNEL, LAUNCH, NO_EVENT, OPERATOR, SYNC, EdgeList

log = logging.getLogger(__name__)

SYNC_NAMES = ("Context Sync", "Stream Sync", "Event Sync", "Stream Wait Event")


@dataclass(frozen=True)
class NodeLookup:
    """Node ids by event index for the clipped frame (sorted by index); -1 = no node."""

    index: np.ndarray
    start: np.ndarray
    end: np.ndarray
    node_ts: np.ndarray

    def _pos(self, events) -> tuple[np.ndarray, np.ndarray]:
        """Row of each event in the clipped frame, and whether it is there at all."""
        events = np.asarray(events, dtype=np.int64)
        if len(self.index) == 0:
            return np.zeros(len(events), dtype=np.int64), np.zeros(len(events), bool)
        pos = np.minimum(np.searchsorted(self.index, events), len(self.index) - 1)
        return pos, self.index[pos] == events

    def start_of(self, events) -> np.ndarray:
        pos, ok = self._pos(events)
        return np.where(ok, self.start[pos], -1) if len(self.start) else np.full(len(pos), -1)

    def end_of(self, events) -> np.ndarray:
        pos, ok = self._pos(events)
        return np.where(ok, self.end[pos], -1) if len(self.end) else np.full(len(pos), -1)

    def ts_of(self, nodes: np.ndarray) -> np.ndarray:
        """Time of each node (NaN for -1)."""
        if len(self.node_ts) == 0:
            return np.full(len(nodes), np.nan)
        return np.where(nodes >= 0, self.node_ts[np.maximum(nodes, 0)], np.nan)


def _lookup(frame: pd.DataFrame, column: str, events: np.ndarray, default) -> np.ndarray:
    """``frame[column]`` at event indexes (HTA's ``full_trace_df.<column>[idx]``)."""
    values = frame[column].reindex(events)
    return values.fillna(default).to_numpy()


def _last_kernel_before(k_stream: np.ndarray, k_r: np.ndarray, k_end: np.ndarray,
                        q_stream: np.ndarray, q_r: np.ndarray) -> np.ndarray:
    """End node of the last kernel on ``q_stream`` processed before position ``q_r`` (-1)."""
    out = np.full(len(q_r), -1, dtype=np.int64)
    for s in np.unique(q_stream):  # a handful of streams
        sel = np.flatnonzero(k_stream == s)
        order = sel[np.argsort(k_r[sel])]
        q = np.flatnonzero(q_stream == s)
        found = np.searchsorted(k_r[order], q_r[q]) - 1
        ok = found >= 0
        out[q[ok]] = k_end[order[found[ok]]]
    return out


class _Edges:
    """Edges collected with their HTA insertion key (processing position, step)."""

    def __init__(self) -> None:
        self.parts: list[tuple] = []

    def add(self, key_r, key_step, src, dst, etype, attr=None, zero: bool = False) -> None:
        n = len(src)
        if n == 0:
            return
        attr = np.full(n, NO_EVENT, dtype=np.int64) if attr is None else attr
        self.parts.append((np.broadcast_to(key_r, n), np.broadcast_to(key_step, n), src, dst,
                           np.full(n, etype), attr, np.full(n, zero)))

    def edge_list(self) -> EdgeList:
        if not self.parts:
            return EdgeList.empty()
        cols = [np.concatenate([np.asarray(p[i]) for p in self.parts]) for i in range(7)]
        order = np.lexsort((cols[1], cols[0]))
        return EdgeList(cols[2][order].astype(np.int64), cols[3][order].astype(np.int64),
                        cols[4][order].astype(np.int64), cols[5][order].astype(np.int64),
                        cols[6][order].astype(bool))


@dataclass
class _GpuRows:
    """The GPU rows HTA walks, as arrays, with their processing position ``r``."""

    index: np.ndarray
    runtime: np.ndarray      # index_correlation: the launching / synchronising runtime call
    stream: np.ndarray
    name: np.ndarray
    is_sync: np.ndarray
    prev_launch: np.ndarray  # index of the launch before the awaited cudaEventRecord, or -1
    r: np.ndarray
    launches: pd.DataFrame   # cp_sync.launch_table of the full frame


def _gpu_rows(clipped: pd.DataFrame, full: pd.DataFrame, symbols: SymbolTable, names: dict) -> _GpuRows | None:
    sym = symbols.sym_index
    rows = clipped[((clipped["stream"] != -1) | clipped["name"].isin([names["Event Sync"], names["Context Sync"]]))
                   & (clipped["index_correlation"] >= 0)]
    if len(rows) == 0:
        return None
    launches = launch_table(full, symbols)
    records = record_previous_launch(full, symbols, launches)
    ts, dur = rows["ts"].to_numpy(), rows["dur"].to_numpy()
    if records is None:
        prev_launch = np.full(len(rows), -1, dtype=np.int64)
    else:
        corr = rows["wait_on_cuda_event_record_corr_id"].to_numpy()
        prev_launch = records.reindex(corr).fillna(-1).to_numpy(np.int64)
        # HTA merges the record table in here, then casts every column to int
        ts, dur = ts.astype(np.int64), dur.astype(np.int64)
    is_sync = rows["cat"].to_numpy() == sym.get("cuda_sync", -1)
    # kernels by start, cuda_sync rows by end (a Stream Sync may overlap the memcpy it waits for)
    order = quicksort_order(np.where(is_sync, ts + dur, ts))
    r = np.empty(len(rows), dtype=np.int64)
    r[order] = np.arange(len(rows))
    return _GpuRows(rows["index"].to_numpy(), rows["index_correlation"].to_numpy(), rows["stream"].to_numpy(),
                    rows["name"].to_numpy(), is_sync, prev_launch, r, launches)


def gpu_edges(clipped: pd.DataFrame, full: pd.DataFrame, symbols: SymbolTable, nodes: NodeLookup,
              zero_weight_launch: bool = False) -> EdgeList:
    """The GPU and synchronisation edges, in HTA's insertion order. ``zero_weight_launch``
    (HTA's CRITICAL_PATH_ADD_ZERO_WEIGHT_LAUNCH_EDGE) adds a 0-weight launch edge to every
    kernel that got no launch-delay edge, so a simulation cannot start a kernel before its
    launch call."""
    names = {k: symbols.sym_index.get(k, -1) for k in SYNC_NAMES}
    g = _gpu_rows(clipped, full, symbols, names)
    if g is None:
        return EdgeList.empty()
    edges = _Edges()
    k = np.flatnonzero(~g.is_sync)
    k = k[np.argsort(g.r[k], kind="stable")]  # kernels in processing order
    k_end = nodes.end_of(g.index[k])
    _kernel_edges(edges, g, k, k_end, full, symbols, names, nodes, zero_weight_launch)
    _sync_edges(edges, g, k, k_end, full, names, nodes)
    return edges.edge_list()


def _previous_on_stream(stream: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Position (in the kernel arrays) of the previous kernel on the same stream, or -1."""
    by_stream = np.lexsort((r, stream))
    prev = np.full(len(r), -1, dtype=np.int64)
    same = stream[by_stream][1:] == stream[by_stream][:-1]
    prev[by_stream[1:][same]] = by_stream[:-1][same]
    return prev


def _awaited_kernel_end(g: _GpuRows, k: np.ndarray, full: pd.DataFrame, symbols: SymbolTable,
                        names: dict, nodes: NodeLookup) -> np.ndarray:
    """End node of the kernel each kernel must wait for (Stream Wait Event), or -1: the latest
    wait processed before the kernel that names it as the next launch onto its stream."""
    out = np.full(len(k), -1, dtype=np.int64)
    swe = np.flatnonzero(g.is_sync & (g.name == names["Stream Wait Event"]) & (g.prev_launch != -1))
    waits = wait_next_launch(full, symbols, g.launches) if len(swe) else None
    if waits is None:
        return out
    dest_launch = waits.reindex(g.runtime[swe]).fillna(-1).to_numpy(np.int64)
    swe, dest_launch = swe[dest_launch >= 0], dest_launch[dest_launch >= 0]
    pairs = pd.DataFrame({"r": g.r[swe],
                          "dest": _lookup(full, "index_correlation", dest_launch, -1).astype(np.int64),
                          "src": _lookup(full, "index_correlation", g.prev_launch[swe], -1).astype(np.int64)})
    kern = pd.DataFrame({"pos": np.arange(len(k)), "dest": g.index[k], "rk": g.r[k]})
    m = kern.merge(pairs, on="dest")
    m = m[m["r"] < m["rk"]].sort_values("r", kind="stable").drop_duplicates("pos", keep="last")
    out[m["pos"].to_numpy()] = nodes.end_of(m["src"].to_numpy())
    return out


def _kernel_edges(edges: _Edges, g: _GpuRows, k: np.ndarray, k_end: np.ndarray, full: pd.DataFrame,
                  symbols: SymbolTable, names: dict, nodes: NodeLookup, zero_weight_launch: bool) -> None:
    """Per kernel: its span (step 0), the awaited kernel (1), launch delay or kernel gap (2)."""
    queue = queue_lengths(full, symbols)
    if queue is None:
        queue = pd.Series(dtype=np.float64)
    q_launch = queue.reindex(g.runtime[k]).to_numpy(dtype=np.float64)
    q_start = queue.reindex(g.index[k]).to_numpy(dtype=np.float64)
    r, index, runtime = g.r[k], g.index[k], g.runtime[k]
    k_start = nodes.start_of(index)
    prev = _previous_on_stream(g.stream[k], r)
    prev_end = np.where(prev >= 0, k_end[np.maximum(prev, 0)], -1)
    prev_end_ts = nodes.ts_of(prev_end)
    awaited = _awaited_kernel_end(g, k, full, symbols, names, nodes)
    waits = awaited >= 0
    awaited_ts = nodes.ts_of(awaited)

    edges.add(r, 0, k_start, k_end, OPERATOR, index.astype(np.int64))
    edges.add(r[waits], 1, awaited[waits], k_start[waits], SYNC)

    rt_ts = _lookup(full, "ts", runtime, np.nan).astype(np.float64)
    launch = ((q_launch == 1) & (q_start == 0) & ((prev < 0) | (prev_end_ts < rt_ts))
              & (~waits | (awaited_ts < rt_ts)))
    rt_start = nodes.start_of(runtime)
    missing = launch & (rt_start < 0)
    if missing.any():
        log.warning("%d kernels have a launch runtime call outside the graph; no launch edge added "
                    "(HTA 0.5.0 stops with an AssertionError here)", int(missing.sum()))
    launch &= rt_start >= 0
    edges.add(r[launch], 2, rt_start[launch], k_start[launch], LAUNCH)
    gap = ~(launch | missing) & (prev >= 0) & (~waits | (awaited_ts < prev_end_ts))
    edges.add(r[gap], 2, prev_end[gap], k_start[gap], KERNEL_KERNEL, index[np.maximum(prev[gap], 0)].astype(np.int64))
    if zero_weight_launch:
        causal = ~launch & (rt_start >= 0)
        edges.add(r[causal], 3, rt_start[causal], k_start[causal], LAUNCH, zero=True)


def _sync_edges(edges: _Edges, g: _GpuRows, k: np.ndarray, k_end: np.ndarray, full: pd.DataFrame,
                names: dict, nodes: NodeLookup) -> None:
    """SYNC edges GPU -> end of the synchronising runtime call (Stream/Context/Event Sync)."""
    rt_end = nodes.end_of(g.runtime)
    k_stream, k_r = g.stream[k], g.r[k]
    s = np.flatnonzero(g.is_sync & (g.name == names["Stream Sync"]))
    last = _last_kernel_before(k_stream, k_r, k_end, g.stream[s], g.r[s])
    ok = (last >= 0) & (rt_end[s] >= 0)
    edges.add(g.r[s][ok], 0, last[ok], rt_end[s][ok], SYNC)

    c = np.flatnonzero(g.is_sync & (g.name == names["Context Sync"]))
    if len(c) and len(k_r):
        first = pd.Series(k_r).groupby(k_stream).min().sort_values(kind="stable")
        for step, (st, first_r) in enumerate(first.items()):  # streams, in order of first kernel
            cs = c[g.r[c] > first_r]
            last = _last_kernel_before(k_stream, k_r, k_end, np.full(len(cs), st), g.r[cs])
            ok = (last >= 0) & (rt_end[cs] >= 0)
            edges.add(g.r[cs][ok], step, last[ok], rt_end[cs][ok], SYNC)

    e = np.flatnonzero(g.is_sync & (g.name == names["Event Sync"]) & (g.prev_launch != -1))
    src_end = nodes.end_of(_lookup(full, "index_correlation", g.prev_launch[e], -1).astype(np.int64))
    ok = (src_end >= 0) & (rt_end[e] >= 0)
    edges.add(g.r[e][ok], 0, src_end[ok], rt_end[e][ok], SYNC)
