"""Communication/computation overlap: how much collective time is hidden under compute.

Per rank, comm = union of COMMUNICATION kernels, compute = union of COMPUTATION kernels, and
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
from .kernels import CLASSES, class_positions, gpu_work_rows

COLUMNS = ("rank", "comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap_pct")


def _overlap(starts: np.ndarray, ends: np.ndarray, classes: np.ndarray) -> dict:
    positions = class_positions(classes)
    comm, comp = positions == CLASSES.index(COMMUNICATION), positions == CLASSES.index(COMPUTATION)
    comm_us = covered(starts[comm], ends[comm])
    overlap = intersection_length((starts[comm], ends[comm]), (starts[comp], ends[comp]))
    return {"comm_us": comm_us, "compute_us": covered(starts[comp], ends[comp]), "overlap_us": overlap,
            "exposed_comm_us": comm_us - overlap, "overlap_pct": pct(overlap, comm_us)}


def comm_comp_overlap(traces: TraceSet) -> pd.DataFrame:
    """One row per rank: comm, compute, overlapped and exposed comm time (µs), overlap % of comm."""
    return pd.DataFrame(gpu_work_rows(traces, _overlap, per_step=False), columns=list(COLUMNS))


def comm_comp_overlap_per_step(traces: TraceSet) -> pd.DataFrame:
    """:func:`comm_comp_overlap` per (rank, step) with GPU work."""
    return pd.DataFrame(gpu_work_rows(traces, _overlap, per_step=True), columns=["rank", "step", *COLUMNS[1:]])
