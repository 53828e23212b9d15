"""Absolute checks: is the candidate within a fixed limit, and if not, is that new?"""

from __future__ import annotations

import math

import numpy as np

from ..config import AbsoluteCheck
from ..units import format_value
from .checks import INCONCLUSIVE, PASS, Check, Evidence, Threshold, evidence_text, make_check
from .comparison import Comparison
from .metrics import ABSOLUTE_METRICS, METRICS, Group, Metric


def absolute_checks(cmp: Comparison) -> list[Check]:
    """The enabled ``[absolute]`` checks: the candidate against a fixed limit."""
    out: list[Check] = []
    if not len(cmp.c.steps):
        return out
    b_steps = cmp.b.steps if len(cmp.b.steps) else cmp.c.steps.iloc[0:0]
    for name, cfg in cmp.config.absolute.items():
        if not cfg.enabled:
            continue
        metric = METRICS[ABSOLUTE_METRICS[name]]
        for g in cmp.groups(b_steps[metric.column], cmp.c.steps[metric.column], cfg.aggregation,
                            metric.worse):
            check = _absolute_check(cmp, name, cfg, metric, g)
            out += [check] if check else []
    return out


def _absolute_check(cmp: Comparison, name: str, cfg: AbsoluteCheck, metric: Metric, g: Group) -> Check | None:
    """The check of one group: within the limit, already beyond it in the baseline (``only_new``),
    or newly beyond it (significantly worse than the baseline where there is one)."""
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
    text = f"{metric.label} {format_value(c_val, metric.unit)} (limit {threshold.describe(metric.unit)}"
    text += f"; baseline {format_value(b_val, metric.unit)})" if len(b) else ")"
    if not beyond(c_val):
        return make_check(**base, status=PASS, evidence=Evidence("limit", len(b), len(c)), message=f"{text}: within")
    if cfg.only_new and len(b) and beyond(b_val):
        return make_check(**base, status=PASS, evidence=Evidence("limit", len(b), len(c)),
                          message=f"{text}: beyond the limit, but already in the baseline (only_new)")
    if not len(b):
        if not len(cmp.b.steps):
            return make_check(**base, status=INCONCLUSIVE, evidence=Evidence("limit", 0, len(c)),
                              message=f"{text}: beyond the limit; the baseline has no samples to tell if this is new")
        return make_check(**base, status=cfg.level, evidence=Evidence("limit", 0, len(c)),
                          message=f"{text}: beyond the limit (not measured in the baseline)")
    evidence = cmp.evidence(b, c, metric)
    if len(b) < cmp.stats.min_samples or len(c) < cmp.stats.min_samples:
        status, why = INCONCLUSIVE, f"newly beyond the limit, but too few samples ({len(b)} vs {len(c)})"
    elif not evidence.significant:
        status = INCONCLUSIVE
        why = f"newly beyond the limit, but not significantly worse ({evidence_text(evidence)})"
    else:
        status, why = cfg.level, f"newly beyond the limit; significantly worse ({evidence_text(evidence)})"
    return make_check(**base, status=status, evidence=evidence, message=f"{text}: {why}")
