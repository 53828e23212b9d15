"""Writing the critical path over the rank's raw trace (HTA's overlay_critical_path_analysis).

The output is ``<output_dir>/overlaid_critical_path_<trace file name>``, always gzip-compressed
JSON (HTA writes gzip whatever the name says), written atomically. Events on the path get
``args.critical = 1``; each shown edge becomes a pair of flow events (``ph`` "s"/"f", name
"critical_path", cat = the edge type) so trace viewers draw arrows. A flow end on a GPU event
sits 1 µs before the event's end so the viewer binds it to that event.
"""

from __future__ import annotations

import gzip
import json
import logging
from pathlib import Path

import numpy as np

from ..storing.atomic import atomic_write
from . import options
from .cp_graph import CPGraph
from .cp_types import DEFAULT_EDGE_TYPES_IN_VIZ, EDGE_TYPES, LAUNCH, CPEdgeType

log = logging.getLogger(__name__)


def _flow_ts(event: dict, at_start: bool) -> int:
    if at_start:
        return int(event["ts"])
    dur = event.get("dur", 0)
    end = event["ts"] + dur
    if event.get("args", {}).get("device", -1) >= 0:
        end -= min(1, dur)
    return int(end)


def _flow(flow_id: int, event: dict, at_start: bool, is_source: bool, etype: CPEdgeType,
          weight: float, critical: bool) -> dict:
    out = {"ph": "s" if is_source else "f", "id": flow_id, "pid": event["pid"], "tid": event["tid"],
           "ts": _flow_ts(event, at_start), "cat": etype.value, "name": "critical_path",
           "args": {"weight": int(weight), "critical": critical}}
    if not is_source:
        out["bp"] = "e"
    return out


def overlay_trace(raw: dict, graph: CPGraph, only_show_critical_events: bool = True,
                  show_all_edges: bool = False,
                  edge_types_to_viz: frozenset[CPEdgeType] | None = None) -> dict:
    """``raw`` (the rank's decoded trace, modified in place) with the critical path marked."""
    if only_show_critical_events:
        show_all_edges = False
    wanted = DEFAULT_EDGE_TYPES_IN_VIZ if edge_types_to_viz is None else edge_types_to_viz
    events = raw["traceEvents"]
    for ev in sorted(graph.critical_path_events_set):
        if 0 <= ev < len(events):
            events[ev].setdefault("args", {})["critical"] = 1

    g = graph.arrays
    on_path = np.zeros(len(g.src), bool)
    on_path[g.path_edges] = True
    if show_all_edges:
        # every edge, except 0-weight launch edges (only added for simulations) unless
        # HTA's CRITICAL_PATH_SHOW_ZERO_WEIGHT_LAUNCH_EDGE=1 asks for them
        shown = np.arange(len(g.src))
        if not options.critical_path_show_zero_weight_launch_edges():
            shown = np.flatnonzero(~((g.etype == LAUNCH) & (g.weight == 0)))
    else:
        codes = [i for i, t in enumerate(EDGE_TYPES) if t in wanted]
        shown = g.path_edges[np.isin(g.etype[g.path_edges], codes)]
    flows = []
    for flow_id, e in enumerate(shown.tolist()):  # one pair of flow events per shown edge
        u, v = int(g.src[e]), int(g.dst[e])
        etype, weight, critical = EDGE_TYPES[g.etype[e]], g.weight[e], bool(on_path[e])
        src_ev, dst_ev = events[int(g.node_event[u])], events[int(g.node_event[v])]
        flows.append(_flow(flow_id, src_ev, bool(g.node_is_start[u]), True, etype, weight, critical))
        flows.append(_flow(flow_id, dst_ev, bool(g.node_is_start[v]), False, etype, weight, critical))

    if only_show_critical_events:
        raw["traceEvents"] = [
            ev for ev in events
            if ev.get("ph") != "X" or ev.get("cat", "") in ("user_annotation", "python_function")
            or ev.get("args", {}).get("critical", 0) == 1]
    raw["traceEvents"].extend(flows)
    return raw


def write_overlay(raw: dict, trace_file: str, graph: CPGraph, output_dir: str,
                  only_show_critical_events: bool = True, show_all_edges: bool = False) -> str:
    """Write the overlaid trace under ``output_dir``; its path, or "" if ``output_dir`` is a file."""
    path = Path(output_dir).expanduser()
    if path.exists() and not path.is_dir():
        log.error("%s is not a directory.", output_dir)
        return ""
    out = path / ("overlaid_critical_path_" + Path(trace_file).name)
    overlaid = overlay_trace(raw, graph, only_show_critical_events, show_all_edges)
    atomic_write(out, gzip.compress(json.dumps(overlaid, indent=2).encode("utf-8"), compresslevel=6))
    return str(out)
