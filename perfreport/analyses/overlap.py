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
from .intervals import covered, intersection_length
from .kernels import CLASSES, class_positions, gpu_work, gpu_work_classes, gpu_work_steps

COLUMNS = ("rank", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap_pct")


def _overlap(starts: np.ndarray, ends: np.ndarray, classes: np.ndarray) -> dict:
    positions = class_positions(classes)
    comm, comp = positions == CLASSES.index(COMMUNICATION), positions == CLASSES.index(COMPUTATION)
    comm_us = covered(starts[comm], ends[comm])
    overlap = intersection_length((starts[comm], ends[comm]), (starts[comp], ends[comp]))
    return {"comm_us": comm_us, "compute_us": covered(starts[comp], ends[comp]), "overlap_us": overlap,
            "exposed_comm_us": comm_us - overlap, "overlap_pct": pct(overlap, comm_us)}


def _with_host_comm(traces: TraceSet, per_step: bool) -> list[dict]:
    """:func:`_overlap` per rank (or per (rank, step) with GPU work or host collectives), the
    host collectives added as communication intervals."""
    comm = CLASSES.index(COMMUNICATION)
    rows = []
    for trace in traces:  # a loop over ranks
        _, starts, ends, _ = gpu_work(trace)
        classes = gpu_work_classes(trace)
        host = np.flatnonzero(trace.host_collectives())
        h_s, h_e = trace.ts[host], trace.ts[host] + trace.dur[host]
        if not per_step:
            rows.append({"rank": trace.rank, **_overlap(np.r_[starts, h_s], np.r_[ends, h_e],
                                                        np.r_[classes, np.full(len(host), comm)])})
            continue
        steps = dict(gpu_work_steps(trace))
        h_step = trace.iteration[host]
        for step in sorted(set(steps) | set(h_step.tolist())):  # a loop over steps
            pos, mine = steps.get(step, np.empty(0, np.int64)), h_step == step
            rows.append({"rank": trace.rank, "step": step, **_overlap(
                np.r_[starts[pos], h_s[mine]], np.r_[ends[pos], h_e[mine]],
                np.r_[classes[pos], np.full(int(mine.sum()), comm)])})
    return rows


def comm_comp_overlap(traces: TraceSet) -> pd.DataFrame:
    """One row per rank: comm, compute, overlapped and exposed comm time (µs), overlap % of comm."""
    return pd.DataFrame(_with_host_comm(traces, per_step=False), columns=list(COLUMNS))


def comm_comp_overlap_per_step(traces: TraceSet) -> pd.DataFrame:
    """:func:`comm_comp_overlap` per (rank, step) with GPU work or host collectives."""
    return pd.DataFrame(_with_host_comm(traces, per_step=True), columns=["rank", "step", *COLUMNS[1:]])
