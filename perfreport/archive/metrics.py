"""The few numbers a release archive tracks, read from a comparison's ``report.json``.

Each is the value the gate judged for the candidate (the release): the median per profiler step
of the relative check, aggregated over ranks as the check is configured — the same number the
report shows, so a trend point and its release's report never disagree. Nothing is recomputed
from traces. Release-over-release deltas are the archive's own arithmetic on those values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import ArchiveError
from ..report.json_report import KIND as COMPARE_KIND


@dataclass(frozen=True)
class KeyMetric:
    key: str          # key in index.json
    check: str        # relative check name in report.json
    label: str        # axis / column label
    unit: str         # "us" or "pct"
    worse: str        # "higher" or "lower"
    alert: float      # a release-over-release change beyond this (in the bad direction) is highlighted


KEY_METRICS = (
    KeyMetric("step_time_us", "step_time", "step time", "us", "higher", 5.0),
    KeyMetric("gpu_busy_us", "gpu_busy", "GPU busy", "us", "higher", 5.0),
    KeyMetric("idle_pct", "idle_pct", "GPU idle", "pct", "higher", 2.0),
    KeyMetric("overlap_pct", "overlap_pct", "comm overlap", "pct", "lower", 5.0),
    KeyMetric("exposed_comm_us", "exposed_communication", "exposed comm", "us", "higher", 5.0),
)
"""Tracked metrics. ``alert`` is in % of the previous value for times, in points for shares."""
KERNEL_ALERT_PCT = 5.0
TOP_KERNELS = 10


def release_metrics(document: Mapping) -> tuple[dict[str, float | None], dict[str, float]]:
    """(key metrics, kernel time per step by kernel) of the candidate of a comparison document."""
    if document.get("kind") != COMPARE_KIND or not isinstance(document.get("checks"), list):
        raise ArchiveError("the archive takes a comparison report (report.json of perfreport compare); "
                           "compare the release's traces with a stored baseline first")
    relative = [c for c in document["checks"] if isinstance(c, Mapping) and c.get("family") == "relative"]
    metrics = {m.key: _worst([c for c in relative if c.get("name") == m.check and not c.get("subject")], m.worse)
               for m in KEY_METRICS}
    kernels: dict[str, float] = {}
    for c in relative:
        if c.get("name") == "kernel_time" and c.get("subject"):
            value = _finite(c.get("candidate_value"))
            if value is not None:
                kernels[str(c["subject"])] = max(value, kernels.get(str(c["subject"]), value))
    top = sorted(kernels.items(), key=lambda kv: -kv[1])[:TOP_KERNELS]
    return metrics, dict(top)


def _worst(checks: Sequence[Mapping], worse: str) -> float | None:
    """The job-level value (rank None) if there is one, else the worst rank's."""
    values = [_finite(c.get("candidate_value")) for c in checks if c.get("rank") is None]
    values = [v for v in values if v is not None] or [
        v for v in (_finite(c.get("candidate_value")) for c in checks) if v is not None]
    if not values:
        return None
    return max(values) if worse == "higher" else min(values)


def _finite(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def change(previous: float | None, current: float | None, unit: str) -> float | None:
    """Release-over-release change: % of the previous value for times, points for shares."""
    if previous is None or current is None:
        return None
    if unit == "pct":
        return current - previous
    return None if previous == 0 else (current - previous) / abs(previous) * 100.0


def is_worse(delta: float | None, worse: str, alert: float) -> bool:
    """Whether a change is beyond ``alert`` in the metric's bad direction."""
    if delta is None:
        return False
    return delta > alert if worse == "higher" else delta < -alert
