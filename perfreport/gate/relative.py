"""Relative checks: did a time or percentage get worse than in the baseline, beyond its
threshold (and floor) and beyond noise?"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from ..config import RelativeCheck
from .checks import INCONCLUSIVE, PASS, Check, Evidence, Threshold, evidence_text, format_value, make_check
from .comparison import MEMORY_KEY, Comparison
from .metrics import HIGHER, METRICS, RELATIVE_METRICS, Group, Metric, keyed_samples


def relative_checks(cmp: Comparison) -> list[Check]:
    """The enabled ``[relative]`` checks: candidate against baseline, beyond noise."""
    out: list[Check] = []
    for name, cfg in cmp.config.relative.items():
        if not cfg.enabled:
            continue
        metric = METRICS[RELATIVE_METRICS[name]]
        if name == "kernel_time":
            out += _keyed(cmp, name, cfg, metric, "op_steps", ("key",), _top_kernels(cmp, cfg.top or 0))
        elif name == "collective_time":
            out += _keyed(cmp, name, cfg, metric, "collectives_per_step", ("kind", "process_group"),
                          cmp.keys("collectives_per_step", ("kind", "process_group")))
        elif len(cmp.b.steps) and len(cmp.c.steps):
            for g in cmp.groups(cmp.b.steps[metric.column], cmp.c.steps[metric.column], cfg.aggregation,
                                metric.worse):
                check = _relative_check(cmp, name, cfg, metric, g)
                out += [check] if check else []
    return out


def _keyed(cmp: Comparison, name: str, cfg: RelativeCheck, metric: Metric, table: str,
           key_columns: tuple[str, ...], keys: list[str]) -> list[Check]:
    """Relative checks of a per-key time (kernels, collectives), one per key and group."""
    if not keys:
        return []
    value = "dur_us"
    b_wide = keyed_samples(cmp.b, table, key_columns, value, keys)
    c_wide = keyed_samples(cmp.c, table, key_columns, value, keys)
    out = []
    for key in keys:  # a loop over the few checked keys
        for g in cmp.groups(pd.Series(b_wide[key].to_numpy()), pd.Series(c_wide[key].to_numpy()),
                            cfg.aggregation, metric.worse):
            check = _relative_check(cmp, name, cfg, metric, g, subject=key.strip())
            out += [check] if check else []
    return out


def _top_kernels(cmp: Comparison, top: int) -> list[str]:
    """The ``top`` kernels by mean time per sample on each side (their union, baseline first)."""
    keys: list[str] = []
    for side in (cmp.b, cmp.c):
        ops = side.ops
        if not len(ops) or not len(side.steps):
            continue
        kernels = ops[~ops["key"].astype(str).str.match(MEMORY_KEY)]
        ranked = kernels.groupby("key")["dur_us"].sum().sort_values(ascending=False, kind="stable")
        keys += [k for k in ranked.index[:top] if k not in keys]
    return keys


def _relative_check(cmp: Comparison, name: str, cfg: RelativeCheck, metric: Metric, g: Group,
                    subject: str | None = None) -> Check | None:
    """The check of one group: the median change against the threshold (and floor), then its
    significance; None where the metric applies to neither side."""
    b, c = g.baseline, g.candidate
    if not len(b) and not len(c):
        return None  # the metric does not apply to either side (e.g. overlap without communication)
    threshold = Threshold(cfg.threshold_key, cfg.threshold)
    base = dict(family="relative", name=name, metric=metric, subject=subject, rank=g.rank,
                aggregation=cfg.aggregation, level=cfg.level, threshold=threshold)
    if not len(b) or not len(c):
        side = "baseline" if not len(b) else "candidate"
        return make_check(**base, status=INCONCLUSIVE, b=b, c=c, evidence=Evidence("none", len(b), len(c)),
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
            f"{'+' if delta > 0 else ''}{format_value(delta, metric.unit)} (from 0)"
    evidence = cmp.evidence(b, c, metric)
    values = f"{format_value(b_med, metric.unit)} → {format_value(c_med, metric.unit)}"
    enough = len(b) >= cmp.stats.min_samples and len(c) >= cmp.stats.min_samples
    text = f"{metric.label} {change} ({values}"
    if not exceeds:
        status, why = PASS, f"within {threshold.describe(metric.unit)}"
    elif cmp.hw:
        status, why = INCONCLUSIVE, "beyond the threshold, but the GPUs differ (hardware_mismatch = inconclusive)"
    elif not enough:
        status = INCONCLUSIVE
        why = (f"beyond {threshold.describe(metric.unit)}, but too few samples to tell from noise "
               f"({len(b)} vs {len(c)}; at least {cmp.stats.min_samples} per side)")
    elif not evidence.significant:
        status = INCONCLUSIVE
        why = f"beyond {threshold.describe(metric.unit)}, but not significant ({evidence_text(evidence)})"
    else:
        status = cfg.level
        why = f"beyond {threshold.describe(metric.unit)}; significant ({evidence_text(evidence)})"
    return make_check(**base, status=status, b=b, c=c, evidence=evidence, message=f"{text}): {why}")
