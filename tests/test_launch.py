"""perfreport.analyses.launch: per-launch statistics and aten-op launch delays, checked against
plain-Python walks over the raw trace JSON and against hand-computed tiny traces."""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from perfreport.analyses.launch import (
    ATEN_INSTANCE_COLUMNS,
    LAUNCH_COLUMNS,
    aten_op_launch_delays,
    aten_op_launch_delays_by_step,
    aten_op_launches,
    last_at_or_before,
    launch_summary,
    launch_summary_by_step,
    launches,
)
from perfreport.load import load
from perfreport.model import LAUNCH_NAMES

from .conftest import TRACES, load_cached

GPU_CATS = {"kernel", "Kernel", "gpu_memcpy", "Memcpy", "gpu_memset", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}


# --- raw-JSON helpers (independent of the loader) -------------------------------------------
def raw_events(path: Path) -> list[dict]:
    """The complete events of the single rank file under ``path``."""
    files = sorted(p for p in Path(path).iterdir() if p.name.endswith((".json", ".json.gz")))
    assert len(files) == 1
    data = files[0].read_bytes()
    text = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
    return [e for e in json.loads(text)["traceEvents"] if e.get("ph") == "X" and "dur" in e]


def raw_launch_pairs(events: list[dict]) -> tuple[dict, dict]:
    """({correlation: launch event}, {correlation: [GPU ops]}) for launch calls of LAUNCH_NAMES."""
    launch, ops = {}, defaultdict(list)
    for e in events:
        corr = (e.get("args") or {}).get("correlation")
        if corr is None:
            continue
        if e.get("cat") in RUNTIME_CATS and e["name"] in LAUNCH_NAMES:
            launch[corr] = e
        elif e.get("cat") in GPU_CATS:
            ops[corr].append(e)
    return launch, ops


def write_trace(root: Path, events: list[dict], name: str = "rank0.json") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(json.dumps({"distributedInfo": {"rank": 0}, "traceEvents": events}))
    return root


def cpu(name, ts, dur, cat="cpu_op", tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def gpu(name, ts, dur, corr, cat="kernel", stream=7, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"correlation": corr, "stream": stream, "device": 0, **args}}


def tiny_events() -> list[dict]:
    """One step: aten::mm launches a kernel; a CUDA graph launches two; a memcpy on stream 7."""
    return [
        cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
        cpu("aten::mm", 10, 20),
        cpu("cudaLaunchKernel", 12, 5, cat="cuda_runtime", correlation=1),
        gpu("gemm", 30, 10, 1),
        cpu("cudaGraphLaunch", 40, 10, cat="cuda_runtime", correlation=2),
        gpu("graph_k1", 60, 5, 2),
        gpu("graph_k2", 66, 4, 2),
        cpu("aten::copy_", 51, 6),
        cpu("cudaMemcpyAsync", 52, 3, cat="cuda_runtime", correlation=3),
        gpu("Memcpy HtoD (Pinned -> Device)", 70, 2, 3, cat="gpu_memcpy", bytes=2000,
            **{"memory bandwidth (GB/s)": 1.0}),
    ]


# --- last_at_or_before ----------------------------------------------------------------------
@pytest.mark.parametrize("use_c", [False, None])
def test_last_at_or_before_matches_brute_force(use_c):
    rng = np.random.default_rng(7)
    for n in (1, 2, 3, 17, 200):
        values = rng.integers(0, 50, n).astype(float)
        values[rng.random(n) < 0.05] = np.nan  # a NaN value or threshold matches ("not below")
        pos = rng.integers(-1, n, 300)
        thr = rng.integers(0, 55, 300).astype(float)
        thr[rng.random(300) < 0.05] = np.nan
        want = [max([j for j in range(p + 1) if not values[j] < t], default=-1) for p, t in zip(pos, thr)]
        assert last_at_or_before(values, pos, thr, use_c=use_c).tolist() == want
    assert last_at_or_before(np.array([]), np.array([0]), np.array([1.0]), use_c=use_c).tolist() == [-1]


def test_last_at_or_before_long_climbs_match_the_tree():
    # 300 decreasing values: the answer for a high threshold lies more jumps back than the C
    # search makes, so it hands those queries to the tree
    values = np.arange(300, 0, -1).astype(float)
    pos = np.array([299, 299, 150, 10])
    thr = np.array([290.0, 5.0, 300.0, 301.0])
    assert last_at_or_before(values, pos, thr).tolist() == [10, 295, 0, -1]
    assert last_at_or_before(values, pos, thr, use_c=False).tolist() == [10, 295, 0, -1]


# --- hand-built trace -----------------------------------------------------------------------
def test_tiny_trace_by_hand(tmp_path):
    traces = load(write_trace(tmp_path / "t", tiny_events()))
    table = launches(traces).set_index("launch")
    assert list(launches(traces).columns) == list(LAUNCH_COLUMNS)
    k = table.loc["cudaLaunchKernel"]
    assert (k["cpu_dur_us"], k["gpu_ops"], k["gpu_dur_us"], k["launch_delay_us"]) == (5, 1, 10, 13)  # 30 - 17
    g = table.loc["cudaGraphLaunch"]
    assert (g["gpu_ops"], g["gpu_dur_us"], g["gpu_span_us"], g["launch_delay_us"]) == (2, 9, 10, 10)  # 60 - 50
    m = table.loc["cudaMemcpyAsync"]
    assert (m["gpu_dur_us"], m["launch_delay_us"], m["stream"], m["iteration"]) == (2, 15, 7, 1)
    # flags with cutoffs of 4 µs (runtime) and 12 µs (delay)
    flags = launches(traces, runtime_cutoff_us=4, launch_delay_cutoff_us=12).set_index("launch")
    assert flags["runtime_outlier"].to_dict() == {"cudaLaunchKernel": True, "cudaGraphLaunch": True,
                                                  "cudaMemcpyAsync": False}
    assert flags["launch_delay_outlier"].to_dict() == {"cudaLaunchKernel": True, "cudaGraphLaunch": False,
                                                       "cudaMemcpyAsync": True}
    assert flags["short_kernel"].to_dict() == {"cudaLaunchKernel": False, "cudaGraphLaunch": False,
                                               "cudaMemcpyAsync": True}  # 2 µs copy < 3 µs call <= 4
    summary = launch_summary(traces).set_index("launch")
    assert summary.loc["cudaGraphLaunch", "gpu_ops"] == 2 and summary["launches"].sum() == 3
    by_step = launch_summary_by_step(traces)
    assert by_step[["rank", "iteration", "launches", "gpu_ops"]].values.tolist() == [[0, 1, 3, 4]]
    assert by_step["launch_delay_mean_us"].iloc[0] == pytest.approx((13 + 10 + 15) / 3)
    # aten ops: mm launched gemm (start 10, launch 12, kernel 30); copy_ launched the memcpy
    inst = aten_op_launches(traces).set_index("aten_op")
    assert list(aten_op_launches(traces).columns) == list(ATEN_INSTANCE_COLUMNS)
    assert inst.loc["aten::mm", ["kernel_sequence", "aten_op_delay_us", "runtime_delay_us"]].tolist() == ["gemm", 2, 18]
    assert inst.loc["aten::copy_", ["aten_op_delay_us", "runtime_delay_us"]].tolist() == [1, 18]
    delays = aten_op_launch_delays(traces)
    assert delays["occurrences"].tolist() == [1, 1]
    assert aten_op_launch_delays_by_step(traces)[["iteration", "aten_ops"]].values.tolist() == [[1, 2]]


def test_innermost_op_on_the_same_thread(tmp_path):
    """Nested ops with equal starts: the shorter (inner) one launches; an op on another
    thread that happens to cover the call in time does not."""
    events = [
        cpu("aten::zero_", 10, 10),
        cpu("aten::fill_", 10, 8),
        cpu("aten::other_thread", 0, 100, tid=2),
        cpu("cudaLaunchKernel", 12, 2, cat="cuda_runtime", correlation=1),
        gpu("fill_kernel", 20, 1, 1),
        cpu("cudaLaunchKernel", 15, 2, cat="cuda_runtime", correlation=2),
        gpu("fill_kernel2", 22, 1, 2),
    ]
    inst = aten_op_launches(load(write_trace(tmp_path / "t", events)))
    assert inst[["aten_op", "launches", "kernel_sequence"]].values.tolist() == [
        ["aten::fill_", 2, "fill_kernel -> fill_kernel2"]]


def test_no_gpu_and_empty(tmp_path):
    traces = load(write_trace(tmp_path / "t", [cpu("aten::mm", 0, 5), cpu("cudaLaunchKernel", 1, 1, cat="cuda_runtime",
                                                                             correlation=1)]))
    table = launches(traces)
    assert len(table) == 1 and table["gpu_ops"].iloc[0] == 0 and math.isnan(table["launch_delay_us"].iloc[0])
    assert not table[["short_kernel", "runtime_outlier", "launch_delay_outlier"]].any(axis=None)
    assert aten_op_launches(traces).empty and aten_op_launch_delays(traces).empty
    empty = load(write_trace(tmp_path / "e", [cpu("aten::mm", 0, 5)]))
    for fn in (launches, launch_summary, launch_summary_by_step, aten_op_launch_delays, aten_op_launch_delays_by_step):
        out = fn(empty)
        assert out.empty and len(out.columns) > 0


# --- real traces against the raw JSON ---------------------------------------------------------
@pytest.mark.parametrize("job", ["hta_a100_rank0of16_cudagraph_triton", "odd_amd_mi250_rocm62_minitoy",
                                 "odd_a100_triton_example", "hta_a100_alexnet_benchmark"])
def test_launches_match_raw_json(job):
    traces = load_cached(str(TRACES / job))
    table = launches(traces).set_index("correlation")
    launch, ops = raw_launch_pairs(raw_events(TRACES / job))
    assert len(table) == len(launch)
    checked = 0
    for corr, e in launch.items():
        row = table.loc[corr]
        mine = ops.get(corr, [])
        assert row["launch"] == e["name"] and row["gpu_ops"] == len(mine)
        assert row["cpu_dur_us"] == pytest.approx(e["dur"])
        if mine:
            first = min(o["ts"] for o in mine)
            assert row["gpu_dur_us"] == pytest.approx(sum(o["dur"] for o in mine))
            want = max(0.0, first - e["ts"] - e["dur"])
            assert row["launch_delay_us"] == pytest.approx(want, abs=1e-3)  # raw JSON floats: ~ns
            checked += 1
    assert checked > 0


def test_reference_numbers_cudagraph_trace():
    """HTA's spec numbers on this trace (negative_queue_length_values_check): correlation
    863350 is 15 / 3 / 181605 µs; the 56 cudaGraphLaunch calls of the kept steps enqueue
    several kernels each, which HTA's launch statistics miss."""
    table = launches(load_cached(str(TRACES / "hta_a100_rank0of16_cudagraph_triton")))
    row = table.set_index("correlation").loc[863350]
    assert (row["cpu_dur_us"], row["gpu_dur_us"], row["launch_delay_us"]) == (15, 3, 181605)
    graphs = table[table["launch"] == "cudaGraphLaunch"]
    assert len(graphs) == 70 and graphs["gpu_ops"].sum() == 345 and graphs["gpu_ops"].max() > 1


def test_aten_op_launches_match_brute_force():
    job = TRACES / "hta_a100_alexnet_benchmark"
    events = raw_events(job)
    launch, ops = raw_launch_pairs(events)
    atens = [e for e in events if e["name"].startswith("aten::")]
    expected = {}
    for corr, e in sorted(launch.items(), key=lambda kv: (kv[1]["ts"], kv[0])):
        if not ops.get(corr):
            continue
        cover = [a for a in atens
                 if a["tid"] == e["tid"] and a["ts"] <= e["ts"] and a["ts"] + a["dur"] >= e["ts"] + e["dur"]]
        if not cover:
            continue
        a = max(cover, key=lambda x: (x["ts"], -(x["ts"] + x["dur"])))
        key = (a["name"], a["ts"])
        first_op = min(ops[corr], key=lambda o: o["ts"])
        names = [o["name"] for o in sorted(ops[corr], key=lambda o: o["ts"])]
        if key not in expected:
            expected[key] = [names, e["ts"] - a["ts"], first_op["ts"] - e["ts"]]
        else:
            expected[key][0] += names
    traces = load_cached(str(job))
    origin = traces[0].meta.ts_origin_us  # model ts are µs since the rank's integer origin
    ours = aten_op_launches(traces)
    assert len(ours) == len(expected) > 0
    for row in ours.itertuples():
        names, d1, d2 = expected[(row.aten_op, row.aten_start_us + origin)]
        assert row.kernel_sequence == " -> ".join(names)
        assert (row.aten_op_delay_us, row.runtime_delay_us) == (pytest.approx(d1), pytest.approx(d2))


def test_launch_name_keys_group_and_order_as_the_names_over_ranks():
    """launch_summary groups on integer keys built from each rank's name codes: they must group
    and order the launches as their names do, over ranks whose string tables differ."""
    from perfreport.analyses.launch import _launch_name_keys

    traces = load_cached(str(TRACES / "hta_sampled_2of128rank"))
    table = launches(traces)
    assert table["rank"].nunique() == 2 and table["launch"].nunique() >= 2
    want = np.unique(table["launch"].to_numpy().astype(str), return_inverse=True)[1].ravel()
    assert np.array_equal(_launch_name_keys(traces), want)


@pytest.mark.parametrize("seed", range(4))
def test_last_key_at_or_before_cursor_equals_the_searches(seed):
    """The C cursor per key against numpy's searchsorted per key: queries in time order (the
    usual case), shuffled, on absent keys, on equal times, long jumps; NaN goes to numpy."""
    from perfreport.analyses.launch import _last_key_at_or_before

    rng = np.random.default_rng(seed)
    n, q = 2000, 3000
    key_sorted = np.sort(rng.choice([3, 8, 9, 40], n))
    ts_sorted = np.concatenate([np.sort(rng.integers(0, 500, c)).astype(float)
                                for c in np.unique(key_sorted, return_counts=True)[1]])
    key = rng.choice([1, 3, 8, 9, 40, 41], q)
    ts = rng.integers(-5, 505, q).astype(float)
    if seed % 2:
        ts = np.sort(ts)  # in time order: the cursor steps
    want = _last_key_at_or_before(key_sorted, ts_sorted, key, ts, use_c=False)
    assert np.array_equal(_last_key_at_or_before(key_sorted, ts_sorted, key, ts), want)
    assert (want == -1).sum() > 0 and (want >= 0).sum() > q // 2
    ts[7] = np.nan
    assert np.array_equal(_last_key_at_or_before(key_sorted, ts_sorted, key, ts),
                          _last_key_at_or_before(key_sorted, ts_sorted, key, ts, use_c=False))
