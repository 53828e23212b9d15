"""Integer group keys for string-valued groups, so that pandas never hashes long names.

Kernel names and kernel sequences are long strings (hundreds of characters); a pandas
``groupby`` on them hashes and compares every row's string. Events carry their names as codes
into the rank's string table, so the groups can be formed on integers instead, with keys that
sort the way the strings do: the grouped rows, their order and the computed numbers are the
same as grouping by the strings, and only the few distinct strings are ever compared.

:class:`Grouped` is the other half: the per-group aggregations of the summaries (sizes, sums,
means, extremes, medians, quantiles) in numpy, because pandas' ``groupby`` costs milliseconds
per aggregation however few the rows, and that fixed cost, paid by every analysis of every
rank, added up to more than the work itself on traces below ~100 MB.
"""

from __future__ import annotations

import functools

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from ..model import distinct_codes, fits_a_presence_table

try:
    from . import _groupsum  # type: ignore[attr-defined]
except ImportError:  # the extension is optional (no compiler at install): numpy and pandas sum alone
    _groupsum = None


def coded_texts(labels, which: np.ndarray) -> pd.Categorical:
    """``labels[which]`` as a categorical text column: the distinct labels, sorted, are its
    categories (two positions of ``labels`` may hold one text) and each row holds a small code.
    Texts that repeat over millions of rows (the kind of each collective call, the key of each
    part of a step) are then held, grouped and pickled as codes, never as a Python string a row."""
    distinct, position = np.unique(np.asarray(labels, dtype=object), return_inverse=True)
    return pd.Categorical.from_codes(position.ravel()[which] if len(which) else np.empty(0, np.int8),
                                     categories=pd.Index(distinct, dtype=TEXT_DTYPE))


def texts_of_codes(codes: np.ndarray, n_codes: int, text_of) -> pd.Categorical:
    """``text_of(code)`` per row of ``codes`` (string codes in -1 … ``n_codes`` - 1) as a
    :func:`coded_texts` column, ``text_of`` called once per distinct code."""
    uniq, inverse = distinct_codes(codes, n_codes)
    return coded_texts([text_of(c) for c in uniq.tolist()], inverse)


TEXT_DTYPE = pd.Index(["text"]).dtype
"""pandas' own dtype for texts (``str`` from pandas 3 on, ``object`` before): the categories'
dtype of every :func:`coded_texts` column, which is what pandas gives categories it unites."""


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

    Runs of one length form a matrix whose distinct rows are found exactly, as byte strings
    where the length has few runs per code (:data:`BYTES_ROWS_PER_COLUMN`), else column by column
    (:func:`distinct_rows`); the loop is over the distinct run lengths, not over runs.

    >>> run_ids(np.array([5, 5, 6, 5, 6, 5]), np.array([0, 1, 3, 5]))
    (array([0, 1, 1, 0]), array([0, 1]))
    """
    ids = np.empty(len(starts), dtype=np.int64)
    if not len(starts):
        return ids, np.empty(0, dtype=np.int64)
    lengths = np.diff(np.append(starts, len(codes)))
    by_length = np.argsort(lengths, kind="stable")
    bounds = np.flatnonzero(np.r_[True, np.diff(lengths[by_length]) != 0, True])
    packed = _packed(codes)
    firsts, next_id = [], 0
    for lo, hi in zip(bounds[:-1], bounds[1:]):  # a loop over distinct run lengths
        runs = by_length[lo:hi]
        at = starts[runs][:, None] + np.arange(lengths[runs[0]])
        bytewise = packed is not None and len(runs) < BYTES_ROWS_PER_COLUMN * at.shape[1]
        first, inverse = _distinct_bytes(packed[at]) if bytewise else distinct_rows(codes[at])
        ids[runs] = next_id + inverse
        firsts.append(runs[first])
        next_id += len(first)
    return ids, np.concatenate(firsts)


BYTES_ROWS_PER_COLUMN = 400
"""A run length's runs are told apart as byte strings (:func:`_distinct_bytes`) while there are
fewer than this many per column, else column by column (:func:`distinct_rows`). Measured: 50
runs of 20 codes 9 µs as bytes against 195 µs; 5,000 of 16, 559 against 1,816 µs; 5,000 of 4,
536 against 277 µs; 50,000 of 2, 7.2 against 1.3 ms (a byte sort compares row by row, the
columns' numbering is linear in the rows)."""


def _packed(codes: np.ndarray) -> np.ndarray | None:
    """``codes`` numbered densely in their sorted order (:func:`_dense`), as 1- or 2-byte
    big-endian integers (so that byte order is numeric order), for :func:`_distinct_bytes`; None
    where there are more than 65,536 distinct codes or they are not integers.

    Why: :func:`distinct_rows` numbers each column of a run length's matrix apart (a presence
    table each, ~10-60 µs of numpy calls), right for many rows of few columns; the runs of kernel
    sequences are the other shape, few rows of tens to hundreds of columns: the hta_sampled-grown
    16 x 50 MB job's kernel sequences took 0.28 CPU s over its 32 ranks, 0.08 s as bytes (its
    ``compare`` 6.31-6.38 -> 5.89-6.14 s)."""
    if codes.dtype.kind not in "iu":
        return None
    dense, count = _dense(codes)
    return None if count > 1 << 16 else dense.astype(np.uint8 if count <= 1 << 8 else ">u2")


def _distinct_bytes(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`distinct_rows` of a matrix of :func:`_packed` codes: each row one byte string,
    sorted as bytes (the rows' lexicographic order), the first occurrence of each kept."""
    rows = np.ascontiguousarray(matrix).view(np.dtype((np.void, matrix.shape[1] * matrix.itemsize))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    return first, inverse.ravel()


def tuple_columns(tuples: Sequence[tuple], which: np.ndarray) -> np.ndarray:
    """``tuples[i]`` for each ``i`` of ``which``, as an object matrix (a column per member): the
    strings of coded keys (a part's (kind, key)), gathered, not looked up row by row."""
    width = len(tuples[0]) if len(tuples) else 0
    table = np.empty((len(tuples), width), dtype=object)
    table[:] = tuples
    return table[which]


def distinct_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(first, inverse) of the rows of an integer matrix (n x k), as ``np.unique(matrix, axis=0,
    return_index=True, return_inverse=True)`` gives them: the first occurrence of each distinct
    row, and per row the number of its distinct row in the rows' lexicographic order.

    ``np.unique(axis=0)`` sorts the rows as structured records, several times slower than what
    is done here. Each column is numbered densely (a presence table over its range, or a sort),
    the numbers make one integer per row that orders as the row does, and that integer is
    numbered the same way: linear in the rows where the ranges are small (the (run, rank, step)
    samples of a gate side, the devices of the memory events: 268 ms -> 1.7 ms for 487,200
    events). Keys too wide for one integer take a lexsort of the columns."""
    matrix = np.asarray(matrix)
    n = len(matrix)
    if n == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    matrix = matrix.reshape(n, -1)
    key = np.zeros(n, dtype=np.int64)
    span = 1
    for column in matrix.T:
        dense, count = _dense(column)
        if span * count >= 2**62:  # no room for one integer per row: sort the rows themselves
            return _lexsorted_rows(matrix)
        key = key * count + dense
        span *= count
    if not fits_a_presence_table(span, n):  # a table that wide costs more than a sort
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
        return first, inverse.ravel()
    uniq, inverse = distinct_codes(key - 1, span)  # (codes from -1: the key shifted by one)
    first = np.full(len(uniq), n, dtype=np.int64)
    np.minimum.at(first, inverse, np.arange(n))  # each distinct row's first occurrence
    return first, inverse


def _dense(column: np.ndarray) -> tuple[np.ndarray, int]:
    """(per value its number among the column's distinct values in sorted order, how many):
    :func:`presence_codes` where the range allows it, else a sort."""
    found = presence_codes(column)
    uniq, dense = found if found is not None else np.unique(column, return_inverse=True)
    return dense.ravel().astype(np.int64, copy=False), len(uniq)


def _lexsorted_rows(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`distinct_rows` by a stable lexsort on the columns (any integers)."""
    order = np.lexsort(matrix.T[::-1])
    ordered = matrix[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (ordered[1:] != ordered[:-1]).any(axis=1)
    inverse = np.empty(len(order), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return order[new], inverse


class Grouped:
    """Rows of a frame grouped by key columns, groups in sorted key order, with the
    aggregations the summaries use, in numpy.

    It gives what ``frame.groupby(keys, sort=True)`` gives (rows with a missing key dropped,
    missing values skipped; ``median`` and ``quantile`` bit for bit), at a fraction of the cost:
    pandas spends milliseconds per aggregation even on a few hundred rows, and the summaries
    run a dozen of them per table. One difference: sums are plain float sums where pandas
    compensates rounding (Kahan), so a sum or mean can differ in its last bit.
    """

    def __init__(self, frame: pd.DataFrame | Mapping[str, np.ndarray], keys: list[str],
                 value_orders: Mapping[str, np.ndarray] | None = None,
                 codes: Mapping[str, tuple[np.ndarray, np.ndarray]] | None = None):
        """``frame``: a DataFrame, or a mapping of column name to equal-length arrays (no frame
        needs to be built just to group). ``value_orders``: per column, its rows' stable sort
        order by value (:func:`value_order`), when another grouping of the same frame already
        has it: the medians and quantiles then sort only by group. ``codes``: per key column,
        :func:`sorted_codes` of it where the caller already has them (texts kept as codes)."""
        codes = codes or {}
        self._value_orders = value_orders or {}
        self.keys = list(keys)
        self._frame = frame
        n = len(self._key(self.keys[0])) if self.keys else len(frame)
        combined = np.zeros(n, dtype=np.int64)
        valid = np.ones(n, dtype=bool)
        for k in self.keys:  # mixed-radix code of the key tuple, in sorted key order
            key_codes, uniq = codes[k] if k in codes else column_codes(self._key(k))
            valid &= key_codes >= 0
            if len(uniq) and int(combined.max(initial=0)) > (2**62) // (len(uniq) + 1):
                combined = np.unique(combined, return_inverse=True)[1].ravel()  # keep the code within int64
            combined = combined * max(len(uniq), 1) + key_codes
        self.rows = np.flatnonzero(valid)
        self._every_row = len(self.rows) == n
        if not self._every_row:
            combined = combined[self.rows]
        uniq, self.ids = distinct_codes(combined, int(combined.max(initial=0)) + 1)  # a table, not a sort
        self.n = len(uniq)
        self.first = np.full(self.n, n, dtype=np.int64)
        np.minimum.at(self.first, self.ids, self.rows)  # a row of each group, for its key values
        self._sorted: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        self._sizes: np.ndarray | None = None

    def _column(self, name: str) -> np.ndarray:
        column = self._frame[name]
        return column.to_numpy() if isinstance(column, pd.Series) else np.asarray(column)

    def _key(self, name: str) -> np.ndarray | pd.Categorical:
        """A key column (:func:`column_values`)."""
        return column_values(self._frame[name])

    def _values(self, values) -> np.ndarray:
        """The values of the grouped rows, read only: the column itself when every row has its
        keys (no copy of a million values for each aggregation)."""
        v = self._column(values) if isinstance(values, str) else np.asarray(values)
        return v if self._every_row else v[self.rows]

    @staticmethod
    def _floats(v: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(``v`` (grouped rows' values) as float64, read only; where they are NaN, or None
        when none is: the aggregations then skip masking what is not there)."""
        v = np.asarray(v, dtype=np.float64)
        missing = np.isnan(v)
        return v, (missing if missing.any() else None)

    def size(self) -> np.ndarray:
        if self._sizes is None:
            self._sizes = np.bincount(self.ids, minlength=self.n).astype(np.int64)
        return self._sizes.copy()

    def _present(self, missing: np.ndarray | None) -> np.ndarray:
        """Non-missing values per group, as float64 sums."""
        return self.size().astype(np.float64) if missing is None else _sums(self.ids, ~missing, self.n)

    def count(self, values) -> np.ndarray:
        """Non-missing values per group."""
        v = self._values(values)
        if v.dtype.kind in "biu":
            return self.size()
        return np.bincount(self.ids, weights=~pd.isna(v), minlength=self.n).astype(np.int64)

    def sum(self, values, min_count: int = 0) -> np.ndarray:
        """Sum per group (missing values skipped); integer and bool columns sum to int64;
        NaN where fewer than ``min_count`` values are present."""
        v = self._values(values)
        if v.dtype.kind in "biu":
            out = np.zeros(self.n, dtype=np.int64)
            np.add.at(out, self.ids, v.astype(np.int64))
            return out
        v, missing = self._floats(v)
        if missing is not None and missing.all():  # nothing to add (a gloo rank's message sizes)
            return np.full(self.n, np.nan if min_count > 0 else 0.0)
        out = _sums(self.ids, v if missing is None else np.where(missing, 0.0, v), self.n)
        if min_count > 0:
            out = np.where(self._present(missing) >= min_count, out, np.nan)
        return out

    def mean(self, values) -> np.ndarray:
        v, missing = self._floats(self._values(values))
        if missing is not None and missing.all():  # no value in any group: three passes saved
            return np.full(self.n, np.nan)
        total = _sums(self.ids, v if missing is None else np.where(missing, 0.0, v), self.n)
        present = self._present(missing)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(present > 0, total / present, np.nan)

    def std(self, values) -> np.ndarray:
        """Sample standard deviation (ddof=1) of the non-missing values; NaN below two values.
        Two passes (mean, then squared deviations) where pandas updates a running variance:
        the last bits may differ."""
        v, missing = self._floats(self._values(values))
        present = self._present(missing)
        mean = self.mean(values)
        dev = v - mean[self.ids]
        if missing is not None:
            dev[missing] = 0.0
        squares = _sums(self.ids, dev * dev, self.n)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(present > 1, np.sqrt(squares / (present - 1)), np.nan)

    def max(self, values) -> np.ndarray:
        return self._extreme(values, np.fmax, -np.inf)

    def min(self, values) -> np.ndarray:
        return self._extreme(values, np.fmin, np.inf)

    def _extreme(self, values, ufunc, start: float) -> np.ndarray:
        v = self._values(values)
        if v.dtype.kind in "biu":
            out = np.full(self.n, np.iinfo(np.int64).min if start < 0 else np.iinfo(np.int64).max, dtype=np.int64)
            ufunc.at(out, self.ids, v.astype(np.int64))
            return out
        v, missing = self._floats(v)
        out = np.full(self.n, start)
        ufunc.at(out, self.ids, v)  # fmax/fmin skip NaN
        return np.where(self._present(missing) > 0, out, np.nan)  # all missing: NaN, as pandas

    def median(self, values) -> np.ndarray:
        """Median of the non-missing values (mean of the two middle ones for an even count)."""
        v, start, m = self._sorted_values(values)
        out = np.full(self.n, np.nan)
        has = m > 0
        lo = start + (m - 1) // 2
        hi = start + m // 2
        out[has] = np.where((m[has] % 2) == 1, v[lo[has]], (v[lo[has]] + v[hi[has]]) / 2)
        return out

    def quantile(self, values, q: float) -> np.ndarray:
        """Linear-interpolation quantile of the non-missing values, as pandas computes it."""
        v, start, m = self._sorted_values(values)
        out = np.full(self.n, np.nan)
        has = m > 0
        idx = q * (m[has] - 1)
        lo = np.floor(idx).astype(np.int64)
        hi = np.minimum(lo + 1, m[has] - 1)
        frac = idx - lo
        a, b = v[start[has] + lo], v[start[has] + hi]
        out[has] = a + (b - a) * frac
        return out

    def _sorted_values(self, values) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(values sorted by (group, value) with NaN last in each group, first position of each
        group, non-missing count of each group)."""
        key = values if isinstance(values, str) else None
        if key is not None and key in self._sorted:
            return self._sorted[key]
        v, missing = self._floats(self._values(values))
        given = self._value_orders.get(key) if key is not None else None
        sizes = self.size()
        start = np.cumsum(sizes) - sizes
        if given is not None and self._every_row:
            ordered = v[_by_group(self.ids, np.asarray(given), self.n)]
        elif self.n <= _SORT_EACH_MAX_GROUPS and not _signed_zero(v):
            ordered = _sorted_each_group(self.ids, v, start, sizes)
        else:
            ordered = v[_by_group_then_value(self.ids, v, self.n)]  # NaN sorts last within a group
        present = sizes if missing is None else self._present(missing).astype(np.int64)
        result = (ordered, start, present)
        if key is not None:
            self._sorted[key] = result
        return result

    def frame(self, columns: dict) -> pd.DataFrame:
        """The key columns (one row per group, in order) followed by ``columns``."""
        keys = {k: _values_at(self._key(k), self.first) for k in self.keys}
        return pd.DataFrame({**keys, **columns})


def _values_at(key: np.ndarray | pd.Categorical, rows: np.ndarray) -> np.ndarray:
    """A key column's values at ``rows``: a categorical column's as plain values (its texts), so
    a table keyed by it reads as one keyed by its texts."""
    if isinstance(key, pd.Categorical):
        return key.categories.to_numpy(dtype=object)[key.codes[rows]]
    return key[rows]


def column_values(column) -> np.ndarray | pd.Categorical:
    """A column (a Series, a Categorical or an array) as grouping reads it: a categorical one as
    its Categorical (its codes are its groups' codes), any other as a numpy array."""
    if isinstance(column, pd.Series):
        return column.array if isinstance(column.dtype, pd.CategoricalDtype) else column.to_numpy()
    return column if isinstance(column, pd.Categorical) else np.asarray(column)


def column_codes(column) -> tuple[np.ndarray, np.ndarray]:
    """:func:`sorted_codes` of a column: a categorical one's from its codes
    (:func:`category_codes`), never hashing its texts."""
    values = column_values(column)
    return category_codes(values) if isinstance(values, pd.Categorical) else sorted_codes(values)


def concat_columns(parts) -> np.ndarray | pd.Categorical:
    """One column from its parts (Series, Categoricals or arrays; the ranks' calls): categorical
    parts with their categories united (pandas makes plain objects of categoricals whose
    categories differ), else plain values. A part of plain texts (a digest cached by an earlier
    version) makes the column plain texts."""
    values = [column_values(p) for p in parts]
    if len(values) == 1:
        return values[0]
    if all(isinstance(v, pd.Categorical) for v in values):
        from pandas.api.types import union_categoricals

        return union_categoricals(values, sort_categories=True)
    return np.concatenate([np.asarray(v, dtype=object) if isinstance(v, pd.Categorical) else v for v in values])


def category_codes(values: pd.Categorical) -> tuple[np.ndarray, np.ndarray]:
    """:func:`sorted_codes` of a categorical column, from its codes: (code per value, -1 where
    missing; the categories, sorted). Its texts are never hashed or compared row by row: a gloo
    rank's 2 M collective calls keep their five text columns as categories (see
    :func:`perfreport.analyses.collectives.rank_collectives`)."""
    codes = values.codes.astype(np.int64)
    labels = values.categories.to_numpy(dtype=object)
    order = np.argsort(labels, kind="stable") if len(labels) > 1 else np.arange(len(labels))
    if np.all(order[1:] > order[:-1]):  # categories already sorted: codes as they are
        return codes, labels
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return np.where(codes >= 0, rank[np.clip(codes, 0, None)], -1), labels[order]


def run_positions(values: np.ndarray) -> np.ndarray:
    """Each element's position in its run of equal neighbours (0 where a run starts): where
    equal values lie together (sorted), each row's count of the earlier rows of its value.

    >>> run_positions(np.array([4, 4, 4, 7, 9, 9]))
    array([0, 1, 2, 0, 0, 1])
    """
    n = len(values)
    if not n:
        return np.empty(0, np.int64)
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    return np.arange(n) - np.repeat(starts, np.diff(np.r_[starts, n]))


def occurrences(group: np.ndarray) -> np.ndarray:
    """Each row's count of the rows before it with the same ``group`` (integer codes): pandas'
    ``groupby(group).cumcount()``, by one stable sort of the codes.

    >>> occurrences(np.array([5, 2, 5, 5, 2]))
    array([0, 0, 1, 2, 1])
    """
    order = np.argsort(group, kind="stable")
    out = np.empty(len(group), dtype=np.int64)
    out[order] = run_positions(group[order])
    return out


def sorted_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``pd.factorize(values, sort=True)``: (code per value, -1 where missing; the distinct
    values, sorted), through :func:`presence_codes` where it applies."""
    values = np.asarray(values)
    dense = presence_codes(values)
    if dense is not None:
        uniq, codes = dense
        return codes.astype(np.int64, copy=False), uniq.astype(values.dtype, copy=False)
    if values.dtype == object and len(values) > RUNS_FROM:
        # texts that come in long runs (a gloo rank's 2 M collective calls: their process group
        # is one text, their kind a few): only each run's first text is hashed, 30 -> 10 ms a column
        cuts = np.flatnonzero(values[1:] != values[:-1]) + 1
        if 8 * (len(cuts) + 1) <= len(values):
            first = np.r_[0, cuts]
            codes, uniq = pd.factorize(values[first], sort=True)
            return np.repeat(codes.astype(np.int64, copy=False), np.diff(first, append=len(values))), uniq
    return pd.factorize(values, sort=True)


RUNS_FROM = 4096
"""Texts from which :func:`sorted_codes` looks for runs of one text (below, the hash of every
row costs less than the look)."""


def presence_codes(values: np.ndarray, n_values: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
    """(the distinct values, ascending; each value's position among them) of integers coded
    through a presence table over their range (:func:`~perfreport.model.distinct_codes`)
    instead of a hash table: steps, ranks, streams, group keys span a range not much wider than
    their count. ``n_values``: the values are known to lie in [0, n_values). None where that
    does not apply (not integers, none, or a range too wide: a hash table does better)."""
    if values.dtype.kind not in "iu" or not len(values):
        return None
    lo = 0 if n_values is not None else int(values.min())
    span = n_values if n_values is not None else int(values.max()) - lo + 1
    if not fits_a_presence_table(span, len(values)):
        return None
    uniq, codes = distinct_codes(values - lo if lo else values, span)
    return (uniq + lo if lo else uniq), codes


def code_sums(code: np.ndarray, n_codes: int, columns: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(the distinct codes, ascending; each column's sum per code): exactly what
    ``pd.DataFrame(columns).groupby(code, sort=True).sum()`` gives, for integer codes in
    [0, ``n_codes``) and int64 or float64 columns.

    Why: pandas hashes every row's code to form the groups, ~0.1 s for the million (op, step)
    sums of a 37,000-step rank, where most groups hold one or two rows. Here the groups come
    from a presence table over the codes (:func:`~perfreport.model.distinct_codes`) and are
    summed as pandas sums them (:func:`_pandas_sums`); its group numbers come in order where
    the codes do."""
    uniq, group = distinct_codes(code, n_codes)
    return uniq, _pandas_sums(group, len(uniq), columns, bool(np.all(code[1:] >= code[:-1])))


def key_sums(key: np.ndarray, columns: Mapping[str, np.ndarray]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(the distinct int64 keys, ascending; each column's sum per key): what
    ``pd.DataFrame(columns).groupby(key, sort=False).sum()`` gives, sorted by key (the step x
    part keys of a rank's parts, 0.13 s of pandas' hashing for the 2 M parts of a rank of
    345,000 steps). pandas numbers the groups in order of first appearance, so its numbers come
    in order where each key's rows are one run."""
    if not len(key):
        return key.astype(np.int64), {name: np.asarray(v)[:0] for name, v in columns.items()}
    lo, hi = int(key.min()), int(key.max())
    uniq, group = distinct_codes(key - lo, hi - lo + 1)
    in_order = np.count_nonzero(key[1:] != key[:-1]) + 1 == len(uniq)
    return uniq.astype(np.int64) + lo, _pandas_sums(group, len(uniq), columns, in_order)


def _pandas_sums(group: np.ndarray, n: int, columns: Mapping[str, np.ndarray], in_order: bool) -> dict[str, np.ndarray]:
    """Each column's sum per group (``group``: each row's group in [0, n)) as pandas' grouped sum
    gives it, to the last bit, where pandas' group numbers come ``in_order`` or not.

    pandas takes one of two paths. Where its group numbers come in order and no float is NaN,
    pandas from 3.1 on adds each group's run of rows by ``np.add.reduceat`` (a one-row group's
    sum is its value, -0.0 kept): done here the same way. Otherwise its compensated (Kahan) loop
    adds a group's rows in order from 0.0, NaN skipped, which is exactly ``0.0 + v`` for one row
    and ``(0.0 + first) + second`` for two: computed here for all such groups at once; the rows
    of larger groups go to pandas, after a row of a group of their own numbered past the others,
    so that a subset whose groups come in order takes the same loop; where the C extension
    ``_groupsum`` is built, it runs that loop itself over every row (:func:`_kahan_sums`). Integers
    sum exactly either way."""
    floats = [np.asarray(v) for v in columns.values() if np.asarray(v).dtype.kind == "f"]
    by_reduceat = in_order and _sums_runs_by_reduceat() and not any(np.isnan(v).any() for v in floats)
    if len(group) == n:  # every group one row (a single rank's (step, op) sums): its value, as each path gives it
        return {name: _one_row_sums(group, np.asarray(values), by_reduceat) for name, values in columns.items()}
    if by_reduceat:
        heads = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if len(group) else group
        sums = {}
        for name, values in columns.items():
            values = np.asarray(values)
            sums[name] = np.zeros(n, dtype=values.dtype)
            if len(group):
                sums[name][group[heads]] = np.add.reduceat(values, heads)
        return sums
    if _groupsum is not None and all(v.dtype == np.float64 for v in floats):  # pandas' compensated loop, in C
        return {name: _kahan_sums(group, n, np.asarray(values)) for name, values in columns.items()}
    size = np.bincount(group, minlength=n)[group]
    rows = np.arange(len(group))
    first = np.full(n, len(group), dtype=np.int64)
    np.minimum.at(first, group, rows)  # each group's first row
    earlier, later = first[group] == rows, (size == 2) & (first[group] != rows)
    many = size > 2
    sums = {}
    for name, values in columns.items():
        values = np.asarray(values)
        out = sums[name] = np.zeros(n, dtype=values.dtype)
        if values.dtype.kind != "f":
            np.add.at(out, group, values)
            continue
        for at in (earlier & ~many, later):  # a group's first row, then the second of a two-row one
            total, add = out[group[at]], values[at]
            out[group[at]] = np.where(np.isnan(add), total, total + add)
    if many.any() and floats:
        ids = np.r_[n, group[many]]  # the extra first row's group, numbered past all: never in order
        rows_of = {name: np.r_[np.zeros(1, dtype=np.asarray(v).dtype), np.asarray(v)[many]]
                   for name, v in columns.items() if np.asarray(v).dtype.kind == "f"}
        grouped = pd.DataFrame(rows_of).groupby(ids).sum()
        grouped = grouped[grouped.index.to_numpy() < n]
        for name in rows_of:
            sums[name][grouped.index.to_numpy()] = grouped[name].to_numpy(np.float64)
    return sums


def _kahan_sums(group: np.ndarray, n: int, values: np.ndarray) -> np.ndarray:
    """One column's sums per group by pandas' compensated loop (the C extension ``_groupsum``; an
    integer column exactly, by ``np.add.at``)."""
    out = np.zeros(n, dtype=values.dtype if values.dtype.kind != "f" else np.float64)
    if values.dtype.kind != "f":
        np.add.at(out, group, values)
        return out
    _groupsum.kahan_sums(np.ascontiguousarray(group, dtype=np.int64), np.ascontiguousarray(values, dtype=np.float64),
                         out)
    return out


def _one_row_sums(group: np.ndarray, values: np.ndarray, by_reduceat: bool) -> np.ndarray:
    """:func:`_pandas_sums` of one column where each of the ``len(group)`` groups has one row:
    the row's value at its group, where pandas adds it by ``reduceat`` (as it is, -0.0 kept); by
    its compensated loop, ``0.0 + value`` (-0.0 is 0.0, NaN skipped: 0.0). The scatter alone: the
    general path's group sizes, first rows and masks cost a side of the triton-grown 1 GB
    ``compare`` (1.38 M one-row sums) 34 of its 44 ms."""
    out = np.zeros(len(group), dtype=values.dtype)
    if values.dtype.kind == "f" and not by_reduceat:
        values = np.where(np.isnan(values), 0.0, values + 0.0)
    out[group] = values
    return out


@functools.cache
def _sums_runs_by_reduceat() -> bool:
    """Whether this pandas sums groups whose rows come in runs by ``np.add.reduceat`` (3.1 and
    later: a lone -0.0 stays -0.0) rather than by its compensated loop from 0.0 (before)."""
    one = pd.Series([-0.0]).groupby(np.zeros(1, dtype=np.int64)).sum().to_numpy()
    return bool(np.signbit(one[0]))


def value_order(values: np.ndarray) -> np.ndarray:
    """Positions of ``values`` sorted by value, stably, NaN last: what :class:`Grouped` sorts
    by first for its medians and quantiles, to share among groupings of one frame."""
    return np.argsort(np.asarray(values, dtype=np.float64), kind="stable")


def _by_group_then_value(ids: np.ndarray, v: np.ndarray, n: int) -> np.ndarray:
    """``np.lexsort((v, ids))`` as two stable sorts: by value (a timsort: the values of an event
    column come in sorted runs), then by group id, a radix sort when the ids fit in 16 bits.
    Stable sorts compose, so the permutation is the same."""
    return _by_group(ids, value_order(v), n)


_SORT_EACH_MAX_GROUPS = 4096
"""Up to this many groups, :class:`Grouped` sorts each group's values on their own (a loop over
groups) rather than all values by a stable argsort."""


def _signed_zero(v: np.ndarray) -> bool:
    """Whether ``v`` holds a -0.0: it equals 0.0, so only a stable sort keeps their order."""
    zero = v == 0
    return bool(zero.any() and np.signbit(v[zero]).any())


def _sorted_each_group(ids: np.ndarray, v: np.ndarray, start: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The values of each group sorted (NaN last), groups in id order: what ``v`` ordered by
    (group, value) holds, without the permutation. Values only, so an unstable sort does:
    equal floats are the same value (-0.0 aside: :func:`_signed_zero`), and ``np.sort`` of a
    float array is ~2.5x faster than its stable argsort."""
    n = len(sizes)
    group = ids.astype(np.uint16) if n <= 1 << 16 else ids
    ordered = v[np.argsort(group, kind="stable")]  # a radix sort of the group ids
    for lo, hi in zip(start.tolist(), (start + sizes).tolist()):  # a loop over groups
        if hi - lo > 1:
            ordered[lo:hi].sort()
    return ordered


def _by_group(ids: np.ndarray, by_value: np.ndarray, n: int) -> np.ndarray:
    """``by_value`` (a stable order by value) stably re-sorted by group id."""
    group = ids[by_value]
    if n <= 1 << 16:
        group = group.astype(np.uint16)
    return by_value[np.argsort(group, kind="stable")]


def _sums(ids: np.ndarray, weights: np.ndarray, n: int) -> np.ndarray:
    """Per-group float sums (``np.bincount`` returns int64 for empty input: keep float64)."""
    return np.bincount(ids, weights=weights, minlength=n).astype(np.float64, copy=False)
