"""Interval arithmetic for many groups at once: :mod:`.intervals`' union, covered time and
overlap, computed for every profiler step of a rank in a few whole-array passes.

The per-step breakdowns ask each step the same questions the per-rank ones ask the whole rank.
Asked one step at a time, each question costs a dozen numpy calls whatever the step's size, so a
trace of thousands of short steps (a small trace grown by replication, one step per kernel) spent
seconds in call overhead. Here every interval carries its group (the step's index) and the sorts
and sweeps run once over all of them, with the group as the first sort key.

The answers are the per-group ones of :mod:`.intervals`: the merged intervals are the same
values; sums of lengths add the same numbers, in order from the first (``np.bincount``), so they
may differ from a pairwise ``ndarray.sum`` in the last bit on groups of 8 intervals or more.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model import search_sorted


@dataclass(frozen=True)
class Segments:
    """Merged, disjoint intervals of ``n`` groups: group ``k`` holds ``starts[bounds[k]:bounds[k + 1]]``
    (ascending) and the matching ``ends``; ``group`` is each interval's group."""

    group: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    bounds: np.ndarray

    @property
    def n(self) -> int:
        return len(self.bounds) - 1

    def of(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Group ``k``'s merged intervals, as :func:`.intervals.union` returns them."""
        lo, hi = self.bounds[k], self.bounds[k + 1]
        return self.starts[lo:hi], self.ends[lo:hi]

    def lengths(self) -> np.ndarray:
        """Time (µs) each group covers: the sum of its merged intervals' lengths, 0 when empty."""
        return _sums(self.group, self.ends - self.starts, self.n)

    def counts(self) -> np.ndarray:
        return np.diff(self.bounds)

    def regrouped(self, place: np.ndarray, n: int) -> "Segments":
        """The same intervals in ``n`` groups, group ``k`` now ``place[k]`` (ascending): a step's
        unions among more steps."""
        group = place[self.group]
        return Segments(group, self.starts, self.ends, search_sorted(group, np.arange(n + 1), side="left"))

    def first_start(self) -> np.ndarray:
        """Each group's earliest start (NaN when empty)."""
        out = np.full(self.n, np.nan)
        has = self.counts() > 0
        out[has] = self.starts[self.bounds[:-1][has]]
        return out

    def last_end(self) -> np.ndarray:
        """Each group's latest end (NaN when empty): its last merged interval reaches furthest."""
        out = np.full(self.n, np.nan)
        has = self.counts() > 0
        out[has] = self.ends[self.bounds[1:][has] - 1]
        return out


def positions_in(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the position of each value among the ascending ``keys``, whether it is one of them): the
    group of each interval, by its step, among the steps listed."""
    pos = search_sorted(keys, values)
    if len(keys) == 0:
        return pos, np.zeros(len(values), dtype=bool)
    return pos, (pos < len(keys)) & (keys[np.minimum(pos, len(keys) - 1)] == values)


def segment_union(group: np.ndarray, n: int, starts: np.ndarray, ends: np.ndarray) -> Segments:
    """:func:`.intervals.union` of each group's intervals (``group`` in ``0..n-1``, any order).

    Intervals are ordered by (group, start), ties in input order as union's stable sort. The
    running maximum of ends restarts at each group: it runs over integer keys, group first and
    then the rank of the end among all ends, so no group's ends reach into the next one and the
    maximum is an exact one of the input values.
    """
    group = np.asarray(group, dtype=np.int64)
    if len(starts) == 0:
        empty = np.empty(0)
        return Segments(np.empty(0, dtype=np.int64), empty, empty, np.zeros(n + 1, dtype=np.int64))
    order = np.lexsort((starts, group))
    g, s, e = group[order], starts[order], ends[order]
    by_end = np.argsort(e, kind="stable")
    rank = np.empty(len(e), dtype=np.int64)
    rank[by_end] = np.arange(len(e))
    key = g * len(e) + rank
    reach = e[by_end[np.maximum.accumulate(key) - g * len(e)]]
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = (s[1:] > reach[:-1]) | (g[1:] != g[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s)) - 1
    merged_group = g[first]
    bounds = search_sorted(merged_group, np.arange(n + 1), side="left")
    return Segments(merged_group, s[first], reach[last], bounds)


def _sweep(parts: list[tuple[Segments, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The edges of several merged sets of the same groups, each set tagged with its bit, in
    (group, time) order, ends before starts at equal times (touching intervals do not overlap):
    (group, time, mask of the sets covering the time up to the next edge, length of that stretch
    within the group)."""
    g = np.concatenate([p.group for p, _ in parts for _ in (0, 1)])
    t = np.concatenate([x for p, _ in parts for x in (p.starts, p.ends)])
    d = np.concatenate([np.full(len(p.starts), sign * bit, dtype=np.int64) for p, bit in parts for sign in (1, -1)])
    order = np.lexsort((d, t, g))
    g, t, d = g[order], t[order], d[order]
    mask = np.cumsum(d)  # each group's edges sum to 0: the mask restarts at 0 in every group
    stretch = np.zeros(len(t))
    if len(t) > 1:  # (in place: a diff and a where of millions of edges each faulted fresh memory)
        np.subtract(t[1:], t[:-1], out=stretch[:-1])
        stretch[:-1][g[1:] != g[:-1]] = 0.0
    return g, t, mask, stretch


def intersection_lengths(a: Segments, b: Segments) -> np.ndarray:
    """Per group: the time both merged sets cover (:func:`.intervals.merged_intersection_length`)."""
    if len(a.starts) == 0 or len(b.starts) == 0:
        return np.zeros(a.n)
    g, _, mask, stretch = _sweep([(a, 1), (b, 2)])
    both = mask == 3
    return _sums(g[both], stretch[both], a.n)


def overlap_times(sets: list[Segments]) -> np.ndarray:
    """Per group and per mask of the sets (bit ``i`` for ``sets[i]``): the time during which exactly
    those sets run, shape (groups, 2 ** len(sets)); column 0 (none running) is left 0."""
    n, width = sets[0].n, 1 << len(sets)
    parts = [(s, 1 << i) for i, s in enumerate(sets) if len(s.starts)]
    if not parts:
        return np.zeros((n, width))
    g, _, mask, stretch = _sweep(parts)
    active = (mask > 0) & (stretch > 0)
    return _sums(g[active] * width + mask[active], stretch[active], n * width).reshape(n, width)


def _sums(bins: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Sum of ``values`` per bin ``0..n-1``, added in order from 0.0 (float even when empty:
    ``np.bincount`` of nothing is an integer array)."""
    return np.bincount(bins, weights=values, minlength=n).astype(np.float64, copy=False)
