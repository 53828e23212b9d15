"""Is a change between two sets of per-step samples real, or run-to-run noise? Pure functions.

Each profiler step of each rank is one sample, so one traced run gives a distribution rather
than one number. Two tools answer the question:

* :func:`mann_whitney_u` - the Mann-Whitney U (Wilcoxon rank-sum) test, **one-sided** in the
  metric's bad direction (a gate asks "did it get worse?", and a one-sided test at level α
  has the power of a two-sided one at 2α). Exact null distribution when there are no ties
  and ``n_candidate * n_baseline <= EXACT_MAX_CELLS``; otherwise the normal approximation
  with tie correction and continuity correction (as in scipy's ``mannwhitneyu``). It
  assumes nothing about the shape of the distribution (step times are skewed, with outliers
  from the first step, GC pauses, data loading), and with 5 steps per side it can reach
  p = 1/252 ≈ 0.004.
* :func:`bootstrap_interval` - a percentile bootstrap interval of the ratio of medians
  (candidate / baseline; the difference for percentage metrics), with a fixed seed so a
  verdict is reproducible. Reported as evidence with every relative check; it decides only
  when ``stats.test = "bootstrap"`` (it is anti-conservative below ~10 samples per side,
  where a resampled median can only take a handful of values).

Why not a t-test: it assumes normality and equal-ish variances, which per-step times violate
(react_on_rails saw near-random t-test alerts on CI runners). Steps of one run cannot show drift
between runs; where a side has several runs, :mod:`perfreport.gate.noise` makes the run the
unit (a t-test on run medians) and every relative check also needs a change several noise
widths wide.

Edge cases: fewer than 2 samples on a side gives p = 1 (nothing can be concluded); all
values equal on both sides gives p = 1; NaN samples are dropped by the callers.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

EXACT_MAX_CELLS = 2500
"""Exact U distribution up to n1 * n2 cells (e.g. 50 vs 50 steps): a few ms of additions;
beyond it the normal approximation is accurate to well under the significance levels used."""

ALTERNATIVES = ("greater", "less", "two-sided")


@dataclass(frozen=True, slots=True)
class UTest:
    """Result of :func:`mann_whitney_u`: ``u`` counts the (candidate, baseline) pairs where the
    candidate is larger (ties count one half); ``method`` is "exact" or "normal"."""

    u: float
    p_value: float
    method: str
    alternative: str


def ranks_with_ties(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(1-based midranks of ``values``, sizes of the tie groups).

    >>> ranks_with_ties(np.array([3.0, 1.0, 3.0, 2.0]))
    (array([3.5, 1. , 3.5, 2. ]), array([1, 1, 2]))
    """
    order = np.argsort(values, kind="mergesort")
    sorted_values = values[order]
    new = np.r_[True, sorted_values[1:] != sorted_values[:-1]]
    group = np.cumsum(new) - 1
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, len(values)))
    mid = starts + (sizes + 1) / 2.0  # 1-based average rank of each group
    out = np.empty(len(values), dtype=np.float64)
    out[order] = mid[group]
    return out, sizes


def u_distribution(n1: int, n2: int) -> np.ndarray:
    """Null distribution of U for sample sizes n1, n2 without ties: ``counts[u]`` is the number
    of the C(n1+n2, n1) equally likely orderings with U = u (float64, exact for the sizes used).

    The recurrence f(i, j, u) = f(i-1, j, u-j) + f(i, j-1, u) (the largest value belongs to
    the first or the second sample) involves additions only, so no precision is lost.

    >>> u_distribution(2, 2).tolist()
    [1.0, 1.0, 2.0, 1.0, 1.0]
    """
    cells = n1 * n2
    # row[j] = distribution for (i, j), as i grows from 0; for i = 0 every U is 0
    row = [np.zeros(cells + 1) for _ in range(n2 + 1)]
    for r in row:
        r[0] = 1.0
    for i in range(1, n1 + 1):  # loops over sample sizes, vectorised over U
        new = [np.zeros(cells + 1) for _ in range(n2 + 1)]
        new[0][0] = 1.0
        for j in range(1, n2 + 1):
            acc = new[j - 1].copy()
            shifted = np.zeros(cells + 1)
            shifted[j:] = row[j][: cells + 1 - j]
            new[j] = acc + shifted
        row = new
    return row[n2]


def mann_whitney_u(candidate: np.ndarray, baseline: np.ndarray, alternative: str = "greater") -> UTest:
    """Mann-Whitney U test of ``candidate`` against ``baseline``.

    ``alternative``: "greater" (candidate values tend to be larger), "less", or "two-sided".
    See the module docstring for the exact/normal choice. Fewer than two samples on a side,
    or no variation at all, give p = 1.

    >>> round(mann_whitney_u(np.array([6., 7, 8, 9, 10]), np.array([1., 2, 3, 4, 5])).p_value, 5)
    0.00397
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")
    x = np.asarray(candidate, dtype=np.float64)
    y = np.asarray(baseline, dtype=np.float64)
    n1, n2 = len(x), len(y)
    if n1 < 2 or n2 < 2:
        return UTest(u=math.nan, p_value=1.0, method="none", alternative=alternative)
    ranks, ties = ranks_with_ties(np.concatenate([x, y]))
    u = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    has_ties = bool((ties > 1).any())
    if not has_ties and n1 * n2 <= EXACT_MAX_CELLS:
        counts = u_distribution(n1, n2)
        total = counts.sum()
        k = int(round(u))
        upper = counts[k:].sum() / total  # P(U >= u)
        lower = counts[: k + 1].sum() / total  # P(U <= u)
        p = {"greater": upper, "less": lower, "two-sided": min(1.0, 2.0 * min(upper, lower))}[alternative]
        return UTest(u=u, p_value=float(min(p, 1.0)), method="exact", alternative=alternative)
    n = n1 + n2
    mu = n1 * n2 / 2.0
    variance = n1 * n2 / 12.0 * ((n + 1) - float((ties ** 3 - ties).sum()) / (n * (n - 1)))
    if variance <= 0:  # every value equal: no evidence either way
        return UTest(u=u, p_value=1.0, method="normal", alternative=alternative)
    sigma = math.sqrt(variance)
    if alternative == "greater":
        p = _upper_tail((u - mu - 0.5) / sigma)
    elif alternative == "less":
        p = _upper_tail((mu - u - 0.5) / sigma)
    else:
        p = min(1.0, 2.0 * _upper_tail((abs(u - mu) - 0.5) / sigma))
    return UTest(u=u, p_value=float(min(max(p, 0.0), 1.0)), method="normal", alternative=alternative)


def _upper_tail(z: float) -> float:
    """P(Z >= z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def bootstrap_interval(candidate: np.ndarray, baseline: np.ndarray, *, statistic: str = "ratio",
                       confidence_pct: float = 98.0, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of median(candidate) / median(baseline) (``statistic``
    "ratio") or median(candidate) - median(baseline) ("difference").

    Each side is resampled with replacement ``resamples`` times (one vectorised draw per side
    from a generator seeded with ``seed``). Past :data:`CACHED_DRAWS` draws (samples of
    hundreds of steps), each resample's median is drawn directly instead, from the order
    statistics it is made of (:func:`order_statistic_medians`: the same distribution, in time
    and memory that do not grow with the samples). A ratio whose resampled baseline median is
    0 is undefined; if any is, the interval is (nan, nan), as it is with an empty side.

    >>> bootstrap_interval(np.full(5, 2.0), np.full(5, 1.0))
    (2.0, 2.0)
    """
    x = np.asarray(candidate, dtype=np.float64)
    y = np.asarray(baseline, dtype=np.float64)
    if len(x) == 0 or len(y) == 0:
        return (math.nan, math.nan)
    if resamples * (len(x) + len(y)) > CACHED_DRAWS and not (np.isnan(x).any() or np.isnan(y).any()):
        rng = np.random.default_rng(seed)
        mx = order_statistic_medians(x, resamples, rng)
        my = order_statistic_medians(y, resamples, rng)
    else:
        draws_x, draws_y = _draws(seed, resamples, len(x), len(y))
        mx = resampled_medians(x, draws_x)
        my = resampled_medians(y, draws_y)
    if statistic == "ratio":
        if (my == 0).any():
            return (math.nan, math.nan)
        values = mx / my
    elif statistic == "difference":
        values = mx - my
    else:
        raise ValueError(f"statistic must be 'ratio' or 'difference', got {statistic!r}")
    tail = (100.0 - confidence_pct) / 2.0
    lo, hi = np.percentile(values, [tail, 100.0 - tail])
    return (float(lo), float(hi))


CACHED_DRAWS = 1_000_000
"""Draws (8 bytes each) up to which :func:`_draws` keeps a pair for the next check."""


def _draws(seed: int, resamples: int, n_x: int, n_y: int) -> tuple[np.ndarray, np.ndarray]:
    """The resampling indices of each side: one draw per side from a generator seeded with
    ``seed``, x's first. They depend on the sizes only, and the checks of one comparison mostly
    judge the same samples, so the last few pairs are kept (read-only) and not drawn again."""
    if resamples * (n_x + n_y) > CACHED_DRAWS:
        return _draw(seed, resamples, n_x, n_y)
    return _kept_draws(seed, resamples, n_x, n_y)


def _draw(seed: int, resamples: int, n_x: int, n_y: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_x, size=(resamples, n_x)), rng.integers(0, n_y, size=(resamples, n_y))


@functools.lru_cache(maxsize=4)
def _kept_draws(seed: int, resamples: int, n_x: int, n_y: int) -> tuple[np.ndarray, np.ndarray]:
    pair = _draw(seed, resamples, n_x, n_y)
    for draws in pair:
        draws.flags.writeable = False
    return pair


def resampled_medians(values: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """``np.median(values[draws], axis=1)``, the same numbers, several times faster.

    A resample's median is the value at a middle *rank* of its draws, so each draw is replaced
    by its value's rank (a 16-bit integer), and each row is partitioned at its middle as such
    (a selection of small integers: a third of sorting them) instead of partitioning float
    rows; the middle ranks are then looked up in the sorted values. On 2 × 2000 resamples of a
    few hundred steps, the bootstrap of every relative check was half of the gate's time.
    Samples with NaN, with both zeros, or too many for 16-bit ranks take ``np.median`` itself."""
    n = len(values)
    if n == 0 or n > np.iinfo(np.int16).max or np.isnan(values).any() \
            or (np.signbit(values) & (values == 0)).any():  # -0.0 beside 0.0: which one np.median picks is its own
        return np.median(values[draws], axis=1)
    order = np.argsort(values, kind="stable")
    rank = np.empty(n, dtype=np.int16)
    rank[order] = np.arange(n, dtype=np.int16)
    ranks = rank[draws]
    half = n // 2
    ranks.partition(half, axis=1)  # each row's middle rank in place, the smaller ones before it
    ordered = values[order]
    if n % 2:
        return ordered[ranks[:, half]]
    below = ranks[:, :half].max(axis=1)  # the other middle rank: the largest of those before
    middle = np.stack([ordered[below], ordered[ranks[:, half]]], axis=1)
    return np.mean(middle, axis=1)  # the mean of the two middle values, computed as np.median does


def order_statistic_medians(values: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of ``resamples`` resamples of ``values`` with replacement, drawn without drawing
    the resamples: ``resamples`` numbers per side instead of ``resamples * n`` indices.

    A resample is n positions drawn uniformly from the sorted values, i.e. ``floor(n * U)`` of n
    uniforms U, and its k-th smallest value is the sorted value at ``floor(n * U_(k))``, the
    k-th smallest uniform: ``U_(k) ~ Beta(k, n + 1 - k)``, and the next one above it is
    ``U_(k) + (1 - U_(k)) * Beta(1, n - k)`` (the least of the n - k uniforms above). So the
    median (of an even count: the mean of the two middle values, as ``np.median``) is exact in
    distribution. Drawing n indices per resample made a bootstrap of 7,500-step samples take
    0.3 s and 240 MB per check."""
    n = len(values)
    ordered = np.sort(values, kind="stable")
    k = (n + 1) // 2  # the (lower) middle order statistic, 1-based
    u = rng.beta(k, n + 1 - k, size=resamples)
    low = ordered[np.minimum((u * n).astype(np.int64), n - 1)]
    if n % 2:
        return low
    above = u + (1.0 - u) * rng.beta(1, n - k, size=resamples)
    high = ordered[np.minimum((above * n).astype(np.int64), n - 1)]
    return np.mean(np.stack([low, high], axis=1), axis=1)


def smallest_p_value(n1: int, n2: int) -> float:
    """The smallest one-sided exact p-value n1 vs n2 samples can give: 1 / C(n1 + n2, n1)."""
    return 1.0 / math.comb(n1 + n2, n1) if n1 > 0 and n2 > 0 else 1.0


__all__ = ["UTest", "mann_whitney_u", "u_distribution", "ranks_with_ties", "bootstrap_interval", "order_statistic_medians",
           "smallest_p_value", "EXACT_MAX_CELLS"]
