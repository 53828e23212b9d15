"""Matched GPU op calls: the i-th call of a key on a rank in the baseline against the i-th call
of that key on its paired rank in the candidate (the samples of a check whose steps are too few,
:func:`perfreport.gate.noise.paired_noise`).

A check asks for the calls of one class or one key; a side's invocation table has a row per GPU
op call (half a million on a 1 GB trace of one step). Filtering, sorting, numbering and joining
that table in pandas for every check cost 1.3 s of a compare's gate on such a trace (string
strips and sorts of every row, each time). So each side is prepared once (:class:`SideCalls`):
keys as codes into one sorted vocabulary shared by both sides, rows sorted as the matching reads
them; a check is then a mask over sorted integer columns and one search among the few
(rank, key) groups. The pairs come in the order pandas' sort, per-group count and inner merge
gave them (the baseline's sorted calls), so the sums over them are the same floats.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..analyses.grouping import run_positions
from ..model import COLLECTIVE
from .noise import Paired, paired_noise


@dataclass(frozen=True)
class SideCalls:
    """One side's calls sorted by (rank, key, run, step, call), as columns: rank, the key's code
    in the shared vocabulary (sorted, so codes order as the texts do), the class and duration."""

    rank: np.ndarray
    key: np.ndarray
    cls: np.ndarray
    classes: list[str]
    """The class of each code in ``cls``."""
    dur_us: np.ndarray
    stripped: np.ndarray
    """The vocabulary's texts without surrounding spaces (a check names its key that way)."""


def side_calls(tables: tuple[pd.DataFrame, pd.DataFrame]) -> tuple[SideCalls, SideCalls]:
    """Both sides' invocation tables prepared for :func:`matched_calls` (one vocabulary)."""
    factorized = [pd.factorize(t["key"].to_numpy(dtype=object)) for t in tables]
    vocabulary = sorted({k for _, uniques in factorized for k in uniques.tolist()})
    position = {k: i for i, k in enumerate(vocabulary)}
    stripped = np.array([str(k).strip() for k in vocabulary], dtype=object)
    out = []
    for table, (codes, uniques) in zip(tables, factorized):
        key = np.array([position[k] for k in uniques.tolist()], dtype=np.int64)[codes]
        rank = table["rank"].to_numpy(np.int64)
        order = np.lexsort((table["call"].to_numpy(), table["step"].to_numpy(), table["run"].to_numpy(), key, rank))
        cls, classes = pd.factorize(table["cls"].to_numpy(dtype=object))
        out.append(SideCalls(rank=rank[order], key=key[order], cls=cls[order], classes=classes.tolist(),
                             dur_us=table["dur_us"].to_numpy(np.float64)[order], stripped=stripped))
    return out[0], out[1]


def matched_calls(b: SideCalls, c: SideCalls, pairs: list[tuple[int, int]], cls: str | None = None,
                  key: str | None = None) -> Paired | None:
    """:func:`paired_noise` of the calls matched over the rank ``pairs`` (baseline, candidate):
    of class ``cls`` (None: every class but collectives), of ``key`` (stripped) if given; None
    when no call matches."""
    b_rows = np.flatnonzero(_selected(b, [x for x, _ in pairs], cls, key))
    c_rows = np.flatnonzero(_selected(c, [y for _, y in pairs], cls, key))
    if not len(b_rows) or not len(c_rows):
        return None
    b_rank, b_key, c_rank, c_key = b.rank[b_rows], b.key[b_rows], c.rank[c_rows], c.key[c_rows]
    width = len(b.stripped)
    b_n = run_positions(b_rank * width + b_key)  # numbered before the ranks are mapped (sorted by both)
    to_candidate = dict(pairs)
    distinct, inverse = np.unique(b_rank, return_inverse=True)
    b_rank = np.array([to_candidate[r] for r in distinct.tolist()], dtype=np.int64)[inverse.ravel()]
    b_group, c_group = b_rank * width + b_key, c_rank * width + c_key  # the candidate's ascend
    starts = np.flatnonzero(np.r_[True, c_group[1:] != c_group[:-1]])
    groups, counts = c_group[starts], np.diff(np.r_[starts, len(c_group)])
    at = np.minimum(np.searchsorted(groups, b_group), len(groups) - 1)
    hit = (groups[at] == b_group) & (b_n < counts[at])
    if not hit.any():
        return None
    return paired_noise(b.dur_us[b_rows[hit]], c.dur_us[c_rows[starts[at[hit]] + b_n[hit]]])


def _selected(side: SideCalls, ranks: list[int], cls: str | None, key: str | None) -> np.ndarray:
    mask = np.isin(side.rank, np.array(ranks, dtype=np.int64))
    if cls is not None:
        mask &= side.cls == _code(side.classes, cls)
    else:
        mask &= side.cls != _code(side.classes, COLLECTIVE)
    if key is not None:
        mask &= (side.stripped == key)[side.key]
    return mask


def _code(classes: list[str], name: str) -> int:
    """``name``'s code among ``classes`` (-2, no row's code, where absent)."""
    return classes.index(name) if name in classes else -2


__all__ = ["SideCalls", "matched_calls", "side_calls"]
