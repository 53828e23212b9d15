"""span_order: the C permutation equals np.lexsort's on tie-heavy and nearly sorted input."""

from __future__ import annotations

import numpy as np
import pytest

from perfreport.analyses import ordering
from perfreport.analyses.ordering import dense_ids, span_order


@pytest.mark.skipif(ordering._nest is None, reason="the C extension was not built")
@pytest.mark.parametrize("seed", range(12))
def test_span_order_equals_lexsort(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 5000
    group = rng.choice([-7, 3, 10**12, 42], n)  # any integers: text tids are negative
    start = rng.integers(0, 50, n).astype(float)  # many equal starts: the key2 and position ties
    key2 = -rng.integers(0, 5, n).astype(float)
    if seed % 2:  # file-order-like: long ascending runs per group, a few out of place
        order = np.lexsort((start, group))
        group, start, key2 = group[order], start[order], key2[order]
        swap = rng.integers(0, n, 20)
        start[swap] = rng.integers(0, 50, 20)
    expected = np.lexsort((key2, start, group))
    got = span_order(group, start, key2, use_c=True)
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(span_order(group, start, key2, use_c=False), expected)


def test_span_order_empty_and_nan() -> None:
    empty = np.empty(0)
    assert span_order(empty.astype(np.int64), empty, empty).tolist() == []
    start = np.array([2.0, np.nan, 1.0])
    np.testing.assert_array_equal(span_order(np.zeros(3, np.int64), start, np.zeros(3)),
                                  np.lexsort((np.zeros(3), start, np.zeros(3))))


def test_dense_ids_number_values_in_ascending_order() -> None:
    values = np.repeat(np.array([5, -3, 5, 10**15, -3]), [400, 300, 200, 100, 1])  # long runs
    np.testing.assert_array_equal(dense_ids(values), np.unique(values, return_inverse=True)[1].ravel())
    mixed = np.random.default_rng(0).integers(-5, 5, 1000)  # short runs: hashed directly
    np.testing.assert_array_equal(dense_ids(mixed), np.unique(mixed, return_inverse=True)[1].ravel())


@pytest.mark.skipif(ordering._nest is None, reason="the C extension was not built")
def test_extension_rejects_bad_columns_with_a_clear_error() -> None:
    out = np.empty(2, np.int64)
    with pytest.raises(ValueError, match="span_order: a group id is outside"):
        ordering._nest.span_order(np.array([0, 5]), np.zeros(2), np.zeros(2), 2, out)
    with pytest.raises(ValueError, match="span_order: start has 24 bytes, expected 16"):
        ordering._nest.span_order(np.array([0, 1]), np.zeros(3), np.zeros(2), 2, out)
    with pytest.raises(ValueError, match="nest: a group id is outside"):
        ordering._nest.nest(np.array([-1, 0]), np.zeros(2), np.zeros(2), np.arange(2), 1, out, out.copy())
    with pytest.raises((BufferError, TypeError, ValueError)):  # outputs must be writable
        ordering._nest.nest(np.array([0, 0]), np.zeros(2), np.zeros(2), np.arange(2), 1, b"0123456789abcdef", out)


@pytest.mark.skipif(ordering._nest is None, reason="the C extension was not built")
@pytest.mark.parametrize("seed", range(4))
def test_span_order_of_events_in_many_runs_equals_lexsort(seed: int) -> None:
    """Groups listed in thousands of runs (radix sorted in C): negative keys, -0.0 and 0.0."""
    rng = np.random.default_rng(seed)
    n = 30_000
    group = rng.choice([5, -2], n)
    start = rng.integers(-300, 300, n) * 0.5
    key2 = -rng.integers(-3, 4, n) * 0.25
    start[rng.random(n) < 0.05], key2[rng.random(n) < 0.1] = -0.0, -0.0
    assert np.count_nonzero(start[1:] < start[:-1]) > 1000
    expected = np.lexsort((key2, start, group))
    np.testing.assert_array_equal(span_order(group, start, key2, use_c=True), expected)


@pytest.mark.parametrize("seed", range(6))
def test_span_order_of_operators_written_as_they_end_equals_lexsort(seed: int) -> None:
    """Operators listed when they end (a parent after its children, on a few threads): the
    default path's stable sorts by start and by thread give lexsort's order; with equal starts
    (a parent starting with its first child) the longer first, as lexsort."""
    rng = np.random.default_rng(seed)
    starts, ends, tids = [], [], []
    t = 0.0
    for _ in range(400):  # nests of a parent and its children, each child listed before the parent
        kids = int(rng.integers(1, 8))
        parent_start = t
        for k in range(kids):
            s = t + (0.0 if (k == 0 and seed % 2) else float(rng.integers(1, 3)))  # odd seeds: ties
            e = s + float(rng.integers(1, 5))
            starts.append(s), ends.append(e), tids.append(int(rng.integers(0, 3)))
            t = e
        starts.append(parent_start), ends.append(t + 1.0), tids.append(tids[-1])
        t += 2.0
    start, end, tid = np.array(starts), np.array(ends), np.array(tids) * 7 + 100
    assert np.count_nonzero(start[1:] < start[:-1]) > span_order.__globals__["MANY_DESCENTS"]
    expected = np.lexsort((-end, start, tid))
    np.testing.assert_array_equal(span_order(tid, start, -end), expected)
    np.testing.assert_array_equal(span_order(tid, start, -end, use_c=False), expected)
    if ordering._nest is not None:
        np.testing.assert_array_equal(span_order(tid, start, -end, use_c=True), expected)
