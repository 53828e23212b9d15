"""HTA-compatible methods of TraceAnalysis: frequent kernel sequences, profiler steps,
stragglers and CUPTI counters (see ../../docs/hta-differences.md).

All four need HTA's call graph (:mod:`.call_graph`) or its step list; like HTA 0.5.0,
``get_frequent_cuda_kernel_sequences`` and ``get_cupti_counter_data_with_operators`` write the
call-stack columns into the rank's trace frame as a side effect.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
from collections.abc import Callable
from pathlib import Path

import msgspec
import numpy as np
import pandas as pd

from ..model import sorted_unique
from ..storing.atomic import atomic_write
from ..analyses.stragglers import COMM_KERNEL_PREFIXES, late_start_counts
from .call_graph import HtaCallGraph, call_graph_for_rank
from . import _plots

log = logging.getLogger(__name__)

_STEP_NUMBER = re.compile(r"ProfilerStep\s*#\s*(\d+)")
CUPTI_CATEGORY = "cuda_profiler_range"


class SequencesMixin:
    """Mixed into :class:`perfreport.hta.TraceAnalysis`; uses self.t (an HtaTrace)."""

    # --- frequent CUDA kernel sequences ------------------------------------------------------
    def get_frequent_cuda_kernel_sequences(self, operator_name: str, output_dir: str, min_pattern_len: int = 3,
                                           rank: int = 0, top_k: int = 5, visualize: bool = False,
                                           compress_other_kernels: bool = True) -> pd.DataFrame:
        """Kernel sequences launched under the shallowest ops whose name contains ``operator_name``.

        Returns columns ``pattern`` (op name and kernel names joined by "|"), ``count``,
        ``GPU kernel duration (us)`` and ``CPU op duration (us)``, all patterns, most frequent
        first; writes ``output_dir/overlaid_<trace file name>`` (gzip JSON) with the top_k
        patterns tagged in ``args["Patterns"]``. An empty frame (no file) when the operator
        is not found, no op launches ``min_pattern_len`` kernels, or ``output_dir`` is not a
        writable directory.
        """
        if not operator_name:
            log.error("operator_name must be a non-empty string and a valid operator name in the trace file.")
            return pd.DataFrame()
        if not (output_dir and os.path.isdir(output_dir) and os.access(output_dir, os.R_OK | os.W_OK)):
            log.error("Argument output_dir `%s` is not a valid, writable directory.", output_dir)
            return pd.DataFrame()
        frame = self._rank_frame(rank)
        symbols = self.t.symbol_table
        graph = call_graph_for_rank(frame, symbols)
        ids = [i for s, i in symbols.sym_index.items() if operator_name in s]
        names = frame["name"].to_numpy(np.int64)
        cand = np.flatnonzero(np.isin(names, ids))
        depth = graph.depth
        num_kernels = frame["num_kernels"].to_numpy(np.int64)
        if len(cand):
            cand = cand[(depth[cand] == depth[cand].min()) & (num_kernels[cand] >= min_pattern_len)]
        roots = cand
        if len(roots) == 0:
            log.error("operator_name %s not found in the trace file, or no frequent cuda kernel sequences found.",
                      operator_name)
            return pd.DataFrame()
        patterns = _kernel_patterns(frame, graph, roots)
        result, order = _pattern_table(frame, patterns, symbols.sym_table)
        roots_of = list(patterns.values())
        top = [(result.loc[i, "pattern"], int(result.loc[i, "count"]), roots_of[j])
               for i, j in enumerate(order[: min(top_k, len(result))])]
        self._write_overlay(rank, frame, graph, top, output_dir, compress_other_kernels)
        if visualize:
            _plot_top_patterns([c for _, c, _ in top], rank)
        return result

    def _rank_frame(self, rank: int) -> pd.DataFrame:
        if rank not in self.t.traces:
            raise ValueError(f"No rank was found for the trace: rank {rank} not in {sorted(self.t.traces)}")
        return self.t.get_trace(rank)

    def _write_overlay(self, rank: int, frame: pd.DataFrame, graph: HtaCallGraph,
                       top: list[tuple[str, int, list[int]]], output_dir: str, compress: bool) -> str:
        """Write the rank's raw trace with the top patterns tagged (HTA's overlaid trace)."""
        idx = frame["index"].to_numpy(np.int64)
        tagged: dict[int, dict[str, int]] = {}
        for pattern, count, roots in top:  # a loop over the top_k patterns
            members, _ = graph.subtree_members(np.asarray(roots, np.int64))
            for i in idx[members].tolist():  # one dict per tagged event: they go into the JSON
                tagged.setdefault(i, {})[pattern] = count
        known = self._hta_symbol_ids()
        with _gc_paused():
            raw = self.t.get_raw_trace_for_one_rank(rank)
            _overlay_events(raw.get("traceEvents", []), tagged, compress, known)
            payload = msgspec.json.encode(raw)
            del raw
        out = Path(output_dir) / ("overlaid_" + str(self.t.trace_files[rank]).split("/")[-1])
        atomic_write(out, _gzip(payload))
        log.info("Overlaid trace file for rank %s has been generated at %s; search for \"Patterns\" in the "
                 "trace viewer to highlight the frequent patterns.", rank, out)
        return str(out)

    def _hta_symbol_ids(self) -> dict[str, int]:
        """HTA's symbol table content: categories and names of the events HTA keeps (all ranks)."""
        sym = self.t.symbol_table.sym_index
        known: dict[str, int] = {}
        for trace in self.t.traceset:
            keep = np.isfinite(trace.dur) & (trace.cat >= 0) & (trace.cat != trace.code("Trace"))
            codes = sorted_unique(np.concatenate([trace.name[keep], trace.cat[keep]]))
            for s in trace.strings[codes[codes >= 0]]:
                known[s] = sym[s]
        return known

    # --- profiler steps and stragglers -------------------------------------------------------
    def get_profiler_steps(self) -> list[int]:
        """Sorted ProfilerStep numbers of the step rows kept in the frames (all ranks).

        By default that excludes the last step, which HTA drops at load.
        """
        table = self.t.symbol_table.sym_table
        numbers = {i: int(m.group(1)) if (m := _STEP_NUMBER.match(s)) else -1
                   for i, s in enumerate(table) if s.startswith("ProfilerStep")}
        found: set[int] = set()
        for frame in self.t.traces.values():
            present = sorted_unique(frame["name"].to_numpy(np.int64))
            found.update(numbers[i] for i in present.tolist() if i in numbers)
        found.discard(-1)
        return sorted(found)

    def get_potential_stragglers(self, profiler_steps: list[int] | None = None, num_candidates: int = 2,
                                 visualize: bool = False,
                                 straggler_identification_impl: Callable[..., pd.Series] | None = None) -> list[int]:
        """Ranks that start the dominant collective late (HTA's late-start method).

        The default metric is HTA's ``find_stragglers_with_late_start_comm_kernels`` with the
        NCCL kernel names of current NCCL (``ncclDevKernel_*``) recognised as well as
        ``ncclKernel_*``. A custom ``straggler_identification_impl(df, symbol_table,
        num_candidates, visualize) -> Series`` (rank -> score) replaces it. Returns at most
        ``num_candidates`` ranks, highest score first; [] when no communication kernel qualifies
        or only one rank has any (HTA raises there).
        """
        num_candidates = max(1, int(num_candidates))
        available = self.get_profiler_steps()
        valid = available if profiler_steps is None else [i for i in profiler_steps if i in available]
        if not valid:
            raise ValueError(f"invalid value for argument: profiler_steps={profiler_steps}; "
                             f"available profiler steps={available}")
        ranks = list(self.t.traces)
        if straggler_identification_impl is not None:
            frames = [self.t.traces[r] for r in ranks]
            df_all = pd.concat(frames, axis=0, keys=ranks, names=["rank", "idx"]).reset_index()
            selected = df_all.loc[df_all["iteration"].isin(valid)]
            counts = straggler_identification_impl(selected, self.t.symbol_table, num_candidates, visualize)
        else:
            counts = self._late_start_counts(ranks, valid, num_candidates, visualize)
        if counts is None or len(counts) == 0:
            return []
        ranked = counts.sort_values(ascending=False, kind="stable").index[:num_candidates].tolist()
        return [int(r) if isinstance(r, (int, np.integer)) else r for r in ranked]

    def _late_start_counts(self, ranks: list[int], valid: list[int], num_candidates: int,
                           visualize: bool) -> pd.Series:
        cols = ["ts", "dur", "stream", "iteration", "name"]
        parts = []
        for r in ranks:
            f = self.t.traces[r]
            f = f.loc[f["iteration"].isin(valid), cols]
            parts.append(pd.DataFrame({"rank": r, **{c: f[c].to_numpy() for c in cols}}))
        df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=["rank", *cols])
        table = self.t.symbol_table.sym_table
        comm_ids = [i for i, s in enumerate(table) if s.startswith(COMM_KERNEL_PREFIXES)]
        metric = _hta_late_start_metric(df, comm_ids)
        if metric is None:
            log.warning("no communication kernel (ncclKernel*/ncclDevKernel*) qualifies, or only one rank has "
                        "any: no straggler can be identified")
            return pd.Series(dtype=np.int64)
        counts = late_start_counts(metric, num_candidates)
        if visualize:
            _plots.bars(counts.index, counts.to_numpy(), "Potential Stragglers", "Rank",
                        "iterations flagged as a late starter")
        return counts

    # --- CUPTI counters ----------------------------------------------------------------------
    def get_cupti_counter_data_with_operators(self, ranks: list[int] | None = None) -> list[pd.DataFrame]:
        """Per rank, the ``cuda_profiler_range`` (CUPTI range-profiler) events with their counter
        values and the operator stack of the kernel launch each one measured.

        Counter events are matched to ``cudaLaunchKernel*`` calls by position in time order
        (HTA's method); a rank where the two counts differ is skipped. The counter values are
        read from the raw trace file, since the loader keeps only a fixed set of args.
        """
        if not ranks:
            ranks = [0]
        sym = self.t.symbol_table
        if CUPTI_CATEGORY not in sym.sym_index:
            log.warning("Could not find events of 'cuda_profiler_range' category. "
                        "Please check if you ran CUPTI profiler mode correctly")
            return []
        present = [r for r in ranks if r in self.t.traces]
        if not present:
            raise ValueError("No rank was found for the trace.")
        graphs = {r: call_graph_for_rank(self.t.traces[r], sym) for r in present}
        table = np.array(sym.sym_table, dtype=object)
        for f in self.t.traces.values():  # HTA decodes every rank's frame (full names)
            f["s_name"] = table[f["name"].to_numpy(np.int64)]
            f["s_cat"] = table[f["cat"].to_numpy(np.int64)]
        out = []
        for r in present:
            df = self._cupti_rank(r, graphs[r], table)
            if df is not None:
                out.append(df)
        return out

    def _cupti_rank(self, rank: int, graph: HtaCallGraph, table: np.ndarray) -> pd.DataFrame | None:
        frame = self.t.get_trace(rank)
        s_cat = frame["s_cat"].astype(str)
        s_name = frame["s_name"].astype(str)
        counters = np.flatnonzero((s_cat == CUPTI_CATEGORY).to_numpy())
        launch = s_cat.str.startswith("cuda_runtime") & s_name.str.startswith("cudaLaunchKernel")
        launches = np.flatnonzero(launch.to_numpy())
        ts = frame["ts"].to_numpy(np.float64)
        counters = counters[np.argsort(ts[counters], kind="stable")]
        launches = launches[np.argsort(ts[launches], kind="stable")]
        if len(counters) != len(launches):
            log.error("Number of kernels launches and kernels do not match for rank %s: kernel launches (%d) "
                      "kernels (%d)", rank, len(launches), len(counters))
            return None
        out = frame.iloc[counters].copy().reset_index(drop=True)
        values = _counter_values(self.t.get_raw_trace_for_one_rank(rank), out["index"].to_numpy(np.int64))
        at = list(out.columns).index("external_id") + 1 if "external_id" in out.columns else len(out.columns)
        for k, (col, v) in enumerate(values.items()):
            out.insert(at + k, col, v)
        idx = frame["index"].to_numpy(np.int64)
        out["index_runtime"] = idx[launches]
        out["op_stack"] = _op_stacks(frame, graph, launches, table)
        out["top_level_op"] = [s[0] if s else "" for s in out["op_stack"]]
        out["bottom_level_op"] = [s[-1] if s else "" for s in out["op_stack"]]
        out["name"] = out["s_name"]
        out["cat"] = out["s_cat"]
        return out.drop(columns=["s_cat", "s_name"])


def _kernel_patterns(frame: pd.DataFrame, graph: HtaCallGraph, roots: np.ndarray) -> dict[tuple[int, ...], list[int]]:
    """Pattern (op name id, kernel name ids by start time) -> positions of its root ops."""
    stream = frame["stream"].to_numpy(np.int64)
    names = frame["name"].to_numpy(np.int64)
    ts = frame["ts"].to_numpy(np.float64)
    idx = frame["index"].to_numpy(np.int64)
    members, owners = graph.subtree_members(roots)  # a kernel as root is its own subtree
    k = stream[members] != -1
    members, owners = members[k], owners[k]
    order = np.lexsort((idx[members], ts[members], owners))
    members, owners = members[order], owners[order]
    cuts = np.searchsorted(owners, roots, side="left"), np.searchsorted(owners, roots, side="right")
    kernel_names = names[members].tolist()
    patterns: dict[tuple[int, ...], list[int]] = {}
    for root, lo, hi in zip(roots.tolist(), *cuts):  # a loop over root ops, not events
        key = (int(names[root]), *kernel_names[lo:hi])
        patterns.setdefault(key, []).append(root)
    return patterns


def _pattern_table(frame: pd.DataFrame, patterns: dict, table: list[str]) -> tuple[pd.DataFrame, np.ndarray]:
    """HTA's result frame (most frequent first, then by pattern) and the original order."""
    kernel_dur = frame["kernel_dur_sum"].to_numpy(np.float64)
    dur = frame["dur"].to_numpy(np.float64)
    result = pd.DataFrame({
        "pattern": ["|".join(table[x] for x in p) for p in patterns],
        "count": [len(v) for v in patterns.values()],
        "GPU kernel duration (us)": [float(kernel_dur[v].sum()) for v in patterns.values()],
        "CPU op duration (us)": [float(dur[v].sum()) for v in patterns.values()],
    })
    order = result.sort_values(by=["count", "pattern"], ascending=[False, True], kind="stable").index.to_numpy()
    return result.loc[order].reset_index(drop=True), order


def _plot_top_patterns(counts: list[int], rank: int) -> None:
    _plots.bars(range(len(counts)), counts, f"Top {len(counts)} frequent patterns for rank {rank}",
                "Pattern Index", "Pattern Count")


def _overlay_events(events: list, tagged: dict[int, dict[str, int]], compress: bool, known: dict[str, int]) -> None:
    """HTA's overlay, in place: tag pattern events, blank the args and name of the others.

    A Python loop over events: the output is the trace's own JSON objects, one dict per event,
    so each is touched once (measured: about 1 µs per event, 0.1 s for the 109k events of the
    trace_diff control trace; decoding and encoding the JSON cost more).
    """
    mapping = {str(i): name for name, i in known.items()}
    for i, e in enumerate(events):
        patterns = tagged.get(i)
        if patterns is not None:
            args = e.get("args")
            if not isinstance(args, dict):
                args = e["args"] = {}
            args["Patterns"] = dict(patterns)
            continue
        if not compress:
            continue
        if e.get("ph") == "X":
            e["args"] = {}
        if "args" in e and not e["args"]:
            name = e.get("name")
            if isinstance(name, str) and name in known:
                e["name"] = str(known[name])
        if e.get("pid") == "Spans" and "PyTorch Profiler" in str(e.get("name", "")):
            e["args"] = mapping


@contextlib.contextmanager
def _gc_paused():
    """Hold off the cyclic garbage collector while a whole trace exists as Python objects.

    Decoding, editing and re-encoding a trace creates millions of dicts with no reference
    cycles; each automatic collection walks all of them (about half the overlay's time).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _gzip(payload: bytes) -> bytes:
    try:
        from isal import igzip

        return igzip.compress(payload, compresslevel=1)
    except ImportError:  # pragma: no cover - isal is a declared dependency
        import gzip

        return gzip.compress(payload, compresslevel=1)


def _counter_values(raw: dict, positions: np.ndarray) -> dict[str, np.ndarray]:
    """Counter columns (args of the counter events, -1 where absent), read from the raw trace."""
    events = raw.get("traceEvents", [])
    args = [events[p].get("args") or {} for p in positions.tolist()]  # the counter events only
    keys: list[str] = []
    for a in args:
        keys.extend(k for k in a if k not in keys)
    return {k: pd.to_numeric(pd.Series([a.get(k, -1) for a in args]), errors="coerce").to_numpy() for k in keys}


def _op_stacks(frame: pd.DataFrame, graph: HtaCallGraph, launches: np.ndarray, table: np.ndarray) -> list[list[str]]:
    """For each launch, the cpu_op names on its call stack, outermost first."""
    is_op = (frame["s_cat"].astype(str) == "cpu_op").to_numpy()
    who, anc = graph.ancestor_pairs(launches)
    members, owners = graph.subtree_members(launches[graph.is_node[launches]])
    # descendants of a launch (its kernels) are never cpu ops, but HTA looks at them too
    owner_k = pd.Index(launches).get_indexer(owners)
    who = np.concatenate([who, owner_k])
    anc = np.concatenate([anc, members])
    keep = is_op[anc]
    who, anc = who[keep], anc[keep]
    pairs = pd.DataFrame({"k": who, "a": anc}).drop_duplicates()
    ts = frame["ts"].to_numpy(np.float64)
    order = np.lexsort((graph.depth[pairs["a"].to_numpy()], ts[pairs["a"].to_numpy()], pairs["k"].to_numpy()))
    k_sorted = pairs["k"].to_numpy()[order]
    a_sorted = pairs["a"].to_numpy()[order]
    names = table[frame["name"].to_numpy(np.int64)[a_sorted]]
    cuts = np.searchsorted(k_sorted, np.arange(len(launches) + 1))
    return [list(names[cuts[i]:cuts[i + 1]]) for i in range(len(launches))]  # per counter event


def _hta_late_start_metric(df: pd.DataFrame, comm_ids: list[int]) -> pd.DataFrame | None:
    """HTA's ``_compute_normalized_start_time_of_significant_comm_kernels`` on the selected rows.

    Returns rows (rank, iteration, normalized_start_time) of the chosen (stream, kernel), or
    None when no kernel qualifies or the choice is undefined (one rank: no spread across ranks).
    """
    if df.empty:
        return None
    iterations = df["iteration"].unique()
    ts = df["ts"].to_numpy(np.float64)
    dur = df["dur"].to_numpy(np.float64)
    t_min = ts.min()
    mean_iter = ((ts + dur).max() - t_min) / float(len(iterations))
    long = df.loc[(df["stream"] > 0) & (df["iteration"] > 0) & (df["dur"] >= mean_iter * 0.01)
                  & df["name"].isin(comm_ids)]
    if long.empty:
        return None
    last = long.groupby(["rank", "stream", "iteration", "name"], as_index=False).last()
    last["normalized_start_time"] = (last["ts"] - t_min) / mean_iter
    last["duration"] = last["dur"] / mean_iter
    spread = last.groupby(["stream", "iteration", "name"])["duration"].std()
    average = spread.groupby(["stream", "name"]).mean().dropna()
    if average.empty:
        return None
    stream, name = average.idxmax()
    pick = last.loc[last["stream"].eq(stream) & last["name"].eq(name)]
    return pick[["rank", "iteration", "normalized_start_time"]].rename(columns={"normalized_start_time": "metric"})
