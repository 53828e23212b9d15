"""HTA-compatible methods of TraceAnalysis: critical path (see ../../docs/hta-differences.md).

``critical_path_analysis`` clips the rank's frame to a region, builds a :class:`CPGraph`
(:mod:`.cp_graph`: nodes; :mod:`.cp_stack`: CPU edges; :mod:`.cp_gpu`: GPU and sync edges;
:mod:`.cp_longest`: the longest path) and returns ``(graph, success)`` like HTA 0.5.0.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd

from ._frame import SymbolTable
from .cp_graph import CPGraph
from .cp_overlay import write_overlay

log = logging.getLogger(__name__)


def clip_to_region(frame: pd.DataFrame, symbols: SymbolTable, annotation: str,
                   instance_id: int | tuple[int, int] | None) -> pd.DataFrame | None:
    """The rows HTA analyses: CPU rows (stream -1) with dur > 0 starting in the window, GPU rows
    launched by such a row, and every "Stream Wait Event"; sorted by index. None when no
    symbol contains ``annotation`` or ``instance_id`` has an unexpected type.

    The window spans instances ``instance_id`` (an int, an inclusive (first, last) pair, or
    None for 0) of the rows whose name contains ``annotation``, counted in frame order;
    ``annotation=""`` means the whole trace.
    """
    sym = symbols.sym_index
    if "cuda_sync" not in sym:
        log.warning("Trace does not contain CUDA Synchronization events so the results of analysis "
                    "could be inaccurate (see https://github.com/pytorch/pytorch/pull/105187).")
    ids = [v for k, v in sym.items() if annotation in k]
    if not ids:
        log.error("Could not find annotation %s in the trace.", annotation)
        return None
    if instance_id is None:
        first, last = 0, 0
    elif isinstance(instance_id, tuple):
        first, last = instance_id
    elif isinstance(instance_id, (int, np.integer)):
        first, last = int(instance_id), int(instance_id)
    else:
        log.error("Unexpected input type instance_id")
        return None
    if annotation == "":
        start, end = frame["ts"].min(), frame["end"].max()
    else:
        marks = frame[frame["name"].isin(ids)]
        start = marks["ts"].iloc[first:last + 1].min()
        end = (marks["ts"] + marks["dur"]).iloc[first:last + 1].max()
    stream, ts, dur = frame["stream"], frame["ts"], frame["dur"]
    cpu_in = stream.eq(-1) & (ts >= start) & (ts <= end) & (dur > 0)
    launched = frame["index_correlation"][cpu_in].to_numpy()
    wait_event = sym.get("Stream Wait Event", -200)
    gpu_in = stream.ne(-1) & (frame["index"].isin(launched) | frame["name"].eq(wait_event))
    return frame[cpu_in | gpu_in].sort_index()


class CriticalPathMixin:
    """Mixed into :class:`perfreport.hta.TraceAnalysis`; uses self.t (an HtaTrace)."""

    def critical_path_analysis(self, rank: int, annotation: str, instance_id: int | tuple[int, int] | None,
                               data_load_events: list[str] | None = None) -> tuple[CPGraph, bool] | None:
        """Critical path of ``rank`` within instances ``instance_id`` of ``annotation`` (e.g.
        ``"ProfilerStep"``, 1; ``""`` = whole trace): ``(CPGraph, success)``, or None when no
        symbol contains ``annotation``. ``data_load_events``: regular expressions naming CPU
        events that count as "data_loading" (they become graph nodes too).

        Raises ValueError when the graph is invalid (a cycle, or a sync edge within one stream).
        """
        frame = self.t.get_trace(rank)
        clipped = clip_to_region(frame, self.t.symbol_table, annotation, instance_id)
        if clipped is None:
            return None
        log.info("Clipped dataframe has %d events", len(clipped))
        graph = CPGraph(clipped, frame, self.t.symbol_table, rank, data_load_events)
        return graph, graph.critical_path()

    def overlay_critical_path_analysis(self, rank: int, critical_path_graph: CPGraph, output_dir: str,
                                       only_show_critical_events: bool = True,
                                       show_all_edges: bool = False) -> str:
        """Write the rank's raw trace with the critical path marked (``args.critical = 1``) and
        its edges as flow events to ``output_dir/overlaid_critical_path_<trace file>`` (gzip);
        returns that path. ``only_show_critical_events`` keeps only critical X events (plus
        annotations and python functions); ``show_all_edges`` draws every edge (forced off by
        ``only_show_critical_events``)."""
        raw = self.t.get_raw_trace_for_one_rank(rank)
        return write_overlay(raw, self.t.trace_files[rank], critical_path_graph, output_dir,
                             only_show_critical_events, show_all_edges)
