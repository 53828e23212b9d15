"""Exports for the dashboards teams already run: github-action-benchmark and Bencher.

- ``benchmark-json``: github-action-benchmark's ``customSmallerIsBetter`` input, a JSON list of
  ``{"name", "unit", "value", "range", "extra"}``. Times in ms, shares in %.
- ``bmf``: the Bencher Metric Format, ``{benchmark: {measure: {"value", "lower_value",
  "upper_value"}}}``. Times go to Bencher's built-in ``latency`` measure, which is in
  nanoseconds; shares to a ``percent`` measure (created on first upload).

Both carry the candidate's value of every relative check, the median per profiler step the gate
judged (one entry per rank for per-rank checks), so the dashboard's line and perfreport's verdict
speak of one number. A metric where *lower* is worse (communication overlap) is exported as its
complement ("non-overlapped communication") so that smaller is better throughout, as
``customSmallerIsBetter`` and Bencher's default thresholds assume. Range and bounds are the
smallest and largest per-step sample of the candidate; they are left out where report.json kept
only a check's first samples (past ``STEP_ROWS`` steps: ``--full-tables`` keeps them all), as
the smallest and largest of those would not be the candidate's.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

PREFIX = "perfreport: "


def _entries(document: Mapping) -> Iterator[tuple[str, str, float, float | None, float | None, Mapping]]:
    """(name, unit "us"/"pct", value, lower, upper, check) per relative check with a value."""
    for c in document.get("checks") or []:
        if not isinstance(c, Mapping) or c.get("family") != "relative":
            continue
        value = c.get("candidate_value")
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        unit = "pct" if c.get("unit") in ("pct", "pp") else "us"
        evidence = c.get("evidence") or {}
        values = evidence.get("candidate_values") or []
        samples = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
        cut = isinstance(evidence.get("candidate_samples"), int) and len(values) < evidence["candidate_samples"]
        lower, upper = (min(samples), max(samples)) if samples and not cut else (None, None)  # cut: not the range
        name = str(c.get("title") or c.get("label") or c.get("name"))
        if c.get("subject") and str(c["subject"]) not in name:
            name = f"{name} [{c['subject']}]"
        if c.get("rank") is not None:
            name = f"{name} @rank{c['rank']}"
        if c.get("worse") == "lower" and unit == "pct":  # overlap: export its complement
            name = f"non-{name}"
            value, lower, upper = 100.0 - value, (None if upper is None else 100.0 - upper), \
                (None if lower is None else 100.0 - lower)
        yield PREFIX + name, unit, float(value), lower, upper, c


def benchmark_json(document: Mapping) -> list[dict]:
    """github-action-benchmark ``customSmallerIsBetter`` entries."""
    out = []
    for name, unit, value, lower, upper, check in _entries(document):
        scale, label = (1e-3, "ms") if unit == "us" else (1.0, "%")
        entry = {"name": name, "unit": label, "value": round(value * scale, 6)}
        if lower is not None and upper is not None:
            entry["range"] = f"{lower * scale:.6g}..{upper * scale:.6g}"
        entry["extra"] = f"perfreport {check.get('status')}: {check.get('message', '')}"[:500]
        out.append(entry)
    return out


def bmf(document: Mapping) -> dict:
    """Bencher Metric Format: times as ``latency`` (ns), shares as ``percent``."""
    out: dict[str, dict] = {}
    for name, unit, value, lower, upper, _ in _entries(document):
        measure, scale = ("latency", 1e3) if unit == "us" else ("percent", 1.0)
        metric = {"value": value * scale}
        if lower is not None and upper is not None:
            metric.update(lower_value=lower * scale, upper_value=upper * scale)
        out.setdefault(name[:1024], {})[measure] = metric
    return out
