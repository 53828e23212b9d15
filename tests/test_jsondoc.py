"""JSON documents (perfreport.documents.jsondoc): tables held as Records, written in chunks, byte for byte
what one encode of the whole document gives."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pandas as pd
import pytest

from perfreport.storing.atomic import atomic_files
from perfreport.documents.cells import Records
from perfreport.documents.jsondoc import JsonChunks, _RowsJson, json_bytes, json_text, plain_document

from .conftest import TRACES


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return pd.DataFrame({"rank": np.array([0, 1, 2], dtype=np.int64), "name": ["a", "b", None],
                         "us": [1.5, float("nan"), float("inf")], "mixed": pd.Series([1.0, "x", float("nan")],
                                                                                     dtype=object)})


def test_records_read_as_the_json_rows(frame):
    rows = Records(frame)
    want = [{"rank": 0, "name": "a", "us": 1.5, "mixed": 1.0}, {"rank": 1, "name": "b", "us": None, "mixed": "x"},
            {"rank": 2, "name": None, "us": None, "mixed": None}]
    assert len(rows) == 3 and list(rows) == want and rows.tolist() == want
    assert rows[0] == want[0] and rows[-1] == want[2] and rows[1:] == want[1:]
    assert type(rows[0]["rank"]) is int and rows == want and rows != want[:2]
    with pytest.raises(IndexError):
        rows[3]
    assert json.loads(json_text({"t": rows})) == {"t": want}
    doc = plain_document({"t": rows, "k": (1, np.float64(2.5)), 3: float("nan")})
    assert doc["t"] is rows and doc["k"] == [1, 2.5] and doc["3"] is None


def test_records_are_the_rows_pandas_gives_for_every_column_type():
    """Rows are built a column at a time; they must be what ``DataFrame.to_dict("records")``
    gives (Python scalars of the same types), with NaN, inf and missing values as None."""
    n = 4
    frame = pd.DataFrame({
        "i": np.arange(n), "u": np.arange(n, dtype=np.uint8), "b": np.arange(n) % 2 == 0,
        "f32": np.array([1.5, np.nan, -np.inf, 4], dtype=np.float32),
        "o": pd.Series([np.float64(np.nan), np.int64(3), np.bool_(True), [1]], dtype=object),
        "text": pd.Series(["a", None, "b", "c"]), "python_text": pd.array(["a", None, "b", "c"], dtype="string"),
        "nullable": pd.array([1, None, 3, 4], dtype="Int64"), "category": pd.Categorical(list("aabb")),
        "when": pd.date_range("2020-01-01", periods=n)})
    want = frame.to_dict(orient="records")
    for row in want:
        for key, value in row.items():
            if value is pd.NA or (type(value) is float and not math.isfinite(value)):
                row[key] = None
    got = Records(frame).tolist()
    assert got == want and [[type(v) for v in r.values()] for r in got] == [[type(v) for v in r.values()] for r in want]
    assert got[1]["o"] == 3 and type(got[1]["o"]) is int and got[2]["o"] is True and got[0]["o"] is None
    assert got[1]["text"] is got[1]["python_text"] is got[1]["nullable"] is got[1]["f32"] is got[2]["f32"] is None
    assert Records(frame[[]]).tolist() == [{}] * n and Records(frame.iloc[:0]).tolist() == []


def test_records_iterate_in_chunks_over_long_tables():
    big = pd.DataFrame({"i": np.arange(10_000), "x": np.where(np.arange(10_000) % 7 == 0, np.nan, 1.0)})
    rows = list(Records(big))
    assert len(rows) == 10_000 and rows[9_999] == {"i": 9_999, "x": 1.0} and rows[7] == {"i": 7, "x": None}


@pytest.mark.parametrize("value", [{}, [], "s", 1.5, {"a": {}}, {"a": [], "b": {"c": [1, {"d": 2}], "e": math.nan}},
                                   {3: "x\ny", "u": "\ud800"}, {"µ": ["é"]}, {"t": "placeholder"}])
def test_chunks_are_the_bytes_of_one_encode(value, frame):
    if value == {"t": "placeholder"}:
        value = {"t": Records(frame), "n": {"deeper": {"t": Records(frame)}}}
    assert b"".join(JsonChunks(value)) == json_bytes(value)
    assert json.loads(b"".join(JsonChunks(value))) == json.loads(json_bytes(value))


def test_a_summary_written_in_chunks_is_the_summary(tmp_path):
    from perfreport.pipeline import analyze, summary_document

    doc = summary_document(analyze(TRACES / "hta_sampled_2of128rank", workers=1))
    assert any(isinstance(v, Records) for v in doc.values())
    chunks = JsonChunks(doc)
    assert len(list(chunks)) > 2 * len(doc)  # member by member, not one piece
    paths = atomic_files(tmp_path, {"a.json": chunks, "b.json": chunks})  # iterated afresh each time
    assert paths[0].read_bytes() == paths[1].read_bytes() == json_bytes(doc)
    assert json.loads(paths[0].read_text())["summary"] == doc["summary"].tolist()


def test_a_long_table_is_written_a_chunk_of_rows_at_a_time(monkeypatch, frame):
    monkeypatch.setattr(_RowsJson, "CHUNK", 2)
    table = Records(pd.DataFrame({"i": np.arange(20), "s": list("abcdefghijklmnopqrst"),
                                  "x": np.where(np.arange(20) % 3 == 0, np.nan, 0.5)}))
    doc = {"deep": {"t": table, "empty": Records(frame.iloc[:0])}, "t": table}
    pieces = list(JsonChunks(doc))
    assert b"".join(pieces) == json_bytes(doc)
    assert max(len(p) for p in pieces) < len(json_bytes(table)) / 4  # never the whole table at once


def _every_kind_of_column(n: int = 40) -> pd.DataFrame:
    """Columns of every dtype a table holds, NaN, inf, None and numpy scalars among the cells
    (no dates: a document's tables hold none, and neither encoding takes them)."""
    cells = [None, math.nan, math.inf, -math.inf, 1.5, -0.0, 0, 7, True, "x", "", "inf", np.float64(2.5),
             np.int64(3), np.float64("nan"), np.bool_(False), [1, None], {"k": math.nan}, 10**30]
    pick = np.random.default_rng(7).integers(0, len(cells), size=(4, n))
    return pd.DataFrame({
        "i": np.arange(n), "f": np.where(np.arange(n) % 5 == 0, np.nan, np.arange(n) / 8),
        "inf": np.where(np.arange(n) % 3 == 0, -np.inf, 1.0), "b": np.arange(n) % 2 == 0,
        "o1": pd.Series([cells[k] for k in pick[0]], dtype=object),
        "o2": pd.Series([cells[k] for k in pick[1] if k < 10] + [None] * (n - sum(pick[1] < 10)), dtype=object),
        "text": pd.Series([["a", None, "µ"][k % 3] for k in pick[2]], dtype="str"),
        "nullable": pd.array([None if k % 4 == 0 else int(k) for k in pick[3]], dtype="Int64"),
        "category": pd.Categorical([["p", "q"][k % 2] for k in pick[3]])})


@pytest.mark.parametrize("columns", [None, ["same", "same", "other"], [3, "x", 4.5], ["\ud800", "b", "c"]])
def test_table_rows_are_written_as_the_dicts_would_be(columns, monkeypatch):
    """A table's rows are encoded from Struct instances, not dicts: the bytes must be those of
    the dicts (Records.tolist) for every kind of column, and for the tables that take the
    dicts' way (repeated or odd column names, a lone surrogate in a name or a cell)."""
    frame = _every_kind_of_column()
    if columns is not None:
        frame = frame.iloc[:, :3].set_axis(columns, axis=1)
    monkeypatch.setattr(_RowsJson, "CHUNK", 7)
    doc = {"t": Records(frame)}
    want = json_bytes({"t": Records(frame).tolist()})
    assert b"".join(JsonChunks(doc)) == want
    surrogate = frame.assign(s=pd.Series(["ok"] * len(frame), dtype=object))
    surrogate.iloc[3, -1] = "\ud800"  # not UTF-8: the dicts' way escapes it
    assert json.loads(b"".join(JsonChunks({"t": Records(surrogate)}))) == json.loads(
        json_bytes({"t": Records(surrogate).tolist()}))


def test_rows_put_together_from_their_columns_are_the_structs_bytes(monkeypatch):
    """Plain columns (numbers, text, None) are encoded a column at a time and their rows put
    together in C: the bytes of the rows encoded one by one (Structs) and of the dicts, text
    with quotes, escapes, commas and brackets, every float msgspec writes, in slices of 7."""
    from perfreport.documents import jsondoc, layout

    if layout.rows_from_columns is None:
        pytest.skip("the _layout extension is not built")
    rng = np.random.default_rng(11)
    texts = ['a"b', "c\\d", "e,f", "[g]", "{h}", "µ😀", "\n\t", "", "\x00\x1f", ",", "]", '"', None]
    floats = [np.nan, np.inf, -np.inf, -0.0, 1e300, 5e-324, 0.1, 123456789.123, -2.5]
    n = 50
    frame = pd.DataFrame({
        "i": rng.integers(-2**62, 2**62, n), "f": rng.choice(floats, n), "b": rng.random(n) < 0.5,
        "t": pd.Series([texts[k] for k in rng.integers(0, len(texts), n)], dtype=object),
        'q"k': pd.Series([texts[k] for k in rng.integers(0, len(texts) - 1, n)], dtype="str"),
        "big": pd.Series([10**30 if k else None for k in rng.integers(0, 2, n)], dtype=object)})
    monkeypatch.setattr(_RowsJson, "CHUNK", 7)
    doc = {"t": Records(frame)}
    with_c = b"".join(JsonChunks(doc))
    monkeypatch.setattr(jsondoc, "rows_from_columns", None)
    assert with_c == b"".join(JsonChunks(doc)) == json_bytes({"t": Records(frame).tolist()})
    for bad in ((b'"a":',), (b"[1,2]",), 3), ((b'"a":',), (b"[1,[2]]",), 2), ((b'"a":',), (b'[1,"x]',), 2):
        with pytest.raises(ValueError):
            layout.rows_from_columns(*bad, b",")


@pytest.mark.parametrize("numpy_cell", [False, True])  # plain Python cells are checked in C, others one by one
def test_object_cells_that_are_not_finite_are_null(numpy_cell):
    cells = [math.inf, -math.inf, math.nan, None, 2, "s", True, 0.5] + [np.float64("inf")] * numpy_cell
    got = Records(pd.DataFrame({"o": pd.Series(cells, dtype=object)})).tolist()
    assert got == [{"o": v} for v in [None] * 4 + [2, "s", True, 0.5] + [None] * numpy_cell]


@pytest.mark.parametrize("value", [{}, {"a": 1}, {3: "x\ny", "u": "\ud800", "t": "placeholder"}])
def test_members_encoded_ahead_give_the_bytes_of_one_encode(value, frame, monkeypatch):
    """A document encoded ahead (while a PDF is laid out), then given a member (the command's
    timings), is written byte for byte as one encode of the whole; the members come back from
    a temporary file read in pieces, never held whole."""
    monkeypatch.setattr(JsonChunks, "READ_SIZE", 7)
    value = {k: ({"t": Records(frame), "n": [1.5, math.nan]} if v == "placeholder" else v) for k, v in value.items()}
    chunks = JsonChunks(value)
    chunks.encode_ahead()
    value["timings"] = {"wall_s": 1.25, "phases": [{"phase": "scan", "wall_s": 0.5}]}
    pieces = list(chunks)
    assert b"".join(pieces) == json_bytes(value) == b"".join(chunks)  # and again: iterated afresh
    if len(value) > 2:
        assert max(len(p) for p in pieces) < len(json_bytes(value)) / 4
    chunks.close()
    assert b"".join(chunks) == json_bytes(value)  # closed: encoded afresh


def test_a_document_that_lost_a_member_is_encoded_afresh():
    doc = {"a": 1, "b": [2], "c": "three"}
    chunks = JsonChunks(doc)
    chunks.encode_ahead()
    del doc["b"]
    doc["d"] = 4.5
    assert b"".join(chunks) == json_bytes(doc) == json_bytes({"a": 1, "c": "three", "d": 4.5})


def test_members_encoded_ahead_are_not_encoded_again():
    """What makes it worth doing: iterating reads the members back instead of encoding them
    (a member changed in place afterwards, which a command never does, shows it)."""
    doc = {"rows": [1, 2]}
    chunks = JsonChunks(doc)
    chunks.encode_ahead()
    doc["rows"].append(3)
    doc["timings"] = {}
    assert json.loads(b"".join(chunks)) == {"rows": [1, 2], "timings": {}}


@pytest.mark.parametrize("values", [
    [0.5 * i for i in range(100)],
    [math.nan, -0.0, math.inf, 1e-300, -math.inf] * 20,
    tuple(float(i) for i in range(64)),
    [1.0] * 63,  # short: item by item
    [1.0] * 70 + [1],  # an int among the floats: item by item (the int stays an int)
    [np.float64(1.5)] * 70 + [math.nan],
    [1.0] * 70 + ["text"],
    list(range(100)),  # ints only (a step list): taken whole
    tuple([3, "x", None, True] * 20),  # plain values of other types: taken whole, as a list
    [7] * 70 + [np.int64(2)],  # a numpy value among them: item by item (unwrapped)
])
def test_long_float_lists_are_cleaned_as_item_by_item(values):
    from perfreport.documents.cells import finite_float_list
    from perfreport.report.json_report import _clean

    def by_item(v, unwrap):
        return [None if isinstance(x, float) and not math.isfinite(x) else
                (x.item() if unwrap and isinstance(x, np.generic) else x) for x in v]

    want = by_item(values, unwrap=True)
    for got, want in ((plain_document({"v": values})["v"], want), (_clean({"v": values})["v"], by_item(values, False))):
        assert got == want and [type(x) for x in got] == [type(x) for x in want]
        assert [math.copysign(1, x) for x in got if isinstance(x, float)] == \
            [math.copysign(1, x) for x in want if isinstance(x, float)]  # -0.0 stays -0.0
    fast = finite_float_list(values)
    assert fast is None or fast == want
    assert (fast is not None) == (len(values) >= 64 and all(type(x) is float for x in values))
    from perfreport.analyses.attribution import _json_ready
    from perfreport.documents.cells import scalar_list

    whole = scalar_list(values)
    assert (whole is not None) == (len(values) >= 64 and all(type(x) in (int, str, bool, type(None)) for x in values))
    assert whole is None or (whole == list(values) and isinstance(whole, list) and whole is not values)
    ready = _json_ready({"v": values})["v"]
    assert [repr(x) for x in ready] == [repr((None if math.isnan(x) else x) if isinstance(x, float) else
                                              (x.item() if isinstance(x, np.generic) else x)) for x in values]


def test_table_columns_are_the_rows_values():
    from perfreport.documents.cells import table_columns

    frame = pd.DataFrame({"a": [1, 2, 3], "b": [0.5, math.nan, math.inf], "c": ["x", None, "z"]})
    rows = Records(frame).tolist()
    want = [[r.get(k) for r in rows] for k in ("b", "a", "missing", "c")]
    assert table_columns(Records(frame), ("b", "a", "missing", "c")) == want == [
        [0.5, None, None], [1, 2, 3], [None] * 3, ["x", None, "z"]]
    assert table_columns([*rows, "not a row", None], ("b", "a", "missing", "c")) == want
    twice = pd.DataFrame([[1, 2]], columns=["a", "a"])  # two columns of one name: the rows decide
    assert table_columns(Records(twice), ("a",)) == [[r["a"] for r in Records(twice).tolist()]]
    assert table_columns({"a": 1}, ("a",)) == [[]] and table_columns(None, ("a", "b")) == [[], []]


@pytest.mark.parametrize("lost", [False, True])
def test_members_encoded_ahead_into_the_staged_file_are_written_once(tmp_path, frame, lost):
    """Encoded ahead into the hidden temporary the file set renames into place, the document is
    completed there (its added members appended; all of it rewritten where an early member went),
    byte for byte one encode of the whole: that very file becomes report.json, nothing is copied
    and no temporary is left. Closing without a write removes the temporary."""
    from perfreport.storing.atomic import atomic_files, temp_name

    doc = {"a": 1, "t": Records(frame), "n": [1.5, math.nan]}
    chunks = JsonChunks(doc)
    staged = temp_name(tmp_path / "report.json")
    chunks.encode_ahead(staged)
    assert chunks.staged() == staged and staged.read_bytes().startswith(b"{")
    inode = staged.stat().st_ino
    if lost:
        del doc["a"]
    doc["timings"] = {"wall_s": 1.25}
    atomic_files(tmp_path, {"report.json": chunks, "report.md": "# r\n"})
    assert (tmp_path / "report.json").read_bytes() == json_bytes(doc)
    assert (tmp_path / "report.json").stat().st_ino == inode  # the file encoded ahead, renamed
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", ".perfreport-set.json", "report.json", "report.md"]
    chunks.close()
    assert (tmp_path / "report.json").read_bytes() == json_bytes(doc)  # (close never touches the target)
    other = JsonChunks({"x": 1})
    other.encode_ahead(temp_name(tmp_path / "other.json"))
    other.close()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".other.json")]


def test_rows_of_plain_cells_are_a_line_each(monkeypatch):
    """Rows whose cells are numbers and texts are written a line each, as msgspec encodes them
    (texts holding braces, brackets, a row separator, quotes and line breaks included: JSON
    escapes a line break, so one never splits a row), byte for byte one encode's layout."""
    texts = ["{", "},{", "[", "a\nb", 'q"uote', "\\", "µ"]
    frame = pd.DataFrame({"step": np.arange(21), "us": np.arange(21) / 4,
                          "name": pd.Series([texts[k % len(texts)] for k in range(21)], dtype=object)})
    monkeypatch.setattr(_RowsJson, "CHUNK", 8)
    text = b"".join(JsonChunks({"t": Records(frame)}))
    assert text == json_bytes({"t": Records(frame).tolist()})
    lines = text.split(b"\n")
    assert lines[:2] == [b"{", b'  "t": ['] and lines[-3:] == [b"  ]", b"}", b""]
    rows = lines[2:-3]
    assert len(rows) == 21 and [json.loads(r.rstrip(b",")) for r in rows] == Records(frame).tolist()


def test_a_cleaned_long_list_is_not_read_again() -> None:
    """A long list cleaned once (a compare's document, made when the gate is done) is passed on
    as it is when the report is built from the document: the same object, its NaN already null,
    where a list that was not cleaned is read item by item."""
    from perfreport.report.json_report import _clean

    samples = [0.5] * 100 + [math.nan, math.inf, -0.0]
    doc = _clean({"check": {"samples": samples, "steps": list(range(100))}})
    cleaned = doc["check"]["samples"]
    assert cleaned[-3:-1] == [None, None] and math.copysign(1, cleaned[-1]) == -1
    plain = plain_document(doc)
    assert plain["check"]["samples"] is cleaned and plain["check"]["steps"] is doc["check"]["steps"]
    assert _clean(doc)["check"]["samples"] is cleaned
    assert plain_document({"samples": samples})["samples"] is not samples  # not cleaned before: a new list
    assert json_bytes(plain) == json_bytes({"check": {"samples": [0.5] * 100 + [None, None, -0.0],
                                                      "steps": list(range(100))}})


def test_floats_are_the_numbers_of_a_list_in_an_eighth_of_the_memory():
    """A check's samples: equal to the list and tuple of the same numbers, hashable, written as
    that list (NaN and inf as null), kept as they are by a plain document, and 8 bytes a value."""
    from perfreport.documents.cells import Floats

    values = [1.5, math.nan, -0.0, math.inf, 2.0**-1074, 1e300]
    f = Floats(np.array(values))
    finite = [v for v in values if math.isfinite(v)]
    assert Floats(finite) == finite == list(Floats(finite)) and Floats(finite) == tuple(finite)
    assert math.isnan(f[1]) and f[3] == math.inf and len(f) == 6 and f.array().dtype == np.float64
    assert f == Floats(values) and hash(f) == hash(Floats(values)) and f != Floats(values[:5])
    assert json_bytes({"v": f}) == json_bytes({"v": [1.5, None, -0.0, None, 2.0**-1074, 1e300]})
    plain = plain_document({"v": f, "t": (f,)})
    assert plain["v"] is f and plain["t"][0] is f
    assert sys.getsizeof(Floats(np.zeros(100_000))._data) < 100_000 * 9
