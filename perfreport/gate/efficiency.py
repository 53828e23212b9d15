"""The gate's efficiency findings, from each side's ``op_efficiency`` table
(:mod:`perfreport.analyses.efficiency`):

* **fell off the Tensor Cores** (structural, free of noise): a GEMM, convolution or attention op
  with the same shapes and dtypes on both sides that ran at least :data:`TC_KEPT_PCT` % of its
  kernel time in Tensor Core kernels in the baseline and less than that in the candidate, on at
  least :data:`MIN_SHARE_PCT` % of the candidate rank's GPU time -> ``warn`` (a kernel choice
  changed: same op, other kernel, typically several times the time). One ``pass`` check per
  rank pair when no such op is found.
* **hardware-normalised view** (a note): when the two sides ran on different GPUs, their top
  ops by kernel time in percent of each GPU's peak for the op's dtype (or of its memory
  bandwidth for memory-bound ops), which stays comparable across GPUs where times do not.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .checks import PASS, WARN, Check, Evidence, Note, Threshold, make_check
from .comparison import Comparison
from .metrics import LOWER, Metric

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
    for b_rank, c_rank in cmp.pairs:
        b = b_table[(b_table["rank"] == b_rank) & b_table["kind"].isin(matrix)]
        c = c_table[(c_table["rank"] == c_rank) & c_table["kind"].isin(matrix)]
        both = b.merge(c, on=KEY, suffixes=("_b", "_c"))
        if not len(both):
            continue
        fell = both[(both["tensor_core_pct_b"] >= TC_KEPT_PCT) & (both["tensor_core_pct_c"] < TC_KEPT_PCT)
                    & (both["share_of_gpu_pct_c"] >= MIN_SHARE_PCT)]
        threshold = Threshold("max_decrease_points", 100.0 - TC_KEPT_PCT)
        for r in fell.sort_values("kernel_us_c", ascending=False).itertuples(index=False):
            bv, cv = np.array([r.tensor_core_pct_b]), np.array([r.tensor_core_pct_c])
            out.append(make_check(
                family="structural", name="tensor_cores", metric=METRIC, subject=r.label_c, rank=c_rank,
                aggregation="worst", level=WARN, status=WARN, threshold=threshold, b=bv, c=cv,
                evidence=Evidence("Tensor Core share of kernel time", 1, 1),
                message=(f"{r.label_c} fell off the Tensor Cores: {r.tensor_core_pct_b:.0f} % → "
                         f"{r.tensor_core_pct_c:.0f} % of its kernel time in Tensor Core kernels; "
                         f"{r.kernel_us_b / max(r.calls_b, 1):.1f} → {r.kernel_us_c / max(r.calls_c, 1):.1f} µs "
                         f"per call, {r.share_of_gpu_pct_c:.0f} % of the GPU time")))
        if not len(fell):
            kept = both[both["tensor_core_pct_b"] >= TC_KEPT_PCT]
            values = kept["tensor_core_pct_c"].to_numpy(np.float64)
            out.append(make_check(
                family="structural", name="tensor_cores", metric=METRIC, subject=None, rank=c_rank,
                aggregation="worst", level=WARN, status=PASS, threshold=Threshold("max_decrease_points", 50.0),
                b=kept["tensor_core_pct_b"].to_numpy(np.float64), c=values,
                evidence=Evidence("Tensor Core share of kernel time", len(kept), len(kept)),
                message=f"{len(kept)} GEMM/convolution/attention op(s) on the Tensor Cores in the baseline stay on "
                        f"them"))
    return out


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
    both = b.merge(c, on=KEY, suffixes=("_b", "_c")).sort_values("kernel_us_b", ascending=False).head(NOTE_OPS)
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
