"""Memory usage from the profiler's ``[memory]`` instants: over time, at its peak, per operator
and per profiler step.

``torch.profiler.profile(profile_memory=True)`` writes one ``[memory]`` instant event
(``ph: "i"``) per allocator call on the thread that made it. Its args: ``Bytes`` (positive for
an allocation, negative for a free), ``Device Type`` / ``Device Id`` (c10's ``DeviceType``:
0 CPU, 1 CUDA, 6 HIP, …; ROCm builds write 6), and in PyTorch ≥ 1.10 also ``Total Allocated``
and ``Total Reserved``: the caching allocator's totals for that device *after* the call, and
``Addr``.

Devices are labelled ``"cpu"``, ``"cuda:0"``, ``"hip:0"`` (``"type<N>:<id>"`` for other
types). The allocated-bytes series of a (rank, device) is ``Total Allocated`` when every event
of that device carries it; otherwise (June-2021 Kineto writes ``Bytes`` only) it is the running
sum of ``Bytes`` in time order: the *net* bytes allocated since the trace started, which can be
negative, and reserved bytes are unknown (NaN). :func:`memory_note` says when either happens.

Times are µs on the job's common clock (:meth:`TraceSet.aligned_ts`), so ranks can be drawn on
one axis. A rank without ``[memory]`` events contributes no rows; every function returns a
frame with its columns even when no rank has any. Memcpy/memset traffic (H2D, D2H, D2D, P2P)
and its bandwidth are in :mod:`perfreport.analyses.memory_bw`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import ConfigError
from ..model import RankTrace, TraceSet, sorted_unique
from .callstack import call_stack, cpu_events, operators
from .grouping import distinct_rows
from .nesting import thread_ids

MEMORY_EVENT_NAME = "[memory]"
DEVICE_TYPE_NAMES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 15: "hpu", 19: "mtia",
                     20: "privateuseone"}
"""c10::DeviceType values that occur in ``[memory]`` events, by the name PyTorch prints."""
TIMELINE_MAX_POINTS = 2000
"""Most points :func:`memory_timeline` keeps per (rank, device): enough for a figure a few
thousand pixels wide, small enough for summary.json (a long trace has ~10⁵ events per device)."""
DEFAULT_TOP_OPS = 20
"""Operators kept per (rank, device) by :func:`memory_by_op`."""
NO_OP = "<outside any op>"
"""Operator name for allocations made outside every ``cpu_op`` of their thread."""
NO_MEMORY_NOTE = ("no memory events: record with "
                  "torch.profiler.profile(profile_memory=True, record_shapes=True)")
NO_TOTALS_NOTE = ("memory events carry no 'Total Allocated' (PyTorch < 1.10): allocated bytes are "
                  "net bytes allocated since the trace started and reserved bytes are unknown")

EVENT_COLUMNS = ("rank", "device", "row", "pid", "tid", "ts_us", "step", "bytes", "allocated_bytes",
                 "reserved_bytes", "totals_recorded", "device_code")
"""The events' columns; ``device_code`` numbers a rank's devices in their labels' order, so that
the tables group and sort on integers: a groupby on the labels factorised them again each time
(39 ms of factorising under cProfile in one digest of the resnet50 V100 dataloader trace grown
to 200 MB, whose memory tables took 131 ms unprofiled)."""
TIMELINE_COLUMNS = ("rank", "device", "ts_us", "allocated_bytes", "reserved_bytes")
PEAK_COLUMNS = ("rank", "device", "events", "allocations", "frees", "allocated_bytes", "freed_bytes",
                "peak_allocated_bytes", "peak_allocated_ts_us", "peak_reserved_bytes", "peak_reserved_ts_us",
                "totals_recorded")
OP_COLUMNS = ("rank", "device", "op", "allocations", "allocated_bytes", "freed_bytes", "net_bytes")
STEP_COLUMNS = ("rank", "device", "step", "allocations", "peak_allocated_bytes", "allocated_bytes_delta")

_DTYPES = {"rank": np.int64, "device": object, "op": object, "row": np.int64, "pid": np.int64, "tid": np.int64,
           "step": np.int64, "events": np.int64, "allocations": np.int64, "frees": np.int64,
           "totals_recorded": bool, "reserved_bytes": np.float64, "peak_reserved_bytes": np.float64}


def _empty(columns: tuple[str, ...]) -> pd.DataFrame:
    return pd.DataFrame({c: np.empty(0, _DTYPES.get(c, np.float64 if c.endswith("_us") else np.int64))
                         for c in columns})


def device_label(device_type: int, device_id: int) -> str:
    """``"cpu"``, ``"cuda:0"``, ``"hip:1"``…: how PyTorch names the device of a memory event."""
    kind = DEVICE_TYPE_NAMES.get(int(device_type), f"type{int(device_type)}")
    return kind if kind == "cpu" or device_id < 0 else f"{kind}:{int(device_id)}"


def memory_rows(trace: RankTrace) -> np.ndarray:
    """Rows of the rank's ``[memory]`` instant events (file order)."""
    def compute() -> np.ndarray:
        rows = np.flatnonzero(trace.name == trace.code(MEMORY_EVENT_NAME))  # then the tests on those rows
        return rows[(trace.ph[rows] == trace.code("i")) & np.isfinite(trace.ts[rows])]

    return trace.memo("memory_rows", compute)


def rank_memory_events(trace: RankTrace) -> pd.DataFrame:
    """One row per ``[memory]`` event of one rank, sorted by (device, time, file order), with the
    allocated/reserved series described in the module docstring. ``ts_us`` is trace µs.
    Memoised on the trace (every function of this module starts from it): read it, never
    modify it."""
    return trace.memo("memory_events", lambda: _memory_events(trace))


def _memory_events(trace: RankTrace) -> pd.DataFrame:
    rows = memory_rows(trace)
    if len(rows) == 0:
        return _empty(EVENT_COLUMNS)
    dev_type = trace.arg("Device Type", -1, rows).astype(np.int64)
    dev_id = trace.arg("Device Id", -1, rows).astype(np.int64)
    both = np.stack([dev_type, dev_id], axis=1)
    first, inverse = distinct_rows(both)  # (np.unique(axis=0) sorts records: 0.27 s for 487,200 events)
    labels = np.array([device_label(t, i) for t, i in both[first]], dtype=object)  # a loop over devices
    by_label = np.argsort(labels, kind="stable")
    labels, code = _distinct_labels(labels[by_label], np.argsort(by_label)[inverse])
    ts = trace.ts[rows]
    order = np.lexsort((rows, ts, code))  # by device (its label), time, file order: every key distinct
    rows, ts, code = rows[order], ts[order], code[order]
    nbytes = trace.arg("Bytes", 0, rows).astype(np.int64)
    alloc = trace.arg("Total Allocated", -1, rows).astype(np.int64)
    res = trace.arg("Total Reserved", -1, rows).astype(np.int64)
    starts = _runs(code)  # each device's events are contiguous
    sizes = np.diff(np.r_[starts, len(code)])
    totals = np.repeat(np.logical_and.reduceat(alloc >= 0, starts), sizes)
    running = np.cumsum(nbytes)
    running -= np.repeat(running[starts] - nbytes[starts], sizes)  # each device's own running sum
    return pd.DataFrame({
        "rank": np.full(len(rows), trace.rank, np.int64), "device": labels[code], "row": rows,
        "pid": trace.pid_at(rows), "tid": trace.tid_at(rows), "ts_us": ts, "step": trace.iteration[rows],
        "bytes": nbytes, "allocated_bytes": np.where(totals, alloc, running),
        "reserved_bytes": np.where(totals & (res >= 0), res.astype(np.float64), np.nan),
        "totals_recorded": totals, "device_code": code,
    })


def _distinct_labels(labels: np.ndarray, code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct labels, each event's position among them) from sorted ``labels``, which
    may repeat (two device types PyTorch prints alike), and each event's position in them."""
    distinct = np.r_[True, labels[1:] != labels[:-1]] if len(labels) else np.empty(0, bool)
    return labels[distinct], (np.cumsum(distinct) - 1)[code]


def memory_events(traces: TraceSet) -> pd.DataFrame:
    """:func:`rank_memory_events` of every rank, ``ts_us`` on the common clock."""
    frames = []
    for t in traces:  # a loop over ranks
        f = rank_memory_events(t)
        if len(f):
            frames.append(f.assign(ts_us=f["ts_us"].to_numpy() + float(t.meta.ts_origin_us - traces.origin_us)))
    return pd.concat(frames, ignore_index=True) if frames else _empty(EVENT_COLUMNS)


def _first_smallest(starts: np.ndarray, key: np.ndarray) -> np.ndarray:
    """Position of the first smallest ``key`` in each run of positions that begins at ``starts``
    (ascending, the first 0): one linear pass, where a sort of (run, key) per extreme took the
    timeline 16 ms on the resnet50 V100 dataloader trace grown to 200 MB (4 ms now, best of 5)."""
    sizes = np.diff(np.r_[starts, len(key)])
    hits = np.flatnonzero(key == np.repeat(np.minimum.reduceat(key, starts), sizes))
    run = np.repeat(np.arange(len(starts)), sizes)[hits]
    return hits[np.r_[True, run[1:] != run[:-1]]]


def downsample_peaks(group: np.ndarray, allocated: np.ndarray, reserved: np.ndarray,
                     max_points: int) -> np.ndarray:
    """Positions to keep so each group (contiguous, in time order) has at most ``max_points``.

    A longer group is cut into ``(max_points - 1) // 4`` buckets of equal event counts; each
    keeps its first event, its allocated minimum and maximum, and its reserved maximum, and the
    group keeps its last event. Every peak and trough of allocated bytes survives (the global
    peak exactly), so a drawn line keeps its envelope; shorter groups are kept whole.
    """
    if max_points < 5:
        raise ConfigError(f"memory timeline max_points must be at least 5, got {max_points}")
    n = len(group)
    if n == 0:
        return np.empty(0, np.int64)
    starts = _runs(group)
    sizes = np.diff(np.r_[starts, n])
    size = np.repeat(sizes, sizes)
    pos_in = np.arange(n) - np.repeat(starts, sizes)
    buckets = (max_points - 1) // 4
    small = size <= max_points
    # global bucket id: group index * buckets + bucket within group (small groups: one per event)
    gidx = np.repeat(np.arange(len(starts)), sizes)
    within = np.where(small, pos_in, pos_in * buckets // size)
    bucket = gidx.astype(np.int64) * max(max_points, buckets) + within
    res = np.where(np.isnan(reserved), -np.inf, reserved)
    alloc = allocated.astype(np.float64)
    runs = _runs(bucket)  # buckets are contiguous, ascending
    keep = np.concatenate([
        runs,  # each bucket's first event
        _first_smallest(runs, alloc),
        _first_smallest(runs, -alloc),
        _first_smallest(runs, -res),
        starts + sizes - 1,
    ])
    return sorted_unique(keep)


def memory_timeline(traces: TraceSet, max_points: int = TIMELINE_MAX_POINTS) -> pd.DataFrame:
    """Allocated and reserved bytes over time per (rank, device), at most ``max_points`` per
    pair, peaks preserved (see :func:`downsample_peaks`). Each point is the value right after
    that event. Columns: rank, device, ts_us, allocated_bytes, reserved_bytes (NaN when not
    recorded). Empty without memory events."""
    ev = memory_events(traces)
    if not len(ev):
        return _empty(TIMELINE_COLUMNS)
    device = ev["device_code"].to_numpy()
    key = ev["rank"].to_numpy() * (int(device.max()) + 1) + device  # contiguous: ranks, then devices
    keep = downsample_peaks(key, ev["allocated_bytes"].to_numpy(), ev["reserved_bytes"].to_numpy(), max_points)
    return ev.iloc[keep][list(TIMELINE_COLUMNS)].reset_index(drop=True)


def memory_peaks(traces: TraceSet) -> pd.DataFrame:
    """Per (rank, device): events, allocations and frees (count), bytes allocated and freed
    (sums of positive and of minus the negative ``Bytes``), peak allocated and peak reserved
    bytes and when each was first reached (µs). Without ``Total Allocated`` the peak is of the
    net bytes since the trace started and the reserved peak is NaN (``totals_recorded`` False)."""
    ev = memory_events(traces)
    if not len(ev):
        return _empty(PEAK_COLUMNS)
    rank, code = ev["rank"].to_numpy(), ev["device_code"].to_numpy()
    starts = _runs(rank, code)  # a rank's events are contiguous, by device, in time order
    b = ev["bytes"].to_numpy()
    allocated, reserved = ev["allocated_bytes"].to_numpy(), ev["reserved_bytes"].to_numpy()
    at_alloc = _first_smallest(starts, -allocated)  # the first event reaching the peak
    at_res = _first_smallest(starts, -np.where(np.isnan(reserved), -np.inf, reserved))
    ts = ev["ts_us"].to_numpy()
    out = pd.DataFrame({
        "rank": rank[starts], "device": ev["device"].to_numpy()[starts],
        "events": np.diff(np.r_[starts, len(ev)]),
        "allocations": np.add.reduceat((b > 0).astype(np.int64), starts),
        "frees": np.add.reduceat((b < 0).astype(np.int64), starts),
        "allocated_bytes": np.add.reduceat(np.where(b > 0, b, 0), starts),
        "freed_bytes": np.add.reduceat(np.where(b < 0, -b, 0), starts),
        "peak_allocated_bytes": allocated[at_alloc], "peak_allocated_ts_us": ts[at_alloc],
        "peak_reserved_bytes": reserved[at_res],
        "peak_reserved_ts_us": np.where(np.isnan(reserved[at_res]), np.nan, ts[at_res]),
        "totals_recorded": np.logical_and.reduceat(ev["totals_recorded"].to_numpy(), starts),
    })
    return _by_rank_and_device(out, code[starts])[list(PEAK_COLUMNS)]


def _runs(*keys: np.ndarray) -> np.ndarray:
    """Where each run of equal ``keys`` (the arrays read together, row by row) begins; at least one
    row."""
    change = np.zeros(len(keys[0]), dtype=bool)
    change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    return np.flatnonzero(change)


def _by_rank_and_device(table: pd.DataFrame, code: np.ndarray) -> pd.DataFrame:
    """``table`` (a row per run of a rank's device) in rank order, a rank's devices in their
    labels' order (``code``): as a groupby on them sorts its groups."""
    order = np.lexsort((code, table["rank"].to_numpy()))
    return table if np.all(order[1:] > order[:-1]) else table.take(order).reset_index(drop=True)


def enclosing_ops(trace: RankTrace, rows: np.ndarray) -> np.ndarray:
    """Innermost ``cpu_op`` on the same thread whose span [start, end] contains each event of
    ``rows`` (their ``ts``); -1 when none does. ``ProfilerStep#N`` spans are not operators (June-2021
    Kineto files them under the "Operator" category).

    Uses the memoised call stack: the last CPU event of the thread starting at or before the
    instant (the deepest one on a tie) has every event containing the instant among its
    ancestors, so walking up its parents, one whole-array step per nesting level, finds the
    first that is an operator and still open.
    """
    out = np.full(len(rows), -1, dtype=np.int64)
    if len(rows) == 0:
        return out
    stack = call_stack(trace)
    nodes = np.flatnonzero(cpu_events(trace))
    if len(nodes) == 0:
        return out
    # threads told apart by their pid/tid codes (one code per id): no id column gathered
    tid_all = thread_ids(np.r_[trace.pid_code[nodes], trace.pid_code[rows]],
                         np.r_[trace.tid_code[nodes], trace.tid_code[rows]])
    node_tid, ev_tid = tid_all[:len(nodes)], tid_all[len(nodes):]
    order = np.lexsort((stack.depth[nodes], trace.ts[nodes], node_tid))
    nodes, node_tid = nodes[order], node_tid[order]
    node_ts = trace.ts[nodes]
    t = trace.ts[rows]
    # per thread, the last node starting at or before t: one searchsorted on (thread, ts)
    lo = np.searchsorted(node_tid, ev_tid, side="left")
    hi = np.searchsorted(node_tid, ev_tid, side="right")
    cand = np.full(len(rows), -1, dtype=np.int64)
    for th in sorted_unique(ev_tid):  # a loop over threads
        m = ev_tid == th
        a, b = lo[m][0], hi[m][0]
        p = a + np.searchsorted(node_ts[a:b], t[m], side="right") - 1
        cand[m] = np.where(p >= a, nodes[np.clip(p, 0, None)], -1)
    owner = operators(trace)  # (not a 2021 trace's ProfilerStep span)
    cur = cand
    live = cur >= 0
    while live.any():  # a loop over nesting levels; each on the candidates' rows only
        c = cur[live]
        start = trace.ts[c]
        end = start + np.maximum(np.nan_to_num(trace.dur[c]), 0.0)
        hit = owner[c] & (start <= t[live]) & (t[live] <= end)
        idx = np.flatnonzero(live)
        out[idx[hit]] = c[hit]
        cur[idx[hit]] = -1
        cur[idx[~hit]] = stack.parent[c[~hit]]
        live = cur >= 0
    return out


def memory_by_op(traces: TraceSet, top: int = DEFAULT_TOP_OPS) -> pd.DataFrame:
    """The operators that allocate most, per (rank, device): each ``[memory]`` event is charged
    to the innermost ``cpu_op`` of its thread containing it (:func:`enclosing_ops`; ``NO_OP``
    when none). Columns: rank, device, op, allocations (count of ``Bytes`` > 0),
    allocated_bytes, freed_bytes (frees made inside the op, positive), net_bytes (allocated -
    freed: what the op left allocated). The ``top`` ops by allocated bytes, largest first."""
    frames = []
    for t in traces:  # a loop over ranks
        ev = rank_memory_events(t)
        if not len(ev):
            continue
        rows = ev["row"].to_numpy()
        op = enclosing_ops(t, rows)
        name = np.where(op >= 0, t.name[np.clip(op, 0, None)], -1)
        b = ev["bytes"].to_numpy()
        f = pd.DataFrame({"device_code": ev["device_code"].to_numpy(), "name": name,
                          "allocations": (b > 0).astype(np.int64), "allocated_bytes": np.where(b > 0, b, 0),
                          "freed_bytes": np.where(b < 0, -b, 0)})
        g = f.groupby(["device_code", "name"], as_index=False, sort=False).sum()  # on codes: the names after
        code = ev["device_code"].to_numpy()  # (ascending: the events are sorted by device)
        device = ev["device"].to_numpy()[np.searchsorted(code, g["device_code"].to_numpy())]
        names = np.where(g["name"].to_numpy() >= 0, t.decode(g["name"].to_numpy()), NO_OP)
        frames.append(g.drop(columns=["device_code", "name"]).assign(rank=t.rank, device=device, op=names))
    if not frames:
        return _empty(OP_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    out = out.groupby(["rank", "device", "op"], as_index=False, sort=True).sum()  # (names a code apart, alike)
    out["net_bytes"] = out["allocated_bytes"] - out["freed_bytes"]
    out = out.sort_values(["rank", "device", "allocated_bytes", "op"], ascending=[True, True, False, True],
                          kind="stable")
    out = out.groupby(["rank", "device"], sort=False).head(top)
    return out[list(OP_COLUMNS)].reset_index(drop=True)


def memory_per_step(traces: TraceSet) -> pd.DataFrame:
    """Per (rank, device, profiler step with memory events): allocations (count), the peak
    allocated bytes during the step, and the change of allocated bytes over the step (after its
    last event minus before its first; a steady training loop gives ~0, a leak a positive
    number every step). Step -1 collects the events outside any ProfilerStep. Steps are as
    in :mod:`perfreport.analyses.steps` (an instant belongs to the step whose span contains it)."""
    ev = memory_events(traces)
    if not len(ev):
        return _empty(STEP_COLUMNS)
    rank, code, step = ev["rank"].to_numpy(), ev["device_code"].to_numpy(), ev["step"].to_numpy()
    order = np.lexsort((step, code, rank))  # stable: a step's events stay in time order
    rank, code, step = rank[order], code[order], step[order]
    starts = _runs(rank, code, step)
    ends = np.r_[starts[1:], len(order)] - 1
    b = ev["bytes"].to_numpy()[order]
    allocated = ev["allocated_bytes"].to_numpy()[order]
    return pd.DataFrame({
        "rank": rank[starts], "device": ev["device"].to_numpy()[order[starts]], "step": step[starts],
        "allocations": np.add.reduceat((b > 0).astype(np.int64), starts),
        "peak_allocated_bytes": np.maximum.reduceat(allocated, starts),
        "allocated_bytes_delta": allocated[ends] - (allocated[starts] - b[starts]),
    })


def memory_note(traces: TraceSet) -> str | None:
    """A line for the report when memory data is missing or partial, else None."""
    facts = [_memory_facts(t) for t in traces]  # per rank: (events, totals recorded on all)
    if not any(n for n, _ in facts):
        return NO_MEMORY_NOTE
    if not all(ok for n, ok in facts if n):
        return NO_TOTALS_NOTE
    return None


def _memory_facts(trace: RankTrace) -> tuple[int, bool]:
    """(memory events, whether all of them carry the allocator's totals) of one rank, memoised:
    all :func:`memory_note` needs, small enough for a worker process to send back."""
    def compute() -> tuple[int, bool]:
        ev = rank_memory_events(trace)
        return len(ev), bool(ev["totals_recorded"].all())

    return trace.memo("memory_facts", compute)


__all__ = ["memory_by_op", "memory_events", "memory_note", "memory_peaks", "memory_per_step", "memory_timeline"]
