"""Sorting events by (thread or stream, start, end) fast, using the order they come in.

Many analyses need a rank's events grouped by thread or stream and, within each, by start:
``np.lexsort((end, start, group))``. A general sort ignores that Kineto already writes each
thread's events as a few long runs in start order, so on a big trace it is one of the most
expensive steps of an analysis. :func:`span_order` gives the same permutation through the C
extension ``_nest`` (a counting sort by group, then a natural merge sort of each group: a few
linear passes) when it was built, else through ``np.lexsort`` itself.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

try:
    from . import _nest  # type: ignore[attr-defined]
except ImportError:  # the extension is optional (no compiler at install)
    _nest = None


MANY_DESCENTS = 256
"""Starts that go down this often, in the order given, are sorted by numpy's timsort
(:func:`_by_start_then_group`) rather than the C merge passes (the C extension's radix sort,
past as many runs)."""


def span_order(group: np.ndarray, start: np.ndarray, key2: np.ndarray, *, use_c: bool | None = None) -> np.ndarray:
    """``np.lexsort((key2, start, group))``: positions sorted by group, then start, then
    ``key2``, ties in position order. ``group`` holds any integers (a tid, a stream); pass
    ``-end`` as ``key2`` for "longer first". ``use_c`` forces one path (tests): True the C
    extension's, False numpy's lexsort."""
    chosen = use_c is None
    if use_c is None:  # NaN keys: numpy's NaN order is the reference's to define
        use_c = _nest is not None and bool(np.isfinite(start).all() and np.isfinite(key2).all())
    if not use_c:
        return np.lexsort((key2, start, group))
    ids = dense_ids(np.asarray(group))
    if chosen and np.count_nonzero(start[1:] < start[:-1]) > MANY_DESCENTS:
        order = _by_start_then_group(ids, np.asarray(start))
        if order is not None:
            return order
    out = np.empty(len(ids), dtype=np.int64)
    _nest.span_order(ids, np.ascontiguousarray(start, np.float64), np.ascontiguousarray(key2, np.float64),
                     int(ids.max()) + 1 if len(ids) else 0, out)
    return out


def _by_start_then_group(ids: np.ndarray, start: np.ndarray) -> np.ndarray | None:
    """:func:`span_order` of spans whose starts are all distinct (None where two are equal:
    then ``key2`` orders them): a stable sort by start, then a stable sort by the dense group
    ids, which is the lexsort of the two. Kineto writes a thread's operators when they end,
    so a parent follows its children, and where they nest deeply the starts go down at every
    other event: the 2021 TensorBoard plugin's trace grown to 1 GB lists its 1,969,277 aten
    ops with 910,792 descents, which the C extension's radix sort ordered in 0.08-0.12 s and
    these two sorts in 0.026-0.027 s (numpy's timsort of the nearly sorted starts 6 ms of it,
    then a radix sort of the few threads' small integers)."""
    order = np.argsort(start, kind="stable")
    ordered = start[order]
    if len(ordered) > 1 and (ordered[1:] == ordered[:-1]).any():
        return None
    n_groups = int(ids.max()) + 1 if len(ids) else 0
    small = ids[order].astype(np.uint8 if n_groups <= 1 << 8 else np.uint16 if n_groups <= 1 << 16 else np.int64)
    return order[np.argsort(small, kind="stable")]


def dense_ids(values: np.ndarray) -> np.ndarray:
    """Dense int64 id of each value, numbered in ascending value order (``np.unique``'s
    inverse). Events of one thread or stream come in long runs: only the runs' values are
    hashed, then repeated."""
    if len(values) == 0:
        return np.empty(0, dtype=np.int64)
    cuts = np.flatnonzero(values[1:] != values[:-1]) + 1
    if 8 * (len(cuts) + 1) <= len(values):  # few runs (and fewer than values: no endless recursion)
        first = np.r_[0, cuts]
        return np.repeat(dense_ids(values[first]), np.diff(first, append=len(values)))
    return pd.factorize(values, sort=True)[0].astype(np.int64)
