"""The stack sweep that nests spans: per thread, which event encloses which.

Kineto writes every CPU event (operator, annotation, runtime call) as a flat ``[ts, ts+dur)``
span on its thread; the call stack is implied by containment. :func:`nest` recovers it per
group (thread) as a stack sweep over the 2n open/close points: an open records the stack
height as the event's depth and the top of the stack as its parent. The C extension ``_nest``
does it in one pass per thread (no sort of the points); the numpy path (:func:`sweep_order`,
:func:`parents_from_sweep`) makes the sweep order a sort key and finds each parent from the
running stack height with ``searchsorted``. Both give the same answer; the numpy path is the
reference and the fallback without a compiler.

Sweep order at one instant (the rules HTA's call stack uses, written as a sort key):

* an event that ends at t closes before one that starts at t opens (back-to-back siblings);
* of events opening together the longer is outer; of events closing together the shorter
  (inner) closes first; equal spans nest in file order;
* a zero-duration event at t opens after events opening at t and closes before events closing
  at t, so it is a child of the innermost event touching t. When one event ends and another
  starts at that instant, file order decides: written before the starting event, it belongs
  to the ending one (Kineto writes a thread's ops in start order, callers first). HTA's
  comparator has no answer there (it is cyclic) and its sort then mis-nests siblings.
  Zero-duration events at the same instant nest in file order.

A close always pops the newest open event, so spans that overlap without nesting (rare on one
thread) are treated as if the later one were a child of the earlier one.
"""

from __future__ import annotations

import numpy as np

from ..model import distinct_codes
from .ordering import dense_ids

try:
    from . import _nest  # type: ignore[attr-defined]
except ImportError:  # the extension is optional (no compiler at install): numpy does the sweep
    _nest = None

NO_PARENT = -1


def nest(group: np.ndarray, start: np.ndarray, dur: np.ndarray, row: np.ndarray,
         *, use_c: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(parent position or -1, depth) of n spans nested per ``group`` (see the module doc).

    ``dur`` ≥ 0; ``row`` breaks ties (file order). The C extension ``_nest`` does it in one
    pass per thread when it was built (no sort of the points: see its header); else numpy
    does (:func:`sweep_order`, :func:`parents_from_sweep`), which is the reference: both give
    the same answer. ``use_c`` forces one path (tests).
    """
    if use_c is None:  # NaN spans: numpy's sort order for NaN is the reference's to define
        use_c = _nest is not None and bool(np.isfinite(start).all() and np.isfinite(dur).all())
    if not use_c:
        ev, is_open = sweep_order(group, start, dur, row)
        return parents_from_sweep(ev, is_open, len(start))
    n = len(start)
    group = np.asarray(group, dtype=np.int64)
    if n and (group.min() < 0 or group.max() >= n):
        group = group - group.min()  # the extension buckets by group id: make them dense
        group = distinct_codes(group, int(group.max()) + 1)[1]
    parent = np.empty(n, np.int64)
    depth = np.empty(n, np.int64)
    _nest.nest(np.ascontiguousarray(group), np.ascontiguousarray(start, np.float64),
               np.ascontiguousarray(dur, np.float64), np.ascontiguousarray(row, np.int64),
               int(group.max()) + 1 if n else 0, parent, depth)
    return parent, depth


def nest_rows(group: np.ndarray, rows: np.ndarray, start: np.ndarray, dur: np.ndarray, parent: np.ndarray,
              depth: np.ndarray, *, use_c: bool | None = None) -> None:
    """:func:`nest` of the events at ``rows`` of whole columns ``start`` and ``dur`` (negative
    durations as 0, ``rows`` the tie-break), written at those rows of ``parent`` (the parent's
    row, -1 at the top) and ``depth``, arrays as long as the columns (int64, or both int32 where
    the C extension takes them: :func:`perfreport.analyses.callstack.tree_ints`).

    The call stack's form of :func:`nest`: the C extension gathers the spans and writes the
    answers where they belong itself (no gathered copies, no scatter in numpy). ``group`` holds
    dense ids (:func:`thread_ids`). ``use_c`` forces one path (tests).
    """
    if use_c is not False and _nest is not None and hasattr(_nest, "nest_rows"):  # an older build lacks it
        group = np.ascontiguousarray(group, dtype=np.int64)
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        if _nest.nest_rows(rows, group, np.ascontiguousarray(start, np.float64), np.ascontiguousarray(dur, np.float64),
                           int(group.max()) + 1 if len(group) else 0, parent, depth):
            return
    par, dep = nest(group, start[rows], np.maximum(dur[rows], 0.0), rows, use_c=use_c)  # NaN spans: numpy's rules
    parent[rows] = np.append(rows, NO_PARENT)[par]  # par -1 picks the appended NO_PARENT
    depth[rows] = dep


def sweep_order(group: np.ndarray, start: np.ndarray, dur: np.ndarray,
                row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The stack sweep over intervals: (event position, is_open) for each of the 2·n points.

    ``group`` separates threads (points of different groups never interleave), ``start``/
    ``dur`` are the spans (dur ≥ 0), ``row`` breaks ties (file order). Positions index the
    input arrays. See the module docstring for the order at equal times.

    Points are sorted by (group, time) first; only the points that share their instant with
    another point need the tie rules, so only those are ordered again within their instant
    (:func:`_instant_order_keys`, :func:`_order_within_instants`).
    """
    n = len(start)
    if n == 0:
        return np.empty(0, np.int64), np.empty(0, bool)
    time = np.concatenate([start, start + dur])
    grp = np.concatenate([group, group])
    order = np.lexsort((time, grp))  # points: 0..n-1 open event p, n..2n-1 close event p - n
    t_sorted, g_sorted = time[order], grp[order]
    new = np.ones(2 * n, bool)
    np.not_equal(t_sorted[1:], t_sorted[:-1], out=new[1:])
    new[1:] |= g_sorted[1:] != g_sorted[:-1]  # order[i] starts a new (group, time) instant
    shared = ~new
    shared[:-1] |= ~new[1:]  # order[i] shares its instant with another point
    if shared.any():
        points = order[shared]
        first = new[shared]  # first point of each shared instant (instants hold ≥ 2 points)
        inst = np.cumsum(first) - 1  # dense id of the shared instants, ascending
        starts = np.flatnonzero(first)
        cls, sub1, sub2 = _instant_order_keys(points, inst, starts, n, dur, row)
        order[shared] = points[_order_within_instants(inst, starts, cls, sub1, sub2)]
    is_open = order < n
    return np.where(is_open, order, order - n), is_open


def _order_within_instants(inst: np.ndarray, starts: np.ndarray, cls: np.ndarray, sub1: np.ndarray,
                           sub2: np.ndarray) -> np.ndarray:
    """The stable permutation that sorts points by (inst, cls, sub1, sub2), ``inst`` ascending
    (dense ids, the points of one instant together; ``starts``: first point of each).

    Most shared instants hold two points (one event ends as the next starts, or a
    zero-duration event opens and closes): those are ordered by one vectorised comparison;
    only larger instants are sorted.
    """
    perm = np.arange(len(inst))
    if np.isnan(sub1).any() or np.isnan(sub2).any():  # NaN order is the sort's: leave it to the sort
        return np.lexsort((sub2, sub1, inst * 5 + (cls + 1)))
    size = np.diff(starts, append=len(inst))
    a = starts[size == 2]  # first point of each pair
    b = a + 1
    ca, cb = cls[a], cls[b]
    sa, sb = sub1[a], sub1[b]
    swap = (cb < ca) | ((cb == ca) & ((sb < sa) | ((sb == sa) & (sub2[b] < sub2[a]))))
    a, b = a[swap], b[swap]
    perm[a], perm[b] = b, a
    if (size > 2).any():
        big = np.flatnonzero((size > 2)[inst])
        perm[big] = big[np.lexsort((sub2[big], sub1[big], inst[big] * 5 + (cls[big] + 1)))]  # cls: -1..3
    return perm


def _instant_order_keys(points: np.ndarray, instant: np.ndarray, starts: np.ndarray, n: int,
                        dur: np.ndarray, row: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sort keys (class, sub1, sub2) of sweep points at the same instant (module docstring).

    ``points`` are point ids (< n: open of event p, else close of event p - n), ``instant``
    their dense instant id (ascending, the points of one instant together; ``starts``: first
    point of each). Class within an instant: positive closes, positive opens,
    zero-duration points (a zero-duration event written before an event opening at an instant
    where another closes goes first). Within a class, opens longer first then file order;
    closes shorter first then reverse file order; zero points: opens (file order) before
    closes (reverse file order).
    """
    is_open = points < n
    ev = np.where(is_open, points, points - n)
    d = dur[ev]
    zero = d == 0
    r = row[ev].astype(np.float64)
    n_inst = len(starts)
    pos_open = is_open & ~zero
    has_open = np.zeros(n_inst, bool)
    has_open[instant[pos_open]] = True
    has_close = np.zeros(n_inst, bool)
    has_close[instant[~is_open & ~zero]] = True
    both_inst = has_open & has_close
    both = both_inst[instant]
    cls = np.where(is_open, np.where(both, 2, 0), np.where(both, 0, 2))
    if zero.any():
        zb = np.flatnonzero(zero & both)  # zero points at an instant where one event closes and another opens
        cls[zero] = 1
        if len(zb):
            po = np.flatnonzero(pos_open & both)  # their instants' positive opens, grouped by instant
            po_inst = instant[po]
            seg = np.flatnonzero(np.r_[True, po_inst[1:] != po_inst[:-1]])
            first_open_row = np.full(n_inst, np.inf)
            first_open_row[po_inst[seg]] = np.minimum.reduceat(r[po], seg)
            zero_before = r[zb] < first_open_row[instant[zb]]  # a zero-length event written before the opening one
            cls[zb] = np.where(zero_before, -1, 3)
    sub1 = np.where(zero, np.where(is_open, 0.0, 1.0), np.where(is_open, -d, d))
    sub2 = np.where(is_open, r, -r)
    return cls, sub1, sub2


def parents_from_sweep(ev: np.ndarray, is_open: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(parent position or -1, depth) of the n events of a balanced sweep.

    The stack height before an open is the event's depth; its parent is the newest earlier
    open one level up (the top of the stack), found by ``searchsorted`` on (level, position).
    """
    parent = np.full(n, NO_PARENT, dtype=np.int64)
    depth = np.full(n, -1, dtype=np.int64)
    if len(ev) == 0:
        return parent, depth
    step = is_open.astype(np.int64) * 2 - 1
    level = np.cumsum(step) - step  # height before each point
    opens = np.flatnonzero(is_open)
    lvl = level[opens]
    depth[ev[opens]] = lvl
    # opens sorted by (level, position): positions already ascend, so a stable sort on the level
    by_level = stable_order(lvl)
    opens, lvl = opens[by_level], lvl[by_level]
    span = len(ev) + 1
    keys = lvl * span + opens
    q = np.searchsorted(keys, keys - span) - 1  # the last open one level up, before each open
    found = (lvl > 0) & (q >= 0)
    q = np.clip(q, 0, None)
    found &= lvl[q] == lvl - 1
    parent[ev[opens[found]]] = ev[opens[q[found]]]
    return parent, depth


def stable_order(values: np.ndarray) -> np.ndarray:
    """``np.argsort(values, kind="stable")`` for integers, as a radix sort when they fit in
    16 bits (depths and levels do): linear time instead of a merge sort."""
    if len(values) and -(1 << 15) <= values.min() and values.max() < (1 << 15):
        return np.argsort(values.astype(np.int16), kind="stable")
    return np.argsort(values, kind="stable")


def thread_ids(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """Dense id of each (pid, tid) pair, numbered in sorted (pid, tid) order."""
    if len(pid) == 0:
        return np.empty(0, np.int64)
    change = np.empty(len(pid), dtype=bool)  # a thread's events come in long runs: number the runs' pairs
    change[0] = True
    np.not_equal(pid[1:], pid[:-1], out=change[1:])
    change[1:] |= tid[1:] != tid[:-1]
    heads = np.flatnonzero(change)
    if 8 * len(heads) > len(pid):  # interleaved threads: each pair coded on its own
        pid_code, tid_code = dense_ids(pid), dense_ids(tid)
        pair = pid_code * (int(tid_code.max()) + 1) + tid_code  # ascends with (pid, tid)
        return distinct_codes(pair, int(pair.max()) + 1)[1]
    hp, ht = pid[heads], tid[heads]
    order = np.lexsort((ht, hp))
    new = np.empty(len(order), dtype=bool)
    new[0] = True
    new[1:] = (hp[order][1:] != hp[order][:-1]) | (ht[order][1:] != ht[order][:-1])
    run_id = np.empty(len(heads), dtype=np.int64)
    run_id[order] = np.cumsum(new) - 1
    return np.repeat(run_id, np.diff(heads, append=len(pid)))