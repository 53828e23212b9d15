"""``CPGraph``: HTA's critical-path graph for one rank, held column-wise.

HTA's ``CPGraph`` is a networkx ``DiGraph``; this one keeps its edges in numpy arrays (the
longest-path search and the breakdown are vectorised over them, and a graph of millions of
edges costs arrays, not Python dicts per edge). HTA's graph API is offered over the arrays:
``edges`` is a networkx-style view (``for u, v in g.edges``, ``g.edges[u, v]["object"]`` /
``["weight"]``, ``len``, ``in``, ``g.edges(data=True)``), and :meth:`CPGraph.to_networkx`
builds a real ``DiGraph`` with HTA's attributes for networkx's algorithms (networkx is then
imported; it is not a dependency).

Nodes are the start and end points of the clipped frame's graph events (cpu_op, cuda_runtime
and cuda_driver rows, GPU rows with a launch link, and ``data_load_events`` matches), numbered
by time. Edges come from :mod:`.cp_stack` (CPU call stacks) then :mod:`.cp_gpu` (kernels and
syncs), in HTA's insertion order, which :mod:`.cp_longest` needs to break ties as networkx does.

An edge added twice keeps its first position and its last type and weight (a networkx
``add_edge`` on an existing edge updates it in place). Weights are µs: ``dst.ts - src.ts``,
0 for DEPENDENCY/SYNC edges and blocking-call ends. As in HTA, an edge weighing <= -1
(a child ending after its parent) counts 0 in the longest-path search but keeps its weight in
the breakdown.
"""

from __future__ import annotations

import logging
import re
from functools import cached_property

import numpy as np
import pandas as pd

from ..model import sorted_unique
from . import options
from ._frame import SymbolTable
from .cp_gpu import NodeLookup, gpu_edges
from .cp_longest import longest_path
from .cp_stack import call_stack_edges
from .cp_types import (DEPENDENCY, EDGE_TYPES, KERNEL_KERNEL, LAUNCH, NO_EVENT, OPERATOR, SYNC, CPEdge,
                       CPEdgeType, CPNode, EdgeList, GraphArrays)

__all__ = ["CPGraph", "CPEdge", "CPEdgeType", "CPNode", "shorten_name"]

log = logging.getLogger(__name__)

NODE_CATEGORIES = ("cpu_op", "cuda_runtime", "cuda_driver")
# Kineto's pre-2022 names for cpu_op / cuda_runtime. HTA 0.5.0 ignores them, so on such traces
# no CPU event is a node and it stops at the first kernel launch (AssertionError); we count them.
LEGACY_NODE_CATEGORIES = ("Operator", "Runtime")
BLOCKING_SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventQuery",
                       "cudaEventSynchronize", "cudaMemcpy", "cudaMemcpyAsync")
_MEMORY_KERNEL = re.compile(r"(^Memcpy)|(^Memset)|(^dma)")
_COMM_KERNEL = re.compile(r"^nccl.*Kernel")  # HTA 0.5.0's is_comm_kernel
_BOUND_BY_TYPE = {KERNEL_KERNEL: "gpu_kernel_kernel_overhead", LAUNCH: "gpu_kernel_launch_overhead",
                  DEPENDENCY: "", SYNC: ""}


def shorten_name(name: str) -> str:
    """HTA's shorten_name: drop template and call arguments and the return type."""
    if _MEMORY_KERNEL.match(name) is not None or ("<" not in name and "(" not in name):
        return name
    stack: list[str] = []
    for c in name.replace("->", ""):
        closing = {">": "<", ")": "("}.get(c)
        if closing is None:
            stack.append(c)
            continue
        while stack and stack[-1] != closing:
            stack.pop()
        if stack:
            stack.pop()
    return "".join(stack).split(" ")[-1]


class CPGraph:
    """Critical path graph of one rank (HTA 0.5.0 ``CPGraph``, without networkx).

    Attributes as in HTA: ``trace_df`` (the clipped frame), ``full_trace_df``, ``rank``,
    ``symbol_table``, ``node_list``, ``critical_path_nodes``, ``critical_path_events_set``,
    ``critical_path_edges_set``, ``event_to_start_node_map``, ``event_to_end_node_map``,
    ``edge_to_event_map``.
    """

    def __init__(self, clipped: pd.DataFrame, full: pd.DataFrame, symbols: SymbolTable, rank: int,
                 data_load_events: list[str] | None = None) -> None:
        self.rank = rank
        self.trace_df = clipped
        self.full_trace_df = full
        self.symbol_table = symbols
        self.sym_table = symbols.sym_table
        self._data_load_ids = _matching_ids(symbols, data_load_events)
        self._make_nodes()
        stack = call_stack_edges(clipped, self._is_node, self._blocking, self._start_node, self._end_node)
        lookup = NodeLookup(clipped["index"].to_numpy(), self._start_node, self._end_node, self._node_ts)
        zero_launch = options.critical_path_add_zero_weight_launch_edges()
        edges = EdgeList.concat([stack, gpu_edges(clipped, full, symbols, lookup, zero_launch)])
        self._set_edges(edges)
        self.critical_path_nodes: list[int] = []
        self._path_edges = np.zeros(0, dtype=np.int64)
        self._search_weight = np.zeros(0)

    # ---------------------------------------------------------------- construction
    def _make_nodes(self) -> None:
        df, sym = self.trace_df, self.symbol_table.sym_index
        cats = [sym[c] for c in NODE_CATEGORIES + LEGACY_NODE_CATEGORIES if c in sym]
        is_node = (df["cat"].isin(cats) | ((df["stream"] != -1) & (df["index_correlation"] >= 0))).to_numpy()
        if self._data_load_ids:
            is_node = is_node | df["name"].isin(self._data_load_ids).to_numpy()
        rows = np.flatnonzero(is_node)
        ts = df["ts"].to_numpy()[rows]
        node_ts = np.concatenate([ts, ts + df["dur"].to_numpy()[rows]])
        order = np.argsort(node_ts, kind="stable")
        node_of = np.empty(len(order), dtype=np.int64)
        node_of[order] = np.arange(len(order))
        self._is_node = is_node
        self._blocking = df["name"].isin([sym[b] for b in BLOCKING_SYNC_CALLS if b in sym]).to_numpy()
        self._start_node = np.full(len(df), -1, dtype=np.int64)
        self._end_node = np.full(len(df), -1, dtype=np.int64)
        self._start_node[rows] = node_of[: len(rows)]
        self._end_node[rows] = node_of[len(rows):]
        self._node_ts = node_ts[order]
        self._node_event = np.concatenate([df["index"].to_numpy()[rows]] * 2)[order]
        self._node_is_start = np.concatenate([np.ones(len(rows), bool), np.zeros(len(rows), bool)])[order]
        self._node_blocking = np.concatenate([self._blocking[rows]] * 2)[order]

    def _set_edges(self, edges: EdgeList) -> None:
        """Unique edges (first position, last type/weight/attribution) and their weights."""
        weight = self._node_ts[edges.dst] - self._node_ts[edges.src] if len(edges) else np.zeros(0)
        weight = np.where((edges.etype == DEPENDENCY) | (edges.etype == SYNC) | edges.zero, 0, weight)
        n = len(edges)
        n_nodes = len(self._node_ts)
        codes = pd.factorize(edges.src * n_nodes + edges.dst)[0] if n else np.zeros(0, np.int64)
        keep = np.flatnonzero(~pd.Series(codes).duplicated().to_numpy())  # first occurrences, in order
        rows = pd.Series(np.arange(n))
        last_of = rows.groupby(codes).last().to_numpy(np.int64)
        attributed = (edges.etype == OPERATOR) | (edges.etype == KERNEL_KERNEL)
        attr_last = pd.Series(edges.attr[attributed]).groupby(codes[attributed]).last().reindex(range(len(keep)))
        self._src = edges.src[keep]
        self._dst = edges.dst[keep]
        self._etype = edges.etype[last_of]
        self._weight = weight[last_of].astype(np.float64)
        self._attr = attr_last.fillna(NO_EVENT).to_numpy(np.int64) if len(keep) else np.zeros(0, dtype=np.int64)

    # ---------------------------------------------------------------- graph facts
    def number_of_nodes(self) -> int:
        return len(sorted_unique(np.concatenate([self._src, self._dst])))

    def number_of_edges(self) -> int:
        return len(self._src)

    @property
    def nodes(self) -> list[int]:
        """Node ids present in the graph (those on at least one edge)."""
        return sorted_unique(np.concatenate([self._src, self._dst])).tolist()

    @cached_property
    def edges(self) -> "EdgeView":
        """networkx-style view: iterate ``(u, v)``; ``edges[u, v]`` is ``{"weight", "object"}``
        (one view per graph, so its lookup table is built once)."""
        return EdgeView(self)

    def to_networkx(self):
        """A networkx ``DiGraph`` of this graph with HTA's edge attributes (``weight``,
        ``object``), nodes numbered as here; for networkx's algorithms (needs networkx)."""
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(self.nodes)
        for i, (u, v) in enumerate(zip(self._src.tolist(), self._dst.tolist())):
            e = self._edge(i)
            g.add_edge(u, v, weight=e.weight, object=e)
        return g

    def save(self, out_dir: str) -> str:
        """Write the graph to ``<out_dir>.zip`` and return that path (format: :mod:`.cp_save`;
        no pickle). :func:`perfreport.hta.analyzers.critical_path_analysis.restore_cpgraph`
        reads it back."""
        from .cp_save import save_cpgraph

        return save_cpgraph(self, out_dir)

    @property
    def arrays(self) -> GraphArrays:
        """The graph column-wise (what the overlay writer reads)."""
        return GraphArrays(self._src, self._dst, self._etype, self._weight, self._attr, self._path_edges,
                           self._node_event, self._node_is_start, self._node_ts)

    def _edge(self, i: int) -> CPEdge:
        return CPEdge(int(self._src[i]), int(self._dst[i]), _plain(self._weight[i]), EDGE_TYPES[self._etype[i]])

    def edge_objects(self) -> list[CPEdge]:
        """All edges as CPEdge objects, in insertion order."""
        return [self._edge(i) for i in range(len(self._src))]

    @cached_property
    def node_list(self) -> list[CPNode]:
        return [CPNode(i, int(e), _plain(t), bool(s), bool(b)) for i, (e, t, s, b) in enumerate(
            zip(self._node_event, self._node_ts, self._node_is_start, self._node_blocking))]

    @cached_property
    def event_to_start_node_map(self) -> dict[int, int]:
        m = self._node_is_start
        return dict(zip(self._node_event[m].tolist(), np.flatnonzero(m).tolist()))

    @cached_property
    def event_to_end_node_map(self) -> dict[int, int]:
        m = ~self._node_is_start
        return dict(zip(self._node_event[m].tolist(), np.flatnonzero(m).tolist()))

    @cached_property
    def edge_to_event_map(self) -> dict[tuple[int, int], int]:
        m = self._attr != NO_EVENT
        return {(int(u), int(v)): int(a) for u, v, a in zip(self._src[m], self._dst[m], self._attr[m])}

    def get_nodes_for_event(self, ev_id: int) -> tuple[CPNode | None, CPNode | None]:
        s, e = self.event_to_start_node_map.get(ev_id, -1), self.event_to_end_node_map.get(ev_id, -1)
        return (self.node_list[s] if s >= 0 else None, self.node_list[e] if e >= 0 else None)

    def get_events_for_edge(self, edge: CPEdge) -> tuple[int, int]:
        return int(self._node_event[edge.begin]), int(self._node_event[edge.end])

    def get_event_attribution_for_edge(self, edge: CPEdge) -> int | None:
        return self.edge_to_event_map.get((edge.begin, edge.end))

    def get_edges_attributed_to_event(self, ev_idx: int) -> list[CPEdge]:
        return [self._edge(i) for i in np.flatnonzero(self._attr == ev_idx)]

    # ---------------------------------------------------------------- solving
    def _graph_weight(self) -> np.ndarray:
        """Weights the search uses: <= -1 counts as 0 (HTA resets them, with a warning)."""
        negative = self._weight <= -1
        if negative.any() and options.critical_path_strict_negative_weight_check():
            raise ValueError(f"{int(negative.sum())} critical path edges have negative weights "
                             f"({options.CP_STRICT_NEG_WEIGHT_CHECK_ENV}=1)")
        if negative.any():
            log.warning("%d critical path edges have negative weights (children ending after their "
                        "parent); they count as 0", int(negative.sum()))
        return np.where(negative, 0.0, self._weight)

    def _check_sync_edges(self) -> None:
        sync = np.flatnonzero(self._etype == SYNC)
        if len(sync) == 0:
            return
        stream = self.trace_df["stream"]
        s = stream.reindex(self._node_event[self._src[sync]]).to_numpy()
        d = stream.reindex(self._node_event[self._dst[sync]]).to_numpy()
        bad = (s != -1) & (s == d)
        if bad.any():
            raise ValueError("Graph is not valid: a synchronisation edge joins two kernels on the same "
                             f"stream (stream {s[bad][0]})")

    def critical_path(self) -> bool:
        """Find the longest path; True on success. Raises ValueError for an invalid graph
        (a cycle, or a sync edge within one stream), as HTA does."""
        self._check_sync_edges()
        self.__dict__.pop("critical_path_edges_set", None)
        if len(self._src) == 0:
            log.error("the critical path graph has no edges")
            self.critical_path_nodes, self._path_edges = [], np.zeros(0, dtype=np.int64)
            return False
        # networkx numbers nodes by first appearance: src of edge 0, dst of edge 0, src of edge 1...
        interleaved = np.empty(2 * len(self._src), dtype=np.int64)
        interleaved[0::2], interleaved[1::2] = self._src, self._dst
        codes, appearance = pd.factorize(interleaved)
        src, dst = codes[0::2], codes[1::2]
        self._search_weight = self._graph_weight()
        path = np.asarray(longest_path(len(appearance), src, dst, self._search_weight), dtype=np.int64)
        self.critical_path_nodes = appearance[path].tolist()
        edge_key = pd.Index(src * len(appearance) + dst)
        self._path_edges = edge_key.get_indexer(path[:-1] * len(appearance) + path[1:])
        return True

    @property
    def critical_path_events_set(self) -> set[int]:
        return set(self._node_event[np.asarray(self.critical_path_nodes, dtype=np.int64)].tolist())

    @cached_property
    def critical_path_edges_set(self) -> set[CPEdge]:
        return {self._edge(i) for i in self._path_edges}

    def critical_path_length(self) -> float:
        """Sum of the search weights along the path (µs)."""
        return float(self._search_weight[self._path_edges].sum()) if len(self._path_edges) else 0.0

    def show_critical_path(self) -> None:
        """Log the nodes on the critical path."""
        for n in self.critical_path_nodes:
            log.info("Critical %s, ev_name = %s", self.node_list[n], self._event_name(self._node_event[n]))

    def _get_cuda_event_record_df(self) -> pd.DataFrame | None:
        """HTA's private table of ``cudaEventRecord`` calls in time order: ``correlation`` (the
        record's), ``index_launch_event`` and ``correlation_launch_event`` (the previous launch
        onto the recorded stream, -1 if none); None without records."""
        from .cp_sync import launch_table, record_previous_launch

        full = self.full_trace_df
        prev = record_previous_launch(full, self.symbol_table, launch_table(full, self.symbol_table))
        if prev is None:
            return None
        corr_of = pd.Series(full["correlation"].to_numpy(), index=full["index"].to_numpy())
        return pd.DataFrame({"correlation": prev.index.to_numpy(np.int64),
                             "index_launch_event": prev.to_numpy(np.int64),
                             "correlation_launch_event": corr_of.reindex(prev.to_numpy()).fillna(-1)
                             .to_numpy(np.int64)})

    def _get_node_name(self, ev_idx: int) -> str:
        """The name of trace event ``ev_idx`` ("ROOT" for -1), as HTA's private helper."""
        return self._event_name(ev_idx)

    def _event_name(self, ev_idx: int) -> str:
        if ev_idx < 0:
            return "ROOT"
        return self.sym_table[int(self.trace_df["name"].loc[ev_idx])]

    # ---------------------------------------------------------------- results
    def get_critical_path_breakdown(self) -> pd.DataFrame | None:
        """One row per critical-path edge: event_idx (attributed event, NaN for dependency,
        launch and sync edges), duration (µs), type, the event's s_name, cat, pid, tid, stream,
        index, and bound_by. None before a successful ``critical_path()``."""
        if len(self.critical_path_nodes) == 0:
            return None
        e = self._path_edges
        attr = self._attr[e]
        event_idx = np.where(attr == NO_EVENT, np.nan, attr.astype(np.float64))
        if not np.isnan(event_idx).any():
            event_idx = event_idx.astype(np.int64)
        edge_df = pd.DataFrame({
            "event_idx": event_idx,
            "duration": self._weight[e],
            "type": np.array([t.value for t in EDGE_TYPES], dtype=object)[self._etype[e]],
        })
        events = self._decoded_events()
        out = edge_df.merge(events, left_on="event_idx", right_on="index", how="left")
        out["bound_by"] = self._bound_by(out, self._etype[e])
        return out

    def _decoded_events(self) -> pd.DataFrame:
        df = self.trace_df
        uniq, inv = np.unique(df["name"].to_numpy(), return_inverse=True)
        short = np.array([shorten_name(self.sym_table[i]) if i >= 0 else "" for i in uniq], dtype=object)
        out = df[["cat", "pid", "tid", "stream", "index"]].reset_index(drop=True)
        out.insert(0, "s_name", short[inv.ravel()] if len(df) else np.zeros(0, dtype=object))
        return out

    def _bound_by(self, out: pd.DataFrame, etype: np.ndarray) -> np.ndarray:
        stream = out["stream"].to_numpy(dtype=np.float64)
        comm = out["s_name"].astype(object).str.match(_COMM_KERNEL.pattern, na=False).to_numpy(dtype=bool)
        bound = np.where(stream < 0, "cpu_bound", np.where(comm, "gpu_communication_bound", "gpu_compute_bound"))
        bound = bound.astype(object)
        if self._data_load_ids:
            loading = out["event_idx"].isin(
                self.trace_df.loc[self.trace_df["name"].isin(self._data_load_ids), "index"]).to_numpy()
            bound[loading & (stream < 0)] = "data_loading"
        for code, label in _BOUND_BY_TYPE.items():
            bound[etype == code] = label
        return bound

    def summary(self) -> pd.Series:
        """Percentage of the critical path's duration per ``bound_by`` (index ``bound_by``,
        name ``duration``)."""
        edf = self.get_critical_path_breakdown()
        if edf is None:
            return pd.Series(dtype=np.float64, name="duration", index=pd.Index([], name="bound_by"))
        return edf.groupby("bound_by").duration.sum() / edf.duration.sum() * 100


class EdgeView:
    """The edges of a :class:`CPGraph` as networkx's ``DiGraph.edges`` presents them."""

    def __init__(self, graph: CPGraph) -> None:
        self._g = graph

    @cached_property
    def _position(self) -> dict[tuple[int, int], int]:
        return {(u, v): i for i, (u, v) in enumerate(zip(self._g._src.tolist(), self._g._dst.tolist()))}

    def __iter__(self):
        return zip(self._g._src.tolist(), self._g._dst.tolist())

    def __len__(self) -> int:
        return len(self._g._src)

    def __contains__(self, uv) -> bool:
        return tuple(uv) in self._position

    def __getitem__(self, uv) -> dict:
        i = self._position[tuple(uv)]  # KeyError for a missing edge, as networkx
        e = self._g._edge(i)
        return {"weight": e.weight, "object": e}

    def __call__(self, data: bool = False):
        if not data:
            return list(self)
        return [(u, v, self[u, v]) for u, v in self]

    def __repr__(self) -> str:
        return f"EdgeView({list(self)!r})"


def _matching_ids(symbols: SymbolTable, patterns: list[str] | None) -> list[int]:
    """Symbol ids matching any of the ``data_load_events`` regular expressions."""
    if not patterns:
        return []
    rx = re.compile("|".join(f"(?:{p})" for p in patterns))
    return [i for i, s in enumerate(symbols.sym_table) if rx.search(s)]


def _plain(x):
    """A float that is a whole number as int (HTA's node times and weights are ints)."""
    x = float(x)
    return int(x) if x.is_integer() else x
