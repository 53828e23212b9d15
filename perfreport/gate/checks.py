"""The records a verdict is made of: statuses, :class:`Check` with its :class:`Threshold` and
:class:`Evidence`, :class:`Note`, and how a check is built, named (:func:`check_id`) and its
values and evidence written out."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..config import Waiver
from ..documents.cells import Floats
from ..units import format_us, format_value
from .metrics import Metric

PASS, WARN, FAIL, INCONCLUSIVE = "pass", "warn", "fail", "inconclusive"
STATUSES = (FAIL, WARN, INCONCLUSIVE, PASS)
"""Check statuses, most severe first (the order of the verdict's checks)."""


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the status rests on. ``test``: "mann-whitney-u" / "bootstrap" (relative and new
    absolute violations), "median count per step" (structural), "limit" (absolute, no
    baseline). ``interval`` is the bootstrap interval of the ratio of medians (the difference,
    in points, for percentage metrics) at ``confidence_pct``, whichever test decides.
    ``baseline_values``/``candidate_values`` are the samples themselves (per step), so a
    reader can re-check the statistics.

    What the verdict rests on: ``sample_kind`` is the unit the test counted - "step" (one
    (rank, step), or one step aggregated over ranks), "run" (several runs on a side: a run's
    median), "rank-step" (too few steps for a ``mean`` check: every (rank, step) pooled),
    "kernel invocation" / "collective call" / "copy" / "GPU op call" (too few steps: matched
    calls); ``baseline_samples``/``candidate_samples`` count those units, ``baseline_runs``/
    ``candidate_runs`` and ``baseline_steps``/``candidate_steps`` the runs and steps behind
    them. ``noise_width`` is the standard error of the change in the metric's unit (see
    :mod:`perfreport.gate.noise`), ``noise_widths`` how many of them the change in the bad
    direction is wide, ``required_noise_widths`` the configured minimum for a finding, and
    ``between_run_sd`` the spread of run medians (runs only).

    What the check could see (relative checks): ``min_detectable`` is the smallest change in the
    bad direction (metric unit) that would have been a finding with this noise and these
    samples - the threshold and floor, the noise widths, and the test's critical value, whichever
    is largest (inf: no change could be, e.g. too few samples) - and ``min_detectable_pct`` the
    same relative to the baseline; ``drift`` says how run-to-run drift entered: "measured" (runs
    on both sides), "borrowed" (a one-run side takes the other side's spread between runs),
    "unknown" (one run per side: steps cannot show it) or None (matched calls).
    ``possible_regression``: beyond the threshold but not shown to be beyond noise, raised to
    ``stats.inconclusive_level``; ``to_decide`` what more data would decide it."""

    test: str
    baseline_samples: int
    candidate_samples: int
    p_value: float | None = None
    alpha: float | None = None
    method: str | None = None
    interval: tuple[float, float] | None = None
    interval_of: str | None = None
    confidence_pct: float | None = None
    significant: bool | None = None
    baseline_values: Floats | tuple[float, ...] = ()
    candidate_values: Floats | tuple[float, ...] = ()
    sample_kind: str = "step"
    baseline_runs: int | None = None
    candidate_runs: int | None = None
    baseline_steps: int | None = None
    candidate_steps: int | None = None
    noise_width: float | None = None
    noise_widths: float | None = None
    required_noise_widths: float | None = None
    between_run_sd: float | None = None
    min_detectable: float | None = None
    min_detectable_pct: float | None = None
    drift: str | None = None
    possible_regression: bool = False
    to_decide: str | None = None


@dataclass(frozen=True, slots=True)
class Threshold:
    """``kind``: max_increase_pct / max_increase_points / max_decrease_points (relative), max /
    min (absolute), max_change (structural, counts); ``floor_us``: the change a time must
    exceed at all (relative time checks)."""

    kind: str
    value: float
    floor_us: float | None = None

    def describe(self, unit: str) -> str:
        if self.kind == "max_increase_pct":
            text = f"at most +{self.value:g} %"
        elif self.kind == "max_decrease_pct":
            text = f"at most −{self.value:g} %"
        elif self.kind == "max_increase_points":
            text = f"at most +{self.value:g} points"
        elif self.kind == "max_decrease_points":
            text = f"at most −{self.value:g} points"
        elif self.kind in ("max", "min"):
            text = f"{'≤' if self.kind == 'max' else '≥'} {format_value(self.value, unit)}"
        else:
            text = "unchanged" if self.value == 0 else f"within ±{self.value:.3g} per step"
        if self.floor_us:
            text += f", ignoring changes under {format_us(self.floor_us)}/step"
        return text


@dataclass(frozen=True, slots=True)
class Check:
    """One judged quantity. Values are medians over the samples (µs, %, or counts per step);
    ``delta`` = candidate - baseline in the metric's unit (points for percentages);
    ``delta_pct`` the change relative to the baseline (None when it is 0)."""

    id: str
    family: str
    name: str
    metric: str
    label: str
    unit: str
    worse: str
    subject: str | None
    rank: int | None
    aggregation: str
    level: str
    status: str
    baseline_value: float | None
    candidate_value: float | None
    delta: float | None
    delta_pct: float | None
    threshold: Threshold
    evidence: Evidence
    message: str
    waiver: Waiver | None = None

    @property
    def counts(self) -> bool:
        """Whether the check takes part in the overall status (not waived)."""
        return self.waiver is None


@dataclass(frozen=True, slots=True)
class Note:
    """Something a reader must know: ``kind`` is hardware, ranks, versions, steps or waiver."""

    kind: str
    message: str


def make_check(*, family: str, name: str, metric: Metric, subject: str | None, rank: int | None, aggregation: str,
               level: str, status: str, threshold: Threshold, b: np.ndarray, c: np.ndarray, evidence: Evidence,
               message: str, values: tuple[float, float] | None = None) -> Check:
    """A :class:`Check` from the samples ``b``/``c`` of one group: medians (or ``values``, e.g.
    the means of run medians), deltas, id, and the samples kept in the evidence; a per-rank
    message gets a ``rank N:`` prefix."""
    b_val = float(np.median(b)) if len(b) else None
    c_val = float(np.median(c)) if len(c) else None
    if values is not None:
        b_val, c_val = values
    delta = c_val - b_val if b_val is not None and c_val is not None else None
    delta_pct = 100.0 * delta / abs(b_val) if delta is not None and b_val else None
    # kept as float64 (a check of a many-step job keeps hundreds of thousands of samples)
    evidence = replace(evidence, baseline_values=Floats(b), candidate_values=Floats(c))
    return Check(id=check_id(family, name, subject, rank), family=family, name=name, metric=metric.column,
                 label=metric.label, unit=metric.unit, worse=metric.worse, subject=subject, rank=rank,
                 aggregation=aggregation, level=level, status=status, baseline_value=b_val, candidate_value=c_val,
                 delta=delta, delta_pct=delta_pct, threshold=threshold, evidence=evidence,
                 message=message if rank is None else f"rank {rank}: {message}")


def check_id(family: str, name: str, subject: str | None = None, rank: int | None = None) -> str:
    """``family.name[subject]@rankN`` (see :mod:`perfreport.gate.verdict`)."""
    out = f"{family}.{name}"
    if subject:
        out += f"[{subject}]"
    if rank is not None:
        out += f"@rank{rank}"
    return out


def evidence_text(e: Evidence) -> str:
    """The statistical evidence in one clause, for messages: the test, and what it rests on."""
    if e.test == "bootstrap" and e.interval:
        text = (f"{e.confidence_pct:g} % bootstrap interval of the {e.interval_of.split(' (')[0]} "
                f"[{e.interval[0]:.3g}, {e.interval[1]:.3g}], {rests_on(e)}")
    else:
        p = "n/a" if e.p_value is None else f"{e.p_value:.3g}"
        name = {"mann-whitney-u": "Mann-Whitney U"}.get(e.test, e.test)
        text = f"{name} p = {p}, α = {e.alpha:g}, {rests_on(e)}"
    if e.noise_widths is not None and math.isfinite(e.noise_widths):
        text += f", {e.noise_widths:.1f} noise widths"
    return text


def detectable_text(e: Evidence, unit: str) -> str | None:
    """The smallest change the check could have detected, for people: "+6.2 %", "+5.0 points",
    "none: too few samples"; None where the check has no such figure (structural, absolute)."""
    if e.min_detectable is None:
        return None
    if not math.isfinite(e.min_detectable):
        return "none: too few samples to tell any change from noise"
    if unit == "pct":
        return f"+{e.min_detectable:.1f} points"
    if e.min_detectable_pct is not None and math.isfinite(e.min_detectable_pct):
        return f"+{e.min_detectable_pct:.1f} % ({format_value(e.min_detectable, unit)})"
    return f"+{format_value(e.min_detectable, unit)}"


def rests_on(e: Evidence) -> str:
    """What the test counted: "4 vs 5 steps", "2 vs 1 runs (10 vs 5 steps)", "4476 vs 4476
    matched kernel invocations (1 vs 1 steps)"."""
    if e.sample_kind == "run":
        text = f"{e.baseline_runs} vs {e.candidate_runs} runs ({e.baseline_steps} vs {e.candidate_steps} steps)"
        return text + (", drift borrowed from the baseline's runs" if e.drift == "borrowed" else "")
    unit = {"step": "steps", "rank-step": "(rank, step) samples pooled over ranks",
            "kernel invocation": "matched kernel invocations", "collective call": "matched collective calls",
            "copy": "matched copies", "GPU op call": "matched GPU op calls"}.get(e.sample_kind, e.sample_kind)
    text = f"{e.baseline_samples} vs {e.candidate_samples} {unit}"
    if e.sample_kind not in ("step", "rank-step") and e.baseline_steps is not None:
        text += f" ({e.baseline_steps} vs {e.candidate_steps} steps)"
    if e.drift == "unknown":
        text += ", one run a side: drift between runs unknown"
    return text
