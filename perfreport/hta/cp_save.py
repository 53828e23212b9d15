"""``CPGraph.save`` / ``restore_cpgraph``: a critical-path graph in a zip file, without pickle.

HTA 0.5.0 pickles a networkx graph and its Python objects, so restoring a file runs whatever
code it names. This format holds only JSON and numpy arrays (read with ``allow_pickle=False``):

``<out_dir>.zip``
  ``cpgraph.json``  ``{"format": "perfreport.cpgraph", "version": 1, "rank": int,
                    "trace_rows": rows of the rank's full trace frame, "symbols": size of the
                    symbol table, "data_load_ids": [symbol ids], "critical_path_nodes": [node ids]}``
  ``arrays.npz``    ``clipped_index`` (trace ``index`` of the rows the graph was built from);
                    nodes: ``node_ts`` (µs), ``node_event`` (trace index), ``node_is_start``,
                    ``node_blocking``; edges in insertion order: ``src``, ``dst`` (node ids),
                    ``etype`` (0 operator, 1 dependency, 2 kernel launch delay, 3 kernel-kernel
                    delay, 4 sync dependency), ``weight`` (µs), ``attr`` (attributed trace index,
                    int64 min for none); ``path_edges`` (edge ids along the critical path) and
                    ``search_weight`` (the weights the longest-path search used).

The clipped rows are not copied: ``restore_cpgraph`` takes them from ``t_full`` (the trace the
graph was built from), and refuses a trace whose row count or symbol table size differs.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np

from ..storing.atomic import atomic_write_bytes

FORMAT = "perfreport.cpgraph"
VERSION = 1
_ARRAYS = ("node_ts", "node_event", "node_is_start", "node_blocking", "src", "dst", "etype", "weight", "attr",
           "path_edges", "search_weight")


def save_cpgraph(graph, out_dir: str) -> str:
    """Write ``graph`` to ``<out_dir>.zip`` (atomically) and return that path."""
    meta = {"format": FORMAT, "version": VERSION, "rank": int(graph.rank),
            "trace_rows": int(len(graph.full_trace_df)), "symbols": len(graph.sym_table),
            "data_load_ids": [int(i) for i in graph._data_load_ids],
            "critical_path_nodes": [int(n) for n in graph.critical_path_nodes]}
    arrays = {name: getattr(graph, "_" + name) for name in _ARRAYS}
    arrays["clipped_index"] = graph.trace_df["index"].to_numpy(np.int64)
    npz = io.BytesIO()
    np.savez_compressed(npz, **arrays)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("cpgraph.json", json.dumps(meta, indent=1))
        z.writestr("arrays.npz", npz.getvalue())
    target = Path(f"{str(out_dir).rstrip('/')}.zip").expanduser()
    atomic_write_bytes(target, out.getvalue())
    return str(target)


def restore_cpgraph(zip_filename: str, t_full, rank: int):
    """The :class:`CPGraph` saved in ``zip_filename``, over ``t_full``'s frame of ``rank``.

    Raises ValueError when the file is not a saved graph or was saved from another trace.
    """
    from .cp_graph import CPGraph

    try:
        with zipfile.ZipFile(zip_filename) as z:
            meta = json.loads(z.read("cpgraph.json"))
            with np.load(io.BytesIO(z.read("arrays.npz")), allow_pickle=False) as npz:
                arrays = {k: npz[k] for k in npz.files}
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{zip_filename}: not a saved critical path graph ({exc})") from None
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise ValueError(f"{zip_filename}: not a {FORMAT} file of version {VERSION}")
    full = t_full.get_trace(rank)
    if len(full) != meta["trace_rows"] or len(t_full.symbol_table.sym_table) != meta["symbols"]:
        raise ValueError(f"{zip_filename}: saved from another trace (rank {meta['rank']}: {meta['trace_rows']} "
                         f"rows, {meta['symbols']} symbols; given {len(full)} rows, "
                         f"{len(t_full.symbol_table.sym_table)} symbols)")
    graph = CPGraph.__new__(CPGraph)
    graph.rank = rank
    graph.full_trace_df = full
    graph.trace_df = full[full["index"].isin(arrays.pop("clipped_index"))].sort_index()
    graph.symbol_table = t_full.symbol_table
    graph.sym_table = t_full.symbol_table.sym_table
    graph._data_load_ids = meta["data_load_ids"]
    for name in _ARRAYS:
        setattr(graph, "_" + name, arrays[name])
    graph.critical_path_nodes = meta["critical_path_nodes"]
    return graph
