"""The one place that converts units and formats numbers for people.

Trace times are µs (Kineto's unit); sizes are bytes. Names of quantities carry their unit
(``dur_us``, ``busy_pct``, ``bw_gbps``).
"""

from __future__ import annotations

import math

import numpy as np

US_PER_MS = 1_000.0
US_PER_S = 1_000_000.0
BYTES_PER_GB = 1e9  # decimal GB, as NCCL-tests and Kineto's "memory bandwidth (GB/s)" use


def us_to_ms(us: float) -> float:
    return us / US_PER_MS


def pct(part: float, whole: float) -> float:
    """100 * part / whole; NaN when whole is 0 (a share of nothing is undefined, not 0 %)."""
    return 100.0 * part / whole if whole else math.nan


def pcts(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
    """:func:`pct` of arrays, element by element (NaN where ``whole`` is 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(whole != 0, 100.0 * part / whole, math.nan)


def format_us(us: float) -> str:
    """A duration for people: µs below 1 ms, ms below 1 s, else s."""
    if us is None or (isinstance(us, float) and math.isnan(us)):
        return "-"
    if abs(us) < US_PER_MS:
        return f"{us:.1f} µs"
    if abs(us) < US_PER_S:
        return f"{us / US_PER_MS:.2f} ms"
    return f"{us / US_PER_S:.3f} s"


def format_value(value: float, unit: str) -> str:
    """A value in its unit (a metric's: "us", "pct" or a plain number) for messages; "n/a" when
    missing or not finite."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    if unit == "us":
        return format_us(value)
    if unit == "pct":
        return f"{value:.1f} %"
    return f"{value:g}"


def format_pct(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.1f} %"


def format_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"
