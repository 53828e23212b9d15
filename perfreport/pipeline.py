"""Wiring: load -> analyses -> documents. No analysis logic lives here."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import __version__
from .analyses import ANALYSES
from .load import load
from .load.scanner import scanner_name
from .model import TraceSet

SUMMARY_SCHEMA_VERSION = 1


@dataclass(frozen=True, slots=True)
class Analysis:
    """The loaded traces and every analysis table computed from them."""

    traces: TraceSet
    tables: Mapping[str, pd.DataFrame]
    load_s: float
    analyze_s: float


def analyze(source: str | Path | Mapping[int, str | Path], *, workers: int | None = None) -> Analysis:
    """Load ``source`` and run every registered analysis on all ranks."""
    t0 = time.perf_counter()
    traces = load(source, workers=workers)
    t1 = time.perf_counter()
    tables = {name: fn(traces) for name, fn in ANALYSES}
    return Analysis(traces, tables, load_s=t1 - t0, analyze_s=time.perf_counter() - t1)


def rank_metadata(traces: TraceSet) -> list[dict]:
    """Per-rank provenance: file, rank and where it came from, sizes, trace metadata."""
    out = []
    for t in traces:
        m = t.meta
        out.append({
            "rank": t.rank,
            "file": m.path,
            "rank_source": m.rank_source,
            "json_bytes": m.json_bytes,
            "schema_version": m.schema_version,
            "world_size": m.world_size,
            "gpu_name": m.gpu_name(),
            "base_time_ns": m.base_time_ns,
            "display_time_unit": m.display_time_unit,
            "distributed_info": {k: v for k, v in m.distributed_info.items() if k != "pg_config"},
            "device_properties": m.device_properties,
        })
    return out


def summary_document(analysis: Analysis) -> dict:
    """The content of ``summary.json``: every table as records, per rank, plus provenance."""
    return {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "perfreport_version": __version__,
        "source": analysis.traces.source,
        "scanner": scanner_name(),
        "timings_s": {"load": round(analysis.load_s, 3), "analyze": round(analysis.analyze_s, 3)},
        "ranks": rank_metadata(analysis.traces),
        **{name: df.to_dict(orient="records") for name, df in analysis.tables.items()},
    }
