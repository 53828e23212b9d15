"""How wide is the noise of a change? Pure functions on sample vectors.

A relative check fires only when the change is beyond its threshold (and floor) *and* several
noise widths wide (``stats.noise_widths``, default 3). The noise width is the standard error
of the change, measured from the data at hand, at the level where the samples are independent:

* **steps of one run per side** (:func:`step_noise`): the standard error of each side's
  median, 1.2533 · σ / √n with σ = 1.4826 · MAD (a robust standard deviation: one GC pause or
  data-loader hiccup does not widen it); significance stays with the Mann-Whitney U test.
* **runs** (:func:`run_noise`, ≥ 2 runs on a side): steps are nested in runs, and runs drift
  (another node, another clock, another data-loader schedule) far more than steps within one
  run. One random-effects model estimates both: the step-to-step spread within runs and the
  run-to-run drift beyond it (σ_b, from the spread ``s`` of run medians pooled over the sides
  with ≥ 2 runs, less what step noise explains). Each run is reduced to its median; a side is
  the mean of its run medians; a side of one run drifts by a whole σ_b, borrowed from the
  other side's runs (a stored baseline's). The test is Student's t on the run medians with
  Welch–Satterthwaite degrees of freedom (:func:`t_sf`), so two baseline runs that disagree by
  8 % make an 8 % change unprovable. For a balanced design this is the exact test of the side
  effect in the nested model (the t-test on cluster means), with no mixed-model fit to
  converge on 2-4 runs.
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
    run-level noise the spread of run medians ``between_run_sd``, the drift beyond step noise
    ``drift_sd`` (σ_b), degrees of freedom and t-test p-value (``df``/``p_value`` None for
    step-level noise, whose test is Mann-Whitney U)."""

    baseline: float
    candidate: float
    width: float
    between_run_sd: float | None = None
    df: int | None = None
    p_value: float | None = None
    drift_sd: float | None = None

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
    """Noise of mean(candidate run medians) − mean(baseline run medians) under a one-way
    random-effects model of steps nested in runs (see the module docstring); at least one side
    must have ≥ 2 runs.

    A step is y = μ_side + r_run + e_step: the run effect r (drift between runs, variance σ_b²)
    and the step noise e (σ_w, measured within each run) are estimated together. A run median
    of n steps varies by v = (1.2533 σ_w)² / n from step noise alone, so the spread of run
    medians ``s`` (pooled over the sides with ≥ 2 runs) splits into σ_b² = max(0, s² − v̄)
    (ANOVA's method of moments) and v. A side of m runs has variance σ_b²/m + mean(v)/m; a
    one-run side takes the σ_b² measured on the other side (drift "borrowed"). The t-test's
    degrees of freedom are Welch–Satterthwaite's over the two parts: the runs' when the drift
    dominates (two baseline runs 8 % apart make an 8 % change unprovable), the steps' when the
    runs agree within step noise (steady GPU-bound runs keep the power of their steps).
    """
    sides = []
    for values, runs in ((baseline, b_runs), (candidate, c_runs)):
        medians, residuals = _run_medians(values, runs)
        sizes = np.unique(runs, return_counts=True)[1].astype(np.float64)
        sigma_w = robust_sd(residuals) * math.sqrt(len(values) / max(len(values) - len(medians), 1))
        v_med = (MEDIAN_SE * sigma_w) ** 2 / sizes  # variance of each run's median from step noise
        sides.append((medians, v_med, max(len(values) - len(medians), 0)))
    df_b = sum(len(m) - 1 for m, _, _ in sides)
    pooled = sum(float(((m - m.mean()) ** 2).sum()) for m, _, _ in sides)
    s2 = pooled / df_b if df_b > 0 else 0.0
    v_bar = float(np.mean(np.concatenate([v for m, v, _ in sides if len(m) > 1]))) if df_b > 0 else 0.0
    drift = max(0.0, s2 - v_bar)  # σ_b²: run-to-run variance beyond what step noise explains
    between = sum(drift / len(m) for m, _, _ in sides)
    within = sum(float(v.sum()) / len(m) ** 2 for m, v, _ in sides)
    width = math.sqrt(between + within)
    df_w = sum(n for _, _, n in sides)
    parts = (between ** 2 / max(df_b, 1) if between > 0 else 0.0) + (within ** 2 / max(df_w, 1) if within > 0 else 0.0)
    df = int(max(1, min(max(df_b, 1) + df_w, math.floor((between + within) ** 2 / parts)))) if parts > 0 else max(df_b, 1)
    b_val, c_val = float(sides[0][0].mean()), float(sides[1][0].mean())
    worse = (c_val - b_val) if worse_is_higher else (b_val - c_val)
    t = worse / width if width > 0 else (math.inf if worse > 0 else 0.0)
    return Noise(b_val, c_val, width, between_run_sd=math.sqrt(s2), df=df, p_value=t_sf(t, df),
                 drift_sd=math.sqrt(drift))


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
