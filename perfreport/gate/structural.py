"""Structural checks, free of noise: kernels, copy kinds or collectives added or removed, and
counts per step (launches, copies, calls) that changed beyond their tolerance. A kernel of a
variant family that runs on both sides (cuDNN's per-process convolution pick) is no structural
change: :mod:`.variants` and the relative checks judge its family's time instead."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..config import StructuralCheck
from .checks import INCONCLUSIVE, PASS, Check, Evidence, Threshold, make_check
from .comparison import MEMORY_KEY, Comparison
from .keyed import keyed_samples
from .metrics import HIGHER, METRICS, STRUCTURAL_COUNTS, Group, Metric
from .variants import variant_mask


def structural_checks(cmp: Comparison) -> list[Check]:
    """The enabled ``[structural]`` checks: work added, removed, or run more or fewer times per step."""
    out: list[Check] = []
    if not len(cmp.b.steps) or not len(cmp.c.steps):
        return out
    per_step = cmp.b.has_steps and cmp.c.has_steps
    for name, cfg in cmp.config.structural.items():
        if not cfg.enabled:
            continue
        if name == "kernels":
            out += _key_sets(cmp, name, cfg, "op_steps", ("key",), exclude_memory=True, calls=False)
        elif name == "collectives":
            out += _key_sets(cmp, name, cfg, "collectives_per_step", ("kind", "process_group"), calls=True)
        elif name == "memcpy":
            out += _key_sets(cmp, name, cfg, "op_steps", ("key",), only_memory=True, calls=False)
        columns = STRUCTURAL_COUNTS[name]
        for column in columns:
            metric = METRICS[column]
            subject = column if len(columns) > 1 else None
            groups = cmp.groups(cmp.b.steps[column], cmp.c.steps[column], cfg.aggregation, HIGHER)
            allowances = _variant_allowances(cmp, cfg, len(groups)) if column == "launches" else [0.0] * len(groups)
            for g, allowance in zip(groups, allowances):
                out.append(_count_check(name, cfg, metric, g, subject, per_step, allowance=allowance))
    return out


def _variant_allowances(cmp: Comparison, cfg: StructuralCheck, n: int) -> list[float]:
    """Per group: how much the launches of kernel families cuDNN swapped (:mod:`.variants`)
    changed per step - another pick may take a kernel more or less (split-K)."""
    keys = [k for swap in cmp.kernel_swaps.values() for k in swap.keys]
    if not keys:
        return [0.0] * n
    b = keyed_samples(cmp.b, "op_steps", ("key",), "count", keys).sum(axis=1).to_numpy()
    c = keyed_samples(cmp.c, "op_steps", ("key",), "count", keys).sum(axis=1).to_numpy()
    groups = cmp.groups(pd.Series(b), pd.Series(c), cfg.aggregation, HIGHER)
    return [abs((float(np.median(g.candidate)) if len(g.candidate) else 0.0)
                - (float(np.median(g.baseline)) if len(g.baseline) else 0.0)) for g in groups]


def _count_check(name: str, cfg: StructuralCheck, metric: Metric, g: Group, subject: str | None, per_step: bool,
                 what: str | None = None, allowance: float = 0.0) -> Check:
    """The check of one count per step in one group: unchanged within the tolerance (plus the
    ``allowance`` of swapped kernel variants), or more / fewer."""
    b, c = g.baseline, g.candidate
    b_med = float(np.median(b)) if len(b) else 0.0
    c_med = float(np.median(c)) if len(c) else 0.0
    tolerance = max(cfg.tolerance, cfg.tolerance_pct / 100.0 * abs(b_med)) + allowance
    delta = c_med - b_med
    base = dict(family="structural", name=name, metric=metric, subject=subject, rank=g.rank,
                aggregation=cfg.aggregation, threshold=Threshold("max_change", tolerance), b=b, c=c,
                evidence=Evidence("median count per step", len(b), len(c)))
    label = what or metric.label
    text = f"{label} per step {b_med:g} → {c_med:g}"
    if abs(delta) <= tolerance:
        why = f" (cuDNN's other kernels account for {allowance:g})" if allowance and abs(delta) > tolerance - allowance \
            else ""
        return make_check(**base, level=cfg.level, status=PASS, message=f"{text}: unchanged{why}")
    if not per_step:
        return make_check(**base, level=cfg.level, status=INCONCLUSIVE,
                          message=f"{text}: changed, but a side has no profiler steps, so the counts are per "
                                  f"trace and depend on how long each was recorded")
    level = cfg.level if delta > 0 else cfg.decrease_level
    return make_check(**base, level=level, status=level, message=f"{text}: {'more' if delta > 0 else 'fewer'}")


def _key_sets(cmp: Comparison, name: str, cfg: StructuralCheck, table: str, key_columns: tuple[str, ...], *,
              calls: bool, exclude_memory: bool = False, only_memory: bool = False) -> list[Check]:
    """Keys (kernels, copy kinds, collectives) present in one side's steps only, and, with
    ``calls``, keys whose calls per step changed. A key is present when it runs in at least
    half of the samples (median calls per step > 0), so one-off work (autotuning in a first
    step, logging every N steps) is no structural change."""
    keys = cmp.keys(table, key_columns)
    if exclude_memory:
        keys = [k for k in keys if not MEMORY_KEY.match(k)]
    if only_memory:
        keys = [k for k in keys if MEMORY_KEY.match(k)]
    metric = METRICS["kernels"] if name != "collectives" else Metric("count", "collective calls", "count", HIGHER)
    if not keys:
        return []
    b_wide = keyed_samples(cmp.b, table, key_columns, "count", keys)
    c_wide = keyed_samples(cmp.c, table, key_columns, "count", keys)
    group_ranks, b_med, c_med = _group_medians(cmp, b_wide, c_wide, cfg.aggregation)
    tolerance = np.maximum(cfg.tolerance, cfg.tolerance_pct / 100.0 * b_med)
    flagged = ((b_med > 0) != (c_med > 0)) | (calls & (b_med > 0) & (np.abs(c_med - b_med) > tolerance))
    if name == "kernels":  # another kernel of a family that runs on both sides: judged by its time (.variants)
        flagged &= ~variant_mask(keys, b_med, c_med)
    out: list[Check] = []
    row_of = {rank: i for i, rank in enumerate(group_ranks)}
    for j in np.flatnonzero(flagged.any(axis=0)):  # only the keys that changed somewhere
        key = keys[j]
        label = key.strip()
        for g in cmp.groups(pd.Series(b_wide[key].to_numpy()), pd.Series(c_wide[key].to_numpy()),
                            cfg.aggregation, HIGHER):
            if not flagged[row_of[g.rank], j]:
                continue
            bm = float(np.median(g.baseline)) if len(g.baseline) else 0.0
            cm = float(np.median(g.candidate)) if len(g.candidate) else 0.0
            if (bm > 0) != (cm > 0):
                change = "added" if cm > 0 else "removed"
                level = cfg.level if change == "added" else cfg.decrease_level
                out.append(make_check(
                    family="structural", name=name, metric=metric, subject=f"{change}: {label}", rank=g.rank,
                    aggregation=cfg.aggregation, level=level, status=level,
                    threshold=Threshold("max_change", 0.0), b=g.baseline, c=g.candidate,
                    evidence=Evidence("median count per step", len(g.baseline), len(g.candidate)),
                    message=f"{label}: {change} ({bm:g} → {cm:g} calls per step)"))
            else:
                out.append(_count_check(name, cfg, metric, g, f"calls: {label}", per_step=True,
                                        what=f"{label} calls"))
    noun = {"kernels": "kernels", "memcpy": "copy kinds", "collectives": "collectives"}[name]
    for i, rank in enumerate(group_ranks):  # one passing summary per rank where nothing changed
        if not flagged[i].any():
            out.append(make_check(
                family="structural", name=name, metric=metric, subject=None, rank=rank,
                aggregation=cfg.aggregation, level=cfg.level, status=PASS, threshold=Threshold("max_change", 0.0),
                b=np.empty(0), c=np.empty(0), evidence=Evidence("median count per step", 0, 0),
                message=f"no {noun} added or removed ({len(keys)} compared)"))
    return out


def _group_medians(cmp: Comparison, b_wide: pd.DataFrame, c_wide: pd.DataFrame,
                   aggregation: str) -> tuple[list[int | None], np.ndarray, np.ndarray]:
    """Median per step of every key column for each group :meth:`Comparison.groups` would make,
    at once: (group ranks, baseline medians, candidate medians), arrays of shape groups x keys."""
    if aggregation == "each" and cmp.pairs:
        b = b_wide.groupby(level="rank").median().reindex([x for x, _ in cmp.pairs])
        c = c_wide.groupby(level="rank").median().reindex([y for _, y in cmp.pairs])
        return [y for _, y in cmp.pairs], b.fillna(0.0).to_numpy(), c.fillna(0.0).to_numpy()
    how = "max" if aggregation == "worst" else "mean"
    b = b_wide.groupby(level=["run", "step"]).agg(how).median() if len(b_wide) else b_wide.sum()
    c = c_wide.groupby(level=["run", "step"]).agg(how).median() if len(c_wide) else c_wide.sum()
    return [None], b.fillna(0.0).to_numpy()[None, :], c.fillna(0.0).to_numpy()[None, :]
