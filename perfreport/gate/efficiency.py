"""The gate's efficiency findings, from each side's ``op_efficiency`` table
(:mod:`perfreport.analyses.efficiency`):

* **fell off the Tensor Cores** (structural, free of noise): a GEMM, convolution or attention op
  with the same shapes and dtypes on both sides that ran at least :data:`TC_KEPT_PCT` % of its
  kernel time in Tensor Core kernels in the baseline and less than that in the candidate, on at
  least :data:`MIN_SHARE_PCT` % of the candidate rank's GPU time -> ``warn`` (a kernel choice
  changed: same op, other kernel, typically several times the time). One ``pass`` check per
  rank pair when no such op is found.
* **achieved throughput** (relative, with the kernel-time checks' noise handling): for the top
  ``[relative.kernel_time] top`` modelled ops by kernel time on either side (same op, shapes and
  dtypes on both), the achieved TFLOPS/s per sample (TB/s for memory-bound ops) must not drop by
  more than the kernel-time threshold; judged by ``relative._relative_check`` (significance, noise
  widths, runs). Ops whose baseline kernel time per step is under the kernel-time floor
  (``min_change_us``) are not checked, as kernel-time changes under it are ignored. When the
  sides ran on different GPUs the samples are percent of each side's peak (of its memory
  bandwidth for memory-bound ops), and the message says so.
* **hardware-normalised view** (a note): when the two sides ran on different GPUs, their top
  ops by kernel time in percent of each GPU's peak for the op's dtype (or of its memory
  bandwidth for memory-bound ops), which stays comparable across GPUs where times do not.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pandas as pd

from ..analyses.efficiency.gpus import match_gpu
from .checks import PASS, WARN, Check, Evidence, Note, Threshold, make_check
from .comparison import Comparison
from .metrics import LOWER, SAMPLE, Metric
from .notes import gpus_differ

TC_KEPT_PCT = 50.0
MIN_SHARE_PCT = 1.0
NOTE_OPS = 3
KEY = ["op", "input_dims", "input_types", "concrete_inputs"]
METRIC = Metric("tensor_core_pct", "Tensor Core share of the op's kernel time", "pct", LOWER, "op_efficiency")


def _table(side) -> pd.DataFrame | None:
    table = getattr(side, "efficiency", None)
    return table if table is not None and len(table) else None


def tensor_core_checks(cmp: Comparison) -> list[Check]:
    """The "fell off the Tensor Cores" structural checks (see the module doc)."""
    b_table, c_table = _table(cmp.b), _table(cmp.c)
    if b_table is None or c_table is None:
        return []
    out: list[Check] = []
    matrix = ("gemm", "conv", "attention")
    b_ranks, c_ranks = (_by_rank(t[t["kind"].isin(matrix)]) for t in (b_table, c_table))
    for b_rank, c_rank in cmp.pairs:
        b, c = b_ranks(b_rank), c_ranks(c_rank)
        both = b.merge(c, on=KEY, suffixes=("_b", "_c"))
        if not len(both):
            continue
        fell = both[(both["tensor_core_pct_b"] >= TC_KEPT_PCT) & (both["tensor_core_pct_c"] < TC_KEPT_PCT)
                    & (both["share_of_gpu_pct_c"] >= MIN_SHARE_PCT)]
        threshold = Threshold("max_decrease_points", 100.0 - TC_KEPT_PCT)
        for r in fell.sort_values("kernel_us_c", ascending=False, kind="stable").itertuples(index=False):
            bv, cv = np.array([r.tensor_core_pct_b]), np.array([r.tensor_core_pct_c])
            out.append(make_check(
                family="structural", name="tensor_cores", metric=METRIC, subject=r.label_c, rank=c_rank,
                aggregation="worst", level=WARN, status=WARN, threshold=threshold, b=bv, c=cv,
                evidence=Evidence("Tensor Core share of kernel time", 1, 1),
                message=(f"{r.label_c} fell off the Tensor Cores: {r.tensor_core_pct_b:.0f} % → "
                         f"{r.tensor_core_pct_c:.0f} % of its kernel time in Tensor Core kernels; "
                         f"{r.kernel_us_b / max(r.calls_b, 1):.1f} → {r.kernel_us_c / max(r.calls_c, 1):.1f} µs "
                         f"per call, {r.share_of_gpu_pct_c:.0f} % of the GPU time")))
        kept = both[both["tensor_core_pct_b"] >= TC_KEPT_PCT]
        if not len(fell) and len(kept):
            values = kept["tensor_core_pct_c"].to_numpy(np.float64)
            out.append(make_check(
                family="structural", name="tensor_cores", metric=METRIC, subject=None, rank=c_rank,
                aggregation="worst", level=WARN, status=PASS, threshold=Threshold("max_decrease_points", 50.0),
                b=kept["tensor_core_pct_b"].to_numpy(np.float64), c=values,
                evidence=Evidence("Tensor Core share of kernel time", len(kept), len(kept)),
                message=f"{len(kept)} GEMM/convolution/attention op(s) on the Tensor Cores in the baseline stay on "
                        f"them"))
    return out


def _by_rank(table: pd.DataFrame):
    """rank -> that rank's rows of ``table`` (in table order, as a filter on the rank gives
    them), split once instead of filtered again for every rank pair."""
    parts = dict(tuple(table.groupby("rank", sort=False)))
    return lambda rank: parts.get(rank, table.iloc[0:0])


def hardware_note(cmp: Comparison) -> Note | None:
    """The hardware-normalised view when the sides ran on different GPUs (see the module doc)."""
    b_table, c_table = _table(cmp.b), _table(cmp.c)
    if b_table is None or c_table is None or not cmp.pairs:
        return None
    b_rank, c_rank = cmp.pairs[0]
    b = b_table[(b_table["rank"] == b_rank) & (b_table["model"] == "perfreport")]
    c = c_table[(c_table["rank"] == c_rank) & (c_table["model"] == "perfreport")]
    b_gpu, c_gpu = (str(t["gpu"].iloc[0]) if len(t) else "" for t in (b, c))
    if not b_gpu or not c_gpu or b_gpu == c_gpu:
        return None
    both = b.merge(c, on=KEY, suffixes=("_b", "_c")).sort_values("kernel_us_b", ascending=False, kind="stable").head(NOTE_OPS)
    parts = []
    for r in both.itertuples(index=False):
        memory = r.bound_b == "memory"
        column = "pct_of_bw" if memory else "pct_of_peak"
        bv, cv = getattr(r, f"{column}_b"), getattr(r, f"{column}_c")
        if not (np.isfinite(bv) and np.isfinite(cv)):
            continue
        what = "memory bandwidth" if memory else f"{str(r.compute_class_b).upper()} peak"
        parts.append(f"{r.label_b}: {bv:.1f} % → {cv:.1f} % of each GPU's {what} "
                     f"({r.kernel_us_b / max(r.calls_b, 1):.1f} → {r.kernel_us_c / max(r.calls_c, 1):.1f} µs per call)")
    if not parts:
        return None
    return Note("hardware", f"hardware-normalised (rank {b_rank} → {c_rank}, {b_gpu} → {c_gpu}): " + "; ".join(parts))


def _sample_positions(side, table: pd.DataFrame) -> np.ndarray | None:
    """Each row of ``table``: its sample's position among ``side.steps``' samples (-1: none of
    them); None where the side's samples are not unique (:func:`_samples` joins then). Made once
    per side, not per checked op: building the two indexes was half of the checks' time."""
    samples = pd.MultiIndex.from_frame(side.steps[SAMPLE])
    if not samples.is_unique:  # (a side's samples are unique; the general join otherwise)
        return None
    return samples.get_indexer(pd.MultiIndex.from_frame(table[SAMPLE]))


def _samples(side, table: pd.DataFrame, chosen: np.ndarray, positions: np.ndarray | None, memory: bool,
             peak: float | None) -> pd.Series:
    """Per sample of ``side.steps`` (rows aligned): the achieved TFLOPS/s (TB/s when ``memory``)
    of the op whose rows of ``table`` are ``chosen``, in % of ``peak`` when given; NaN where
    the op did not run. ``positions``: :func:`_sample_positions` of ``table``."""
    rows = table[chosen]
    amount = rows["bytes" if memory else "flops"].to_numpy(np.float64)
    value = amount / (rows["kernel_us"].to_numpy(np.float64) * 1e-6) / 1e12
    if peak is not None:
        value = 100.0 * value / peak
    if positions is None:
        per = rows[SAMPLE].assign(_v=value).groupby(SAMPLE, as_index=False)["_v"].mean()
        return side.steps[SAMPLE].merge(per, on=SAMPLE, how="left")["_v"]
    # each sample's mean by its position among the side's samples: pandas' grouped mean over the
    # rows in their order, as grouping by the three columns and joining gave, without the join
    position = positions[chosen]
    inside = position >= 0
    means = pd.Series(value[inside]).groupby(position[inside], sort=False).mean()
    out = np.full(len(side.steps), np.nan)
    out[means.index.to_numpy()] = means.to_numpy(np.float64)
    return pd.Series(out, name="_v")


def _peak(side, label: str, memory: bool) -> float | None:
    """The side's peak for the op (TFLOPS/s of its compute class, or TB/s), None if unknown."""
    table = _table(side)
    rows = table[table["label"] == label] if table is not None else None
    if rows is None or not len(rows):
        return None
    if memory:
        spec = match_gpu(str(rows["gpu"].iloc[0]) or None).spec
        return spec.mem_tbps if spec is not None else None
    peak = float(rows["peak_tflops_per_s"].iloc[0])
    return peak if np.isfinite(peak) else None


def _top_labels(table: pd.DataFrame, top: int) -> list[str]:
    totals = table.groupby("label")["kernel_us"].sum().sort_values(ascending=False, kind="stable")
    return list(totals.index[:top])


def throughput_checks(cmp: Comparison) -> list[Check]:
    """The achieved-throughput checks of the module doc."""
    from .relative import _relative_check  # the kernel-time checks' judging, shared

    cfg = cmp.config.relative.get("kernel_time")
    b_table, c_table = cmp.b.efficiency_steps, cmp.c.efficiency_steps
    if cfg is None or not cfg.enabled or b_table is None or c_table is None or not len(b_table) or not len(c_table) \
            or not len(cmp.b.steps) or not len(cmp.c.steps):
        return []
    top = cfg.top or 5
    # (made once, not for every label; from the distinct labels: a table has a row per op and step)
    on_both = set(pd.unique(b_table["label"]).tolist()) & set(pd.unique(c_table["label"]).tolist())
    labels = [k for k in dict.fromkeys(_top_labels(b_table, top) + _top_labels(c_table, top)) if k in on_both]
    normalise = gpus_differ(cmp.b, cmp.c)
    judged = copy.copy(cmp)
    judged.hw = cmp.hw and not normalise  # percent of each GPU's peak compares across GPUs
    settings = replace(cfg, min_change_us=0.0, min_change_step_pct=0.0)
    out: list[Check] = []
    b_labels, c_labels = b_table["label"].to_numpy(), c_table["label"].to_numpy()
    b_positions, c_positions = _sample_positions(cmp.b, b_table), _sample_positions(cmp.c, c_table)
    for label in labels:  # a loop over the few checked ops
        b_chosen, c_chosen = b_labels == label, c_labels == label
        b_rows = b_table[b_chosen]
        per_sample = b_rows.groupby(SAMPLE)["kernel_us"].sum()
        if float(per_sample.median()) < cfg.min_change_us:
            continue  # an op whose whole kernel time per step is under the kernel-time floor
        bound = b_rows["bound"].iloc[0]
        flops = float(b_rows["flops"].sum())
        memory = bound == "memory" or flops == 0
        peaks = (_peak(cmp.b, label, memory), _peak(cmp.c, label, memory)) if normalise else (None, None)
        if normalise and None in peaks:
            continue  # no peak on a side: the times are not comparable and no normalisation exists
        unit = "% of peak" if normalise else ("TB/s" if memory else "TFLOPS/s")
        name = ("memory bandwidth" if memory else "compute peak") if normalise else ""
        metric = Metric("tb_per_s" if memory else "tflops_per_s",
                        f"achieved {'% of each GPU' + chr(39) + 's ' + name if normalise else unit}", unit, LOWER,
                        "op_efficiency_steps")
        b_values = _samples(cmp.b, b_table, b_chosen, b_positions, memory, peaks[0])
        c_values = _samples(cmp.c, c_table, c_chosen, c_positions, memory, peaks[1])
        for g in cmp.groups(b_values, c_values, cfg.aggregation, LOWER):
            check = _relative_check(judged, "op_throughput", settings, metric, g, subject=label)
            if check is None:
                continue
            threshold = replace(check.threshold, kind="max_decrease_pct")
            message = check.message.replace(check.threshold.describe(unit), threshold.describe(unit))
            if normalise:
                message += " (hardware-normalised: the sides ran on different GPUs)"
            out.append(replace(check, threshold=threshold, message=message))
    return out
