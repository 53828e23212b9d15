"""The values a JSON document holds until it is written: its tables as :class:`Records` (rows
made from a DataFrame when read), long lists of numbers as :class:`Floats` (float64, not Python
floats), and the cleaning that makes cells what their JSON reads back (NaN and inf as None,
numpy scalars unwrapped) a column or a list at a time, in C where it can be. The encoding is
:mod:`perfreport.documents.jsondoc`'s."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence


class Records(Sequence):
    """The rows of one table of a JSON document (``summary.json``), as dicts made from the
    table's DataFrame when they are read. A document of many ranks then never holds all its
    rows as Python dicts at once (a dict per row takes ~10 × the DataFrame's columns): the JSON
    encoder turns one table at a time into its list (:meth:`tolist`, as numpy's), and a report
    takes the rows it reads. Rows are what the JSON holds (NaN and inf are None). Read-only:
    a row changed after reading is not kept."""

    __slots__ = ("frame",)
    CHUNK = 1024

    def __init__(self, frame) -> None:
        self.frame = frame

    def __len__(self) -> int:
        return len(self.frame)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self._rows(self.frame.iloc[index])
        n = len(self.frame)
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(index)
        return self._rows(self.frame.iloc[i:i + 1])[0]

    def __iter__(self) -> Iterator[dict]:
        for start in range(0, len(self.frame), self.CHUNK):
            yield from self._rows(self.frame.iloc[start:start + self.CHUNK])

    def tolist(self) -> list[dict]:
        return self._rows(self.frame)

    @staticmethod
    def _rows(frame) -> list[dict]:
        """The rows of ``frame`` as ``DataFrame.to_dict(orient="records")`` gives them (Python
        scalars), NaN and inf as None. Built a column at a time (one ``tolist()`` per column, then
        one ``zip`` into dicts): ``to_dict`` goes through ``itertuples`` and was most of a
        report's build time (a tenth of a second on a 200 MB trace)."""
        columns = frame.columns.tolist()
        if not columns:
            return [{} for _ in range(len(frame))]
        values = [_column_values(column) for _, column in frame.items()]
        return [dict(zip(columns, row)) for row in zip(*values)]

    def __eq__(self, other) -> bool:
        if isinstance(other, (Records, list, tuple)):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Records({len(self)} rows)"


class Floats(Sequence):
    """Numbers of a document (a check's samples) held as float64 in one bytes object, 8 bytes a
    value where a tuple of Python floats takes 32: the 15 checks of a compare of two ranks of
    345,319 steps each keep ~10 M samples (15 x 2 x 345,319), and its verdict, which made them
    Python floats, raised the parent's peak by 451-456 MB (to 1,342-1,354 MB; 1,041-1,047 MB
    since). Read as Python floats (NaN as itself); the JSON encoder writes them as a list (NaN
    as null), and a plain document keeps them as they are. Immutable and hashable, and equal to
    a list or tuple of the same numbers, as the tuple it stands in for."""

    __slots__ = ("_data",)

    def __init__(self, values=()) -> None:
        import numpy as np

        self._data = np.ascontiguousarray(values, dtype=np.float64).ravel().tobytes()

    def array(self):
        """The numbers as a read-only float64 array (no copy)."""
        import numpy as np

        return np.frombuffer(self._data, dtype=np.float64)

    def tolist(self) -> list[float]:
        return self.array().tolist()

    def __len__(self) -> int:
        return len(self._data) // 8

    def __getitem__(self, index):
        return self.array()[index].tolist()

    def __iter__(self) -> Iterator[float]:
        return iter(self.tolist())

    def __eq__(self, other) -> bool:
        if isinstance(other, Floats):
            return self._data == other._data
        if isinstance(other, (list, tuple)):
            return self.tolist() == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._data)

    def __repr__(self) -> str:
        return f"Floats({len(self)} values)"


def table_columns(table, keys: Sequence[str]) -> list[list]:
    """The values of ``keys`` in the rows of a document table (a list of row dicts, or
    :class:`Records`), a list per key, as reading the rows gives them (None where a row lacks
    the key; entries that are not dicts skipped; anything else: no rows). A reader of a few
    columns of a long table (a row per step: 170,000 on a many-step job) then makes no dict per
    row: a Records table's columns are listed as its rows would hold them."""
    if isinstance(table, Records):
        frame = table.frame
        if frame.columns.is_unique:
            return [_column_values(frame[k]) if k in frame.columns else [None] * len(frame) for k in keys]
        table = table.tolist()  # (two columns of one name: the rows say which wins)
    rows = [r for r in table if isinstance(r, dict)] if isinstance(table, list) else []
    return [[r.get(k) for r in rows] for k in keys]


_NATIVE = frozenset({str, int, float, bool, type(None)})
"""Types a value of an object column keeps as it is (pandas' ``maybe_box_native`` leaves them)."""


def _column_values(column) -> list:
    """One column's values as :meth:`Records._rows` lists them: Python scalars (numpy ones
    unwrapped, as pandas' ``maybe_box_native`` does for ``to_dict``), NaN and inf as None."""
    import numpy as np

    dtype = column.dtype
    if isinstance(dtype, np.dtype) and dtype.kind in "iub":
        return column.to_numpy().tolist()
    if isinstance(dtype, np.dtype) and dtype.kind == "f":
        array = column.to_numpy()
        return _none_where(array.tolist(), ~np.isfinite(array))
    from pandas.core.dtypes.cast import maybe_box_native

    import pandas as pd

    if (isinstance(dtype, np.dtype) and dtype.kind == "O") or isinstance(dtype, pd.StringDtype):
        out = column.to_numpy(dtype=object).tolist()  # the objects themselves (missing text: its NA value)
    else:  # other extension types (categories, nullable numbers) and dates: as iterating them gives
        out = list(column)
    loose = dtype.kind in "fO"  # where NaN/inf can be
    kinds = set(map(type, out))
    if kinds <= _NATIVE:  # plain values (text, numbers, None): only non-finite floats change, found in C
        if loose and float in kinds:
            cells = np.array(out, dtype=object)
            _none_where(out, pd.isna(cells) | (cells == math.inf) | (cells == -math.inf))
        return out

    def cell(v):  # a value that is not text: unwrapped, NaN and inf as None where they can be
        v = v if type(v) in _NATIVE else maybe_box_native(v)
        return None if loose and type(v) is float and not math.isfinite(v) else v
    return [v if type(v) is str else cell(v) for v in out]  # (text, most cells, passes as it is)


_AS_THEY_ARE = frozenset({str, int, bool, type(None)})
"""Types :func:`_plain` leaves as they are (a float may be NaN or inf, which become None)."""

FLOAT_LIST_MIN = 64
"""Lists at least this long are checked for being all floats (:func:`finite_float_list`)."""


class CleanList(list):
    """A list as its JSON reads back, made by :func:`finite_float_list` or :func:`scalar_list`:
    :func:`_plain` (and the report's own cleaning) pass it on as it is instead of reading every
    item again. A compare's document is cleaned when it is made and again when its report is
    built from it: for the 173,000-step pair, ~0.12 s of the second pass."""

    __slots__ = ()


def finite_float_list(value: list | tuple) -> list | None:
    """``value`` as a new list with NaN and inf as None, when it is a long list (or tuple) of
    Python floats only; None otherwise (the caller goes item by item). A compare's checks keep
    every step's sample: on a job of 37,000 steps, two lists of 37,000 floats per check, which
    a Python call per item took most of a second to clean; here the types are read and the
    non-finite ones found in C (the floats read once more by ``np.fromiter``: 1.5 ms per 173,000
    against 3.2 for an array made from a list)."""
    if type(value) is CleanList:
        return value
    if len(value) < FLOAT_LIST_MIN or set(map(type, value)) != {float}:
        return None
    import numpy as np

    return _none_where(CleanList(value), ~np.isfinite(np.fromiter(value, np.float64, len(value))))


def scalar_list(value: list | tuple) -> list | None:
    """``value`` as a new list when it is a long list (or tuple) of ints, texts, booleans and
    None only: nothing in it changes on the way to JSON, so it needs no look item by item (a
    compare's judged steps: 173,000 ints a side on a many-step job); None otherwise."""
    if type(value) is CleanList:
        return value
    if len(value) < FLOAT_LIST_MIN or not set(map(type, value)) <= _AS_THEY_ARE:
        return None
    return CleanList(value)


def _none_where(values: list, bad) -> list:
    """``values`` with None where ``bad`` (a boolean array) holds, changed in place: a loop over
    the few NaN/inf; where they are many (a column of NaN: a CPU-only rank's GPU figures per
    step), through an object array in C (a million NaN: 0.12 s looped, 0.03 s so)."""
    import numpy as np

    where = np.flatnonzero(bad)
    if len(where) == len(values):
        values[:] = [None] * len(values)
    elif len(where) > len(values) // 4:
        cells = np.empty(len(values), dtype=object)
        cells[:] = values
        cells[where] = None
        values[:] = cells.tolist()
    else:
        for i in where.tolist():
            values[i] = None
    return values
