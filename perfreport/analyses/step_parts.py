"""The parts of each step of one rank: its step time split exactly into who held the GPU and
what the host did while the GPU was idle. :func:`perfreport.analyses.attribution.explain`
diffs two runs' parts; the time at stake (:mod:`perfreport.analyses.stake`) reads the host ops
the parts use.

Each sample's step time (its ProfilerStep span, ``[start, end)``) is split exactly into parts:

* **GPU busy time** inside the span, shared among the GPU work running at each instant by
  priority (:data:`PRIORITY`): computation kernels first, then communication, then
  memcpy/memset; events of the winning class share the instant equally. So a kernel's part is
  the time it holds the GPU; communication gets only its *exposed* time (not overlapped by
  computation) and copies only the time no kernel hides them. Parts are keyed by normalised
  kernel name (:func:`perfreport.analyses.diff.normalize_kernel_name`, or the raw name with
  ``exact``) and copies by direction (:func:`perfreport.analyses.memory_bw.direction_of`). GPU
  work counts in the span it runs in, whichever step launched it.
* **GPU idle time** inside the span: while a collective runs on the host it is exposed
  communication (key :data:`HOST_COMM`); the rest is split by the CPU op the host was running
  then (the direct children of the ProfilerStep on its thread), the rest under :data:`NO_OP`.

:func:`step_parts` gives them as a table; :func:`coded_step_parts` as columns with each
(kind, key) a code (:class:`CodedParts`), what a worker keeps and sends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..model import COMMUNICATION, COMPUTATION, GPU_SIDE_CATEGORIES, KERNEL_CLASS_NAMES, MEMORY, search_sorted
from ..model import OTHER as MODEL_OTHER
from ..model import RankTrace, distinct_codes
from .callstack import call_stack, stack_levels
from .diff import normalize_kernel_name
from .grouping import distinct_rows, key_sums, tuple_columns
from .intervals import sorted_edges, window_overlaps
from .memory_bw import direction_of
from .nesting import _nest
from .step_metrics import WHOLE_TRACE_STEP, step_windows

NO_OP = "<no op>"
"""Idle-time key when the host ran no direct child op of the step (Python, data wait …)."""
PART_COLUMNS = ("rank", "step", "kind", "key", "time_us", "overlapped_us")

PRIORITY = (COMPUTATION, COMMUNICATION, MEMORY, MODEL_OTHER)
"""Who holds the GPU when several classes run at once (first wins): compute hides the rest."""
_PRIORITY_OF_CLASS = np.array([PRIORITY.index(c) for c in KERNEL_CLASS_NAMES], dtype=np.int64)
_PRIORITY_KIND = np.array(["kernel", "communication", "memory", "kernel"], dtype=object)  # by priority
_COMM = PRIORITY.index(COMMUNICATION)
_MEMORY = PRIORITY.index(MEMORY)
_FIRST_SET_BIT = np.array([-1] + [(b & -b).bit_length() - 1 for b in range(1, 1 << len(PRIORITY))], dtype=np.int64)
"""Per bit set of the classes running (bit i: class i of PRIORITY), the first one (-1: none)."""


# --- one rank: the parts of each step ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Points:
    """Points located once among the bounds of a piecewise-constant rate, so that several rates
    are integrated up to them without searching again: ``j`` the segment of each point (clipped
    to the bounds), ``before`` points before the first bound, ``offset`` the point's distance
    from its segment's start."""

    j: np.ndarray
    before: np.ndarray
    offset: np.ndarray

    @classmethod
    def at(cls, bounds: np.ndarray, x: np.ndarray, j: np.ndarray | None = None) -> "_Points":
        """``j``: the points' ``searchsorted(bounds, x, side="right") - 1`` when known."""
        if j is None:
            j = search_sorted(bounds, x, side="right") - 1
        jc = np.clip(j, 0, max(len(bounds) - 1, 0))
        return cls(jc, j < 0, x - bounds[jc] if len(bounds) else np.zeros(len(x)))

    def take(self, sel: np.ndarray) -> "_Points":
        return _Points(self.j[sel], self.before[sel], self.offset[sel])


def _piecewise(bounds: np.ndarray, rate: np.ndarray, *points: _Points) -> list[np.ndarray]:
    """∫ rate from -inf to each set of points, for a rate constant on each [bounds[j],
    bounds[j+1]) (0 outside); the running integral is summed once for all the sets."""
    at = _integral(bounds, rate)
    return [at(p) for p in points]


def _integral(bounds: np.ndarray, rate: np.ndarray):
    """``at(points)``: :func:`_piecewise` of ``rate`` at any :class:`_Points`, its running
    integral summed once however often it is evaluated."""
    if len(bounds) == 0:
        return lambda p: np.zeros(len(p.j))
    cum = np.empty(len(bounds))  # [0, running sum]: summed in place, no copy of the sum behind a 0
    cum[0] = 0.0
    seg = np.diff(bounds)
    seg *= rate
    np.cumsum(seg, out=cum[1:])
    del seg
    r = np.append(rate, 0.0)
    return lambda p: np.where(p.before, 0.0, cum[p.j] + r[p.j] * p.offset)


def _first_running(on: np.ndarray) -> np.ndarray:
    """Per column of ``on`` (classes x segments, bool), the first class running, -1 for none:
    ``np.where(on.any(0), np.argmax(on, 0), -1)`` as a table lookup of the column's bits (the
    argmax down the columns of a row-major matrix is a strided pass, ~10x slower)."""
    bits = np.zeros(on.shape[1], dtype=np.uint8)
    for i, row in enumerate(on.view(np.uint8)):  # a loop over the few classes
        bits |= row << np.uint8(i)
    return _FIRST_SET_BIT[bits]


def _class_claim(cls: np.ndarray, si: np.ndarray, ei: np.ndarray, bounds: np.ndarray, n_cls: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The segment pass of :func:`_gpu_parts` over events of classes ``cls`` (priority order)
    spanning edge positions ``si``-``ei`` of ``bounds``: per bound (the segment after it) the
    first class running (``top``, -1: none and at the last bound) and its rate (1 / its events
    running), whether a computation runs (per segment, 0/1), and per class the running integral
    of its rate over the segments it holds (classes x bounds). In C when the extension has it
    (one pass; the numpy path's classes x segments matrices were most of the attribution's time
    on a 1 GB rank: 0.3 s), else numpy; the same floats either way."""
    nb = len(bounds)
    if hasattr(_nest, "class_claim") and nb:
        top, rate_top = np.empty(nb, dtype=np.int64), np.empty(nb)
        under, cum = np.empty(nb - 1), np.zeros((n_cls, nb))  # (zeroed: a class without events' row is left)
        _nest.class_claim(np.ascontiguousarray(cls, np.int64), np.ascontiguousarray(si, np.int64),
                          np.ascontiguousarray(ei, np.int64), np.diff(bounds), top, rate_top, under, cum)
        return top, rate_top, under, cum
    # per class, the events running on each segment [bounds[j], bounds[j+1]): one count of
    # the (class, edge) pairs (whole numbers: the float sums they replace were exact)
    at_class = cls * (nb + 1)
    delta = np.bincount(at_class + si, minlength=n_cls * (nb + 1)) - np.bincount(at_class + ei, minlength=n_cls * (nb + 1))
    active = np.cumsum(delta.reshape(n_cls, nb + 1), axis=1)[:, : nb - 1]
    del delta
    on = active > 0
    top = _first_running(on)  # highest-priority class running
    seg = np.flatnonzero(top >= 0)
    rate_top = np.zeros(nb)  # the rate of the class holding each segment (0 past the last)
    rate_top[seg] = 1.0 / active[top[seg], seg].astype(np.float64)
    under_compute = on[PRIORITY.index(COMPUTATION)].astype(np.float64)
    del on, active
    # the running integral of each class's rate (0 on the segments another class holds)
    cum = np.zeros((n_cls, nb))
    held = np.zeros((n_cls, max(nb - 1, 0)))
    held[top[seg], seg] = rate_top[seg] * np.diff(bounds)[seg]
    np.cumsum(held, axis=1, out=cum[:, 1:])
    return np.append(top, -1), rate_top, under_compute, cum


def _gpu_parts(trace: RankTrace, ws: np.ndarray, we: np.ndarray, exact: bool) -> "_Parts":
    """Each GPU event's share of each window (:class:`_Parts`)."""
    rows = trace.gpu_work_rows()
    rows = rows[trace.dur[rows] > 0]
    if not len(rows) or not len(ws):
        return _Parts.empty()
    s, e = trace.ts[rows], trace.ts[rows] + trace.dur[rows]
    cls = _PRIORITY_OF_CLASS[trace.gpu_class()[rows]]
    n_cls = len(PRIORITY)
    bounds, (si, ei) = sorted_edges(s, e)
    nb = len(bounds)
    top, rate_top, under_compute, cum = _class_claim(cls, si, ei, bounds, n_cls)
    # pair each event with the windows it overlaps (windows sorted by start; ranges are supersets)
    order = np.argsort(ws, kind="stable")
    ws_s, we_s = ws[order], we[order]
    ev, win, lo, hi = window_overlaps(ws_s, we_s, s, e)
    # an overlap ends at an event's edge (a bound: its position is known) or a window's
    jws, jwe = (search_sorted(bounds, x, side="right") - 1 for x in (ws_s, we_s))
    at_lo = _Points.at(bounds, lo, np.where(s[ev] >= ws_s[win], si[ev], jws[win]))
    at_hi = _Points.at(bounds, hi, np.where(e[ev] <= we_s[win], ei[ev], jwe[win]))
    cls_ev = cls[ev]

    def own_integral(p: _Points) -> np.ndarray:
        """∫ of each event's own class's rate up to ``p`` (:func:`_piecewise` of that class)."""
        rate = np.where(top[p.j] == cls_ev, rate_top[p.j], 0.0)
        return np.where(p.before, 0.0, cum.ravel()[cls_ev * nb + p.j] + rate * p.offset)

    share = own_integral(at_hi) - own_integral(at_lo)
    comm = np.flatnonzero(cls_ev == _COMM)  # the overlap is measured for communication only
    to_hi, to_lo = _piecewise(bounds, under_compute, at_hi.take(comm), at_lo.take(comm))
    overlapped = np.zeros(len(ev))
    overlapped[comm] = to_hi - to_lo
    code, labels = _gpu_keys(trace, rows[ev], exact, cls_ev == _MEMORY)
    n_labels = max(len(labels), 1)
    pairs, pair = distinct_codes(cls_ev * n_labels + code, n_cls * n_labels)  # (kind, key) as one integer
    return _Parts(window=order[win], pair=pair, time=share, overlapped=overlapped,
                  pairs=[(_PRIORITY_KIND[p // n_labels], labels[p % n_labels]) for p in pairs.tolist()])


@dataclass(frozen=True)
class _Parts:
    """Parts of the windows as columns: the window, the part's (kind, key) as a position in
    ``pairs``, its time and its overlapped time (µs)."""

    window: np.ndarray
    pair: np.ndarray
    time: np.ndarray
    overlapped: np.ndarray
    pairs: list[tuple[str, str]]

    @classmethod
    def empty(cls) -> "_Parts":
        none = np.empty(0, dtype=np.int64)
        return cls(none, none, np.empty(0), np.empty(0), [])


def _gpu_keys(trace: RankTrace, rows: np.ndarray, exact: bool,
              memory: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(per event its key's position in the keys, the keys): the key of a GPU event is its
    memcpy/memset direction, else its (normalised) kernel name (two names may share one).
    ``memory``: per row, whether its class is MEMORY (every memcpy and memset is), when known:
    only those rows are looked up."""
    kind = np.zeros(len(rows), dtype=np.int64)  # 0 kernel, 1 memcpy, 2 memset
    at = np.arange(len(rows)) if memory is None else np.flatnonzero(memory)
    kind[at] = np.where(trace.memsets()[rows[at]], 2, trace.memcpys()[rows[at]].astype(np.int64))
    name = trace.name[rows].astype(np.int64) + 1  # -1 (no name) -> 0
    uniq, inverse = distinct_codes(name * 3 + kind, 3 * (len(trace.strings) + 1))  # one int per (name, kind)
    labels = []
    for c, k in zip(*np.divmod(uniq.tolist(), 3)):  # a loop over distinct names
        text = trace.strings[c - 1] if c > 0 else ""
        labels.append(direction_of(text, k == 2) if k else text if exact else normalize_kernel_name(text))
    return inverse, np.array(labels, dtype=object)


def _host_ops(trace: RankTrace, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rows, window position) of the CPU ops idle time is attributed to (see module doc)."""
    stack = call_stack(trace)
    if len(steps) == 1 and steps[0] == WHOLE_TRACE_STEP:
        launches = np.flatnonzero(trace.launches())
        cpu = stack.is_node & ~trace.is_cat(GPU_SIDE_CATEGORIES)
        if not len(launches):
            return np.empty(0, np.int64), np.empty(0, np.int64)
        pairs = np.stack([trace.pid_code[launches], trace.tid_code[launches]], axis=1)
        first, inverse = distinct_rows(pairs)
        pid, tid = pairs[first[np.argmax(np.bincount(inverse))]]  # codes: one per distinct id
        rows = np.flatnonzero(cpu & (stack.depth == 0) & (trace.pid_code == pid) & (trace.tid_code == tid))
        return rows, np.zeros(len(rows), dtype=np.int64)
    child, number = _step_children(trace)
    if not len(steps):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    pos = np.clip(search_sorted(steps, number), 0, len(steps) - 1)
    ok = steps[pos] == number
    return child[ok], pos[ok]


def _step_children(trace: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    """(rows, step number) of the CPU ops directly under a ProfilerStep span, rows ascending.
    Memoised: the attribution and the time at stake both start from them. Only the depth
    levels just below the steps' are searched (the call stack's levels are shared)."""
    def compute() -> tuple[np.ndarray, np.ndarray]:
        stack = call_stack(trace)
        step_rows = np.flatnonzero(trace.steps())
        step_rows = step_rows[~trace.gpu_side()[step_rows] & np.isfinite(trace.dur[step_rows])]
        numbers = trace.step_name_numbers()[trace.name[step_rows]]
        below = set((stack.depth[step_rows] + 1).tolist())
        by_level = stack_levels(trace)
        candidates = [lv for lv in by_level if len(lv) and int(stack.depth[lv[0]]) in below]
        if not candidates:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        rows = np.sort(np.concatenate(candidates))
        parent = stack.parent[rows]
        at = np.minimum(search_sorted(step_rows, parent), len(step_rows) - 1)  # step_rows ascend
        rows = rows[(parent >= 0) & (step_rows[at] == parent) & ~trace.is_cat(GPU_SIDE_CATEGORIES)[rows]]
        return rows, numbers[search_sorted(step_rows, stack.parent[rows])]

    return trace.memo("step_children", compute)


HOST_COMM = "collectives on the host"
"""Communication key of GPU idle time while a collective op runs on the host (gloo's work, a
blocking c10d call): :data:`perfreport.model.CPU_COLLECTIVE`, any thread of the rank."""


def _host_collective_spans(trace: RankTrace) -> tuple[np.ndarray, np.ndarray]:
    rows = np.flatnonzero(trace.cpu_collectives())  # a few rows: the tests on them, not on every event
    ts, dur = trace.ts[rows], trace.dur[rows]
    ok = np.isfinite(ts) & np.isfinite(dur) & (dur > 0)
    return ts[ok], ts[ok] + dur[ok]


def _idle_parts(trace: RankTrace, steps: np.ndarray, ws: np.ndarray, we: np.ndarray) -> "_Parts":
    """GPU idle time of each window (:class:`_Parts`): communication while a collective runs on
    the host (``HOST_COMM``), else by the host op running, else ``NO_OP``."""
    gpu = trace.gpu_work_rows()
    s = trace.ts[gpu]
    e = s + np.maximum(trace.dur[gpu], 0.0)
    c_s, c_e = _host_collective_spans(trace)
    bounds, (ps, pe, pcs, pce) = sorted_edges(s, e, c_s, c_e)
    busy = np.zeros(max(len(bounds) - 1, 0))
    coll = np.zeros(max(len(bounds) - 1, 0))
    if len(bounds) > 1:
        for starts, ends, out in ((ps, pe, busy), (pcs, pce, coll)):  # GPU work, then host collectives
            delta = np.bincount(starts, minlength=len(bounds) + 1) - np.bincount(ends, minlength=len(bounds) + 1)
            out[:] = (np.cumsum(delta)[: len(bounds) - 1] > 0).astype(np.float64)
    busy_at = _integral(bounds, busy)  # each running integral summed once for both calls below
    if len(c_s):
        comm_at = _integral(bounds, (1.0 - busy) * coll)
    else:  # no collective on the host: its integral is 0 everywhere (a pass over every bound saved)
        def comm_at(p: _Points) -> np.ndarray:
            return np.zeros(len(p.j))

    def idle(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(idle time, of which host communication) in each [a, b)."""
        at_a, at_b = _Points.at(bounds, a), _Points.at(bounds, b)
        return (np.maximum((b - a) - (busy_at(at_b) - busy_at(at_a)), 0.0),
                np.maximum(comm_at(at_b) - comm_at(at_a), 0.0))

    total, comm = idle(ws, we)
    rows, win = _host_ops(trace, steps)
    lo = np.maximum(trace.ts[rows], ws[win])
    hi = np.minimum(trace.ts[rows] + trace.dur[rows], we[win])
    ok = hi > lo
    rows, win = rows[ok], win[ok]
    in_op = np.maximum(np.subtract(*idle(lo[ok], hi[ok])), 0.0)
    by_window = np.bincount(win, weights=in_op, minlength=len(ws))
    n = len(ws)
    names, name_of = np.unique(trace.name[rows], return_inverse=True)
    # pairs: each host op's name (idle), then NO_OP (idle) and HOST_COMM (communication)
    pairs = [("idle", str(k)) for k in trace.decode(names).tolist()] + [("idle", NO_OP), ("communication", HOST_COMM)]
    time = np.concatenate([in_op, np.maximum(total - comm - by_window, 0.0), comm])
    pair = np.concatenate([name_of.ravel(), np.full(n, len(names)), np.full(n, len(names) + 1)]).astype(np.int64)
    keep = np.ones(len(time), dtype=bool)
    keep[len(win) + n:] = time[len(win) + n:] > 0  # the idle parts stay, even at 0; host comm when > 0
    window = np.concatenate([win, np.arange(n), np.arange(n)])
    return _Parts(window=window[keep], pair=pair[keep], time=time[keep], overlapped=np.zeros(int(keep.sum())),
                  pairs=pairs)


class CodedParts(NamedTuple):
    """:func:`step_parts`' rows as columns: each row's step, its (kind, key) as a position in
    ``pairs`` (the rank's few distinct pairs), its µs; rows in the table's order. What a rank's
    worker keeps and sends (a memo of the digest): the table's two text columns, a string per
    row, cost the parent a hash of every row to group them again (the attribution's means: 0.37
    of its 0.56 s on HTA's trace_compare tiny grown to 1 GB, 173,318 steps a side), and the
    worker the frame itself. A plain tuple (a digest cache's) is one, too: ``CodedParts(*t)``."""

    rank: int
    step: np.ndarray
    pair: np.ndarray
    pairs: tuple[tuple[str, str], ...]
    time_us: np.ndarray
    overlapped_us: np.ndarray

    def select(self, steps: np.ndarray | None) -> "CodedParts":
        """The rows of ``steps`` (None: all)."""
        if steps is None:
            return self
        keep = np.isin(self.step, np.asarray(steps, dtype=np.int64))
        return self._replace(step=self.step[keep], pair=self.pair[keep], time_us=self.time_us[keep],
                             overlapped_us=self.overlapped_us[keep])

    def frame(self) -> pd.DataFrame:
        """The rows as :func:`step_parts`' table (PART_COLUMNS)."""
        if not len(self.pairs):
            return pd.DataFrame({c: pd.Series(dtype=object if c in ("kind", "key") else np.float64)
                                 for c in PART_COLUMNS})
        which = tuple_columns(self.pairs, self.pair)
        return pd.DataFrame({"rank": np.full(len(self.step), self.rank, dtype=np.int64), "step": self.step,
                             "kind": which[:, 0], "key": which[:, 1], "time_us": self.time_us,
                             "overlapped_us": self.overlapped_us}, columns=list(PART_COLUMNS))


def step_parts(trace: RankTrace, steps: np.ndarray | None = None, exact: bool = False) -> pd.DataFrame:
    """The parts of each sample's step time on one rank: (rank, step, kind, key, time_us,
    overlapped_us), summed per key; ``steps`` restricts the samples (default: all of
    :func:`step_windows`). ``overlapped_us`` is communication time hidden under computation
    (not a part of the step time; 0 for other kinds). Parts of a sample sum to its step time.

    Made from :func:`coded_step_parts` (memoised over all the rank's samples); ``steps`` picks
    from it (each step's parts are its own).
    """
    return coded_step_parts(trace, exact).select(steps).frame()


def coded_step_parts(trace: RankTrace, exact: bool = False) -> CodedParts:
    """:func:`step_parts` of all the rank's samples as :class:`CodedParts`, memoised (a
    per-rank summary: rows per step and key, what a worker process sends back)."""
    value = trace.memo(("step_parts", bool(exact)), lambda: _step_parts(trace, exact))
    return value if isinstance(value, CodedParts) else CodedParts(*value)


def _step_parts(trace: RankTrace, exact: bool) -> CodedParts:
    windows = step_windows(trace)
    windows = windows[np.isfinite(windows["start_us"]) & np.isfinite(windows["end_us"])]
    numbers = windows["step"].to_numpy(dtype=np.int64)
    ws, we = windows["start_us"].to_numpy(np.float64), windows["end_us"].to_numpy(np.float64)
    gpu, idle = _gpu_parts(trace, ws, we, exact), _idle_parts(trace, numbers, ws, we)
    if not len(gpu.time) and not len(idle.time):
        empty = np.empty(0, dtype=np.int64)
        return CodedParts(trace.rank, empty, empty.astype(np.int32), (), np.empty(0), np.empty(0))
    # one id per distinct (kind, key) over both sides' few pairs, so the parts are summed by
    # integer key (pandas' sums, in the rows' order: the sums a groupby on the strings gives)
    ids, distinct = pd.factorize(pd.Series(gpu.pairs + idle.pairs, dtype=object))
    pair = np.concatenate([ids[:len(gpu.pairs)][gpu.pair], ids[len(gpu.pairs):][idle.pair]])
    n_ids = max(len(distinct), 1)
    key = numbers[np.concatenate([gpu.window, idle.window])] * n_ids + pair
    group, sums = key_sums(key, {"time_us": np.concatenate([gpu.time, idle.time]).astype(np.float64, copy=False),
                                 "overlapped_us": np.concatenate([gpu.overlapped, idle.overlapped]).astype(
                                     np.float64, copy=False)})
    order = part_order(group, n_ids, list(distinct))
    group = group[order]
    return CodedParts(trace.rank, group // n_ids, (group % n_ids).astype(np.int32),
                      tuple((str(kind), str(key)) for kind, key in distinct),
                      sums["time_us"][order], sums["overlapped_us"][order])


def part_order(group: np.ndarray, n_ids: int, distinct: list[tuple[str, ...]]) -> np.ndarray:
    """The order of summed parts keyed ``step * n_ids + id`` (``id``: a position in ``distinct``,
    the parts' (kind, key, …) string tuples) by step, then by the strings: what a
    ``sort_values`` on the step and string columns gives (the keys are distinct: no ties), with
    the few distinct tuples sorted in Python instead of every row's strings by pandas. One sort
    of the integers step x ``n_ids`` + the tuple's rank (nearly in order: numpy's timsort), not
    a lexsort of the two: 83 -> 20 ms for 1.4 M parts."""
    return np.argsort(group // n_ids * n_ids + sorted_ranks(distinct)[group % n_ids], kind="stable")


def sorted_ranks(distinct: list) -> np.ndarray:
    """Each item's position in ``sorted(distinct)`` (distinct items)."""
    rank = np.empty(max(len(distinct), 1), dtype=np.int64)
    rank[sorted(range(len(distinct)), key=distinct.__getitem__)] = np.arange(len(distinct))
    return rank


__all__ = ["CodedParts", "HOST_COMM", "NO_OP", "PART_COLUMNS", "PRIORITY", "coded_step_parts", "part_order",
           "sorted_ranks", "step_parts"]
