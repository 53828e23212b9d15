"""Straggler detection across ranks: which rank makes the others wait.

In synchronous data-parallel training every rank blocks in the same collectives, so a slow
rank shows up as a *late start*: it reaches the step's dominant collective later than the
others, which sit in that kernel waiting for it. This is HTA's late-start method, measured
per step and per rank:

1. Communication kernels are NCCL/RCCL kernels by name, old and current spellings
   (``ncclKernel_*``, ``ncclDevKernel_*``). Those shorter than 1 % of the median step time
   are ignored.
2. The dominant collective is the kernel name whose per-step duration varies most across
   ranks (mean over steps of the standard deviation across ranks).
3. A rank's offset in a step is the start of its last such kernel minus the start of its own
   ``ProfilerStep`` span (each rank's own clock, so no cross-rank clock alignment is needed);
   its ``late_start_us`` is that offset minus the smallest offset of any rank in the step.

Step-time evidence is reported next to it: ``wall_excess_pct``, how much longer (+) or shorter
(−) the rank's median step is than the median over ranks; it is not part of the verdict (in
synchronous training every rank's step is as long as the slowest's).

The verdict, one test for every table and the diagnosis (:func:`late_verdict`): a rank is a
straggler when it is measurably later than the others at the collectives: its median lateness
over steps is at least ``LATE_START_PCT`` % of the median step time *and* at least
``NOISE_FACTOR`` times the step-to-step noise (:func:`step_noise_us`: the robust spread of the
step time from step to step, median over ranks). Lateness is never negative (behind the
earliest rank), so the sign cannot contradict the verdict. One rank, or no steps: nothing to
compare, nobody is flagged.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from ..model import RankTrace, TraceSet
from ..units import pct
from .grouping import Grouped
from .steps import profiler_steps, rank_steps

COMM_KERNEL_PREFIXES = ("ncclKernel", "ncclDevKernel")
"""Name prefixes of NCCL (and RCCL, which keeps NCCL's names) collective kernels."""
MIN_KERNEL_STEP_FRACTION = 0.01
"""Collectives shorter than this fraction of the median step time are ignored (HTA's 1 %)."""
LATE_START_PCT = 5.0
"""A median late start above this % of the median step time flags a straggler."""
NOISE_FACTOR = 2.0
"""A straggler's median lateness is at least this many times the step-to-step noise."""
MAD_TO_SIGMA = 1.4826

STEP_COLUMNS = ("rank", "step", "kernel", "kernel_start_us", "offset_us", "late_start_us", "kernel_dur_us",
                "wall_us")
RANK_COLUMNS = ("rank", "steps", "kernel", "late_start_us_median", "late_start_pct", "latest_steps",
                "wall_us_median", "wall_excess_pct", "noise_us", "is_straggler")


def step_noise_us(steps: pd.DataFrame) -> float:
    """The step-to-step noise of a job (µs): per rank, 1.4826 × the median absolute deviation
    of its step wall times (a robust standard deviation), then the median over ranks. 0 with
    one step per rank; NaN without steps."""
    if not len(steps):
        return float("nan")
    wall = steps["wall_us"].to_numpy(np.float64)
    med = steps.groupby("rank")["wall_us"].transform("median").to_numpy(np.float64)
    mad = pd.Series(np.abs(wall - med)).groupby(steps["rank"].to_numpy()).median()
    return float(MAD_TO_SIGMA * mad.median())


def late_verdict(median_lateness_us: float, median_step_us: float, noise_us: float, n_ranks: int) -> bool:
    """The straggler test (see the module docstring): later than the others by at least
    ``LATE_START_PCT`` % of the median step and ``NOISE_FACTOR`` × the step-to-step noise."""
    if n_ranks < 2 or not np.isfinite(median_lateness_us) or median_lateness_us <= 0:
        return False
    floor = max(LATE_START_PCT / 100.0 * median_step_us, NOISE_FACTOR * (noise_us if np.isfinite(noise_us) else 0.0))
    return bool(median_lateness_us >= floor)


def late_start_counts(metric: pd.DataFrame, num_candidates: int) -> pd.Series:
    """HTA's top-k rule: per iteration, flag the ranks whose ``metric`` is at least the k-th
    largest (ties can flag more than k); return the number of flagged iterations per rank
    (index: rank, ascending). ``metric`` has columns rank, iteration, metric."""
    k = max(1, int(num_candidates))
    m = metric.loc[metric["iteration"] >= 0] if metric["iteration"].nunique() > 1 else metric
    kth = m.groupby("iteration")["metric"].transform(
        lambda s: np.sort(s.to_numpy())[::-1][min(k, len(s)) - 1])
    flags = (m["metric"] >= kth).astype(np.int64)
    counts = flags.groupby(m["rank"]).sum()
    return counts.reindex(sorted(metric["rank"].unique()), fill_value=0)


def rank_parts(trace: RankTrace) -> None:
    """Make what the straggler tables read of one rank (its steps and, when it has steps, its
    communication kernels) without the cross-rank tables themselves: a worker that analyses
    this rank alone (:mod:`perfreport.running.digest`) needs only these."""
    if len(rank_steps(trace)):
        _comm_kernels(trace)


def _comm_kernels(trace: RankTrace) -> tuple[np.ndarray, ...]:
    """Communication kernels launched inside a step: (rank, step, name, start µs, dur µs, row)
    arrays. Memoised: a per-rank summary (a few rows per collective call), names decoded so it
    stands without the rank's string table (what a worker process sends back)."""
    return trace.memo("comm_kernels", lambda: _compute_comm_kernels(trace))


def _compute_comm_kernels(trace: RankTrace) -> tuple[np.ndarray, ...]:
    names = trace.codes_where(lambda s: s.startswith(COMM_KERNEL_PREFIXES), no_step_names=True)
    rows = np.flatnonzero(trace.kernels())
    rows = rows[trace.name_in(names, rows) & (trace.iteration[rows] >= 0) & np.isfinite(trace.dur[rows])]
    return (np.full(len(rows), trace.rank, dtype=np.int64), trace.iteration[rows], trace.decode(trace.name[rows]),
            trace.ts[rows], trace.dur[rows], rows)


def straggler_steps(traces: TraceSet) -> pd.DataFrame:
    """One row per (rank, step) with the dominant collective: its start (trace µs), the offset
    from the rank's step start (µs), the late start behind the earliest rank (µs), the
    kernel's duration (µs) and the step's wall time (µs). Empty without steps or collectives.

    Computed once per trace set (:func:`stragglers` and the collective evidence build on it);
    each call gets its own (shallow, copy-on-write) frame.
    """
    return traces.memo("straggler_steps", lambda: _straggler_steps(traces)).copy(deep=False)


def _straggler_steps(traces: TraceSet) -> pd.DataFrame:
    steps = profiler_steps(traces)
    empty = pd.DataFrame({c: pd.Series(dtype=object if c == "kernel" else np.float64) for c in STEP_COLUMNS})
    if steps.empty:
        return empty
    median_wall = float(steps["wall_us"].median())
    parts = []
    for t in traces:  # a loop over ranks: each rank's long enough comm kernels, names decoded
        rank, step, name, start, dur, row = _comm_kernels(t)
        keep = (dur >= MIN_KERNEL_STEP_FRACTION * median_wall) & np.isin(step, steps["step"].to_numpy())
        parts.append((rank[keep], step[keep], name[keep], start[keep], dur[keep], row[keep]))
    rank, step, name, start, dur, row = (np.concatenate([p[i] for p in parts]) for i in range(6))
    if not len(rank):
        return empty
    # the last kernel of each name per (rank, step), by start time then file order
    kernel, names = pd.factorize(name, sort=True)  # codes that sort as the names do
    order = np.lexsort((row, start, kernel, step, rank))
    rank, step, kernel, start, dur = rank[order], step[order], kernel[order], start[order], dur[order]
    last = np.flatnonzero(np.r_[(rank[1:] != rank[:-1]) | (step[1:] != step[:-1]) | (kernel[1:] != kernel[:-1]),
                                True])
    rank, step, kernel, start, dur = rank[last], step[last], kernel[last], start[last], dur[last]
    # the dominant collective: the largest mean over steps of the spread across ranks
    per_step = Grouped({"step": step, "kernel": kernel, "dur": dur}, ["step", "kernel"])
    spread = Grouped({"kernel": kernel[per_step.first], "std": per_step.std("dur")}, ["kernel"])
    mean_spread = spread.mean("std")
    if np.isfinite(mean_spread).any():
        chosen = int(kernel[per_step.first][spread.first][np.nanargmax(mean_spread)])
    else:  # one rank (or one call each): the most frequent name, as pandas ranks them
        chosen = int(np.flatnonzero(np.asarray(names, dtype=object) ==
                                    pd.Series(np.asarray(names, dtype=object)[kernel]).value_counts().idxmax())[0])
    pick = kernel == chosen
    rank, step, start, dur = rank[pick], step[pick], start[pick], dur[pick]
    # the rank's own step start and wall time (steps are unique per (rank, step))
    position = {key: i for i, key in enumerate(zip(steps["rank"].tolist(), steps["step"].tolist()))}
    at = np.array([position.get(key, -1) for key in zip(rank.tolist(), step.tolist())], dtype=np.int64)
    found = at >= 0
    rank, step, start, dur, at = rank[found], step[found], start[found], dur[found], at[found]
    offset = start - steps["start_us"].to_numpy()[at]
    by_step = Grouped({"step": step, "offset": offset}, ["step"])
    return pd.DataFrame({
        "rank": rank, "step": step, "kernel": np.full(len(rank), names[chosen], dtype=object),
        "kernel_start_us": start, "offset_us": offset, "late_start_us": offset - by_step.min("offset")[by_step.ids],
        "kernel_dur_us": dur, "wall_us": steps["wall_us"].to_numpy()[at],
    }, columns=list(STEP_COLUMNS))


def stragglers(traces: TraceSet) -> pd.DataFrame:
    """One row per rank with steps: median late start (µs, and % of the median step time),
    in how many steps it was the latest to start, median step wall time (µs), its excess over
    the median across ranks (%), and the verdict (see the module docstring).

    Computed once per trace set (the collective straggler evidence builds on it); each call
    gets its own (shallow, copy-on-write) frame.
    """
    return traces.memo("stragglers", lambda: _stragglers(traces)).copy(deep=False)


def _stragglers(traces: TraceSet) -> pd.DataFrame:
    steps = profiler_steps(traces)
    if steps.empty:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in RANK_COLUMNS})
    per_step = straggler_steps(traces)
    wall = Grouped(steps, ["rank"])
    wall_median, wall_steps = wall.median("wall_us"), wall.size()
    overall = float(pd.Series(wall_median).median())
    late_median, kernel, latest = {}, {}, {}
    if len(per_step):
        by_rank = Grouped(per_step, ["rank"])
        ranks_with = by_rank.frame({})["rank"].tolist()
        late_median = dict(zip(ranks_with, by_rank.median("late_start_us").tolist()))
        kernel = dict(zip(ranks_with, per_step["kernel"].to_numpy()[by_rank.first].tolist()))
        # the latest rank(s) of each step: the largest late start, when above 0
        by_step = Grouped(per_step, ["step"])
        late = per_step["late_start_us"].to_numpy()
        latest_rows = (late > 0) & (late == by_step.max("late_start_us")[by_step.ids])
        latest = Counter(per_step["rank"].to_numpy()[latest_rows].tolist())
    n_ranks = wall.n
    noise = step_noise_us(steps)
    rows = []
    for rank, median, n_steps in zip(wall.frame({})["rank"].tolist(), wall_median.tolist(), wall_steps.tolist()):
        has = rank in late_median  # a loop over ranks, on plain numbers
        late_med = late_median[rank] if has else np.nan
        late_pct = pct(late_med, overall) if has else np.nan
        excess = pct(median - overall, overall)
        flagged = late_verdict(late_med, overall, noise, n_ranks)
        rows.append({
            "rank": int(rank), "steps": int(n_steps), "kernel": kernel.get(rank),
            "late_start_us_median": late_med, "late_start_pct": late_pct, "latest_steps": int(latest.get(rank, 0)),
            "wall_us_median": float(median), "wall_excess_pct": excess, "noise_us": noise,
            "is_straggler": flagged,
        })
    return pd.DataFrame(rows, columns=list(RANK_COLUMNS))


__all__ = ["COMM_KERNEL_PREFIXES", "late_start_counts", "late_verdict", "step_noise_us", "straggler_steps",
           "stragglers"]
