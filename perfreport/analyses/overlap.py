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

from ..model import COMMUNICATION, COMPUTATION, TraceSet
from ..units import pct
from .intervals import merged_intersection_length, union
from .kernels import CLASSES, WorkUnions, gpu_work_unions

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


def _with_host_comm(traces: TraceSet, per_step: bool) -> list[dict]:
    """:func:`_overlap` per rank (or per (rank, step) with GPU work or host collectives), the
    host collectives added as communication intervals."""
    rows = []
    for trace in traces:  # a loop over ranks
        host = np.flatnonzero(trace.host_collectives())
        h_s, h_e = trace.ts[host], trace.ts[host] + trace.dur[host]
        if not per_step:
            rows.append({"rank": trace.rank, **_overlap(*_merged(gpu_work_unions(trace, per_step=False)[0][1],
                                                                 h_s, h_e))})
            continue
        steps = dict(gpu_work_unions(trace, per_step=True))
        h_step = trace.iteration[host]
        for step in sorted(set(steps) | set(h_step.tolist())):  # a loop over steps
            mine = h_step == step
            rows.append({"rank": trace.rank, "step": step, **_overlap(*_merged(steps.get(step), h_s[mine],
                                                                                h_e[mine]))})
    return rows


def comm_comp_overlap(traces: TraceSet) -> pd.DataFrame:
    """One row per rank: comm, compute, overlapped and exposed comm time (µs), overlap % of comm."""
    return pd.DataFrame(_with_host_comm(traces, per_step=False), columns=list(COLUMNS))


def comm_comp_overlap_per_step(traces: TraceSet) -> pd.DataFrame:
    """:func:`comm_comp_overlap` per (rank, step) with GPU work or host collectives."""
    return pd.DataFrame(_with_host_comm(traces, per_step=True), columns=["rank", "step", *COLUMNS[1:]])
