"""Wiring: load -> analyses -> gate -> documents. No analysis or judging logic lives here."""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from datetime import datetime, timezone
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from . import __version__
from .documents import table_rows
from .documents.cells import Records
from .analyses.collectives import collectives_per_step
from .analyses.coverage import rank_coverage
from .analyses.invocations import collective_calls, gpu_invocations
from .analyses.memory import memory_note
from .analyses.series import time_series
from .analyses.step_metrics import step_metrics
from .config import Config
from .diagnosis import diagnose
from .errors import TraceError
from .gate.baselines import DEFAULT_STORE, StoredBaseline
from .gate.baselines import cache_usable, did_you_mean
from .gate.baselines import read_baseline
from .gate.baselines import resolve as resolve_baseline
from .load.scanner import scanner_name
from .running.assemble import Assembler
from .running.digest import INVOCATIONS_ALWAYS, AnalysisOptions
from .running.executor import Executor, RankJob, stream
from .running.heap import give_back, keep_freed_heap
from .running.forked import Beside
from .model import TraceSet, sorted_unique
from .running.progress import Progress
from .timing import phase
from .report.json_report import compare_document, side_record

if TYPE_CHECKING:  # what only a compare imports (see compare_many)
    from .analyses.attribution import Explanation
    from .gate.metrics import SideData
    from .gate.verdict import Verdict

SUMMARY_SCHEMA_VERSION = 1
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Analysis:
    """The analysed ranks (:class:`~perfreport.running.digest.DigestTrace` stand-ins: metadata and
    per-rank summaries) and every analysis table computed from them."""

    traces: TraceSet
    tables: Mapping[str, pd.DataFrame]
    load_s: float
    analyze_s: float
    checksums: Mapping[int, str | None] = field(default_factory=dict)
    worker_peak_rss: int = 0
    """The largest peak RSS (bytes) of a process that loaded a rank."""
    rank_timings: list[dict] = field(default_factory=list)
    """Each rank task's process, peak RSS and phases (:mod:`perfreport.timing`), in arrival order."""
    tables_cut: list[dict] = field(default_factory=list)
    """The per-step tables the rank tasks already cut to report.json's rows
    (:attr:`~perfreport.running.digest.AnalysisOptions.step_rows`): their ``tables_cut`` entries."""


def analyze(source: str | Path | Mapping[int, str | Path], *, workers: int | None = None,
            executor: Executor | None = None, options: AnalysisOptions | None = None,
            progress: Progress | None = None) -> Analysis:
    """Load and analyse every rank of ``source`` (one task per rank, see :mod:`perfreport.running.executor`),
    then the cross-rank analyses on the per-rank digests."""
    return run_jobs(trace_jobs(source), source_label(source), workers=workers, executor=executor, options=options,
                    progress=progress)


def trace_jobs(source: str | Path | Mapping[int, str | Path]) -> list[RankJob]:
    """One :class:`RankJob` per rank file of ``source`` (a folder, a file, or {rank: path})."""
    from .load.files import uncompressed_size
    from .load import discover

    if isinstance(source, str) and "://" in source:
        from .running.remote import remote_jobs

        return remote_jobs(source)
    return [RankJob(str(f.path), f.rank_hint, f.hint_source, json_bytes=uncompressed_size(f.path))
            for f in discover(source)]


def source_label(source) -> str:
    return str(source if not isinstance(source, Mapping) else "<mapping>")


def run_jobs(jobs: list[RankJob], source: str, *, workers: int | None = None, executor: Executor | None = None,
             options: AnalysisOptions | None = None, progress: Progress | None = None) -> Analysis:
    """The :class:`Analysis` of ``jobs``: per-rank tasks on ``executor``, the reduce here."""
    return run_sides([(jobs, source)], workers=workers, executor=executor, options=options, progress=progress)[0]


def run_sides(sides: list[tuple[list[RankJob], str]], *, workers: int | None = None,
              executor: Executor | None = None, options: AnalysisOptions | None = None,
              progress: Progress | None = None,
              side_done: Callable[[int, Analysis], None] | None = None) -> list[Analysis]:
    """One :class:`Analysis` per (jobs, source label): the ranks of every side run as one batch of
    tasks (a compare of two single-rank traces loads both at once), each digest folded into its
    side's :class:`~perfreport.running.assemble.Assembler` as it arrives, each side reduced here.

    With ``side_done``, a side is reduced as soon as its last digest is in, and ``side_done`` is
    called with its position and analysis then: while the other sides' ranks still run, this process (idle
    until their digests come) does the side's own part of what follows (a compare's gate
    inputs). The two ranks of a 1 GB compare ended 0.18-0.24 s apart in two runs of HTA's tiny pair."""
    executor = executor or Executor(workers=workers)
    options = _sent_steps(options or AnalysisOptions(), sides)
    jobs = [job for side_jobs, _ in sides for job in side_jobs]
    owner = [(s, i) for s, (side_jobs, _) in enumerate(sides) for i in range(len(side_jobs))]
    assemblers = [Assembler(source, keep_pairs=options.gate) for _, source in sides]
    missing = [len(side_jobs) for side_jobs, _ in sides]
    done: dict[int, Analysis] = {}
    if progress is not None:
        progress.start(len(jobs), sum(j.json_bytes for j in jobs))
    with phase("per-rank tasks (load and analyse)"):
        for index, digest in stream(jobs, options, executor):
            if progress is not None:
                progress.rank_done(digest)
            side, position = owner[index]
            if digest.pid != os.getpid():  # ranks analysed in workers: this process reduces their digests
                keep_freed_heap()
            with phase("fold in digests"):
                assemblers[side].add(digest, position)
                del digest  # folded in: nothing of it is kept whole
                give_back()  # nor is the heap it took to unpickle and fold (see Assembler)
            missing[side] -= 1
            if side_done is not None and not missing[side]:
                done[side] = _reduce(assemblers[side])
                side_done(side, done[side])
    if progress is not None:
        progress.phase("cross-rank analyses")
    return [done[s] if s in done else _reduce(a) for s, a in enumerate(assemblers)]


def _sent_steps(options: AnalysisOptions, sides: list[tuple[list[RankJob], str]]) -> AnalysisOptions:
    """``options`` with each rank task sending no more steps of each per-step table than
    report.json keeps of a rank of the side with the fewest ranks (its ranks keep the most:
    :func:`~perfreport.documents.table_rows.rows_kept`); the other sides' are cut further there."""
    if options.step_rows is None or not sides:
        return options
    kept = table_rows.rows_kept(min(len(side_jobs) for side_jobs, _ in sides))[1]
    return dataclasses.replace(options, step_rows=min(options.step_rows, kept))


def _reduce(assembler: Assembler) -> Analysis:
    """The side's :class:`Analysis`: the cross-rank analyses on its digests, and its times: the
    load's and the per-rank analyses' wall seconds in the busiest process
    (:meth:`~perfreport.running.assemble.Assembler.busiest`), the cross-rank analyses counted
    with the latter."""
    r0 = time.perf_counter()
    with phase("cross-rank analyses"):
        traces, tables = assembler.finish()
    load_s, analyze_s = assembler.busiest()
    return Analysis(traces, tables, load_s=load_s, analyze_s=analyze_s + time.perf_counter() - r0,
                    checksums=dict(sorted(assembler.checksums.items())), worker_peak_rss=assembler.worker_peak_rss,
                    rank_timings=assembler.rank_timings, tables_cut=assembler.tables_cut)


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
            "step_restarts": m.step_restarts,
        })
    return out


def summary_document(analysis: Analysis, full_tables: bool = False) -> dict:
    """The document of ``analyze`` (``report.json``, docs/analysis-document.md): every table as
    records, per rank, plus provenance and, for a partial job, which ranks are missing. A
    per-call table keeps each rank's first calls and a per-step table its first steps, the job's
    ranks sharing one bound (:func:`~perfreport.documents.table_rows.rows_kept`), unless
    ``full_tables`` (:mod:`perfreport.documents.table_rows`)."""
    tables, cut = (analysis.tables, []) if full_tables else \
        table_rows.cut_tables(analysis.tables, *table_rows.rows_kept(len(analysis.traces)), table_rows.CALL_ROWS)
    cut = table_rows.merged_cuts(analysis.tables_cut, cut, list(tables))  # with those the rank tasks cut
    with phase("diagnosis"):
        diagnosis = diagnose(analysis.tables)
    with phase("series"):
        series = time_series(analysis.traces)
    return {
        "schema_version": SUMMARY_SCHEMA_VERSION,
        "perfreport_version": __version__,
        "source": analysis.traces.source,
        "scanner": scanner_name(),
        "timings_s": {"load": round(analysis.load_s, 3), "analyze": round(analysis.analyze_s, 3)},
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "ranks": rank_metadata(analysis.traces),
        "files": [{"rank": t.rank, "file": t.meta.path, "checksum": analysis.checksums.get(t.rank)}
                  for t in analysis.traces],
        "diagnosis": diagnosis,
        **{name: Records(df) for name, df in tables.items()},
        "tables_cut": cut,
        "series": series,
        "memory_note": memory_note(analysis.traces),
        "rank_coverage": rank_coverage([t.rank for t in analysis.traces],
                                       [t.meta.world_size for t in analysis.traces]),
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


def baseline_jobs(stored: StoredBaseline, ranks: list[Mapping] | None = None) -> list[RankJob]:
    """A stored baseline's ranks (default: its newest run's) as jobs: its column cache when this
    version reads it, else its rank files; every file is verified against the manifest by the
    task that reads it."""
    ranks = ranks if ranks is not None else stored.manifest["ranks"]
    use_cache = cache_usable(stored, ranks)
    jobs = []
    for r in ranks:
        path = stored.path / r["file"]
        if use_cache:
            jobs.append(RankJob(str(path), int(r["rank"]), "mapping", json_bytes=int((r.get("meta") or {}).get("json_bytes") or 0),
                                cache=str(stored.path / r["cache"]), cache_sha256=r["cache_sha256"],
                                meta_entry=r, sha256=r["sha256"], digest_sha256=r.get("digest_sha256")))
        else:
            jobs.append(RankJob(str(path), int(r["rank"]), "mapping", json_bytes=int(r.get("bytes") or 0),
                                sha256=r["sha256"], verify=True))
    return jobs


def resolve_side(ref: str | Path, store: str | Path = DEFAULT_STORE, *, candidate: bool = False
                 ) -> tuple[list[RankJob], str, StoredBaseline | None]:
    """(jobs, source label, stored baseline or None) for a BASELINE argument (a stored baseline's
    folder, a baseline name in ``store``, or a trace folder/file) or, with ``candidate``, a
    CANDIDATE (a trace folder/file, or a stored baseline's folder or name when no such path exists)."""
    path = Path(ref) if "://" not in str(ref) else None
    stored = None
    if path is not None:
        stored = stored_candidate(ref, store) if candidate else resolve_baseline(ref, store)
    if stored is not None:
        return baseline_jobs(stored), str(stored.path), stored
    if path is not None and candidate and not path.exists() and not path.is_symlink():
        hint = did_you_mean(ref, store)
        if hint:  # a misspelt baseline name, not a missing trace folder
            raise TraceError(path, f"no such file or directory, and no baseline of that name in {store}{hint}")
    return trace_jobs(str(ref) if path is None else ref), source_label(ref), None


def few_steps_limit(config: Config) -> int:
    """A rank with fewer profiler steps than this may keep fewer than ``stats.min_samples``
    once the last, skipped and warm-up steps are dropped."""
    margin = 1 + config.steps.skip_first + (config.steps.max_warmup_steps if config.steps.auto_warmup else 0)
    return config.stats.min_samples + margin


def few_steps(traces: TraceSet, config: Config) -> bool:
    """Whether a rank of ``traces`` may keep fewer than ``stats.min_samples`` steps once the
    last, skipped and warm-up steps are dropped: then the gate needs the calls below the step."""
    return any(len(t.step_numbers()) < few_steps_limit(config) for t in traces)


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
    from .analyses.diff import op_steps
    from .gate.metrics import side_data, versions_of

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
    side = side_data(label, steps, ops, collectives, invocation_table=calls,
                     ranks=tuple(sorted({rank for r in runs for rank in r.rank_ids})),
                     gpus={t.rank: t.meta.gpu_name() for r in runs for t in r},
                     world_size=max(world) if world else None, versions=versions, steps=config.steps)
    return dataclasses.replace(side, efficiency=_efficiency(runs[-1]), efficiency_steps=_efficiency_steps(runs))


def _efficiency(traces: TraceSet) -> pd.DataFrame | None:
    """The run's op_efficiency table; None from a digest made without it (an older cache)."""
    from .analyses.efficiency import op_efficiency
    from .running.digest import DigestError

    try:
        return op_efficiency(traces)
    except DigestError:
        return None


def _efficiency_steps(runs: Sequence[TraceSet]) -> pd.DataFrame | None:
    """Every run's per-step op throughput samples (with a ``run`` column); None when a digest
    was made without them."""
    from .analyses.efficiency.op_efficiency import op_efficiency_steps
    from .running.digest import DigestError

    try:
        parts = [op_efficiency_steps(t).assign(run=run) for run, r in enumerate(runs) for t in r]
    except DigestError:
        return None
    return pd.concat(parts, ignore_index=True) if parts else None


def compare(baseline: str | Path, candidate: str | Path, *, config: Config | None = None,
            store: str | Path = DEFAULT_STORE, workers: int | None = None, executor: Executor | None = None,
            candidate_runs: Sequence[str | Path] = (), progress: Progress | None = None,
            analysed: Callable[[Analysis, Analysis], None] | None = None,
            judged: Callable[[Analysis, Analysis], None] | None = None, step_rows: int | None = None) -> Comparison:
    """Compare ``candidate`` (a trace folder or file, or a stored baseline) with ``baseline``
    (a stored baseline name in ``store``, its folder, or a trace folder/file).

    Loads and analyses both sides, judges them with ``config`` (default: ``Config()``) and
    explains the step-time change. Every run of a multi-run stored baseline is judged;
    ``candidate_runs`` are further runs of the candidate (trace folders or files); a multi-run
    stored candidate brings every run. The analyses and the explanation describe the newest
    baseline run and CANDIDATE (the newest run of a stored one). Raises
    TraceError/BaselineError for unusable inputs.
    """
    return compare_many(baseline, [candidate], config=config, store=store, workers=workers, executor=executor,
                        candidate_runs=candidate_runs, progress=progress, analysed=analysed, judged=judged,
                        step_rows=step_rows)[0]


def compare_many(baseline: str | Path, candidates: list[str | Path], *, config: Config | None = None,
                 store: str | Path = DEFAULT_STORE, workers: int | None = None, executor: Executor | None = None,
                 candidate_runs: Sequence[str | Path] = (), progress: Progress | None = None,
                 analysed: Callable[[Analysis, Analysis], None] | None = None,
                 judged: Callable[[Analysis, Analysis], None] | None = None,
                 step_rows: int | None = None) -> list[Comparison]:
    """:func:`compare` of several candidates (training setups) with one baseline, which is
    loaded, analysed and reduced for the gate once; ``candidate_runs`` are further runs of each
    candidate (used with one candidate). The ranks of every side and run are one batch of
    per-rank tasks (:func:`run_sides`); the gate runs here on their digests, the attribution
    in a forked child beside the gate's verdict (:class:`perfreport.running.forked.Beside`).
    ``analysed(baseline, candidate)`` is called with the two analyses a single candidate's
    report describes as soon as they are ready, before the gate (a command starts drawing
    their figures then); ``judged(baseline, candidate)`` once the verdict is made, while the
    attribution's child may still run (a command makes the two sides' documents then: on a
    1 GB rank of 173,000 steps the parent waited 0.14 s for the attribution, and the documents
    took 0.07 s after it). ``step_rows``: the steps of each per-step table the per-rank tasks
    send (:attr:`~perfreport.running.digest.AnalysisOptions.step_rows`; a command passes
    report.json's unless ``--full-tables``)."""
    with phase("start: import the gate and the attribution"):  # before the workers fork: they share them
        from .analyses.attribution import explain  # noqa: F401 - _attribute's, in the child forked beside the verdict
        from .analyses.diff import forget_step_sums
        from .gate.keyed import prepare as prepare_keyed
        from .gate.verdict import evaluate
    config = config or Config()
    options = analysis_options(config, step_rows)
    with phase("start: find the rank files"):
        b_jobs, b_label, stored = resolve_side(baseline, store)
        earlier = [(baseline_jobs(stored, run["ranks"]), b_label) for run in stored.runs[:-1]] \
            if stored is not None and len(stored.runs) > 1 else []  # the earlier runs, oldest first
        c_sides = []
        for candidate in candidates:
            c_jobs, c_label, c_stored = resolve_side(candidate, store, candidate=True)
            c_earlier = [(baseline_jobs(c_stored, run["ranks"]), c_label) for run in c_stored.runs[:-1]] \
                if c_stored is not None and len(c_stored.runs) > 1 else []  # a multi-run stored candidate: every run
            c_sides.append(c_earlier + [(c_jobs, c_label)]
                           + [(trace_jobs(path), source_label(path)) for path in candidate_runs])
    if progress is not None:
        progress.phase("loading and analysing baseline and candidate" + ("s" if len(candidates) > 1 else ""))
    sides = [(b_jobs, b_label), *earlier, *(side for runs in c_sides for side in runs)]
    ahead: dict[int, SideData] = {}  # a side's gate inputs, made while the other side's ranks ran

    def side_done(position: int, analysis: Analysis) -> None:
        if len(sides) == 2 and not few_steps(analysis.traces, config):  # one run a side, judged by the step
            with phase("gate: inputs, a side ahead"):
                ahead[position] = gate_side(("baseline", "candidate")[position], [analysis.traces], config,
                                            invocations=False)
                prepare_keyed(ahead[position])

    analyses = run_sides(sides, workers=workers, executor=executor, options=options, progress=progress,
                         side_done=side_done)
    jobs_of = {id(a.traces): jobs for a, (jobs, _) in zip(analyses, sides)}
    b_analysis, analyses = analyses[0], analyses[1:]
    b_runs = [a.traces for a in analyses[:len(earlier)]] + [b_analysis.traces]
    analyses = analyses[len(earlier):]
    b_traces = b_analysis.traces
    b_sides: dict[bool, SideData] = {}  # by whether calls below the step are judged (few steps)
    out = []
    for runs in c_sides:
        c_analyses, analyses = analyses[:len(runs)], analyses[len(runs):]
        c_run = len(runs) - 1 - len(candidate_runs)  # CANDIDATE's own run: after a stored one's earlier runs
        c_analysis = c_analyses[c_run]
        c_traces, c_runs = c_analysis.traces, [a.traces for a in c_analyses]
        if analysed is not None and len(c_sides) == 1:
            analysed(b_analysis, c_analysis)
        t0 = time.perf_counter()
        fine = len(b_runs) == len(c_runs) == 1 and (few_steps(b_traces, config) or few_steps(c_traces, config))
        if fine:  # a side with many steps did not list its calls in the worker: list them now
            with phase("gate: list op calls again"):
                _add_invocations([b_traces, c_traces], jobs_of, config, workers, executor)
        with phase("gate: inputs"):
            if fine not in b_sides:
                b_sides[fine] = ahead.pop(0) if not fine and 0 in ahead else \
                    gate_side("baseline", b_runs, config, invocations=fine)
            b_side = b_sides[fine]
            c_side = ahead.pop(1) if not fine and 1 in ahead else \
                gate_side("candidate", c_runs, config, invocations=fine)
        # attribute over the very steps the gate judged (warm-up and skipped steps left out), in a
        # child beside the verdict: both need only the gate's inputs, and the report waits for both
        attribution = Beside(functools.partial(_attribute, b_traces, c_traces, config, judged_steps(b_side),
                                               judged_steps(c_side, c_run)), "attribution")
        try:
            with phase("gate: verdict"):
                verdict = evaluate(b_side, c_side, config)
            if judged is not None and len(c_sides) == 1:
                # the op sums are read by the attribution alone now: its child has its own copy (where
                # it fails, the attribution here makes them again), so they go before the documents
                for traces in (*b_runs, *c_runs):
                    forget_step_sums(traces)
                give_back()
                judged(b_analysis, c_analysis)
            with phase("attribution"):
                explanation, note = attribution.result()
        finally:
            attribution.stop()
            for traces in (*b_runs, *c_runs):  # (the gate's and the attribution's op sums: no longer read)
                forget_step_sums(traces)
        give_back()  # the gate's transients, before the report is built on top of them
        out.append(Comparison(baseline=b_analysis, candidate=c_analysis, verdict=verdict, explanation=explanation,
                              config=config, baseline_ref=stored, explanation_note=note,
                              gate_s=time.perf_counter() - t0))
    return out


def _attribute(b_traces: TraceSet, c_traces: TraceSet, config: Config, baseline_steps: list[int] | None,
               candidate_steps: list[int] | None) -> tuple[Explanation | None, str | None]:
    """(the attribution of the step time's change, None), or (None, why there is none)."""
    from .analyses.attribution import explain

    try:
        return explain(b_traces, c_traces, exact_names=config.exact_kernel_names, baseline_steps=baseline_steps,
                       candidate_steps=candidate_steps), None
    except TraceError as exc:
        return None, f"no attribution: {exc.problem}"
    except Exception as exc:  # the attribution explains; it must never take the verdict down with it
        log.warning("attribution failed: %s: %s", type(exc).__name__, exc)
        return None, f"no attribution: internal error ({type(exc).__name__}: {exc})"


def analysis_options(config: Config, step_rows: int | None = None) -> AnalysisOptions:
    """What the per-rank tasks of a compare precompute: the gate's settings, the attribution's
    parts, and the GPU op calls of a rank with few steps (the samples below the step);
    ``step_rows``: the steps of each per-step table they send (None: all)."""
    return AnalysisOptions(launch_delay_cutoff_us=config.steps.launch_delay_cutoff_us,
                           runtime_cutoff_us=config.steps.runtime_cutoff_us,
                           exact_kernel_names=config.exact_kernel_names, gate=True, attribution=True,
                           invocation_steps=few_steps_limit(config), step_rows=step_rows)


def _add_invocations(sides: list[TraceSet], jobs_of: Mapping[int, list[RankJob]], config: Config,
                     workers: int | None, executor: Executor | None) -> None:
    """Give every rank of ``sides`` its GPU op calls (the digest memo the gate's invocation
    table reads): a rank with many steps left them out of its digest to keep it small, so when
    the other side of the comparison has few steps its ranks are analysed again, listing them."""
    key = ("invocations", bool(config.exact_kernel_names))
    for traces in sides:
        if all(key in getattr(t, "_memo", {key: None}) for t in traces):
            continue
        options = dataclasses.replace(analysis_options(config), invocation_steps=INVOCATIONS_ALWAYS)
        (again,) = run_sides([(jobs_of[id(traces)], traces.source)], workers=workers, executor=executor,
                             options=options)
        for t in traces:
            t._memo[key] = again.traces.ranks[t.rank]._memo[key]


def judged_steps(side, run: int | None = None) -> list[int] | None:
    """Profiler steps the gate kept for one side (of ``run``; default the last run, the one the
    explanation describes); None for a trace without steps."""
    table = side.steps
    if len(table):
        table = table[table["run"] == (table["run"].max() if run is None else run)]
    if not side.has_steps:
        return None
    steps = table["step"].to_numpy()
    return sorted_unique(steps[steps >= 0].astype(np.int64)).tolist() or None  # (345,319 steps: no Python loop)


def report_document(comparison: Comparison, full_tables: bool = False,
                    summaries: tuple[dict, dict] | None = None) -> dict:
    """The content of ``report.json`` (schema: docs/report-schema.md); ``full_tables`` as for
    :func:`summary_document`, and for each check's samples (one per step: the first
    ``STEP_ROWS`` of each side kept, as its per-step tables keep its first steps).
    ``summaries``: the baseline's and the candidate's :func:`summary_document` with the same
    ``full_tables``, where they were made before (see :func:`compare_many`'s ``judged``)."""
    c = comparison
    b_summary, c_summary = summaries if summaries is not None else \
        (summary_document(c.baseline, full_tables), summary_document(c.candidate, full_tables))
    return compare_document(
        verdict=c.verdict, config=c.config,
        explanation=None if c.explanation is None else {**c.explanation.to_dict(), "lines": c.explanation.lines()},
        explanation_note=c.explanation_note,
        baseline=side_record(c.baseline, b_summary, c.baseline_ref),
        candidate=side_record(c.candidate, c_summary, None),
        sample_rows=None if full_tables else table_rows.STEP_ROWS,
        timings_s={"baseline_load": c.baseline.load_s, "baseline_analyze": c.baseline.analyze_s,
                   "candidate_load": c.candidate.load_s, "candidate_analyze": c.candidate.analyze_s,
                   "gate": c.gate_s},
    )
