"""Per-rank digests: one rank loaded and analysed on its own, reduced to small summaries.

A worker process (or a Dask task) loads one rank, runs every analysis on it alone and sends back
a :class:`RankDigest`: the per-rank analysis tables plus the handful of memoised per-rank
summaries the cross-rank analyses start from (step spans, collective calls, per-step op sums,
communication kernels, downsampled series, ...). Never an event table: a digest is kilobytes to
a few MB however big the trace, so the parent never holds a trace, only these summaries.

The parent (:class:`perfreport.running.assemble.Assembler`, folding each digest in as it arrives)
then rebuilds a :class:`~perfreport.model.TraceSet` of :class:`DigestTrace` stand-ins
(metadata plus those memoised summaries, no event columns) and runs the cross-rank analyses
(stragglers, collective matching and skew, kernel spread over ranks, op profile, the gate's
inputs, the attribution) on it unchanged: they reach the events of a rank only through the
memoised per-rank functions, so they find the worker's results there. A cross-rank analysis that
reaches past them fails loudly (:class:`DigestError`), never silently.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ..model import (GPU_ACTIVITY_CATEGORIES, GPU_SIDE_CATEGORIES, KERNEL_CATEGORIES, MEMCPY_CATEGORIES,
                     MEMSET_CATEGORIES, RUNTIME_CATEGORIES, SYNC_CATEGORIES, RankTrace, TraceMeta, TraceSet)
from ..timing import phase
from . import halves

CROSS_RANK = frozenset({
    "step_metrics", "kernel_rank_distribution", "collectives", "collective_skew", "straggler_evidence",
    "op_profile", "stragglers", "straggler_steps",
})
"""Analyses whose table is not the per-rank tables put together: rerun on the digests."""
COMMON_CLOCK_COLUMNS = {"memory_timeline": ("ts_us",), "memory_peaks": ("peak_allocated_ts_us", "peak_reserved_ts_us")}
"""Per-rank tables with times on the job's common clock: the parent adds the rank's shift."""
DIGEST_KEYS = frozenset({
    "step_spans", "profiler_steps", "step_numbers", "span_us", "collectives", "class_name_totals", "comm_kernels",
    "rank_step_metrics", "op_pairs", "series", "memory_facts", "step_parts", "invocations", "op_efficiency",
    "collectives_per_step",
    "op_efficiency_steps",
})
"""Memo keys (first element of a tuple key) a digest carries: what the cross-rank analyses read."""
RUN_FIRST = frozenset({"time_at_stake"})
"""Analyses a process runs before the others of its share (tables still in :data:`ANALYSES`
order): the step windows' parts make the largest transient (every cause's intervals and their
sorted edges, ~25 MB on an event-dense 200 MB rank), so it runs on the fewest views. V100-grown
200 MB rank, ``analyze``: the parent's peak went 275 -> 260-263 MB (5 runs)."""
GATE_ONLY_KEYS = frozenset({"op_efficiency"})
"""Memo keys sent only for the gate (``op_efficiency`` also travels as a table: once is enough
for ``analyze``)."""


LAST_READER = {
    "gpu_side": "collectives", "name": "step_metrics", "stake_parts": "time_at_stake",
    "step_children": "time_at_stake", "cpu_collectives": "temporal_breakdown", "stream_gaps": "idle_breakdown_per_step",
    "gpu_class": "kernel_rank_distribution", "gpu_work_names": "kernel_rank_distribution",
    "gpu_work_classes": "comm_comp_overlap_per_step", "gpu_work_step_unions": "comm_comp_overlap_per_step",
    "gpu_work_unions": "comm_comp_overlap",
    "queue_segments": "time_blocked_on_full_queue", "memcpys": "memory_bw", "memsets": "memory_bw",
    "launches": "launch_stats_by_step", "launch_table": "launch_stats_by_step",
    "launch_value_orders": "launch_stats_by_step",
    "launch_gpu_ops": "aten_op_launch_delays", "aten_op_launches": "aten_op_launch_delays_by_step",
    "memory_rows": "memory_timeline", "gpu_work": "collectives", "host_collectives": "collectives",
    "collective_skew": "straggler_evidence", "matched_calls": "straggler_evidence",
    "subtree_gpu_work": "kernel_sequences", "outermost_cpu_ops": "efficiency_summary",
    "call_stack": "efficiency_summary", "call_stack_levels": "efficiency_summary",
    "efficiency_kernel_owner": "op_efficiency", "efficiency_owner_calls": "op_efficiency",
    "gpu_work_rows": "kernel_efficiency", "kernels": "kernel_efficiency", "efficiency_kernel_metrics": "kernel_efficiency",
    "stragglers": "stragglers", "straggler_steps": "straggler_steps", "queue_length_series": "series",
    "transfers": "series", "transfer_rows": "series", "transfer_directions": "series", "memory_events": "memory_note",
    # category masks (1 byte per event each), by their full memo key: the CPU operators' mask is
    # read to the digest's end, the others are not
    ("cat", RUNTIME_CATEGORIES): "time_at_stake", ("cat", GPU_ACTIVITY_CATEGORIES): "time_at_stake",
    ("cat", KERNEL_CATEGORIES): "step_metrics", ("cat", MEMCPY_CATEGORIES): "step_metrics",
    ("cat", SYNC_CATEGORIES): "step_metrics", ("cat", MEMSET_CATEGORIES): "summary",
    ("cat", ("gpu_user_annotation",)): "gpu_user_annotation_breakdown", ("cat", GPU_SIDE_CATEGORIES): "memory_by_op",
}
"""Per-rank shared views (memo kinds, or a memo's full key) by the last step of :func:`digest`
that reads them (in the order they run: :data:`RUN_FIRST`, then :data:`ANALYSES` order). Each
is dropped once that step is done, so a rank's peak memory holds the views still to be read,
not every view ever made (a 200 MB rank: ~90 MB of views on ~100 MB of event columns). A view
read again later is only computed again (slower, never wrong); tests/test_digest.py checks on
real traces that none is. Views the digest sends (:data:`DIGEST_KEYS`) are kept, and so are
those the gate's inputs read (:data:`GATE_READS`) when the digest is made for a compare."""
GATE_READS = frozenset({
    "gpu_work_rows", "gpu_class", "memcpys", "memsets", "call_stack", "call_stack_levels", "cpu_collectives",
    "step_children", "efficiency_kernel_owner", "efficiency_owner_calls", "kernels", "launches", "launch_gpu_ops",
    "gpu_work", "host_collectives", "name", "gpu_side",
})
"""Memo kinds the gate's inputs (:func:`_precompute_gate`, the op-throughput samples) read."""


def memo_kind(key: Hashable) -> Hashable:
    """What a memo key names: its first element (the rest are arguments), or the key itself."""
    return key[0] if isinstance(key, tuple) else key


@dataclass(frozen=True)
class AnalysisOptions:
    """What a worker must precompute beyond the analyses' defaults: the gate's settings."""

    launch_delay_cutoff_us: float | None = None
    runtime_cutoff_us: float | None = None
    exact_kernel_names: bool = False
    gate: bool = False
    """Compare runs and stored baselines: the gate's per-rank inputs (step metrics, per-step op
    and kernel sums); an ``analyze`` skips them (less work per rank, a smaller digest)."""
    attribution: bool = False
    """Compare runs: also the per-step parts of the step time (for the explanation)."""
    invocation_steps: int = 0
    """A rank with fewer profiler steps than this also sends its GPU op calls (the gate's samples
    below the step, :func:`perfreport.analyses.invocations.rank_invocations`); a long trace's
    digest stays small. :data:`INVOCATIONS_ALWAYS`: every rank sends them."""
    step_rows: int | None = None
    """Send each per-step table with the rows of the rank's first ``step_rows`` steps only: what
    report.json keeps of it (:func:`perfreport.documents.table_rows.rows_kept`), and nothing in
    the parent reads the rest (the summaries, the gate and the diagnosis read the per-rank
    summaries, not these tables). The digest carries the cut's ``tables_cut`` entries. None:
    every row (the Python API, ``--full-tables``, a stored baseline's cached analyses)."""


INVOCATIONS_ALWAYS = 1 << 62


class DigestError(RuntimeError):
    """A cross-rank analysis asked a digest for something the worker did not send."""


@dataclass
class RankDigest:
    """Everything the parent keeps of one rank."""

    meta: TraceMeta
    tables: dict[str, pd.DataFrame]
    memo: dict[Hashable, Any]
    checksum: str | None  # of the rank file, ALGORITHM:HEX (perfreport.load.checksums); None: not hashed
    n_events: int
    load_s: float
    analyze_s: float
    worker_peak_rss: int = 0
    """The worker process's peak RSS (bytes) when it sent this digest (0 when not measured)."""
    timings: list[dict] = field(default_factory=list)
    """The task's phases (:mod:`perfreport.timing` records): read, decompress, scan, decode, each analysis."""
    pid: int = 0
    """The process that ran the task."""
    host: str = ""
    """The machine it ran on (``socket.gethostname()``): with :attr:`pid`, which process's time it
    took (a Dask worker's pid may repeat on another machine)."""
    tables_cut: list[dict] = field(default_factory=list)
    """The per-step tables cut here (:attr:`AnalysisOptions.step_rows`): their ``tables_cut``
    entries (:func:`perfreport.documents.table_rows.cut_tables`) for this rank."""
    waited_s: float = 0.0
    """Seconds the task waited for its rank, loaded by a head start, to be claimed (the command
    still importing): the task's time, not its load's (``load_s`` leaves them out)."""


@dataclass(frozen=True, slots=True)
class FrozenFrame:
    """A rank's summary table held as its columns: a DataFrame's own bookkeeping (index,
    blocks, caches) is several kB, more than the few rows of one rank, and the parent keeps a
    handful per rank. :meth:`thaw` makes the frame again for each read."""

    columns: dict[str, Any]
    index: pd.Index

    @classmethod
    def of(cls, frame: pd.DataFrame) -> "FrozenFrame":
        return cls({c: frozen_column(frame[c]) for c in frame.columns}, frame.index)

    def thaw(self) -> pd.DataFrame:
        return pd.DataFrame(self.columns, index=self.index, copy=False)


def frozen(value: Any) -> Any:
    """A summary as a digest keeps it: a DataFrame as its :class:`FrozenFrame`, else as it is."""
    return FrozenFrame.of(value) if isinstance(value, pd.DataFrame) else value


def frozen_column(series: pd.Series) -> Any:
    """A column's values: a plain array (a view, ~100 B) for numpy dtypes, else its pandas array."""
    return series.to_numpy() if isinstance(series.dtype, np.dtype) else series.array


@dataclass
class DigestTrace:
    """A rank seen through its digest: metadata and memoised summaries, no event columns."""

    meta: TraceMeta
    _memo: dict = field(repr=False)
    n_events: int = 0

    @property
    def rank(self) -> int:
        return self.meta.rank

    def memo(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        try:
            value = self._memo[key]
        except KeyError:
            raise DigestError(f"rank {self.rank}: the digest has no {key!r} (a cross-rank analysis reads past the "
                              "per-rank summaries; add it to perfreport.running.digest.DIGEST_KEYS)") from None
        return value.thaw() if isinstance(value, FrozenFrame) else value

    def span_us(self) -> tuple[float, float]:
        return self.memo("span_us", _never)

    def step_numbers(self) -> np.ndarray:
        return self.memo("step_numbers", _never)

    def __getattr__(self, name: str):
        raise DigestError(f"rank {self.meta.rank}: a cross-rank analysis reads {name!r} of the events, "
                          "which a digest does not hold")


def _never():  # pragma: no cover - DigestTrace.memo raises before calling it
    raise AssertionError


def _series(one: TraceSet) -> None:
    from ..analyses.series import time_series

    time_series(one)


def _memory_note(one: TraceSet) -> None:
    from ..analyses.memory import memory_note

    memory_note(one)


def _op_profile_sums(one: TraceSet) -> None:
    from ..analyses.diff import _rank_pairs

    (trace,) = one
    trace.span_us()
    trace.step_numbers()
    _rank_pairs(trace, np.empty(0, dtype=np.int64), False)  # the op profile's sums when the ranks share no step


FINISHING = [("series", _series), ("memory_note", _memory_note), ("op_profile_sums", _op_profile_sums)]
"""What a digest makes after the analyses, for the parent's cross-rank work, no table of its own:
each rank's lines of the time series, its memory facts, its op sums (and its span and step
numbers). Run as the analyses are, after them (:func:`_run_analyses`), so that a forked child
can be handed them with the analyses whose views they read (:mod:`.halves`)."""


def digest(trace: RankTrace, options: AnalysisOptions = AnalysisOptions(), *, checksum: str | None = None,
           load_s: float = 0.0, waited_s: float = 0.0) -> RankDigest:
    """Analyse one loaded rank alone and keep what the parent needs (see the module doc)."""
    from ..analyses import ANALYSES

    t0 = time.perf_counter()
    one = TraceSet(ranks={trace.rank: trace}, source=trace.meta.path)

    def run(analyses, cut: list[dict], keep_views: bool) -> dict[str, pd.DataFrame]:
        return _run_analyses(trace, one, analyses, options, {} if keep_views else LAST_READER, cut)

    def views(sent: set) -> dict[Hashable, Any]:
        new = {k: v for k, v in _digest_memo(trace, options).items() if k not in sent}
        sent.update(new)
        return new

    share = None if options.gate else halves.start(trace, ANALYSES, FINISHING, run, views)  # (a compare's: in workers)
    mine = [a for a in ANALYSES if share is None or a not in share.theirs]
    try:
        cut: list[dict] = []
        tables = _run_analyses(trace, one, mine + FINISHING, options,
                               LAST_READER if share is None else {**LAST_READER, **halves.PARENT_LAST_READER}, cut,
                               share)
    except BaseException:  # an error or a signal here: the child goes with it
        if share is not None:
            share.stop()
        raise
    if share is not None:
        tables.update(share.finish(run, lambda made: [trace._memo.setdefault(k, v) for k, v in made.items()], cut))
        tables = {name: tables[name] for name, _ in ANALYSES if name in tables}  # in the analyses' order
    if options.gate:
        from ..analyses.efficiency.op_efficiency import op_efficiency_steps

        with phase("gate inputs"):
            op_efficiency_steps(trace)  # the gate's achieved-throughput samples
            _precompute_gate(one, options)
    memo = {k: frozen(v) for k, v in _digest_memo(trace, options).items()}  # (a summary: its columns travel)
    return RankDigest(meta=trace.meta, tables=tables, memo=memo, checksum=checksum,
                      n_events=trace.n_events, load_s=load_s, analyze_s=time.perf_counter() - t0, tables_cut=cut,
                      waited_s=waited_s)


def _step_parts_early(trace: RankTrace, options: AnalysisOptions) -> None:
    """For a compare, the attribution's parts of every step window (memoised for
    :func:`_precompute_gate`), made right after :data:`RUN_FIRST`'s, on the views those made:
    their transient is a many-step rank's largest after those, and at the end it came on top of
    every view the analyses had made. The gloo-only rank grown to 1 GB (204,580 steps): the
    worker's peak 1,257 -> 1,023 MB alone, 1,305 -> 1,076 MB in a `compare` (3
    runs); the other 1 GB ranks' within -42/+47 MB, at most 0.96 x their JSON."""
    if not (options.gate and options.attribution):
        return
    from ..analyses.step_parts import coded_step_parts

    with phase("gate inputs: step parts"):
        for exact in {False, bool(options.exact_kernel_names)}:
            coded_step_parts(trace, exact)


def _run_analyses(trace: RankTrace, one: TraceSet, analyses, options: AnalysisOptions,
                  last_reader: Mapping[str, str] = LAST_READER, cut: list[dict] | None = None,
                  share: halves.Halves | None = None) -> dict[str, pd.DataFrame]:
    """The per-rank tables of ``analyses`` (a cross-rank one runs for its memoised per-rank parts),
    each view dropped after its ``last_reader``, each per-step table cut to its first
    :attr:`~AnalysisOptions.step_rows` steps as soon as it is made (its ``tables_cut`` entries
    added to ``cut``). With ``share``, those left are halved with its child whenever it is idle
    (:meth:`~perfreport.running.halves.Halves.keep`): their tables come from it."""
    tables = {}
    rank_parts = _rank_parts()
    ordered = sorted(analyses, key=lambda a: a[0] not in RUN_FIRST)  # stable: the rest in order
    handed: list[str] = []
    i = 0
    while i < len(ordered):
        if share is not None and ordered[i][0] not in RUN_FIRST:
            kept = share.keep(ordered[i:])
            handed += [name for name, _ in ordered[i + len(kept):]]
            ordered = ordered[:i] + kept
        name, fn = ordered[i]
        with phase(f"analysis:{name}"):
            table = rank_parts[name](trace) if name in rank_parts else fn(one)
            if name not in CROSS_RANK and table is not None:  # (the FINISHING steps make none)
                tables[name] = _cut_as_made(name, table, options.step_rows, cut)
        if name in RUN_FIRST and (i + 1 == len(ordered) or ordered[i + 1][0] not in RUN_FIRST):
            _step_parts_early(trace, options)
        _forget_after(trace, one, name, options, last_reader)
        i += 1
    for name in sorted(handed, key=[n for n, _ in analyses].index):  # their views: read by none of ours now
        _forget_after(trace, one, name, options, last_reader)
    return {name: tables[name] for name, _ in analyses if name in tables}


def _cut_as_made(name: str, table: pd.DataFrame, step_rows: int | None, cut: list[dict] | None) -> pd.DataFrame:
    """``table`` with the rows of its first ``step_rows`` steps where it is a per-step table (as
    report.json keeps it: :func:`~perfreport.documents.table_rows.cut_tables`), its entry added
    to ``cut``; as it is otherwise. Cut as each table is made, not once they all are: the triton
    example grown to 1 GB (345,319 steps) held 311 MB of per-step tables to the digest's end."""
    if step_rows is None or table is None:
        return table
    from ..documents.table_rows import cut_tables

    tables, entries = cut_tables({name: table}, call_rows=None, step_rows=step_rows)
    if cut is not None:
        cut += entries
    return tables[name]


def _rank_parts() -> dict[str, Callable[[RankTrace], Any]]:
    """Cross-rank analyses whose table the parent builds from every rank's summaries, so a
    worker makes only the per-rank summaries they start from (:data:`DIGEST_KEYS`) instead of
    running them on the rank alone, whose tables the parent drops anyway: the call table (the
    parent puts the ranks' memoised calls together), the collective skew and the straggler
    tables (on one rank they have nothing to compare; ~15 ms a rank, most of it pandas calls)
    and the op profile (the parent folds the ranks' per-step sums; the table of one rank alone
    cost the triton example grown to 1 GB, 345,319 steps, 0.2 s a worker)."""
    from ..analyses.collectives import rank_collectives
    from ..analyses.diff import _rank_pairs
    from ..analyses.stragglers import rank_parts

    def evidence(trace: RankTrace) -> None:
        rank_collectives(trace)
        rank_parts(trace)

    def op_sums(trace: RankTrace) -> None:
        _rank_pairs(trace, trace.step_numbers(), False)  # the sums op_profile starts from (its steps: the rank's own)

    return {"collectives": rank_collectives, "collective_skew": rank_collectives, "straggler_evidence": evidence,
            "stragglers": rank_parts,
            "straggler_steps": rank_parts, "op_profile": op_sums}


def _digest_memo(trace: RankTrace, options: AnalysisOptions) -> dict[Hashable, Any]:
    """The memoised per-rank views a digest carries (:data:`DIGEST_KEYS`)."""
    return {k: v for k, v in trace._memo.items()
            if memo_kind(k) in DIGEST_KEYS and (options.gate or memo_kind(k) not in GATE_ONLY_KEYS)}


def _forget_after(trace: RankTrace, one: TraceSet, step: str, options: AnalysisOptions,
                  last_reader: Mapping[str, str] = LAST_READER) -> None:
    """Drop the rank's views whose last reader (:data:`LAST_READER`, or ``last_reader``) was
    ``step``: the rank's own and those kept on its one-rank trace set (its queue segments, launch
    table and transfers: 11, 10 and 2 MB on the V100-grown rank, held to the digest's end
    before)."""
    done = {view for view, last in last_reader.items() if last == step and memo_kind(view) not in DIGEST_KEYS
            and not (options.gate and memo_kind(view) in GATE_READS)}
    if done:
        for memo in (trace._memo, one._memo):
            for key in [k for k in memo if k in done or memo_kind(k) in done]:
                del memo[key]


def _precompute_gate(one: TraceSet, options: AnalysisOptions) -> None:
    """The per-rank parts of the gate's inputs and of the explanation, with the run's settings."""
    from ..analyses.step_parts import coded_step_parts
    from ..analyses.invocations import rank_invocations
    from ..analyses.diff import _rank_pairs
    from ..analyses.step_metrics import step_metrics

    trace = next(iter(one))
    kwargs = {k: v for k, v in (("launch_delay_cutoff_us", options.launch_delay_cutoff_us),
                                ("runtime_cutoff_us", options.runtime_cutoff_us)) if v is not None}
    step_metrics(one, **kwargs)
    for exact in {False, bool(options.exact_kernel_names)}:
        _rank_pairs(trace, trace.step_numbers(), exact)  # op_steps' sums (the parent groups them)
        _rank_pairs(trace, np.empty(0, dtype=np.int64), exact)  # ranks that share no step: whole-trace sums
        if options.attribution:
            coded_step_parts(trace, exact)
    if len(trace.step_numbers()) < options.invocation_steps:
        rank_invocations(trace, bool(options.exact_kernel_names))
