"""HTA-compatible methods of TraceAnalysis: counters and launches (see ../../docs/hta-differences.md).

Queue length and memory-bandwidth time series (HTA's "augmented counters"), the time blocked on
a full launch queue, a copy of the trace with those series as Chrome counter events, CUDA kernel
launch statistics and aten-op -> kernel launch delays, computed on HTA's per-rank frame
(``self.t.traces``) with HTA 0.5.0's definitions, so the numbers match HTA's.

Deviations from HTA 0.5.0 (each one a case where HTA is demonstrably wrong):

* ``get_time_spent_blocked_on_full_queue(..., all_streams=True)`` returns one row per (rank,
  stream) whose queue ever reaches ``max_queue_length``; the default is HTA's table, which keeps
  only the last such stream of each rank (perfreport's own table,
  ``perfreport.analyses.queue.time_blocked_on_full_queue``, always has every stream).
* ``get_cuda_kernel_launch_stats(all_launches=True)`` also covers ``cuLaunchKernel``/
  ``cuLaunchKernelEx`` (Triton), ``cudaGraphLaunch`` (one row per kernel of the graph) and the
  HIP launch calls, which HTA ignores; the default gives exactly HTA's rows (perfreport's own
  launch analysis, ``perfreport.analyses.launch``, always covers every launch).
* ``generate_trace_with_counters`` writes plain JSON for a ``.json`` trace and gzip for a
  ``.json.gz`` one (HTA always gzips), replaces only the final ``.json`` of the file name, and
  writes atomically.
* ``get_aten_op_kernels_and_delay`` skips launches whose kernel is missing and returns an empty
  table for a rank without any (HTA raises), and does not carry one rank's rows into the next
  rank's table (HTA never resets its list between ranks).
"""

from __future__ import annotations

import json
import re
from enum import Flag, auto
from pathlib import Path

import numpy as np
import pandas as pd

from ..load.files import read_trace_bytes
from ..storing.atomic import atomic_write
from ..analyses.counters_trace import counter_events
from ..analyses.launch import join_runs, last_at_or_before
from ..model import MEMCPY_CATEGORIES, MEMSET_CATEGORIES
from . import _plots

CUDA_MAX_LAUNCH_QUEUE_PER_STREAM = 1024
"""CUDA blocks a launching CPU thread when a stream has this many outstanding operations."""

# --- HTA's name lists (HTA 0.5.0); perfreport's own list is model.LAUNCH_NAMES -------------
_MTIA_LAUNCH = "runFunction - job_prep_and_submit_for_execution"
QUEUE_LAUNCH_NAMES = (
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
    "cudaMemcpyAsync", "cudaMemsetAsync", _MTIA_LAUNCH,
    "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipMemcpyAsync", "hipMemsetAsync",
    "hipMemcpyWithStream",
)
"""Runtime calls HTA 0.5.0 counts as enqueueing one GPU operation (queue length); it misses
``cuLaunchKernelEx`` and ``cudaGraphLaunch`` (perfreport.analyses.queue counts them)."""
STATS_KERNEL_LAUNCHES = ("cudaLaunchKernel", "cudaLaunchKernelExC", _MTIA_LAUNCH)
STATS_MEMORY_LAUNCHES = ("cudaMemcpyAsync", "cudaMemsetAsync")
"""What HTA's get_cuda_kernel_launch_stats looks at."""
STATS_MISSED_KERNEL_LAUNCHES = (
    "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchCooperativeKernel", "cudaGraphLaunch",
    "hipLaunchKernel", "hipExtLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel",
    "hipGraphLaunch",
)
STATS_MISSED_MEMORY_LAUNCHES = ("hipMemcpyAsync", "hipMemsetAsync", "hipMemcpyWithStream")
"""Launch calls HTA's launch statistics miss; perfreport adds their rows (a deviation)."""
_ATEN_RUNTIME = re.compile(r"cuda.*LaunchKernel|cuLaunchKernel|runFunction")
"""Runtime rows get_aten_op_kernels_and_delay attributes to aten ops (``re.match``)."""

# HTA 0.5.0's kernel-type rules (re.match), used here only to pick the memory operations;
# as in perfreport.hta.breakdown, memcpy/memset events are MEMORY by category whatever their name.
_HTA_COMM = re.compile(r"^nccl.*Kernel")
_HTA_MEMORY = re.compile(r"^(Memcpy|Memset|dma)")
_MEMORY_CATEGORIES = MEMCPY_CATEGORIES + MEMSET_CATEGORIES


class TimeSeriesTypes(Flag):
    """The counter series :meth:`CountersMixin.generate_trace_with_counters` can add."""

    QUEUE_LENGTH = auto()
    MEMCPY_BANDWIDTH = auto()


def _default_ranks(ranks) -> list[int]:
    return [0] if ranks is None or len(ranks) == 0 else list(ranks)


def hta_memory_type(name: str, category: str = "") -> str | None:
    """HTA's copy type of a GPU row ("Memcpy HtoD", "Memset", ...), None if not memory."""
    if category not in _MEMORY_CATEGORIES and (_HTA_COMM.match(name) or not _HTA_MEMORY.match(name)):
        return None
    if name.startswith("Memset"):
        return "Memset"
    if not name.startswith("Memcpy"):
        return "Memcpy Unknown"
    return name[:11]


class CountersMixin:
    """Mixed into :class:`perfreport.hta.TraceAnalysis`; uses self.t (an HtaTrace)."""

    # --- helpers ------------------------------------------------------------------------
    def _sym_ids(self, names) -> list[int]:
        index = self.t.symbol_table.sym_index
        return [index[n] for n in names if n in index]

    # --- queue length -------------------------------------------------------------------
    def _queue_length_for_rank(self, rank: int) -> pd.DataFrame | None:
        df = self.t.get_trace(rank)
        launch = (df["name"].isin(self._sym_ids(QUEUE_LAUNCH_NAMES)).to_numpy()
                  & (df["index_correlation"].to_numpy() > 0))
        runtime = df.loc[launch, ["index", "ts", "correlation"]]
        gpu = df[df["stream"].to_numpy() != -1]
        # the runtime row takes stream/pid/tid of its GPU op (one row per GPU op with that id)
        partner = gpu[["correlation", "stream", "pid", "tid"]]
        runtime = runtime.merge(partner, on="correlation", how="left", sort=False)
        runtime["queue"] = 1
        gpu_ops = gpu.loc[gpu["correlation"].isin(runtime["correlation"]),
                          ["index", "ts", "correlation", "stream", "pid", "tid"]].assign(queue=-1)
        merged = pd.concat([runtime, gpu_ops], ignore_index=True)
        if merged["stream"].isna().all():
            return None
        order = np.argsort(merged["ts"].to_numpy(), kind="quicksort")  # HTA: sort_values("ts")
        merged = merged.iloc[order]
        merged = merged[merged["stream"].notna()]
        # group by stream (ascending), keeping the time order within each stream
        merged = merged.iloc[np.argsort(merged["stream"].to_numpy(), kind="stable")]
        queue = merged["queue"].to_numpy()
        stream = merged["stream"].to_numpy()
        total = np.cumsum(queue)  # running sum per stream = total - total before the stream's first row
        first = np.maximum.accumulate(np.where(np.r_[True, stream[1:] != stream[:-1]], np.arange(len(queue)), 0))
        out = merged[["ts", "pid", "tid", "stream"]].copy()
        out["queue_length"] = total - (total[first] - queue[first])
        out.index = pd.Index(merged["index"].to_numpy(), name="index")
        return out

    def get_queue_length_time_series(self, ranks=None) -> dict[int, pd.DataFrame]:
        """{rank: change points of the number of outstanding GPU ops per stream} (HTA 0.5.0).

        +1 at each launch call, -1 when its GPU op starts; columns ts, pid, tid, stream,
        queue_length, indexed by the trace event index. Ranks without launches are left out.
        """
        result = {r: self._queue_length_for_rank(r) for r in _default_ranks(ranks)}
        return {r: v for r, v in result.items() if v is not None}

    def get_queue_length_summary_from_time_series(self, queue_length_dict) -> pd.DataFrame | None:
        """describe() of queue_length per (rank, stream) over the change points (not time-weighted).

        As HTA does, a ``rank`` column is added to the frames of ``queue_length_dict``.
        """
        parts = []
        for rank, frame in queue_length_dict.items():
            frame["rank"] = rank
            parts.append(frame[["rank", "stream", "queue_length"]].groupby(["rank", "stream"]).describe())
        return pd.concat(parts) if parts else None

    def get_queue_length_summary(self, ranks=None) -> pd.DataFrame | None:
        return self.get_queue_length_summary_from_time_series(self.get_queue_length_time_series(_default_ranks(ranks)))

    def get_time_spent_blocked_on_full_queue(self, queue_length_dict,
                                             max_queue_length: int = CUDA_MAX_LAUNCH_QUEUE_PER_STREAM, *,
                                             all_streams: bool = False) -> pd.DataFrame:
        """Time (µs) a stream's queue held at least ``max_queue_length`` ops, absolute and
        relative to the rank's trace duration. As HTA 0.5.0: one row per rank, for the last
        stream (in order of first appearance) that reached it; ``all_streams=True``: one row per
        (rank, stream) that reached it."""
        rows = []
        for rank, series in queue_length_dict.items():
            ts = series["ts"].to_numpy(dtype=np.float64)
            stream = series["stream"].to_numpy()
            full = series["queue_length"].to_numpy() >= max_queue_length
            for s in pd.unique(stream):  # loop over streams
                sel = stream == s
                dur = np.diff(ts[sel])  # time until the next change point; the last one has none
                hit = full[sel][:-1]
                if not full[sel].any():
                    continue
                blocked = float(dur[hit].sum())
                duration = self.t.get_trace_duration(rank)
                rows.append((rank, s, blocked, blocked / duration if duration else float("nan")))
        if not all_streams:  # HTA overwrites each rank's row with every qualifying stream
            rows = list({row[0]: row for row in rows}.values())
        return pd.DataFrame(rows, columns=["rank", "stream", "duration_at_max_queue_length",
                                           "relative_duration_at_max_queue_length"])

    # --- memory bandwidth ---------------------------------------------------------------
    def _memory_bw_for_rank(self, rank: int) -> pd.DataFrame | None:
        df = self.t.get_trace(rank)
        gpu = df[df["stream"].to_numpy() != -1]
        table = self.t.symbol_table.sym_table
        width = len(table) + 1
        pairs, inverse = np.unique(gpu["name"].to_numpy(np.int64) * width + gpu["cat"].to_numpy(np.int64),
                                   return_inverse=True)
        labels = np.array([hta_memory_type(table[p // width], table[p % width]) for p in pairs.tolist()] + [None],
                          dtype=object)  # classified once per distinct (name, category)
        kinds = labels[inverse.ravel()] if len(gpu) else labels[:0]
        keep = np.array([k is not None for k in labels], dtype=bool)[inverse.ravel()] if len(gpu) else np.zeros(0, bool)
        mem = gpu[keep]
        if not len(mem):
            return None
        kind = kinds[keep]
        dur = mem["dur"].to_numpy(dtype=np.float64)
        dur = np.where(dur == 0, 1.0, dur)  # HTA issue #20: a 0 µs copy lasts 1 µs
        ts = mem["ts"].to_numpy()
        bw = mem["memory_bw_gbps"].to_numpy(dtype=np.float64)
        points = pd.DataFrame({
            "ts": np.concatenate([ts, ts + dur]),
            "pid": np.concatenate([mem["pid"].to_numpy(), mem["pid"].to_numpy()]),
            "name": np.concatenate([kind, kind]),
            "memory_bw_gbps": np.concatenate([bw, -bw]),
        })
        points = points.iloc[np.argsort(points["ts"].to_numpy(), kind="quicksort")]  # HTA: sort_values("ts")
        points = points.iloc[np.argsort(points["name"].to_numpy(), kind="stable")]
        names = points["name"].to_numpy()
        level = points["memory_bw_gbps"].to_numpy().copy()
        bounds = np.flatnonzero(np.r_[True, names[1:] != names[:-1], True])
        for lo, hi in zip(bounds[:-1], bounds[1:]):  # loop over copy types; plain running sum as HTA
            level[lo:hi] = np.cumsum(level[lo:hi])
        points["memory_bw_gbps"] = level
        points.index = pd.Index(points.index.to_numpy())  # HTA's index: position before sorting
        return points

    def get_memory_bw_time_series(self, ranks=None) -> dict[int, pd.DataFrame]:
        """{rank: change points of the summed Kineto bandwidth (GB/s) per copy type} (HTA 0.5.0)."""
        result = {r: self._memory_bw_for_rank(r) for r in _default_ranks(ranks)}
        return {r: v for r, v in result.items() if v is not None}

    def get_memory_bw_summary(self, ranks=None) -> pd.DataFrame | None:
        """describe() of the positive bandwidth points per (rank, copy type)."""
        parts = []
        for rank, frame in self.get_memory_bw_time_series(_default_ranks(ranks)).items():
            frame["rank"] = rank
            frame = frame[frame["memory_bw_gbps"] > 0]
            parts.append(frame[["rank", "name", "memory_bw_gbps"]].groupby(["rank", "name"]).describe())
        return pd.concat(parts) if parts else None

    # --- trace with counters ------------------------------------------------------------
    def generate_trace_with_counters(self, time_series: TimeSeriesTypes | None = None, ranks=None,
                                     output_suffix: str = "_with_counters") -> None:
        """Write, next to each rank's trace, a copy with the queue-length and/or memcpy-bandwidth
        series added as Chrome counter events (``"ph": "C"``), viewable in Perfetto.

        ``rank-0.json.gz`` -> ``rank-0_with_counters.json.gz`` (gzip, as the input) and
        ``rank-0.json`` -> ``rank-0_with_counters.json`` (plain JSON; HTA gzips it anyway);
        the file is written atomically. Queue-length counters are named "Queue Length" with one
        chart per stream (``id``); bandwidth counters are named by copy type with the GB/s in
        ``args["Memcpy BW"]``. Times are the trace's own (absolute) µs.
        """
        ranks = _default_ranks(ranks)
        if time_series is None:
            time_series = TimeSeriesTypes.QUEUE_LENGTH | TimeSeriesTypes.MEMCPY_BANDWIDTH
        if not output_suffix:
            output_suffix = "_with_counters"
        events: dict[int, list[dict]] = {}
        sources = []
        if TimeSeriesTypes.QUEUE_LENGTH in time_series:
            sources.append((self.get_queue_length_time_series(ranks), "Queue Length", "queue_length"))
        if TimeSeriesTypes.MEMCPY_BANDWIDTH in time_series:
            sources.append((self.get_memory_bw_time_series(ranks), "Memcpy BW", "memory_bw_gbps"))
        for series_by_rank, counter, column in sources:
            for rank, series in series_by_rank.items():
                series = series.rename(columns={"stream": "id"})
                events.setdefault(rank, []).extend(counter_events(series, counter, column, float(self.t.min_ts)))
        for rank, extra in events.items():
            source = Path(self.t.trace_files[rank])
            target = counters_trace_path(source, output_suffix)
            atomic_write(target, _trace_with_events(read_trace_bytes(source), extra, target.name.endswith(".gz")))

    # --- CUDA kernel launch statistics --------------------------------------------------
    def get_cuda_kernel_launch_stats(self, ranks=None, runtime_cutoff: int = 50, launch_delay_cutoff: int = 100,
                                     include_memory_events: bool = True, visualize: bool = True, *,
                                     all_launches: bool = False) -> dict[int, pd.DataFrame]:
        """{rank: one row per (launch call, GPU op) pair}: ``correlation``, ``cpu_duration``
        (the call), ``gpu_duration`` (the GPU op) and ``launch_delay`` (GPU op start - call end,
        clipped at 0), all µs. The cutoffs (µs) only shape the plots.

        Covers cudaLaunchKernel/ExC and the MTIA launch (plus cudaMemcpyAsync/cudaMemsetAsync
        with ``include_memory_events``) as HTA 0.5.0 does; ``all_launches=True`` adds the
        launches HTA misses: cuLaunchKernel/Ex (Triton), cudaGraphLaunch (a row per kernel of
        the graph) and HIP launches (their hipMemcpy/hipMemset calls with
        ``include_memory_events``).
        """
        names = list(STATS_KERNEL_LAUNCHES) + (list(STATS_MISSED_KERNEL_LAUNCHES) if all_launches else [])
        if include_memory_events:
            names += list(STATS_MEMORY_LAUNCHES) + (list(STATS_MISSED_MEMORY_LAUNCHES) if all_launches else [])
        ids = self._sym_ids(names)
        result = {}
        for rank in _default_ranks(ranks):
            df = self.t.get_trace(rank)
            corr = df.loc[df["name"].isin(ids).to_numpy(), "correlation"]
            wanted = df["correlation"].isin(corr).to_numpy()
            cpu_side = df["stream"].to_numpy() == -1
            cols = ["correlation", "dur", "ts"]
            joined = df.loc[wanted & cpu_side, cols].merge(df.loc[wanted & ~cpu_side, cols], how="inner",
                                                           on="correlation", suffixes=("_cpu", "_gpu"))
            events = pd.DataFrame({
                "correlation": joined["correlation"],
                "cpu_duration": joined["dur_cpu"],
                "gpu_duration": joined["dur_gpu"],
                "launch_delay": np.maximum(joined["ts_gpu"] - (joined["ts_cpu"] + joined["dur_cpu"]), 0),
            })
            if visualize:
                _plot_launch_stats(rank, events, runtime_cutoff, launch_delay_cutoff)
            result[rank] = events
        return result

    # --- aten op -> kernel delays -------------------------------------------------------
    def get_aten_op_kernels_and_delay(self, ranks=None, sort_by=None) -> dict[int, pd.DataFrame]:
        """{rank: per (aten op, kernel sequence) the occurrence count and the mean delay (µs)
        from the op start to its first kernel launch and from that launch to the kernel}.

        A launch call (``cuda*LaunchKernel*``, ``cuLaunchKernel``, MTIA ``runFunction``) belongs
        to the latest-starting ``aten::*`` op that covers it (any thread; on equal starts the
        one first in the trace); an op's kernel sequence is its launches' kernels, " -> "-joined.
        Sorted by ``sort_by`` (default ``["occurrence_count"]``), descending; the index is the
        row's position in (aten_op_name, kernel_sequence) order. As HTA does, decoded ``s_name``
        and ``s_cat`` columns are added to the rank's trace frame. Unlike HTA, each rank's table
        holds that rank's ops only, launches without a kernel are skipped, and a rank without
        any gives an empty table.
        """
        if sort_by is None:
            sort_by = ["occurrence_count"]
        table = np.array(self.t.symbol_table.sym_table, dtype=object)
        aten_ids = [i for i, s in enumerate(table) if s.startswith("aten::")]
        runtime_ids = [i for i, s in enumerate(table) if _ATEN_RUNTIME.match(s)]
        result = {}
        for rank in _default_ranks(ranks):
            df = self.t.get_trace(rank)
            df["s_name"] = table[df["name"].to_numpy()] if len(df) else pd.Series(dtype=object)
            df["s_cat"] = table[df["cat"].to_numpy()] if len(df) else pd.Series(dtype=object)
            stats = _aten_launch_rows(df, aten_ids, runtime_ids, table)
            result[rank] = _aten_summary(stats, table).sort_values(by=sort_by, ascending=False)
            _plots.table(result[rank], "ATen Operations, Associated Kernels, ATen and Runtime Delays for Rank "
                         f"{rank}")  # HTA always draws this table
        return result


# --- module helpers ---------------------------------------------------------------------
AT_COLUMNS = ["aten_op_name", "kernel_sequence", "occurrence_count", "avg_aten_op_launch_delay", "avg_runtime_delay"]


def _aten_launch_rows(df: pd.DataFrame, aten_ids: list[int], runtime_ids: list[int], table: np.ndarray) -> pd.DataFrame:
    """One row per attributed launch: thread_id, aten_op_name, aten_op_start, the kernel's
    symbol id and the two delays, in the trace frame's order."""
    cpu = df["stream"].to_numpy() == -1
    names = df["name"].to_numpy()
    aten = df[cpu & np.isin(names, aten_ids)]
    runtime = df[cpu & np.isin(names, runtime_ids)]
    cols = ["thread_id", "aten_op_name", "aten_op_start", "kernel_id", "aten_op_delay", "runtime_delay"]
    if not len(aten) or not len(runtime):
        return pd.DataFrame(columns=cols)
    # latest start first found; on equal starts the op earliest in the frame (HTA's idxmax)
    order = np.lexsort((-np.arange(len(aten)), aten["ts"].to_numpy(np.float64)))
    a_ts = aten["ts"].to_numpy(np.float64)[order]
    a_end = aten["end"].to_numpy(np.float64)[order]
    r_ts = runtime["ts"].to_numpy(np.float64)
    r_end = runtime["end"].to_numpy(np.float64)
    found = last_at_or_before(a_end, np.searchsorted(a_ts, r_ts, side="right") - 1, r_end)
    # the kernel of a launch: the GPU row pointing back at it (first one in the frame)
    gpu = df[~cpu]
    kernels = gpu[~gpu["index_correlation"].duplicated(keep="first")].set_index("index_correlation")
    k_pos = kernels.index.get_indexer(runtime["index"].to_numpy())
    ok = (found >= 0) & (k_pos >= 0)
    op = aten.iloc[order[found[ok]]]
    run = runtime[ok]
    kernel = kernels.iloc[k_pos[ok]]
    return pd.DataFrame({
        "thread_id": op["tid"].to_numpy(),
        "aten_op_name": table[op["name"].to_numpy()],
        "aten_op_start": op["ts"].to_numpy(),
        "kernel_id": kernel["name"].to_numpy(),
        "aten_op_delay": run["ts"].to_numpy() - op["ts"].to_numpy(),
        "runtime_delay": kernel["ts"].to_numpy() - run["ts"].to_numpy(),
    }, columns=cols)


def _aten_summary(stats: pd.DataFrame, table) -> pd.DataFrame:
    """HTA's two groupings: per aten op instance (kernel names joined, first delays), then per
    (aten_op_name, kernel_sequence) the count and the delays' means rounded to 3 decimals."""
    if not len(stats):
        return pd.DataFrame({c: pd.Series(dtype=object if c in AT_COLUMNS[:2] else np.float64) for c in AT_COLUMNS})
    key = stats.groupby(["thread_id", "aten_op_name", "aten_op_start"], sort=False).ngroup().to_numpy()
    order = np.argsort(key, kind="stable")
    key = key[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    per_op = pd.DataFrame({
        "aten_op_name": stats["aten_op_name"].to_numpy(dtype=object)[order][starts],
        "kernel_sequence": join_runs(stats["kernel_id"].to_numpy()[order], table, starts),
        "aten_op_delay": stats["aten_op_delay"].to_numpy()[order][starts],
        "runtime_delay": stats["runtime_delay"].to_numpy()[order][starts],
    })
    g = per_op.groupby(["aten_op_name", "kernel_sequence"], sort=True)
    out = pd.DataFrame({
        "occurrence_count": g.size(),
        "avg_aten_op_launch_delay": g["aten_op_delay"].mean().round(3),
        "avg_runtime_delay": g["runtime_delay"].mean().round(3),
    }).reset_index()
    return out[AT_COLUMNS]


def counters_trace_path(source: Path, suffix: str) -> Path:
    """``<stem><suffix>.json[.gz]`` next to ``source`` (only the final ".json" is replaced)."""
    name = source.name
    at = name.rfind(".json")
    new = name[:at] + suffix + name[at:] if at >= 0 else name + suffix + ".json"
    return source.with_name(new)


def _trace_with_events(data: bytes, extra: list[dict], gzip_output: bool) -> bytes:
    """The trace JSON ``data`` with ``extra`` appended to its ``traceEvents`` (gzipped if asked).

    The original events are not decoded: the top level is split into raw values and the new
    records are spliced in before the array's closing bracket, so the file's own events are
    kept byte for byte, and the pieces are compressed as they are produced (no whole-trace
    copies besides the output).
    """
    import msgspec

    new = msgspec.json.encode(extra)[1:-1]  # the records, comma-separated, without brackets
    try:
        top = msgspec.json.decode(data, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError:  # non-standard JSON (NaN literals): the stdlib reads and writes it
        raw = json.loads(data)
        raw.setdefault("traceEvents", []).extend(extra)
        pieces = [json.dumps(raw).encode("utf-8")]
    else:
        top.setdefault("traceEvents", msgspec.Raw(b"[]"))
        pieces = []
        for i, (key, value) in enumerate(top.items()):
            pieces.append((b"{" if i == 0 else b",") + msgspec.json.encode(key) + b":")
            view = memoryview(value)
            if key != "traceEvents":
                pieces.append(view)
                continue
            end = len(view) - 1
            while end > 0 and view[end] != ord("]"):  # skip trailing whitespace (a few bytes)
                end -= 1
            last = end - 1
            while last > 0 and chr(view[last]).isspace():
                last -= 1
            pieces += [view[:end], b"," if new and view[last] != ord("[") else b"", new, b"]"]
        pieces.append(b"}")
    if not gzip_output:
        return b"".join(pieces)
    compressor = _gzip_compressor()
    return b"".join([compressor.compress(p) for p in pieces] + [compressor.flush()])


def _gzip_compressor():
    try:
        from isal import isal_zlib

        return isal_zlib.compressobj(2, isal_zlib.DEFLATED, 31)  # 31: gzip container
    except ImportError:  # pragma: no cover - isal is a declared dependency
        import zlib

        return zlib.compressobj(6, zlib.DEFLATED, 31)


def _plot_launch_stats(rank: int, events: pd.DataFrame, runtime_cutoff, launch_delay_cutoff) -> None:
    """HTA's three histograms: short GPU kernels, runtime outliers, launch-delay outliers."""
    cpu, gpu, delay = events["cpu_duration"], events["gpu_duration"], events["launch_delay"]
    panels = [
        (cpu[(cpu <= runtime_cutoff) & (gpu < cpu)], 30,
         f"Short GPU kernels (gpu op duration < cpu op duration) on rank {rank}", "Cuda Runtime Event Duration (us)"),
        (cpu[cpu > runtime_cutoff], 300,
         f"Runtime Event Duration Outliers (duration > {runtime_cutoff} us) on rank {rank}",
         "Cuda Runtime Event Duration (us)"),
        (delay[delay > launch_delay_cutoff], 300,
         f"Launch Delay Outliers (duration > {launch_delay_cutoff} us) on rank {rank}", "Launch Delay Duration (us)"),
    ]
    for values, bins, title, label in panels:
        _plots.histogram(values.to_numpy(dtype=np.float64), bins, title, label)
