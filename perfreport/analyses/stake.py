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

import functools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..model import (CLASS_INDEX, COMMUNICATION, GPU_SIDE_CATEGORIES, MEMORY, RankTrace, TraceSet, search_sorted,
                     sorted_unique)
from ..units import pct
from .step_parts import _host_ops, part_order, sorted_ranks
from .callstack import call_stack, stack_levels
from .collectives import collective_kind
from .diff import normalize_kernel_name
from .grouping import key_sums, texts_of_codes, tuple_columns
from .intervals import sorted_edges, window_candidates
from .nesting import _nest
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
    if ok.all():  # the usual case: no copies
        return kind, runs_on, starts.astype(np.float64, copy=False), ends.astype(np.float64, copy=False), keys
    return kind, runs_on, starts[ok].astype(np.float64, copy=False), ends[ok].astype(np.float64, copy=False), keys[ok]


def _labels(trace: RankTrace, codes: np.ndarray, fn) -> pd.Categorical:
    """``fn(name)`` per row, computed once per distinct name code (a categorical: the few
    distinct labels and a code per row, so the parts are summed by integer key)."""
    return texts_of_codes(codes, len(trace.strings), lambda c: fn(trace.strings[c] if c >= 0 else ""))


def _layers(trace: RankTrace, steps: np.ndarray) -> list[tuple]:
    """The causes' intervals in priority order (see the module docstring)."""
    gpu = trace.gpu_work_rows()
    gpu = gpu[trace.dur[gpu] > 0]
    s, e = trace.ts[gpu], trace.ts[gpu] + trace.dur[gpu]
    cls = trace.gpu_class()[gpu]
    comm, mem = cls == CLASS_INDEX[COMMUNICATION], cls == CLASS_INDEX[MEMORY]
    comp = ~comm & ~mem  # computation and the odd OTHER kernel hold the GPU alike
    n = len(trace.strings)  # code of a memset: one past the string table
    copy = texts_of_codes(np.where(trace.memsets()[gpu[mem]], n, trace.name[gpu[mem]]), n + 1,
                        lambda c: "Memset" if c == n else direction_of(trace.strings[c] if c >= 0 else "", False))
    layers = [
        _layer("compute", "GPU", s[comp], e[comp], _labels(trace, trace.name[gpu[comp]], normalize_kernel_name)),
        _layer("communication", "GPU", s[comm], e[comm], _labels(trace, trace.name[gpu[comm]], collective_kind)),
        _layer("memory", "GPU", s[mem], e[mem], copy),
    ]
    stack = call_stack(trace)
    gpu_side = trace.is_cat(GPU_SIDE_CATEGORIES)

    def cpu_rows(rows: np.ndarray) -> np.ndarray:
        """The rows that are CPU nodes of the call stack with a duration (row subsets: no
        pass over every event)."""
        return rows[stack.is_node[rows] & ~gpu_side[rows] & np.isfinite(trace.dur[rows])]

    def spans(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        start = trace.ts[rows]
        return start, start + trace.dur[rows]

    coll_rows = cpu_rows(np.flatnonzero(trace.cpu_collectives()))  # ascending
    parent = stack.parent[coll_rows]
    at = np.minimum(search_sorted(coll_rows, parent), max(len(coll_rows) - 1, 0))
    outer = coll_rows[~((parent >= 0) & (coll_rows[at] == parent))] if len(coll_rows) else coll_rows  # outermost only
    layers.append(_layer("communication", "CPU", *spans(outer), _labels(trace, trace.name[outer], _cpu_collective_key)))
    syncs = cpu_rows(np.flatnonzero(trace.is_name(SYNC_CALLS)))
    starts = np.sort(s, kind="stable")  # nearly sorted: timsort
    nxt = search_sorted(starts, trace.ts[syncs] + trace.dur[syncs], side="left")
    has = nxt < len(starts)
    syncs = syncs[has]
    layers.append(_layer("sync", "CPU", trace.ts[syncs], starts[nxt[has]], _labels(trace, trace.name[syncs], str)))
    launch = cpu_rows(np.flatnonzero(trace.launches()))
    layers.append(_layer("launch", "CPU", *spans(launch), _labels(trace, trace.name[launch], str)))
    main, _ = _host_ops(trace, steps)
    layers.append(_layer("host", "CPU", *spans(main), _labels(trace, trace.name[main], str)))
    threads = _distinct(trace.tid_at(launch))
    main_tids = _distinct(trace.tid_at(main))
    by_level = stack_levels(trace)  # deepest first: the last level is the top-level nodes
    top = by_level[-1] if len(by_level) and stack.depth[by_level[-1][0]] == 0 else np.empty(0, np.int64)
    other = cpu_rows(top)
    other = other[~trace.steps()[other]]  # top-level ops, then their threads
    other_tids = trace.tid_at(other)
    other = other[np.isin(other_tids, threads) & ~np.isin(other_tids, main_tids)]
    layers.append(_layer("host", "CPU", *spans(other), _labels(trace, trace.name[other], _thread_op_key)))
    return layers


def _distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of a column that comes in long runs (a thread's events): only the
    runs' first values are sorted."""
    return sorted_unique(values[np.r_[True, values[1:] != values[:-1]]] if len(values) else values)


def _cpu_collective_key(name: str) -> str:
    """"gloo:all_reduce", "c10d::allreduce_" -> "all_reduce"; a bare record_param_comms -> "other"."""
    return collective_kind(name.split(":", 1)[-1] if name.startswith(("gloo:", "nccl:", "rccl:")) else name)


def _thread_op_key(name: str) -> str:
    return BACKWARD if name.startswith("autograd::engine::evaluate_function") else name


def attribute(ws: np.ndarray, we: np.ndarray, layers: list[tuple]) -> pd.DataFrame:
    """(window, kind, key, runs_on, time_us): each instant of each window [ws, we) given to the
    first layer active then, shared equally by that layer's active intervals; the time no layer
    claims is host time outside any op (``NO_OP``). Windows must not overlap."""
    c = _claims(ws, we, layers)
    kinds = np.array([layer[0] for layer in layers] + ["host"], dtype=object)
    runs_on = np.array([layer[1] for layer in layers] + ["CPU"], dtype=object)
    labels, offset = _distinct_keys(layers)
    return pd.DataFrame({"window": c.window.astype(np.int64), "kind": kinds[c.layer],
                         "key": labels[offset[c.layer] + c.code], "runs_on": runs_on[c.layer], "time_us": c.time})


@dataclass(frozen=True)
class _Claims:
    """:func:`attribute`'s parts as columns, in the layers' order (then the unclaimed rest):
    the window, the layer (``len(layers)`` for the rest), the key's code among the layer's
    distinct keys (:func:`_keys`), the time (µs, > 0). The three indices are int32: a 1 GB
    rank of 345,319 steps has 2 M parts, and at 8 bytes each (and the layers' parts held while
    they are joined) they took 84 MB more of its analyses' peak (79,000 -> 57,000 page faults)."""

    window: np.ndarray
    layer: np.ndarray
    code: np.ndarray
    time: np.ndarray


def _distinct_keys(layers: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    """(every layer's distinct keys one after the other, then ``NO_OP``; where each layer's start)."""
    distinct = [_keys(layer[4])[1] for layer in layers] + [np.array([NO_OP], dtype=object)]
    return np.concatenate(distinct), np.cumsum([0] + [len(d) for d in distinct])


def _keys(keys) -> tuple[np.ndarray, np.ndarray]:
    """(code per interval, distinct keys): a categorical's own codes, else factorised."""
    if isinstance(keys, pd.Categorical):
        return keys.codes.astype(np.int64), np.asarray(keys.categories, dtype=object)
    codes, distinct = pd.factorize(np.asarray(keys, dtype=object))
    return codes.astype(np.int64), np.asarray(distinct, dtype=object)


def _claims(ws: np.ndarray, we: np.ndarray, layers: list[tuple]) -> _Claims:
    """:func:`attribute`'s parts as integer columns (:class:`_Claims`).

    All edges are sorted once (:func:`sorted_edges`) and every interval knows its edges'
    positions, so no value is searched for. A layer's claim is the free segments where it is
    active; its running integral is summed over the claimed segments only (adding the zeros of
    the other segments would not change a float sum), so each layer costs a pass over the
    segments' masks plus its own intervals."""
    edges = [x for layer in layers for x in (layer[2], layer[3])]
    bounds, (iws, iwe, *pos) = sorted_edges(ws, we, *edges)
    seg = np.diff(bounds)
    del bounds  # the segments' lengths are all the layers read of it
    n_seg = len(seg)
    free = np.ones(n_seg, dtype=bool)
    work = _ClaimBuffers(n_seg)
    order = np.argsort(ws, kind="stable")
    ws_s, we_s, iws_s, iwe_s = ws[order], we[order], iws[order], iwe[order]
    order32 = order.astype(np.int32)  # the parts' windows: 4 bytes a part (2 M parts on a 1 GB rank)
    parts = []
    for i, (_, _, s, e, keys) in enumerate(layers):  # a loop over the few layers, each vectorised
        if not len(s):
            continue
        si, ei = pos[2 * i], pos[2 * i + 1]
        cum_at = _layer_claim(si, ei, free, seg, work)
        ev, win = window_candidates(ws_s, we_s, s, e)  # each interval against its windows
        # positions of the overlap's ends (positions order as the values: equal values, one
        # position); a pair that does not overlap gets hi <= lo, so no time, and is dropped
        lo = np.maximum(si[ev], iws_s[win])
        hi = np.minimum(ei[ev], iwe_s[win])
        time = cum_at(hi) - cum_at(lo)
        del lo, hi
        ok = time > 0
        parts.append((i, order32[win[ok]], _keys(keys)[0][ev[ok]].astype(np.int32), time[ok]))
        del ev, win, time, ok
    unclaimed = np.flatnonzero(free)
    cum_free = np.r_[0.0, np.cumsum(seg[unclaimed])]
    rest = cum_free[search_sorted(unclaimed, iwe_s)] - cum_free[search_sorted(unclaimed, iws_s)]
    ok = rest > 0
    parts.append((len(layers), order32[ok], np.zeros(int(ok.sum()), dtype=np.int32), rest[ok]))
    return _Claims(window=np.concatenate([p[1] for p in parts]),
                   layer=np.repeat(np.array([p[0] for p in parts], dtype=np.int32), [len(p[1]) for p in parts]),
                   code=np.concatenate([p[2] for p in parts]), time=np.concatenate([p[3] for p in parts]))


class _ClaimBuffers:
    """The memory every layer of one :func:`_claims` writes in C: the running integral (one float
    per bound) and the count changes per bound (zeros between layers). Made once for all layers:
    each layer's fresh 8-byte-per-bound arrays page-faulted anew, on a rank of 173,000 steps
    (6.1 M bounds) 2 x 49 MB for each of its 6 layers."""

    def __init__(self, n_seg: int) -> None:
        self.cum = np.empty(n_seg + 1)
        self.delta = np.zeros(n_seg + 1, dtype=np.int64)


def _layer_claim(si: np.ndarray, ei: np.ndarray, free: np.ndarray, seg: np.ndarray, work: _ClaimBuffers):
    """One layer of :func:`_claims`: claim the free segments where the layer is active (``free``
    is cleared there) and return ``cum_at(k)``, the running integral of the layer's rate (1 /
    its active intervals on the segments it claims) up to edge position ``k``, valid until the
    next layer is claimed into ``work``. In C when the extension is built (one pass, the same
    floats), else numpy over the claimed segments."""
    if hasattr(_nest, "layer_claim"):  # an extension built before it was added lacks it
        cum = work.cum
        _nest.layer_claim(np.ascontiguousarray(si, np.int64), np.ascontiguousarray(ei, np.int64),
                          free.view(np.uint8), np.ascontiguousarray(seg, np.float64), cum, work.delta)
        return lambda k: cum[k]
    n_bounds = len(seg) + 1
    active = np.cumsum(np.bincount(si, minlength=n_bounds) - np.bincount(ei, minlength=n_bounds))[:len(seg)]
    claim = free & (active > 0)
    claimed = np.flatnonzero(claim)
    cum = np.r_[0.0, np.cumsum((1.0 / active[claimed].astype(np.float64)) * seg[claimed])]
    free &= ~claim
    return lambda k: cum[search_sorted(claimed, k)]


def stake_parts(trace: RankTrace) -> pd.DataFrame:
    """The parts of each step window of one rank (PART_COLUMNS, µs), summed per cause; the
    parts of a step add up to its length. Memoised (a per-rank summary)."""
    return _memoised_parts(trace).frame.copy(deep=False)


@dataclass(frozen=True)
class _Parts:
    """:func:`stake_parts`' rows as columns: each one's step, time (µs) and (kind, key,
    runs_on) as its position in the sorted distinct ``triples``, which the table groups and
    orders by. The frame, with the triples' strings per row, is made only when read
    (:attr:`frame`): the time at stake never reads it, and a rank of 345,319 steps has 2 M parts,
    whose three object columns took 0.075 s to make."""

    rank: int
    step: np.ndarray
    time_us: np.ndarray
    triple: np.ndarray
    triples: list[tuple[str, str, str]]

    @functools.cached_property
    def frame(self) -> pd.DataFrame:
        if not len(self.step):
            return pd.DataFrame({c: pd.Series(dtype=object if c in ("kind", "key", "runs_on") else np.float64)
                                 for c in PART_COLUMNS})
        which = tuple_columns(self.triples, self.triple)
        return pd.DataFrame({"rank": np.full(len(self.step), self.rank, dtype=np.int64), "step": self.step,
                             "kind": which[:, 0], "key": which[:, 1], "runs_on": which[:, 2],
                             "time_us": self.time_us}, columns=list(PART_COLUMNS))


def _memoised_parts(trace: RankTrace) -> _Parts:
    return trace.memo("stake_parts", lambda: _stake_parts(trace))


def _stake_parts(trace: RankTrace) -> _Parts:
    windows = step_windows(trace)
    windows = windows[np.isfinite(windows["start_us"]) & np.isfinite(windows["end_us"])
                      & (windows["end_us"] > windows["start_us"])]
    if not len(windows):
        return _Parts(trace.rank, np.empty(0, np.int64), np.empty(0), np.empty(0, np.int64), [])
    numbers = windows["step"].to_numpy(np.int64)
    ws, we = windows["start_us"].to_numpy(np.float64), windows["end_us"].to_numpy(np.float64)
    layers = _layers(trace, numbers)
    claims = _claims(ws, we, layers)
    # one id per distinct (kind, key, runs_on) over the layers' few distinct keys, so the
    # parts are summed by integer key (pandas' sum, in the rows' order: the same sums)
    labels, offset = _distinct_keys(layers)
    kinds = [layer[0] for layer in layers] + ["host"]
    runs_on = [layer[1] for layer in layers] + ["CPU"]
    triples = [(kinds[i], labels[j], runs_on[i]) for i in range(len(kinds)) for j in range(offset[i], offset[i + 1])]
    ids, distinct = pd.factorize(pd.Series(triples, dtype=object))
    n_ids = max(len(distinct), 1)
    key = numbers[claims.window] * n_ids + ids[offset[claims.layer] + claims.code]
    group, sums = key_sums(key, {"time": np.asarray(claims.time, dtype=np.float64)})
    distinct = list(distinct)
    rank = sorted_ranks(distinct)
    order = part_order(group, n_ids, distinct)
    group = group[order]
    return _Parts(trace.rank, group // n_ids, sums["time"][order], rank[group % n_ids], sorted(distinct))


# --- the table -------------------------------------------------------------------------------------
def time_at_stake(traces: TraceSet) -> pd.DataFrame:
    """Per rank and cause: µs per step window and % of the mean window (COLUMNS), the
    ``TOP_KEYS`` largest keys of each kind plus an "other" row. ``method``: "steps" (the
    ProfilerStep windows, last one dropped) or "whole_trace" (no steps: one window)."""
    frames = []
    for t in traces:  # a loop over ranks
        parts = _memoised_parts(t)
        if len(parts.step):
            frames.append(_rank_table(t.rank, parts))
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype=object if c in ("method", "kind", "key", "runs_on") else np.float64)
                             for c in COLUMNS})
    out = pd.concat(frames, ignore_index=True)
    return out.astype({"rank": np.int64, "steps": np.int64})[list(COLUMNS)]


def _rank_table(rank: int, parts: _Parts) -> pd.DataFrame:
    """One rank's rows of :func:`time_at_stake`. The parts are summed per (kind, key, runs_on)
    by pandas (its compensated sums) on the triples' integer positions, groups in order of first
    appearance; the rest in numpy on the few groups: by kind, then µs per step (largest first),
    then key, ties kept in that order (the stable sort pandas did on the strings)."""
    time_us = pd.Series(parts.time_us)
    steps = sorted_unique(parts.step)
    n = len(steps)
    step_us = float(time_us.sum()) / n
    step_us_median = float(np.median(time_us.groupby(parts.step, sort=False).sum().to_numpy()))
    sums = time_us.groupby(parts.triple, sort=False).sum()
    triple = sums.index.to_numpy(np.int64)
    us_per_step = sums.to_numpy(np.float64) / n
    kinds, keys = sorted({k for k, _, _ in parts.triples}), sorted({k for _, k, _ in parts.triples})
    kind_of = np.array([kinds.index(k) for k, _, _ in parts.triples], dtype=np.int64)[triple]
    key_of = np.searchsorted(np.array(keys, dtype=object), np.array([k for _, k, _ in parts.triples], dtype=object))[triple]
    order = np.lexsort((key_of, -us_per_step, kind_of))
    triple, us_per_step, kind_of = triple[order], us_per_step[order], kind_of[order]
    starts = np.flatnonzero(np.r_[True, kind_of[1:] != kind_of[:-1]])
    position = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    top, rest = position < TOP_KEYS, position >= TOP_KEYS
    other = pd.Series(us_per_step[rest]).groupby(kind_of[rest], sort=False).sum()  # per kind, kinds in order
    which = tuple_columns(parts.triples, triple[top])
    value = np.r_[us_per_step[top], other.to_numpy(np.float64)]
    n_other = len(other)
    return pd.DataFrame({
        "kind": np.r_[which[:, 0], np.array(kinds, dtype=object)[other.index.to_numpy(np.int64)]],
        "key": np.r_[which[:, 1], np.full(n_other, "other", dtype=object)],
        "runs_on": np.r_[which[:, 2], np.full(n_other, "", dtype=object)],
        "us_per_step": value, "pct_of_step": np.array([pct(x, step_us) for x in value.tolist()], dtype=np.float64),
        "rank": rank, "method": "whole_trace" if steps.tolist() == [WHOLE_TRACE_STEP] else "steps", "steps": n,
        "step_us": step_us, "step_us_median": step_us_median})


__all__ = ["BACKWARD", "KINDS", "NO_OP", "attribute", "stake_parts", "time_at_stake"]
