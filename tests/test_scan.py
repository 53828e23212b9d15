"""The C scanner ``perfreport.load._scan`` against the pure-Python reference ``scan_py``.

Build the extension in place first, e.g.::

    cc -O2 -shared -fPIC $(python3-config --includes) perfreport/load/_scan.c \
        -o perfreport/load/_scan$(python3-config --extension-suffix)

Real traces are read from $PERFREPORT_TRACES (default /work/shared/traces) when present.
"""

from __future__ import annotations

import decimal
import gzip
import math
import mmap
import os
import random
import re
from pathlib import Path

import msgspec
import numpy as np
import pytest

_scan = pytest.importorskip(
    "perfreport.load._scan", reason="C extension perfreport.load._scan is not built (see module docstring)"
)

from perfreport.load.fields import ARG_FIELDS, INT_MISSING, TOP_FIELDS, ScanResult, SparseColumn  # noqa: E402
from perfreport.load.scan_py import scan as scan_py  # noqa: E402

try:
    from isal import igzip as _gzip
except ImportError:  # pragma: no cover - isal is a dependency, but keep the test independent
    _gzip = gzip

TRACES_DIR = Path(os.environ.get("PERFREPORT_TRACES", "/work/shared/traces"))
TRACES = sorted(TRACES_DIR.glob("**/*.json*")) if TRACES_DIR.is_dir() else []

_DTYPES = {"f": np.float64, "i": np.int64, "n": np.int64, "s": np.int32}


def scan_c(events_json) -> ScanResult:
    """Run the C scanner and wrap its byte buffers as (read-only) numpy columns."""
    n, top, rows, values, strings = _scan.scan(events_json, TOP_FIELDS, ARG_FIELDS)
    return ScanResult(
        n_events=n,
        top={key: np.frombuffer(buf, _DTYPES[kind]) for (key, kind), buf in zip(TOP_FIELDS, top)},
        args={
            key: SparseColumn(rows=np.frombuffer(r, np.int32), values=np.frombuffer(v, _DTYPES[kind]))
            for (key, kind), r, v in zip(ARG_FIELDS, rows, values)
        },
        strings=strings,
    )


# --------------------------------------------------------------------------------------------
# helpers


def read_events_json(path: Path) -> msgspec.Raw:
    """The raw JSON text of a trace file's traceEvents array."""
    opener = _gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    return msgspec.json.decode(data, type=dict[str, msgspec.Raw])["traceEvents"]


_reference_scans: dict[Path, ScanResult] = {}


def reference_scan(path: Path, events: msgspec.Raw, *, last_use: bool = False) -> ScanResult:
    """scan_py's columns of a real trace's traceEvents (``events``), the reference of both parity
    tests below: made by the first that needs it, dropped after the last (scan_py is slow, and the
    columns of every trace together are large)."""
    found = _reference_scans.pop(path, None) if last_use else _reference_scans.get(path)
    if found is None:
        found = scan_py(events)
        if not last_use:
            _reference_scans[path] = found
    return found


def texts(codes: np.ndarray, strings: list[str]) -> list[str | None]:
    return [None if c == -1 else strings[c] for c in codes.tolist()]


def assert_column_equal(kind: str, got: np.ndarray, got_strings, want: np.ndarray, want_strings, what: str):
    assert got.dtype == _DTYPES[kind], what
    assert got.shape == want.shape, what
    if kind == "f":
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan), what
        # bit-exact (so 0.0 and -0.0 differ) where not NaN
        assert np.array_equal(got[~nan].view(np.int64), want[~nan].view(np.int64)), what
    elif kind in "in":
        assert np.array_equal(got, want), what
    else:
        assert ((got >= -1) & (got < len(got_strings))).all(), what
        assert texts(got, got_strings) == texts(want, want_strings), what


def assert_same(got: ScanResult, want: ScanResult) -> None:
    assert got.n_events == want.n_events
    assert len(set(got.strings)) == len(got.strings), "a text has two codes"
    for key, kind in TOP_FIELDS:
        assert_column_equal(kind, got.top[key], got.strings, want.top[key], want.strings, f"top {key!r}")
    for key, kind in ARG_FIELDS:
        g, w = got.args[key], want.args[key]
        assert g.rows.dtype == w.rows.dtype == np.int32  # event positions: 4 bytes each
        assert np.array_equal(g.rows, w.rows), f"args {key!r} rows"
        assert_column_equal(kind, g.values, got.strings, w.values, want.strings, f"args {key!r}")


def both(doc: str | bytes) -> ScanResult:
    """Scan with both scanners, check they agree, return the C result."""
    if isinstance(doc, str):
        doc = doc.encode()
    got = scan_c(doc)
    assert_same(got, scan_py(doc))
    return got


def text_of(res: ScanResult, column: np.ndarray) -> list[str | None]:
    return texts(column, res.strings)


def test_step_names_keep_one_code_each_in_order_of_appearance() -> None:
    """The interner keeps "ProfilerStep#N" names apart from the other texts (an array indexed by
    N from the first step's): a name below the first N, beyond the array's span, with a leading
    zero, 19 digits or a suffix goes to the hashed table instead, and every text keeps one code,
    numbered in order of first appearance, through the array's growth, the table's rehashes and
    a second "traceEvents" array (which starts the numbering again)."""
    base = 5
    odd = [f"ProfilerStep#{base - 1}", f"ProfilerStep#{base + 2**22}", f"ProfilerStep#0{base + 1}",
           "ProfilerStep#1234567890123456789", f"ProfilerStep#{base}x", "ProfilerStep#", "ProfilerStep#-7",
           f"ProfilerStep#{base + 2**22 - 1}", "ProfilerStep#0", "ProfilerStep#999999999999999999"]
    names = [f"ProfilerStep#{base}"] + odd
    names += [n for i in range(3000) for n in (f"ProfilerStep#{base + 1 + i}", f"op{i % 1500}")]  # > 1024 of each
    names += odd + [f"ProfilerStep#{base + 7}", f"ProfilerStep#{base}", "op3"]  # all seen before
    events = ", ".join('{"name": "%s"}' % n for n in names)
    res = both(f"[{events}]")
    first = list(dict.fromkeys(names))
    assert res.strings == first  # one code per text, in order of first appearance
    assert res.top["name"].tolist() == [first.index(n) for n in names]
    doc = ('{"traceEvents": [{"name": "op9"}, {"name": "ProfilerStep#5"}, {"name": "ProfilerStep#6"}], '
           f'"traceEvents": [{events}]}}').encode()
    again, _ = scan_doc(doc)  # the last array counts, numbered from its own first step
    assert again.strings == first and again.top["name"].tolist() == res.top["name"].tolist()


# --------------------------------------------------------------------------------------------
# real traces


@pytest.mark.skipif(not TRACES, reason=f"no traces under {TRACES_DIR}")
@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p.relative_to(TRACES_DIR)))
def test_real_trace_matches_reference(path):
    events = read_events_json(path)
    assert_same(scan_c(events), reference_scan(path, events))


_TOKENS = re.compile(rb'"(?:[^"\\]|\\.)*"|\s+|[^"\s]+')


def minified(text: bytes) -> bytes:
    """The JSON text without whitespace outside strings, as compact writers (orjson, msgspec,
    json.dumps with separators=(",", ":")) write it; the numbers' text kept as it is."""
    return b"".join(t for t in _TOKENS.findall(text) if not t.isspace())


@pytest.mark.skipif(not TRACES, reason=f"no traces under {TRACES_DIR}")
@pytest.mark.parametrize("path", sorted(TRACES, key=lambda p: p.stat().st_size)[:3], ids=lambda p: p.name[:40])
def test_a_compact_real_trace_scans_as_the_spaced_one(path):
    """A real trace written without a space after ':' and ',' (the key patterns then follow the
    file's spacing): the same columns as the trace as Kineto wrote it."""
    events = bytes(read_events_json(path))
    compact = minified(events)
    assert len(compact) < 0.95 * len(events) and b'":"' in compact and b'":{' in compact
    assert_same(scan_c(compact), scan_c(events))


# --------------------------------------------------------------------------------------------
# hand-written cases, checked against the reference and against expected values


def test_empty_array_and_whitespace():
    for doc in ["[]", "  [ ]  ", "\n\t[\r\n]\n"]:
        res = both(doc)
        assert res.n_events == 0
        assert all(col.shape == (0,) for col in res.top.values())
    res = both('\n [ {\n "ph" :\t"X" , "ts"  : 1 } ,\r\n{ } ] \n')
    assert res.n_events == 2
    assert text_of(res, res.top["ph"]) == ["X", None]
    assert res.top["ts"].tolist() == [1000, INT_MISSING]


@pytest.mark.parametrize("indent", [0, 1, 4, 7, 8, 12])
def test_line_breaks_and_indentation_of_every_width(indent):
    """A line break and up to 7 spaces are skipped in one step (Kineto's layout), wider or mixed
    runs byte by byte: every width, a tab or carriage return after the spaces, and runs that end
    within a word of the end of the text give the same columns as the reference scanner."""
    pad = " " * indent
    runs = [f"\n{pad}", f"\n{pad}\t", f"\n{pad}\r\n ", f"\n{pad}\n{pad}"]
    events = [f'{{{r}"ph": "X",{r}"name": "k{i}",{r}"ts": {i},{r}"args": {{{r}"stream": 7{r}}}{r}}}'
              for i, r in enumerate(runs * 3)]
    res = both("[" + ",".join(events) + f"\n{pad}]")
    assert res.n_events == 12 and res.args["stream"].values.tolist() == [7] * 12
    assert res.top["ts"].tolist() == [1000 * i for i in range(12)]
    for tail in range(1, 11):  # the closing bracket 1 to 10 bytes after the line break
        assert both('[{"ph": "X"}\n' + " " * (tail - 1) + "]").n_events == 1


def test_escapes_and_surrogate_pairs():
    doc = r'[{"name": "a\"b\\c\/d\b\f\n\r\t\u00e9\u4e2d\ud83d\ude00\u0000z", "cat": "plain é"}]'
    res = both(doc)
    assert text_of(res, res.top["name"]) == ['a"b\\c/d\b\f\n\r\té中😀\x00z']
    assert text_of(res, res.top["cat"]) == ["plain é"]


def test_escaped_keys_match():
    res = both(r'[{"n\u0061me": "k", "\u0061rgs": {"str\u0065am": 3}, "ts": 1}]')
    assert text_of(res, res.top["name"]) == ["k"]
    assert res.args["stream"].values.tolist() == [3]


def test_string_pid_tid_share_codes_with_numbers():
    res = both('[{"pid": "Spans", "tid": "stream 7"}, {"pid": 12, "tid": 12}, {"pid": "12", "tid": 1.50}]')
    assert text_of(res, res.top["pid"]) == ["Spans", "12", "12"]
    assert text_of(res, res.top["tid"]) == ["stream 7", "12", "1.50"]
    assert res.top["pid"][1] == res.top["pid"][2] == res.top["tid"][1]


def test_hex_strings():
    res = both(
        '[{"id": "0x1f", "ts": "0x10", "dur": "-0X10",'
        ' "args": {"stream": "0x0", "device": "-0x10", "bytes": "+0X1F", "correlation": "0x",'
        ' "queued": "0xffffffffffffffff", "Device": "0x7fffffffffffffff", "Addr": "0x_1f",'
        ' "memory bandwidth (GB/s)": "0xfffffffffffffffffffff", "blocks per SM": "-0x0",'
        ' "warps per SM": "0xZZ"}}]'
    )
    assert res.top["id"].tolist() == [31]
    assert res.top["ts"].tolist() == [16000] and res.top["dur"].tolist() == [-16.0]
    a = {k: res.args[k].values.tolist() for k in res.args if len(res.args[k].rows)}
    assert a["stream"] == [0] and a["device"] == [-16] and a["bytes"] == [31]
    assert a["correlation"] == [INT_MISSING] and a["queued"] == [INT_MISSING]
    assert a["Device"] == [2**63 - 1] and a["Addr"] == [31]
    assert a["memory bandwidth (GB/s)"] == [float(0xFFFFFFFFFFFFFFFFFFFFF)]
    assert math.copysign(1, a["blocks per SM"][0]) == 1.0  # int("-0x0") has no sign
    assert math.isnan(a["warps per SM"][0])


def test_floats_in_int_fields_and_exponents():
    res = both(
        '[{"id": 1.9, "ts": 1.5e3, "dur": 1E-3, "args": {"stream": -2.7, "bytes": 1e3, "correlation": 1e400,'
        ' "device": -0.0, "queued": 9.3e18, "Device": -9.2e18, "memory bandwidth (GB/s)": -0.0,'
        ' "blocks per SM": 5e-324, "warps per SM": 2.2250738585072014e-308, "est. achieved occupancy %": 1e308}},'
        ' {"ts": 1707151935467.123, "dur": 1707151935467.1234567891234, "id": 0.5e1},'
        ' {"ts": 0.1, "dur": 123456789012345678901234567890, "id": -1e-400},'
        ' {"ts": 1e23, "dur": 9007199254740993, "id": 1e19},'
        ' {"ts": 3.0e-5, "dur": 0.000000000000000000000000001, "id": 12345678901234567890123e-5}]'
    )
    assert res.top["id"].tolist() == [1, 5, 0, INT_MISSING, int(12345678901234567890123e-5)]
    a = {k: res.args[k].values.tolist() for k in res.args if len(res.args[k].rows)}
    assert a["stream"] == [-2] and a["bytes"] == [1000] and a["correlation"] == [INT_MISSING]
    assert a["device"] == [0] and a["queued"] == [INT_MISSING] and a["Device"] == [-9200000000000000000]
    assert res.top["ts"].tolist() == [1500000, 1707151935467123, 100, INT_MISSING, 0]
    assert res.top["dur"].tolist() == [1e-3, 1707151935467.1235, 1.2345678901234568e29, 9007199254740992.0, 1e-27]


def test_huge_integers():
    res = both(
        '[{"id": 123456789012345678901234567890, "ts": 123456789012345678901234567890,'
        ' "args": {"bytes": 9223372036854775807, "device": 9223372036854775808,'
        ' "stream": -9223372036854775808, "queued": -9223372036854775809, "Device": -9223372036854775807,'
        ' "correlation": 18446744073709551616, "Rank": 18446744073709551615}}]'
    )
    assert res.top["id"].tolist() == [INT_MISSING]
    assert res.top["ts"].tolist() == [INT_MISSING]
    a = {k: res.args[k].values.tolist() for k in res.args if len(res.args[k].rows)}
    assert a["bytes"] == [2**63 - 1] and a["Device"] == [-(2**63) + 1]
    for key in ("device", "stream", "queued", "correlation", "Rank"):
        assert a[key] == [INT_MISSING], key


def test_numeric_strings():
    res = both(
        '[{"ts": " 12.5 ", "dur": "1_000", "id": " 42\\n",'
        ' "args": {"stream": "\uff17", "bytes": "\\u00a0 5 \\u3000", "device": "inf", "queued": "nan",'
        ' "correlation": "1.5e3", "External id": "abc", "Rank": "", "Group size": "0x_1f",'
        ' "In msg nelems": "007", "Out msg nelems": "-0", "registers per thread": "+5",'
        ' "shared memory": "+-5", "Sequence number": "1e999", "Fwd thread id": " -7.9 ",'
        ' "Python id": "\\u000b12\\u001f", "Python parent id": "1 2",'
        ' "memory bandwidth (GB/s)": "Infinity", "blocks per SM": "-nan", "warps per SM": ".5",'
        ' "est. achieved occupancy %": "+1.5E2"}},'
        ' {"ts": "-INF", "dur": "007.5", "id": "9223372036854775808",'
        ' "args": {"memory bandwidth (GB/s)": "1e", "blocks per SM": "", "warps per SM": "  ",'
        ' "est. achieved occupancy %": "\\u0661\\u0662"}}]'
    )
    assert res.top["ts"].tolist() == [12500, INT_MISSING]
    assert res.top["dur"].tolist() == [1000.0, 7.5] and res.top["id"].tolist() == [42, INT_MISSING]
    a = {k: res.args[k].values.tolist() for k in res.args if len(res.args[k].rows)}
    assert a["stream"] == [7] and a["bytes"] == [5] and a["device"] == [INT_MISSING]
    assert a["correlation"] == [1500] and a["External id"] == [INT_MISSING] and a["Group size"] == [31]
    assert a["In msg nelems"] == [7] and a["Out msg nelems"] == [0] and a["registers per thread"] == [5]
    assert a["shared memory"] == [INT_MISSING] and a["Fwd thread id"] == [-7] and a["Python id"] == [12]
    assert a["memory bandwidth (GB/s)"][0] == math.inf and math.isnan(a["blocks per SM"][0])
    assert a["est. achieved occupancy %"] == [150.0, 12.0]


def test_ns_timestamps_exact():
    """Kind 'n' (ts): exact integer ns of the decimal µs text, beyond float64's resolution."""
    values = [
        "1707151935467.123", "1707151935467.1239", "-1707151935467.1239", "1707151935467123.456",
        "0.0009", "-0.0009", "0", "-0", "1.5e3", "15E-1", "1e-30", "0e99999", "9223372036854775.807",
        "9223372036854775.808", "-9223372036854775.807", "-9223372036854775.808", "1e16",
        "12345678901234567890", "1234567890123.4567890123", "0.99999999999999999999999999999999",
        "123456789012345.678901234567891234", "1e400", "-1e-400",
        '" 12.5 "', '"0x10"', '"-0X10"', '"0x"', '"0x_10"', '"0x20c49ba5e353f7"',
        '"1_000.5"', '"5."', '".5"', '"007.5"', '"+3"', '"+-3"', '"NaN"', '"sNaN"', '"-Infinity"', '"inf"',
        '"abc"', '""', '"1e5"', '"\\u0661\\u0662.5"', '"\\u00a012\\u3000"', '"1 2"',
        "null", "true", "[1]", '{"a": 1}',
    ]  # fmt: skip
    doc = "[" + ", ".join(f'{{"ts": {v}, "args": {{"stream": {v}}}}}' for v in values) + "]"
    res = both(doc)
    ts = dict(zip(values, res.top["ts"].tolist()))
    assert ts["1707151935467.123"] == 1707151935467123
    assert ts["1707151935467.1239"] == 1707151935467123
    assert ts["-1707151935467.1239"] == -1707151935467123
    assert ts["-0.0009"] == 0 and ts["1e-30"] == 0 and ts["0e99999"] == 0
    assert ts["9223372036854775.807"] == 2**63 - 1 and ts["9223372036854775.808"] == INT_MISSING
    assert ts["1234567890123.4567890123"] == 1234567890123456
    assert ts['" 12.5 "'] == 12500 and ts['"0x10"'] == 16000 and ts['"-0X10"'] == -16000
    assert ts['"0x20c49ba5e353f7"'] == 0x20C49BA5E353F7 * 1000
    assert ts['"1_000.5"'] == 1000500 and ts['"\\u0661\\u0662.5"'] == 12500 and ts['"\\u00a012\\u3000"'] == 12000
    for v in ('"0x"', '"NaN"', '"sNaN"', '"-Infinity"', '"abc"', '""', "null", "[1]", "1e400"):
        assert ts[v] == INT_MISSING, v
    # scan_py raises here (decimal.Overflow; OverflowError for hex ns beyond int64): no value
    doc_c = b'[{"ts": "1e999999999"}, {"ts": 1e999999999}, {"ts": "0x20c49ba5e353f8"}, {"ts": "-0x20c49ba5e353f8"}]'
    assert scan_c(doc_c).top["ts"].tolist() == [INT_MISSING] * 4
    # the same conversion for an args field of kind 'n'
    n, top, rows, values_, strings = _scan.scan(doc.encode(), (("ts", "n"),), (("stream", "n"),))
    assert np.frombuffer(values_[0], np.int64).tolist() == res.top["ts"].tolist()


def test_nested_and_non_string_text_values():
    res = both(
        '[{"pid": true, "tid": null, "bp": false, "cat": 1E5, "args": {'
        '"Input Dims": [[1, 2], []], "grid": "grid(100,)", "block": [ 128 ,\n 1, 1 ],'
        ' "Input type": {"a" : [ "x y\\" ]" , null ], "b":{}}, "labels": true, "Collective name": null,'
        ' "dtype": 1.50, "Concrete Inputs": [[ ]]}},'
        ' {"name": "[1,2]", "args": {"Input Dims": [1, 2], "block": [128,1,1]}}]'
    )
    assert text_of(res, res.top["pid"]) == ["true", None]
    assert text_of(res, res.top["tid"]) == ["null", None]
    assert "bp" not in res.top  # a flow event's binding point: read by no analysis, skipped
    assert text_of(res, res.top["cat"]) == ["1E5", None]
    a = {k: text_of(res, res.args[k].values) for k in res.args if len(res.args[k].rows)}
    assert a["Input Dims"] == ["[[1,2],[]]", "[1,2]"]
    assert a["grid"] == ["grid(100,)"]
    assert a["block"] == ["[128,1,1]", "[128,1,1]"]
    assert a["Input type"] == ['{"a":["x y\\" ]",null],"b":{}}']
    assert a["labels"] == ["true"] and a["Collective name"] == ["null"] and a["dtype"] == ["1.50"]
    # a decoded string and a minified value with the same text share one code
    assert res.top["name"][1] == res.args["Input Dims"].values[1]


def test_duplicate_keys_last_wins():
    res = both(
        '[{"name": "a", "name": "b", "ts": 1, "ts": "x", "args": {"stream": 1, "stream": 2, "device": 5},'
        ' "args": {"stream": 3, "bytes": 4, "bytes": 6}},'
        ' {"args": {"stream": 7}, "args": 5},'
        ' {"args": {"device": 1, "device": {"a": 1}, "Input Dims": "s", "Input Dims": [1]}}]'
    )
    assert text_of(res, res.top["name"]) == ["b", None, None]
    assert res.top["ts"][0] == INT_MISSING
    assert res.args["stream"].rows.tolist() == [0] and res.args["stream"].values.tolist() == [3]
    assert res.args["bytes"].rows.tolist() == [0] and res.args["bytes"].values.tolist() == [6]
    assert res.args["device"].rows.tolist() == [2] and res.args["device"].values.tolist() == [INT_MISSING]
    assert text_of(res, res.args["Input Dims"].values) == ["[1]"]
    # an overwritten value is never interned
    assert "a" not in res.strings and "s" not in res.strings


def test_args_missing_or_not_an_object():
    res = both(
        '[{"args": [1, {"stream": 2}]}, {"args": "x"}, {"args": null}, {"ph": "X"}, {"args": {}},'
        ' {"args": {"stream": 9, "unknown": {"stream": 1}}}, {"other": {"args": {"stream": 1}}}]'
    )
    assert res.n_events == 7
    assert res.args["stream"].rows.tolist() == [5] and res.args["stream"].values.tolist() == [9]


def test_rows_ascending_and_sparse():
    events = [{"args": {"stream": i}} if i % 3 == 0 else {"ph": "X"} for i in range(1000)]
    res = both(msgspec.json.encode(events))
    assert res.args["stream"].rows.tolist() == list(range(0, 1000, 3))
    assert res.args["stream"].values.tolist() == list(range(0, 1000, 3))


def test_non_object_elements_are_events_with_fields_missing():
    # scan_py's typed decoder rejects these documents; the C scanner counts them as empty events
    res = scan_c(b'[1, "x", [], null, {"ph": "X", "args": {"stream": 2}}, true, {"ph": "X"}]')
    assert res.n_events == 7
    assert text_of(res, res.top["ph"]) == [None] * 4 + ["X", None, "X"]
    assert res.args["stream"].rows.tolist() == [4]
    assert np.isnan(res.top["dur"]).all() and (res.top["ts"] == INT_MISSING).all()
    assert (res.top["id"] == INT_MISSING).all()


def test_buffer_types_and_custom_fields():
    doc = b'[{"a": "1", "b": 2.5, "args": {"c": [1, 2]}, "args2": 3}]'
    for buf in (doc, bytearray(doc), memoryview(doc), msgspec.Raw(doc)):
        n, top, rows, values, strings = _scan.scan(buf, (("a", "i"), ("b", "f"), ("args2", "s")), [("c", "s")])
        assert n == 1
        assert np.frombuffer(top[0], np.int64).tolist() == [1]
        assert np.frombuffer(top[1], np.float64).tolist() == [2.5]
        assert [strings[c] for c in np.frombuffer(top[2], np.int32)] == ["3"]
        assert np.frombuffer(rows[0], np.int32).tolist() == [0]
        assert [strings[c] for c in np.frombuffer(values[0], np.int32)] == ["[1,2]"]
    # "args" may itself be a top field (its minified text)
    n, top, rows, values, strings = _scan.scan(doc, (("args", "s"),), (("c", "i"),))
    assert [strings[c] for c in np.frombuffer(top[0], np.int32)] == ['{"c":[1,2]}']
    assert np.frombuffer(values[0], np.int64).tolist() == [INT_MISSING]


def test_bad_field_specs():
    with pytest.raises(ValueError, match="kind"):
        _scan.scan(b"[]", (("a", "x"),), ())
    with pytest.raises(TypeError):
        _scan.scan(b"[]", (("a",),), ())
    with pytest.raises(ValueError, match="duplicate"):
        _scan.scan(b"[]", (("a", "i"), ("a", "f")), ())
    with pytest.raises(TypeError):
        _scan.scan("[]", (), ())  # str has no buffer


def test_invalid_utf8_is_replaced_the_same_by_both_scanners():
    # every invalid sequence becomes U+FFFD (after unescaping), and texts that become equal share one code
    from perfreport.load.scanner import unique_strings

    doc = (b'[{"name": "a\xffb"}, {"name": "a\xfeb"}, {"name": "a\xffb"}, {"cat": ["\xff"]},'
           b' {"name": "\xe2\x82", "args": {"k\xff": 1, "stream": "\xff", "grid": "\xc3"}}, {"name": "a\\u00ffb\xc3"}]')
    res = unique_strings(scan_c(doc))
    assert_same(res, unique_strings(scan_py(doc)))
    assert text_of(res, res.top["name"]) == ["a\ufffdb"] * 3 + [None, "\ufffd", "a\xffb\ufffd"]
    assert text_of(res, res.top["cat"]) == [None, None, None, '["\ufffd"]', None, None]
    assert res.top["name"][0] == res.top["name"][1]  # merged: one text, one code
    assert res.args["stream"].values.tolist() == [INT_MISSING]
    assert len(set(res.strings)) == len(res.strings)
    # U+FFFD written as valid UTF-8 (or escaped) is a character like any other: distinct texts stay apart
    valid = '[{"name": "a\ufffd"}, {"name": "b\ufffd"}, {"name": "a\\ufffd"}, {"name": "\u00e9"}]'.encode()
    kept = unique_strings(scan_c(valid))
    assert text_of(kept, kept.top["name"]) == ["a\ufffd", "b\ufffd", "a\ufffd", "\u00e9"]
    assert kept.top["name"].tolist()[:3] == [0, 1, 0] and len(kept.strings) == 3


def test_nested_containers():
    res = both(
        '[{"args": {"Input Dims": [[], [{}], {"a": []}, [[[]]], {"b": {"c": [1, {"d": [2]}]}}],'
        ' "block": {}, "grid": [], "stream": [], "Rank": {}}}, {"x": [{"args": {"stream": 1}}]}]'
    )
    assert text_of(res, res.args["Input Dims"].values) == ['[[],[{}],{"a":[]},[[[]]],{"b":{"c":[1,{"d":[2]}]}}]']
    assert text_of(res, res.args["block"].values) == ["{}"] and text_of(res, res.args["grid"].values) == ["[]"]
    assert res.args["stream"].rows.tolist() == [0] and res.args["stream"].values.tolist() == [INT_MISSING]


def test_deep_nesting():
    inner = "[" * 1000 + "]" * 1000
    res = scan_c(f'[{{"args": {{"Input Dims": {inner}}}}}]'.encode())
    assert text_of(res, res.args["Input Dims"].values) == [inner]
    for doc in ("[" * 5000 + "]" * 5000, '[{"a": ' + "[" * 3000, '[{"args": {"x": ' + '{"a":' * 1100):
        with pytest.raises(ValueError, match="nesting too deep"):
            scan_c(doc.encode())


# --------------------------------------------------------------------------------------------
# invalid input: ValueError with a byte offset, never a crash


INVALID = [
    b"",
    b"   ",
    b"{}",
    b'"x"',
    b"[",
    b"]",
    b'[{"ph": "X"',
    b'[{"ph": "X"}',
    b'[{"name": "a\\',
    b'[{"name": "a',
    b"[1,",
    b"[1,]",
    b"[,1]",
    b"[1 2]",
    b'[{"a":1,}]',
    b'[{"a" 1}]',
    b'[{"a":}]',
    b"[{1:2}]",
    b"[{'a':2}]",
    b"[01]",
    b"[1.]",
    b"[.5]",
    b"[-]",
    b"[1e]",
    b"[1e+]",
    b"[+1]",
    b"[NaN]",
    b"[tru]",
    b"[nul]",
    b"[falsey]",
    b'["\x01"]',
    b'["\\x"]',
    b'["\\u12"]',
    b'["\\u12g4"]',
    b"[] x",
    b"[][]",
    b'[{"name": "\\ud800"}]',
    b'[{"name": "\\ud800x"}]',
    b'[{"name": "\\udc00\\ud800"}]',
    b'[{"args": {"Input Dims": "\\ud83d\\u0041"}}]',
    b'[{"args": {"stream": 1',
    b'[{"args": {"stream" 1}}]',
    b"[\x00]",
    b"[[}]",
    b"[{]}",
    b'[{"a":[1}]',
    b'[{"a":{"b":1]}]',
    b"[[1,]]",
    b'[{"a":{,}}]',
    b'[{"a":{"b"}}]',
    b'[{"a":[1 2]}]',
    b'[{"a":{"b":1 "c":2}}]',
    b'[{"a":[[]}]',
    b'[{"a":{}]',
    b'[[{"a":1},]]',
]


@pytest.mark.parametrize("doc", INVALID, ids=repr)
def test_invalid_json_raises(doc):
    with pytest.raises(ValueError, match=r"invalid JSON in traceEvents at byte \d+: "):
        scan_c(doc)


def test_error_offset():
    with pytest.raises(ValueError, match="at byte 9: "):
        scan_c(b'[{"a": 1 "b": 2}]')


def _sample_doc() -> bytes:
    """A few hundred real events (or synthetic ones when no trace is at hand), as one array."""
    if TRACES:
        path = max(TRACES, key=lambda p: p.stat().st_size)
        raws = msgspec.json.decode(read_events_json(path), type=list[msgspec.Raw])
        step = max(1, len(raws) // 400)
        return b"[" + b",\n".join(bytes(r) for r in raws[::step][:400]) + b"]"
    events = [
        {
            "ph": "X", "cat": "kernel", "name": f"k\u00e9\"{i}\\", "pid": i % 3, "tid": "stream 7",
            "ts": 1e6 + i * 0.5, "dur": i, "id": i,
            "args": {"stream": 7, "grid": [i, 1, 1], "Input Dims": [[1, 2], []], "bytes": str(i)},
        }
        for i in range(300)
    ]  # fmt: skip
    return msgspec.json.encode(events).replace(b",", b", ")


def test_truncated_prefixes_raise():
    doc = _sample_doc()
    assert_same(scan_c(doc), scan_py(doc))
    rng = random.Random(1234)
    cuts = sorted(set(rng.randrange(len(doc)) for _ in range(3000)) | set(range(min(len(doc), 300))))
    for cut in cuts:
        with pytest.raises(ValueError, match="invalid JSON in traceEvents"):
            scan_c(doc[:cut])


def test_mutations_agree_with_msgspec_validity():
    """Mutate bytes of a real document: the C scanner accepts exactly what msgspec parses as JSON
    (restricted to ASCII mutations so both judge the same bytes), and never crashes."""
    doc = bytearray(_sample_doc())
    ascii_positions = [i for i, b in enumerate(doc) if b < 0x80]  # keeps the text valid UTF-8
    rng = random.Random(99)
    alphabet = b'{}[]",:\\ \n0123456789.eE+-tfnulrasxu'
    accepted = rejected = 0
    for _ in range(2000):
        mutated = bytearray(doc)
        for _ in range(rng.randint(1, 3)):
            mutated[rng.choice(ascii_positions)] = rng.choice(alphabet)
        mutated = bytes(mutated)
        try:
            msgspec.json.decode(mutated)
            valid = True
        except (msgspec.DecodeError, UnicodeDecodeError) as exc:
            if "out of range" in str(exc):
                # msgspec refuses numbers beyond the float range, though valid JSON (scan_py reads
                # them as inf, like the C scanner), and stops there: validity is unknown
                continue
            valid = False
        try:
            scan_c(mutated)
            ok = True
        except ValueError as exc:
            assert "invalid JSON in traceEvents at byte" in str(exc)
            ok = False
        if valid != ok:
            # msgspec decodes every string and so also rejects lone surrogates the scanner skips
            assert valid is False and b"\\u" in mutated, mutated
        accepted += ok
        rejected += not ok
    assert accepted and rejected


def test_random_garbage_never_crashes():
    rng = random.Random(7)
    for i in range(3000):
        n = rng.randrange(64)
        if i % 2:
            garbage = bytes(rng.randrange(256) for _ in range(n))
        else:
            garbage = bytes(rng.choice(b'[]{}",:\\0123456789-.eEtrufalsn \x00\xff') for _ in range(n))
        try:
            scan_c(b"[" + garbage)
        except ValueError:
            pass


# --------------------------------------------------------------------------------------------
# randomized equivalence: generated documents through both scanners


def _random_number(rng: random.Random) -> str:
    sign = rng.choice(["", "", "-"])
    digits = str(rng.randrange(10 ** rng.randint(1, 24)))
    r = rng.random()
    if r < 0.4:
        return sign + digits
    frac = "." + str(rng.randrange(10 ** rng.randint(1, 25))).zfill(rng.randint(1, 5)) if rng.random() < 0.8 else ""
    exp = rng.choice(["e", "E"]) + rng.choice(["", "+", "-"]) + str(rng.randint(0, 40)) if rng.random() < 0.3 else ""
    return sign + digits + frac + exp if frac or exp else sign + digits


_STRING_PIECES = [
    "a", "Z", " ", "é", "中", "😀", '\\"', "\\\\", "\\/", "\\n", "\\t", "\\u00e9", "\\ud83d\\ude00", "\\u0041",
    "0x1f", "12", "1e5", "-7.5", "_", "+", "inf", "nan", "\\u00a0", "(", ")", ",", "[", "]", "{", "}", ":",
]  # fmt: skip


def _random_string(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.3:  # numeric-looking, for the number parsers of 'f' / 'i' / 'n' fields
        body = rng.choice(
            ["  12 ", "0x1F", "-0x10", "+0X0", "0x", "1_000", "007", "1.5", "-2.5e3", ".5", "5.", "+3", "inf",
             "-Infinity", "NaN", "", "abc", "1 2", "\\u00a0 42\\u3000", "9223372036854775807", "1e400",
             "12345678901234567890.123", "0xdeadbeef", "\\u0661\\u0662"]
        )  # fmt: skip
    else:
        body = "".join(rng.choice(_STRING_PIECES) for _ in range(rng.randint(0, 12)))
    return '"' + body + '"'


def _ws(rng: random.Random) -> str:
    return rng.choice(["", "", "", " ", "\n  ", "\t", " \r\n "])


def _random_value(rng: random.Random, depth: int = 0) -> str:
    r = rng.random()
    if r < 0.35:
        return _random_number(rng)
    if r < 0.7:
        return _random_string(rng)
    if r < 0.78:
        return rng.choice(["true", "false", "null"])
    if depth >= 3:
        return "0"
    items = [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if r < 0.9:
        return "[" + _ws(rng) + ("," + _ws(rng)).join(items) + _ws(rng) + "]"
    members = [f'{_random_string(rng)}{_ws(rng)}:{_ws(rng)}{v}' for v in items]
    return "{" + _ws(rng) + ("," + _ws(rng)).join(members) + _ws(rng) + "}"


def _random_event(rng: random.Random) -> str:
    top_keys = [k for k, _ in TOP_FIELDS] + ["args", "args", "other", "s"]
    arg_keys = [k for k, _ in ARG_FIELDS] + ["Ev Idx", "cbid", "Input Strides"]
    members = []
    for key in rng.sample(top_keys, rng.randint(0, len(top_keys))) + rng.choice([[], ["name"], ["args"]]):
        if key == "args" and rng.random() < 0.85:
            picks = rng.sample(arg_keys, rng.randint(0, 8)) + rng.choice([[], ["stream"]])
            value = "{" + ",".join(f'{_ws(rng)}"{k}"{_ws(rng)}:{_ws(rng)}{_random_value(rng)}' for k in picks) + "}"
        else:
            value = _random_value(rng)
        members.append(f'"{key}"{_ws(rng)}:{_ws(rng)}{value}')
    return "{" + _ws(rng) + ("," + _ws(rng)).join(members) + _ws(rng) + "}"


@pytest.mark.parametrize("seed", range(8))
def test_random_documents_match_reference(seed):
    rng = random.Random(seed)
    doc = "[" + ",".join(_ws(rng) + _random_event(rng) for _ in range(300)) + _ws(rng) + "]"
    both(doc)


def test_numbers_at_every_digit_count():
    """Integers and decimals of 1 to 22 digits, split anywhere by the point, signed or not, as
    numbers and as strings, in 'f', 'i' and 'n' fields: the C scanner reads digit runs 8 at a
    time and has a fast path up to 19 digits, so each length and split is checked against the
    reference."""
    rng = random.Random(7)
    values = []
    for n in range(1, 23):
        digits = "".join(rng.choice("0123456789") for _ in range(n)).lstrip("0") or "0"
        for split in sorted({0, 1, len(digits) // 2, len(digits) - 1}):
            text = digits if split == 0 else digits[:split] + "." + digits[split:]
            if text.endswith(".") or text.startswith("."):
                continue
            for sign in ("", "-"):
                values += [sign + text, f'"{sign}{text}"', f'" +{text} "']
        values.append(digits + "e3")
    events = [f'{{"ts": {v}, "dur": {v}, "id": {v}, "args": {{"bytes": {v}, "stream": {v}}}}}' for v in values]
    both("[" + ", ".join(events) + "]")


def test_decimals_beside_the_exact_mantissa_bound():
    """'f' values written digits.digits take a shortcut while their digits, read as one
    integer, are at most 2**53 (then one division by an exact power of ten rounds correctly);
    decimals just below, at and above that bound, and zeros of every sign and length, match
    the reference (Python's float)."""
    bound = 2**53
    texts = []
    for m in (bound - 1, bound, bound + 1, bound + 3, 10**16 - 1, 10**17 + 7):
        digits = str(m)
        texts += [digits[:k] + "." + digits[k:] for k in (1, 5, len(digits) - 1)]
    texts += ["0.0", "0.000", "-0.0", "-0.000", "0.1", "93.758", "-2.5", "1712195495527227.2"]
    values = [t for text in texts for t in (text, "-" + text.lstrip("-"))]
    res = both("[" + ", ".join(f'{{"dur": {v}}}' for v in values) + "]")
    assert [float(v) for v in values] == res.top["dur"].tolist()
    assert [math.copysign(1.0, float(v)) for v in values] == [math.copysign(1.0, d) for d in res.top["dur"]]


def test_long_decimals_round_as_pythons_float():
    """'f' values of 16 to 19 significant digits (Kineto's derived floats: a copy's "memory
    bandwidth (GB/s)" 11.654320987654321) are mostly past the exact-mantissa shortcut; with a
    power of ten up to 19 either way they are rounded in 128-bit integer arithmetic. Random ones in every
    layout (point anywhere, leading zeros, exponents, signs), the exact halfway cases between two
    doubles (ties to even, both ways) and the integer bounds match Python's float bit for bit."""
    rng = random.Random(11)
    numbers = []
    for _ in range(4000):
        n = rng.randint(15, 19)
        digits = str(rng.randint(10 ** (n - 1), 10**n - 1))
        k = rng.randint(1, n - 1)
        text = rng.choice([digits[:k] + "." + digits[k:], "0." + "0" * rng.randint(0, 3) + digits,
                           f"{digits}e{rng.randint(-25, 25)}", f"{digits[0]}.{digits[1:]}E{rng.randint(-20, 20)}"])
        numbers.append(("-" if rng.random() < 0.3 else "") + text)
    for m in (2**53 + 1, 2**54 + 1, 2**54 + 3, 2**55 + 2, 2**55 + 6, 2**63 + 1, 2**64 - 1, 10**19 - 1):
        s = str(m)  # an odd multiple of a half-spacing is a tie: 2**54 + 1 rounds down to even, + 3 up
        numbers += [s, s + "0", s[:-1] + "." + s[-1], "0." + s, s + "e5", s + "e-19", s + "e19", s[:5] + "." + s[5:]]
    numbers += ["4503599627370496.5", "4503599627370497.5", "0.0013851614578824344", "8.182329192416114",
                "11.654320987654321"]
    res = both("[" + ", ".join(f'{{"dur": {t}, "args": {{"blocks per SM": {t}}}}}' for t in numbers) + "]")
    want = np.array([float(t) for t in numbers])
    assert res.top["dur"].view(np.int64).tolist() == want.view(np.int64).tolist()
    assert res.args["blocks per SM"].values.view(np.int64).tolist() == want.view(np.int64).tolist()


def test_numbers_read_as_they_are_scanned_at_the_int64_bound():
    """ts and dur (and args of kinds 'n' and 'f') are converted as they are read when written
    -?digits[.digits] in at most 19 digits; a timestamp whose ns pass int64 goes the general way.
    At the bound and beside it with 0 to 5 decimals, and at 19 and 20 digits, both scanners agree
    with exact decimal arithmetic."""
    limit = 2**63 - 1  # ns: 9223372036854775.807 µs
    values = ["9223372036854775", "9223372036854776", "9223372036854775.8", "9223372036854775.9",
              "9223372036854775.80", "9223372036854775.81", "9223372036854775.807", "9223372036854775.808",
              "922337203685477.5807", "922337203685477.5808", "92233720368547.75807", "1000000000000000.0079",
              "922337203685477.580", "0.0", "0.0001", "5.0005", "12.34567"]  # fmt: skip
    values += ["-" + v for v in values]
    values += ["1" * 19, "1" * 20, "1" * 18 + ".5", "1" * 18 + ".55", "0.1234567890123456789", "0.12345678901234567891"]
    doc = ", ".join(f'{{"ts": {v}, "dur": {v}, "args": {{"stream": {v}, "blocks per SM": {v}}}}}' for v in values)
    res = both("[" + doc + "]")
    n, top, rows, vals, strings = _scan.scan(("[" + doc + "]").encode(), (("ts", "n"), ("dur", "f")),
                                              (("stream", "n"), ("blocks per SM", "f")))
    ts, dur = np.frombuffer(top[0], np.int64).tolist(), np.frombuffer(top[1], np.float64).tolist()
    assert ts == res.top["ts"].tolist() and dur == res.top["dur"].tolist()
    assert np.frombuffer(vals[0], np.int64).tolist() == ts and np.frombuffer(vals[1], np.float64).tolist() == dur
    for v, got in zip(values, ts):
        exact = int(decimal.Decimal(v) * 1000)
        assert got == (exact if -(2**63) < exact <= limit else INT_MISSING), v
    assert dur == [float(v) for v in values]


def test_small_integer_fast_paths():
    """Plain integers take a shortcut in 'f' (up to 15 digits), 'i' (18) and 'n' (18, value at
    most INT64_MAX // 1000) fields; values on both sides of each bound match the reference."""
    edge = [0, 1, 999_999_999_999_999, 10**15, 10**17, 999_999_999_999_999_999, 10**18,
            9_223_372_036_854_775, 9_223_372_036_854_776, 9_223_372_036_854_775_807, 9_223_372_036_854_775_808]
    values = [f"{sign}{v}" for v in edge for sign in ("", "-")]
    events = [f'{{"ts": {v}, "dur": {v}, "id": {v}, "args": {{"bytes": {v}, "blocks per SM": {v}}}}}' for v in values]
    res = both("[" + ", ".join(events) + "]")
    assert math.copysign(1.0, res.top["dur"][1]) == -1.0  # "-0" is -0.0 in 'f'
    assert res.top["ts"][values.index("9223372036854775")] == 9_223_372_036_854_775_000
    assert res.top["ts"][values.index("9223372036854776")] == INT_MISSING


def test_long_traces_with_changing_key_order():
    """More events than the scanner samples before sizing its columns (4096), with member orders
    that change from event to event (the scanner remembers the key at each position): keys that
    are prefixes of others, escaped spellings of wanted keys, args whose keys come and go, and
    keys followed by more different keys than it remembers after one ("ph": seven)."""
    rng = random.Random(11)
    kinds = [
        '{{"ph": "X", "cat": "kernel", "name": "k{i}", "pid": 1, "tid": 7, "ts": {ts}, "dur": 3,'
        ' "args": {{"stream": 7, "correlation": {i}, "External id": {i}}}}}',
        '{{"name": "op{i}", "ph": "X", "ts": {ts}, "dur": 2, "cat": "cpu_op", "pid": 1, "tid": 2,'
        ' "args": {{"External id": {i}, "Input Dims": [[1, 2], []], "Sequence number": {i}}}}}',
        '{{"ph": "f", "id": {i}, "pid": 1, "tid": 7, "ts": {ts}, "cat": "ac2g", "name": "ac2g", "bp": "e"}}',
        '{{"p\\u0068": "X", "names": "x", "name": "n{i}", "ts": {ts}, "dur": 1, "pi": 5, "pid": 9,'
        ' "args": {{"correlation": {i}, "corr": 1, "External id": {i}}}}}',
        '{{"ph": "i", "ts": {ts}, "args": {{}}, "name": "mark"}}',
        '{{"ph": "s", "pid": 1, "id": {i}, "tid": 7, "ts": {ts}, "cat": "ac2g", "name": "ac2g"}}',
        '{{"ph": "C", "name": "mem", "pid": 1, "ts": {ts}, "args": {{"Total Allocated": {i}}}}}',
        '{{"ph": "M", "dur": 0, "pid": {i}, "name": "process_name", "args": {{"name": "p{i}"}}}}',
    ]
    events = [rng.choice(kinds).format(i=i, ts=1_700_000_000_000_000 + 3 * i) for i in range(6000)]
    both("[" + ",\n".join(events) + "]")


@pytest.fixture(params=[2048, 1], ids=["cache", "one-slot-cache"])
def text_cache_slots(request):
    """The scanner's text cache as built, and with a single entry, where every value is compared
    with the last one stored (values that only start alike, numbers that go on past it)."""
    previous = _scan._set_text_cache_slots(request.param)
    yield request.param
    _scan._set_text_cache_slots(previous)


def test_repeated_text_values(text_cache_slots):
    """Strings, arrays and objects in kind-'s' fields (top level and args), seen again and again:
    the scanner converts a raw text it has seen once from a cache (no validation, no minifying,
    no hashing). Same text with other spacing or escapes, texts that share their first 16 or 32
    bytes, long ones, a duplicate key in one event, values in fields of other kinds, and values
    right at the end of the buffer all match the reference."""
    rng = random.Random(5)
    shapes = ["[[1024, 8, 96], []]", "[[1024,8,96],[]]", "[[1024, 8, 96], [1]]", "[[1024, 8, 96], [2]]",
              "[[1024, 8, 96], [1024, 8, 96], [1]]", "[[1024, 8, 96], [1024, 8, 96], [2]]",
              "[]", "[[]]", '["float", "Scalar"]', '[ "float" , "Scalar" ]', '{"a": [1, 2], "b": "x"}',
              "[" + ", ".join(str(i) for i in range(40)) + "]", '["a\\u00e9", "b\\"c"]', "[[1, 2], [3, 4]]"]
    names = ['"op"', '"o\\u0070"', '""', '"aten::convolution_backward_overrideable"', '"aten::convolution_backward_x"',
             '"' + "void at::native::elementwise_kernel<128, 4>" * 3 + '"', '"tab\\there"', '"123"', '"X"']
    events = []
    for i in range(3000):
        dims, types = rng.choice(shapes), rng.choice(shapes)
        extra = f', "Input Dims": {rng.choice(shapes)}' if i % 17 == 0 else ""  # duplicate key: last wins
        name = rng.choice(names)
        events.append(f'{{"ph": "X", "name": {name}, "cat": {rng.choice(names)}, "ts": {i}, "args": {{"Input Dims": '
                      f'{dims}, "Input type": {types}{extra}, "stream": {rng.choice(shapes)}, "Concrete Inputs": {dims},'
                      f' "dtype": {name}, "bytes": {name}}}, "dur": {name}}}')
    res = both("[" + ",\n".join(events) + "]")
    assert len(set(text_of(res, res.args["Input Dims"].values))) == 12  # spacing variants share a text
    assert len(set(text_of(res, res.top["name"]))) == len(names) - 1  # "op" and "o\u0070" are one text
    numbers = ["12", "123", "12.5", "12e3", "12E3", "-12", "0", "-0", "0.0", "1.5e-3", "3113936", "7",
               "31139360000000001", "31139360000000002", "3113936000000000.5"]  # one entry (first 16 bytes)
    events = [f'{{"pid": {rng.choice(numbers)}, "tid": {rng.choice(numbers)}, "ts": {i}}}' for i in range(3000)]
    res = both("[" + ", ".join(events) + "]")  # numbers in kind-'s' fields: a longer number is not a hit
    assert set(text_of(res, res.top["pid"])) == set(numbers)
    for tail in shapes + names + numbers:  # the last value ends within 32 bytes of the buffer's end
        both('[{"args": {"Input Dims": ' + tail + '}}, {"args": {"Input Dims": ' + tail + "}}]")
        both('[{"name": ' + tail + '}, {"name": ' + tail + "}]")
        both('[{"pid": ' + tail + '}, {"pid": ' + tail + "}]")
    pairs = [("12", "123"), ("12", "12.5"), ("12", "12e3"), ("12", "12E3"), ("-12", "-123"), ("0", "0.5"),
             ("0", "0e1"), ("-0", "-0.0"), ("1.5", "1.55"), ("1.5", "1.5e3"), ("1e3", "1e32"), ("7", "70"),
             ("3113936000000000", "31139360000000001")]
    for number, longer in pairs:  # a cached number, then a longer one that starts with it
        res = both('[{"pid": ' + number + '}, {"pid": ' + longer + '}, {"pid": ' + number + "}]")
        assert text_of(res, res.top["pid"]) == [number, longer, number]


def test_repeated_compound_value_then_bad_text(text_cache_slots):
    """A value that the cache knows, followed by what makes the text invalid, is rejected at the
    same byte as without the cache."""
    good = '{"args": {"Input Dims": [[1, 2], []], "Input type": ["float"]}}'
    for bad in (']]', '] , "x": 1}}', ' 7}}', '}'):
        doc = "[" + good + ", " + good[:-2] + bad + "]"
        cold = "[" + good[:-2] + bad + "]"
        with pytest.raises(ValueError) as warm_error:
            scan_c(doc.encode())
        with pytest.raises(ValueError) as cold_error:
            scan_c(cold.encode())
        shift = len(good) + 2
        want = re.sub(r"byte (\d+)", lambda m: f"byte {int(m.group(1)) + shift}", str(cold_error.value))
        assert str(warm_error.value) == want


@pytest.mark.parametrize("first", ['": ', '":'], ids=["spaced-first", "compact-first"])
@pytest.mark.parametrize("length", [1, 12, 27, 28, 29, 30, 40, 41])
def test_keys_of_every_length_and_spacing(length, first):
    """Keys are matched against the member text as the key's first occurrence spaced it, '"key": '
    or '"key":', in 32 bytes (keys up to 28 or 29 bytes); longer keys, other spacing and members
    within 32 bytes of the end take the general path."""
    key = ("k" * length)[:length]
    events = []
    other = '":' if first == '": ' else '": '
    for i, sep in enumerate([first, other, '" : ', '":\n ', first]):
        events.append(f'{{"name": "n{i}", "{key}{sep}{i}, "ph{sep}"X", "args": {{"{key}{sep}1, "stream{sep}{i}}}}}')
    for n in (1, 3, 40):
        doc = "[" + ", ".join(events * n) + "]"
        both(doc)
        custom = _scan.scan(doc.encode(), [("name", "s"), (key, "i"), ("ph", "s")], [(key, "i"), ("stream", "i")])
        assert np.frombuffer(custom[1][1], np.int64).tolist() == list(range(5)) * n
        assert np.frombuffer(custom[3][1], np.int64).tolist() == list(range(5)) * n


# --------------------------------------------------------------------------------------------
# scan_document: a whole trace file in one pass, against the two-pass path it replaces
# (msgspec splits the top level, the scanner reads the traceEvents text)

from perfreport.errors import TraceError  # noqa: E402
from perfreport.load import kineto, scanner  # noqa: E402
from perfreport.load.discover import RankFile  # noqa: E402

_top_level = msgspec.json.Decoder(dict[str, msgspec.Raw])


def scan_doc(doc) -> tuple[ScanResult, list]:
    n, top, rows, values, strings, members = _scan.scan_document(doc, TOP_FIELDS, ARG_FIELDS)
    return scanner._columns(n, top, rows, values, strings), members


def read_document(path: Path) -> bytes:
    opener = _gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as f:
        return f.read()


def metadata_of(doc: bytes, members) -> dict:
    """The members' values decoded as the loader does (last duplicate wins)."""
    return {key: msgspec.json.decode(doc[start:end]) for key, (start, end) in dict(members).items()}


def two_pass(doc: bytes) -> tuple[ScanResult, dict]:
    """What the loader did before scan_document: split with msgspec, scan the traceEvents text."""
    top = _top_level.decode(doc)
    events = top.pop("traceEvents")
    return scan_c(events), {key: msgspec.json.decode(raw) for key, raw in top.items()}


def assert_document_matches_two_pass(doc: bytes) -> ScanResult:
    got, members = scan_doc(doc)
    want, want_meta = two_pass(doc)
    assert_same(got, want)
    assert got.strings == want.strings  # same codes too: the same scanner over the same events
    meta = metadata_of(doc, members)
    assert meta == want_meta and list(meta) == list(want_meta)
    return got


@pytest.mark.skipif(not TRACES, reason=f"no traces under {TRACES_DIR}")
@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p.relative_to(TRACES_DIR)))
def test_document_real_trace_matches_two_pass_and_reference(path):
    doc = read_document(path)
    got = assert_document_matches_two_pass(doc)
    if path.stat().st_size < 3_000_000:  # the big ones are checked against scan_py above
        assert_same(got, reference_scan(path, _top_level.decode(doc)["traceEvents"], last_use=True))
    # the member spans are exactly the raw values msgspec finds
    _, members = scan_doc(doc)
    top = _top_level.decode(doc)
    assert [k for k, _ in members] == [k for k in top if k != "traceEvents"]
    for key, (start, end) in members:
        assert doc[start:end] == bytes(top[key])


def test_document_members_and_layouts():
    doc = (
        b' \n{ "schemaVersion" : 1 ,"deviceProperties":[{"id": 0, "name": "A100"}],\n'
        b'"trace\\u0045vents": [ {"ph": "X", "name": "k", "ts": 1.5, "args": {"stream": 7}} , {} ],'
        b' "distributedInfo": {"rank": 3}, "caf\xc3\xa9": "\\u00e9", "n\\u0061me": null, "big": 1e400 } \r\n'
    )
    res, members = scan_doc(doc)
    assert res.n_events == 2 and text_of(res, res.top["name"]) == ["k", None]
    assert res.top["ts"].tolist() == [1500, INT_MISSING] and res.args["stream"].values.tolist() == [7]
    assert [k for k, _ in members] == ["schemaVersion", "deviceProperties", "distributedInfo", "café", "name", "big"]
    spans = dict(members)
    assert doc[slice(*spans["schemaVersion"])] == b"1"
    assert doc[slice(*spans["deviceProperties"])] == b'[{"id": 0, "name": "A100"}]'
    assert doc[slice(*spans["big"])] == b"1e400"  # validated as JSON, not converted
    for doc in (b'{"traceEvents": []}', b'{"traceEvents":[ ]}', b'\t{\n"traceEvents"\n:\n[\n]\n}\n'):
        res, members = scan_doc(doc)
        assert res.n_events == 0 and members == [] and all(c.shape == (0,) for c in res.top.values())


def test_document_duplicate_keys_last_wins():
    doc = (
        b'{"a": 1, "traceEvents": [{"name": "first"}, {"name": "x"}], "a": {"b": 2},'
        b' "traceEvents": {"not": "a list"}, "traceEvents": [{"name": "last", "args": {"stream": 1}}], "z": 0}'
    )
    res = assert_document_matches_two_pass(doc)
    assert res.n_events == 1 and res.strings == ["last"]  # nothing of the earlier arrays is left
    assert res.args["stream"].rows.tolist() == [0]
    _, members = scan_doc(doc)
    assert [k for k, _ in members] == ["a", "a", "z"]
    assert metadata_of(doc, members) == {"a": {"b": 2}, "z": 0}
    with pytest.raises(ValueError, match='"traceEvents" is an object, expected a list'):
        scan_doc(b'{"traceEvents": [{"name": "a"}], "traceEvents": {}}')


DOCUMENT_ERRORS = [
    (b"[1, 2]", "the top level is not a JSON object"),
    (b' "x"', "the top level is not a JSON object"),
    (b"null", "the top level is not a JSON object"),
    (b"{}", 'no "traceEvents" key at the top level'),
    (b'{"schemaVersion": 1, "traceevents": []}', 'no "traceEvents" key at the top level'),
    (b'{"traceEvents": {"a": []}}', '"traceEvents" is an object, expected a list'),
    (b'{"traceEvents": "[]"}', '"traceEvents" is a string, expected a list'),
    (b'{"traceEvents": null}', '"traceEvents" is null, expected a list'),
    (b'{"traceEvents": 12}', '"traceEvents" is not a list, expected a list'),
    (b'{"traceEvents": true}', '"traceEvents" is not a list, expected a list'),
    (b"", "invalid JSON at byte 0: unexpected end of input"),
    (b"  \n", "invalid JSON at byte 3: unexpected end of input"),
    (b"{not json", "invalid JSON at byte 1: expected a string key"),
    (b'{"traceEvents": []', "invalid JSON at byte 18: expected ',' or '}'"),
    (b'{"traceEvents": []} x', "invalid JSON at byte 20: data after the top-level object"),
    (b'{"traceEvents": [], "a": 1 "b": 2}', "invalid JSON at byte 27: expected ',' or '}'"),
    (b'{"traceEvents": [{"ph": "X",, }]}', "invalid JSON at byte 28: expected a string key"),
    (b'{"a": [1, 2,], "traceEvents": []}', "invalid JSON at byte 12: invalid value"),
    (b'{"traceEvents": [], "a": "\\ud800"}', "invalid JSON at byte 26: invalid utf-16 surrogate pair"),
    (b'{"traceEvents": [{"x": "\\udc00"}]}', "invalid JSON at byte 24: lone utf-16 low surrogate"),
    (b'{"traceEvents": [], "a": ' + b"[" * 1100, "invalid JSON at byte 1048: nesting too deep"),
]


@pytest.mark.parametrize("doc,message", DOCUMENT_ERRORS, ids=lambda x: repr(x)[:40])
def test_document_errors(doc, message):
    with pytest.raises(ValueError) as info:
        scan_doc(doc)
    assert str(info.value) == message


def test_document_key_not_utf8():
    # a top-level key must decode (msgspec decodes the keys too); string values are only skipped
    with pytest.raises(UnicodeDecodeError):
        scan_doc(b'{"a\xff": 1, "traceEvents": []}')
    res, members = scan_doc(b'{"a": "\xff", "traceEvents": [{"cat": "\xfe"}]}')
    assert members == [("a", (6, 9))] and res.strings == ["\ufffd"]


def test_document_truncated_prefixes_raise():
    events = _sample_doc()
    doc = b'{\n  "schemaVersion": 1,\n  "deviceProperties": [{"id": 0, "name": "\\u00e9"}],\n  "traceEvents": ' + events
    doc += b',\n  "traceName": "x",\n  "baseTimeNanoseconds": 1700000000000000000\n}\n'
    assert_document_matches_two_pass(doc)
    rng = random.Random(4321)
    end = len(doc.rstrip())
    cuts = sorted(set(rng.randrange(end) for _ in range(2000)) | set(range(min(end, 300))) | set(range(end - 100, end)))
    for cut in cuts:
        with pytest.raises(ValueError, match=r"^invalid JSON at byte (\d+): |^the top level is not") as info:
            scan_doc(doc[:cut])
        offset = str(info.value).split("byte ")[-1].split(":")[0]
        assert not offset.isdigit() or int(offset) <= cut


def _validity_two_pass(doc: bytes) -> bool | None:
    """Would the two-pass path load ``doc``? None where msgspec's answer is not comparable."""
    try:
        top = _top_level.decode(doc)
    except RecursionError:
        return None
    except (msgspec.DecodeError, UnicodeDecodeError):
        return False
    if bytes(top.get("traceEvents", b"x"))[:1] != b"[":
        return False
    try:
        scan_c(top["traceEvents"])
    except ValueError:
        return False
    return True


def test_document_mutations_agree_with_two_pass():
    """Mutated documents: scan_document accepts exactly what the two-pass path accepts (including
    lone surrogates, now refused in every string as msgspec does), with the same result."""
    doc = bytearray(b'{"schemaVersion": 1, "deviceProperties": [{"id": 0, "x": "a\\u00e9\\ud83d\\ude00"}],'
                    b' "traceEvents": ' + _sample_doc() + b', "traceName": "x\\"y", "z": [1.5e3, true, null]}')
    ascii_positions = [i for i, b in enumerate(doc) if b < 0x80]
    rng = random.Random(2024)
    alphabet = b'{}[]",:\\ \n0123456789.eE+-tfnulrasxudcDC'
    accepted = rejected = 0
    for _ in range(1500):
        mutated = bytearray(doc)
        for _ in range(rng.randint(1, 3)):
            mutated[rng.choice(ascii_positions)] = rng.choice(alphabet)
        mutated = bytes(mutated)
        valid = _validity_two_pass(mutated)
        try:
            got, members = scan_doc(mutated)
            ok = True
        except ValueError:
            ok = False
        if valid is not None:
            assert ok == valid, mutated
        if ok and valid:
            want, _ = two_pass_raw(mutated)
            assert_same(got, want)
        accepted += ok
        rejected += not ok
    assert accepted and rejected


def two_pass_raw(doc: bytes) -> tuple[ScanResult, dict]:
    top = _top_level.decode(doc)
    return scan_c(top.pop("traceEvents")), top


def test_document_random_garbage_never_crashes():
    rng = random.Random(11)
    for i in range(3000):
        n = rng.randrange(64)
        if i % 2:
            garbage = bytes(rng.randrange(256) for _ in range(n))
        else:
            garbage = bytes(rng.choice(b'[]{}",:\\0123456789-.eEtrufalsn \x00\xff') for _ in range(n))
        for doc in (b"{" + garbage, b'{"traceEvents": [' + garbage, b'{"traceEvents": [], ' + garbage):
            try:
                scan_doc(doc)
            except ValueError:
                pass


@pytest.mark.parametrize("seed", range(4))
def test_document_random_documents_match_reference(seed):
    rng = random.Random(seed)
    events = "[" + ",".join(_ws(rng) + _random_event(rng) for _ in range(200)) + _ws(rng) + "]"
    meta = [f'"m{i}"{_ws(rng)}:{_ws(rng)}{_random_value(rng)}' for i in range(rng.randint(0, 4))]
    members = meta[: len(meta) // 2] + [f'"traceEvents":{_ws(rng)}{events}'] + meta[len(meta) // 2 :]
    doc = ("{" + _ws(rng) + ("," + _ws(rng)).join(members) + _ws(rng) + "}").encode()
    got = assert_document_matches_two_pass(doc)
    assert_same(got, scan_py(events.encode()))


# --------------------------------------------------------------------------------------------
# the columns own their memory (handed over, not copied) and nothing refers to the input


def test_columns_own_their_memory():
    doc = bytearray(b'{"traceEvents": [{"ph": "X", "ts": 2, "dur": 1.5, "args": {"stream": 7}}, {"ph": "i"}]}')
    res, _ = scan_doc(doc)
    n, top, rows, values, strings = _scan.scan(bytearray(doc[16:-1]), TOP_FIELDS, ARG_FIELDS)
    doc[:] = b" " * len(doc)  # the input is gone: the columns are unaffected, and still readable
    assert res.top["ts"].tolist() == [2000, INT_MISSING] and res.top["dur"].tolist()[0] == 1.5
    assert res.args["stream"].rows.tolist() == [0] and res.args["stream"].values.tolist() == [7]
    col = top[TOP_FIELDS.index(("ts", "n"))]
    assert type(col) is _scan.Column and len(col) == 16 and bytes(col) == np.array([2000, INT_MISSING]).tobytes()
    view = memoryview(col)
    assert not view.readonly and view.nbytes == 16  # writable: the decode converts some in place
    arr = np.frombuffer(col, np.int64)
    assert arr.flags.writeable and arr.base is not None
    arr[1] = 5  # written in the Column's own block: no copy between them
    assert np.frombuffer(bytes(col), np.int64).tolist() == [2000, 5]
    del col, top, view
    assert arr.tolist() == [2000, 5]  # the array keeps its Column (and memory) alive
    empty = rows[ARG_FIELDS.index(("bytes", "i"))]
    assert len(empty) == 0 and np.frombuffer(empty, np.int32).shape == (0,)


# --------------------------------------------------------------------------------------------
# the loader: one pass when it can, the same errors and results as the two-pass path, and a
# memory-mapped .json that is closed when the load is done


def _maps_of(path: Path) -> list[str]:
    with open("/proc/self/maps") as f:
        return [line for line in f if str(path) in line]


def _load_file(path: Path):
    return kineto.load_rank_file(RankFile(path=path, rank_hint=None, hint_source="none"))


def _two_pass_only(monkeypatch) -> None:
    monkeypatch.setattr(kineto, "scan_document", lambda data, release=False, checksum=False: None)


@pytest.mark.skipif(not TRACES, reason=f"no traces under {TRACES_DIR}")
@pytest.mark.parametrize("path", [p for p in TRACES if p.stat().st_size < 3_000_000][:6], ids=lambda p: p.name[:40])
def test_loader_one_pass_equals_two_pass(path, tmp_path, monkeypatch):
    plain = tmp_path / "rank.json"
    plain.write_bytes(read_document(path))
    for source in (path, plain):
        with monkeypatch.context() as m:  # a valid file never needs the msgspec split
            m.setattr(kineto, "_split_top_level", lambda *a: pytest.fail("two-pass path taken"))
            got = _load_file(source)
        assert not _maps_of(source), "the map is closed after the load"
        with monkeypatch.context() as m:
            _two_pass_only(m)
            want = _load_file(source)
        assert got.meta == want.meta
        assert list(got.strings) == list(want.strings)
        for name in ("ph", "cat", "name", "pid", "tid", "ts", "dur", "stream", "correlation", "external_id",
                     "flow_id", "device", "linked", "iteration"):
            assert np.array_equal(getattr(got, name), getattr(want, name), equal_nan=True), name
        for name in ("ph", "ts", "linked"):  # no array is a view into the file's memory
            base = getattr(got, name)
            while getattr(base, "base", None) is not None:
                base = base.base
            assert not isinstance(base, mmap.mmap)


ERROR_FILES = [
    b"\"a string\"",
    b"{}",
    b'{"schemaVersion": 1}',
    b'{"traceEvents": {"a": 1}}',
    b'{"traceEvents": "x"}',
    b'{"traceEvents": null}',
    b'{"traceEvents": 5}',
    b'{"traceEvents": [{"ph": "X",, }]}',
    b"{not json",
    b'{"traceEvents": []} trailing',
    b'{"traceEvents": [], "a": 1e400}',  # valid JSON, but msgspec cannot decode the value
    b'{"traceEvents": [{"name": "\\ud800"}]}',
    b'{"traceEvents": [], "a": "\\udc00"}',
    b'{"a\xff": 1, "traceEvents": []}',
    b'{"traceEvents": [' + b"[" * 1100 + b"]" * 1100 + b"]}",
    b"   ",
    bytes(range(256)),
]


@pytest.mark.parametrize("content", ERROR_FILES, ids=lambda c: repr(c)[:40])
def test_loader_errors_same_as_two_pass(content, tmp_path, monkeypatch):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(TraceError) as info:
        _load_file(path)
    assert not _maps_of(path), "the map is closed even while the error is alive"
    with monkeypatch.context() as m:
        _two_pass_only(m)
        with pytest.raises(TraceError) as want:
            _load_file(path)
    assert str(info.value) == str(want.value)
    assert str(path) in str(info.value)


def test_loader_error_messages():
    """The wording the CLI shows (tests/test_errors.py checks a few through the CLI)."""
    def message(content: bytes) -> str:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            p = Path(d) / "t.json"
            p.write_bytes(content)
            with pytest.raises(TraceError) as info:
                _load_file(p)
            return str(info.value).split(": ", 1)[1]

    assert message(b"1") == "not a Kineto trace: the top level is not a JSON object"
    assert message(b"[{}, 1,, ]").startswith("invalid JSON in the event list (")
    assert message(b'{"a": 1}') == 'not a Kineto trace: no "traceEvents" key at the top level'
    assert message(b'{"traceEvents": {}}') == 'not a Kineto trace: "traceEvents" is an object, expected a list'
    assert message(b'{"traceEvents": "x"}') == 'not a Kineto trace: "traceEvents" is a string, expected a list'
    assert message(b'{"traceEvents": null}') == 'not a Kineto trace: "traceEvents" is null, expected a list'
    assert message(b'{"traceEvents": 1}') == 'not a Kineto trace: "traceEvents" is not a list, expected a list'
    assert message(b"{not json") == "invalid JSON (JSON is malformed: object keys must be strings (byte 1))"
    assert message(b'{"traceEvents": []} x') == "invalid JSON (JSON is malformed: trailing characters (byte 21))"
    assert message(b'{"traceEvents": [], "a": 1e400}') == "invalid JSON in 'a' (Number out of range)"
    assert message(b'{"a\xff": 1, "traceEvents": []}') == "invalid JSON (a top-level key is not UTF-8 text)"


def test_loader_without_extension(tmp_path, monkeypatch):
    """No C extension: msgspec splits, scan_py scans (the same model)."""
    doc = b'{"schemaVersion": 1, "traceEvents": ' + _sample_doc() + b', "traceName": "t"}'
    path = tmp_path / "t.json"
    path.write_bytes(doc)
    got = _load_file(path)
    monkeypatch.setattr(scanner, "_scan", None)
    assert scanner.scan_document(doc) is None
    want = _load_file(path)
    assert not _maps_of(path)
    assert got.meta == want.meta and got.n_events == want.n_events
    for name in ("ph", "name", "ts", "dur", "correlation", "linked"):
        a, b = getattr(got, name), getattr(want, name)
        if name in ("ph", "name"):
            a, b = got.strings[a], want.strings[b]
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), name


def _mapped_resident_mb(path: Path) -> float:
    """How much of ``path``'s mapping in this process is resident (MB; /proc/self/smaps)."""
    resident, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if "-" in line.split(" ", 1)[0]:  # a mapping's header line
                inside = line.rstrip().endswith(str(path))
            elif inside and line.startswith("Rss:"):
                resident += int(line.split()[1])
    return resident / 1024


@pytest.mark.skipif(not hasattr(mmap, "MADV_DONTNEED") or not Path("/proc/self/smaps").exists(),
                    reason="page release is a Linux mapping feature")
def test_a_mapped_trace_gives_its_scanned_pages_back_and_the_same_columns(tmp_path):
    from perfreport.load import scanner

    event = ('{"ph": "X", "cat": "kernel", "name": "volta_sgemm_%d", "pid": 0, "tid": 7, "ts": %d.5, '
             '"dur": 3, "args": {"correlation": %d, "stream": 7, "grid": [1, 2, 3]}}')
    events = ",\n".join(event % (i % 97, 1000 + i, i) for i in range(260_000))
    text = ('{"schemaVersion": 1, "deviceProperties": [{"name": "H100"}], "traceEvents": [' + events +
            '], "displayTimeUnit": "ms", "distributedInfo": {"rank": 3}}').encode()
    assert len(text) > 40 << 20  # past two release steps of 16 MB
    path = tmp_path / "big.json"
    path.write_bytes(text)
    want, want_members, _ = scanner.scan_document(text)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        scanner.scan_document(mapped)
        kept_mb = _mapped_resident_mb(path)  # without release: the whole text
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        got, members, _ = scanner.scan_document(mapped, release=True)
        released_mb = _mapped_resident_mb(path)
        # the spans of members before and after the events still read right (pages come back)
        assert {k: bytes(mapped[a:b]) for k, (a, b) in members} == {k: text[a:b] for k, (a, b) in want_members}
    assert members == want_members and [k for k, _ in members] == ["schemaVersion", "deviceProperties",
                                                                   "displayTimeUnit", "distributedInfo"]
    assert got.n_events == want.n_events == 260_000
    for name in want.top:
        assert np.array_equal(got.top[name], want.top[name], equal_nan=got.top[name].dtype.kind == "f"), name
    for name in want.args:
        assert np.array_equal(got.args[name].rows, want.args[name].rows), name
    assert list(got.strings) == list(want.strings)
    # the 41 MB text stayed whole in memory without release; with it, at most the tail not yet
    # handed back (< 16 MB step + 1 MB kept) and the pages of the members read afterwards
    assert kept_mb > 40 and released_mb < 18, (kept_mb, released_mb)


def _big_trace_text(n_events: int = 260_000) -> bytes:
    """A ~41 MB trace (past two release steps of 16 MB) with members before (~60 KB: pages of
    their own) and after the events."""
    event = ('{"ph": "X", "cat": "kernel", "name": "volta_sgemm_%d", "pid": 0, "tid": 7, "ts": %d.5, '
             '"dur": 3, "args": {"correlation": %d, "stream": 7, "grid": [1, 2, 3]}}')
    events = ",\n".join(event % (i % 97, 1000 + i, i) for i in range(n_events))
    devices = ", ".join(f'{{"id": {i}, "name": "H100"}}' for i in range(2000))
    return ('{"schemaVersion": 1, "deviceProperties": [' + devices + '], "traceEvents": [' + events +
            '], "displayTimeUnit": "ms", "distributedInfo": {"rank": 3}}').encode()


def test_the_scan_hashes_every_byte_of_the_document_as_it_reads_it(tmp_path, monkeypatch):
    """The one-pass scan's checksum is the XXH3-128 of the whole buffer (the file's checksum,
    :mod:`perfreport.load.checksums`): the members before and after the events included, in a
    file mapping whose pages are handed back as they are scanned, and in the loader's own memory,
    where a page handed back reads as zeros (so a byte hashed after its page went would show).
    Small documents: an empty events array, two "traceEvents" keys, whitespace after the object.
    A build without the hash gives None; a bad document raises as it does without hashing."""
    import xxhash

    from perfreport.load import scanner

    def want(data: bytes) -> str:
        return f"xxh3_128:{xxhash.xxh3_128(data).hexdigest()}"

    text = _big_trace_text()
    path = tmp_path / "big.json"
    path.write_bytes(text)
    plain, plain_members, _ = scanner.scan_document(text)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        mapped_result, mapped_members, mapped_checksum = scanner.scan_document(mapped, release=True, checksum=True)
    own_result, own_members, own_checksum = scanner.scan_document(bytearray(text), release=True, checksum=True)
    assert mapped_checksum == own_checksum == want(text)
    assert mapped_members == own_members == plain_members
    for got in (mapped_result, own_result):  # the same columns as without hashing
        assert got.n_events == plain.n_events == 260_000 and list(got.strings) == list(plain.strings)
        for name in plain.top:
            assert np.array_equal(got.top[name], plain.top[name], equal_nan=plain.top[name].dtype.kind == "f"), name
    for small in (b'{"traceEvents": []}', b'{"a": 1, "traceEvents": [{"ph": "X"}], "traceEvents": [{"ph": "i"}], '
                                          b'"z": [1, 2]}\n  \n'):
        assert scanner.scan_document(small, checksum=True)[2] == want(small)
    with pytest.raises(ValueError):
        scanner.scan_document(b'{"traceEvents": [{"ph": "X"},]}', checksum=True)
    built = scanner._scan
    monkeypatch.setattr(scanner, "_scan", type("OlderBuild", (), {"scan_document": staticmethod(
        lambda *args: built.scan_document(*args[:4]))})())
    assert scanner.scan_document(b'{"traceEvents": []}', checksum=True)[2] is None


@pytest.mark.skipif(not hasattr(mmap, "MADV_DONTNEED"), reason="page release is a Linux feature")
def test_release_in_own_memory_hands_back_the_events_only():
    """Decompressed text is the loader's own memory: released pages read as zeros afterwards, so
    they must lie inside the events array and never under another member's span."""
    from perfreport.load import scanner

    text = _big_trace_text()
    want, want_members, _ = scanner.scan_document(text)
    buf = bytearray(text)
    got, members, _ = scanner.scan_document(buf, release=True)
    assert members == want_members
    assert {k: bytes(buf[a:b]) for k, (a, b) in members} == {k: text[a:b] for k, (a, b) in want_members}
    assert got.n_events == want.n_events and list(got.strings) == list(want.strings)
    for name in want.top:
        assert np.array_equal(got.top[name], want.top[name], equal_nan=got.top[name].dtype.kind == "f"), name
    middle = len(buf) // 2
    assert bytes(buf[middle:middle + 4096]) == bytes(4096)  # handed back: it reads as zeros now
    assert bytes(buf[-(1 << 20):]) == text[-(1 << 20):]  # the last MB and the tail members stay


def test_gzipped_big_trace_loads_like_plain_and_errors_alike(tmp_path, monkeypatch):
    """A big .json.gz loads (with its events' pages handed back) exactly as the same .json, and
    an error far into its events reads the same as the two-pass path's (the text is decompressed
    again for it, since the scan zeroed pages the split would read)."""
    text = _big_trace_text()
    plain, packed = tmp_path / "rank.json", tmp_path / "rank.json.gz"
    plain.write_bytes(text)
    packed.write_bytes(gzip.compress(text, compresslevel=1))
    got, want = _load_file(packed), _load_file(plain)
    assert got.meta.distributed_info == want.meta.distributed_info == {"rank": 3}
    assert got.meta.device_properties == want.meta.device_properties
    assert len(got.meta.device_properties) == 2000
    assert got.meta.other == want.meta.other and list(got.strings) == list(want.strings)
    for name in ("ph", "cat", "name", "ts", "dur", "stream", "correlation", "linked"):
        assert np.array_equal(getattr(got, name), getattr(want, name), equal_nan=True), name
    broken = text.replace(b'"dur": 3, "args": {"correlation": 250000,', b'"dur": 3,, "args": {"correlation": 250000,')
    assert broken != text
    packed.write_bytes(gzip.compress(broken, compresslevel=1))
    with pytest.raises(TraceError) as info:
        _load_file(packed)
    with monkeypatch.context() as m:
        _two_pass_only(m)
        with pytest.raises(TraceError) as two_pass:
            _load_file(packed)
    assert str(info.value) == str(two_pass.value) and "invalid JSON" in str(info.value)
