"""Integer group keys for string-valued groups, so that pandas never hashes long names.

Kernel names and kernel sequences are long strings (hundreds of characters); a pandas
``groupby`` on them hashes and compares every row's string. Events carry their names as codes
into the rank's string table, so the groups can be formed on integers instead, with keys that
sort the way the strings do: the grouped rows, their order and the computed numbers are the
same as grouping by the strings, and only the few distinct strings are ever compared.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import distinct_codes


def string_keys(codes: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(key, labels): per code, the rank of its string ``table[code]`` among the distinct
    strings of ``codes``, and those strings in sorted order (``labels[key]`` is the string).

    Grouping by ``key`` groups and orders rows exactly as grouping by the strings would: equal
    strings share a key and keys follow Python's string order.

    >>> string_keys(np.array([2, 0, 2]), np.array(["b", "x", "a"], dtype=object))
    (array([0, 1, 0]), array(['a', 'b'], dtype=object))
    """
    uniq, inverse = distinct_codes(codes, len(table))
    labels, rank = np.unique(np.asarray(table, dtype=object)[uniq], return_inverse=True)
    return rank.ravel()[inverse], labels


def run_ids(codes: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(id, first): a dense id per run ``codes[starts[i]:starts[i+1]]`` (the last run ends at
    ``len(codes)``), equal for runs with equal codes, and for each id one run that has it.

    Runs of one length form a matrix whose distinct rows ``np.unique`` finds exactly; the loop
    is over the distinct run lengths, not over runs.

    >>> run_ids(np.array([5, 5, 6, 5, 6, 5]), np.array([0, 1, 3, 5]))
    (array([0, 1, 1, 0]), array([0, 1]))
    """
    ids = np.empty(len(starts), dtype=np.int64)
    if not len(starts):
        return ids, np.empty(0, dtype=np.int64)
    lengths = np.diff(np.append(starts, len(codes)))
    by_length = np.argsort(lengths, kind="stable")
    bounds = np.flatnonzero(np.r_[True, np.diff(lengths[by_length]) != 0, True])
    firsts, next_id = [], 0
    for lo, hi in zip(bounds[:-1], bounds[1:]):  # a loop over distinct run lengths
        runs = by_length[lo:hi]
        matrix = codes[starts[runs][:, None] + np.arange(lengths[runs[0]])]
        first, inverse = _distinct_rows(matrix)
        ids[runs] = next_id + inverse
        firsts.append(runs[first])
        next_id += len(first)
    return ids, np.concatenate(firsts)


def _distinct_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, inverse): the first row of each distinct row of an integer matrix, and for each
    row the number of its distinct row (numbered in the rows' lexicographic order). A stable
    lexsort on the columns, cheaper than ``np.unique(axis=0)``'s structured-dtype sort."""
    order = np.lexsort(matrix.T[::-1])
    ordered = matrix[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    inverse = np.empty(len(order), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return order[new], inverse


def group_frame(index: pd.Index, columns: dict) -> pd.DataFrame:
    """``pd.DataFrame(columns).reset_index()`` for per-group results of one groupby (Series on
    its result ``index``, arrays or lists in the same order): built from the values, without
    aligning every Series on the index first."""
    values = {c: v.array if isinstance(v, pd.Series) else v for c, v in columns.items()}
    return pd.DataFrame(values, index=index).reset_index()
