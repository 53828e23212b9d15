"""perfreport.hta counters and launch methods against HTA 0.5.0's outputs (oracle CSVs), the
documented deviations (every qualifying stream in the blocked-queue table, the launches HTA's
launch statistics miss, per-rank aten-op tables), the counter trace file and the plots."""

from __future__ import annotations

import functools
import gzip
import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfreport.hta import TraceAnalysis
from perfreport.hta.counters import TimeSeriesTypes, counters_trace_path, hta_memory_type

from .conftest import ORACLE, SHARED_ORACLE, SHARED_TRACES, TRACES, trace_jobs

_spec = importlib.util.spec_from_file_location("parity_check_counters", Path(__file__).parent / "parity_check.py")
parity = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(parity)

JOBS = [str(p.relative_to(TRACES)) for p in trace_jobs()]
SHARED_JOBS = ["param_resnet_rtx2080ti", "pair_hta_trace_diff/control", "pair_hta_trace_diff/test",
               "pair_kineto_resnet50_v100_dataloader/workers0"]
CUDAGRAPH = "hta_a100_rank0of16_cudagraph_triton"


@functools.lru_cache(maxsize=None)
def analyzer(trace_dir: str) -> TraceAnalysis:
    return TraceAnalysis(trace_dir=trace_dir)


def _json(path: Path) -> dict:
    return json.loads(path.read_text())


def _compare(table: str, obj, oracle: Path, sym_table) -> tuple[bool, str]:
    ours = parity.read_csv_text(parity.to_csv_text(obj, sym_table), table)
    hta = parity.read_csv_text((oracle / f"{table}.csv").read_text(), table)
    ok, detail, _ = parity.compare_frames(table, ours, hta)
    return ok, detail


def _flat(table: str, obj, sym_table) -> pd.DataFrame:
    """``obj`` as the oracle's CSV of ``table`` reads back (flat columns)."""
    return parity.read_csv_text(parity.to_csv_text(obj, sym_table), table)


_COUNTER = {"queue_length": ("index", "stream", "queue_length"), "memory_bw": ("Unnamed: 0", "name", "memory_bw_gbps")}
"""Per counter: its series' event column (HTA's index), its group column and its value."""


def _events(series: pd.DataFrame, kind: str) -> pd.DataFrame:
    """A counter's time series as the events it is the running sum of: (event, group, ts,
    step), by event. HTA sorts the events by time with an unstable sort (pandas' quicksort:
    numpy's, whose order of equal keys depends on the CPU: AVX-512 and AVX2 machines differ),
    so of events at one instant the order, and the values between them, are the machine's;
    the events, their steps and the value after each instant are not."""
    event, group, value = _COUNTER[kind]
    series = series.reset_index(drop=True)
    step = series.groupby(group, sort=False)[value].diff().fillna(series[value])
    return (pd.DataFrame({"event": series[event], "group": series[group].astype(str), "ts": series["ts"],
                          "step": step}).sort_values("event", kind="stable").reset_index(drop=True))


def _after_each_instant(series: pd.DataFrame, kind: str) -> pd.DataFrame:
    """The counter's value after all the events of each (group, instant), in time order."""
    _, group, value = _COUNTER[kind]
    last = series.reset_index(drop=True).groupby([group, "ts"], sort=True).tail(1)
    return last.assign(**{group: last[group].astype(str)}).sort_values([group, "ts"])[[group, "ts", value]]


def _same_up_to_ties(kind: str, ours: dict[int, pd.DataFrame], oracle: Path) -> bool:
    """Whether each rank's counter series is the oracle's but for the order of events at one
    instant: the same events with the same steps, each group in time order, and the same value
    after every instant (floats within 1e-9 relative: a running sum in another order)."""
    for rank, frame in ours.items():
        path = oracle / f"{kind}_time_series__rank{rank}.csv"
        if not path.exists():
            return False
        theirs = parity.read_csv_text(path.read_text(), path.stem)
        if len(frame) != len(theirs):
            return False
        _, group, value = _COUNTER[kind]
        if not all(np.all(np.diff(f["ts"].to_numpy(float)) >= 0) for side in (frame, theirs)
                   for _, f in side.groupby(group)):
            return False
        a, b = _events(frame, kind), _events(theirs, kind)
        if not (a[["event", "group"]].equals(b[["event", "group"]]) and np.array_equal(a["ts"], b["ts"])
                and np.allclose(a["step"], b["step"], rtol=1e-9, atol=1e-9)):
            return False
        a, b = _after_each_instant(frame, kind), _after_each_instant(theirs, kind)
        if not (len(a) == len(b) and np.array_equal(a["ts"], b["ts"])
                and np.allclose(a[value], b[value], rtol=1e-9, atol=1e-9)):
            return False
    return True


def _summary_of(kind: str, series: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """HTA's summary of a counter's series: ``describe()`` per (rank, group), of the nonzero
    points for memory bandwidth (trace_counters.get_memory_bw_summary /
    get_queue_length_summary_from_time_series)."""
    _, group, value = _COUNTER[kind]
    frames = []
    for rank, frame in series.items():
        frame = frame[frame[value] > 0] if kind == "memory_bw" else frame
        frames.append(frame.assign(rank=rank)[["rank", group, value]].groupby(["rank", group]).describe())
    return pd.concat(frames)


def _summary_explained(table: str, obj, kind: str, ours: dict[int, pd.DataFrame], oracle: Path, sym) -> bool:
    """Whether a summary that differs from the oracle's is HTA's summary of our series (whose
    only difference is the order of events at one instant), as the oracle's is of its own."""
    theirs = {rank: parity.read_csv_text((oracle / f"{kind}_time_series__rank{rank}.csv").read_text(),
                                         f"{kind}_time_series__rank{rank}") for rank in ours}
    expected = parity.read_csv_text((oracle / f"{table}.csv").read_text(), table)
    return (parity.compare_frames(table, _flat(table, obj, sym), _flat(table, _summary_of(kind, ours), sym))[0]
            and parity.compare_frames(table, expected, _flat(table, _summary_of(kind, theirs), sym))[0])


def check_job(trace_dir: Path, oracle: Path) -> list[str]:
    """Replay the oracle's calls for this area; return the tables that differ (with why).

    Launch statistics are compared by default (HTA's rows); ``all_launches=True`` must hold
    those same rows plus the launches HTA misses. Aten-op tables of ranks after
    the first of a multi-rank job are checked in test_aten_op_tables_are_per_rank instead.
    """
    timings = _json(oracle / "timings.json")
    if timings.get("load", {}).get("status") != "ok":
        return []
    feats = timings["features"]
    ranks = _json(oracle / "results.json")["ranks"]
    a = analyzer(str(trace_dir))
    sym = a.t.symbol_table.get_sym_table()
    expected = parity.expected_csvs(str(oracle), timings)
    problems = []

    def check(table: str, obj) -> None:
        if expected.get(f"{table}.csv") == "none":
            if obj is not None and len(obj):
                problems.append(f"{table}: HTA returned None, ours {len(obj)} rows")
            return
        if f"{table}.csv" not in expected:
            return
        ok, detail = _compare(table, obj, oracle, sym)
        if not ok:
            problems.append(f"{table}: {detail}")

    bw_series = a.get_memory_bw_time_series(ranks=ranks)
    series = a.get_queue_length_time_series(ranks=ranks)
    counters = {"memory_bw": {r: _flat(f"memory_bw_time_series__rank{r}", f, sym) for r, f in bw_series.items()},
                "queue_length": {r: _flat(f"queue_length_time_series__rank{r}", f, sym) for r, f in series.items()}}
    tie_ordered = []  # (problem, table, ours, counter) of the counter tables that differ from the oracle

    def check_counter(table: str, obj, kind: str) -> None:
        before = len(problems)
        check(table, obj)
        if len(problems) > before:
            tie_ordered.append((problems.pop(), table, obj, kind))

    check_counter("memory_bw_summary", a.get_memory_bw_summary(ranks=ranks), "memory_bw")
    check_counter("queue_length_summary", a.get_queue_length_summary(ranks=ranks), "queue_length")
    for r, frame in bw_series.items():
        check_counter(f"memory_bw_time_series__rank{r}", frame, "memory_bw")
    for r, frame in series.items():
        check_counter(f"queue_length_time_series__rank{r}", frame, "queue_length")
    check_counter("queue_length_summary_from_time_series", a.get_queue_length_summary_from_time_series(series),
                  "queue_length")
    if tie_ordered:  # explained only where every counter series is the oracle's up to ties
        differ = [kind for kind in counters if not _same_up_to_ties(kind, counters[kind], oracle)]
        for problem, table, obj, kind in tie_ordered:
            if kind in differ or ("_time_series__" not in table
                                  and not _summary_explained(table, obj, kind, counters[kind], oracle, sym)):
                problems.append(problem)
    check("time_spent_blocked_on_full_queue", a.get_time_spent_blocked_on_full_queue(series))
    exact = a.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
    full = a.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False, all_launches=True)
    for r in ranks:
        check(f"cuda_kernel_launch_stats__rank{r}", exact[r])
        merged = exact[r].merge(full[r], on="correlation", how="left", suffixes=("", "_all"), indicator=True)
        if len(exact[r]) and not ((merged["_merge"] == "both").all()
                                  and np.allclose(merged["launch_delay"], merged["launch_delay_all"])):
            problems.append(f"cuda_kernel_launch_stats__rank{r}: HTA's rows changed by the extra launches")
    aten = a.get_aten_op_kernels_and_delay(ranks=ranks)
    if feats.get("aten_op_kernels_and_delay", {}).get("status") == "failed":
        assert all(isinstance(f, pd.DataFrame) for f in aten.values())  # HTA raised; we return tables
    else:
        check(f"aten_op_kernels_and_delay__rank{ranks[0]}", aten[ranks[0]])
    return problems


@pytest.mark.parametrize("job", JOBS)
def test_matches_hta_oracle(job):
    assert check_job(TRACES / job, ORACLE / job) == []


@pytest.mark.parametrize("job", SHARED_JOBS)
def test_matches_hta_oracle_shared(job):
    trace, oracle = SHARED_TRACES / job, SHARED_ORACLE / job
    if not trace.exists() or not oracle.exists():
        pytest.skip(f"{trace} not available (the shared trace collection is not next to the repo)")
    assert check_job(trace, oracle) == []


def test_reference_numbers_cudagraph_trace():
    """HTA's own numbers on this trace (its negative_queue_length_values_check test data)."""
    a = analyzer(str(TRACES / CUDAGRAPH))
    series = a.get_queue_length_time_series()
    summary = a.get_queue_length_summary_from_time_series(series)
    assert summary.index.tolist() == [(0, s) for s in (7, 25, 27, 84, 285, 363)]
    row = summary.loc[(0, 7), "queue_length"]
    assert (row["count"], round(row["mean"], 2), round(row["std"], 2), row["max"]) == (9680, 656.68, 233.77, 946)
    assert "rank" in series[0].columns  # HTA adds it to the frames it is given
    blocked = a.get_time_spent_blocked_on_full_queue(series, max_queue_length=20)
    assert blocked.values.tolist() == [[0, 7, 1010992.0, pytest.approx(0.991238, abs=1e-6)]]
    bw = a.get_memory_bw_summary()["memory_bw_gbps"]
    assert bw["count"].tolist() == [912, 24, 64, 200] and round(bw.loc[(0, "Memcpy DtoD"), "mean"], 2) == 146.87
    stats = a.get_cuda_kernel_launch_stats(visualize=False)[0]
    assert len(stats) == 5224
    assert stats.set_index("correlation").loc[863350].tolist() == [15, 3, 181605]


def test_blocked_table_keeps_every_stream():
    """HTA keeps only the last qualifying stream of each rank; all_streams=True keeps each."""
    a = analyzer(str(TRACES / CUDAGRAPH))
    series = a.get_queue_length_time_series()
    hta_table = a.get_time_spent_blocked_on_full_queue(series, max_queue_length=4)
    assert hta_table["stream"].tolist() == [363] and hta_table["rank"].tolist() == [0]
    blocked = a.get_time_spent_blocked_on_full_queue(series, max_queue_length=4, all_streams=True)
    assert blocked["stream"].tolist() == [7, 25, 27, 285, 363] and set(blocked["rank"]) == {0}
    assert hta_table.iloc[0].tolist() == blocked.iloc[-1].tolist()
    duration = a.t.get_trace_duration(0)
    for row in blocked.itertuples():  # brute force: time from each point >= 4 to the next point
        s = series[0][series[0]["stream"] == row.stream]
        ts, q = s["ts"].tolist(), s["queue_length"].tolist()
        want = sum(t1 - t0 for t0, t1, v in zip(ts, ts[1:], q) if v >= 4)
        assert row.duration_at_max_queue_length == want
        assert row.relative_duration_at_max_queue_length == pytest.approx(want / duration)
    empty = a.get_time_spent_blocked_on_full_queue(series)
    assert empty.empty and list(empty.columns) == ["rank", "stream", "duration_at_max_queue_length",
                                                   "relative_duration_at_max_queue_length"]


@pytest.mark.parametrize("job, launch, extra", [
    (CUDAGRAPH, "cudaGraphLaunch", 276),  # 56 graph launches of the kept steps, 276 kernels
    ("odd_a100_triton_example", "cuLaunchKernel", 1),
    ("odd_amd_mi250_rocm62_minitoy", "hip", 16),
])
def test_launch_stats_cover_launches_hta_misses(job, launch, extra):
    """``all_launches=True``: extra rows for cuLaunchKernel, CUDA-graph and HIP launches; HTA's
    rows are unchanged (test_matches_hta_oracle checks that they are still there, equal)."""
    a = analyzer(str(TRACES / job))
    full = a.get_cuda_kernel_launch_stats(visualize=False, all_launches=True)[0]
    exact = a.get_cuda_kernel_launch_stats(visualize=False)[0]
    assert len(full) - len(exact) == extra
    frame = a.t.get_trace(0)
    table = a.t.symbol_table.sym_table
    added = full[~full["correlation"].isin(exact["correlation"])]
    cpu = frame[(frame["stream"] == -1) & frame["correlation"].isin(added["correlation"])]
    assert {table[n] for n in cpu["name"]} and all(table[n].startswith(launch) for n in cpu["name"])
    assert (added["launch_delay"] >= 0).all() and list(full.columns) == ["correlation", "cpu_duration",
                                                                         "gpu_duration", "launch_delay"]


def test_aten_op_tables_are_per_rank():
    """Deviation: HTA never resets its list between ranks, so its rank-1 table also counts
    rank 0's ops. Ours for rank 1 equals the table of rank 1 loaded alone, and HTA's rank-1
    table is exactly ours of ranks 0 and 1 pooled."""
    job = TRACES / "hta_sampled_2of128rank"
    a = analyzer(str(job))
    both = a.get_aten_op_kernels_and_delay(ranks=[0, 1])
    alone = TraceAnalysis(trace_files={1: "sampled_rank-1.json.gz"}, trace_dir=str(job)).get_aten_op_kernels_and_delay(
        ranks=[1])
    key = ["aten_op_name", "kernel_sequence"]
    pd.testing.assert_frame_equal(both[1].sort_values(key).reset_index(drop=True),
                                  alone[1].sort_values(key).reset_index(drop=True))
    hta = pd.read_csv(ORACLE / "hta_sampled_2of128rank" / "aten_op_kernels_and_delay__rank1.csv")
    pooled = pd.concat([both[0], both[1]])
    pooled = pooled.assign(d1=pooled["avg_aten_op_launch_delay"] * pooled["occurrence_count"],
                           d2=pooled["avg_runtime_delay"] * pooled["occurrence_count"])
    pooled = pooled.groupby(key)[["occurrence_count", "d1", "d2"]].sum().reset_index()
    m = hta.merge(pooled, on=key, how="outer", indicator=True)
    assert (m["_merge"] == "both").all() and len(m) == 187
    assert (m["occurrence_count_x"] == m["occurrence_count_y"]).all()
    assert np.allclose(m["avg_aten_op_launch_delay"], m["d1"] / m["occurrence_count_y"], atol=2e-3)
    assert np.allclose(m["avg_runtime_delay"], m["d2"] / m["occurrence_count_y"], atol=2e-3)


def test_aten_op_table_shape_and_frame_columns():
    a = TraceAnalysis(trace_dir=str(TRACES / "hta_a100_alexnet_benchmark"))
    out = a.get_aten_op_kernels_and_delay()
    table = out[0]
    assert list(table.columns) == ["aten_op_name", "kernel_sequence", "occurrence_count",
                                   "avg_aten_op_launch_delay", "avg_runtime_delay"]
    assert table["occurrence_count"].is_monotonic_decreasing and table.index.tolist()[:3] == [3, 1, 5]
    assert {"s_name", "s_cat"} <= set(a.t.get_trace(0).columns)  # as HTA: decoded names on the frame
    by_delay = a.get_aten_op_kernels_and_delay(sort_by=["avg_runtime_delay"])[0]
    assert by_delay["avg_runtime_delay"].is_monotonic_decreasing
    # HTA raised on these (no aten launches / a launch without kernel); we give empty tables
    for job in ("odd_amd_mi250_rocm62_minitoy", "odd_a100_cupti_counters"):
        res = analyzer(str(TRACES / job)).get_aten_op_kernels_and_delay()
        assert res[0].empty and list(res[0].columns) == list(table.columns)


def test_memory_type_rules():
    assert hta_memory_type("Memcpy HtoD (Pinned -> Device)") == "Memcpy HtoD"
    assert hta_memory_type("Memset (Device)") == "Memset"
    assert hta_memory_type("dma_copy") == "Memcpy Unknown"
    assert hta_memory_type("void gemm_kernel") is None
    assert hta_memory_type("ncclKernel_AllReduce") is None
    assert hta_memory_type("hipMemcpyAsync", "gpu_memcpy") == "Memcpy Unknown"  # by category, as breakdown


def test_generate_trace_with_counters(tmp_path):
    work = tmp_path / "job"
    shutil.copytree(TRACES / CUDAGRAPH, work)
    a = TraceAnalysis(trace_dir=str(work))
    a.generate_trace_with_counters()
    out = work / "rank0_with_counters.json.gz"
    assert out.exists() and out.read_bytes()[:2] == b"\x1f\x8b"
    written = json.loads(gzip.decompress(out.read_bytes()))
    counters = [e for e in written["traceEvents"] if e.get("ph") == "C"]
    assert len(written["traceEvents"]) == a.t.traceset[0].n_events + len(counters)  # originals all kept
    assert len(counters) == 12848  # HTA's count on this trace: 10448 queue + 2400 bandwidth points
    assert {e["name"] for e in counters} == {"Queue Length", "Memcpy DtoD", "Memcpy DtoH", "Memcpy HtoD", "Memset"}
    queue = [e for e in counters if e["name"] == "Queue Length"]
    assert all(set(e) == {"ph", "name", "pid", "ts", "args", "id"} for e in queue)
    series = a.get_queue_length_time_series()[0]
    first = series.iloc[0]
    assert queue[0] == {"ph": "C", "name": "Queue Length", "pid": int(first["pid"]), "id": int(first["stream"]),
                        "ts": float(first["ts"] + a.t.min_ts), "args": {"Queue Length": int(first["queue_length"])}}
    bw = [e for e in counters if e["name"] != "Queue Length"]
    assert all(set(e) == {"ph", "name", "pid", "ts", "args"} and "Memcpy BW" in e["args"] for e in bw)
    assert sorted(p.name for p in work.iterdir()) == ["rank0.json.gz", "rank0_with_counters.json.gz"]  # no temp files


def test_counters_trace_bandwidth_only_with_suffix(tmp_path):
    work = tmp_path / "job"
    shutil.copytree(TRACES / "hta_a100_alexnet_benchmark", work)
    TraceAnalysis(trace_dir=str(work)).generate_trace_with_counters(time_series=TimeSeriesTypes.MEMCPY_BANDWIDTH,
                                                                    output_suffix="_bw")
    only_bw = json.loads(gzip.decompress((work / "benchmark_result_2869224_1695835535_trace_bw.json.gz").read_bytes()))
    counters = [e for e in only_bw["traceEvents"] if e.get("ph") == "C"]
    assert len(counters) == 38 and {e["name"] for e in counters} == {"Memcpy HtoD", "Memset"}


def test_counters_trace_of_plain_json_is_plain_json(tmp_path):
    src = TRACES / "odd_old2021_tbplugin_gpu_metrics"
    work = tmp_path / "job"
    shutil.copytree(src, work)
    TraceAnalysis(trace_dir=str(work)).generate_trace_with_counters(ranks=[0])
    out = work / "gpu_metrics_input_with_counters.json"
    written = json.loads(out.read_text())  # plain JSON (HTA would gzip it under a .json name)
    assert sum(e.get("ph") == "C" for e in written["traceEvents"]) == 64 + 4
    assert counters_trace_path(Path("/x/a.json.json.gz"), "_c") == Path("/x/a.json_c.json.gz")


def test_visualize_does_not_change_results():
    a = analyzer(str(TRACES / "hta_a100_alexnet_benchmark"))
    shown = a.get_cuda_kernel_launch_stats(visualize=True)[0]
    pd.testing.assert_frame_equal(shown, a.get_cuda_kernel_launch_stats(visualize=False)[0])
    assert TimeSeriesTypes.QUEUE_LENGTH in (TimeSeriesTypes.QUEUE_LENGTH | TimeSeriesTypes.MEMCPY_BANDWIDTH)


def test_default_rank_and_empty_ranks():
    a = analyzer(str(TRACES / "hta_sampled_2of128rank"))
    assert list(a.get_queue_length_time_series()) == [0]
    assert list(a.get_memory_bw_time_series(ranks=[])) == [0]
    cpu_only = analyzer(str(TRACES / "odd_cpu_only_rank34of300_trimmed"))
    assert cpu_only.get_queue_length_time_series(ranks=[34]) == {}
    assert cpu_only.get_queue_length_summary(ranks=[34]) is None and cpu_only.get_memory_bw_summary(ranks=[34]) is None
    assert cpu_only.get_cuda_kernel_launch_stats(ranks=[34], visualize=False)[34].empty


def test_counter_events_are_spliced_into_the_raw_trace():
    from perfreport.hta.counters import _trace_with_events

    extra = [{"ph": "C", "name": "Queue Length", "pid": 0, "ts": 1.5, "args": {"Queue Length": 2}, "id": 7}]
    for text in (b'{"a": 1, "traceEvents": [ {"ph": "X"} ] \n, "z": [1]}', b'{"traceEvents":[]}',
                 b'{"traceEvents": [\n]\n}'):
        original = json.loads(text)
        out = json.loads(_trace_with_events(text, extra, gzip_output=False))
        assert list(out) == list(original) and out["traceEvents"] == original["traceEvents"] + extra
        assert json.loads(gzip.decompress(_trace_with_events(text, extra, gzip_output=True))) == out
    assert json.loads(_trace_with_events(b'{"traceEvents": [], "x": NaN}', extra, False))["traceEvents"] == extra
