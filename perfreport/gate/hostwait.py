"""Is a timing change only host-side wait? One run per side cannot tell a slower host from drift.

A real ResNet50 job run twice with the same code and configuration took +16 % per step the
second time: the same kernels, counts, GPU compute time, copies and CPU ops, only more GPU idle
while the CPU ran the DataLoader. Steps within one run cannot show that kind of between-run
drift, so a step-level test is confident about a difference that is the environment. When the
two sides differ *only* in host-side wait and neither has two runs to measure drift with, a
timing finding is lowered to ``stats.host_wait_level`` (warn) with the explanation. Any
structural or GPU-side difference - another kernel (other than cuDNN's per-process pick of a
convolution kernel, :mod:`.variants`), another count, more GPU time, a CPU op
that appears or disappears (another DataLoader iterator, a new synchronising call) - keeps
the finding at its level.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .keyed import keyed_samples
from .metrics import SideData
from .variants import families, family_of

STEP_OP = re.compile(r"^ProfilerStep")
COUNT_COLUMNS = ("kernels", "syncs", "memcpy_count", "memcpy_dtoh_count")
"""Counts per step that must be equal (median over samples)."""
GPU_TIME_COLUMNS = ("compute_us", "comm_us", "memory_us")
"""GPU time per step that must be unchanged within ``stats.host_wait_gpu_tolerance_pct``."""
GPU_SHARE_OF_STEP_CHANGE = 0.1
"""GPU time also counts as unchanged while its change is under a tenth of the step time's: a
cuDNN pick 3 % slower in a host-bound step that grew by 25 ms does not explain the 25 ms (and
the compute and GPU busy checks judge GPU work on their own, never lowered by this rule)."""
HOST_WAIT_METRICS = ("step_time_us", "idle_us", "idle_pct", "exposed_comm_us")
"""The timing metrics host-side wait moves (GPU idle, and the step it lengthens)."""


@dataclass(frozen=True, slots=True)
class HostWait:
    """The sides differ only in host-side wait; ``op`` is the CPU op whose time per step grew the
    most (None when no CPU op grew: the wait is outside the recorded ops)."""

    op: str | None

    def explanation(self) -> str:
        where = f" in {self.op}" if self.op else ""
        return (f"host-side wait{where} grew with unchanged GPU work; record more baseline runs to judge drift "
                f"(stats.host_wait_level)")


def host_wait_only(b: SideData, c: SideData, *, gpu_tolerance_pct: float, min_change_us: float,
                   launch_tolerance_pct: float) -> HostWait | None:
    """A :class:`HostWait` when nothing but host-side wait differs between the sides (pooled
    over ranks and steps), else None."""
    if not (b.has_steps and c.has_steps) or not len(b.steps) or not len(c.steps):
        return None
    if any(side.cpu_ops is None or not len(side.cpu_ops) for side in (b, c)):
        return None  # no CPU ops recorded: the host side is unknown, not unchanged
    bm, cm = b.steps.median(numeric_only=True), c.steps.median(numeric_only=True)
    for side, medians in ((b, bm), (c, cm)):  # cuDNN's pick may take one kernel more or less (split-K)
        variant_calls = _variant_calls(side)
        for column in ("kernels", "launches"):
            if column in medians:
                medians[column] -= variant_calls
    for column in COUNT_COLUMNS:
        if column in bm and bm[column] != cm[column]:
            return None
    if abs(cm["launches"] - bm["launches"]) > launch_tolerance_pct / 100.0 * abs(bm["launches"]):
        return None
    step_change = abs(float(np.nan_to_num(cm["step_time_us"])) - float(np.nan_to_num(bm["step_time_us"])))
    for column in GPU_TIME_COLUMNS:  # GPU work that explains a tenth of the step's change or more is no host wait
        x, y = float(np.nan_to_num(bm[column])), float(np.nan_to_num(cm[column]))
        if abs(y - x) > max(gpu_tolerance_pct / 100.0 * abs(x), min_change_us, GPU_SHARE_OF_STEP_CHANGE * step_change):
            return None
    if _present(b, c, "op_steps") is None or (grown := _present(b, c, "cpu_ops")) is None:
        return None
    return HostWait(op=grown or None)


def _variant_calls(side: SideData) -> float:
    """Median calls per step of the side's kernels of a variant family (:mod:`.variants`)."""
    if not len(side.ops):
        return 0.0
    keys = [k for k in dict.fromkeys(side.ops["key"].astype(str)) if family_of(k.strip()) is not None]
    if not keys:
        return 0.0
    return float(keyed_samples(side, "op_steps", ("key",), "count", keys).sum(axis=1).median())


def _present(b: SideData, c: SideData, table: str) -> str | None:
    """None when the keys run in most samples differ between the sides; else the key whose
    median time per sample grew the most ("" when none grew)."""
    frames = [b.ops if table == "op_steps" else b.cpu_ops, c.ops if table == "op_steps" else c.cpu_ops]
    keys = list(dict.fromkeys(k for f in frames if f is not None and len(f) for k in f["key"].astype(str)))
    keys = [k for k in keys if not STEP_OP.match(k)]
    if not keys:
        return ""
    counts = [keyed_samples(s, table, ("key",), "count", keys).median() for s in (b, c)]
    if table == "op_steps":  # another kernel of the same family (cuDNN's pick) is the same GPU work
        fam = [f or k for k, f in zip(keys, families(keys))]
        counts = [x.groupby(fam).sum() for x in counts]
    if not ((counts[0] > 0) == (counts[1] > 0)).all():
        return None
    times = [keyed_samples(s, table, ("key",), "dur_us", keys).median() for s in (b, c)]
    growth = pd.Series(times[1].to_numpy() - times[0].to_numpy(), index=keys)
    return str(growth.idxmax()) if len(growth) and growth.max() > 0 else ""


__all__ = ["HostWait", "host_wait_only", "HOST_WAIT_METRICS"]
