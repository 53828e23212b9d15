"""What the gate measures: metric specs, and the per-step samples of one side of a comparison.

Every metric says its unit and which direction is worse, and comes from one per-step table:

* ``step_metrics`` - :func:`perfreport.analyses.step_metrics.step_metrics`, one row per
  (rank, profiler step), plus the shares derived here (``launch_delay_outlier_pct``,
  ``short_kernel_pct``: % of the step's launches);
* ``op_steps`` - :func:`perfreport.analyses.diff.op_steps`, kernel/copy time and calls per
  (rank, step, key); GPU rows only;
* ``collectives_per_step`` - :func:`perfreport.analyses.collectives.collectives_per_step`,
  calls and time per (rank, step, collective kind, process group).

A *sample* is one (run, rank, step) of ``step_metrics`` after ``steps.skip_first`` (the last
step is already dropped there); the other tables are cut to the same samples, and a key absent
from a sample counts 0 there. ``run`` numbers the recorded runs of one side (0 for a side of
one run; a multi-run baseline or several ``--run`` candidates have 0, 1, ...): steps are
nested in runs, so a step number of run 0 and the same number of run 1 are different samples.
:func:`aggregate` turns a column into the sample vectors a check compares: per rank ("each"),
or per (run, step) over ranks ("worst", "mean"), each with the run it came from.

Below the step: ``invocations`` (:func:`perfreport.analyses.invocations.gpu_invocations`)
lists every GPU op call of the samples, for sides with too few steps (see
:mod:`perfreport.gate.noise`); ``cpu_ops`` is op_steps' CPU rows, for the CPU op structure.

Edge cases: a trace without profiler steps has one sample per rank (step -1, the whole trace);
a metric that is NaN in every sample (overlap without communication, GPU shares without GPU
work) gives empty vectors, and the check is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..config import StepsConfig
from ..model import TraceMeta, tuples_in

HIGHER, LOWER = "higher", "lower"
WHOLE_TRACE_STEP = -1


@dataclass(frozen=True, slots=True)
class Metric:
    """One gated quantity: ``column`` of its ``source`` table, ``unit`` ("us", "pct", "count",
    "bytes"), and ``worse``: "higher" or "lower" (the direction that is a regression)."""

    column: str
    label: str
    unit: str
    worse: str
    source: str = "step_metrics"

    @property
    def is_time(self) -> bool:
        return self.unit == "us"


def _m(column: str, label: str, unit: str, worse: str = HIGHER, source: str = "step_metrics") -> Metric:
    return Metric(column, label, unit, worse, source)


METRICS: Mapping[str, Metric] = {m.column: m for m in (
    _m("step_time_us", "step time", "us"),
    _m("gpu_busy_us", "GPU busy time", "us"),
    _m("compute_us", "compute time", "us"),
    _m("comm_us", "communication time", "us"),
    _m("exposed_comm_us", "exposed communication", "us"),
    _m("memory_us", "memcpy/memset time", "us"),
    _m("idle_us", "GPU idle time", "us"),
    _m("idle_pct", "GPU idle share", "pct"),
    _m("compute_pct", "compute share", "pct", LOWER),
    _m("overlap_pct", "comm/compute overlap", "pct", LOWER),
    _m("launch_delay_outliers", "late launches", "count"),
    _m("launch_delay_outlier_pct", "late launch share", "pct"),
    _m("blocked_launch_us", "blocked launch time", "us"),
    _m("short_kernel_pct", "short kernel share", "pct"),
    _m("kernels", "kernels", "count"),
    _m("launches", "launches", "count"),
    _m("syncs", "synchronisations", "count"),
    _m("memcpy_count", "memory copies", "count"),
    _m("memcpy_dtoh_count", "device-to-host copies", "count"),
    _m("dur_us", "kernel time", "us", source="op_steps"),
    _m("collective_dur_us", "collective time", "us", source="collectives_per_step"),
)}
"""Every metric the gate knows, by column name."""

RELATIVE_METRICS: Mapping[str, str] = {
    "step_time": "step_time_us", "gpu_busy": "gpu_busy_us", "compute": "compute_us", "communication": "comm_us",
    "exposed_communication": "exposed_comm_us", "memory": "memory_us", "idle": "idle_us", "idle_pct": "idle_pct",
    "overlap_pct": "overlap_pct", "kernel_time": "dur_us", "collective_time": "collective_dur_us",
}
"""Relative check name (config ``relative.<name>``) -> metric column."""
ABSOLUTE_METRICS: Mapping[str, str] = {
    "idle_pct": "idle_pct", "compute_pct": "compute_pct", "overlap_pct": "overlap_pct",
    "launch_delay_outliers": "launch_delay_outliers", "launch_delay_outlier_pct": "launch_delay_outlier_pct",
    "blocked_launch": "blocked_launch_us", "short_kernel_pct": "short_kernel_pct",
}
"""Absolute check name (config ``absolute.<name>``) -> metric column."""
STRUCTURAL_COUNTS: Mapping[str, tuple[str, ...]] = {
    "kernels": (), "collectives": (), "memcpy": ("memcpy_count", "memcpy_dtoh_count"), "syncs": ("syncs",),
    "launches": ("launches",),
}
"""Structural check name -> per-step count columns it compares (kernels and collectives compare
key sets and per-key calls instead)."""


VERSION_KEYS: Mapping[str, str] = {
    "pytorch_version": "pytorch", "torch_version": "pytorch", "cuda_runtime_version": "cuda_runtime",
    "cuda_driver_version": "cuda_driver", "cupti_version": "cupti", "hip_runtime_version": "hip_runtime",
    "hip_driver_version": "hip_driver", "roctracer_version": "roctracer",
}
"""Trace metadata keys that name a library version (Kineto writes them at the top level; some
harnesses nest them in a ``metadata`` object), and the name the gate reports them under."""


def versions_of(meta: TraceMeta) -> dict[str, str]:
    """Library versions a rank's trace records (empty when it records none), e.g.
    ``{"cuda_runtime": "12040", "cupti": "22", "nccl": "2.17.1"}``."""
    out: dict[str, str] = {}
    nested = meta.other.get("metadata")
    for source in (meta.other, nested if isinstance(nested, dict) else {}):
        for key, label in VERSION_KEYS.items():
            value = source.get(key)
            if label not in out and isinstance(value, (str, int, float)) and not isinstance(value, bool):
                out[label] = str(value)
    nccl = meta.distributed_info.get("nccl_version")
    if isinstance(nccl, (str, int)):
        out["nccl"] = str(nccl)
    return out


@dataclass(frozen=True, slots=True)
class SideData:
    """One side of a comparison reduced to the gate's inputs (see the module docstring).

    ``gpus``: GPU name per rank (None when the trace has no ``deviceProperties``);
    ``versions``: PyTorch/CUDA versions where known; ``skipped_steps``: samples dropped by
    ``steps.skip_first``; ``warmup_steps``: step numbers dropped as warm-up (in any run);
    ``runs``: recorded runs on this side; ``cpu_ops``/``invocations``: see the module docstring
    (empty when not built).
    """

    label: str
    steps: pd.DataFrame
    ops: pd.DataFrame
    collectives: pd.DataFrame
    ranks: tuple[int, ...]
    gpus: Mapping[int, str | None]
    world_size: int | None = None
    versions: Mapping[str, str] | None = None
    skipped_steps: int = 0
    warmup_steps: tuple[int, ...] = ()
    runs: int = 1
    cpu_ops: pd.DataFrame | None = None
    invocations: pd.DataFrame | None = None
    efficiency: pd.DataFrame | None = None
    """The newest run's ``op_efficiency`` table (the Tensor Core check, the hardware note)."""
    efficiency_steps: pd.DataFrame | None = None
    """Per (run, rank, step, top op): kernel µs, FLOPs, bytes (the achieved-throughput checks)."""
    _pivots: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    """What :mod:`perfreport.gate.keyed` makes once per side, whichever checks ask: the sample x
    key sums by (table, key columns, value), the keys' codes, the samples' numbers (a new side,
    e.g. from ``dataclasses.replace``, starts empty)."""

    @property
    def has_steps(self) -> bool:
        return bool(len(self.steps)) and bool((self.steps["step"] != WHOLE_TRACE_STEP).any())


def side_data(label: str, step_table: pd.DataFrame, op_table: pd.DataFrame, collective_table: pd.DataFrame, *,
              ranks: tuple[int, ...], gpus: Mapping[int, str | None], world_size: int | None = None,
              versions: Mapping[str, str] | None = None, steps: StepsConfig | None = None,
              invocation_table: pd.DataFrame | None = None) -> SideData:
    """Build a :class:`SideData` from the analysis tables of one side (one run, or several
    concatenated with a ``run`` column; without it everything is run 0).

    Drops the first ``steps.skip_first`` steps of every (run, rank) and then each run's warm-up
    steps (:func:`warmup_steps`), never a rank's last remaining sample; adds the derived share
    columns, and cuts the op, collective and invocation tables to the remaining samples.
    """
    steps = steps or StepsConfig()
    step_table, op_table, collective_table = (_with_run(t) for t in (step_table, op_table, collective_table))
    table = step_table.sort_values(SAMPLE, kind="stable").reset_index(drop=True)
    skipped = 0
    if steps.skip_first > 0 and len(table):
        position = table.groupby(["run", "rank"]).cumcount().to_numpy()
        per_rank = table.groupby(["run", "rank"])["step"].transform("size").to_numpy()
        keep = (position >= steps.skip_first) | (per_rank <= steps.skip_first)
        skipped = int((~keep).sum())
        table = table[keep].reset_index(drop=True)
    warm: set[int] = set()
    if steps.auto_warmup and len(table):
        drop = np.zeros(len(table), dtype=bool)
        for rows in table.groupby("run").indices.values():  # a loop over the few runs
            found = warmup_steps(table.iloc[rows], steps.warmup_threshold_pct, steps.max_warmup_steps)
            warm.update(found)
            drop[rows] = np.isin(table["step"].to_numpy()[rows], found)
        table = table[~drop].reset_index(drop=True)
    launches = table["launches"].to_numpy(dtype=np.float64) if len(table) else np.empty(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        table = table.assign(
            launch_delay_outlier_pct=np.where(launches > 0, 100.0 * table["launch_delay_outliers"] / launches, np.nan),
            short_kernel_pct=np.where(launches > 0, 100.0 * table["short_kernels"] / launches, np.nan),
        )
    samples = table[SAMPLE] if len(table) else None
    # (compared as Python objects: pandas' text column compares a million rows 2.5x slower)
    is_gpu = op_table["kind"].to_numpy(dtype=object) == "gpu" if len(op_table) else np.zeros(0, dtype=bool)
    in_samples = _sample_rows(op_table, samples)  # (one pass over the op rows, split by kind after)
    ops, cpu_ops = (op_table[in_samples & kind].reset_index(drop=True) for kind in (is_gpu, ~is_gpu))
    invocations = _with_run(invocation_table) if invocation_table is not None else None
    return SideData(label=label, steps=table, ops=ops,
                    collectives=_in_samples(collective_table, samples),
                    ranks=tuple(ranks), gpus=dict(gpus), world_size=world_size, versions=dict(versions or {}),
                    skipped_steps=skipped, warmup_steps=tuple(sorted(warm)),
                    runs=int(table["run"].nunique()) if len(table) else 1,
                    cpu_ops=cpu_ops,
                    invocations=None if invocations is None else _in_samples(invocations, samples))


SAMPLE = ["run", "rank", "step"]
"""The columns that name one sample."""


def _with_run(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with a ``run`` column (0 where it has none: a side of one run)."""
    return table if "run" in table.columns else table.assign(run=np.zeros(len(table), dtype=np.int64))


def warmup_steps(table: pd.DataFrame, threshold_pct: float, max_steps: int) -> tuple[int, ...]:
    """Step numbers that are warm-up on some rank: leading steps (at most ``max_steps``, leaving
    at least two) each more than ``threshold_pct`` % slower than the median step time of the
    rank's later steps. Dropped on every rank so that steps stay aligned across ranks.

    >>> t = pd.DataFrame({"rank": 0, "step": [5, 6, 7, 8], "step_time_us": [190.0, 100, 104, 98]})
    >>> warmup_steps(t, 20.0, 2)
    (5,)
    """
    found: set[int] = set()
    if not len(table) or max_steps <= 0:
        return ()
    for _, g in table.groupby("rank", sort=True):  # a loop over ranks, then over a few leading steps
        times = g["step_time_us"].to_numpy(dtype=np.float64)
        numbers = g["step"].to_numpy()
        for i in range(min(max_steps, len(times) - 2)):
            if numbers[i] == WHOLE_TRACE_STEP:
                break
            later = times[i + 1:]
            later = later[~np.isnan(later)]
            if not len(later) or not times[i] > np.median(later) * (1.0 + threshold_pct / 100.0):
                break
            found.add(int(numbers[i]))
    return tuple(sorted(found))


def _in_samples(table: pd.DataFrame, samples: pd.DataFrame | None) -> pd.DataFrame:
    """The rows of ``table`` whose (run, rank, step) is one of ``samples``' (None: none)."""
    return table[_sample_rows(table, samples)].reset_index(drop=True)


def _sample_rows(table: pd.DataFrame, samples: pd.DataFrame | None) -> np.ndarray:
    """Whether each row of ``table`` has the (run, rank, step) of one of ``samples``."""
    if samples is None or not len(table):
        return np.zeros(len(table), dtype=bool)
    return tuples_in([table[c].to_numpy(np.int64) for c in SAMPLE], [samples[c].to_numpy(np.int64) for c in SAMPLE])


@dataclass(frozen=True, slots=True)
class Group:
    """The samples of one check target on each side: ``rank`` is the rank judged (None for an
    aggregate over ranks), ``baseline``/``candidate`` the sample vectors (NaN dropped),
    ``baseline_step_us`` the baseline's median step time over the same samples (for floors) and
    ``baseline_runs``/``candidate_runs`` the run of each sample (None: all run 0);
    ``sample_kind``: "step", or "rank-step" for every (rank, step) pooled over ranks."""

    rank: int | None
    baseline: np.ndarray
    candidate: np.ndarray
    baseline_step_us: float
    baseline_runs: np.ndarray | None = None
    candidate_runs: np.ndarray | None = None
    sample_kind: str = "step"


def rank_pairs(baseline: SideData, candidate: SideData) -> list[tuple[int, int]]:
    """(baseline rank, candidate rank) judged against each other by the "each" aggregation: the
    common ranks; with none in common but as many ranks on each side (two jobs' single-rank
    traces, or the same job on other rank numbers), the ranks in sorted order, as the
    attribution pairs them; otherwise none."""
    common = sorted(set(baseline.ranks) & set(candidate.ranks))
    if common:
        return [(r, r) for r in common]
    if len(baseline.ranks) == len(candidate.ranks):
        return list(zip(sorted(baseline.ranks), sorted(candidate.ranks)))
    return []


def _per_step(values: pd.Series, frame: pd.DataFrame, how: str, worse: str) -> tuple[np.ndarray, np.ndarray]:
    """Per (run, step) over ranks: the worst rank's value (max if higher is worse) or the mean;
    (values, run of each)."""
    run, step, v = frame["run"].to_numpy(), frame["step"].to_numpy(), values.to_numpy(dtype=np.float64)
    if run.dtype.kind in "iu" and step.dtype.kind in "iu":  # one row per (run, step), the usual case: no grouping
        keep = ~np.isnan(v)
        run, step, v = run[keep], step[keep], v[keep]
        if ((run[1:] > run[:-1]) | ((run[1:] == run[:-1]) & (step[1:] > step[:-1]))).all():
            return v, run.astype(np.int64)  # already in (run, step) order, each once: the step tables' usual order
        order = np.lexsort((step, run))
        run, step = run[order], step[order]
        if not len(run) or ((run[1:] != run[:-1]) | (step[1:] != step[:-1])).all():
            return v[order], run.astype(np.int64)
    data = pd.DataFrame({"run": frame["run"].to_numpy(), "step": frame["step"].to_numpy(),
                         "v": values.to_numpy(dtype=np.float64)}).dropna()
    if not len(data):
        return np.empty(0), np.empty(0, dtype=np.int64)
    g = data.groupby(["run", "step"])["v"]
    out = g.mean() if how == "mean" else g.max() if worse == HIGHER else g.min()
    return out.to_numpy(), out.index.get_level_values("run").to_numpy(dtype=np.int64)


def aggregate(baseline: pd.DataFrame, candidate: pd.DataFrame, b_values: pd.Series, c_values: pd.Series,
              aggregation: str, worse: str, pairs: list[tuple[int, int]], memo: dict | None = None) -> list[Group]:
    """The groups a check compares. ``baseline``/``candidate`` are the sides' step tables (rows
    aligned with ``b_values``/``c_values``); "each" gives one group per rank pair (falling back to
    "mean" when no ranks pair), "worst"/"mean" one group of per-step aggregates. ``memo``: where
    the baseline's median step times are kept for the next check of the same sides (the same for
    every check: 2 ms a check and rank on a 345,319-step rank)."""
    memo = {} if memo is None else memo
    b_step = baseline["step_time_us"]
    if aggregation == "each" and pairs:
        groups = []
        b_rank_of, c_rank_of = baseline["rank"].to_numpy(), candidate["rank"].to_numpy()  # (columns read once:
        b_all, c_all = b_values.to_numpy(np.float64), c_values.to_numpy(np.float64)  # the loop runs per check)
        b_run_of, c_run_of = baseline["run"].to_numpy(), candidate["run"].to_numpy()
        b_step_all = b_step.to_numpy(np.float64)
        for b_rank, c_rank in pairs:  # a loop over ranks
            bm, cm = b_rank_of == b_rank, c_rank_of == c_rank
            b, c = b_all[bm], c_all[cm]
            b_runs, c_runs = b_run_of[bm], c_run_of[cm]
            if ("each", b_rank) not in memo:
                memo[("each", b_rank)] = _median(b_step_all[bm])
            groups.append(Group(rank=c_rank, baseline=b[~np.isnan(b)], candidate=c[~np.isnan(c)],
                                baseline_step_us=memo[("each", b_rank)],
                                baseline_runs=b_runs[~np.isnan(b)], candidate_runs=c_runs[~np.isnan(c)]))
        return groups
    how = "mean" if aggregation == "each" else aggregation
    b, b_runs = _per_step(b_values, baseline, how, worse)
    c, c_runs = _per_step(c_values, candidate, how, worse)
    if ("per step", how) not in memo:
        memo[("per step", how)] = _median(_per_step(b_step, baseline, how, HIGHER)[0])
    return [Group(rank=None, baseline=b, candidate=c, baseline_step_us=memo[("per step", how)],
                  baseline_runs=b_runs, candidate_runs=c_runs)]


def _median(values: np.ndarray) -> float:
    values = values[~np.isnan(values)]
    return float(np.median(values)) if len(values) else float("nan")


__all__ = ["Metric", "METRICS", "RELATIVE_METRICS", "ABSOLUTE_METRICS", "STRUCTURAL_COUNTS", "SideData", "side_data",
           "versions_of", "warmup_steps", "Group", "aggregate", "rank_pairs", "HIGHER",
           "LOWER", "WHOLE_TRACE_STEP", "SAMPLE"]
