"""Interval arithmetic on event columns: union, total covered time, overlap of two sets.

Every breakdown (busy time, compute vs communication, overlap) is a question about how much
time a set of [start, end) intervals covers. These functions answer it with sorts and running
maxima over whole arrays; no Python loop over events.
"""

from __future__ import annotations

import numpy as np

from ..model import _sorted, search_sorted
from .nesting import _nest


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into disjoint ones, sorted. Touching intervals (start == end) merge.

    >>> union(np.array([0., 5., 2.]), np.array([3., 6., 4.]))
    (array([0., 5.]), array([4., 6.]))
    """
    if len(starts) == 0:
        return np.empty(0), np.empty(0)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    reach = np.maximum.accumulate(e)
    new_group = np.empty(len(s), dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > reach[:-1]
    group_starts = np.flatnonzero(new_group)
    group_ends = np.append(group_starts[1:], len(s)) - 1
    return s[group_starts], reach[group_ends]


def running_max_per_run(values: np.ndarray, starts: np.ndarray, use_c: bool | None = None) -> np.ndarray:
    """Running maximum of ``values`` restarted at each of ``starts`` (ascending run starts,
    the first 0). The C extension ``_nest`` does it in one pass for float64 values; numpy (the
    reference) needs one ``np.maximum.accumulate`` per run, a call per step on a many-step rank
    (75,000 on 37,000 steps: 0.06 s). ``use_c`` forces one path (tests)."""
    if use_c if use_c is not None else (_nest is not None and values.dtype == np.float64 and len(values) > 0):
        out = np.empty(len(values), dtype=np.float64)
        _nest.running_max_per_run(np.ascontiguousarray(values), np.ascontiguousarray(starts, dtype=np.int64), out)
        return out
    out = np.empty_like(values)
    for lo, hi in zip(starts.tolist(), np.append(starts[1:], len(values)).tolist()):
        np.maximum.accumulate(values[lo:hi], out=out[lo:hi])
    return out


def covered(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total time covered by the union of the intervals."""
    s, e = union(starts, ends)
    return float((e - s).sum())


def intersection_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """Time covered by both interval sets (each given as (starts, ends), any order)."""
    return merged_intersection_length(union(*a), union(*b))


def merged_intersection_length(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> float:
    """:func:`intersection_length` of interval sets already merged by :func:`union`."""
    (a_s, a_e), (b_s, b_e) = a, b
    if len(a_s) == 0 or len(b_s) == 0:
        return 0.0
    times = np.concatenate([a_s, a_e, b_s, b_e])
    delta = np.concatenate([np.ones(len(a_s)), -np.ones(len(a_e)), 2 * np.ones(len(b_s)), -2 * np.ones(len(b_e))])
    # at equal times, apply ends before starts so touching intervals do not count as overlap
    order = np.lexsort((delta, times))
    times, level = times[order], np.cumsum(delta[order])
    return float((np.diff(times) * (level[:-1] == 3)).sum())


def window_overlaps(ws_sorted: np.ndarray, we_sorted: np.ndarray, starts: np.ndarray,
                    ends: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every (interval, window) pair that overlaps, vectorised: ``(interval, window, lo, hi)``,
    the indices and the overlap [lo, hi). Windows are sorted by start and may overlap each other
    (their running maximum end bounds the search), so one event can meet several windows."""
    ev, win = window_candidates(ws_sorted, we_sorted, starts, ends)
    lo, hi = np.maximum(starts[ev], ws_sorted[win]), np.minimum(ends[ev], we_sorted[win])
    ok = hi > lo
    return ev[ok], win[ok], lo[ok], hi[ok]


def window_candidates(ws_sorted: np.ndarray, we_sorted: np.ndarray, starts: np.ndarray,
                      ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(interval, window) pairs that may overlap: those of :func:`window_overlaps` and perhaps
    some that only touch or miss (a caller that measures each pair's overlap drops those at no
    cost), without the overlaps' bounds: two searches of the intervals among the windows."""
    reach = np.maximum.accumulate(we_sorted) if len(we_sorted) else we_sorted
    first = search_sorted(reach, starts, side="right")
    last = search_sorted(ws_sorted, ends, side="left") - 1
    n = last - first + 1
    if len(n) and n.max() <= 1:  # the usual case, steps that do not overlap: one window at most each
        ev = np.flatnonzero(n == 1)
        return ev, first[ev]
    n = np.maximum(n, 0)
    ev = np.repeat(np.arange(len(starts)), n)
    return ev, first[ev] + (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n))


def sorted_edges(*arrays: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """``np.unique`` of the arrays' values together (finite values only) and, for each array, the
    position of each of its values in it: ``bounds[positions[i]] == arrays[i]``.

    One stable sort (timsort: interval starts and ends arrive nearly sorted, in runs, so this is
    several times faster than ``np.unique``'s quicksort) instead of a ``np.searchsorted`` of every
    value into the bounds afterwards, which is cache-miss bound on millions of bounds. The
    bounds and positions then come from one pass over the order in C where the extension
    ``_sorted`` is built (``rank_sorted``), numpy's gather, mask, cumsum and scatter elsewhere.

    >>> sorted_edges(np.array([3., 1.]), np.array([1., 2.]))
    (array([1., 2., 3.]), [array([2, 0]), array([0, 1])])
    """
    values = np.concatenate(arrays) if arrays else np.empty(0)
    order = np.argsort(values, kind="stable")
    cuts = np.cumsum([len(a) for a in arrays])[:-1]
    if values.dtype == np.float64 and hasattr(_sorted, "rank_sorted"):  # the rest in one pass, in C
        bounds, position = np.empty(len(values)), np.empty(len(values), dtype=np.int64)
        distinct = _sorted.rank_sorted(values, order, bounds, position)
        return bounds[:distinct], np.split(position, cuts)
    ordered = values[order]
    del values  # the temporaries are one number per edge each: let each go when done
    new = np.empty(len(ordered), dtype=bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    bounds = ordered[new]
    del ordered
    rank = np.cumsum(new, dtype=np.int32 if len(new) < 2**31 else np.int64)  # half the bytes of the usual case
    del new
    rank -= 1
    position = np.empty(len(rank), dtype=np.int64)
    position[order] = rank
    del order, rank
    return bounds, np.split(position, cuts)
