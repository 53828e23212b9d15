"""(baseline, candidate, Config) -> Verdict: every check with its evidence, and pass/warn/fail.

A check's status is one of:

* ``pass`` - within its threshold (or the change is not worse);
* ``warn`` / ``fail`` - beyond its threshold, significant where statistics apply; the check's
  configured ``level`` (structural decreases use ``decrease_level``);
* ``inconclusive`` - beyond its threshold but not significant, too few samples on a side, a
  side without the metric, or GPUs differ with ``hardware_mismatch = "inconclusive"``. Shown,
  never a failure: a gate that cannot tell must not block.

A check matched by a waiver keeps its status but carries the waiver and does not count. The
overall status is ``fail`` if any counted check fails, else ``warn`` if any warns, else
``pass``. Notes record what a reader must know to trust the verdict: different GPUs, ranks,
world sizes or library versions, steps dropped as warm-up, missing profiler steps, expired
waivers.

Check ids (what waivers match): ``<family>.<name>``, then ``[subject]`` for per-key checks
(a kernel, a collective, ``added: <key>``, a count column), then ``@rank<N>`` for per-rank
checks, e.g. ``relative.step_time``, ``relative.kernel_time[sgemm_128x64]@rank0``,
``structural.memcpy[memcpy_dtoh_count]``.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..config import AbsoluteCheck, Config, RelativeCheck, StructuralCheck, Waiver
from ..units import format_us
from .metrics import (
    ABSOLUTE_METRICS, HIGHER, METRICS, RELATIVE_METRICS, STRUCTURAL_COUNTS, Group, Metric, SideData, aggregate,
    key_of, keyed_samples, rank_pairs,
)
from .stats import bootstrap_interval, mann_whitney_u

PASS, WARN, FAIL, INCONCLUSIVE = "pass", "warn", "fail", "inconclusive"
STATUSES = (FAIL, WARN, INCONCLUSIVE, PASS)
"""Check statuses, most severe first (the order of the verdict's checks)."""
FAMILIES = ("relative", "absolute", "structural")
MEMORY_KEY = re.compile(r"^(Memcpy|Memset)")


@dataclass(frozen=True, slots=True)
class Evidence:
    """What the status rests on. ``test``: "mann-whitney-u" / "bootstrap" (relative and new
    absolute violations), "median count per step" (structural), "limit" (absolute, no
    baseline). ``interval`` is the bootstrap interval of the ratio of medians (the difference,
    in points, for percentage metrics) at ``confidence_pct``, whichever test decides.
    ``baseline_values``/``candidate_values`` are the samples themselves (per step), so a
    reader can re-check the statistics."""

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
    baseline_values: tuple[float, ...] = ()
    candidate_values: tuple[float, ...] = ()


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
        elif self.kind == "max_increase_points":
            text = f"at most +{self.value:g} points"
        elif self.kind == "max_decrease_points":
            text = f"at most −{self.value:g} points"
        elif self.kind in ("max", "min"):
            text = f"{'≤' if self.kind == 'max' else '≥'} {_fmt(self.value, unit)}"
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


@dataclass(frozen=True, slots=True)
class Verdict:
    """The gate's answer: overall ``status`` (pass / warn / fail), every check (most severe
    first) and the notes."""

    status: str
    checks: tuple[Check, ...]
    notes: tuple[Note, ...]

    @property
    def findings(self) -> tuple[Check, ...]:
        """Counted checks that warn or fail, failures first."""
        return tuple(c for c in self.checks if c.counts and c.status in (FAIL, WARN))

    def counts(self) -> dict[str, int]:
        """Checks per status (waived ones under "waived" as well as their own status)."""
        out = {s: 0 for s in (PASS, WARN, FAIL, INCONCLUSIVE)}
        for c in self.checks:
            out[c.status] += 1
        out["waived"] = sum(1 for c in self.checks if not c.counts)
        return out


# --- evaluation -------------------------------------------------------------------------------
def evaluate(baseline: SideData, candidate: SideData, config: Config, *, today: _dt.date | None = None) -> Verdict:
    """Judge ``candidate`` against ``baseline`` with ``config`` (see the module docstring).

    ``today`` (UTC date) decides which waivers have expired; default: now.
    """
    today = today or _dt.datetime.now(_dt.timezone.utc).date()
    notes = _notes(baseline, candidate, config)
    hardware_differs = _gpus_differ(baseline, candidate)
    judge = _Judge(baseline, candidate, config, rank_pairs(baseline, candidate),
                   hardware_inconclusive=hardware_differs and config.hardware_mismatch == "inconclusive")
    checks = judge.relative() + judge.absolute() + judge.structural()
    checks, waiver_notes = _apply_waivers(checks, config.waivers, today)
    order = {s: i for i, s in enumerate(STATUSES)}
    family_order = {f: i for i, f in enumerate(FAMILIES)}
    checks = sorted(checks, key=lambda c: (not c.counts, order[c.status], family_order[c.family]))
    counted = {c.status for c in checks if c.counts}
    status = FAIL if FAIL in counted else WARN if WARN in counted else PASS
    return Verdict(status=status, checks=tuple(checks), notes=tuple(notes + waiver_notes))


class _Judge:
    """Builds the checks of one comparison; holds the two sides and the configuration."""

    def __init__(self, b: SideData, c: SideData, config: Config, pairs: list[tuple[int, int]],
                 hardware_inconclusive: bool) -> None:
        self.b, self.c, self.config, self.pairs = b, c, config, pairs
        self.hw = hardware_inconclusive
        self.stats = config.stats

    def groups(self, b_values: pd.Series, c_values: pd.Series, aggregation: str, worse: str) -> list[Group]:
        return aggregate(self.b.steps, self.c.steps, b_values, c_values, aggregation, worse, self.pairs)

    # --- relative ------------------------------------------------------------------------------
    def relative(self) -> list[Check]:
        out: list[Check] = []
        for name, cfg in self.config.relative.items():
            if not cfg.enabled:
                continue
            metric = METRICS[RELATIVE_METRICS[name]]
            if name == "kernel_time":
                out += self._keyed(name, cfg, metric, "op_steps", ("key",), self._top_kernels(cfg.top or 0))
            elif name == "collective_time":
                out += self._keyed(name, cfg, metric, "collectives_per_step", ("kind", "process_group"),
                                   self._collective_keys())
            elif len(self.b.steps) and len(self.c.steps):
                for g in self.groups(self.b.steps[metric.column], self.c.steps[metric.column], cfg.aggregation,
                                     metric.worse):
                    check = self._relative_check(name, cfg, metric, g)
                    out += [check] if check else []
        return out

    def _keyed(self, name: str, cfg: RelativeCheck, metric: Metric, table: str, key_columns: tuple[str, ...],
               keys: list[str]) -> list[Check]:
        if not keys:
            return []
        value = "dur_us"
        b_wide = keyed_samples(self.b, table, key_columns, value, keys)
        c_wide = keyed_samples(self.c, table, key_columns, value, keys)
        out = []
        for key in keys:  # a loop over the few checked keys
            for g in self.groups(pd.Series(b_wide[key].to_numpy()), pd.Series(c_wide[key].to_numpy()),
                                 cfg.aggregation, metric.worse):
                check = self._relative_check(name, cfg, metric, g, subject=key.strip())
                out += [check] if check else []
        return out

    def _top_kernels(self, top: int) -> list[str]:
        """The ``top`` kernels by mean time per sample on each side (their union, baseline first)."""
        keys: list[str] = []
        for side in (self.b, self.c):
            ops = side.ops
            if not len(ops) or not len(side.steps):
                continue
            kernels = ops[~ops["key"].astype(str).str.match(MEMORY_KEY)]
            ranked = kernels.groupby("key")["dur_us"].sum().sort_values(ascending=False, kind="stable")
            keys += [k for k in ranked.index[:top] if k not in keys]
        return keys

    def _collective_keys(self) -> list[str]:
        keys: list[str] = []
        for side in (self.b, self.c):
            if len(side.collectives):
                key = key_of(side.collectives, ("kind", "process_group"))
                keys += [k for k in dict.fromkeys(key) if k not in keys]
        return keys

    def _relative_check(self, name: str, cfg: RelativeCheck, metric: Metric, g: Group,
                        subject: str | None = None) -> Check | None:
        b, c = g.baseline, g.candidate
        if not len(b) and not len(c):
            return None  # the metric does not apply to either side (e.g. overlap without communication)
        threshold = Threshold(cfg.threshold_key, cfg.threshold)
        base = dict(family="relative", name=name, metric=metric, subject=subject, rank=g.rank,
                    aggregation=cfg.aggregation, level=cfg.level, threshold=threshold)
        if not len(b) or not len(c):
            side = "baseline" if not len(b) else "candidate"
            return _check(**base, status=INCONCLUSIVE, b=b, c=c, evidence=Evidence("none", len(b), len(c)),
                          message=f"{metric.label}: not measured in the {side} (nothing to compare)")
        if not np.any(b) and not np.any(c):
            return None  # zero on both sides: nothing of this kind runs (no communication, no copies)
        b_med, c_med = float(np.median(b)), float(np.median(c))
        delta = c_med - b_med
        worse_delta = delta if metric.worse == HIGHER else -delta
        if metric.unit == "pct":
            exceeds = worse_delta > cfg.threshold
            change = f"{delta:+.1f} points"
        else:
            floor = cfg.min_change_us
            if math.isfinite(g.baseline_step_us):
                floor = max(floor, cfg.min_change_step_pct / 100.0 * g.baseline_step_us)
            threshold = replace(threshold, floor_us=floor)
            base["threshold"] = threshold
            relative = 100.0 * worse_delta / abs(b_med) if b_med else (math.inf if worse_delta > 0 else 0.0)
            exceeds = worse_delta > floor and relative > cfg.threshold
            change = f"{100.0 * delta / abs(b_med):+.1f} %" if b_med else \
                f"{'+' if delta > 0 else ''}{_fmt(delta, metric.unit)} (from 0)"
        evidence = self._evidence(b, c, metric)
        values = f"{_fmt(b_med, metric.unit)} → {_fmt(c_med, metric.unit)}"
        enough = len(b) >= self.stats.min_samples and len(c) >= self.stats.min_samples
        text = f"{metric.label} {change} ({values}"
        if not exceeds:
            status, why = PASS, f"within {threshold.describe(metric.unit)}"
        elif self.hw:
            status, why = INCONCLUSIVE, "beyond the threshold, but the GPUs differ (hardware_mismatch = inconclusive)"
        elif not enough:
            status = INCONCLUSIVE
            why = (f"beyond {threshold.describe(metric.unit)}, but too few samples to tell from noise "
                   f"({len(b)} vs {len(c)}; at least {self.stats.min_samples} per side)")
        elif not evidence.significant:
            status = INCONCLUSIVE
            why = f"beyond {threshold.describe(metric.unit)}, but not significant ({_evidence_text(evidence)})"
        else:
            status = cfg.level
            why = f"beyond {threshold.describe(metric.unit)}; significant ({_evidence_text(evidence)})"
        return _check(**base, status=status, b=b, c=c, evidence=evidence, message=f"{text}): {why}")

    def _evidence(self, b: np.ndarray, c: np.ndarray, metric: Metric) -> Evidence:
        s = self.stats
        alternative = "greater" if metric.worse == HIGHER else "less"
        u = mann_whitney_u(c, b, alternative)
        statistic = "difference" if metric.unit == "pct" else "ratio"
        confidence = 100.0 * (1.0 - 2.0 * s.alpha)
        lo, hi = bootstrap_interval(c, b, statistic=statistic, confidence_pct=confidence,
                                    resamples=s.bootstrap_resamples, seed=s.seed)
        if not math.isfinite(lo) and statistic == "ratio":  # a baseline median of 0: no ratio, use the difference
            statistic = "difference"
            lo, hi = bootstrap_interval(c, b, statistic=statistic, confidence_pct=confidence,
                                        resamples=s.bootstrap_resamples, seed=s.seed)
        if s.test == "bootstrap":
            no_change = 1.0 if statistic == "ratio" else 0.0
            significant = bool(lo > no_change) if metric.worse == HIGHER else bool(hi < no_change)
        else:
            significant = bool(u.p_value < s.alpha)
        interval = (lo, hi) if math.isfinite(lo) else None
        return Evidence(test=s.test if s.test == "bootstrap" else "mann-whitney-u", baseline_samples=len(b),
                        candidate_samples=len(c), p_value=u.p_value if u.method != "none" else None, alpha=s.alpha,
                        method=u.method, interval=interval,
                        interval_of=f"{statistic} of medians (candidate {'/' if statistic == 'ratio' else '-'} "
                                    f"baseline)",
                        confidence_pct=confidence, significant=significant)

    # --- absolute ------------------------------------------------------------------------------
    def absolute(self) -> list[Check]:
        out: list[Check] = []
        if not len(self.c.steps):
            return out
        b_steps = self.b.steps if len(self.b.steps) else self.c.steps.iloc[0:0]
        for name, cfg in self.config.absolute.items():
            if not cfg.enabled:
                continue
            metric = METRICS[ABSOLUTE_METRICS[name]]
            for g in self.groups(b_steps[metric.column], self.c.steps[metric.column], cfg.aggregation,
                                 metric.worse):
                check = self._absolute_check(name, cfg, metric, g)
                out += [check] if check else []
        return out

    def _absolute_check(self, name: str, cfg: AbsoluteCheck, metric: Metric, g: Group) -> Check | None:
        b, c = g.baseline, g.candidate
        if not len(c):
            return None
        kind = "max" if cfg.max is not None else "min"
        threshold = Threshold(kind, cfg.limit)
        c_val = float(np.median(c))
        b_val = float(np.median(b)) if len(b) else math.nan

        def beyond(v: float) -> bool:
            return v > cfg.limit if kind == "max" else v < cfg.limit

        base = dict(family="absolute", name=name, metric=metric, subject=None, rank=g.rank,
                    aggregation=cfg.aggregation, level=cfg.level, threshold=threshold, b=b, c=c)
        text = f"{metric.label} {_fmt(c_val, metric.unit)} (limit {threshold.describe(metric.unit)}"
        text += f"; baseline {_fmt(b_val, metric.unit)})" if len(b) else ")"
        if not beyond(c_val):
            return _check(**base, status=PASS, evidence=Evidence("limit", len(b), len(c)), message=f"{text}: within")
        if cfg.only_new and len(b) and beyond(b_val):
            return _check(**base, status=PASS, evidence=Evidence("limit", len(b), len(c)),
                          message=f"{text}: beyond the limit, but already in the baseline (only_new)")
        if not len(b):
            if not len(self.b.steps):
                return _check(**base, status=INCONCLUSIVE, evidence=Evidence("limit", 0, len(c)),
                              message=f"{text}: beyond the limit; the baseline has no samples to tell if this is new")
            return _check(**base, status=cfg.level, evidence=Evidence("limit", 0, len(c)),
                          message=f"{text}: beyond the limit (not measured in the baseline)")
        evidence = self._evidence(b, c, metric)
        if len(b) < self.stats.min_samples or len(c) < self.stats.min_samples:
            status, why = INCONCLUSIVE, f"newly beyond the limit, but too few samples ({len(b)} vs {len(c)})"
        elif not evidence.significant:
            status = INCONCLUSIVE
            why = f"newly beyond the limit, but not significantly worse ({_evidence_text(evidence)})"
        else:
            status, why = cfg.level, f"newly beyond the limit; significantly worse ({_evidence_text(evidence)})"
        return _check(**base, status=status, evidence=evidence, message=f"{text}: {why}")

    # --- structural ----------------------------------------------------------------------------
    def structural(self) -> list[Check]:
        out: list[Check] = []
        if not len(self.b.steps) or not len(self.c.steps):
            return out
        per_step = self.b.has_steps and self.c.has_steps
        for name, cfg in self.config.structural.items():
            if not cfg.enabled:
                continue
            if name == "kernels":
                out += self._key_sets(name, cfg, "op_steps", ("key",), exclude_memory=True, calls=False)
            elif name == "collectives":
                out += self._key_sets(name, cfg, "collectives_per_step", ("kind", "process_group"), calls=True)
            elif name == "memcpy":
                out += self._key_sets(name, cfg, "op_steps", ("key",), only_memory=True, calls=False)
            columns = STRUCTURAL_COUNTS[name]
            for column in columns:
                metric = METRICS[column]
                subject = column if len(columns) > 1 else None
                for g in self.groups(self.b.steps[column], self.c.steps[column], cfg.aggregation, HIGHER):
                    out.append(self._count_check(name, cfg, metric, g, subject, per_step))
        return out

    def _count_check(self, name: str, cfg: StructuralCheck, metric: Metric, g: Group, subject: str | None,
                     per_step: bool, what: str | None = None) -> Check:
        b, c = g.baseline, g.candidate
        b_med = float(np.median(b)) if len(b) else 0.0
        c_med = float(np.median(c)) if len(c) else 0.0
        tolerance = max(cfg.tolerance, cfg.tolerance_pct / 100.0 * abs(b_med))
        delta = c_med - b_med
        base = dict(family="structural", name=name, metric=metric, subject=subject, rank=g.rank,
                    aggregation=cfg.aggregation, threshold=Threshold("max_change", tolerance), b=b, c=c,
                    evidence=Evidence("median count per step", len(b), len(c)))
        label = what or metric.label
        text = f"{label} per step {b_med:g} → {c_med:g}"
        if abs(delta) <= tolerance:
            return _check(**base, level=cfg.level, status=PASS, message=f"{text}: unchanged")
        if not per_step:
            return _check(**base, level=cfg.level, status=INCONCLUSIVE,
                          message=f"{text}: changed, but a side has no profiler steps, so the counts are per "
                                  f"trace and depend on how long each was recorded")
        level = cfg.level if delta > 0 else cfg.decrease_level
        return _check(**base, level=level, status=level, message=f"{text}: {'more' if delta > 0 else 'fewer'}")

    def _key_sets(self, name: str, cfg: StructuralCheck, table: str, key_columns: tuple[str, ...], *,
                  calls: bool, exclude_memory: bool = False, only_memory: bool = False) -> list[Check]:
        """Keys (kernels, copy kinds, collectives) present in one side's steps only, and, with
        ``calls``, keys whose calls per step changed. A key is present when it runs in at least
        half of the samples (median calls per step > 0), so one-off work (autotuning in a first
        step, logging every N steps) is no structural change."""
        keys = self._keys(table, key_columns)
        if exclude_memory:
            keys = [k for k in keys if not MEMORY_KEY.match(k)]
        if only_memory:
            keys = [k for k in keys if MEMORY_KEY.match(k)]
        metric = METRICS["kernels"] if name != "collectives" else Metric("count", "collective calls", "count", HIGHER)
        if not keys:
            return []
        b_wide = keyed_samples(self.b, table, key_columns, "count", keys)
        c_wide = keyed_samples(self.c, table, key_columns, "count", keys)
        group_ranks, b_med, c_med = self._group_medians(b_wide, c_wide, cfg.aggregation)
        tolerance = np.maximum(cfg.tolerance, cfg.tolerance_pct / 100.0 * b_med)
        flagged = ((b_med > 0) != (c_med > 0)) | (calls & (b_med > 0) & (np.abs(c_med - b_med) > tolerance))
        out: list[Check] = []
        row_of = {rank: i for i, rank in enumerate(group_ranks)}
        for j in np.flatnonzero(flagged.any(axis=0)):  # only the keys that changed somewhere
            key = keys[j]
            label = key.strip()
            for g in self.groups(pd.Series(b_wide[key].to_numpy()), pd.Series(c_wide[key].to_numpy()),
                                 cfg.aggregation, HIGHER):
                if not flagged[row_of[g.rank], j]:
                    continue
                bm = float(np.median(g.baseline)) if len(g.baseline) else 0.0
                cm = float(np.median(g.candidate)) if len(g.candidate) else 0.0
                if (bm > 0) != (cm > 0):
                    change = "added" if cm > 0 else "removed"
                    level = cfg.level if change == "added" else cfg.decrease_level
                    out.append(_check(
                        family="structural", name=name, metric=metric, subject=f"{change}: {label}", rank=g.rank,
                        aggregation=cfg.aggregation, level=level, status=level,
                        threshold=Threshold("max_change", 0.0), b=g.baseline, c=g.candidate,
                        evidence=Evidence("median count per step", len(g.baseline), len(g.candidate)),
                        message=f"{label}: {change} ({bm:g} → {cm:g} calls per step)"))
                else:
                    out.append(self._count_check(name, cfg, metric, g, f"calls: {label}", per_step=True,
                                                 what=f"{label} calls"))
        noun = {"kernels": "kernels", "memcpy": "copy kinds", "collectives": "collectives"}[name]
        for i, rank in enumerate(group_ranks):  # one passing summary per rank where nothing changed
            if not flagged[i].any():
                out.append(_check(
                    family="structural", name=name, metric=metric, subject=None, rank=rank,
                    aggregation=cfg.aggregation, level=cfg.level, status=PASS, threshold=Threshold("max_change", 0.0),
                    b=np.empty(0), c=np.empty(0), evidence=Evidence("median count per step", 0, 0),
                    message=f"no {noun} added or removed ({len(keys)} compared)"))
        return out

    def _group_medians(self, b_wide: pd.DataFrame, c_wide: pd.DataFrame,
                       aggregation: str) -> tuple[list[int | None], np.ndarray, np.ndarray]:
        """Median per step of every key column for each group :meth:`groups` would make, at once:
        (group ranks, baseline medians, candidate medians), arrays of shape groups x keys."""
        if aggregation == "each" and self.pairs:
            b = b_wide.groupby(level="rank").median().reindex([x for x, _ in self.pairs])
            c = c_wide.groupby(level="rank").median().reindex([y for _, y in self.pairs])
            return [y for _, y in self.pairs], b.fillna(0.0).to_numpy(), c.fillna(0.0).to_numpy()
        how = "max" if aggregation == "worst" else "mean"
        b = b_wide.groupby(level="step").agg(how).median() if len(b_wide) else b_wide.sum()
        c = c_wide.groupby(level="step").agg(how).median() if len(c_wide) else c_wide.sum()
        return [None], b.fillna(0.0).to_numpy()[None, :], c.fillna(0.0).to_numpy()[None, :]

    def _keys(self, table: str, key_columns: tuple[str, ...]) -> list[str]:
        keys: list[str] = []
        for side in (self.b, self.c):
            frame = side.ops if table == "op_steps" else side.collectives
            if not len(frame):
                continue
            keys += [k for k in dict.fromkeys(key_of(frame, key_columns)) if k not in keys]
        return keys


def _check(*, family: str, name: str, metric: Metric, subject: str | None, rank: int | None, aggregation: str,
           level: str, status: str, threshold: Threshold, b: np.ndarray, c: np.ndarray, evidence: Evidence,
           message: str) -> Check:
    b_val = float(np.median(b)) if len(b) else None
    c_val = float(np.median(c)) if len(c) else None
    delta = c_val - b_val if b_val is not None and c_val is not None else None
    delta_pct = 100.0 * delta / abs(b_val) if delta is not None and b_val else None
    evidence = replace(evidence, baseline_values=tuple(float(v) for v in b),
                       candidate_values=tuple(float(v) for v in c))
    return Check(id=check_id(family, name, subject, rank), family=family, name=name, metric=metric.column,
                 label=metric.label, unit=metric.unit, worse=metric.worse, subject=subject, rank=rank,
                 aggregation=aggregation, level=level, status=status, baseline_value=b_val, candidate_value=c_val,
                 delta=delta, delta_pct=delta_pct, threshold=threshold, evidence=evidence,
                 message=message if rank is None else f"rank {rank}: {message}")


def check_id(family: str, name: str, subject: str | None = None, rank: int | None = None) -> str:
    """``family.name[subject]@rankN`` (see the module docstring)."""
    out = f"{family}.{name}"
    if subject:
        out += f"[{subject}]"
    if rank is not None:
        out += f"@rank{rank}"
    return out


# --- waivers and notes --------------------------------------------------------------------------
def waiver_matches(pattern: str, check: Check) -> bool:
    """Whether a waiver's ``check`` pattern covers ``check``: ``*`` matches any text, ``?`` one
    character, everything else literally (``[`` included); a pattern without ``@rank`` covers
    every rank."""
    regex = re.compile("".join(".*" if ch == "*" else "." if ch == "?" else re.escape(ch) for ch in pattern) + r"\Z")
    without_rank = check_id(check.family, check.name, check.subject)
    return bool(regex.match(check.id) or ("@rank" not in pattern and regex.match(without_rank)))


def _apply_waivers(checks: list[Check], waivers: tuple[Waiver, ...], today: _dt.date) -> tuple[list[Check], list[Note]]:
    notes = []
    active = []
    for w in waivers:
        if w.expires is not None and w.expires < today:
            notes.append(Note("waiver", f"waiver for {w.check!r} expired on {w.expires.isoformat()} "
                                        f"(reason: {w.reason}); it no longer applies"))
        else:
            active.append(w)
    out, used = [], set()
    for check in checks:
        match = next((w for w in active if waiver_matches(w.check, check)), None)
        if match is not None:
            used.add(match.check)
            check = replace(check, waiver=match)
        out.append(check)
    for w in active:
        if w.check not in used:
            notes.append(Note("waiver", f"waiver for {w.check!r} matches no check (reason: {w.reason})"))
    return out, notes


def _gpus_differ(b: SideData, c: SideData) -> bool:
    bg = {g for g in b.gpus.values() if g}
    cg = {g for g in c.gpus.values() if g}
    return bool(bg and cg and bg != cg)


def _notes(b: SideData, c: SideData, config: Config) -> list[Note]:
    notes = []
    if _gpus_differ(b, c):
        bg = ", ".join(sorted({g for g in b.gpus.values() if g}))
        cg = ", ".join(sorted({g for g in c.gpus.values() if g}))
        effect = ("relative checks beyond their thresholds are inconclusive"
                  if config.hardware_mismatch == "inconclusive" else "times are compared as they are")
        notes.append(Note("hardware", f"baseline recorded on {bg}, candidate on {cg}: {effect}"))
    if set(b.ranks) != set(c.ranks):
        only_b = sorted(set(b.ranks) - set(c.ranks))
        only_c = sorted(set(c.ranks) - set(b.ranks))
        text = f"ranks differ: baseline {len(b.ranks)} rank(s), candidate {len(c.ranks)}"
        if only_b:
            text += f"; only in the baseline: {_ranks(only_b)}"
        if only_c:
            text += f"; only in the candidate: {_ranks(only_c)}"
        pairs = rank_pairs(b, c)
        if pairs and pairs[0][0] != pairs[0][1]:
            text += "; no rank in common, so ranks are compared in order: " + ", ".join(
                f"rank {x} with rank {y}" for x, y in pairs[:8]) + (" …" if len(pairs) > 8 else "")
        elif not pairs:
            text += "; per-rank checks compare the mean over ranks instead"
        notes.append(Note("ranks", text))
    if b.world_size and c.world_size and b.world_size != c.world_size:
        notes.append(Note("ranks", f"world size differs: {b.world_size} in the baseline, "
                                   f"{c.world_size} in the candidate"))
    for key in sorted(set(b.versions or {}) & set(c.versions or {})):
        if b.versions[key] != c.versions[key]:
            notes.append(Note("versions", f"{key} differs: {b.versions[key]} → {c.versions[key]}"))
    for side, data in (("baseline", b), ("candidate", c)):
        if not len(data.steps):
            notes.append(Note("steps", f"the {side} has no samples (no ranks or no events)"))
        elif not data.has_steps:
            notes.append(Note("steps", f"the {side} has no ProfilerStep events: each rank is one sample (the whole "
                                       f"trace), so relative checks are inconclusive and counts are not per step"))
        elif "gpu_busy_us" in data.steps and data.steps["gpu_busy_us"].isna().all():
            notes.append(Note("steps", f"the {side} has no GPU activity in its steps"))
        if data.warmup_steps:
            notes.append(Note("steps", f"{side}: dropped warm-up step(s) {', '.join(map(str, data.warmup_steps))} "
                                       f"(more than {config.steps.warmup_threshold_pct:g} % slower than the later "
                                       f"steps; steps.auto_warmup)"))
        if data.skipped_steps:
            notes.append(Note("steps", f"{side}: dropped the first {config.steps.skip_first} step(s) of each rank "
                                       f"(steps.skip_first)"))
        n = _samples_per_rank(data)
        if data.has_steps and n < config.stats.min_samples:
            notes.append(Note("steps", f"the {side} has {n} step(s) per rank after dropping the last and warm-up "
                                       f"steps; relative checks need {config.stats.min_samples} to be conclusive"))
    return notes


def _samples_per_rank(side: SideData) -> int:
    return int(side.steps.groupby("rank").size().min()) if len(side.steps) else 0


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:16])) + (f" and {len(ranks) - 16} more" if len(ranks) > 16 else "")


def _fmt(value: float, unit: str) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if unit == "us":
        return format_us(value)
    if unit == "pct":
        return f"{value:.1f} %"
    return f"{value:g}"


def _evidence_text(e: Evidence) -> str:
    if e.test == "bootstrap" and e.interval:
        return (f"{e.confidence_pct:g} % bootstrap interval of the {e.interval_of.split(' (')[0]} "
                f"[{e.interval[0]:.3g}, {e.interval[1]:.3g}], {e.baseline_samples} vs {e.candidate_samples} samples")
    p = "n/a" if e.p_value is None else f"{e.p_value:.3g}"
    return f"Mann-Whitney U p = {p}, α = {e.alpha:g}, {e.baseline_samples} vs {e.candidate_samples} samples"


__all__ = ["evaluate", "Verdict", "Check", "Evidence", "Threshold", "Note", "check_id", "waiver_matches",
           "PASS", "WARN", "FAIL", "INCONCLUSIVE", "STATUSES"]
