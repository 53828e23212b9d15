"""Whole-trace tables the GPU part of the critical path needs (HTA 0.5.0 semantics).

All are computed on the rank's full frame, not the clipped one:

* ``queue_lengths``: HTA's queue-length series (spec §8.1) reduced to index -> queue length
  after that point: +1 at a launch's ts, -1 at its GPU op's start, running sum per stream.
* ``launch_table``: launch runtime calls (§3 list, index_correlation > 0) that have a GPU row,
  in ts order, numbered ``launch_id`` 0.. in that order, with the GPU row's stream and pid.
* ``record_previous_launch``: for each ``cudaEventRecord``, the last launch (by launch_id) on
  the GPU stream the event was recorded on, at or before the record (``Event Sync`` and
  ``Stream Wait Event`` rows name the record through ``wait_on_cuda_event_record_corr_id``).
* ``wait_next_launch``: for each ``cudaStreamWaitEvent``, the next launch from the same CPU
  thread onto the waiting stream.

HTA sorts with pandas' default (unstable) quicksort; equal timestamps then come out in
numpy's quicksort order, which ``quicksort_order`` reproduces on the same input order.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from ._frame import SymbolTable

LAUNCH_NAMES = (
    "cudaMemsetAsync", "cudaMemcpyAsync", "cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel",
    "runFunction - job_prep_and_submit_for_execution", "hipLaunchKernel", "hipExtModuleLaunchKernel",
    "hipMemcpyAsync", "hipMemsetAsync", "hipMemcpyWithStream",
)


def quicksort_order(values) -> np.ndarray:
    """pandas ``sort_values`` order (numpy quicksort); integral floats sort as HTA's int64."""
    arr = np.asarray(values)
    if arr.dtype.kind == "f" and len(arr) and np.all(np.isfinite(arr)) and np.all(arr == np.floor(arr)):
        arr = arr.astype(np.int64)
    return np.argsort(arr, kind="quicksort")


def _ids(symbols: SymbolTable, names) -> list[int]:
    return [symbols.sym_index[n] for n in names if n in symbols.sym_index]


def _rows_in(frame: pd.DataFrame, keys: pd.DataFrame, cols: list[str]) -> np.ndarray:
    """Rows of ``frame`` whose ``cols`` values occur together in a row of ``keys``."""
    def as_index(df):
        return pd.MultiIndex.from_arrays([df[c].to_numpy(dtype=np.float64) if df[c].dtype.kind in "iuf"
                                          else df[c].to_numpy(dtype=object) for c in cols])
    return as_index(frame).isin(as_index(keys))


def launch_rows(frame: pd.DataFrame, symbols: SymbolTable) -> pd.DataFrame:
    """Launch runtime calls that name a GPU partner (HTA's runtime-launch query)."""
    mask = frame["name"].isin(_ids(symbols, LAUNCH_NAMES)) & (frame["index_correlation"] > 0)
    return frame[mask]


def queue_lengths(frame: pd.DataFrame, symbols: SymbolTable) -> pd.Series | None:
    """Queue length after each launch / GPU-op point, by event index; None without launches."""
    launches = launch_rows(frame, symbols)
    gpu = frame[frame["stream"].ne(-1)]
    by_corr = gpu[["stream", "correlation"]].set_index("correlation")
    launched = launches[["index", "ts", "correlation"]].join(by_corr, on="correlation")
    started = gpu[gpu["correlation"].isin(launches["correlation"])]
    if len(launched) == 0 and len(started) == 0:
        return None
    ts = np.concatenate([launched["ts"].to_numpy(), started["ts"].to_numpy()])
    index = np.concatenate([launched["index"].to_numpy(), started["index"].to_numpy()])
    stream = np.concatenate([launched["stream"].to_numpy(dtype=np.float64),
                             started["stream"].to_numpy(dtype=np.float64)])
    step = np.concatenate([np.ones(len(launched)), -np.ones(len(started))])
    order = quicksort_order(ts)
    length = pd.Series(step[order]).groupby(stream[order]).cumsum()
    out = pd.Series(length.to_numpy(), index=index[order])
    out = out[~np.isnan(stream[order])]
    return out[~out.index.duplicated(keep="first")]


def launch_table(frame: pd.DataFrame, symbols: SymbolTable) -> pd.DataFrame:
    """Launches in ts order with launch_id, the GPU row's ``stream`` and ``gpu`` (its pid)."""
    gpu = frame[(frame["stream"] != -1) & (frame["index_correlation"] > 0)]
    launches = launch_rows(frame, symbols)
    launches = launches.iloc[quicksort_order(launches["ts"])]
    table = launches[["index", "pid", "tid", "ts", "name", "correlation", "index_correlation"]].merge(
        gpu[["stream", "index", "pid"]].rename(columns={"index": "gpu_index", "pid": "gpu"}),
        left_on="index_correlation", right_on="gpu_index", how="inner")
    table["launch_id"] = np.arange(len(table), dtype=np.float64)
    return table.drop(columns=["gpu_index", "index_correlation"])


def record_previous_launch(frame: pd.DataFrame, symbols: SymbolTable,
                           launches: pd.DataFrame) -> pd.Series | None:
    """``cudaEventRecord`` correlation -> index of the previous launch on the recorded stream
    (-1 if none); None when the trace has no cudaEventRecord or no record names a stream."""
    record_id = symbols.sym_index.get("cudaEventRecord")
    if record_id is None:
        return None
    records = frame[frame["name"] == record_id]
    records = records.iloc[quicksort_order(records["ts"])]
    waits = frame[frame["wait_on_stream"] > -1]
    stream_of = waits[["wait_on_cuda_event_record_corr_id", "wait_on_stream", "pid"]].drop_duplicates().rename(
        columns={"wait_on_cuda_event_record_corr_id": "correlation", "wait_on_stream": "stream", "pid": "gpu"})
    # HTA validates this merge one-to-one (MergeError otherwise); we keep the first of duplicates
    stream_of = stream_of.drop_duplicates("correlation")
    records = records[["pid", "tid", "ts", "name", "correlation"]].drop_duplicates("correlation").merge(
        stream_of, on="correlation", how="left").dropna(subset=["stream"])
    if len(records) == 0:
        return None
    cols = ["ts", "gpu", "stream", "launch_id", "index", "correlation"]
    comb = pd.concat([launches[cols], records.assign(launch_id=np.nan, index=np.nan)[cols]], ignore_index=True)
    comb = comb.iloc[quicksort_order(comb["ts"])]
    is_record = comb["launch_id"].isna().to_numpy()
    in_group = _rows_in(comb, records, ["gpu", "stream"])
    comb = comb[in_group]
    is_record = is_record[in_group]
    previous = comb["launch_id"].fillna(-1).groupby([comb["gpu"], comb["stream"]]).cummax()
    launch_index = pd.Series(launches["index"].to_numpy(), index=launches["launch_id"].to_numpy())
    prev_index = launch_index.reindex(previous[is_record].to_numpy()).fillna(-1).to_numpy(np.int64)
    return pd.Series(prev_index, index=comb["correlation"].to_numpy()[is_record])


def wait_next_launch(frame: pd.DataFrame, symbols: SymbolTable, launches: pd.DataFrame) -> pd.Series | None:
    """``cudaStreamWaitEvent`` index -> index of the next launch from its thread onto the waiting
    stream (-1 if none); None without cudaStreamWaitEvent / Stream Wait Event in the trace."""
    api = symbols.sym_index.get("cudaStreamWaitEvent")
    if api is None or "Stream Wait Event" not in symbols.sym_index:
        return None
    gpu = frame[(frame["stream"] != -1) & (frame["index_correlation"] > 0)]
    calls = frame[(frame["name"] == api) & (frame["index_correlation"] > 0)]
    calls = calls.iloc[quicksort_order(calls["ts"])]
    calls = calls[["index", "ts", "pid", "tid", "index_correlation"]].merge(
        gpu[["stream", "index"]].rename(columns={"index": "gpu_index"}),
        left_on="index_correlation", right_on="gpu_index", how="inner")
    if len(calls) == 0:
        return pd.Series(dtype=np.int64)
    cols = ["ts", "pid", "tid", "stream", "launch_id", "index"]
    comb = pd.concat([launches[cols], calls.assign(launch_id=np.nan)[cols]], ignore_index=True)
    comb = comb.iloc[quicksort_order(comb["ts"])]
    is_call = comb["launch_id"].isna().to_numpy()
    in_group = _rows_in(comb, calls, ["pid", "tid", "stream"])
    comb, is_call = comb[in_group], is_call[in_group]
    ids = comb["launch_id"].fillna(float(sys.maxsize))
    rev = ids.iloc[::-1]
    following = rev.groupby([comb["pid"].iloc[::-1], comb["tid"].iloc[::-1], comb["stream"].iloc[::-1]]).cummin()
    following = following.iloc[::-1].to_numpy()
    launch_index = pd.Series(launches["index"].to_numpy(), index=launches["launch_id"].to_numpy())
    nxt = launch_index.reindex(following[is_call]).fillna(-1).to_numpy(np.int64)
    return pd.Series(nxt, index=comb["index"].to_numpy()[is_call].astype(np.int64))
