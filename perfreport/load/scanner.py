"""Choose the scanner: the C extension when it was built, else the pure-Python reference."""

from __future__ import annotations

import numpy as np

from ..model import SparseColumn
from .fields import ARG_FIELDS, INT_MISSING, TOP_FIELDS, ScanResult

try:
    from . import _scan  # type: ignore[attr-defined]
except ImportError:  # the extension is optional: no compiler at install time
    _scan = None

_DTYPES = {"f": np.float64, "i": np.int64, "s": np.int32, "n": np.int64}


def _c_supports_ns() -> bool:
    return _scan is not None and "n" in getattr(_scan, "KINDS", "")


def scan_c(events_json) -> ScanResult:
    """Run the C scanner and wrap its byte buffers as (read-only) numpy columns."""
    top_fields = TOP_FIELDS if _c_supports_ns() else tuple((k, "f" if kind == "n" else kind) for k, kind in TOP_FIELDS)
    n, top, rows, values, strings = _scan.scan(events_json, top_fields, ARG_FIELDS)
    top_cols = {key: np.frombuffer(buf, _DTYPES[kind]) for (key, kind), buf in zip(top_fields, top)}
    for (key, kind), (_, used) in zip(TOP_FIELDS, top_fields):
        if kind == "n" and used == "f":  # older extension: float µs -> ns (loses sub-0.25 µs at 1e15)
            f = top_cols[key]
            top_cols[key] = np.where(np.isfinite(f), np.trunc(f * 1000.0), 0).astype(np.int64)
            top_cols[key][~np.isfinite(f)] = INT_MISSING
    return ScanResult(
        n_events=n,
        top=top_cols,
        args={
            key: SparseColumn(rows=np.frombuffer(r, np.int64), values=np.frombuffer(v, _DTYPES[kind]))
            for (key, kind), r, v in zip(ARG_FIELDS, rows, values)
        },
        strings=strings,
    )


def scan(events_json) -> ScanResult:
    """Columns of a ``traceEvents`` JSON array, by the fastest scanner available."""
    if _scan is not None:
        return scan_c(events_json)
    from .scan_py import scan as scan_py

    return scan_py(events_json)


def scanner_name() -> str:
    return "c" if _scan is not None else "python"
