"""Wiring: load -> analyses -> gate -> documents. No analysis or judging logic lives here."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import __version__
from ._io import sha256_file
from .analyses import ANALYSES
from .analyses.attribution import Explanation, explain
from .analyses.collectives import collectives_per_step
from .analyses.diff import op_steps
from .analyses.invocations import collective_calls, gpu_invocations
from .analyses.memory import memory_note
from .analyses.series import time_series
from .analyses.step_metrics import step_metrics
from .config import Config
from .errors import TraceError
from .gate.baselines import DEFAULT_STORE, StoredBaseline
from .gate.baseline_runs import load_runs
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
            "dropped_events": m.dropped,
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
    stored = stored_candidate(ref, store)
    if stored is not None:
        traces = load_stored(stored, fallback=lambda files: load(files, workers=workers))
    else:
        traces = load(ref, workers=workers)
    return traces, time.perf_counter() - t0


def few_steps(traces: TraceSet, config: Config) -> bool:
    """Whether a rank of ``traces`` may keep fewer than ``stats.min_samples`` steps once the
    last, skipped and warm-up steps are dropped: then the gate needs the calls below the step."""
    margin = 1 + config.steps.skip_first + (config.steps.max_warmup_steps if config.steps.auto_warmup else 0)
    return any(len(t.step_numbers()) < config.stats.min_samples + margin for t in traces)


def _calls(traces: TraceSet, config: Config) -> pd.DataFrame:
    """Every GPU op call and collective call: the gate's samples below the step."""
    return pd.concat([gpu_invocations(traces, exact=config.exact_kernel_names), collective_calls(traces)],
                     ignore_index=True)


def stored_candidate(ref: str | Path, store: str | Path = DEFAULT_STORE) -> StoredBaseline | None:
    """The stored baseline a CANDIDATE argument names (its folder, or a name in ``store`` that is
    not a path), else None (a trace folder or file)."""
    path = Path(ref)
    if path.is_dir() and (path / "manifest.json").is_file():
        return read_baseline(path)
    if not path.exists() and (Path(store) / str(ref) / "manifest.json").is_file():
        return read_baseline(Path(store) / str(ref))
    return None


def gate_side(label: str, traces: TraceSet | Sequence[TraceSet], config: Config, *,
              invocations: bool | None = None) -> SideData:
    """One side reduced to the gate's per-step inputs (:mod:`perfreport.gate.metrics`); a list of
    TraceSets is several runs of that side (numbered 0, 1, ... in the ``run`` column).

    ``invocations``: whether to list every GPU op call (the samples below the step, needed when
    either side of a comparison has too few steps; None: when this side of one run has)."""
    runs = [traces] if isinstance(traces, TraceSet) else list(traces)
    tables: list[list[pd.DataFrame]] = [[], [], [], []]
    for run, t in enumerate(runs):  # a loop over the few runs
        steps = step_metrics(t, launch_delay_cutoff_us=config.steps.launch_delay_cutoff_us,
                             runtime_cutoff_us=config.steps.runtime_cutoff_us)
        few = invocations if invocations is not None else len(runs) == 1 and few_steps(t, config)
        for i, table in enumerate((steps, op_steps(t, exact=config.exact_kernel_names), collectives_per_step(t),
                                   _calls(t, config) if few else None)):
            if table is not None:
                tables[i].append(table.assign(run=run))
    steps, ops, collectives = (pd.concat(parts, ignore_index=True) for parts in tables[:3])
    calls = pd.concat(tables[3], ignore_index=True) if tables[3] else None
    versions: dict[str, str] = {}
    for t in (t for r in runs for t in r):
        versions.update({k: v for k, v in versions_of(t.meta).items() if k not in versions})
    world = [t.meta.world_size for r in runs for t in r if t.meta.world_size]
    return side_data(label, steps, ops, collectives, invocation_table=calls,
                     ranks=tuple(sorted({rank for r in runs for rank in r.rank_ids})),
                     gpus={t.rank: t.meta.gpu_name() for r in runs for t in r},
                     world_size=max(world) if world else None, versions=versions, steps=config.steps)


def compare(baseline: str | Path, candidate: str | Path, *, config: Config | None = None,
            store: str | Path = DEFAULT_STORE, workers: int | None = None,
            candidate_runs: Sequence[str | Path] = ()) -> Comparison:
    """Compare ``candidate`` (a trace folder or file, or a stored baseline) with ``baseline``
    (a stored baseline name in ``store``, its folder, or a trace folder/file).

    Loads and analyses both sides, judges them with ``config`` (default: ``Config()``) and
    explains the step-time change. Every run of a multi-run stored baseline is judged;
    ``candidate_runs`` are further runs of the candidate (trace folders or files); a multi-run
    stored candidate brings every run. The analyses and the explanation describe the newest
    baseline run and CANDIDATE (the newest run of a stored one). Raises
    TraceError/BaselineError for unusable inputs.
    """
    return compare_many(baseline, [candidate], config=config, store=store, workers=workers,
                        candidate_runs=candidate_runs)[0]


def compare_many(baseline: str | Path, candidates: list[str | Path], *, config: Config | None = None,
                 store: str | Path = DEFAULT_STORE, workers: int | None = None,
                 candidate_runs: Sequence[str | Path] = ()) -> list[Comparison]:
    """:func:`compare` of several candidates (training setups) with one baseline, which is
    loaded, analysed and reduced for the gate once; ``candidate_runs`` are further runs of each
    candidate (used with one candidate)."""
    config = config or Config()
    b_traces, stored, b_load_s = load_baseline(baseline, store=store, workers=workers)
    b_runs = [b_traces]
    if stored is not None and len(stored.runs) > 1:  # the earlier runs, oldest first, then the newest
        b_runs = load_runs(stored, fallback=lambda files: load(files, workers=workers))[:-1] + [b_traces]
    b_analysis = analyze_loaded(b_traces, b_load_s)
    b_sides: dict[bool, object] = {}  # by whether calls below the step are judged (few steps)
    out = []
    for candidate in candidates:
        c_traces, c_load_s = load_candidate(candidate, store=store, workers=workers)
        c_runs = [c_traces] + [load(path, workers=workers) for path in candidate_runs]
        c_stored = stored_candidate(candidate, store)
        if c_stored is not None and len(c_stored.runs) > 1:  # a multi-run stored candidate: every run
            c_runs = load_runs(c_stored, fallback=lambda files: load(files, workers=workers))[:-1] + c_runs
        c_analysis = analyze_loaded(c_traces, c_load_s)
        t0 = time.perf_counter()
        fine = len(b_runs) == len(c_runs) == 1 and (few_steps(b_traces, config) or few_steps(c_traces, config))
        if fine not in b_sides:
            b_sides[fine] = gate_side("baseline", b_runs, config, invocations=fine)
        b_side = b_sides[fine]
        c_side = gate_side("candidate", c_runs, config, invocations=fine)
        verdict = evaluate(b_side, c_side, config)
        explanation, note = None, None
        c_run = next(i for i, r in enumerate(c_runs) if r is c_traces)
        try:  # attribute over the very steps the gate judged (warm-up and skipped steps left out)
            explanation = explain(b_traces, c_traces, exact_names=config.exact_kernel_names,
                                  baseline_steps=judged_steps(b_side), candidate_steps=judged_steps(c_side, c_run))
        except TraceError as exc:
            note = f"no attribution: {exc.problem}"
        except Exception as exc:  # the attribution explains; it must never take the verdict down with it
            log.warning("attribution failed: %s: %s", type(exc).__name__, exc)
            note = f"no attribution: internal error ({type(exc).__name__}: {exc})"
        out.append(Comparison(baseline=b_analysis, candidate=c_analysis, verdict=verdict, explanation=explanation,
                              config=config, baseline_ref=stored, explanation_note=note,
                              gate_s=time.perf_counter() - t0))
    return out


def judged_steps(side, run: int | None = None) -> list[int] | None:
    """Profiler steps the gate kept for one side (of ``run``; default the last run, the one the
    explanation describes); None for a trace without steps."""
    table = side.steps
    if len(table):
        table = table[table["run"] == (table["run"].max() if run is None else run)]
    steps = sorted(int(s) for s in table["step"].unique() if s >= 0) if side.has_steps else []
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
