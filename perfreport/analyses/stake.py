"""Time at stake: what each cause costs the step, so a diagnosis can rank them.

What we measure, and why not HTA's critical-path graph. HTA's graph
(:mod:`perfreport.hta.cp_graph`) is one rank's longest path through CPU ops, launches and
kernels; it knows nothing of collectives that run on the host (gloo), it costs seconds per step
on large traces and gives one path, not "how much would this cause give back". We use a cheaper
equivalent that answers that question directly and adds up: every instant of each step window
(the ProfilerStep spans, :func:`perfreport.analyses.step_metrics.step_windows`: the last,
cut-short step left out; without steps one window over the whole trace) goes to exactly one
cause, the first in this order that is active at that instant:

1. **compute**: a computation kernel runs on the GPU (keyed by normalised kernel name); several
   at once share the instant equally;
2. **communication** on the GPU: a collective kernel runs and no compute hides it (exposed
   communication, keyed by collective kind);
3. **memory**: a memcpy/memset runs and no kernel hides it (keyed by direction);
4. **communication** on the host: the GPU is idle while a CPU-side collective op runs on any
   thread of the rank (``gloo:*``, ``c10d::*``, ``record_param_comms``, ``nccl:*``:
   :data:`perfreport.model.CPU_COLLECTIVE`, outermost op only), keyed by its kind;
5. **sync**: the GPU is idle between the start of a host synchronisation call
   (``cudaDeviceSynchronize`` …) and the next GPU work: the queue drained while the host waited;
6. **launch**: the GPU is idle while the host is inside a launch call (launch overhead);
7. **host**: the GPU is idle while the host runs an op: the direct children of the ProfilerStep
   on its thread (``enumerate(DataLoader)#…__next__``, ``Optimizer.step#…``, the forward), then
   the top-level ops of the other threads that launch GPU work (the autograd thread's backward);
   the rest is host time outside any op (``<no op>``: Python, waits the profiler did not record).

So the GPU's work counts where it holds the GPU, exposed communication where it runs (GPU or
CPU), and GPU idle time goes to what the host was doing instead of feeding it: the causes on
the path that sets the step time when the GPU is the resource being waited for. The parts of a
window add up to its length exactly. What it cannot see: host work that overlaps GPU work
(counted as the GPU's), and waits for other ranks inside a collective (counted as
communication; :mod:`perfreport.analyses.stragglers` says when a late rank causes them). Where
the GPU sets the pace the two agree: on the recorded GPU-bound run, each step's compute cause is
the compute-bound part of HTA's critical path within 2 % (``tests/test_diagnosis.py``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import COMMUNICATION, GPU_SIDE_CATEGORIES, MEMORY, RankTrace, TraceSet
from ..units import pct
from .attribution import _host_ops
from .callstack import call_stack
from .collectives import collective_kind
from .diff import normalize_kernel_name
from .intervals import window_overlaps
from .memory_bw import direction_of
from .step_metrics import SYNC_CALLS, WHOLE_TRACE_STEP, step_windows

KINDS = ("compute", "communication", "memory", "sync", "launch", "host")
NO_OP = "<no op>"
"""Host key of GPU idle time when the host ran no op the profiler recorded."""
BACKWARD = "autograd backward (CPU side)"
"""Host key of the autograd engine's ops on its own thread."""
TOP_KEYS = 10
"""Keys kept per (rank, kind) in the summary table; the rest are one "other" row."""

PART_COLUMNS = ("rank", "step", "kind", "key", "runs_on", "time_us")
COLUMNS = ("rank", "method", "steps", "step_us", "step_us_median", "kind", "key", "runs_on", "us_per_step",
           "pct_of_step")
"""``step_us`` is the mean window (the parts add up to it); ``step_us_median`` the median window,
the step time the headline states (the gate's statistic: the judged steps' median)."""


# --- one rank: the parts of each window -----------------------------------------------------------
def _layer(kind: str, runs_on: str, starts: np.ndarray, ends: np.ndarray, keys: np.ndarray):
    ok = np.isfinite(starts) & np.isfinite(ends) & (ends > starts)
    return kind, runs_on, starts[ok].astype(np.float64), ends[ok].astype(np.float64), keys[ok]


def _labels(trace: RankTrace, codes: np.ndarray, fn) -> np.ndarray:
    """``fn(name)`` per row, computed once per distinct name code."""
    uniq, inverse = np.unique(codes, return_inverse=True)
    out = np.array([fn(trace.strings[c] if c >= 0 else "") for c in uniq.tolist()], dtype=object)
    return out[inverse.ravel()]


def _layers(trace: RankTrace, steps: np.ndarray) -> list[tuple]:
    """The causes' intervals in priority order (see the module docstring)."""
    gpu = trace.gpu_work_rows()
    gpu = gpu[trace.dur[gpu] > 0]
    s, e = trace.ts[gpu], trace.ts[gpu] + trace.dur[gpu]
    cls = trace.kernel_classes(gpu)
    comm, mem = cls == COMMUNICATION, cls == MEMORY
    comp = ~comm & ~mem  # computation and the odd OTHER kernel hold the GPU alike
    memset = trace.memsets()[gpu]
    layers = [
        _layer("compute", "GPU", s[comp], e[comp], _labels(trace, trace.name[gpu[comp]], normalize_kernel_name)),
        _layer("communication", "GPU", s[comm], e[comm], _labels(trace, trace.name[gpu[comm]], collective_kind)),
        _layer("memory", "GPU", s[mem], e[mem],
               np.where(memset[mem], "Memset", _labels(trace, trace.name[gpu[mem]], lambda n: direction_of(n, False)))),
    ]
    stack = call_stack(trace)
    cpu = stack.is_node & ~trace.is_cat(GPU_SIDE_CATEGORIES) & np.isfinite(trace.dur)
    coll = cpu & trace.cpu_collectives()
    parent = stack.parent
    outer = np.flatnonzero(coll & ~np.where(parent >= 0, coll[np.clip(parent, 0, None)], False))
    layers.append(_layer("communication", "CPU", trace.ts[outer], trace.ts[outer] + trace.dur[outer],
                         _labels(trace, trace.name[outer], _cpu_collective_key)))
    syncs = np.flatnonzero(cpu & trace.is_name(SYNC_CALLS))
    starts = np.sort(s)
    nxt = np.searchsorted(starts, trace.ts[syncs] + trace.dur[syncs], side="left")
    has = nxt < len(starts)
    syncs = syncs[has]
    layers.append(_layer("sync", "CPU", trace.ts[syncs], starts[nxt[has]], trace.decode(trace.name[syncs])))
    launch = np.flatnonzero(trace.launches() & cpu)
    layers.append(_layer("launch", "CPU", trace.ts[launch], trace.ts[launch] + trace.dur[launch],
                         trace.decode(trace.name[launch])))
    main, _ = _host_ops(trace, steps)
    layers.append(_layer("host", "CPU", trace.ts[main], trace.ts[main] + trace.dur[main],
                         _labels(trace, trace.name[main], str)))
    threads = np.unique(trace.tid[launch]) if len(launch) else np.empty(0, trace.tid.dtype)
    main_tids = np.unique(trace.tid[main]) if len(main) else np.empty(0, trace.tid.dtype)
    other = np.flatnonzero(cpu & (stack.depth == 0) & np.isin(trace.tid, threads) & ~np.isin(trace.tid, main_tids)
                           & ~trace.steps())
    layers.append(_layer("host", "CPU", trace.ts[other], trace.ts[other] + trace.dur[other],
                         _labels(trace, trace.name[other], _thread_op_key)))
    return layers


def _cpu_collective_key(name: str) -> str:
    """"gloo:all_reduce", "c10d::allreduce_" -> "all_reduce"; a bare record_param_comms -> "other"."""
    return collective_kind(name.split(":", 1)[-1] if name.startswith(("gloo:", "nccl:", "rccl:")) else name)


def _thread_op_key(name: str) -> str:
    return BACKWARD if name.startswith("autograd::engine::evaluate_function") else name


def attribute(ws: np.ndarray, we: np.ndarray, layers: list[tuple]) -> pd.DataFrame:
    """(window, kind, key, runs_on, time_us): each instant of each window [ws, we) given to the
    first layer active then, shared equally by that layer's active intervals; the time no layer
    claims is host time outside any op (``NO_OP``). Windows must not overlap."""
    edges = [ws, we] + [x for layer in layers for x in (layer[2], layer[3])]
    bounds = np.unique(np.concatenate(edges))
    seg = np.diff(bounds)
    free = np.ones(len(seg), dtype=bool)
    order = np.argsort(ws, kind="stable")
    ws_s, we_s = ws[order], we[order]
    frames = []
    for kind, runs_on, s, e, keys in layers:  # a loop over the few layers, each vectorised
        if not len(s):
            continue
        delta = (np.bincount(np.searchsorted(bounds, s), minlength=len(bounds))
                 - np.bincount(np.searchsorted(bounds, e), minlength=len(bounds)))
        active = np.cumsum(delta)[: len(seg)].astype(np.float64)
        claim = free & (active > 0.5)
        rate = np.where(claim, 1.0 / np.maximum(active, 1.0), 0.0)
        cum = np.r_[0.0, np.cumsum(rate * seg)]
        ev, win, lo, hi = window_overlaps(ws_s, we_s, s, e)  # each interval against its windows
        time = cum[np.searchsorted(bounds, hi)] - cum[np.searchsorted(bounds, lo)]
        frames.append(pd.DataFrame({"window": order[win], "kind": kind, "key": keys[ev], "runs_on": runs_on,
                                    "time_us": time}))
        free &= ~claim
    cum_free = np.r_[0.0, np.cumsum(free * seg)]
    rest = cum_free[np.searchsorted(bounds, we_s)] - cum_free[np.searchsorted(bounds, ws_s)]
    frames.append(pd.DataFrame({"window": order, "kind": "host", "key": NO_OP, "runs_on": "CPU", "time_us": rest}))
    out = pd.concat(frames, ignore_index=True)
    return out.loc[out["time_us"] > 0].reset_index(drop=True)


def stake_parts(trace: RankTrace) -> pd.DataFrame:
    """The parts of each step window of one rank (PART_COLUMNS, µs), summed per cause; the
    parts of a step add up to its length. Memoised (a per-rank summary)."""
    return trace.memo("stake_parts", lambda: _stake_parts(trace)).copy(deep=False)


def _stake_parts(trace: RankTrace) -> pd.DataFrame:
    windows = step_windows(trace)
    windows = windows[np.isfinite(windows["start_us"]) & np.isfinite(windows["end_us"])
                      & (windows["end_us"] > windows["start_us"])]
    if not len(windows):
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("kind", "key", "runs_on") else np.float64)
                             for c in PART_COLUMNS})
    numbers = windows["step"].to_numpy(np.int64)
    ws, we = windows["start_us"].to_numpy(np.float64), windows["end_us"].to_numpy(np.float64)
    parts = attribute(ws, we, _layers(trace, numbers))
    parts["step"] = numbers[parts["window"].to_numpy(np.int64)]
    out = parts.groupby(["step", "kind", "key", "runs_on"], sort=True)["time_us"].sum().reset_index()
    out.insert(0, "rank", trace.rank)
    return out.astype({"rank": np.int64, "step": np.int64})[list(PART_COLUMNS)]


# --- the table -------------------------------------------------------------------------------------
def time_at_stake(traces: TraceSet) -> pd.DataFrame:
    """Per rank and cause: µs per step window and % of the mean window (COLUMNS), the
    ``TOP_KEYS`` largest keys of each kind plus an "other" row. ``method``: "steps" (the
    ProfilerStep windows, last one dropped) or "whole_trace" (no steps: one window)."""
    frames = []
    for t in traces:  # a loop over ranks
        p = stake_parts(t)
        if not len(p):
            continue
        steps = np.unique(p["step"].to_numpy())
        n = len(steps)
        step_us = float(p["time_us"].sum()) / n
        step_us_median = float(np.median(p.groupby("step", sort=False)["time_us"].sum().to_numpy()))
        g = p.groupby(["kind", "key", "runs_on"], sort=False)["time_us"].sum().reset_index()
        g["us_per_step"] = g["time_us"] / n
        g = g.sort_values(["kind", "us_per_step", "key"], ascending=[True, False, True], kind="stable")
        g["position"] = g.groupby("kind").cumcount()
        top = g.loc[g["position"] < TOP_KEYS]
        rest = g.loc[g["position"] >= TOP_KEYS].groupby("kind", sort=False)["us_per_step"].sum().reset_index()
        rest = rest.assign(key="other", runs_on="")
        f = pd.concat([top[["kind", "key", "runs_on", "us_per_step"]], rest], ignore_index=True)
        f["pct_of_step"] = [pct(x, step_us) for x in f["us_per_step"]]
        frames.append(f.assign(rank=t.rank, method="whole_trace" if steps.tolist() == [WHOLE_TRACE_STEP] else "steps",
                               steps=n, step_us=step_us, step_us_median=step_us_median))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("method", "kind", "key", "runs_on") else np.float64)
                             for c in COLUMNS})
    out = pd.concat(frames, ignore_index=True)
    return out.astype({"rank": np.int64, "steps": np.int64})[list(COLUMNS)]


__all__ = ["BACKWARD", "KINDS", "NO_OP", "attribute", "stake_parts", "time_at_stake"]
