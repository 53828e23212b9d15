"""Memory-copy and memset bandwidth per stream and per direction.

Every memcpy/memset GPU event (``RankTrace.memcpys()``/``memsets()``) is one transfer. Its
direction is read from the name Kineto gives it: "Memcpy HtoD (Pinned -> Device)" is
"Memcpy HtoD", likewise DtoH, DtoD, PtoP, HtoH; memsets are "Memset"; a copy whose name says
nothing is "Memcpy".

Two bandwidths are reported, both in GB/s (decimal):

* ``bw_gbps``: perfreport's own, ``bytes / dur`` (NaN for a 0 µs event or unknown bytes);
* ``kineto_bw_gbps``: the ``memory bandwidth (GB/s)`` arg Kineto writes (NaN when absent).

Aggregates use bytes over busy time (``bytes_total / busy_us``), i.e. a duration-weighted
mean, not the mean of per-event rates (a 1 µs event would otherwise weigh as much as a 10 ms
one). The time series is the summed instantaneous bandwidth of the transfers in flight, per
direction: concurrent copies add up.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..model import RankTrace, TraceSet, distinct_codes, narrow
from ..units import BYTES_PER_GB, US_PER_S
from .grouping import Grouped
from .ordering import span_order

_DIRECTION = re.compile(r"^Memcpy ([A-Za-z]to[A-Za-z])\b")
MEMSET = "Memset"
MEMCPY = "Memcpy"

TRANSFER_COLUMNS = ("rank", "iteration", "row", "stream", "direction", "ts_us", "dur_us", "bytes", "bw_gbps",
                    "kineto_bw_gbps")


def direction_of(name: str, is_memset: bool) -> str:
    """'Memcpy HtoD', 'Memcpy DtoH', ... from a Kineto memcpy name; 'Memset' for memsets."""
    if is_memset:
        return MEMSET
    m = _DIRECTION.match(name)
    return f"{MEMCPY} {m.group(1)}" if m else MEMCPY


def rank_transfers(trace: RankTrace) -> pd.DataFrame:
    """One row per memcpy/memset event of one rank (see the module docstring).

    Memoised on the trace (every bandwidth table starts from it); each call gets its own
    (shallow, copy-on-write) frame.
    """
    return trace.memo("transfers", lambda: _rank_transfers(trace)).copy(deep=False)


def _rank_transfers(trace: RankTrace) -> pd.DataFrame:
    rows, codes, kinds = transfer_rows(trace)
    direction = kinds[codes]
    dur = trace.dur[rows]
    nbytes = trace.arg("bytes", -1, rows).astype(np.float64)
    nbytes[nbytes < 0] = np.nan
    with np.errstate(divide="ignore", invalid="ignore"):
        bw = np.where(dur > 0, nbytes / BYTES_PER_GB / (dur / US_PER_S), np.nan)
    kineto = trace.arg("memory bandwidth (GB/s)", np.nan, rows).astype(np.float64)
    return pd.DataFrame({
        "rank": np.full(len(rows), trace.rank, dtype=np.int64),
        "iteration": trace.iteration[rows],
        "row": rows.astype(np.int64),
        "stream": trace.arg("stream", -1, rows),
        "direction": direction,
        "ts_us": trace.ts[rows],
        "dur_us": dur,
        "bytes": nbytes,
        "bw_gbps": bw,
        "kineto_bw_gbps": kineto,
    }, columns=list(TRANSFER_COLUMNS))


def transfer_rows(trace: RankTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the rows of the rank's memcpys and memsets of finite duration, ascending; each one's
    direction as a code; the directions, sorted, object): memoised. The codes group the rows by
    direction as the texts do (``pd.factorize(texts, sort=True)``), without hashing a text per
    transfer: 30 ms a grouping on the million transfers of a rank of 173,000 steps, where the
    bandwidth tables and the series group by direction four times."""
    return trace.memo("transfer_rows", lambda: _transfer_rows(trace))


def _transfer_rows(trace: RankTrace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    memset = trace.memsets()
    rows = np.flatnonzero(trace.memcpys() | memset)
    rows = rows[np.isfinite(trace.dur[rows])]
    # one label per distinct (name, is memset) pair: key = (name code + 1) * 2 + is memset
    pair, inverse = distinct_codes((trace.name[rows].astype(np.int64) + 1) * 2 + memset[rows],
                                   2 * (len(trace.strings) + 1))
    labels = np.array([direction_of(trace.strings[p // 2 - 1] if p >= 2 else "", bool(p % 2))
                       for p in pair.tolist()], dtype=object)
    kinds, of_pair = np.unique(labels, return_inverse=True)
    codes = of_pair.ravel().astype(_code_type(len(kinds)))[inverse] if len(rows) else np.empty(0, dtype=np.int8)
    return narrow(rows), codes, kinds.astype(object)


def _code_type(n: int) -> type:
    """The narrowest integers for codes below ``n`` (a handful of directions: 1 byte a row, so
    the codes held beside the transfers add ~1 MB to the peak of a million transfers, not 8)."""
    return np.int8 if n <= np.iinfo(np.int8).max else np.int32


def direction_codes(traces: TraceSet) -> tuple[np.ndarray, np.ndarray]:
    """(each row of :func:`transfers`' direction as a code; the directions, sorted): what
    ``pd.factorize(transfers(traces)["direction"], sort=True)`` gives, from the ranks' codes
    (:func:`transfer_rows`). Memoised on the trace set."""
    def compute() -> tuple[np.ndarray, np.ndarray]:
        parts = [transfer_rows(t) for t in traces]
        kinds = np.unique(np.concatenate([k for _, _, k in parts])) if parts else np.empty(0, dtype=object)
        codes = [np.searchsorted(kinds, k).astype(_code_type(len(kinds)))[c] for _, c, k in parts if len(c)]
        return (np.concatenate(codes) if codes else np.empty(0, dtype=np.int8)), kinds.astype(object)

    return traces.memo("transfer_directions", compute)


def transfers(traces: TraceSet) -> pd.DataFrame:
    """:func:`rank_transfers` for all ranks, computed once per trace set (the bandwidth tables
    and series share it); each call gets its own (shallow, copy-on-write) frame."""
    def compute() -> pd.DataFrame:
        frames = [f for f in (rank_transfers(t) for t in traces) if len(f)]
        return pd.concat(frames, ignore_index=True) if frames else rank_transfers_empty()

    return traces.memo("transfers", compute).copy(deep=False)


def rank_transfers_empty() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype=object if c == "direction" else np.float64 if c.endswith(("_us", "gbps"))
                                      or c == "bytes" else np.int64) for c in TRANSFER_COLUMNS})


SERIES_COLUMNS = ("rank", "direction", "ts_us", "bw_gbps")


def memory_bw_series(traces: TraceSet) -> pd.DataFrame:
    """Change points of the summed bandwidth (GB/s, bytes/dur) of the transfers in flight, per
    (rank, direction). Ends are applied before starts at equal times and changes at the same
    µs collapse into one point; the value holds until the next point (0 after the last end).
    Transfers with unknown bandwidth (0 µs, no bytes) are left out."""
    points = bw_change_points(traces)
    if points is None:
        return pd.DataFrame(columns=list(SERIES_COLUMNS))
    rank, kind, labels, ts, level = points
    return pd.DataFrame({"rank": rank, "direction": labels[kind], "ts_us": ts, "bw_gbps": level},
                        columns=list(SERIES_COLUMNS))


def bw_change_points(traces: TraceSet) -> tuple[np.ndarray, ...] | None:
    """:func:`memory_bw_series` as arrays, sorted by (rank, direction, time): (rank, the
    direction's position among ``labels``, labels (sorted, object), ts_us, bw_gbps); None when no
    transfer's bandwidth is known. A figure's lines read these directly: the table's direction
    column alone (a text per change point, checked one by one) took 0.11 s of the 0.28 s on a
    rank of 173,000 steps."""
    table = transfers(traces)
    known = np.isfinite(table["bw_gbps"].to_numpy())
    table = table[known]
    if not len(table):
        return None
    rank = np.tile(table["rank"].to_numpy(), 2)
    codes, labels = direction_codes(traces)
    kind = np.tile(codes[known], 2)
    start = table["ts_us"].to_numpy()
    ts = np.concatenate([start, start + table["dur_us"].to_numpy()])
    bw = table["bw_gbps"].to_numpy()
    delta = np.concatenate([bw, -bw])
    # np.lexsort((delta, ts, kind, rank)): ends (negative) before starts at equal times; one
    # group per (rank, direction), whose starts and ends come as a few sorted runs
    order = span_order(rank * (len(labels) + 1) + kind, ts, delta)
    rank, kind, ts, delta = rank[order], kind[order], ts[order], delta[order]
    new_key = np.r_[True, (rank[1:] != rank[:-1]) | (kind[1:] != kind[:-1])]
    group = np.cumsum(new_key) - 1
    total = np.cumsum(delta)
    before = (total - delta)[new_key][group]
    level = total - before
    level[np.abs(level) < 1e-9 * np.abs(bw).max()] = 0.0  # float residue of +x - x
    last_at_time = np.r_[(group[1:] != group[:-1]) | (ts[1:] != ts[:-1]), True]
    return (rank[last_at_time], kind[last_at_time], np.asarray(labels, dtype=object), ts[last_at_time],
            level[last_at_time])


SUMMARY_COLUMNS = ("transfers", "bytes_total", "busy_us", "bw_gbps", "bw_max_gbps", "kineto_bw_mean_gbps")


def _summary(table: pd.DataFrame, keys: list[str], codes: tuple[np.ndarray, np.ndarray] | None = None
             ) -> pd.DataFrame:
    """``keys`` x :data:`SUMMARY_COLUMNS` of the transfers ``table``; ``codes``: its direction
    column's (:func:`direction_codes`)."""
    cols = keys + list(SUMMARY_COLUMNS)
    if not len(table):
        return pd.DataFrame(columns=cols)
    known = np.isfinite(table["bytes"].to_numpy())
    g = Grouped(table, keys, codes={"direction": codes} if codes is not None else None)
    busy_known = g.sum(np.where(known, table["dur_us"].to_numpy(), 0.0))
    nbytes = g.sum("bytes", min_count=1)  # NaN when no transfer of the group reports bytes
    with np.errstate(invalid="ignore", divide="ignore"):
        bw = (nbytes / BYTES_PER_GB) / (np.where(busy_known > 0, busy_known, np.nan) / US_PER_S)
    out = g.frame({
        "transfers": g.size(),
        "bytes_total": nbytes,
        "busy_us": g.sum("dur_us"),
        "bw_gbps": bw,
        "bw_max_gbps": g.max("bw_gbps"),
        "kineto_bw_mean_gbps": g.mean("kineto_bw_gbps"),
    })
    return out[cols]


def memory_bw_summary(traces: TraceSet) -> pd.DataFrame:
    """Per (rank, stream, direction): transfers, bytes, busy µs, bytes/busy-time GB/s (over
    transfers with known bytes), the fastest single transfer, and the mean of Kineto's GB/s."""
    return _summary(transfers(traces), ["rank", "stream", "direction"], direction_codes(traces))


def memory_bw_by_direction(traces: TraceSet) -> pd.DataFrame:
    """:func:`memory_bw_summary` per (rank, direction), all streams together."""
    return _summary(transfers(traces), ["rank", "direction"], direction_codes(traces))


def memory_bw_by_step(traces: TraceSet) -> pd.DataFrame:
    """:func:`memory_bw_summary` per (rank, profiler step, direction); a transfer belongs to
    the step of the launch that enqueued it (-1 outside any step)."""
    return _summary(transfers(traces), ["rank", "iteration", "direction"], direction_codes(traces))
