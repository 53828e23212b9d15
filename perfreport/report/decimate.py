"""The points of a long line that draw the same pixels: M4, per pixel column of the figure.

A per-step figure of a many-step run has a point per step: 37,500 a line on the MI250-grown
rank, 173,000 on the smallest steps. Drawn through every point, a noisy line of 37,500 steps
made a 1.3 MB SVG, and WeasyPrint, which parses and paints an SVG path in Python, took 0.70 s
to lay out the page holding it.

A line drawn through many points of one pixel column paints, in that column, one vertical
stroke from its lowest to its highest point, joined to the columns on either side at its first
and last point. So keeping the first, last, lowest and highest point of each column draws the
same pixels (M4: Jugel et al., "M4: A Visualization-Oriented Time Series Data Aggregation",
VLDB 2014), at most four points a column; a spike is never lost. The columns here are the
figure's pixels across its whole width (the axes are narrower, so a column is under a pixel of
them), and a gap (a missing value) stays a gap: points are only merged within a run of finite
values. Measured on two lines of 37,500 steps (figure, then PDF page): noisy 1.3 MB -> 0.32 MB,
0.08 + 0.70 -> 0.06 + 0.21 s; alternating between two step times (the MI250-grown trace, or a
gradient accumulated over two steps), whose path matplotlib's own simplification already keeps
short, 0.54 -> 0.29 MB, 0.10 + 0.25 -> 0.07 + 0.22 s. ``tests/test_report_figures.py`` draws
lines both ways and compares the pixels.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..model import sorted_unique


def m4_indices(x: np.ndarray, y: np.ndarray, columns: int) -> np.ndarray | None:
    """Indices (ascending) of the points of the line (``y`` NaN for a gap) that draw it over
    ``columns`` equal columns of its x range: per column and run of finite values, the first,
    last, lowest and highest point (the first of equal ones), and the first point of each gap.
    None when the line has no more than four points a column or its x do not ascend: drawn
    whole."""
    n = len(x)
    if n <= 4 * columns or not np.isfinite(x).all() or (np.diff(x) < 0).any():
        return None
    finite = np.isfinite(y)
    lo, hi = float(x[0]), float(x[-1])
    col = np.zeros(n, dtype=np.int64) if hi <= lo else \
        np.minimum(((x - lo) * (columns / (hi - lo))).astype(np.int64), columns - 1)
    gap_start = ~finite & np.r_[True, finite[:-1]]  # the first point of each gap: it breaks the line
    run = np.cumsum(finite & np.r_[True, ~finite[:-1]])  # a run of finite values starts after a gap
    at = np.flatnonzero(finite)
    key = run[at] * (columns + 1) + col[at]  # ascends: x ascends within a run
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    ends = np.r_[starts[1:], len(at)] - 1
    values = y[at]
    group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(at)]))
    lowest = _first_per_group(values == np.minimum.reduceat(values, starts)[group], group)
    highest = _first_per_group(values == np.maximum.reduceat(values, starts)[group], group)
    return sorted_unique(np.concatenate([at[starts], at[ends], at[lowest], at[highest], np.flatnonzero(gap_start)]))


def _first_per_group(hit: np.ndarray, group: np.ndarray) -> np.ndarray:
    """Position of the first ``hit`` of each group (every group has one)."""
    where = np.flatnonzero(hit)
    return where[np.r_[True, group[where][1:] != group[where][:-1]]]


def drawn_points(x: Sequence[float], y: Sequence[float], columns: int) -> tuple[Sequence, Sequence]:
    """(x, y) of the points that draw the line over ``columns`` pixel columns: all of them (the
    sequences given), or :func:`m4_indices`'. ``y`` may hold NaN (a gap)."""
    columns = max(columns, 1)
    if len(x) <= 4 * columns:  # (the usual line: no arrays made)
        return x, y
    keep = m4_indices(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64), columns)
    if keep is None:
        return x, y
    return [x[i] for i in keep.tolist()], [y[i] for i in keep.tolist()]


__all__ = ["m4_indices", "drawn_points"]
