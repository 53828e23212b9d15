"""HTA 0.5.0's per-rank trace DataFrame, rebuilt from perfreport's columnar model.

HTA's analyses run on a pandas frame with HTA's own load-time choices baked in; to give the
same numbers, ``perfreport.hta`` rebuilds that frame (and only ``perfreport.hta`` uses it):

* only events with both ``dur`` and ``cat`` are kept, minus the ``Trace`` span;
* when the trace has fractional-µs timestamps, ts := ceil(ts), end := floor(ts + dur),
  dur := max(end - ts, 0) (HTA's ns rounding; HTA itself lets dur become -1);
* ``stream`` is -1 where the arg is missing or not a number (ROCm runtime calls write "0x0");
* ``index`` is the raw event position; ``index_correlation`` links CPU and GPU rows through
  ``correlation`` (-1 none, 0 no partner found, else the partner's index; last partner wins);
* ``iteration`` is the ProfilerStep number: by time for CPU rows (stream < 0, and cpu_op rows
  on stream 0), through ``index_correlation`` for GPU rows (stream > 0), NaN for the rest;
* all ranks are shifted by the global minimum ts; ``end`` = ts + dur after the shift;
* the last ProfilerStep is dropped (unless ``include_last_profiler_step``), and so are GPU
  rows whose launch is not kept; rows are ordered GPU block first, then CPU block.

``cat`` and ``name`` are ids into one global symbol table (:class:`SymbolTable`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..model import TEXT_ID_BASE, RankTrace, TraceSet

HTA_STEP = re.compile(r"^ProfilerStep\s*#\s*(\d+)")
_SYNC_NAMES = ("Event Sync", "Context Sync")
_RUNTIME_CATS = ("cuda_runtime", "cuda_driver", "Runtime")

FRAME_COLUMNS = [
    "index", "cat", "name", "pid", "tid", "ts", "dur", "end", "stream", "correlation", "bytes",
    "memory_bw_gbps", "wait_on_stream", "wait_on_cuda_event_record_corr_id", "input_dims",
    "input_type", "input_strides", "external_id", "index_correlation", "iteration",
]


@dataclass
class SymbolTable:
    """HTA's TraceSymbolTable: one list of strings for all ranks; ids are positions."""

    sym_table: list[str] = field(default_factory=list)
    sym_index: dict[str, int] = field(default_factory=dict)

    def add(self, strings) -> np.ndarray:
        """Ids of ``strings`` (adding the new ones); the remap array for a rank's codes."""
        ids = np.empty(len(strings), dtype=np.int64)
        for i, s in enumerate(strings):
            j = self.sym_index.get(s)
            if j is None:
                j = self.sym_index[s] = len(self.sym_table)
                self.sym_table.append(s)
            ids[i] = j
        return ids

    def get_sym_table(self) -> list[str]:
        return self.sym_table

    def get_sym_id_map(self) -> dict[str, int]:
        return self.sym_index

    def add_symbols_to_trace_df(self, trace_df: pd.DataFrame, col: str) -> None:
        """Decode symbol-id column ``col`` of ``trace_df`` in place ("" for ids outside the
        table), as HTA's ``TraceSymbolTable.add_symbols_to_trace_df``."""
        table = np.array(self.sym_table + [""], dtype=object)
        ids = trace_df[col].to_numpy()
        ids = np.where((ids >= 0) & (ids < len(self.sym_table)), ids, len(self.sym_table)).astype(np.int64)
        trace_df[col] = table[ids]

    def find_matches(self, pattern: str) -> list[int]:
        """Ids of the symbols containing ``pattern`` literally (HTA escapes it)."""
        return [i for i, s in enumerate(self.sym_table) if pattern in s]


def _python_repr(text: str) -> str:
    """HTA keeps list-valued args as Python's str() of the decoded JSON."""
    try:
        return str(json.loads(text))
    except (ValueError, TypeError):
        return text


def raw_frame(trace: RankTrace, symbols: SymbolTable) -> tuple[pd.DataFrame, bool]:
    """The rank's rows before alignment and last-step trimming, and whether ts were rounded."""
    remap = symbols.add(list(trace.strings))
    trace_cat = trace.code("Trace")
    keep = np.isfinite(trace.dur) & np.isfinite(trace.ts) & (trace.cat >= 0) & (trace.cat != trace_cat)
    rows = np.flatnonzero(keep)
    # HTA reads ts as float64 absolute µs: unix-epoch ns timestamps lose their last digits
    # there, and HTA's numbers carry that loss, so this frame reproduces it
    ts_abs = trace.ts + trace.meta.ts_origin_us
    ts_all = ts_abs[np.isfinite(ts_abs)]
    rounded = bool(len(ts_all) and np.any(ts_all != np.floor(ts_all)))
    ts, dur = ts_abs[rows], trace.dur[rows]
    if rounded:
        # HTA's rounding; it gives dur = -1 for sub-µs events straddling an integer µs
        # (HTA issue #317), which we clamp to 0: a duration is never negative.
        end = np.floor(ts + dur)
        ts = np.ceil(ts)
        dur = np.maximum(end - ts, 0.0)
    stream = trace.arg("stream", -1, rows)
    stream[np.isin(trace.cat[rows], trace.codes(_RUNTIME_CATS))] = -1

    def arg(key: str, default):
        return trace.arg(key, default, rows)

    def text_arg(key: str) -> np.ndarray:
        codes = trace.arg(key, -1, rows).astype(np.int64)
        uniq, inv = np.unique(codes, return_inverse=True)
        texts = np.array(["-1" if c < 0 else _python_repr(trace.strings[c]) for c in uniq], dtype=object)
        return texts[inv.ravel()]

    frame = pd.DataFrame({
        "index": rows.astype(np.int64),
        "cat": remap[trace.cat[rows]],
        "name": remap[trace.name[rows]],
        "pid": _hta_ids(trace.pid_at(rows), trace.strings),
        "tid": _hta_ids(trace.tid_at(rows), trace.strings),
        "ts": ts if rounded else ts.astype(np.int64) if np.all(ts == np.floor(ts)) else ts,
        "dur": dur,
        "stream": stream,
        "correlation": trace.arg("correlation", -1, rows),
        "bytes": arg("bytes", -1),
        "memory_bw_gbps": arg("memory bandwidth (GB/s)", 0.0).astype(np.float64),
        "wait_on_stream": arg("wait_on_stream", -1),
        "wait_on_cuda_event_record_corr_id": arg("wait_on_cuda_event_record_corr_id", -1),
        "input_dims": text_arg("Input Dims"),
        "input_type": text_arg("Input type"),
        "input_strides": "-1",
        "external_id": arg("External id", -1),
    })
    frame["bytes"] = frame["bytes"].where(frame["bytes"] != np.iinfo(np.int64).min, -1)
    frame["index_correlation"] = _index_correlation(frame, symbols)
    frame["iteration"] = _iteration(frame, symbols)
    return frame, rounded


def _hta_ids(values: np.ndarray, strings: np.ndarray) -> np.ndarray:
    """pid/tid as HTA holds them: numbers, and the original text for non-numeric ids."""
    synthetic = values <= TEXT_ID_BASE
    if not synthetic.any():
        return values
    out = values.astype(object)
    out[synthetic] = strings[TEXT_ID_BASE - values[synthetic]]
    return out


def _index_correlation(frame: pd.DataFrame, symbols: SymbolTable) -> np.ndarray:
    corr = frame["correlation"].to_numpy()
    ic = np.minimum(corr, 0)
    sync_ids = [symbols.sym_index[s] for s in _SYNC_NAMES if s in symbols.sym_index]
    gpu = ((frame["stream"].to_numpy() >= 0) & (corr >= 0)) | frame["name"].isin(sync_ids).to_numpy()
    has = corr != -1
    idx = frame["index"].to_numpy()
    for side, other in ((gpu & has, ~gpu & has), (~gpu & has, gpu & has)):
        # partner = the last row (in row order) of the other side with the same correlation
        partners = pd.Series(idx[other], index=corr[other])
        partners = partners[~partners.index.duplicated(keep="last")]
        found = pd.Series(corr[side]).map(partners)
        rows = np.flatnonzero(side)
        ok = found.notna().to_numpy()
        ic[rows[ok]] = found.to_numpy()[ok].astype(np.int64)
    return ic


def _iteration(frame: pd.DataFrame, symbols: SymbolTable) -> np.ndarray:
    n = len(frame)
    iteration = np.full(n, np.nan)
    stream = frame["stream"].to_numpy()
    cpu_op = symbols.sym_index.get("cpu_op", -2)
    cpu = (stream < 0) | ((stream == 0) & (frame["cat"].to_numpy() == cpu_op))
    iteration[cpu] = -1
    step_ids = {i: int(m.group(1)) for i, s in enumerate(symbols.sym_table) if (m := HTA_STEP.match(s))}
    names = frame["name"].to_numpy()
    is_step = np.isin(names, list(step_ids)) & cpu
    if is_step.any():
        ts = frame["ts"].to_numpy(dtype=np.float64)
        dur = frame["dur"].to_numpy(dtype=np.float64)
        step_rows = np.flatnonzero(is_step)
        for r in step_rows:  # loop over steps (a handful), each a vectorised mask; later rows win
            inside = cpu & (ts >= ts[r]) & (ts < ts[r] + dur[r])
            iteration[inside] = step_ids[names[r]]
    gpu = stream > 0
    ic = frame["index_correlation"].to_numpy()
    pos = pd.Series(np.arange(n), index=frame["index"].to_numpy())
    linked = gpu & (ic > 0)
    iteration[gpu] = -1
    partner = pos.reindex(ic[linked]).to_numpy()
    ok = ~np.isnan(partner)
    rows = np.flatnonzero(linked)
    iteration[rows[ok]] = iteration[partner[ok].astype(np.int64)]
    if not np.isnan(iteration).any():
        return iteration.astype(np.int64)
    return iteration


def trim_last_step(frame: pd.DataFrame, symbols: SymbolTable, include_last_profiler_step: bool) -> pd.DataFrame:
    """HTA's ``_filter_irrelevant_gpu_kernels``: drop the last step and orphan GPU rows."""
    step_ids = [i for i, s in enumerate(symbols.sym_table) if HTA_STEP.match(s)]
    if len(step_ids) <= 1:
        return frame
    sync_ids = [symbols.sym_index[s] for s in _SYNC_NAMES if s in symbols.sym_index]
    gpu = ((frame["stream"] >= 0) & (frame["correlation"] >= 0)) | frame["name"].isin(sync_ids)
    cpu_df, gpu_df = frame[~gpu], frame[gpu]
    steps = cpu_df[cpu_df["name"].isin(step_ids)]
    if include_last_profiler_step:
        limit = steps["end"].max() if len(steps) else cpu_df["ts"].min()
        cpu_kept = cpu_df[cpu_df["ts"] <= limit]
    else:
        limit = steps["ts"].max() if len(steps) else cpu_df["ts"].min()
        cpu_kept = cpu_df[cpu_df["ts"] < limit]
    gpu_kept = gpu_df[gpu_df["correlation"].isin(cpu_kept["correlation"])]
    return pd.concat([gpu_kept, cpu_kept])


def build_frames(traces: TraceSet, include_last_profiler_step: bool = False,
                 max_event_duration_us: float | None = None):
    """(frames by rank, symbol table, global min ts): HTA's ``Trace`` after ``load_traces``.
    Rows longer than ``max_event_duration_us`` are dropped first (HTA 0.6's parser filter)."""
    symbols = SymbolTable()
    raws = {t.rank: raw_frame(t, symbols)[0] for t in traces}
    if max_event_duration_us is not None:
        raws = {r: f[f["dur"].to_numpy() <= max_event_duration_us] for r, f in raws.items()}
    non_empty = [f["ts"].min() for f in raws.values() if len(f)]
    min_ts = min(non_empty) if non_empty else 0
    if float(min_ts).is_integer():
        min_ts = int(min_ts)
    frames = {}
    for rank, f in raws.items():
        f["ts"] = f["ts"] - min_ts
        f["end"] = f["ts"] + f["dur"]
        f = trim_last_step(f, symbols, include_last_profiler_step)
        frames[rank] = f.set_index("index", drop=False).rename_axis(None)[FRAME_COLUMNS]
    return frames, symbols, min_ts


__all__ = ["SymbolTable", "build_frames", "FRAME_COLUMNS"]
