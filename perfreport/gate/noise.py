"""How wide is the noise of a change? Pure functions on sample vectors.

A relative check fires only when the change is beyond its threshold (and floor) *and* several
noise widths wide (``stats.noise_widths``, default 3). The noise width is the standard error
of the change, measured from the data at hand, at the level where the samples are independent:

* **steps of one run per side** (:func:`step_noise`): the standard error of each side's
  median, 1.2533 · σ / √n with σ = 1.4826 · MAD (a robust standard deviation: one GC pause or
  data-loader hiccup does not widen it); significance stays with the Mann-Whitney U test.
* **runs** (:func:`run_noise`, ≥ 2 runs on a side): steps are nested in runs, and runs drift
  (another node, another clock, another data-loader schedule) far more than steps within one
  run. Each run is reduced to its median; a side is the mean of its run medians; the
  between-run standard deviation ``s`` is pooled over the sides that have ≥ 2 runs. A side of
  m runs has standard error ``max(s / √m, within-run error)``; a side of one run drifts by a
  whole ``s``. The test is Student's t on the run medians with the pooled degrees of freedom
  (:func:`t_sf`), so two baseline runs that disagree by 8 % make an 8 % change unprovable.
* **matched GPU op calls** (:func:`paired_noise`, sides with too few steps): the i-th call of a
  kernel in the baseline against the i-th call of that kernel in the candidate. The estimate
  is the ratio of the summed durations, R = Σc / Σb; its standard error comes from the
  residuals c_i − R·b_i (the ratio estimator's linearisation); significance from the one-sided
  sign test over the pairs (exact binomial up to 1,000 pairs, normal beyond), which assumes
  nothing about the shape of per-call jitter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAD_TO_SD = 1.4826
"""σ of a normal distribution per unit of median absolute deviation."""
MEDIAN_SE = 1.2533
"""Standard error of a median per σ/√n (√(π/2)), for roughly normal data."""
SIGN_TEST_EXACT_MAX = 1000


@dataclass(frozen=True, slots=True)
class Noise:
    """The two sides' central values, the noise width of their difference (same unit), and for
    run-level noise the between-run standard deviation, degrees of freedom and t-test p-value
    (``df``/``p_value`` None for step-level noise, whose test is Mann-Whitney U)."""

    baseline: float
    candidate: float
    width: float
    between_run_sd: float | None = None
    df: int | None = None
    p_value: float | None = None

    def widths(self, worse_delta: float) -> float:
        """How many noise widths ``worse_delta`` (the change in the bad direction) is wide."""
        if self.width > 0:
            return worse_delta / self.width
        return math.inf if worse_delta > 0 else 0.0


def robust_sd(values: np.ndarray) -> float:
    """1.4826 · MAD; the ordinary standard deviation when more than half the values tie (MAD 0)."""
    if len(values) < 2:
        return 0.0
    mad = float(np.median(np.abs(values - np.median(values))))
    return MAD_TO_SD * mad if mad > 0 else float(np.std(values, ddof=1))


def median_se(values: np.ndarray) -> float:
    """Standard error of the median of ``values`` (0 for fewer than two)."""
    return MEDIAN_SE * robust_sd(values) / math.sqrt(len(values)) if len(values) >= 2 else 0.0


def step_noise(baseline: np.ndarray, candidate: np.ndarray) -> Noise:
    """Noise of median(candidate) − median(baseline) from the dispersion between steps."""
    width = math.hypot(median_se(baseline), median_se(candidate))
    return Noise(float(np.median(baseline)), float(np.median(candidate)), width)


def _run_medians(values: np.ndarray, runs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(median per run, residual of every sample from its run's median)."""
    ids, inverse = np.unique(runs, return_inverse=True)
    medians = np.array([np.median(values[inverse == i]) for i in range(len(ids))])  # a loop over the few runs
    return medians, values - medians[inverse]


def run_noise(baseline: np.ndarray, b_runs: np.ndarray, candidate: np.ndarray, c_runs: np.ndarray,
              worse_is_higher: bool = True) -> Noise:
    """Noise of mean(candidate run medians) − mean(baseline run medians) with the run as the
    unit (see the module docstring); at least one side must have ≥ 2 runs."""
    sides = []
    for values, runs in ((baseline, b_runs), (candidate, c_runs)):
        medians, residuals = _run_medians(values, runs)
        within = MEDIAN_SE * robust_sd(residuals) / math.sqrt(len(values)) if len(values) >= 2 else 0.0
        sides.append((medians, within))
    df = sum(len(m) - 1 for m, _ in sides)
    pooled = sum(float(((m - m.mean()) ** 2).sum()) for m, _ in sides)
    s = math.sqrt(pooled / df) if df > 0 else 0.0
    errors = [max(s / math.sqrt(len(m)) if len(m) > 1 else s, within) for m, within in sides]
    width = math.hypot(*errors)
    b_val, c_val = float(sides[0][0].mean()), float(sides[1][0].mean())
    worse = (c_val - b_val) if worse_is_higher else (b_val - c_val)
    t = worse / width if width > 0 else (math.inf if worse > 0 else 0.0)
    return Noise(b_val, c_val, width, between_run_sd=s, df=max(df, 1), p_value=t_sf(t, max(df, 1)))


def t_quantile(alpha: float, df: int) -> float:
    """The t with P(T ≥ t) = ``alpha`` for Student's t with ``df`` degrees of freedom (bisection
    on :func:`t_sf`; the critical value of a one-sided test at level ``alpha``).

    >>> round(t_quantile(0.05, 1), 3), round(t_quantile(0.05, 10), 3)
    (6.314, 1.812)
    """
    lo, hi = 0.0, 1.0
    while t_sf(hi, df) > alpha and hi < 1e9:
        hi *= 2.0
    for _ in range(100):  # a fixed number of halvings: 1e9 / 2**100 is far below any precision used
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if t_sf(mid, df) > alpha else (lo, mid)
    return hi


def z_quantile(alpha: float) -> float:
    """The z with P(Z ≥ z) = ``alpha`` for a standard normal Z (bisection on erfc)."""
    lo, hi = -10.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if 0.5 * math.erfc(mid / math.sqrt(2.0)) > alpha else (lo, mid)
    return hi


def t_sf(t: float, df: int) -> float:
    """P(T ≥ t) for Student's t with integer ``df`` ≥ 1 (Abramowitz & Stegun 26.7.3-4: a
    finite series in cos θ, θ = atan(t / √df)).

    >>> round(t_sf(2.0, 1), 4), round(t_sf(2.0, 4), 4)
    (0.1476, 0.0581)
    """
    if math.isnan(t):
        return 1.0
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    theta = math.atan(abs(t) / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    s = math.sin(theta)
    if df % 2 == 1:
        total, term = 0.0, math.cos(theta) if df > 1 else 0.0
        for k in range(1, (df - 1) // 2 + 1):  # a loop over df/2 terms
            total += term
            term *= c2 * (2 * k) / (2 * k + 1)
        inside = 2.0 / math.pi * (theta + s * total)
    else:
        total, term = 0.0, 1.0
        for k in range(1, df // 2 + 1):
            total += term
            term *= c2 * (2 * k - 1) / (2 * k)
        inside = s * total
    upper = max(0.0, (1.0 - inside) / 2.0)  # P(|T| >= |t|) / 2
    return upper if t >= 0 else 1.0 - upper


@dataclass(frozen=True, slots=True)
class Paired:
    """Matched calls: ``ratio`` Σc/Σb, its standard error ``se``, the sign test's ``p_value``
    (one-sided, candidate slower), ``pairs`` matched and ``method`` ("exact" / "normal")."""

    ratio: float
    se: float
    p_value: float
    pairs: int
    method: str

    def widths(self) -> float:
        """How many standard errors the ratio lies above 1."""
        if self.se > 0:
            return (self.ratio - 1.0) / self.se
        return math.inf if self.ratio > 1.0 else 0.0


def paired_noise(baseline: np.ndarray, candidate: np.ndarray) -> Paired:
    """Ratio, noise and sign test of matched (baseline, candidate) durations (equal lengths)."""
    b = np.asarray(baseline, dtype=np.float64)
    c = np.asarray(candidate, dtype=np.float64)
    n = len(b)
    total = float(b.sum())
    if n == 0 or total <= 0:
        return Paired(math.nan, math.nan, 1.0, n, "none")
    ratio = float(c.sum()) / total
    residual = c - ratio * b
    se = math.sqrt(float((residual ** 2).sum()) * n / max(n - 1, 1)) / total
    se = 0.0 if se < 1e-12 * max(ratio, 1.0) else se  # rounding residue of an exact ratio, not noise
    p, method = sign_test(int((c > b).sum()), int((c != b).sum()))
    return Paired(ratio, se, p, n, method)


def sign_test(larger: int, untied: int) -> tuple[float, str]:
    """One-sided sign test: P(X ≥ larger) for X ~ Binomial(untied, 1/2), and the method."""
    if untied == 0:
        return 1.0, "exact"
    if untied <= SIGN_TEST_EXACT_MAX:
        k = np.arange(larger, untied + 1)
        logs = (math.lgamma(untied + 1) - np.array([math.lgamma(x + 1) + math.lgamma(untied - x + 1) for x in k])
                - untied * math.log(2.0))
        return float(min(1.0, np.exp(logs).sum())), "exact"
    z = (larger - 0.5 - untied / 2.0) / math.sqrt(untied / 4.0)
    return 0.5 * math.erfc(z / math.sqrt(2.0)), "normal"


__all__ = ["Noise", "Paired", "step_noise", "run_noise", "paired_noise", "sign_test", "t_sf", "t_quantile",
           "z_quantile", "robust_sd",
           "median_se"]
