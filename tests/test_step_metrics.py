"""perfreport.analyses.step_metrics: one row per (rank, step), checked on a hand-built trace whose
numbers are worked out below, against brute force over a real trace's raw JSON, and against
HTA's own launch statistics (oracle) on an integer-µs trace."""

from __future__ import annotations

import gzip
import json
import math
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfreport.analyses.step_metrics import COLUMNS, step_metrics, step_time_series
from perfreport.load import load
from perfreport.model import LAUNCH_NAMES

from .conftest import ORACLE, TRACES, load_cached, shared_trace


# --- a tiny trace builder (also used by tests/test_attribution.py) ----------------------------
class Trace:
    """Kineto-shaped events of one rank: steps, CPU ops, launch calls and their GPU work."""

    def __init__(self, shift: float = 0.0) -> None:
        self.events: list[dict] = []
        self.corr = 0
        self.shift = shift

    def _x(self, cat: str, name: str, ts: float, dur: float, pid: int = 1, tid: int = 1, **args) -> dict:
        e = dict(ph="X", cat=cat, name=name, pid=pid, tid=tid, ts=ts + self.shift, dur=dur)
        if args:
            e["args"] = args
        self.events.append(e)
        return e

    def step(self, n: int, ts: float, dur: float) -> Trace:
        self._x("user_annotation", f"ProfilerStep#{n}", ts, dur)
        return self

    def op(self, name: str, ts: float, dur: float, cat: str = "cpu_op") -> Trace:
        self._x(cat, name, ts, dur)
        return self

    def call(self, name: str, ts: float, dur: float) -> Trace:
        """A runtime call without GPU work (a sync call, a query)."""
        self.corr += 1
        self._x("cuda_runtime", name, ts, dur, correlation=self.corr)
        return self

    def launch(self, launch_ts: float, launch_dur: float, gpu: list[tuple], launch: str = "cudaLaunchKernel"
               ) -> Trace:
        """One launch call and its GPU events: (name, ts, dur[, cat[, stream[, args]]]) each."""
        self.corr += 1
        self._x("cuda_runtime", launch, launch_ts, launch_dur, correlation=self.corr)
        for g in gpu:
            name, ts, dur = g[:3]
            cat = g[3] if len(g) > 3 else "kernel"
            stream = g[4] if len(g) > 4 else 7
            extra = g[5] if len(g) > 5 else {}
            self._x(cat, name, ts, dur, pid=0, tid=stream, correlation=self.corr, stream=stream, device=0, **extra)
        return self

    def sync_record(self, name: str, ts: float, dur: float) -> Trace:
        """A cuda_sync record for the latest call."""
        self._x("cuda_sync", name, ts, dur, pid=0, tid=7, correlation=self.corr, stream=7, device=0)
        return self

    def write(self, folder: Path, rank: int = 0, world: int = 1) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        doc = {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": world}, "traceEvents": self.events}
        (folder / f"rank{rank}.json").write_text(json.dumps(doc))
        return folder


def tiny(shift: float = 0.0) -> Trace:
    """Step 1: compute, overlapped comm, a DtoH copy, a short kernel run late, two syncs.
    Step 2: CPU work only. Step 3 (the last): one kernel."""
    t = Trace(shift).step(1, 0, 100).step(2, 100, 100).step(3, 200, 100)
    t.launch(10, 5, [("gemm", 20, 30)])  # delay 20 - 15 = 5
    t.launch(16, 4, [("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 40, 30, "kernel", 8)])  # delay 20
    t.launch(21, 60, [("Memcpy DtoH (Device -> Pinned)", 75, 5, "gpu_memcpy", 7, {"bytes": 4096})],
             launch="cudaMemcpyAsync")  # a 60 µs call: blocked; GPU starts before it returns: delay 0
    t.launch(82, 10, [("tiny", 200, 2)])  # delay 108: an outlier; 2 µs of GPU for a 10 µs call: short
    t.call("cudaStreamSynchronize", 93, 3).sync_record("Stream Sync", 93, 3)  # one sync, traced twice
    t.call("cudaDeviceSynchronize", 97, 1)
    t.op("aten::add", 120, 30)
    t.launch(210, 5, [("gemm", 220, 10)])
    return t


def test_tiny_trace_by_hand(tmp_path: Path) -> None:
    m = step_metrics(load(tiny().write(tmp_path / "t")))
    assert list(m.columns) == list(COLUMNS)
    assert m["step"].tolist() == [1, 2]  # the last step is dropped
    s1 = m.iloc[0]
    # GPU work of step 1: gemm [20, 50), nccl [40, 70), DtoH [75, 80), tiny [200, 202)
    want = {
        "rank": 0, "step_start_us": 0.0, "step_time_us": 100.0, "gpu_window_us": 182.0,
        "gpu_busy_us": 30 + 20 + 5 + 2, "compute_us": 32.0, "comm_us": 30.0, "memory_us": 5.0,
        "exposed_comm_us": 20.0, "overlap_pct": 100 * 10 / 30, "idle_us": 182.0 - 57, "idle_pct": 100 * 125 / 182,
        "compute_pct": 100 * 32 / 182, "comm_pct": 100 * 30 / 182, "exposed_comm_pct": 100 * 20 / 182,
        "kernels": 3, "launches": 4, "memcpy_count": 1, "memcpy_bytes": 4096, "memcpy_dtoh_count": 1, "syncs": 2,
        # delays 5, 20, 0, 108: median 12.5; p95 (linear) 20 + 0.85 * 88
        "launch_delay_p50_us": 12.5, "launch_delay_p95_us": 20 + 0.85 * 88, "launch_delay_outliers": 1,
        "short_kernels": 1, "blocked_launch_us": 60.0,
    }
    for column, value in want.items():
        assert s1[column] == pytest.approx(value), column
    s2 = m.iloc[1]  # no GPU work: counts 0, GPU times NaN
    assert s2["step_time_us"] == 100.0 and s2["step_start_us"] == 100.0
    assert s2[["kernels", "launches", "memcpy_count", "syncs", "short_kernels"]].tolist() == [0] * 5
    assert s2[["gpu_window_us", "gpu_busy_us", "idle_pct", "overlap_pct", "launch_delay_p50_us"]].isna().all()
    ints = ["rank", "step", "kernels", "launches", "memcpy_count", "memcpy_bytes", "memcpy_dtoh_count", "syncs",
            "launch_delay_outliers", "short_kernels"]
    assert all(m[c].dtype == np.int64 for c in ints)


def test_last_step_kept_on_request_and_single_step(tmp_path: Path) -> None:
    traces = load(tiny().write(tmp_path / "t"))
    m = step_metrics(traces, include_last_step=True)
    assert m["step"].tolist() == [1, 2, 3]
    assert m.iloc[2][["kernels", "gpu_busy_us", "gpu_window_us", "launches"]].tolist() == [1, 10.0, 10.0, 1]
    one = load(Trace().step(7, 0, 50).launch(1, 2, [("k", 5, 4)]).write(tmp_path / "one"))
    assert step_metrics(one)[["step", "step_time_us", "gpu_busy_us"]].values.tolist() == [[7, 50.0, 4.0]]
    series = step_time_series(traces)
    assert series.values.tolist() == [[0, 1, 0.1], [0, 2, 0.1]]
    assert step_time_series(traces, include_last_step=True)["step"].tolist() == [1, 2, 3]


def test_cutoffs_are_parameters(tmp_path: Path) -> None:
    traces = load(tiny().write(tmp_path / "t"))
    m = step_metrics(traces, launch_delay_cutoff_us=10.0, runtime_cutoff_us=70.0).iloc[0]
    # delays above 10 µs: 20 and 108; no call above 70 µs; the 60 µs memcpy call now counts as
    # short (5 µs of GPU work)
    assert (m["launch_delay_outliers"], m["blocked_launch_us"], m["short_kernels"]) == (2, 0.0, 2)


def test_ranks_on_a_common_clock(tmp_path: Path) -> None:
    tiny().write(tmp_path / "job", rank=0, world=2)
    tiny(shift=1000.5).write(tmp_path / "job", rank=1, world=2)
    m = step_metrics(load(tmp_path / "job"))
    assert m[["rank", "step"]].values.tolist() == [[0, 1], [0, 2], [1, 1], [1, 2]]
    assert m["step_start_us"].tolist() == [0.0, 100.0, 1000.5, 1100.5]
    assert m["gpu_busy_us"].iloc[2] == pytest.approx(57.0)


def test_no_steps_empty_and_no_gpu(tmp_path: Path) -> None:
    flat = Trace().op("aten::mm", 5, 20).launch(6, 2, [("k", 10, 4)]).launch(8, 2, [("k", 30, 6)])
    m = step_metrics(load(flat.write(tmp_path / "flat")))
    assert len(m) == 1 and m["step"].iloc[0] == -1
    r = m.iloc[0]  # the whole trace: events from 5 (the job's clock origin) to 36
    assert (r["step_start_us"], r["step_time_us"], r["gpu_window_us"], r["gpu_busy_us"], r["kernels"]) == (
        0.0, 31.0, 26.0, 10.0, 2)
    empty = Trace()
    empty.events.append({"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "x"}})
    e = step_metrics(load(empty.write(tmp_path / "empty")))
    assert e["step"].tolist() == [-1] and math.isnan(e["step_time_us"].iloc[0]) and e["kernels"].iloc[0] == 0
    cpu = step_metrics(load_cached(str(TRACES / "odd_cpu_only_rank34of300_trimmed")))
    assert len(cpu) == 1 and cpu["gpu_busy_us"].isna().all() and cpu["launches"].tolist() == [0]


# --- real traces ------------------------------------------------------------------------------
def _raw(path: Path) -> list[dict]:
    """Complete events of the rank file under ``path``; ts/dur parsed as exact decimals and
    given as float µs since the first event (epoch-µs floats would lose the ns digits)."""
    (f,) = [p for p in path.iterdir() if p.name.endswith(".json.gz")]
    events = [e for e in json.loads(gzip.decompress(f.read_bytes()), parse_float=Decimal)["traceEvents"]
              if e.get("ph") == "X" and "dur" in e]
    origin = min(Decimal(e["ts"]) for e in events)
    for e in events:
        e["ts"], e["dur"] = float(Decimal(e["ts"]) - origin), float(e["dur"])
    return events


def _union(intervals: list[tuple[float, float]]) -> list[list[float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _length(intervals) -> float:
    return sum(e - s for s, e in _union(intervals))


def _intersection(a, b) -> float:
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in _union(a) for s2, e2 in _union(b))


def test_nccl_trace_matches_brute_force() -> None:
    folder = TRACES / "hta_a100_nccl_rank0of2"
    events = _raw(folder)
    steps = {int(e["name"].split("#")[1]): (e["ts"], e["ts"] + e["dur"]) for e in events
             if e["name"].startswith("ProfilerStep#") and e["cat"] != "gpu_user_annotation"}
    last = max(steps)

    def step_of(ts: float):
        return next((n for n, (a, b) in steps.items() if a <= ts < b), None)

    calls = {e["args"]["correlation"]: e for e in events
             if e["cat"] in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    gpu: dict[int, list[dict]] = {n: [] for n in steps}
    for e in events:
        if e["cat"] in ("kernel", "gpu_memcpy", "gpu_memset"):
            launch = calls.get(e["args"].get("correlation"))
            n = step_of(launch["ts"]) if launch else None
            if n is not None:
                gpu[n].append(e)
    m = step_metrics(load_cached(str(folder))).set_index("step")
    assert sorted(m.index) == sorted(n for n in steps if n != last)
    for n, row in m.iterrows():
        ev = gpu[n]
        iv = [(e["ts"], e["ts"] + e["dur"]) for e in ev]
        comm = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["cat"] == "kernel" and "nccl" in e["name"]]
        comp = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["cat"] == "kernel" and "nccl" not in e["name"]]
        mem = [(e["ts"], e["ts"] + e["dur"]) for e in ev if e["cat"] != "kernel"]
        window = max(e for _, e in iv) - min(s for s, _ in iv)
        assert row["step_time_us"] == pytest.approx(steps[n][1] - steps[n][0])
        assert row["gpu_window_us"] == pytest.approx(window)
        assert row["gpu_busy_us"] == pytest.approx(_length(iv))
        assert row["compute_us"] == pytest.approx(_length(comp))
        assert row["comm_us"] == pytest.approx(_length(comm)) and row["comm_us"] > 0
        assert row["memory_us"] == pytest.approx(_length(mem))
        assert row["exposed_comm_us"] == pytest.approx(_length(comm) - _intersection(comm, comp))
        assert row["overlap_pct"] == pytest.approx(100 * _intersection(comm, comp) / _length(comm))
        assert row["kernels"] == sum(e["cat"] == "kernel" for e in ev)
        assert row["memcpy_count"] == sum(e["cat"] == "gpu_memcpy" for e in ev)
        assert row["memcpy_bytes"] == sum(e["args"].get("bytes", 0) for e in ev if e["cat"] == "gpu_memcpy")
        assert row["launches"] == sum(1 for e in calls.values() if e["name"] in LAUNCH_NAMES and step_of(e["ts"]) == n)
        sync_calls = [e for e in calls.values() if e["name"].startswith("cuda") and e["name"].endswith(
            "Synchronize") and step_of(e["ts"]) == n]  # this trace has no cuda_sync records
        assert not any(e["cat"] == "cuda_sync" for e in events)
        assert row["syncs"] == len(sync_calls) == 8


def test_launch_statistics_match_hta_oracle() -> None:
    """HTA's per-launch statistics (its last step dropped), summarised per step by hand."""
    job = "hta_sampled_2of128rank"
    m = step_metrics(load_cached(str(TRACES / job)))
    assert m[["rank", "step"]].values.tolist() == [[0, 551], [1, 551]]
    for rank in (0, 1):
        hta = pd.read_csv(ORACLE / job / f"cuda_kernel_launch_stats__rank{rank}.csv")
        row = m[m["rank"] == rank].iloc[0]
        short = ((hta["gpu_duration"] < hta["cpu_duration"]) & (hta["cpu_duration"] <= 50)).sum()
        assert row["short_kernels"] == short > 0
        assert row["launch_delay_outliers"] == (hta["launch_delay"] > 100).sum()
        assert row["launch_delay_p50_us"] == pytest.approx(hta["launch_delay"].median())
        assert row["launch_delay_p95_us"] == pytest.approx(hta["launch_delay"].quantile(0.95))


def test_dataloader_pair_step_times() -> None:
    """The regression pair: ProfilerStep spans from the raw JSON, last step dropped."""
    for side in ("workers4", "workers0"):
        folder = shared_trace(f"pair_kineto_resnet50_v100_dataloader/{side}")
        events = _raw(folder)
        spans = sorted((int(e["name"].split("#")[1]), e["dur"]) for e in events
                       if e["name"].startswith("ProfilerStep#"))
        m = step_metrics(load_cached(str(folder)))
        assert m[["step", "step_time_us"]].values.tolist() == [[n, d] for n, d in spans[:-1]]
        assert (m["memcpy_count"] == 2).all() and (m["comm_us"] == 0).all() and m["overlap_pct"].isna().all()
