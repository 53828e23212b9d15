"""Per-key samples of one gate side: the (run, rank, step) x key sums the per-key checks compare.

The op and collective tables of a :class:`~perfreport.gate.metrics.SideData` hold a row per
(sample, key) where the key ran: a kernel, a copy kind, a collective on its process group
(:func:`key_of`). The structural, relative, variant and host-wait checks ask for the same
keys and sums many times, so each side codes its keys once (:func:`table_keys`,
:func:`sorted_keys`) and makes each sample x key table once (:func:`keyed_samples`), with the
numbers pandas' pivot table gives.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..analyses.grouping import distinct_rows
from .metrics import SAMPLE, SideData


def keyed_samples(side: SideData, table: str, key_columns: tuple[str, ...], value: str, keys: list) -> pd.DataFrame:
    """A (run, rank, step) x key table of ``value`` from the op or collective table (0 where a
    key has no row in a sample), over every sample of the side; columns are the ``keys``."""
    index = _samples_index(side)
    if not len(_table(side, table)) or not keys:
        return pd.DataFrame(0.0, index=index, columns=pd.Index(keys, dtype=object))
    return _wide(side, table, key_columns, value).reindex(index=index, columns=keys, fill_value=0.0).astype(np.float64)


def _samples_index(side: SideData) -> pd.MultiIndex:
    """The side's samples as a pivot's index, made once (345,319 steps: 10 ms a call)."""
    if "index" not in side._pivots:
        side._pivots["index"] = pd.MultiIndex.from_frame(side.steps[SAMPLE])
    return side._pivots["index"]


def _wide(side: SideData, table: str, key_columns: tuple[str, ...], value: str) -> pd.DataFrame:
    """The side's sample x key sums of ``value`` (:func:`_pivot_sums`), made once: the
    structural, relative, variant and host-wait checks ask for the same ones."""
    if (table, key_columns, value) not in side._pivots:
        values = _table(side, table)[value].to_numpy(np.float64)
        side._pivots[(table, key_columns, value)] = _pivot_sums(side, table, key_columns, values)
    return side._pivots[(table, key_columns, value)]


PIVOTS = tuple((table, key_columns, value) for table, key_columns in (("op_steps", ("key",)),
                                                                      ("collectives_per_step", ("kind", "process_group")))
               for value in ("count", "dur_us"))
"""The (table, key columns, value) sample x key tables the structural and relative checks read."""


def prepare(side: SideData) -> None:
    """Make the side's own sample x key tables (:data:`PIVOTS`) and its samples' index now: the
    checks then only line them up with the other side's keys. A compare makes them while the
    other side's ranks still run (:func:`perfreport.pipeline.compare_many`)."""
    _samples_index(side)
    for table, key_columns, value in PIVOTS:
        if len(_table(side, table)):
            _wide(side, table, key_columns, value)


def _table(side: SideData, table: str) -> pd.DataFrame:
    """The side's per-step table named ``table`` (empty when the side has none)."""
    frame = {"op_steps": side.ops, "cpu_ops": side.cpu_ops, "collectives_per_step": side.collectives}[table]
    return frame if frame is not None else side.ops.iloc[0:0]


def table_keys(side: SideData, table: str, key_columns: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(code per row, distinct keys): the :func:`key_of` keys of the side's ``table``, as a code
    per row into the distinct keys, which come in order of first appearance (NaN, if a key is
    missing, one of them). Made once per side, table and key columns: the checks ask for the
    same keys again and again, and hashing every row's text each time (206,000 (op, step) rows
    a side on a 37,000-step rank: 30 ms a pass) was most of the verdict's time."""
    memo = side._pivots
    if ("keys", table, key_columns) not in memo:
        frame = _table(side, table)
        codes, distinct = pd.factorize(key_of(frame, key_columns), use_na_sentinel=False)
        memo[("keys", table, key_columns)] = (codes.astype(np.intp, copy=False), np.asarray(distinct, dtype=object))
    return memo[("keys", table, key_columns)]


def sorted_keys(side: SideData, table: str, key_columns: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`table_keys` as ``pd.factorize(keys, sort=True)`` gives them: per row the key's
    position among the distinct keys in sorted order (-1 for a missing key), and those keys."""
    codes, distinct = table_keys(side, table, key_columns)
    present = np.array([isinstance(k, str) for k in distinct.tolist()], dtype=bool)  # (NaN: no key)
    order = np.flatnonzero(present)[np.argsort(distinct[present], kind="stable")]
    position = np.full(len(distinct), -1, dtype=np.intp)
    position[order] = np.arange(len(order))
    return position[codes], distinct[order]


def _samples_of(side: SideData, table: str) -> tuple[np.ndarray, pd.MultiIndex]:
    """(sample of each row, the samples): the rows' (run, rank, step) numbered in sorted order
    (a pivot's index). Made once per side and table, for every value and key columns."""
    memo = side._pivots
    if ("samples", table) not in memo:
        columns = [_table(side, table)[c].to_numpy() for c in SAMPLE]
        first, sample = distinct_rows(np.stack(columns, axis=1))
        memo[("samples", table)] = (sample, pd.MultiIndex.from_arrays([c[first] for c in columns], names=SAMPLE))
    return memo[("samples", table)]


def _pivot_sums(side: SideData, table: str, key_columns: tuple[str, ...], values: np.ndarray) -> pd.DataFrame:
    """``frame.assign(_key=key_of(frame, key_columns), v=values).pivot_table(index=SAMPLE,
    columns="_key", values="v", aggfunc="sum", fill_value=0.0)`` of the side's ``table``, made
    directly: the same frame (samples and keys sorted, one block laid out as the pivot lays it
    out, so what is computed from it adds in the same order) and the same sums (pandas' grouped
    sum over the rows in their order, as the pivot does), without the pivot's general
    machinery, which was half of the gate's time."""
    frame = _table(side, table)
    samples = frame[SAMPLE]
    if samples.isna().to_numpy().any():  # (never in a side's tables; the pivot drops such rows)
        return frame.assign(_key=key_of(frame, key_columns), _v=values).pivot_table(
            index=SAMPLE, columns="_key", values="_v", aggfunc="sum", fill_value=0.0)
    sample, sample_index = _samples_of(side, table)  # rows sorted by run, rank, step, as the pivot's index
    key, key_values = sorted_keys(side, table, key_columns)
    cell = sample * len(key_values) + key
    sums = pd.Series(values).groupby(cell, sort=False).sum()
    out = np.zeros(len(sample_index) * len(key_values), dtype=np.float64)
    out[sums.index.to_numpy()] = sums.to_numpy(np.float64)
    return pd.DataFrame(out.reshape(len(sample_index), len(key_values)), copy=False,  # as is: samples x keys
                        index=sample_index, columns=pd.Index(key_values, name="_key"))


def key_of(frame: pd.DataFrame, key_columns: tuple[str, ...]) -> np.ndarray:
    """The text key of each row: the key columns joined by a space ("all_reduce pg0")."""
    key = frame[key_columns[0]].astype(str)
    for column in key_columns[1:]:
        key = key + " " + frame[column].astype(str)
    return key.to_numpy(dtype=object)


__all__ = ["PIVOTS", "keyed_samples", "key_of", "prepare", "table_keys", "sorted_keys"]
