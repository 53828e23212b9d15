"""The loader against an independent parser (stdlib json) on every real trace we have."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import importlib
import json
import os
import re
import sys
from collections import Counter
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from perfreport.load import load
from perfreport.model import DENSE_ARGS, TEXT_ID_BASE, SparseColumn, distinct_codes, step_name_table

from .conftest import SHARED_TRACES, TRACES, load_cached, trace_jobs


def all_trace_files() -> list[Path]:
    """Every trace file of tests/data and of the shared collection, each content once: most small
    traces are in both, copied byte for byte."""
    files = [p for job in trace_jobs() for p in sorted(job.glob("*.json*"))]
    if SHARED_TRACES.exists():  # the larger traces live only in the shared collection
        files += sorted(p for p in SHARED_TRACES.glob("**/*.json*") if "tests/data" not in str(p))
    first = {}
    for p in files:
        first.setdefault(hashlib.sha256(p.read_bytes()).digest(), p)
    return list(first.values())


def reference(path: Path) -> dict:
    """The file parsed by the stdlib, numbers kept exact: integers as int, the others as Decimal."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f, parse_float=Decimal)


@pytest.mark.parametrize("path", all_trace_files(), ids=lambda p: f"{p.parent.name}/{p.name[:30]}")
def test_columns_match_independent_parser(path: Path) -> None:
    doc = reference(path)
    events = doc["traceEvents"]
    trace = load_cached(str(path))[next(iter(load_cached(str(path)).ranks))]
    assert trace.n_events == len(events)
    cats = Counter(e.get("cat") for e in events)
    assert Counter(trace.decode(trace.cat[trace.cat >= 0])) == Counter({k: v for k, v in cats.items() if k is not None})
    assert (trace.ph >= 0).sum() == sum(1 for e in events if "ph" in e)
    origin = Decimal(trace.meta.ts_origin_us)
    # relative timestamps are exact to the ns: compare with the exact decimal difference
    ts = np.array([float(e["ts"] - origin) if "ts" in e else np.nan for e in events])
    dur = np.array([float(e["dur"]) if "dur" in e else np.nan for e in events])
    np.testing.assert_array_equal(trace.ts, ts)
    np.testing.assert_array_equal(trace.dur, dur)
    corr = np.array([int(e["args"]["correlation"]) if isinstance(e.get("args"), dict) and type(e["args"].get("correlation")) in (int, Decimal) else -1 for e in events])
    np.testing.assert_array_equal(trace.correlation, corr)
    names = [e.get("name", "") for e in events]
    assert list(trace.decode(trace.name)) == names
    # the step number of every event's name, from the loader's table (-1: not a ProfilerStep#N)
    steps = [int(m.group(1)) if isinstance(n, str) and (m := re.match(r"ProfilerStep\s*#\s*(\d+)", n)) else -1
             for n in names]
    assert trace.step_name_numbers()[trace.name].tolist() == steps
    tids = [e.get("tid") for e in events]
    decoded_tid = [trace.strings[TEXT_ID_BASE - v] if v <= TEXT_ID_BASE else v for v in trace.tid.tolist()]
    assert decoded_tid == [int(t) if isinstance(t, (str, Decimal)) and str(t).lstrip("-").isdigit() else (-1 if t is None else t) for t in tids]


def test_metadata_and_rank_from_distributed_info() -> None:
    traces = load_cached(str(Path(__file__).parent / "data/traces/hta_sampled_2of128rank"))
    assert traces.rank_ids == [0, 1]
    meta = traces[1].meta
    assert meta.rank_source == "distributedInfo"
    assert meta.world_size == 128
    assert meta.schema_version == 1
    assert meta.json_bytes == len(gzip.open(meta.path).read())


def test_cpu_gpu_links_by_correlation_are_mutual() -> None:
    trace = load_cached(str(Path(__file__).parent / "data/traces/hta_a100_nccl_rank0of2"))[0]
    gpu = np.flatnonzero(trace.gpu_activity())
    assert len(gpu) == 3774  # 2700 kernels + 960 memcpy + 114 memset
    assert (trace.linked[gpu] >= 0).all()
    launches = trace.linked[gpu]
    assert (trace.correlation[launches] == trace.correlation[gpu]).all()
    assert set(trace.decode(trace.cat[launches])) <= {"cuda_runtime", "cuda_driver"}
    # a launch points back at one of its GPU events
    assert (trace.correlation[trace.linked[launches]] == trace.correlation[launches]).all()


def test_links_fall_back_to_flow_events(tmp_path: Path) -> None:
    """A GPU event without args.correlation is linked through its ac2g flow arrow."""
    doc = {"traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 10, "dur": 5, "args": {}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 77, "pid": 1, "tid": 2, "ts": 10},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30, "dur": 4, "args": {"stream": 7}},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 77, "pid": 0, "tid": 7, "ts": 30, "bp": "e"},
    ]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    trace = load(path)[0]
    assert trace.linked.tolist() == [2, -1, 0, -1]


@pytest.mark.parametrize("many", [False, True])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_flow_links_are_the_raw_arrows_read_one_by_one(tmp_path: Path, seed: int, many: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels without a correlation, among many flow events and launches that share their
    times, pids, tids and ids (repeats: the last of each wins), are linked as a reading of the
    raw events one by one links them: the last ``f`` arrow at the kernel's (pid, tid, ts), the
    last ``s`` arrow of that id, the last runtime call at the ``s`` arrow's (pid, tid, ts).
    ``many``: the flow ends listed by their phase, as for a rank of many unlinked kernels."""
    if many:
        monkeypatch.setattr(importlib.import_module("perfreport.load.linking"), "MANY_UNLINKED", 0)
    rng = np.random.default_rng(seed)
    events = []
    for _ in range(400):
        ts, tid, flow = int(rng.integers(0, 40)), int(rng.integers(1, 3)), int(rng.integers(0, 30))
        kind = rng.integers(0, 5)
        if kind == 0:  # a kernel without correlation
            events.append({"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": ts, "dur": 1,
                           "args": {"stream": 7}})
        elif kind == 1:
            events.append({"ph": "f", "cat": "ac2g", "name": "ac2g", "id": flow, "pid": 0, "tid": 7, "ts": ts, "bp": "e"})
        elif kind == 2:
            events.append({"ph": "s", "cat": str(rng.choice(["ac2g", "async"])), "name": "ac2g", "id": flow, "pid": 1,
                           "tid": tid, "ts": ts})
        elif kind == 3:
            events.append({"ph": "X", "cat": str(rng.choice(["cuda_runtime", "cpu_op"])), "name": "cudaLaunchKernel",
                           "pid": 1, "tid": tid, "ts": ts, "dur": 1, "args": {}})
        else:  # an arrow of another category, or a flow event without an id: never a link
            events.append({"ph": str(rng.choice(["s", "f"])), "cat": "fwdbwd", "name": "fwdbwd", "id": flow, "pid": 1,
                           "tid": tid, "ts": ts})
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load(path)[0]

    def last(test):
        found = [i for i, e in enumerate(events) if test(e)]
        return found[-1] if found else -1

    flows = ("ac2g", "async", "async_cpu_to_gpu")
    want = []
    for i, e in enumerate(events):
        link = -1
        if e["cat"] == "kernel":
            place = (e["pid"], e["tid"], e["ts"])
            f = last(lambda x: x["ph"] == "f" and x["cat"] in flows and (x["pid"], x["tid"], x["ts"]) == place)
            s = last(lambda x: x["ph"] == "s" and x["cat"] in flows and x["id"] == events[f]["id"]) if f >= 0 else -1
            if s >= 0:
                at = (events[s]["pid"], events[s]["tid"], events[s]["ts"])
                link = last(lambda x: x["ph"] == "X" and x["cat"] == "cuda_runtime" and (x["pid"], x["tid"], x["ts"]) == at)
        want.append(link)
    kernels = [i for i, e in enumerate(events) if e["cat"] == "kernel"]
    assert trace.linked[kernels].tolist() == [want[i] for i in kernels]
    assert sum(want[i] >= 0 for i in kernels) >= 5  # (each seed links several)


def test_the_correlation_joins_sides_in_c_are_numpys() -> None:
    """split_by_side gives numpy's rows and ids of each side on a real trace's correlations and
    on random ones (negative ids left out, rows on both sides, on neither, none at all); a row
    outside the events is an IndexError, not a write."""
    from perfreport.load import linking

    if linking._decode is None or not hasattr(linking._decode, "split_by_side"):
        pytest.skip("the _decode extension is not built")
    trace = load_cached(TRACES / "hta_a100_nccl_rank0of2")[0]
    gpu_side = trace.is_cat(("kernel", "gpu_memcpy", "gpu_memset"))
    cases = [(SparseColumn(trace.args["correlation"].rows.astype(np.int32), trace.args["correlation"].values),
              gpu_side, (trace.ph == trace.code("X")) & ~gpu_side)]
    rng = np.random.default_rng(3)
    for n in (0, 1, 50, 5_000):
        rows = np.sort(rng.choice(max(n, 1), rng.integers(0, n + 1), replace=False)).astype(np.int32)[:n]
        ids = rng.integers(-3, 100, len(rows)).astype(np.int64)
        cases.append((SparseColumn(rows, ids), rng.random(n) < 0.4, rng.random(n) < 0.5))
    for corr, gpu, cpu in cases:
        got, want = linking.split_by_side(corr, gpu, cpu, use_c=True), linking.split_by_side(corr, gpu, cpu, use_c=False)
        for (g_rows, g_ids), (w_rows, w_ids) in zip(got, want):
            assert g_rows.dtype == np.int32 and g_ids.dtype == np.int64
            np.testing.assert_array_equal(g_rows, w_rows)
            np.testing.assert_array_equal(g_ids, w_ids)
    outside = SparseColumn(np.array([0, 9], dtype=np.int32), np.array([1, 2], dtype=np.int64))
    with pytest.raises(IndexError):
        linking.split_by_side(outside, np.ones(5, bool), np.ones(5, bool), use_c=True)


def test_an_id_column_made_in_one_pass_is_numpys() -> None:
    """columns._scattered's one-part C pass gives numpy's column: ids at ascending rows, -1
    elsewhere, int32; an id past int32, rows out of order, repeated or past the events leave it
    to numpy (int64 for the wide id, numpy's own IndexError for a row past the end)."""
    from perfreport.load import columns

    if columns._decode is None or not hasattr(columns._decode, "dense_ids"):
        pytest.skip("the _decode extension is not built")
    rng = np.random.default_rng(9)

    def by_numpy(n, rows, values):
        out = np.full(n, -1, dtype=np.int32 if all(-2**31 <= v < 2**31 for v in values) else np.int64)
        out[rows] = values
        return out

    for n in (0, 1, 7, 5_000):
        for share in (0.0, 0.3, 1.0):
            rows = np.flatnonzero(rng.random(n) < share).astype(np.int32)
            values = rng.integers(-5, 2**31, len(rows)).astype(np.int64)
            got = columns._scattered(n, [(rows, values)])
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got, by_numpy(n, rows, values))
    wide = columns._scattered(4, [(np.array([1, 3], np.int32), np.array([5, 2**40]))])
    assert wide.dtype == np.int64 and wide.tolist() == [-1, 5, -1, 2**40]
    for rows in ([3, 1], [2, 2]):  # not ascending: numpy writes them in order, the last wins
        got = columns._scattered(5, [(np.array(rows, np.int32), np.array([7, 8]))])
        np.testing.assert_array_equal(got, by_numpy(5, rows, [7, 8]))
    with pytest.raises(IndexError):
        columns._scattered(3, [(np.array([1, 3], np.int32), np.array([7, 8]))])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_flow_matchs_key_tuples_group_as_np_unique_of_the_rows(seed) -> None:
    """linking._tuple_ids (a lexsort of the key columns) groups rows as np.unique of them as one
    structured array did: equal tuples one id, NaN equal to nothing, -0.0 equal to 0.0."""
    from perfreport.load import linking

    rng = np.random.default_rng(seed)
    n = 5_000
    pid = rng.integers(0, 3, n).astype(np.int32)
    ts = rng.choice(np.array([0.0, -0.0, 1.5, 2.25, np.nan, 1e15 + 0.5]), n)
    flow = rng.integers(-1, 4, n)
    for columns in ([pid, pid, ts], [flow], [ts, pid]):
        got = linking._tuple_ids(columns)
        rows = np.empty(n, dtype=[(f"k{i}", c.dtype) for i, c in enumerate(columns)])
        for i, c in enumerate(columns):
            rows[f"k{i}"] = c
        want = np.unique(rows, return_inverse=True)[1].ravel()
        pairs = set(zip(got.tolist(), want.tolist()))
        assert len(pairs) == len(set(got.tolist())) == len(set(want.tolist())), columns  # one to one
        assert got.min() == 0 and got.max() == len(set(got.tolist())) - 1


@pytest.mark.parametrize("dtype", [np.int64, np.float64])
def test_the_flow_fallbacks_lookup_among_few_values_is_np_isin(dtype) -> None:
    """model.rows_among without the extension (a binary search among the few values) answers as
    np.isin does: repeats on either side, values outside the few's range, none at all, and NaN
    (which matches nothing)."""
    from perfreport.model import rows_among

    def among(values, few):
        mask = np.zeros(len(values), dtype=bool)
        mask[rows_among(values, few, use_c=False)] = True
        return mask

    rng = np.random.default_rng(7)
    values = rng.integers(-50, 50, 5_000).astype(dtype)
    for few in (values[rng.integers(0, 5_000, 40)], np.array([-60, 0, 0, 60], dtype=dtype), values[:0], values[:1]):
        assert (among(values, few) == np.isin(values, few)).all()
    if dtype is np.float64:
        values[::7] = np.nan
        few = np.array([np.nan, 3.0, 49.0])
        assert (among(values, few) == np.isin(values, few)).all() and not among(values, few)[::7].any()


def test_id_and_row_columns_are_int32_where_they_fit_and_int64_past_it(tmp_path: Path) -> None:
    """external_id, flow_id, linked and iteration: 4 bytes per event where every value fits in
    int32 (the same values), int64 where one does not (a step number or an id past 2**31 - 1,
    read exactly); the args' rows are int32; a column cache written before (int64) loads as the
    loader makes it."""
    from perfreport.gate.colcache import decode_columns, encode_columns

    def trace_with(step: int, flow: int, ext: int):
        doc = {"traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 2, "ts": 0,
             "dur": 100},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "ts": 10, "dur": 5,
             "args": {"External id": ext}},
            {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": flow, "pid": 1, "tid": 2, "ts": 10},
            {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 30, "dur": 4, "args": {"stream": 7}},
            {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": flow, "pid": 0, "tid": 7, "ts": 30, "bp": "e"},
        ]}
        path = tmp_path / f"t{step}-{flow}-{ext}.json"
        path.write_text(json.dumps(doc))
        return load(path)[0]

    small = trace_with(7, 77, 5)
    assert [getattr(small, c).dtype for c in ("external_id", "flow_id", "linked", "iteration")] == [np.int32] * 4
    assert small.linked.tolist() == [-1, 3, -1, 1, -1] and small.iteration.tolist() == [7, 7, 7, 7, 7]
    assert small.flow_id.tolist() == [-1, -1, 77, -1, 77] and small.external_id.tolist() == [-1, 5, -1, -1, -1]
    big = trace_with(2**31, 2**40, 2**33)
    assert [getattr(big, c).dtype for c in ("external_id", "flow_id", "iteration")] == [np.int64] * 3
    assert big.iteration.tolist() == [2**31] * 5 and big.flow_id.max() == 2**40 and big.external_id.max() == 2**33
    assert big.linked.dtype == np.int32 and big.linked.tolist() == small.linked.tolist()
    from perfreport.load import columns
    if getattr(columns._decode, "IDS_IN_PLACE", 0):  # the flow ids and the links: the scanner's ids' two halves
        assert small.flow_id.ctypes.data + small.flow_id.nbytes == small.linked.ctypes.data
        assert not np.shares_memory(big.flow_id, big.linked)  # (a flow id past int32: a column of its own)
    for trace in (small, big):  # every loaded column read-only, the scanner's (writable) ones included
        assert not any(getattr(trace, c).flags.writeable for c in ("ph", "cat", "name", "pid_code", "tid_code", "ids",
                                                                   "ts", "dur", "external_id", "flow_id", "linked",
                                                                   "iteration"))
        assert trace.args and not any(a.rows.flags.writeable or a.values.flags.writeable for a in trace.args.values())
    narrowed = ("external_id", "flow_id", "linked", "iteration")
    wide = dataclasses.replace(small, **{c: getattr(small, c).astype(np.int64) for c in narrowed})
    again = decode_columns(encode_columns(wide), small.meta, tmp_path / "old.cols")
    for c in ("external_id", "flow_id", "linked", "iteration"):
        assert getattr(again, c).dtype == np.int32 and getattr(again, c).tolist() == getattr(small, c).tolist()
    # the args' row numbers too, from the file and from a cache
    assert small.args and all(c.rows.dtype == np.int32 for t in (small, big, again) for c in t.args.values())
    assert {k: c.rows.tolist() for k, c in again.args.items()} == {k: c.rows.tolist() for k, c in small.args.items()}


def test_iterations_by_time_for_cpu_and_by_launch_for_gpu() -> None:
    trace = load_cached(str(Path(__file__).parent / "data/traces/hta_v100_ns_resolution"))[0]
    assert trace.step_numbers().tolist() == [101, 102, 103, 104, 105]
    steps = np.flatnonzero(trace.steps())
    # brute force: every CPU event inside a step's span carries that step's number
    for row in steps:
        number = int(trace.strings[trace.name[row]].split("#")[1])
        start, end = trace.ts[row], trace.ts[row] + trace.dur[row]
        cpu_inside = (~trace.gpu_side()) & (trace.ts >= start) & (trace.ts < end)
        assert (trace.iteration[cpu_inside] == number).all()
    gpu = np.flatnonzero(trace.gpu_activity())
    assert (trace.iteration[gpu] == trace.iteration[trace.linked[gpu]]).all()
    assert set(np.unique(trace.iteration[gpu])) == {101, 102, 103, 104, 105}


def test_fractional_microseconds_kept_and_durations_never_negative() -> None:
    trace = load_cached(str(Path(__file__).parent / "data/traces/hta_v100_ns_resolution"))[0]
    gpu = trace.gpu_activity()
    assert (trace.dur[gpu] >= 0).all()
    assert (trace.ts[gpu] != np.floor(trace.ts[gpu])).any()
    # unix-epoch µs with ns digits: the first kernel starts at 1712195495505582.988 µs, where
    # float64 resolves only 0.25 µs; relative to the integer origin every digit survives
    first = np.flatnonzero(trace.kernels())[0]
    assert first == 25790
    assert trace.meta.ts_origin_us == 1712195495406752
    assert round((trace.ts[first] - 98830.988) * 1e6) == 0


def test_text_pids_and_tids_decode_back() -> None:
    trace = load_cached(str(Path(__file__).parent / "data/traces/odd_old2021_tbplugin_gpu_metrics"))[0]
    kernels = np.flatnonzero(trace.kernels())
    tids = {trace.strings[TEXT_ID_BASE - t] for t in trace.tid[kernels]}
    assert tids == {"stream 7"}
    assert trace.stream[kernels].tolist() == [7] * len(kernels)


def test_parallel_load_equals_sequential() -> None:
    path = str(Path(__file__).parent / "data/traces/hta_sampled_2of128rank")
    parallel, sequential = load(path, workers=2), load(path, workers=1)
    for r in (0, 1):
        for col in ("ts", "dur", "name", "linked", "iteration"):
            a, b = getattr(parallel[r], col), getattr(sequential[r], col)
            np.testing.assert_array_equal(a, b)


def test_python_and_c_scanners_give_identical_models() -> None:
    from perfreport.load import scanner
    from perfreport.load.scan_py import scan as scan_py

    if scanner._scan is None:
        pytest.skip("the C scanner is not built in this environment")
    import msgspec
    from perfreport.load.files import read_trace_bytes

    path = Path(__file__).parent / "data/traces/hta_a100_alexnet_benchmark"
    data = read_trace_bytes(next(path.glob("*.json.gz")))
    raw = msgspec.json.decode(data, type=dict[str, msgspec.Raw])["traceEvents"]
    c, py = scanner.scan_c(raw), scan_py(raw)
    assert c.n_events == py.n_events == 1408
    for key in ("cat", "name", "pid", "tid"):
        assert [c.strings[i] if i >= 0 else None for i in c.top[key]] == [py.strings[i] if i >= 0 else None for i in py.top[key]]
    np.testing.assert_array_equal(c.top["ts"], py.top["ts"])


def test_pids_and_tids_are_codes_of_their_ids_read_at_rows_as_whole(tmp_path: Path) -> None:
    """pid and tid are int32 codes into the trace's ids: one code per id however it is spelled
    ("7", 7, "07"), text ids kept as text ids; pid_at/tid_at give the ids the whole columns
    hold, and a digest makes neither whole column (4 bytes per event each, not 8)."""
    from perfreport.running.digest import AnalysisOptions, digest

    doc = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "a", "pid": 7, "tid": 1, "ts": 0, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "b", "pid": "7", "tid": "1", "ts": 1, "dur": 1},
        {"ph": "X", "cat": "cpu_op", "name": "c", "pid": "07", "tid": "Spans", "ts": 2, "dur": 1},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": "stream 7", "ts": 3, "dur": 1},
        {"ph": "i", "name": "no ids", "ts": 4},
    ]}
    path = tmp_path / "ids.json"
    path.write_text(json.dumps(doc))
    t = load(path)[0]
    assert t.pid_code.dtype == t.tid_code.dtype == np.int32 and t.ids.dtype == np.int64
    assert t.pid.tolist() == [7, 7, 7, 0, -1] and t.pid_code[0] == t.pid_code[1] == t.pid_code[2]
    assert [t.strings[TEXT_ID_BASE - v] if v <= TEXT_ID_BASE else v for v in t.tid.tolist()] == \
        [1, 1, "Spans", "stream 7", -1]
    rows = np.array([4, 0, 3, 3, 2])
    np.testing.assert_array_equal(t.pid_at(rows), t.pid[rows])
    np.testing.assert_array_equal(t.tid_at(rows), t.tid[rows])
    real = load_cached(str(TRACES / "hta_a100_nccl_rank0of2"))[0]
    fresh = load(str(TRACES / "hta_a100_nccl_rank0of2"), workers=1)[0]  # (the cached one's memo is shared)
    digest(fresh, AnalysisOptions(gate=True, attribution=True))
    assert not {("column", "pid"), ("column", "tid")} & set(fresh._memo)
    np.testing.assert_array_equal(fresh.pid, real.pid)


def test_arg_at_rows_equals_the_dense_column() -> None:
    t = load_cached(str(TRACES / "hta_a100_nccl_rank0of2"))[0]
    rows = np.array([[0, 5, t.n_events - 1], [17, 17, 2]], dtype=np.int64)  # any shape, repeats
    for key, default in (("bytes", -1), ("memory bandwidth (GB/s)", np.nan), ("Collective name", -1),
                         ("no such key", -1)):
        dense = t.arg(key, default)
        hits = np.flatnonzero(dense != default) if key != "memory bandwidth (GB/s)" else \
            np.flatnonzero(~np.isnan(dense))
        if key != "no such key":
            assert len(hits) > 10  # the key is really there
        for sample in (rows, hits, np.r_[hits, hits - 1, np.arange(50)]):
            got = t.arg(key, default, sample)
            assert got.dtype == dense.dtype and got.shape == sample.shape
            np.testing.assert_array_equal(got, dense[sample])


def test_args_held_as_columns_are_kept_once_and_read_as_args() -> None:
    path = TRACES / "hta_a100_nccl_rank0of2"
    t = load_cached(str(path))[0]
    assert not DENSE_ARGS.keys() & t.args.keys()  # no second, sparse copy
    events = reference(next(path.glob("*.json*")))["traceEvents"]
    for key in ("correlation", "External id", "stream", "device"):
        expected = np.array([int(e["args"][key]) if key in e.get("args", {}) else -7 for e in events])
        assert (expected != -7).sum() > 100  # the key is really there
        np.testing.assert_array_equal(t.arg(key, -7), expected)
        rows = np.array([[0, 5, t.n_events - 1], [17, 17, 2]])
        np.testing.assert_array_equal(t.arg(key, -7, rows), expected[rows])
    assert t.arg("External id", np.nan).dtype == np.float64


@pytest.mark.parametrize("dtype, lowest", [(np.int32, -1), (np.int64, -1), (np.int64, 0), (np.uint16, 0)])
@pytest.mark.parametrize("n, n_codes", [(1000, 50), (10, 100_000), (0, 5), (5000, 3)])
def test_distinct_codes_equals_np_unique(n: int, n_codes: int, dtype, lowest: int) -> None:
    """Codes of any integer width, with and without -1 (no string; it reads the table's last
    slot), over ranges narrower and far wider than their count."""
    codes = np.random.default_rng(n).integers(lowest, n_codes, n).astype(dtype)
    uniq, inverse = distinct_codes(codes, n_codes)
    expected_uniq, expected_inverse = np.unique(codes, return_inverse=True)
    assert uniq.dtype == expected_uniq.dtype
    np.testing.assert_array_equal(uniq, expected_uniq)
    np.testing.assert_array_equal(inverse, expected_inverse.ravel())
    if n and lowest < 0:
        assert -1 in uniq.tolist() or n < 50  # the "no string" code is among them


def test_far_starts_are_those_a_gap_over_the_limit_separates_from_the_bulk() -> None:
    """drop_absurd's far starts against the rule done by hand: the timed starts in time order,
    cut wherever two neighbours are more than max_span_s apart; every run but the one with the
    most complete events (then the most timed ones, then the earliest) is dropped. Random columns
    with starts just inside and just outside the limit, and stray ones."""
    from perfreport.limits import Limits
    from perfreport.load.fields import INT_MISSING, ScanResult
    from perfreport.load.sanitize import drop_absurd

    limits = Limits()
    limit_ns = limits.max_span_us * 1000.0
    rng = np.random.default_rng(3)
    dropped_some = 0
    for trial in range(60):
        n = int(rng.integers(1, 400))
        base = int(rng.integers(0, 2**60))
        ts = base + rng.integers(-10**9, 10**9, n)
        for i in rng.choice(n, int(rng.integers(0, 3)), replace=False):  # a few near or past the limit
            ts[i] = base + int(rng.choice([-1, 1]) * (limit_ns + int(rng.integers(-3 * 10**9, 3 * 10**9))))
        ph = rng.choice(np.array([0, 1], dtype=np.int32), n, p=[0.9, 0.1])  # "X", "M"
        ts[rng.random(n) < 0.05] = INT_MISSING
        result = ScanResult(n_events=n, top={"ph": ph, "ts": ts, "dur": np.ones(n)}, args={}, strings=["X", "M"])
        kept, counts = drop_absurd(result, limits)
        # by hand: runs of the sorted timed starts, split at gaps over the limit
        timed = [i for i in range(n) if ts[i] != INT_MISSING and ph[i] != 1]
        timed.sort(key=lambda i: (int(ts[i]), i))
        runs: list[list[int]] = []
        for i in timed:
            if runs and float(ts[i]) - float(ts[runs[-1][-1]]) <= limit_ns:
                runs[-1].append(i)
            else:
                runs.append([i])
        bulk = max(range(len(runs)), key=lambda r: (sum(ph[i] == 0 for i in runs[r]), len(runs[r]), -r)) if runs else -1
        far = {i for r, run in enumerate(runs) if r != bulk for i in run}
        no_ts = {i for i in range(n) if ph[i] == 0 and ts[i] == INT_MISSING}
        assert kept.n_events == n - len(far | no_ts), trial
        assert counts.get(f"starting more than {limits.max_span_s:g} s from the others", 0) == len(far - no_ts), trial
        dropped_some += bool(far)
    assert 5 < dropped_some < 60  # both outcomes were exercised


def test_a_trace_of_days_without_a_gap_keeps_every_event() -> None:
    """A rank whose events run for three days, an hour apart (a short trace grown to 1 GB spans
    that), keeps them all: no gap passes the one-day limit. Its ends were more than a day from
    its median start, and dropped. A stray start two days before it still goes."""
    from perfreport.limits import Limits
    from perfreport.load.fields import ScanResult
    from perfreport.load.sanitize import drop_absurd

    hour = 3600 * 10**9
    ts = 10**18 + np.arange(73, dtype=np.int64) * hour
    result = ScanResult(n_events=73, top={"ph": np.zeros(73, np.int32), "ts": ts, "dur": np.ones(73)}, args={},
                        strings=["X"])
    kept, counts = drop_absurd(result, Limits())
    assert kept.n_events == 73 and counts == {}
    ts = np.append(ts[0] - 48 * hour, ts)
    result = ScanResult(n_events=74, top={"ph": np.zeros(74, np.int32), "ts": ts, "dur": np.ones(74)}, args={},
                        strings=["X"])
    kept, counts = drop_absurd(result, Limits())
    assert kept.n_events == 73 and kept.top["ts"][0] == 10**18 and counts == {"starting more than 86400 s from the others": 1}


def test_the_uncompressed_size_of_a_gzip_is_its_text_size_small_or_past_4_gib(tmp_path):
    """The size estimate that plans workers and memory: ISIZE, wrapped past 4 GiB only when the
    file is clearly larger than it. A tiny gzip is larger than its text (header and trailer) and
    was read as 4 GiB more, which capped --workers on a machine with less free memory."""
    from perfreport.load.files import uncompressed_size

    tiny = tmp_path / "tiny.json.gz"
    tiny.write_bytes(gzip.compress(b'{"foo": 1}'))
    assert tiny.stat().st_size > 10 and uncompressed_size(tiny) == 10
    real = next(TRACES.glob("**/*.json.gz"))
    assert uncompressed_size(real) == len(gzip.decompress(real.read_bytes()))
    # A 5 MB file whose trailer says 100 bytes: deflate shrinks at most ~1,032:1, so its text
    # is 4 GiB + 100 bytes.
    wrapped = tmp_path / "wrapped.json.gz"
    body = gzip.compress(b"x")
    wrapped.write_bytes(body[:-4] + b"\0" * (5 << 20) + (100).to_bytes(4, "little"))
    assert uncompressed_size(wrapped) == (1 << 32) + 100
    plain = tmp_path / "plain.json"
    plain.write_bytes(b"[]")
    assert uncompressed_size(plain) == 2


def test_the_checksum_of_a_file_is_of_its_bytes_mapped_or_read(tmp_path, monkeypatch):
    """Provenance in every report: the XXH3-128 (a store: the SHA-256) of the bytes as stored,
    read in blocks (a last block shorter than the others, a block longer than the file), from a
    file, an empty one or a pipe."""
    import importlib
    import threading

    import xxhash

    files = importlib.import_module("perfreport.load.checksums")

    real = next(TRACES.glob("**/*.json.gz"))
    odd = tmp_path / "odd.json"
    odd.write_bytes(np.random.default_rng(3).bytes(3 * 4096 + 17))
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    for step in (4096, files.HASH_BLOCK):
        monkeypatch.setattr(files, "HASH_BLOCK", step)
        for path in (real, odd, empty):
            data = path.read_bytes()
            assert files.hex_digest(path, "sha256") == hashlib.sha256(data).hexdigest(), (path, step)
            assert files.file_checksum(path) == f"xxh3_128:{xxhash.xxh3_128(data).hexdigest()}", (path, step)
            assert files.bytes_checksum(data) == files.file_checksum(path)
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(odd.read_bytes()))
    writer.start()
    assert files.file_checksum(fifo) == f"xxh3_128:{xxhash.xxh3_128(odd.read_bytes()).hexdigest()}"
    writer.join(5)
    assert [files.algorithm_of(c) for c in ("xxh3_128:ab", "sha256:ab", "ab" * 32)] == ["xxh3_128", "sha256", "sha256"]
    with pytest.raises(ValueError, match="unknown checksum algorithm 'md5'"):
        files.file_checksum(odd, "md5")


def test_id_table_converts_the_same_whether_it_converts_every_text_or_only_those_used() -> None:
    """pid/tid lookup: a small string table is converted whole, a big one only at the codes the
    columns hold; the gathered columns are the same either way (numeric text, floats, text ids,
    numbers beyond the text-id range, missing)."""
    from perfreport.load.columns import _id_table

    strings = ["7", "Spans", "stream 7", "1e3", " 12 ", "-3", "nan", str(2**63), "0x10", "4.9", "Traces"]
    rng = np.random.default_rng(5)
    pid = rng.integers(-1, len(strings) - 1, 40).astype(np.int32)  # "Traces" (the last) unused
    tid = rng.integers(-1, len(strings) // 2, 40).astype(np.int32)
    few = (pid, tid)  # 80 codes for 11 strings: only the codes used are converted
    many = (np.tile(pid, 20), np.tile(tid, 20))  # 1600 codes: every string is converted
    lut_few, lut_many = _id_table(strings, few), _id_table(strings, many)
    assert (lut_few[10], lut_many[10]) == (-1, TEXT_ID_BASE - 10)  # each way was taken
    for codes in few:
        np.testing.assert_array_equal(lut_few.take(codes), lut_many.take(codes))
    np.testing.assert_array_equal(lut_many[:4], [7, TEXT_ID_BASE - 1, TEXT_ID_BASE - 2, 1000])
    assert lut_many[-1] == -1  # code -1: missing
    # converted whole, the step names (one a pid, however odd) are set at once: the same table as
    # the loop makes, and as many codes for the pid/tid columns as np.unique gives
    from perfreport.load.columns import _id_codes
    from perfreport.model import step_name_table

    named = strings + [f"ProfilerStep#{i}" for i in range(200)]
    steps = step_name_table(named)
    odd = (np.tile(np.append(pid, len(strings) + 7).astype(np.int32), 400), np.tile(tid, 400))
    lut_named = _id_table(named, odd, steps)
    np.testing.assert_array_equal(lut_named, _id_table(named, odd))
    assert lut_named[len(strings) + 7] == TEXT_ID_BASE - len(strings) - 7
    # the step names do not make a table big: 11 other texts for 8,000 codes are converted whole
    # (the unused "Traces" too), where the 211 texts with them would only be converted where used
    short = tuple(c[:4000] for c in odd)
    whole, used = _id_table(named, short, steps), _id_table(named, short)
    assert (whole[10], used[10]) == (TEXT_ID_BASE - 10, -1)
    for codes in short:
        np.testing.assert_array_equal(whole.take(codes), used.take(codes))
    for lut in (lut_named, lut_few, lut_many, np.array([-1]), np.array([5, -1, 5, -1])):
        ids, code = _id_codes(lut)
        want_ids, want_code = np.unique(lut, return_inverse=True)
        np.testing.assert_array_equal(ids, want_ids)
        assert code.dtype == np.int32 and code.tolist() == want_code.ravel().tolist()


def test_a_pid_or_tid_text_reads_as_int_then_float_would_read_it() -> None:
    """columns._id_number turns a text that starts as no number can (a name) away without trying
    int() and float(): the same answer as trying them, on texts built from the characters that
    matter (signs, dots, exponents, inf/nan, spaces, underscores, non-ASCII digits and spaces)."""
    import random

    import perfreport.load.columns  # noqa: F401 - perfreport.load is also a function: the module is read from sys.modules

    columns = sys.modules["perfreport.load.columns"]
    rng = random.Random(3)
    alphabet = "0123456789+-._eEinfaINFA xX\t\n\u0663\u00a0\u2003abc"
    texts = ["", " 7", "+7", "-7", ".5", "inf", "nan", "-inf", "Infinity", "1e3", "1_000", "\u0663", "\u00a07", "07",
             "0x1", "Spans", "stream 7", str(2**63)]
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(20_000)]
    answers = [columns._id_number(t) for t in texts]
    assert answers == [columns._id_number_by_trying(t) for t in texts]
    assert answers[:5] == [None, 7, 7, -7, 0] and answers[15:17] == [None, None]  # the reference is itself right


@pytest.mark.parametrize("seed", range(9))
def test_step_of_starts_in_c_equals_numpy(seed: int) -> None:
    """The C pass of the step lookup gives numpy's column: events in and out of order, on a
    start or an end exactly, before the first step, NaN starts, skipped rows, steps sharing a
    start, and gaps between steps; from seed 6 thousands of steps, so that the search from the
    previous event's step takes long strides both ways."""
    from perfreport.load import columns

    if columns._decode is None:
        pytest.skip("the _decode extension is not built")
    rng = np.random.default_rng(seed)
    n_steps, span = (int(rng.integers(1, 12)), 1000.0) if seed < 6 else (int(rng.integers(1000, 4000)), 100_000.0)
    starts = np.sort(rng.choice(np.arange(0.0, span, 25.0), n_steps))  # repeats: steps sharing a start
    ends = starts + rng.choice([0.0, 10.0, 25.0, 60.0], n_steps)
    numbers = rng.integers(0, 100, n_steps).astype(np.int64)
    ts = np.concatenate([np.sort(rng.uniform(-50, span + 100, 300)), rng.uniform(-50, span + 100, 200), starts, ends])
    ts[rng.random(len(ts)) < 0.05] = np.nan
    skip = rng.random(len(ts)) < 0.1
    by_c = columns.step_of_starts(ts, starts, ends, numbers, skip, use_c=True)
    by_numpy = columns.step_of_starts(ts, starts, ends, numbers, skip, use_c=False)
    np.testing.assert_array_equal(by_c, by_numpy)
    assert by_c.dtype == np.int32  # the numbers fit: written at the width the model keeps
    assert (by_numpy >= 0).sum() > 10 and (by_numpy == -1).sum() > 20  # both outcomes exercised
    big = numbers + 2**31  # numbers past int32: the C pass writes int64, as numpy
    wide = columns.step_of_starts(ts, starts, ends, big, skip, use_c=True)
    assert wide.dtype == np.int64
    np.testing.assert_array_equal(wide, columns.step_of_starts(ts, starts, ends, big, skip, use_c=False))


@pytest.mark.parametrize("seed", range(4))
def test_code_gathers_and_flow_ids_in_c_equal_numpy(seed: int) -> None:
    """The C gather of pid / tid codes gives ``table.take``'s column (code -1 reads the last
    slot; a code out of bounds is an IndexError both ways), and the C flow ids numpy's: -1 where
    missing, negative ids kept, int64 where an id passes int32; written over the ids' own memory
    where they fit, else the ids left as they were (wherever the id past int32 is)."""
    from perfreport.load.fields import INT_MISSING
    from perfreport.load import columns

    from perfreport import model

    if columns._decode is None or model._sorted is None:
        pytest.skip("the _decode and _sorted extensions are not built")
    rng = np.random.default_rng(seed)
    table = rng.integers(-5, 1000, int(rng.integers(1, 50))).astype(np.int32)
    codes = rng.integers(-1, len(table), int(rng.integers(0, 5000))).astype(np.int32)
    by_c = columns.take_codes(table, codes, use_c=True)
    assert by_c.dtype == np.int32
    np.testing.assert_array_equal(by_c, columns.take_codes(table, codes, use_c=False))
    for bad in (len(table), -len(table) - 1):
        for use_c in (True, False):
            with pytest.raises(IndexError):
                columns.take_codes(table, np.append(codes, bad).astype(np.int32), use_c=use_c)
    reused = codes.copy()
    got = columns.take_codes(table, reused, use_c=True, reuse=True)
    assert np.shares_memory(got, reused)  # written over the codes: no new column
    np.testing.assert_array_equal(got, columns.take_codes(table, codes, use_c=False))
    frozen = codes.copy()
    frozen.flags.writeable = False  # a column that may not be written: a new one
    assert not np.shares_memory(columns.take_codes(table, frozen, use_c=True, reuse=True), frozen)
    ids = rng.integers(-3, 10**6, int(rng.integers(0, 5000)))
    ids[rng.random(len(ids)) < 0.6] = INT_MISSING
    for column in (ids, np.append(ids, 2**40), np.insert(ids, len(ids) // 3, -2**40)):  # ids past int32
        got, want = columns._flow_ids(column, use_c=True), columns._flow_ids(column, use_c=False)
        assert got.dtype == want.dtype == (np.int32 if column is ids else np.int64)
        np.testing.assert_array_equal(got, want)
        # over the ids' own memory: the flow ids in its first half, its second half free
        scanned = column.copy()
        flow = columns._flow_ids(scanned, use_c=True, reuse=True)
        spare = columns._second_half(flow, scanned)
        np.testing.assert_array_equal(flow, want)
        if column is ids:
            assert np.shares_memory(flow, scanned) and np.shares_memory(spare, scanned)
            assert not np.shares_memory(flow, spare) and flow.dtype == spare.dtype == np.int32
            assert len(flow) == len(spare) == len(column)
        else:  # an id past int32 (the last, or a third of the way): the ids as they were (-1 read as missing)
            assert spare is None and not np.shares_memory(flow, scanned)
            np.testing.assert_array_equal(scanned, np.where(column == -1, INT_MISSING, column))
            np.testing.assert_array_equal(columns._flow_ids(scanned, use_c=False), want)
    frozen_ids = ids.copy()
    frozen_ids.flags.writeable = False
    assert columns._second_half(columns._flow_ids(frozen_ids, use_c=True, reuse=True), frozen_ids) is None


@pytest.mark.parametrize("seed", range(4))
def test_relative_starts_in_c_equal_numpy(seed: int) -> None:
    """The C conversion of ns starts into µs since the origin gives numpy's floats bit for bit
    (NaN where missing, starts before the origin, values past 2**53 ns, a difference that wraps
    in int64 as numpy's does), in a new column or over the ns column's own memory."""
    from perfreport.load.fields import INT_MISSING
    from perfreport.load import columns

    if columns._decode is None:
        pytest.skip("the _decode extension is not built")
    rng = np.random.default_rng(seed)
    origin_us = int(rng.integers(0, 2 * 10**15))
    ts = origin_us * 1000 + rng.integers(-10**9, 10**13, int(rng.integers(0, 5000)))
    ts = np.concatenate([ts, [INT_MISSING, origin_us * 1000, origin_us * 1000 + 1, 2**62 + 1, -(2**62) - 7,
                              np.iinfo(np.int64).max]]).astype(np.int64)
    ts[rng.random(len(ts)) < 0.05] = INT_MISSING
    with np.errstate(over="ignore"):
        want = columns._relative_us(ts, origin_us, use_c=False)
    got = columns._relative_us(ts, origin_us, use_c=True)
    assert got.dtype == np.float64 and not np.shares_memory(got, ts)
    np.testing.assert_array_equal(got.view(np.int64), want.view(np.int64))  # bits: NaN and -0.0 alike
    reused = ts.copy()
    in_place = columns._relative_us(reused, origin_us, use_c=True, reuse=True)
    assert np.shares_memory(in_place, reused)
    np.testing.assert_array_equal(in_place.view(np.int64), want.view(np.int64))


@pytest.mark.parametrize("seed", range(6))
def test_first_gpu_event_of_launches_in_c_equals_numpy(seed: int) -> None:
    """The C choice of each launch's first GPU event gives numpy's links: after the correlation
    join (ids shared by several CPU rows, GPU rows without a partner or an id), launches of
    several GPU events with tied and NaN start times."""
    from perfreport.load import columns

    if columns._decode is None:
        pytest.skip("the _decode extension is not built")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 3000))
    corr = rng.integers(-1, n // 3 + 2, n).astype(np.int64)  # repeats: several rows per id
    if seed == 0:
        corr[:] = -1  # no ids at all
    side = rng.choice(3, n, p=[0.4, 0.4, 0.2])  # CPU, GPU, neither
    cpu_side, gpu_side = side == 0, side == 1
    ts = rng.choice(np.arange(0.0, 50.0), n)  # ties
    ts[rng.random(n) < 0.05] = np.nan
    has = np.flatnonzero(corr != -1)
    by_numpy = columns.link_by_correlation(SparseColumn(has, corr[has]), cpu_side, gpu_side)
    assert by_numpy.dtype == np.int32  # the rows fit: made at the width the model keeps
    by_c, wide = by_numpy.copy(), by_numpy.astype(np.int64)  # (int64: a rank past 2**31 - 1 events)
    assert seed == 0 or (by_numpy >= 0).sum() > 10
    columns.link_first_gpu_events(ts, gpu_side, by_c, use_c=True)
    columns.link_first_gpu_events(ts, gpu_side, wide, use_c=True)
    columns.link_first_gpu_events(ts, gpu_side, by_numpy, use_c=False)
    np.testing.assert_array_equal(by_c, by_numpy)
    np.testing.assert_array_equal(wide, by_numpy)
    assert seed == 0 or (cpu_side & (by_numpy >= 0)).sum() > 5  # launches got their first event


@pytest.mark.parametrize("seed", range(8))
def test_plausible_times_in_c_agree_with_drop_absurd(seed: int, monkeypatch) -> None:
    """The C pass that answers drop_absurd's usual case: where it says "nothing to drop",
    numpy's drop_absurd drops nothing, and on clean columns it does say so (each kind of
    absurd time, one event at a time, and clean columns)."""
    from perfreport.limits import Limits
    from perfreport.load import sanitize
    from perfreport.load.fields import INT_MISSING, ScanResult

    if sanitize._decode is None:
        pytest.skip("the _decode extension is not built")
    limits = Limits()
    rng = np.random.default_rng(seed)
    n = 500
    ph = rng.choice(np.array([0, 1, 2], dtype=np.int32), n, p=[0.7, 0.1, 0.2])  # "X", "M", "i"
    ts = 10**15 + rng.integers(0, 10**9, n)
    dur = rng.uniform(0, 100, n)
    ts[(ph != 0) & (rng.random(n) < 0.1)] = INT_MISSING  # fine: only complete events need one
    row = int(np.flatnonzero(ph == 0)[0])
    breakage = [None, ("ph", -1), ("ts", INT_MISSING), ("dur", np.nan), ("dur", -1.0), ("dur", np.inf),
                ("dur", limits.max_span_us * 2), ("ts", 10**15 + int(limits.max_span_us * 1000) * 2)][seed]
    cols = {"ph": ph, "ts": ts, "dur": dur}
    if breakage:
        cols[breakage[0]][row] = breakage[1]
    args = (ph, ts, dur, 0, 1, limits.max_span_us, limits.max_span_us * 1000.0)
    by_c = sanitize.plausible(*args, use_c=True)
    monkeypatch.setattr(sanitize, "_decode", None)
    result = ScanResult(n_events=n, top=cols, args={}, strings=["X", "M", "i"])
    _, dropped = sanitize.drop_absurd(result, limits)
    assert by_c == (breakage is None)
    assert by_c <= (not dropped)  # "plausible" never hides an event numpy would drop


@pytest.mark.parametrize("seed", range(12))
def test_plausible_in_c_finds_the_gaps_drop_absurd_would(seed: int, monkeypatch) -> None:
    """Starts spread over more than max_span_s pass the C check exactly when no gap between
    neighbouring starts is longer than it (a long trace, one run): then numpy's drop_absurd
    drops nothing; with such a gap (a stray start, or two stretches apart) it does not pass,
    and numpy finds the rows apart. Gaps of just under, at and just over the limit."""
    from perfreport.limits import Limits
    from perfreport.load import sanitize
    from perfreport.load.fields import INT_MISSING, ScanResult

    if sanitize._decode is None:
        pytest.skip("the _decode extension is not built")
    limits = Limits(max_span_s=10.0)
    limit_ns = int(limits.max_span_us * 1000)
    rng = np.random.default_rng(seed)
    n = int(rng.integers(50, 400))
    gaps = rng.integers(0, limit_ns // 3, n - 1)  # a long run of close starts
    kind = seed % 4
    at = int(rng.integers(1, n - 1))
    gaps[at] = [limit_ns - 1, limit_ns, limit_ns + 1, limit_ns * 50][kind] if seed < 8 else gaps[at]
    ts = 10**15 + np.concatenate([[0], np.cumsum(gaps)]).astype(np.int64)
    ts = ts[rng.permutation(n)]  # out of order, as threads interleave
    ph = rng.choice(np.array([0, 1, 2], dtype=np.int32), n, p=[0.7, 0.1, 0.2])  # "X", "M", "i"
    ts[(ph == 1) & (rng.random(n) < 0.5)] = INT_MISSING
    dur = rng.uniform(0, 100, n)
    assert float(ts[ts != INT_MISSING].max()) - float(ts[ts != INT_MISSING].min()) > limit_ns  # spread past it
    by_c = sanitize.plausible(ph, ts, dur, 0, 1, limits.max_span_us, float(limit_ns), use_c=True)
    monkeypatch.setattr(sanitize, "_decode", None)
    _, dropped = sanitize.drop_absurd(ScanResult(n_events=n, top={"ph": ph, "ts": ts, "dur": dur}, args={},
                                                 strings=["X", "M", "i"]), limits)
    assert by_c == (not dropped)
    if seed < 8:  # the planted gap decides, unless the metadata events that lost their ts held it
        timed = np.sort(ts[(ts != INT_MISSING) & (ph != 1)]).astype(np.float64)
        assert by_c == bool((np.diff(timed) <= limit_ns).all())


@pytest.mark.parametrize("case", ["complete", "no_complete", "no_times", "negative", "empty"])
def test_ts_origin_in_c_equals_numpy(case: str) -> None:
    """The earliest start found in one C pass gives numpy's origin: from the complete events,
    else from any event, else 0; floored to the µs below negative starts too."""
    from perfreport.load import columns
    from perfreport.load.fields import INT_MISSING, ScanResult

    if columns._decode is None:
        pytest.skip("the _decode extension is not built")
    rng = np.random.default_rng(len(case))
    n = 0 if case == "empty" else 300
    ph = rng.choice(np.array([0, 1], dtype=np.int32), n)  # "X", "M"
    ts = rng.integers(10**12, 2 * 10**12, n)
    ts[rng.random(n) < 0.2] = INT_MISSING
    ts[ph == 1] = rng.integers(0, 10**6, int((ph == 1).sum()))  # metadata at ts ~0: used only without X
    if case == "no_complete":
        ph[:] = 1
    if case == "no_times":
        ts[:] = INT_MISSING
    if case == "negative":
        ts[ph == 0] -= 3 * 10**12 + 1
    result = ScanResult(n_events=n, top={"ph": ph, "ts": ts}, args={}, strings=["X", "M"])
    by_c, by_numpy = columns.ts_origin_us(result, use_c=True), columns.ts_origin_us(result, use_c=False)
    assert by_c == by_numpy
    assert (by_numpy == 0) == (case in ("no_times", "empty"))
    assert type(by_c) is int


def test_step_name_table_reads_each_profiler_step_name_once():
    strings = ["ProfilerStep#3", "ProfilerStep #4", "ProfilerStep# 12abc", "aten::mm", "XProfilerStep#1",
               "ProfilerStep#", f"ProfilerStep#{2**64}", "ProfilerStep#007"]
    table = step_name_table(strings)
    assert table.tolist() == [3, 4, 12, -1, -1, -1, 2**63 - 1, 7, -1]  # the last slot: code -1 (no name)


def test_the_c_step_name_table_is_the_regular_expressions():
    """ASCII names read in C, the rest (Unicode spaces and digits) left to the reference: every
    table equal, on names at the edges and on a real trace's strings."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from perfreport.load import columns

    if columns._decode is None:
        pytest.skip("the _decode extension is not built")

    edges = ["ProfilerStep#0", "ProfilerStep # 7", "ProfilerStep\t#\x1c9x", "ProfilerStep\n#\n3", "ProfilerStep#",
             "ProfilerStep#a1", "ProfilerStep", "profilerStep#3", f"ProfilerStep#{2**63}", f"ProfilerStep#{2**63 - 1}",
             "ProfilerStep#٣", "ProfilerStep#1٣", "ProfilerStep\u2003#4", "ProfilerStepé#1", "xProfilerStep#1", "",
             "ProfilerStep#12.5", "ProfilerStep#-1", "ProfilerStep#007", "ProfilerStep#\x85 1"]
    real = list(next(iter(load_cached(str(TRACES / "hta_a100_nccl_rank0of2")))).strings)
    for strings in (edges, real, []):
        c_table = columns.names_step_table(strings, use_c=True)
        assert c_table.tolist() == step_name_table(strings).tolist() and c_table.flags.writeable

    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.builds(lambda a, b, c: a + b + c, st.sampled_from(["ProfilerStep", "Profiler", ""]),
                              st.text(alphabet=" \t#0123456789٣\u2003x", max_size=8), st.text(max_size=3))))
    def same(strings):
        assert columns.names_step_table(strings, use_c=True).tolist() == step_name_table(strings).tolist()
    same()
