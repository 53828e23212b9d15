"""Relative checks: did a time or percentage get worse than in the baseline, beyond its
threshold (and floor) and beyond noise?

A change is a finding only when it is (1) worse than the threshold and the floor, (2)
significant, and (3) at least ``stats.noise_widths`` noise widths wide, where the noise comes
from the data (:mod:`perfreport.gate.noise`): between steps of one run, between runs where a
side has several, or - when a side has fewer than ``stats.min_samples`` steps - between matched
GPU op calls (kernel time, compute, communication, copies, GPU busy) or between (rank, step)
samples pooled over ranks (``mean`` checks). Without any of these it is ``inconclusive``.

Without between-run information (one run per side), a timing finding whose only evidence is
host-side wait (:mod:`.hostwait`) is lowered to ``stats.host_wait_level``.

No silent pass: a change beyond its threshold that the noise does not let the check prove
(not significant, within the noise widths, too few samples) is a *possible regression* at
``stats.inconclusive_level`` (warn), never above the check's own level, with what would decide
it (:func:`_to_decide`). Every check's evidence carries the smallest change it could have
detected (:func:`_min_detectable`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..config import RelativeCheck
from ..model import COLLECTIVE, COMPUTATION, MEMORY, sorted_unique
from ..units import format_value
from .checks import (FAIL, INCONCLUSIVE, PASS, WARN, Check, Evidence, Note, Threshold, evidence_text,
                     make_check)
from .comparison import MEMORY_KEY, Comparison
from .hostwait import HOST_WAIT_METRICS

IDLE_METRICS = ("idle_us", "idle_pct")
"""GPU idle inside the step's GPU window: lowered to warn when the step itself got faster."""
from .keyed import keyed_samples, sorted_keys
from .metrics import HIGHER, METRICS, RELATIVE_METRICS, Group, Metric
from .noise import run_noise, step_noise, t_quantile, z_quantile
from .stats import smallest_p_value

FINE_SAMPLES = {
    "compute_us": ("kernel invocation", COMPUTATION),
    "comm_us": ("collective call", COLLECTIVE),
    "memory_us": ("copy", MEMORY),
    "gpu_busy_us": ("GPU op call", None),
}
"""Metric -> (sample kind, kernel class) of the matched calls judged when a side has too few steps."""


def relative_checks(cmp: Comparison) -> list[Check]:
    """The enabled ``[relative]`` checks: candidate against baseline, beyond noise."""
    out: list[Check] = []
    for name, cfg in cmp.config.relative.items():
        if not cfg.enabled:
            continue
        metric = METRICS[RELATIVE_METRICS[name]]
        if name == "kernel_time":
            swapped = {k for swap in cmp.kernel_swaps.values() for k in swap.keys}
            out += _keyed(cmp, name, cfg, metric, "op_steps", ("key",),
                          [k for k in _top_kernels(cmp, cfg.top or 0) if k not in swapped])
            out += _variant_checks(cmp, name, cfg, metric)
        elif name == "collective_time":
            out += _keyed(cmp, name, cfg, metric, "collectives_per_step", ("kind", "process_group"),
                          cmp.keys("collectives_per_step", ("kind", "process_group")))
        elif len(cmp.b.steps) and len(cmp.c.steps):
            for g in cmp.groups(cmp.b.steps[metric.column], cmp.c.steps[metric.column], cfg.aggregation,
                                metric.worse):
                if cfg.aggregation == "mean" and _too_few(cmp, g) and g.rank is None:
                    g = cmp.pooled(metric.column)
                fine = FINE_SAMPLES.get(metric.column)
                check = _relative_check(cmp, name, cfg, metric, g,
                                        fine=None if fine is None else (fine[0], dict(cls=fine[1])))
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
            fine = ("kernel invocation", dict(key=key.strip())) if table == "op_steps" else \
                ("collective call", dict(key=key.strip(), cls=COLLECTIVE))
            check = _relative_check(cmp, name, cfg, metric, g, subject=key.strip(), fine=fine)
            out += [check] if check else []
    return out


def _variant_checks(cmp: Comparison, name: str, cfg: RelativeCheck, metric: Metric) -> list[Check]:
    """The GPU time per step of each kernel family whose kernels changed while it ran on both
    sides (:mod:`.variants`): unchanged within noise is a note, moved is the family's timing
    finding naming the kernels that left and came."""
    out = []
    for swap in cmp.kernel_swaps.values():  # a loop over the few swapped families
        b = keyed_samples(cmp.b, "op_steps", ("key",), "dur_us", list(swap.keys)).sum(axis=1).to_numpy()
        c = keyed_samples(cmp.c, "op_steps", ("key",), "dur_us", list(swap.keys)).sum(axis=1).to_numpy()
        library = swap.family.split(" ", 1)[0]
        for g in cmp.groups(pd.Series(b), pd.Series(c), cfg.aggregation, metric.worse):
            check = _relative_check(cmp, name, cfg, metric, g, subject=swap.family)
            if check is None:
                continue
            picked = f"{library} picked {swap.picked()}"
            if check.status == PASS:
                where = f" on rank {g.rank}" if g.rank is not None else ""
                kind = swap.family[len(library) + 1:]
                values = f"{format_value(check.baseline_value, 'us')} → {format_value(check.candidate_value, 'us')}"
                change = f", {check.delta_pct:+.1f} %" if check.delta_pct is not None else ""
                cmp.notes.append(Note("kernels", f"{library} picked other {kind} kernels{where}: no time change "
                                                 f"({values} per step{change}, within its threshold or noise; "
                                                 f"{len(swap.removed)} kernel(s) left, {len(swap.added)} came)"))
            out.append(replace(check, message=f"{check.message}; {picked}"))
    return out


def _top_kernels(cmp: Comparison, top: int) -> list[str]:
    """The ``top`` kernels by mean time per sample on each side (their union, baseline first)."""
    keys: list[str] = []
    for side in (cmp.b, cmp.c):
        ops = side.ops
        if not len(ops) or not len(side.steps):
            continue
        # a row per (op, step): each key matched once, the rows grouped by the keys' sorted
        # positions (pandas' sums over the rows in order, as grouping by the text; no missing key)
        key, distinct = sorted_keys(side, "op_steps", ("key",))
        kernel = np.array([MEMORY_KEY.match(k) is None for k in distinct.tolist()] + [False], dtype=bool)
        rows = kernel[key]  # (-1: the appended False)
        sums = pd.Series(ops["dur_us"].to_numpy()[rows]).groupby(key[rows]).sum()
        ranked = pd.Series(sums.to_numpy(), index=pd.Index(distinct[sums.index.to_numpy()], dtype=object)) \
            .sort_values(ascending=False, kind="stable")
        keys += [k for k in ranked.index[:top] if k not in keys]
    return keys


def _runs(runs: np.ndarray | None) -> int:
    return int(len(sorted_unique(runs))) if runs is not None and len(runs) else 1


def _too_few(cmp: Comparison, g: Group) -> bool:
    return min(len(g.baseline), len(g.candidate)) < cmp.stats.min_samples


@dataclass(frozen=True, slots=True)
class _Judged:
    """What one group's samples say: the two central values, the noise width of their
    difference and the change in noise widths, the evidence, whether it can decide, and the
    test's critical value in noise widths (inf: no change could be significant)."""

    baseline: float
    candidate: float
    width: float
    widths: float
    evidence: Evidence
    enough: bool
    critical: float


def _judge(cmp: Comparison, metric: Metric, g: Group, fine: tuple[str, dict] | None) -> _Judged:
    """The noise and evidence of one group, at the level where its samples are independent:
    runs (≥ 2 on a side; a one-run side borrows the other side's run-to-run spread), steps
    (one run per side: the drift between runs is unknown), or matched calls when the steps are
    too few."""
    s = cmp.stats
    b, c = g.baseline, g.candidate
    b_runs, c_runs = _runs(g.baseline_runs), _runs(g.candidate_runs)
    if max(b_runs, c_runs) >= 2:
        noise = run_noise(b, _or_zero(g.baseline_runs, b), c, _or_zero(g.candidate_runs, c), metric.worse == HIGHER)
        evidence = Evidence("t-test on run medians", len(b), len(c), p_value=noise.p_value, alpha=s.alpha,
                            method=f"{noise.df} df", significant=bool(noise.p_value < s.alpha), sample_kind="run",
                            between_run_sd=noise.between_run_sd,
                            drift="measured" if min(b_runs, c_runs) >= 2 else "borrowed")
        enough = len(b) >= 2 and len(c) >= 2
        critical = t_quantile(s.alpha, noise.df or 1)
    else:
        noise = step_noise(b, c)
        evidence = replace(cmp.evidence(b, c, metric), sample_kind=g.sample_kind, drift="unknown")
        enough = not _too_few(cmp, g)
        critical = z_quantile(s.alpha) if _best_p(len(b), len(c)) < s.alpha else math.inf
    delta = noise.candidate - noise.baseline
    width, widths = noise.width, noise.widths(delta if metric.worse == HIGHER else -delta)
    if not enough and fine is not None:  # too few steps: matched GPU op calls are the samples
        paired = cmp.paired(g.rank, **fine[1])
        if paired is not None and paired.pairs >= s.min_samples:
            enough, width, widths = True, paired.se * abs(noise.baseline), paired.widths()
            evidence = Evidence("sign test", paired.pairs, paired.pairs, p_value=paired.p_value, alpha=s.alpha,
                                method=paired.method, significant=bool(paired.p_value < s.alpha and paired.ratio > 1),
                                sample_kind=fine[0], drift="unknown")
            critical = z_quantile(s.alpha) if 0.5 ** paired.pairs < s.alpha else math.inf  # the sign test's best p
    evidence = replace(evidence, baseline_runs=b_runs, candidate_runs=c_runs, baseline_steps=len(b),
                       candidate_steps=len(c), noise_width=width, noise_widths=widths,
                       required_noise_widths=s.noise_widths)
    return _Judged(noise.baseline, noise.candidate, width, widths, evidence, enough,
                   critical if enough else math.inf)


def _best_p(n1: int, n2: int) -> float:
    """The smallest p-value n1 vs n2 steps can give (Mann-Whitney U, exact)."""
    return smallest_p_value(n1, n2) if n1 + n2 < 1000 else 0.0


def _min_detectable(j: _Judged, floor: float, threshold: float, stats) -> float:
    """The smallest change in the bad direction that would have been a finding: beyond the
    threshold (and floor), the noise widths, and the test's critical value."""
    if not math.isfinite(j.critical) or not math.isfinite(j.width):
        return math.inf
    return max(floor, threshold, j.width * max(stats.noise_widths, j.critical))


def _to_decide(j: _Judged, worse_delta: float, change: str, metric: Metric, stats) -> str:
    """What more data would tell this change from noise, in one clause."""
    e = j.evidence
    if not j.enough:
        return (f"record at least {stats.min_samples} profiler steps per rank on each side after warm-up "
                f"(a longer active schedule) to judge {change}")
    if e.sample_kind == "run" and e.between_run_sd:
        sd, m_b, m_c = e.between_run_sd, e.baseline_runs or 1, e.candidate_runs or 1
        drift = (f"{100.0 * sd / abs(j.baseline):.1f} %" if metric.unit != "pct" and j.baseline
                 else f"{sd:.1f}-point")
        for k in range(1, 11):  # the fewest more candidate runs that would decide, if the change is real
            width = math.hypot(sd / math.sqrt(m_b), sd / math.sqrt(m_c + k))
            df = (m_b - 1) + (m_c + k - 1)
            if width > 0 and worse_delta / width >= max(stats.noise_widths, t_quantile(stats.alpha, df)):
                return (f"record {k} more candidate run{'s' if k > 1 else ''} (`--run`) to tell {change} from "
                        f"the {drift} run-to-run drift")
        return (f"{change} is within the {drift} run-to-run drift: record more runs of both sides "
                f"(`perfreport baseline save --append`, `--run`)")
    return (f"record 2 more baseline runs (`perfreport baseline save --append`) and candidate runs (`--run`) "
            f"to tell {change} from the drift between runs")


def _relative_check(cmp: Comparison, name: str, cfg: RelativeCheck, metric: Metric, g: Group,
                    subject: str | None = None, fine: tuple[str, dict] | None = None) -> Check | None:
    """The check of one group: the change against the threshold (and floor), its significance
    and its width in noise widths; None where the metric applies to neither side."""
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
    s = cmp.stats
    j = _judge(cmp, metric, g, fine)
    b_med, c_med, evidence = j.baseline, j.candidate, j.evidence
    delta = c_med - b_med
    worse_delta = delta if metric.worse == HIGHER else -delta
    if metric.unit == "pct":
        exceeds = worse_delta > cfg.threshold
        change = f"{delta:+.1f} points"
        mde = _min_detectable(j, 0.0, cfg.threshold, s)
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
        mde = _min_detectable(j, floor, cfg.threshold / 100.0 * abs(b_med), s)
    evidence = replace(evidence, min_detectable=mde,
                       min_detectable_pct=100.0 * mde / abs(b_med) if b_med and metric.unit != "pct" else None)
    values = f"{format_value(b_med, metric.unit)} → {format_value(c_med, metric.unit)}"
    text = f"{metric.label} {change} ({values}"
    if not exceeds:
        status, why = PASS, f"within {threshold.describe(metric.unit)}"
    elif cmp.hw:
        status, why = INCONCLUSIVE, "beyond the threshold, but the GPUs differ (hardware_mismatch = inconclusive)"
    elif not j.enough:
        status = INCONCLUSIVE
        why = (f"beyond {threshold.describe(metric.unit)}, but too few samples to tell from noise "
               f"({len(b)} vs {len(c)}; at least {s.min_samples} per side)")
    elif not evidence.significant:
        status = INCONCLUSIVE
        why = f"beyond {threshold.describe(metric.unit)}, but not significant ({evidence_text(evidence)})"
    elif j.widths < s.noise_widths:
        status = INCONCLUSIVE
        why = (f"beyond {threshold.describe(metric.unit)}, but within the noise: {j.widths:.1f} noise widths of "
               f"{format_value(j.width, metric.unit)}, at least {s.noise_widths:g} needed ({evidence_text(evidence)})")
    else:
        status = cfg.level
        why = f"beyond {threshold.describe(metric.unit)}; significant ({evidence_text(evidence)})"
        one_run = evidence.sample_kind != "run"
        host = cmp.host_wait if one_run and metric.column in HOST_WAIT_METRICS else None
        if host is not None:  # one run per side and nothing but host-side wait changed
            status = s.host_wait_level if status == FAIL else status
            why += f"; {host.explanation()}"
        faster = cmp.faster_step if metric.column in IDLE_METRICS else None
        if faster is not None and status == FAIL:  # idle moved inside a shorter step: shown, not failed
            status = WARN
            why += f"; {faster}"
    message = f"{text}): {why}"
    if status == INCONCLUSIVE and exceeds and not cmp.hw and s.inconclusive_level != PASS:
        status = _milder(s.inconclusive_level, cfg.level)  # no silent pass: shown as a possible regression
        if evidence.sample_kind != "run" and metric.column in HOST_WAIT_METRICS and cmp.host_wait is not None:
            status = _milder(status, s.host_wait_level)
        decide = _to_decide(j, worse_delta, change, metric, s)
        evidence = replace(evidence, possible_regression=True, to_decide=decide)
        message = f"possible regression: {message}; {decide}"
    return make_check(**base, status=status, b=b, c=c, evidence=evidence, message=message, values=(b_med, c_med))


def _milder(a: str, b: str) -> str:
    """The less severe of two levels (fail > warn > pass)."""
    order = (PASS, WARN, FAIL)
    return order[min(order.index(a), order.index(b))]


def _or_zero(runs: np.ndarray | None, values: np.ndarray) -> np.ndarray:
    return runs if runs is not None else np.zeros(len(values), dtype=np.int64)
