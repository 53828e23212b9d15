"""Chrome-trace counter events ("ph": "C") from counter time series.

A counter event sets the value of a named counter at a time; Perfetto and chrome://tracing draw
each (pid, name, id) as a step chart. These functions turn a change-point series (one row per
change, the value holding until the next row) into such records, ready to be appended to a
trace's ``traceEvents``. Writing the file is the caller's business (``perfreport.hta``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def counter_events(series: pd.DataFrame, counter: str, value_column: str, ts_offset_us: float = 0.0) -> list[dict]:
    """Counter records for ``series`` (columns ``ts``, ``pid``, ``value_column``, optional
    ``name`` and ``id``).

    Each record is ``{"ph": "C", "name": ..., "pid": ..., "ts": ts + ts_offset_us,
    "args": {counter: value}}`` plus ``"id"`` when the series has an ``id`` column (one chart
    per id, e.g. per stream). ``name`` is the row's ``name`` when the series has that column
    (one chart per copy type), else ``counter``. Times are µs; NaN values become 0 so that the
    output is valid JSON. An empty series gives no records.

    >>> counter_events(pd.DataFrame({"ts": [1, 2], "pid": [0, 0], "id": [7, 7], "q": [1, 0]}), "Queue Length", "q")[0]
    {'ph': 'C', 'name': 'Queue Length', 'pid': 0, 'ts': 1.0, 'args': {'Queue Length': 1}, 'id': 7}
    """
    n = len(series)
    if n == 0:
        return []
    ts = (series["ts"].to_numpy(dtype=np.float64) + ts_offset_us).tolist()
    pid = _plain(series["pid"].to_numpy(), integral=True)
    values = series[value_column].to_numpy()
    if values.dtype.kind == "f":
        values = np.nan_to_num(values, nan=0.0)
    values = _plain(values)
    names = _plain(series["name"].to_numpy()) if "name" in series.columns else [counter] * n
    ids = _plain(series["id"].to_numpy(), integral=True) if "id" in series.columns else None
    # One dict per counter point is the output format itself (JSON records), so this loop over
    # points is the serialisation step; the columns above are converted once, vectorised.
    records = [
        {"ph": "C", "name": nm, "pid": p, "ts": t, "args": {counter: v}}
        for nm, p, t, v in zip(names, pid, ts, values)
    ]
    if ids is not None:
        for record, i in zip(records, ids):
            record["id"] = i
    return records


def _plain(values: np.ndarray, integral: bool = False) -> list:
    """Python scalars for JSON; with ``integral``, whole floats (ids that pandas made float
    because of a missing value) become ints and NaN becomes -1."""
    if integral and values.dtype.kind == "f":
        return np.where(np.isfinite(values), values, -1).astype(np.int64).tolist()
    if values.dtype == object:
        return [v.item() if isinstance(v, np.generic) else v for v in values]
    return values.tolist()
