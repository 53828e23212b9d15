"""One row per GPU op invocation: the gate's samples below the step.

A trace with one or two profiler steps per rank gives too few per-step samples to tell a
change from noise, but every kernel, copy and collective call in it is a sample of its own:
the i-th call of a kernel in the baseline ran the same work as the i-th call of that kernel in
the candidate (same model, same inputs), so a ratio per matched call measures a slowdown with
as many samples as there are calls. :func:`gpu_invocations` lists them with the key that
matches them (the normalised kernel name, as :func:`perfreport.analyses.diff.op_steps` keys
them) and their call order within (rank, step, key).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import COLLECTIVE, KERNEL_CLASS_NAMES, TraceSet
from .collectives import collectives
from .diff import _common_steps, _in_steps, _normalized
from .grouping import occurrences, sorted_codes

COLUMNS = ("rank", "step", "key", "cls", "call", "dur_us")
"""``cls``: COMPUTATION / COMMUNICATION / MEMORY / OTHER (:func:`perfreport.model.kernel_class`),
or COLLECTIVE for :func:`collective_calls`; ``call``: 0-based order of the invocation among the
rank's calls of ``key`` in ``step``."""


def gpu_invocations(traces: TraceSet, exact: bool = False) -> pd.DataFrame:
    """Every GPU op (kernel, memcpy, memset) in the steps common to all ranks (the whole trace,
    step -1, when there are none), in start order per rank: rank, step, key, cls, call, dur_us (µs)."""
    steps = _common_steps(traces)
    frames = []
    for t in traces:  # a loop over ranks
        frame = rank_invocations(t, exact)
        if len(steps):  # (whole steps are kept or dropped: the calls' numbers within a step hold)
            frame = frame[_in_steps(frame["step"].to_numpy(), steps)]
        else:  # one sample, the whole trace: calls numbered over it
            frame = frame.assign(step=np.int64(-1), call=frame["call_in_trace"])
        if not len(frame):
            continue
        frames.append(frame[list(COLUMNS)])
    return pd.concat(frames, ignore_index=True) if frames else _empty()


def rank_invocations(trace, exact: bool = False) -> pd.DataFrame:
    """One rank's GPU ops in start order: rank, step (its profiler step, -1 outside any), key,
    cls, dur_us, and each call's number among the rank's calls of its key in its step (``call``)
    and in the whole trace (``call_in_trace``). Memoised per rank, so a digest can carry it (the
    parent filters the common steps). The numbers are counted here, on the keys' codes: the
    parent's pandas count on the key texts took 0.13 s of a compare's gate inputs for 2 x 568,657
    calls, after the workers were done."""
    return trace.memo(("invocations", exact), lambda: _rank_invocations(trace, exact))


def _rank_invocations(t, exact: bool) -> pd.DataFrame:
    rows = t.gpu_work_rows()
    rows = rows[np.argsort(t.ts[rows], kind="stable")]
    codes, label = np.unique(t.name[rows], return_inverse=True)
    label = label.ravel()
    keys = t.decode(codes) if exact else _normalized(t, codes)
    key = pd.factorize(np.asarray(keys, dtype=object))[0][label]  # names that normalise alike: one code
    step = t.iteration[rows].astype(np.int64)
    return pd.DataFrame({"rank": np.full(len(rows), t.rank, dtype=np.int64), "step": step, "key": keys[label],
                         "cls": KERNEL_CLASS_NAMES[t.gpu_class()[rows]], "dur_us": t.dur[rows].astype(np.float64),
                         "call": occurrences(sorted_codes(step)[0] * max(len(codes), 1) + key),
                         "call_in_trace": occurrences(key)})


def collective_calls(traces: TraceSet) -> pd.DataFrame:
    """Every collective call (:func:`perfreport.analyses.collectives.collectives`) as rows of
    :data:`COLUMNS`: key ``"<kind> <process group>"`` (as the gate's collective checks name
    them), cls COLLECTIVE, its call order per (rank, step, key)."""
    calls = collectives(traces)
    if not len(calls):
        return _empty()
    calls = calls.sort_values(["rank", "ts_us"], kind="stable")
    frame = pd.DataFrame({"rank": calls["rank"].to_numpy(np.int64), "step": calls["step"].to_numpy(np.int64),
                          "key": (calls["kind"].astype(str) + " " + calls["process_group"].astype(str)).to_numpy(),
                          "cls": COLLECTIVE, "dur_us": calls["dur_us"].to_numpy(np.float64)})
    frame["call"] = frame.groupby(["rank", "step", "key"], sort=False).cumcount().astype(np.int64)
    return frame[list(COLUMNS)].reset_index(drop=True)


def _empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c in ("key", "cls") else np.int64 if c != "dur_us"
                                      else np.float64) for c in COLUMNS})


__all__ = ["gpu_invocations", "rank_invocations", "collective_calls", "COLUMNS", "COLLECTIVE"]
