"""perfreport.analyses.temporal, checked against a brute-force reading of the raw JSON.

The helpers here (raw JSON reader, pure-Python interval union, tiny trace writer) are shared
by the tests of the other breakdown analyses.
"""

from __future__ import annotations

import functools
import gzip
import json
import math
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest

from perfreport.analyses.temporal import temporal_breakdown, temporal_breakdown_per_step
from perfreport.load import load

from .conftest import TRACES, load_cached

WORK_CATS = {"kernel": "k", "Kernel": "k", "gpu_memcpy": "m", "Memcpy": "m", "gpu_memset": "m", "Memset": "m"}


# --- brute force from the raw file -----------------------------------------------------------
@functools.lru_cache(maxsize=None)
def raw_events(trace_dir: Path) -> dict[int, list[dict]]:
    """{rank: traceEvents} read with json only (rank from distributedInfo, else 0).

    Numbers are parsed exactly (Decimal) and ``ts`` is shifted by the smallest integer ts so
    float64 keeps ns resolution even for absolute-epoch timestamps (only differences are
    compared)."""
    out = {}
    for f in sorted(Path(trace_dir).iterdir()):
        if not f.name.endswith((".json", ".json.gz")):
            continue
        text = gzip.open(f, "rt").read() if f.name.endswith(".gz") else f.read_text()
        doc = json.loads(text, parse_float=Decimal)
        events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
        base = min((int(e["ts"]) for e in events if isinstance(e.get("ts"), (int, Decimal))), default=0)
        for e in events:
            if isinstance(e.get("ts"), (int, Decimal)):
                e["ts"] = float(e["ts"] - base)
            if isinstance(e.get("dur"), (int, Decimal)):
                e["dur"] = float(e["dur"])
        out[int(doc.get("distributedInfo", {}).get("rank", 0))] = events
    return out


def raw_gpu_work(events: list[dict]) -> pd.DataFrame:
    """GPU work (kernels, memcpy, memset) with class and the ProfilerStep of its launch."""
    steps = [(e["ts"], e["ts"] + e["dur"], int(e["name"].split("#")[1])) for e in events
             if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    launch_ts = {}
    for e in events:
        corr = (e.get("args") or {}).get("correlation")
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver") and corr is not None:
            launch_ts[corr] = e["ts"]
    rows = []
    for e in events:
        kind = WORK_CATS.get(e.get("cat"))
        if e.get("ph") != "X" or kind is None or "dur" not in e:
            continue
        name, args = e["name"], e.get("args") or {}
        cls = "MEMORY" if kind == "m" else "COMMUNICATION" if "nccl" in name.lower() else "COMPUTATION"
        lts = launch_ts.get(args.get("correlation"))
        inside = [s for s in steps if lts is not None and s[0] <= lts < s[1]]
        step = max(inside)[2] if inside else -1
        rows.append((e["ts"], e["ts"] + e["dur"], cls, args.get("stream", -1), name, step, e["dur"], lts))
    return pd.DataFrame(rows, columns=["ts", "end", "cls", "stream", "name", "step", "dur", "launch_ts"])


def py_union_length(intervals) -> float:
    """Covered length of [start, end) intervals, by a plain Python sweep."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0.0)


def py_temporal(work: pd.DataFrame) -> dict:
    iv = list(zip(work["ts"], work["end"]))
    span = max(e for _, e in iv) - min(s for s, _ in iv)
    busy = py_union_length(iv)
    comp = py_union_length([(s, e) for s, e, c in zip(work["ts"], work["end"], work["cls"]) if c == "COMPUTATION"])
    return {"gpu_span_us": span, "busy_us": busy, "idle_us": span - busy, "compute_us": comp,
            "non_compute_us": busy - comp}


# --- tiny traces -------------------------------------------------------------------------------
def write_trace(path: Path, events: list[dict], rank: int = 0) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events}
    (path / f"rank{rank}.json").write_text(json.dumps(doc))
    return path


def gpu(name: str, ts: float, dur: float, corr: int, stream: int = 7, cat: str = "kernel") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
            "args": {"stream": stream, "correlation": corr}}


def launch(ts: float, corr: int, name: str = "cudaLaunchKernel") -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 10, "tid": 10, "ts": ts, "dur": 1,
            "args": {"correlation": corr}}


def step(n: int, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 10, "tid": 10, "ts": ts,
            "dur": dur}


# --- tests -------------------------------------------------------------------------------------
@pytest.mark.parametrize("job", ["hta_sampled_2of128rank", "hta_a100_nccl_rank0of2", "odd_amd_mi250_rocm62_minitoy"])
def test_matches_brute_force(job):
    ours = temporal_breakdown(load_cached(str(TRACES / job))).set_index("rank")
    for rank, events in raw_events(TRACES / job).items():
        truth = py_temporal(raw_gpu_work(events))
        for col, value in truth.items():
            assert ours.loc[rank, col] == pytest.approx(value, abs=1e-6), (rank, col)
        assert ours.loc[rank, ["idle_pct", "compute_pct", "non_compute_pct"]].sum() == pytest.approx(100.0)


def test_reference_numbers():
    """hta_sampled_2of128rank rank 0 (integer µs), cross-checked by test_matches_brute_force."""
    row = temporal_breakdown(load_cached(str(TRACES / "hta_sampled_2of128rank"))).set_index("rank").loc[0]
    assert row[["gpu_span_us", "busy_us", "idle_us", "compute_us", "non_compute_us"]].tolist() == \
        [1222847.0, 547656.0, 675191.0, 210320.0, 337336.0]
    assert row["compute_pct"] == pytest.approx(100 * 210320 / 1222847)


@pytest.mark.parametrize("job", ["hta_sampled_2of128rank", "hta_a100_nccl_rank0of2"])
def test_per_step_matches_brute_force(job):
    ours = temporal_breakdown_per_step(load_cached(str(TRACES / job))).set_index(["rank", "step"])
    expected_rows = 0
    for rank, events in raw_events(TRACES / job).items():
        work = raw_gpu_work(events)
        for s, part in work.groupby("step"):
            expected_rows += 1
            for col, value in py_temporal(part).items():
                assert ours.loc[(rank, s), col] == pytest.approx(value, abs=1e-6), (rank, s, col)
    assert len(ours) == expected_rows


def test_hand_built_two_streams_and_steps(tmp_path):
    """Step 1: compute [0,10) on s7, nccl [5,20) on s8, memcpy [30,40) -> busy 30 of span 40.
    Step 2: one kernel [100,104). Work launched outside a step is step -1."""
    events = [step(1, 0, 50), launch(1, 1), gpu("gemm", 0, 10, 1),
              launch(2, 2), gpu("ncclKernel_AllReduce", 5, 15, 2, 8),
              launch(3, 3), gpu("Memcpy HtoD", 30, 10, 3, cat="gpu_memcpy"),
              step(2, 60, 50), launch(61, 4), gpu("relu", 100, 4, 4), launch(200, 5), gpu("late", 300, 2, 5)]
    ts = load(write_trace(tmp_path / "t", events))
    whole = temporal_breakdown(ts).iloc[0]
    assert whole[["gpu_span_us", "busy_us", "compute_us", "non_compute_us"]].tolist() == [302, 36, 16, 20]
    per_step = temporal_breakdown_per_step(ts).set_index("step")
    assert per_step.index.tolist() == [-1, 1, 2]
    assert per_step.loc[1, ["gpu_span_us", "busy_us", "idle_us", "compute_us", "non_compute_us"]].tolist() == \
        [40, 30, 10, 10, 20]
    assert per_step.loc[1, "non_compute_pct"] == pytest.approx(50.0)
    assert per_step.loc[2, ["gpu_span_us", "busy_us", "idle_pct", "compute_pct"]].tolist() == [4, 4, 0, 100]


def test_no_gpu_and_empty(tmp_path):
    cpu_only = load(write_trace(tmp_path / "cpu", [step(1, 0, 10), launch(1, 1)]))
    row = temporal_breakdown(cpu_only).iloc[0]
    assert row["rank"] == 0 and all(math.isnan(row[c]) for c in ("gpu_span_us", "busy_us", "idle_pct"))
    assert len(temporal_breakdown_per_step(cpu_only)) == 0
    real = temporal_breakdown(load_cached(str(TRACES / "odd_cpu_only_rank34of300_trimmed")))
    assert real["rank"].tolist() == [34] and real["busy_us"].isna().all()
