"""Communication/computation overlap: how much collective time is hidden under compute.

Per rank, comm = union of COMMUNICATION kernels and of the collectives that run on the host
(gloo's ``gloo:*`` spans, :meth:`perfreport.model.RankTrace.host_collectives`: communication
wherever it runs), compute = union of COMPUTATION kernels, and
overlap = the time both run (µs). ``overlap_pct`` is overlap as a % of comm time: 100 means
every collective ran while some computation did, 0 means communication was fully exposed.
It is NaN for a rank without communication kernels (nothing to hide). Per step as well
(kernels belong to the step of their launch; step -1 is outside any ProfilerStep).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import COMMUNICATION, COMPUTATION, TraceSet, search_sorted, sorted_union
from ..units import pct, pcts
from .intervals import merged_intersection_length, union
from .kernels import CLASSES, WorkUnions, gpu_work_step_unions, gpu_work_unions, host_collective_spans
from .segments import intersection_lengths, segment_union

COLUMNS = ("rank", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap_pct")


def _overlap(comm: tuple[np.ndarray, np.ndarray], comp: tuple[np.ndarray, np.ndarray]) -> dict:
    """The row of merged (:func:`~perfreport.analyses.intervals.union`) communication and
    computation intervals."""
    comm_us, compute_us = (float((e - s).sum()) for s, e in (comm, comp))
    overlap = merged_intersection_length(comm, comp)
    return {"comm_us": comm_us, "compute_us": compute_us, "overlap_us": overlap,
            "exposed_comm_us": comm_us - overlap, "overlap_pct": pct(overlap, comm_us)}


def _merged(unions: WorkUnions | None, h_s: np.ndarray, h_e: np.ndarray) -> tuple[tuple, tuple]:
    """(communication, computation) merged: the GPU work's class unions, the host collectives
    (``h_s``, ``h_e``) added to communication (a union of unions is the union of all)."""
    none = (np.empty(0), np.empty(0))
    comm = unions.by_class[CLASSES.index(COMMUNICATION)] if unions is not None else none
    comp = unions.by_class[CLASSES.index(COMPUTATION)] if unions is not None else none
    if len(h_s):
        comm = union(np.r_[comm[0], h_s], np.r_[comm[1], h_e])
    return comm, comp


def _rows(traces: TraceSet) -> list[dict]:
    """:func:`_overlap` per rank, the host collectives added as communication intervals."""
    rows = []
    for trace in traces:  # a loop over ranks
        h_s, h_e, _ = host_collective_spans(trace)
        rows.append({"rank": trace.rank, **_overlap(*_merged(gpu_work_unions(trace), h_s, h_e))})
    return rows


def _step_frame(trace) -> pd.DataFrame:
    """:func:`_overlap` of every step of one rank with GPU work or host collectives, all at once
    (:mod:`~perfreport.analyses.segments`)."""
    u = gpu_work_step_unions(trace)
    h_s, h_e, h_step = host_collective_spans(trace)
    steps = sorted_union(u.steps, h_step).astype(np.int64)
    n = len(steps)
    gpu_k = search_sorted(steps, u.steps)  # each GPU step's place among all steps
    comm_gpu = u.by_class[CLASSES.index(COMMUNICATION)]
    comp = u.by_class[CLASSES.index(COMPUTATION)].regrouped(gpu_k, n)
    comm = segment_union(np.concatenate([gpu_k[comm_gpu.group], search_sorted(steps, h_step)]), n,
                         np.concatenate([comm_gpu.starts, h_s]), np.concatenate([comm_gpu.ends, h_e]))
    comm_us, compute_us = comm.lengths(), comp.lengths()
    overlap = intersection_lengths(comm, comp)
    return pd.DataFrame({"rank": np.full(n, trace.rank, dtype=np.int64), "step": steps, "comm_us": comm_us,
                         "compute_us": compute_us, "overlap_us": overlap, "exposed_comm_us": comm_us - overlap,
                         "overlap_pct": pcts(overlap, comm_us)})


def comm_comp_overlap(traces: TraceSet) -> pd.DataFrame:
    """One row per rank: comm, compute, overlapped and exposed comm time (µs), overlap % of comm."""
    return pd.DataFrame(_rows(traces), columns=list(COLUMNS))


def comm_comp_overlap_per_step(traces: TraceSet) -> pd.DataFrame:
    """:func:`comm_comp_overlap` per (rank, step) with GPU work or host collectives."""
    frames = [f for f in (_step_frame(trace) for trace in traces) if len(f)]
    if not frames:
        return pd.DataFrame([], columns=["rank", "step", *COLUMNS[1:]])
    return pd.concat(frames, ignore_index=True)
