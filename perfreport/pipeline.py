"""Wiring: load -> analyses -> gate -> documents. No analysis or judging logic lives here."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import __version__
from ._io import sha256_file
from .analyses import ANALYSES
from .analyses.attribution import Explanation, explain
from .analyses.collectives import collectives_per_step
from .analyses.diff import op_steps
from .analyses.memory import memory_note
from .analyses.series import time_series
from .analyses.step_metrics import step_metrics
from .config import Config
from .errors import TraceError
from .gate.baselines import DEFAULT_STORE, StoredBaseline
from .gate.baselines import load_traces as load_stored
from .gate.baselines import read_baseline
from .gate.baselines import resolve as resolve_baseline
from .gate.metrics import SideData, side_data, versions_of
from .gate.verdict import Verdict, evaluate
from .load import load
from .load.scanner import scanner_name
from .model import TraceSet
from .report.json_report import compare_document, side_record

SUMMARY_SCHEMA_VERSION = 1
log = logging.getLogger(__name__)


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
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "ranks": rank_metadata(analysis.traces),
        "files": [{"rank": t.rank, "file": t.meta.path,
                   "sha256": sha256_file(Path(t.meta.path)) if Path(t.meta.path).is_file() else None}
                  for t in analysis.traces],
        **{name: df.to_dict(orient="records") for name, df in analysis.tables.items()},
        "series": time_series(analysis.traces),
        "memory_note": memory_note(analysis.traces),
    }


# --- compare: baseline vs candidate -> verdict ---------------------------------------------------
@dataclass(frozen=True, slots=True)
class Comparison:
    """Everything a compare produced: both sides' analyses, the gate's verdict, the attribution
    of the step-time change (None when the runs share no rank; ``explanation_note`` says why)
    and the configuration used. ``baseline_ref`` is the stored baseline when BASELINE named one."""

    baseline: Analysis
    candidate: Analysis
    verdict: Verdict
    explanation: Explanation | None
    config: Config
    baseline_ref: StoredBaseline | None = None
    explanation_note: str | None = None
    gate_s: float = 0.0


def analyze_loaded(traces: TraceSet, load_s: float = 0.0) -> Analysis:
    """:func:`analyze` for traces already in memory (a stored baseline's cache)."""
    t0 = time.perf_counter()
    tables = {name: fn(traces) for name, fn in ANALYSES}
    return Analysis(traces, tables, load_s=load_s, analyze_s=time.perf_counter() - t0)


def load_baseline(ref: str | Path, *, store: str | Path = DEFAULT_STORE,
                  workers: int | None = None) -> tuple[TraceSet, StoredBaseline | None, float]:
    """(traces, stored baseline or None, load seconds) for a BASELINE argument: a stored
    baseline's folder, a baseline name in ``store``, or a trace folder/file."""
    t0 = time.perf_counter()
    stored = resolve_baseline(ref, store)
    if stored is None:
        traces = load(ref, workers=workers)
    else:
        traces = load_stored(stored, fallback=lambda files: load(files, workers=workers))
    return traces, stored, time.perf_counter() - t0


def load_candidate(ref: str | Path, *, store: str | Path = DEFAULT_STORE,
                   workers: int | None = None) -> tuple[TraceSet, float]:
    """(traces, load seconds) for a CANDIDATE argument: a trace folder/file, or a stored
    baseline (its folder, or a name in ``store`` that is not a path) to compare two baselines."""
    t0 = time.perf_counter()
    path = Path(ref)
    stored = None
    if path.is_dir() and (path / "manifest.json").is_file():
        stored = read_baseline(path)
    elif not path.exists() and (Path(store) / str(ref) / "manifest.json").is_file():
        stored = read_baseline(Path(store) / str(ref))
    if stored is not None:
        traces = load_stored(stored, fallback=lambda files: load(files, workers=workers))
    else:
        traces = load(ref, workers=workers)
    return traces, time.perf_counter() - t0


def gate_side(label: str, traces: TraceSet, config: Config) -> SideData:
    """One side reduced to the gate's per-step inputs (:mod:`perfreport.gate.metrics`)."""
    steps = step_metrics(traces, launch_delay_cutoff_us=config.steps.launch_delay_cutoff_us,
                         runtime_cutoff_us=config.steps.runtime_cutoff_us)
    versions: dict[str, str] = {}
    for t in traces:
        versions.update({k: v for k, v in versions_of(t.meta).items() if k not in versions})
    world = [t.meta.world_size for t in traces if t.meta.world_size]
    return side_data(label, steps, op_steps(traces, exact=config.exact_kernel_names), collectives_per_step(traces),
                     ranks=tuple(traces.rank_ids), gpus={t.rank: t.meta.gpu_name() for t in traces},
                     world_size=max(world) if world else None, versions=versions, steps=config.steps)


def compare(baseline: str | Path, candidate: str | Path, *, config: Config | None = None,
            store: str | Path = DEFAULT_STORE, workers: int | None = None) -> Comparison:
    """Compare ``candidate`` (a trace folder or file, or a stored baseline) with ``baseline``
    (a stored baseline name in ``store``, its folder, or a trace folder/file).

    Loads and analyses both sides, judges them with ``config`` (default: ``Config()``) and
    explains the step-time change. Raises TraceError/BaselineError for unusable inputs.
    """
    return compare_many(baseline, [candidate], config=config, store=store, workers=workers)[0]


def compare_many(baseline: str | Path, candidates: list[str | Path], *, config: Config | None = None,
                 store: str | Path = DEFAULT_STORE, workers: int | None = None) -> list[Comparison]:
    """:func:`compare` of several candidates (training setups) with one baseline, which is
    loaded, analysed and reduced for the gate once."""
    config = config or Config()
    b_traces, stored, b_load_s = load_baseline(baseline, store=store, workers=workers)
    b_analysis = analyze_loaded(b_traces, b_load_s)
    b_side = gate_side("baseline", b_traces, config)
    out = []
    for candidate in candidates:
        c_traces, c_load_s = load_candidate(candidate, store=store, workers=workers)
        c_analysis = analyze_loaded(c_traces, c_load_s)
        t0 = time.perf_counter()
        c_side = gate_side("candidate", c_traces, config)
        verdict = evaluate(b_side, c_side, config)
        explanation, note = None, None
        try:  # attribute over the very steps the gate judged (warm-up and skipped steps left out)
            explanation = explain(b_traces, c_traces, exact_names=config.exact_kernel_names,
                                  baseline_steps=judged_steps(b_side), candidate_steps=judged_steps(c_side))
        except TraceError as exc:
            note = f"no attribution: {exc.problem}"
        except Exception as exc:  # the attribution explains; it must never take the verdict down with it
            log.warning("attribution failed: %s: %s", type(exc).__name__, exc)
            note = f"no attribution: internal error ({type(exc).__name__}: {exc})"
        out.append(Comparison(baseline=b_analysis, candidate=c_analysis, verdict=verdict, explanation=explanation,
                              config=config, baseline_ref=stored, explanation_note=note,
                              gate_s=time.perf_counter() - t0))
    return out


def judged_steps(side) -> list[int] | None:
    """Profiler steps the gate kept for one side; None for a trace without steps."""
    steps = sorted(int(s) for s in side.steps["step"].unique() if s >= 0) if side.has_steps else []
    return steps or None


def report_document(comparison: Comparison) -> dict:
    """The content of ``report.json`` (schema: docs/report-schema.md)."""
    c = comparison
    return compare_document(
        verdict=c.verdict, config=c.config,
        explanation=None if c.explanation is None else {**c.explanation.to_dict(), "lines": c.explanation.lines()},
        explanation_note=c.explanation_note,
        baseline=side_record(c.baseline, summary_document(c.baseline), c.baseline_ref),
        candidate=side_record(c.candidate, summary_document(c.candidate), None),
        timings_s={"baseline_load": c.baseline.load_s, "baseline_analyze": c.baseline.analyze_s,
                   "candidate_load": c.candidate.load_s, "candidate_analyze": c.candidate.analyze_s,
                   "gate": c.gate_s},
    )
