"""JSON documents: how summary.json and report.json are encoded.

One encoder for every JSON file perfreport writes (:func:`json_bytes`, :func:`json_text`):
msgspec in C, laid out by :mod:`~perfreport.documents.layout`, NaN and inf as null, numpy values
unwrapped. A document's tables may be :class:`~perfreport.documents.cells.Records` (rows made
from a DataFrame when read), so a document of many ranks never holds every row as a Python
dict; :func:`plain_document` is a document as its JSON reads back, what reports are built from.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from .cells import _NATIVE, Floats, Records, _column_values, finite_float_list, scalar_list
from .layout import INDENT, laid_out, rows_from_columns


def _plain(value, keep_records: bool = False):
    """JSON-ready Python value: numpy scalars/arrays unwrapped, NaN/inf -> None, keys as text,
    tuples as lists: what reading back the JSON of ``value`` gives. ``keep_records``: tables
    stay :class:`Records` (already JSON-ready, made into rows when read)."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or value is None:  # most values: as they are
        return value
    if kind is float:
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _plain(v, keep_records) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        floats = finite_float_list(value)
        if floats is not None:
            return floats
        plain = scalar_list(value)
        return plain if plain is not None else [_plain(v, keep_records) for v in value]
    if isinstance(value, Records):
        return value if keep_records else value.tolist()  # (its rows are made JSON-ready)
    if isinstance(value, Floats):
        return value if keep_records else _plain(value.tolist())  # (NaN and inf as None)
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy scalar / array
        return _plain(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def plain_document(document):
    """``document`` as its JSON would read back (see :func:`_plain`), tables left as Records:
    what a report is built from, without encoding and parsing the whole document."""
    return _plain(document, keep_records=True)


def _numpy_hook(value):
    """msgspec encoder hook: numpy scalars and arrays as plain Python values."""
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return value.tolist()
    raise NotImplementedError(type(value).__name__)


def json_text(value) -> str:
    """Stable, readable JSON (sorted keys off: the order of sections is meaningful): the text
    of :func:`json_bytes`."""
    return json_bytes(value).decode()


def json_bytes(value) -> bytes:
    """Stable, readable JSON as UTF-8 bytes, what files are written from (a document of many
    ranks is tens of MB: no str copy of it is made), laid out by :func:`~.layout.laid_out` (a
    table's row, a list of numbers on a line; the rest indented).

    Encoded by msgspec in C (NaN and inf become null there too): the standard library's
    indenting encoder is pure Python and took ~0.1 s per 10 MB report, twice per command.
    Values it cannot take directly (numpy keys) go through :func:`_plain` first; tables held
    as :class:`Records` are listed one at a time as the encoder reaches them."""
    return laid_out(_compact(value)) + b"\n"


def _compact(value) -> bytes:
    """``value``'s JSON without whitespace (see :func:`json_bytes`)."""
    import msgspec

    try:
        try:
            return msgspec.json.encode(value, enc_hook=_numpy_hook)
        except (TypeError, NotImplementedError):
            return msgspec.json.encode(_plain(value))
    except UnicodeEncodeError:  # a lone surrogate (hostile names): UTF-8 cannot hold it, a \u escape can
        return json.dumps(_plain(value), ensure_ascii=True, separators=(",", ":")).encode("ascii")


class JsonChunks(Iterable[bytes]):
    """The bytes of :func:`json_bytes` for a document, made member by member as they are
    iterated (each time afresh): a file is written from them without the whole text ever being
    in memory, only one table's at a time (a summary of thousands of ranks is GBs of JSON).

    :meth:`encode_ahead` encodes the members the document has so far while the command waits
    for something else (the PDF's layout in a child): iterating then reads them back and
    encodes only the members added since (the command's timings, added last). Encoded ahead
    into a file of the caller's (the staged temporary of the file the bytes are for), the rest
    is appended to that file (:meth:`finish`) instead: the text is written once, not copied."""

    __slots__ = ("document", "_ahead")
    READ_SIZE = 1 << 20

    def __init__(self, document) -> None:
        self.document = document
        self._ahead = None

    def encode_ahead(self, into: str | os.PathLike | None = None) -> None:
        """Encode the document's present members now: into a new file at ``into`` (which
        :meth:`finish` completes), else into an unnamed temporary file (not into memory: the
        text may be GBs). Those members must not change afterwards; members may be added. A
        53 MB report.json (a compare of two 200 MB many-step ranks) takes 0.35 s to encode,
        which a PDF's layout in a child hides; reading it back takes a few ms."""
        import tempfile

        if not isinstance(self.document, Mapping) or _is_leaf(self.document):
            return  # (written on one line: nothing to encode member by member)
        keys = tuple(self.document)
        f = open(into, "xb") if into is not None else tempfile.TemporaryFile()
        try:
            if into is not None:
                f.write(b"{")
            for chunk in _members(self.document, keys, 0, b""):
                f.write(chunk)
        except BaseException:
            f.close()
            if into is not None:
                Path(into).unlink(missing_ok=True)
            raise
        self.close()
        if into is not None:
            f.close()
        self._ahead = (f, keys) if into is None else (Path(into), keys)

    def staged(self) -> Path | None:
        """The file :meth:`encode_ahead` wrote into, when it was given one (else None)."""
        return self._ahead[0] if self._ahead is not None and isinstance(self._ahead[0], Path) else None

    def finish(self, f) -> None:
        """Complete the :meth:`staged` file, open as ``f`` (``r+b``): the members added since are
        appended, or, where the members encoded ahead changed, the whole document rewritten."""
        keys = self._ahead[1] if self._ahead is not None else ()
        if not keys or list(self.document)[:len(keys)] != list(keys):
            f.seek(0)
            f.truncate()
            for chunk in _chunks(self.document, b""):
                f.write(chunk)
            f.write(b"\n")
            return
        f.seek(0, os.SEEK_END)
        for chunk in _members(self.document, tuple(self.document)[len(keys):], len(keys), b""):
            f.write(chunk)
        f.write(b"\n}\n")

    def close(self) -> None:
        """Let the members encoded ahead go (their temporary file; a :meth:`staged` one is
        removed where it was not made the file it was for)."""
        if self._ahead is not None:
            if isinstance(self._ahead[0], Path):
                self._ahead[0].unlink(missing_ok=True)
            else:
                self._ahead[0].close()
            self._ahead = None

    def __iter__(self) -> Iterator[bytes]:
        if self._ahead is None or list(self.document)[:len(self._ahead[1])] != list(self._ahead[1]):
            yield from _chunks(self.document, b"")
            yield b"\n"
            return
        f, keys = self._ahead
        if isinstance(f, Path):
            with open(f, "rb") as staged:
                yield from iter(lambda: staged.read(self.READ_SIZE), b"")
        else:
            f.seek(0)
            yield b"{"
            yield from iter(lambda: f.read(self.READ_SIZE), b"")
        yield from _members(self.document, tuple(self.document)[len(keys):], len(keys), b"")
        yield b"\n}\n"


def _chunks(value, indent: bytes) -> Iterator[bytes]:
    """``value``'s JSON as :func:`json_bytes` lays it out at nesting ``indent``, without the final
    newline: a mapping that holds containers member by member and a table (:class:`Records`) a
    few thousand rows at a time, anything else in one piece."""
    if isinstance(value, Records) and len(value):
        inner = indent + b"  "
        encoded = _RowsJson(value.frame)
        yield b"["
        for start in range(0, len(value), _RowsJson.CHUNK):
            yield (b",\n" if start else b"\n") + inner
            yield encoded.rows(start, start + _RowsJson.CHUNK, inner)
        yield b"\n" + indent + b"]"
        return
    if not isinstance(value, Mapping) or _is_leaf(value):
        yield laid_out(_compact(value), len(indent) // INDENT)
        return
    yield b"{"
    yield from _members(value, tuple(value), 0, indent)
    yield b"\n" + indent + b"}"


def _is_leaf(mapping: Mapping) -> bool:
    """Whether ``mapping``'s JSON is a leaf object (no member is an array or an object), which
    :func:`~.layout.laid_out` puts on one line: the members are written one by one only where
    it would not."""
    for v in mapping.values():
        if type(v) in _NATIVE:
            continue
        if isinstance(v, (Mapping, list, tuple, Records)) or _compact(v)[:1] in (b"[", b"{"):
            return False  # (any other type, a numpy value, a date: as it encodes)
    return True


class _RowsJson:
    """The JSON of a table's rows, a slice at a time: exactly :func:`json_bytes` of their
    :meth:`Records.tolist`, without a dict per row. The rows are made as instances of a msgspec
    Struct whose fields encode under the column names, keys in column order, as the dicts do.
    Why: making the dicts was two thirds of writing a long table (0.21 of 0.32 s for 205,000
    collective calls of 16 columns, a gloo trace grown to 100 MB); the Structs take 0.04-0.08 s.
    A table whose column names cannot name a Struct's fields (repeated names) takes the dicts'
    way, and so does a slice the Structs' encoding refuses (a lone surrogate, an odd cell)."""

    CHUNK = 16384
    """Rows per slice: large enough that slicing the columns costs little, small enough that a
    slice's Python values stay a few MB."""

    def __init__(self, frame) -> None:
        import msgspec

        self.frame = frame
        names = [str(c) for c in frame.columns]
        self.row = None
        if len(set(names)) == len(names):
            fields = [f"c{i}" for i in range(len(names))]
            try:
                self.row = msgspec.defstruct("Row", [(f, object) for f in fields],
                                             rename=dict(zip(fields, names)), gc=False)
            except (TypeError, ValueError):  # pragma: no cover - names msgspec refuses: the dicts
                self.row = None
        self.keys = tuple(_compact(name) + b":" for name in names) if self.row is not None else ()

    def rows(self, start: int, stop: int, indent: bytes) -> bytes:
        """The JSON of rows ``start:stop`` as :func:`json_bytes` lays them out when each row's
        ``{`` is indented by ``indent``: from the first row's ``{`` to the last one's ``}``.

        Rows whose cells are all plain values (numbers, text, None) are leaves, written as
        msgspec encodes them: encoded a row per line (``encode_lines``; a line break in JSON
        text is always escaped, so each one is between two rows), a comma and ``indent`` put
        at each line break is the whole layout. (Laying out the table's text in C took 0.75 s
        of writing a 0.86 GB report.json; this is one pass of memchr's speed.) Other rows take
        :func:`~.layout.laid_out`."""
        import itertools

        part = self.frame.iloc[start:stop]
        text = None
        if self.row is not None and len(part.columns):
            values = [_column_values(column) for _, column in part.items()]
            plain = all(_plain_cells(column, v) for (_, column), v in zip(part.items(), values))
            if plain and len(part) and rows_from_columns is not None:
                try:  # each column encoded alone, the rows put together in C: the Structs' bytes
                    encode = _lines_encoder().encode
                    return rows_from_columns(self.keys, tuple(encode(v) for v in values), len(part), b",\n" + indent)
                except (TypeError, ValueError, UnicodeEncodeError):
                    pass  # (a lone surrogate, an odd cell: the Structs say what they make of it)
            # a list, not the iterator: msgspec 0.22's encode_lines kept every item of an iterator
            structs = list(itertools.starmap(self.row, zip(*values)))
            try:
                if plain:
                    return _lines_encoder().encode_lines(structs)[:-1].replace(b"\n", b",\n" + indent)
                text = _compact(structs)
            except (TypeError, UnicodeEncodeError):  # a lone surrogate, an odd cell: the dicts' way
                text = None
        if text is None:
            text = _compact(Records._rows(part))
        text = laid_out(text, len(indent) // INDENT - 1)
        return text[text.index(b"{"):text.rindex(b"}") + 1]


def _plain_cells(column, values: list) -> bool:
    """Whether a column's values (:func:`_column_values`) are all plain: no list or object in a
    cell. Numbers' columns are; others are looked at (their types, in C)."""
    import numpy as np

    return (isinstance(column.dtype, np.dtype) and column.dtype.kind in "iufb") or set(map(type, values)) <= _NATIVE


@functools.cache
def _lines_encoder():
    """msgspec's encoder, for rows a line each (made on first use: msgspec imported then)."""
    import msgspec

    return msgspec.json.Encoder(enc_hook=_numpy_hook)


def _members(value: Mapping, keys: tuple, first: int, indent: bytes) -> Iterator[bytes]:
    """The members ``keys`` of a mapping at nesting ``indent`` (the one at position ``first``
    of the mapping opens it without a comma), between its braces."""
    inner = indent + b"  "
    for i, key in enumerate(keys, first):
        yield (b",\n" if i else b"\n") + inner + json_bytes(str(key))[:-1] + b": "
        yield from _chunks(value[key], inner)
