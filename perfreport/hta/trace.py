"""``TraceAnalysis.t``: HTA's ``Trace`` object, backed by perfreport's loader.

HTA users reach into ``analyzer.t`` for the per-rank frames (``t.get_trace(rank)``), the
symbol table (``t.symbol_table``) and metadata; this class offers those names over frames
rebuilt by :mod:`._frame`.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path

import msgspec
import pandas as pd

from ..load.files import read_trace_bytes
from .. import limits
from ..load import load
from ..model import TraceSet
from ._frame import SymbolTable, build_frames


class FrameAccess:
    """HTA's ``Trace`` accessors over ``self.traces`` {rank: frame}, shared by the analysed trace
    (:class:`HtaTrace`) and the unfiltered one of a ``LabeledTrace``."""

    traces: dict[int, pd.DataFrame]

    def get_ranks(self) -> list[int]:
        return sorted(self.traces)

    def get_trace(self, rank: int) -> pd.DataFrame:
        """The rank's frame; ValueError naming the ranks present for a rank not loaded."""
        try:
            return self.traces[rank]
        except KeyError:
            raise ValueError(f"rank {rank!r} is not in the trace; ranks present: {self.get_ranks()}") from None

    def get_all_traces(self) -> dict[int, pd.DataFrame]:
        return self.traces


class HtaTrace(FrameAccess):
    """The loaded trace set in HTA's shape: ``traces`` {rank: DataFrame}, ``symbol_table``,
    ``min_ts``, ``meta_data`` {rank: dict}, ``trace_files`` {rank: path}."""

    def __init__(self, trace_files: dict[int, str] | None = None, trace_dir: str = "/tmp/trace",
                 include_last_profiler_step: bool = False, parse: bool = True,
                 max_event_duration_us: float | None = None) -> None:
        self.trace_path = str(trace_dir)
        if trace_files is not None:
            source = {int(r): str(p if Path(p).is_absolute() else Path(trace_dir) / p) for r, p in trace_files.items()}
        else:
            source = trace_dir
        self.traceset: TraceSet = _load(source, max_event_duration_us)
        self.trace_files = {t.rank: t.meta.path for t in self.traceset}
        self.meta_data = {t.rank: meta_dict(t) for t in self.traceset}
        self.include_last_profiler_step = include_last_profiler_step
        frames, symbols, min_ts = build_frames(self.traceset, include_last_profiler_step, max_event_duration_us)
        self.traces: dict[int, pd.DataFrame] = frames
        self.symbol_table: SymbolTable = symbols
        self.min_ts = min_ts
        self.is_parsed = True

    def get_raw_trace_for_one_rank(self, rank: int = 0) -> dict:
        """The rank's file decoded as JSON (HTA re-reads raw traces for overlays)."""
        self.get_trace(rank)  # ValueError for a rank not loaded
        data = read_trace_bytes(Path(self.trace_files[rank]))
        enabled = gc.isenabled()
        gc.disable()  # millions of acyclic dicts: collector passes would cost ~40 % here
        try:
            return msgspec.json.decode(data)
        except msgspec.DecodeError:  # e.g. NaN tokens, which Python's json accepts
            return json.loads(data)
        finally:
            if enabled:
                gc.enable()

    def get_iterations(self, rank: int | None = None) -> list[int]:
        ranks = [rank] if rank is not None else self.get_ranks()
        its = set()
        for r in ranks:
            col = self.get_trace(r)["iteration"].dropna()
            its.update(int(i) for i in col.unique() if i >= 0)
        return sorted(its)

    def get_trace_duration(self, rank: int) -> float:
        f = self.get_trace(rank)
        return float(f["ts"].max() - f["ts"].min()) if len(f) else 0.0

    def get_trace_start_unixtime_ns(self, rank: int) -> int:
        return int(self.min_ts * 1000) + int(self.meta_data[rank]["baseTimeNanoseconds"])

    def get_device_type(self, rank: int = 0) -> str:
        names = set(self.symbol_table.sym_table)
        if "cudaLaunchKernel" in names:
            return "NVIDIA GPU"
        if "hipLaunchKernel" in names:
            return "AMD GPU"
        return "UNKNOWN GPU"


def _load(source, max_event_duration_us: float | None) -> TraceSet:
    """The loader drops events longer than its ``max_span_s`` limit (1 day by default); a longer
    ``max_event_duration_us`` (HTA 0.6's default is 7 days) raises that limit for this load."""
    limit_us = limits.current().max_span_us
    if max_event_duration_us is None or max_event_duration_us <= limit_us:
        return load(source)
    with limits.override([f"max_span_s={max_event_duration_us / 1e6:g}"]):
        return load(source)


def meta_dict(trace) -> dict:
    m = trace.meta
    out = dict(m.other)
    for key, value in (("schemaVersion", m.schema_version), ("distributedInfo", m.distributed_info or None),
                       ("deviceProperties", m.device_properties or None), ("baseTimeNanoseconds", m.base_time_ns),
                       ("displayTimeUnit", m.display_time_unit), ("traceName", m.trace_name)):
        if value is not None:
            out[key] = value
    return out
