"""perfreport.analyses.memory: a hand-computed tiny trace, old-format traces without totals,
traces without memory events, the peak-preserving downsampling, and real traces checked
against plain-Python walks over the raw JSON."""

from __future__ import annotations

import bisect
import gzip
import itertools
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from perfreport.analyses.memory import (
    NO_MEMORY_NOTE,
    NO_OP,
    NO_TOTALS_NOTE,
    OP_COLUMNS,
    PEAK_COLUMNS,
    STEP_COLUMNS,
    TIMELINE_COLUMNS,
    TIMELINE_MAX_POINTS,
    device_label,
    downsample_peaks,
    memory_by_op,
    memory_note,
    memory_peaks,
    memory_per_step,
    memory_timeline,
)
from perfreport.analyses.memory_bw import memory_bw_by_direction
from perfreport.errors import ConfigError
from perfreport.load import load

from .conftest import TRACES, load_cached, shared_trace
from .test_steps import cpu, write_trace


def mem(ts: float, nbytes: int, total: int | None = None, reserved: int | None = None, tid: int = 1,
        device_type: int = 1, device_id: int = 0) -> dict:
    args = {"Device Type": device_type, "Device Id": device_id, "Bytes": nbytes}
    if total is not None:
        args.update({"Total Allocated": total, "Total Reserved": reserved, "Addr": 1000 + int(ts)})
    return {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": tid, "ts": ts,
            "args": args}


def tiny_events() -> list[dict]:
    """Step 1 spans [0, 100]. Thread 1: aten::empty [10, 20]; aten::add [30, 60] with a nested
    aten::empty [35, 40]. Thread 2: aten::copy_ [40, 50]. CUDA totals follow each event."""
    return [
        cpu("ProfilerStep#1", 0, 100, cat="user_annotation"),
        cpu("aten::empty", 10, 10),
        mem(12, 100, 100, 1000),                       # in aten::empty
        mem(15, 8, 8, 0, tid=2, device_type=0, device_id=-1),  # CPU; thread 2 has no op at 15
        cpu("aten::add", 30, 30),
        cpu("aten::empty", 35, 5),
        mem(37, 50, 150, 1000),                        # innermost: the nested aten::empty
        cpu("aten::copy_", 40, 10, tid=2),
        mem(41, 30, 180, 1000, tid=2),                 # aten::copy_ on thread 2
        mem(45, 200, 380, 2000),                       # aten::add itself
        mem(70, -100, 280, 2000),                      # outside every op
        mem(150, -280, 0, 2000),                       # outside the step too
    ]


def test_tiny_trace_by_hand(tmp_path: Path) -> None:
    traces = load(write_trace(tmp_path, tiny_events()), workers=1)
    peaks = memory_peaks(traces)
    assert list(peaks.columns) == list(PEAK_COLUMNS)
    cuda = peaks.set_index("device").loc["cuda:0"]
    assert (cuda["events"], cuda["allocations"], cuda["frees"]) == (6, 4, 2)
    assert (cuda["allocated_bytes"], cuda["freed_bytes"]) == (380, 380)
    assert (cuda["peak_allocated_bytes"], cuda["peak_allocated_ts_us"]) == (380, 45.0)
    assert (cuda["peak_reserved_bytes"], cuda["peak_reserved_ts_us"]) == (2000.0, 45.0)
    assert bool(cuda["totals_recorded"])
    assert peaks.set_index("device").loc["cpu", "peak_allocated_bytes"] == 8

    ops = memory_by_op(traces)
    assert list(ops.columns) == list(OP_COLUMNS)
    got = {(r.device, r.op): (r.allocations, r.allocated_bytes, r.freed_bytes, r.net_bytes) for r in ops.itertuples()}
    assert got == {
        ("cuda:0", "aten::add"): (1, 200, 0, 200),
        ("cuda:0", "aten::empty"): (2, 150, 0, 150),
        ("cuda:0", "aten::copy_"): (1, 30, 0, 30),
        ("cuda:0", NO_OP): (0, 0, 380, -380),
        ("cpu", NO_OP): (1, 8, 0, 8),
    }
    # largest allocators first within each (rank, device)
    assert ops.loc[ops["device"] == "cuda:0", "op"].tolist() == ["aten::add", "aten::empty", "aten::copy_", NO_OP]
    assert memory_by_op(traces, top=1)["op"].tolist() == [NO_OP, "aten::add"]  # cpu first, then cuda:0

    steps = memory_per_step(traces)
    assert list(steps.columns) == list(STEP_COLUMNS)
    rows = {(r.device, r.step): (r.allocations, r.peak_allocated_bytes, r.allocated_bytes_delta)
            for r in steps.itertuples()}
    assert rows == {("cpu", 1): (1, 8, 8), ("cuda:0", -1): (0, 0, -280), ("cuda:0", 1): (4, 380, 280)}

    tl = memory_timeline(traces)
    assert list(tl.columns) == list(TIMELINE_COLUMNS)
    cuda_tl = tl[tl["device"] == "cuda:0"]
    assert cuda_tl["ts_us"].tolist() == [12.0, 37.0, 41.0, 45.0, 70.0, 150.0]
    assert cuda_tl["allocated_bytes"].tolist() == [100, 150, 180, 380, 280, 0]
    assert cuda_tl["reserved_bytes"].tolist() == [1000.0, 1000.0, 1000.0, 2000.0, 2000.0, 2000.0]
    assert memory_note(traces) is None


def test_ranks_share_one_clock(tmp_path: Path) -> None:
    root = tmp_path / "job"
    write_trace(root, tiny_events(), rank=0, world=2)
    late = tiny_events()
    for e in late:
        e["ts"] += 1000  # rank 1's trace starts 1 ms later
    write_trace(root, late, rank=1, world=2)
    traces = load(root, workers=1)
    peaks = memory_peaks(traces)
    assert peaks[["rank", "device"]].values.tolist() == [[0, "cpu"], [0, "cuda:0"], [1, "cpu"], [1, "cuda:0"]]
    assert peaks.loc[peaks["device"] == "cuda:0", "peak_allocated_ts_us"].tolist() == [45.0, 1045.0]
    # 6 CUDA events per rank, at most 5 points: one bucket keeps its first event (12 µs), the
    # allocated and reserved maxima (45 µs), the minimum and the last event (150 µs)
    tl = memory_timeline(traces, max_points=5)
    cuda1 = tl[(tl["rank"] == 1) & (tl["device"] == "cuda:0")]
    assert cuda1["ts_us"].tolist() == [1012.0, 1045.0, 1150.0]
    assert cuda1["allocated_bytes"].tolist() == [100, 380, 0]
    assert len(tl[tl["device"] == "cpu"]) == 2
    assert memory_by_op(traces)["rank"].tolist() == [0] * 5 + [1] * 5


def test_old_format_without_totals_uses_the_running_sum(tmp_path: Path) -> None:
    events = [cpu("aten::empty", 0, 50), mem(5, 64), mem(10, 32), mem(20, -64), mem(30, 16),
              mem(40, -48, device_type=0, device_id=-1)]
    traces = load(write_trace(tmp_path, events), workers=1)
    tl = memory_timeline(traces)
    assert tl[tl["device"] == "cuda:0"]["allocated_bytes"].tolist() == [64, 96, 32, 48]
    assert tl["reserved_bytes"].isna().all()
    peaks = memory_peaks(traces).set_index("device")
    assert peaks.loc["cuda:0", "peak_allocated_bytes"] == 96 and peaks.loc["cuda:0", "peak_allocated_ts_us"] == 10.0
    assert peaks.loc["cpu", "peak_allocated_bytes"] == -48  # net since the start: a free of older memory
    assert np.isnan(peaks.loc["cuda:0", "peak_reserved_bytes"]) and not peaks["totals_recorded"].any()
    assert memory_note(traces) == NO_TOTALS_NOTE
    # no steps: everything is step -1
    assert memory_per_step(traces)["step"].tolist() == [-1, -1]


def test_no_memory_events_gives_empty_frames_and_a_note(tmp_path: Path) -> None:
    traces = load_cached(str(TRACES / "hta_a100_nccl_rank0of2"))
    for fn, cols in ((memory_timeline, TIMELINE_COLUMNS), (memory_peaks, PEAK_COLUMNS),
                     (memory_by_op, OP_COLUMNS), (memory_per_step, STEP_COLUMNS)):
        df = fn(traces)
        assert df.empty and list(df.columns) == list(cols)
    assert memory_note(traces) == NO_MEMORY_NOTE
    assert "profile_memory=True" in NO_MEMORY_NOTE and "record_shapes=True" in NO_MEMORY_NOTE
    empty = load(write_trace(tmp_path, [cpu("aten::mm", 0, 5)]), workers=1)
    assert memory_note(empty) == NO_MEMORY_NOTE and memory_by_op(empty).empty


def test_device_labels() -> None:
    assert [device_label(0, -1), device_label(1, 0), device_label(6, 3), device_label(42, 1)] == \
        ["cpu", "cuda:0", "hip:3", "type42:1"]


def test_downsampling_keeps_the_envelope() -> None:
    rng = np.random.default_rng(7)
    n = 50_000
    walk = np.cumsum(rng.integers(-1000, 1001, n))
    reserved = np.maximum.accumulate(np.abs(walk)).astype(np.float64)
    group = np.r_[np.zeros(n - 30, np.int64), np.ones(30, np.int64)]  # a long group and a short one
    keep = downsample_peaks(group, walk, reserved, 400)
    long_keep, short_keep = keep[keep < n - 30], keep[keep >= n - 30]
    assert len(long_keep) <= 400 and len(short_keep) == 30
    body = walk[: n - 30]
    assert body[long_keep].max() == body.max() and body[long_keep].min() == body.min()
    assert long_keep[0] == 0 and long_keep[-1] == n - 31
    # each of the 99 equal-count stretches keeps its extremes
    buckets, size = 99, n - 30  # (400 - 1) // 4 buckets of equal counts: event i is in i * 99 // size
    for b in range(buckets):
        lo, hi = -(-b * size // buckets), -(-(b + 1) * size // buckets)
        assert body[lo:hi].max() in body[long_keep] and body[lo:hi].min() in body[long_keep]
    with pytest.raises(ConfigError):
        downsample_peaks(group, walk, reserved, 4)


def test_memcpy_directions_include_peer_to_peer(tmp_path: Path) -> None:
    def copy(name: str, ts: float, dur: float, nbytes: int) -> dict:
        return {"ph": "X", "cat": "gpu_memcpy", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
                "args": {"stream": 7, "device": 0, "bytes": nbytes}}
    events = [copy("Memcpy HtoD (Pinned -> Device)", 0, 4, 8000), copy("Memcpy DtoH (Device -> Pageable)", 10, 2, 2000),
              copy("Memcpy DtoD (Device -> Device)", 20, 1, 5000), copy("Memcpy PtoP (Device -> Device)", 30, 2, 1000),
              copy("Memcpy PtoP (Device -> Device)", 40, 3, 2000)]
    df = memory_bw_by_direction(load(write_trace(tmp_path, events), workers=1)).set_index("direction")
    assert set(df.index) == {"Memcpy HtoD", "Memcpy DtoH", "Memcpy DtoD", "Memcpy PtoP"}
    assert df.loc["Memcpy PtoP", "transfers"] == 2 and df.loc["Memcpy PtoP", "bytes_total"] == 3000
    assert df.loc["Memcpy PtoP", "bw_gbps"] == pytest.approx(3000 / 1e9 / 5e-6)
    assert df.loc["Memcpy HtoD", "bw_gbps"] == pytest.approx(8000 / 1e9 / 4e-6)


# --- real traces, against plain Python over the raw JSON ----------------------------------------
def raw_memory(folder: Path) -> tuple[list[dict], list[dict]]:
    """([memory] events, cpu ops) of the one rank file in ``folder``."""
    (path,) = [p for p in folder.iterdir() if p.name.endswith(".json.gz")]
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    memory = [e for e in events if e.get("name") == "[memory]"]
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "Operator")
           and not e["name"].startswith("ProfilerStep")]
    return memory, ops


def label(e: dict) -> str:
    t, i = e["args"]["Device Type"], e["args"]["Device Id"]
    return "cpu" if t == 0 else {1: "cuda", 6: "hip"}[t] + f":{i}"


def brute_series(memory: list[dict]) -> dict[str, list[tuple[float, int, int]]]:
    """Per device: (ts, bytes, allocated after) in time order (file order on ties)."""
    out: dict[str, list] = defaultdict(list)
    for e in sorted(memory, key=lambda e: e["ts"]):  # sorted() is stable: file order on ties
        a = e["args"]
        prev = out[label(e)][-1][2] if out[label(e)] else 0
        out[label(e)].append((e["ts"], a["Bytes"], a.get("Total Allocated", prev + a["Bytes"])))
    return out


@pytest.mark.parametrize("rel", ["pair_kineto_resnet50_v100_dataloader/workers4",
                                 "pair_tracelens_h100_vs_mi300x_bert_small/h100",
                                 "pair_tracelens_h100_vs_mi300x_bert_small/mi300x"])
def test_peaks_and_ops_match_plain_python(rel: str) -> None:
    folder = shared_trace(rel)
    traces = load_cached(str(folder))
    memory, ops = raw_memory(folder)
    origin = int(min(e["ts"] for e in json.loads(gzip.decompress(next(folder.glob("*.json.gz")).read_bytes()))
                     ["traceEvents"] if e.get("ph") == "X"))  # the loader's clock: µs since this
    peaks = memory_peaks(traces).set_index("device")
    series = brute_series(memory)
    assert set(peaks.index) == set(series)
    for dev, s in series.items():
        alloc = [x[2] for x in s]
        peak = max(alloc)
        assert peaks.loc[dev, "peak_allocated_bytes"] == peak
        assert peaks.loc[dev, "peak_allocated_ts_us"] == pytest.approx(s[alloc.index(peak)][0] - origin, abs=1e-3)
        assert peaks.loc[dev, "allocations"] == sum(1 for x in s if x[1] > 0)
        assert peaks.loc[dev, "allocated_bytes"] == sum(x[1] for x in s if x[1] > 0)
        assert peaks.loc[dev, "freed_bytes"] == -sum(x[1] for x in s if x[1] < 0)
        tl = memory_timeline(traces)
        tl = tl[tl["device"] == dev]
        assert len(tl) <= TIMELINE_MAX_POINTS and tl["allocated_bytes"].max() == peak
    # operators: the innermost op of the same thread containing the event. Walking back from the
    # last op starting at or before it (ops in (start, -dur) order), the first that still
    # contains it is the innermost.
    by_thread: dict[tuple, list[dict]] = defaultdict(list)
    for o in ops:  # June-2021 traces write an op's tid as text ("5555") and a memory event's as a number
        by_thread[(int(o["pid"]), int(o["tid"]))].append(o)
    starts, reach = {}, {}  # reach: the latest end among the ops up to here (stop walking below it)
    for key, lst in by_thread.items():
        lst.sort(key=lambda o: (o["ts"], -o["dur"]))
        starts[key] = [o["ts"] for o in lst]
        reach[key] = list(itertools.accumulate((o["ts"] + o["dur"] for o in lst), max))
    want: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for e in memory:
        key = (int(e["pid"]), int(e["tid"]))
        lst, name = by_thread.get(key, []), NO_OP
        for i in range(bisect.bisect_right(starts.get(key, []), e["ts"]) - 1, -1, -1):
            if reach[key][i] < e["ts"]:
                break
            if e["ts"] <= lst[i]["ts"] + lst[i]["dur"]:
                name = lst[i]["name"]
                break
        b = e["args"]["Bytes"]
        w = want[(label(e), name)]
        w[0] += b > 0
        w[1] += max(b, 0)
        w[2] += max(-b, 0)
    got = memory_by_op(traces, top=10_000)
    assert {(r.device, r.op): [r.allocations, r.allocated_bytes, r.freed_bytes] for r in got.itertuples()} == dict(want)


def test_per_step_matches_plain_python() -> None:
    folder = shared_trace("pair_kineto_resnet50_v100_dataloader/workers0")
    traces = load_cached(str(folder))
    events = json.loads(gzip.decompress(next(folder.glob("*.json.gz")).read_bytes()))["traceEvents"]
    spans = [(int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]) for e in events
             if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")]
    memory = [e for e in events if e.get("name") == "[memory]"]
    want: dict[tuple[str, int], list] = {}
    for dev, s in brute_series(memory).items():
        for ts, b, after in s:
            step = next((n for n, a, z in spans if a <= ts < z), -1)
            w = want.setdefault((dev, step), [0, after, after - b, after])
            w[0] += b > 0
            w[1] = max(w[1], after)
            w[3] = after
    got = memory_per_step(traces)
    assert {(r.device, r.step): (r.allocations, r.peak_allocated_bytes, r.allocated_bytes_delta)
            for r in got.itertuples()} == {k: (w[0], w[1], w[3] - w[2]) for k, w in want.items()}
    # a steady training loop: GPU memory returns to where it started every step
    assert (got.loc[(got["device"] == "cuda:0") & (got["step"] >= 0), "allocated_bytes_delta"] == 0).all()
