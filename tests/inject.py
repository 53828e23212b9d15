"""Changes injected into real traces in memory, for the gate's tests: every kernel slower, more
host-side wait in one CPU op, ranks replicated. Each returns a new TraceSet; nothing on disk."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pandas as pd

from perfreport.model import TraceSet


def slow_kernels(traces: TraceSet, factor: float) -> TraceSet:
    """Every kernel ``factor`` times longer; later kernels of the same stream and step start
    later by the time the earlier ones gained (a slower GPU running the same work)."""
    ranks = {}
    for t in traces:
        rows = np.flatnonzero(t.kernels() & np.isfinite(t.ts) & np.isfinite(t.dur))
        frame = pd.DataFrame({"row": rows, "step": t.iteration[rows], "pid": t.pid[rows], "tid": t.tid[rows],
                              "ts": t.ts[rows], "extra": t.dur[rows] * (factor - 1.0)})
        frame = frame.sort_values(["step", "pid", "tid", "ts"], kind="stable")
        before = frame.groupby(["step", "pid", "tid"])["extra"].cumsum() - frame["extra"]
        ts, dur = t.ts.copy(), t.dur.copy()
        ts[frame["row"].to_numpy()] += before.to_numpy()
        dur[rows] *= factor
        ranks[t.rank] = dataclasses.replace(t, ts=ts, dur=dur, _memo={})
    return TraceSet(ranks=ranks, source=f"{traces.source} (kernels x{factor:g})")


def host_wait(traces: TraceSet, op: str, extra_us: float) -> TraceSet:
    """``extra_us`` more host time inside every call of the CPU op whose name matches ``op``
    (a regex): time after each call's start is shifted by ``extra_us``; CPU events spanning the
    start (the call, its parents) grow, GPU events keep their durations and start later."""
    pattern = re.compile(op)
    ranks = {}
    for t in traces:
        codes = t.codes_where(lambda s: pattern.search(s) is not None)
        matched = t.complete & np.isin(t.name, codes) & ~t.gpu_side() & np.isfinite(t.ts)
        starts = np.sort(t.ts[matched])
        ts, end = t.ts, t.ts + t.dur
        new_ts = ts + extra_us * np.searchsorted(starts, ts, side="left")
        new_end = end + extra_us * np.searchsorted(starts, end, side="left")
        gpu = t.gpu_side()
        new_dur = np.where(gpu, t.dur, new_end - new_ts)
        ranks[t.rank] = dataclasses.replace(t, ts=new_ts, dur=new_dur, _memo={})
    return TraceSet(ranks=ranks, source=f"{traces.source} (+{extra_us:g} µs in {op})")


def replicate_ranks(traces: TraceSet, n: int) -> TraceSet:
    """``n`` ranks cycled from the ranks of ``traces`` (rank i is a copy of rank i mod len)."""
    originals = list(traces)
    ranks = {}
    for i in range(n):
        t = originals[i % len(originals)]
        ranks[i] = dataclasses.replace(t, meta=dataclasses.replace(t.meta, rank=i), _memo={})
    return TraceSet(ranks=ranks, source=f"{traces.source} (x{n} ranks)")


def rename_op(traces: TraceSet, op: str, new_name: str) -> TraceSet:
    """Every CPU event whose name matches ``op`` (a regex) renamed to ``new_name`` (another
    DataLoader iterator, say): a change of the CPU op structure and nothing else."""
    pattern = re.compile(op)
    ranks = {}
    for t in traces:
        codes = t.codes_where(lambda s: pattern.search(s) is not None)
        strings = np.append(t.strings, np.array([new_name], dtype=object))
        name = np.where(np.isin(t.name, codes) & ~t.gpu_side(), len(t.strings), t.name).astype(t.name.dtype)
        ranks[t.rank] = dataclasses.replace(t, strings=strings, name=name,
                                            _codes={s: i for i, s in enumerate(strings.tolist())}, _memo={})
    return TraceSet(ranks=ranks, source=f"{traces.source} ({op} renamed)")
