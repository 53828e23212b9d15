"""perfreport.gate.stats: Mann-Whitney U and the bootstrap interval, checked against brute force.

Every expected p-value is recomputed independently: by enumerating all C(n1+n2, n1) ways to
split the pooled samples (the permutation distribution the test approximates), or by the
closed form 1 / C(n1+n2, n1) for perfectly separated samples.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest

from perfreport.gate.stats import (
    EXACT_MAX_CELLS, bootstrap_interval, mann_whitney_u, order_statistic_medians, ranks_with_ties, resampled_medians,
    smallest_p_value,
    u_distribution,
)


def brute_u(x: np.ndarray, y: np.ndarray) -> float:
    """Pairs with x > y, ties counting one half: the definition of U."""
    return float(sum((a > b) + 0.5 * (a == b) for a in x for b in y))


def permutation_p(x: np.ndarray, y: np.ndarray, alternative: str) -> float:
    """Exact permutation p-value of U: every split of the pooled values into sizes (n1, n2)."""
    upper, lower = _permutation_tails(tuple(x.tolist()), tuple(y.tolist()))
    return {"greater": upper, "less": lower, "two-sided": min(1.0, 2 * min(upper, lower))}[alternative]


@functools.lru_cache(maxsize=None)
def _permutation_tails(x: tuple[float, ...], y: tuple[float, ...]) -> tuple[float, float]:
    """P(U >= observed), P(U <= observed) over every split, enumerated once per pair of samples
    (each alternative reads the same enumeration)."""
    pooled = np.array(x + y)
    n1 = len(x)
    observed = brute_u(np.array(x), np.array(y))
    us = []
    for idx in itertools.combinations(range(len(pooled)), n1):
        mask = np.zeros(len(pooled), dtype=bool)
        mask[list(idx)] = True
        us.append(brute_u(pooled[mask], pooled[~mask]))
    us = np.array(us)
    return float(np.mean(us >= observed - 1e-9)), float(np.mean(us <= observed + 1e-9))


# --- ranks -----------------------------------------------------------------------------------
def test_midranks_match_pairwise_definition():
    rng = np.random.default_rng(3)
    values = rng.integers(0, 5, size=25).astype(float)
    ranks, ties = ranks_with_ties(values)
    # rank = 1 + (number smaller) + (number equal - 1) / 2
    expected = np.array([1 + (values < v).sum() + ((values == v).sum() - 1) / 2 for v in values])
    assert np.allclose(ranks, expected)
    assert sorted(ties.tolist()) == sorted(np.unique(values, return_counts=True)[1].tolist())


# --- exact distribution ----------------------------------------------------------------------
@pytest.mark.parametrize("n1,n2", [(1, 1), (2, 3), (3, 3), (4, 4), (5, 3), (5, 5)])
def test_u_distribution_matches_enumeration(n1, n2):
    counts = np.zeros(n1 * n2 + 1)
    for idx in itertools.combinations(range(n1 + n2), n1):
        # positions of the first sample in the sorted pooled order; U = sum of (rank - own index)
        counts[sum(p - i for i, p in enumerate(idx))] += 1
    assert np.array_equal(u_distribution(n1, n2), counts)
    assert u_distribution(n1, n2).sum() == math.comb(n1 + n2, n1)


def test_u_distribution_large_is_a_distribution():
    d = u_distribution(50, 50)
    assert d.sum() == pytest.approx(math.comb(100, 50), rel=1e-12)
    assert np.allclose(d, d[::-1])  # symmetric under H0


# --- the test ---------------------------------------------------------------------------------
@pytest.mark.parametrize("alternative", ["greater", "less", "two-sided"])
def test_exact_p_matches_permutation_without_ties(alternative):
    rng = np.random.default_rng(11)
    for _ in range(5):
        x = rng.normal(1.0, 1.0, size=5)
        y = rng.normal(0.0, 1.0, size=6)
        r = mann_whitney_u(x, y, alternative)
        assert r.method == "exact"
        assert r.u == brute_u(x, y)
        assert r.p_value == pytest.approx(permutation_p(x, y, alternative), abs=1e-12)


def test_perfect_separation_gives_closed_form():
    base = np.array([100.0, 101, 99, 102, 100.5])
    cand = base * 1.10
    assert mann_whitney_u(cand, base).p_value == pytest.approx(1 / 252)
    assert mann_whitney_u(cand[:4], base[:4]).p_value == pytest.approx(1 / 70)
    assert mann_whitney_u(base, cand, "greater").p_value == pytest.approx(1.0)
    assert mann_whitney_u(base, cand, "less").p_value == pytest.approx(1 / 252)
    assert smallest_p_value(5, 5) == pytest.approx(1 / 252)
    assert smallest_p_value(4, 5) == pytest.approx(1 / 126)


def test_normal_approximation_with_ties_close_to_permutation():
    x = np.array([3, 4, 4, 5, 5, 5, 6, 7], dtype=float)
    y = np.array([1, 2, 3, 3, 4, 4, 5, 2], dtype=float)
    r = mann_whitney_u(x, y)
    assert r.method == "normal"  # ties force the approximation
    assert r.u == brute_u(x, y)
    assert r.p_value == pytest.approx(permutation_p(x, y, "greater"), abs=0.01)
    two = mann_whitney_u(x, y, "two-sided")
    assert two.p_value == pytest.approx(permutation_p(x, y, "two-sided"), abs=0.02)


def test_normal_approximation_for_large_samples_matches_exact_distribution():
    rng = np.random.default_rng(5)
    x = rng.normal(0.3, 1, size=60)
    y = rng.normal(0.0, 1, size=60)
    assert 60 * 60 > EXACT_MAX_CELLS
    r = mann_whitney_u(x, y)
    assert r.method == "normal"
    counts = u_distribution(60, 60)
    exact = counts[int(round(r.u)):].sum() / counts.sum()
    assert r.p_value == pytest.approx(exact, abs=2e-3)


def test_degenerate_inputs_are_not_significant():
    assert mann_whitney_u(np.array([5.0]), np.array([1.0, 2.0])).p_value == 1.0
    assert mann_whitney_u(np.empty(0), np.empty(0)).p_value == 1.0
    assert mann_whitney_u(np.full(6, 3.0), np.full(6, 3.0)).p_value == 1.0
    with pytest.raises(ValueError):
        mann_whitney_u(np.ones(3), np.ones(3), "bigger")


# --- bootstrap ---------------------------------------------------------------------------------
def test_bootstrap_interval_brackets_the_ratio_and_is_reproducible():
    rng = np.random.default_rng(2)
    base = rng.normal(100, 2, size=30)
    cand = base * 1.2 + rng.normal(0, 1, size=30)
    lo, hi = bootstrap_interval(cand, base, confidence_pct=98, resamples=2000, seed=7)
    assert lo < np.median(cand) / np.median(base) < hi
    assert lo > 1.1 and hi < 1.3
    assert (lo, hi) == bootstrap_interval(cand, base, confidence_pct=98, resamples=2000, seed=7)


@pytest.mark.parametrize("n", [25, 26, 7])
def test_order_statistic_medians_have_the_resampled_medians_distribution(n):
    values = np.round(np.random.default_rng(n).lognormal(0, 1, n), 1)  # skewed, with ties
    resamples = 40_000
    direct = order_statistic_medians(values, resamples, np.random.default_rng(1))
    drawn = resampled_medians(values, np.random.default_rng(2).integers(0, n, size=(resamples, n)))
    points = np.union1d(direct, drawn)
    cdf = lambda sample: np.searchsorted(np.sort(sample), points, side="right") / resamples  # noqa: E731
    assert np.abs(cdf(direct) - cdf(drawn)).max() < 0.02  # Kolmogorov-Smirnov distance (0.01 is the noise)
    assert np.isin(np.unique(direct), np.r_[values, ((values[:, None] + values) / 2).ravel()]).all()


def test_bootstrap_of_long_samples_draws_medians_directly_with_the_same_interval():
    rng = np.random.default_rng(5)
    base = rng.lognormal(3, 0.3, size=700)  # 2000 x 1400 draws: past CACHED_DRAWS
    cand = base * 1.05 + rng.normal(0, 1, size=700)
    lo, hi = bootstrap_interval(cand, base, resamples=2000, seed=0)
    assert (lo, hi) == bootstrap_interval(cand, base, resamples=2000, seed=0)
    draws = np.random.default_rng(0).integers(0, 700, size=(2000, 700)), np.random.default_rng(9).integers(0, 700, size=(2000, 700))
    ratios = resampled_medians(cand, draws[0]) / resampled_medians(base, draws[1])
    ref_lo, ref_hi = np.percentile(ratios, [1, 99])
    width = ref_hi - ref_lo
    assert abs(lo - ref_lo) < 0.15 * width and abs(hi - ref_hi) < 0.15 * width
    assert lo < np.median(cand) / np.median(base) < hi


@pytest.mark.parametrize("values", [
    np.array([3.0, 1.0, 2.0]), np.array([5.0, 5.0, 1.0, 9.0]), np.array([7.0]),
    np.round(np.random.default_rng(3).normal(100, 10, 41), 1),  # ties
    np.random.default_rng(4).lognormal(0, 2, 200), np.array([1.0, np.inf, 2.0, np.inf]),
    np.array([1.0, np.nan, 2.0]), np.array([0.0, -0.0, 1.0, 2.0]),  # np.median's own path
])
def test_resampled_medians_are_numpys_medians_bit_for_bit(values):
    draws = np.random.default_rng(0).integers(0, len(values), size=(500, len(values)))
    want = np.median(values[draws], axis=1)
    got = resampled_medians(values, draws)
    assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_bootstrap_difference_and_undefined_cases():
    assert bootstrap_interval(np.full(4, 30.0), np.full(4, 20.0), statistic="difference") == (10.0, 10.0)
    assert all(math.isnan(v) for v in bootstrap_interval(np.ones(3), np.zeros(3)))
    assert all(math.isnan(v) for v in bootstrap_interval(np.empty(0), np.ones(3)))
    with pytest.raises(ValueError):
        bootstrap_interval(np.ones(3), np.ones(3), statistic="mean")


def test_kept_draws_are_the_seeded_draws_and_read_only():
    from perfreport.gate.stats import _draw, _draws

    kept, fresh = _draws(3, 50, 5, 7), _draw(3, 50, 5, 7)
    assert all(np.array_equal(k, f) for k, f in zip(kept, fresh)) and _draws(3, 50, 5, 7)[1] is kept[1]
    assert not kept[0].flags.writeable and _draws(3, 5000, 300, 300)[0].flags.writeable  # too big to keep
