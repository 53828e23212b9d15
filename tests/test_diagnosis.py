"""The diagnosis against the raw events: the time at stake of its first cause, recomputed in plain
Python from the trace JSON (no perfreport code but constants), on a host-bound, a GPU-bound, a
gloo DDP and a communication-bound (NCCL kernels stretched) job."""

from __future__ import annotations

import bisect
import functools
import gzip
import json
import re
import statistics
import sys
from pathlib import Path

import pytest

from perfreport.model import LAUNCH_NAMES
from perfreport.units import format_us

from .conftest import DATA, TRACES

RECORDED = DATA / "recorded"
GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
GPU_SIDE = GPU_WORK + ("cuda_sync", "gpu_user_annotation", "cuda_profiler_range")
COLLECTIVE = re.compile(r"^(nccl|rccl|gloo):|^c10d::|^record_param_comms$")
SYNCS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize")


# --- plain Python over the raw JSON ------------------------------------------------------------------
def raw_ranks(folder: Path) -> dict[int, list[dict]]:
    out = {}
    for path in sorted(folder.glob("*.json.gz")):
        doc = json.load(gzip.open(path))
        rank = (doc.get("distributedInfo") or {}).get("rank", len(out))
        out[int(rank)] = [e for e in doc["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    return out


def merged(intervals) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def inside(union: list[tuple[float, float]], t: float) -> bool:
    i = bisect.bisect_right(union, (t, float("inf"))) - 1
    return i >= 0 and union[i][0] <= t < union[i][1]


def measure(windows, include, exclude) -> float:
    """Time inside the windows where some ``include`` union covers and no ``exclude`` one does."""
    points = sorted({p for u in [windows, *include, *exclude] for iv in u for p in iv})
    total = 0.0
    for a, b in zip(points, points[1:]):
        t = (a + b) / 2
        if inside(windows, t) and any(inside(u, t) for u in include) and not any(inside(u, t) for u in exclude):
            total += b - a
    return total


def steps_of(events) -> list[tuple[float, float]]:
    """The CPU ProfilerStep spans by step number (the raw windows, last one kept)."""
    spans = sorted((int(e["name"].split("#")[1]), float(e["ts"]), float(e["ts"]) + float(e["dur"]))
                   for e in events if e["name"].startswith("ProfilerStep#") and e.get("cat") not in GPU_SIDE)
    return [(s, e) for _, s, e in spans]


def span(e: dict) -> tuple[float, float]:
    return float(e["ts"]), float(e["ts"]) + float(e["dur"])


def expected(events) -> dict[str, float]:
    """µs per judged step (the last step dropped) of the causes the tests check."""
    windows = steps_of(events)[:-1]
    gpu = [e for e in events if e.get("cat") in GPU_WORK]
    is_comm = [e.get("cat") == "kernel" and str(e["name"]).startswith("nccl") for e in gpu]
    compute = merged(span(e) for e, c in zip(gpu, is_comm) if e.get("cat") == "kernel" and not c)
    comm = merged(span(e) for e, c in zip(gpu, is_comm) if c)
    busy = merged(span(e) for e in gpu)
    cpu = [e for e in events if e.get("cat") not in GPU_SIDE]
    host_comm = merged(span(e) for e in cpu if COLLECTIVE.search(str(e["name"])))
    starts = sorted(float(e["ts"]) for e in gpu)
    gaps = []
    for e in cpu:
        if e["name"] in SYNCS:
            i = bisect.bisect_left(starts, span(e)[1])
            if i < len(starts):
                gaps.append((float(e["ts"]), starts[i]))
    launch = merged(span(e) for e in cpu if e["name"] in LAUNCH_NAMES)
    loader = merged(span(e) for e in cpu if "DataLoader" in str(e["name"]) and str(e["name"]).endswith("__next__"))
    n = len(windows)
    win = merged(windows)
    return {
        "step": sum(e - s for s, e in windows) / n,
        "compute": measure(win, [compute], []) / n,
        "communication": (measure(win, [comm], [compute]) + measure(win, [host_comm], [busy])) / n,
        "dataloader": measure(win, [loader], [busy, host_comm, merged(gaps), launch]) / n,
    }


def pace(ranks: dict[int, list[dict]]) -> int:
    medians = {r: statistics.median(e - s for s, e in steps_of(ev)) for r, ev in ranks.items()}
    return max(medians, key=lambda r: (medians[r], -r))


@functools.lru_cache(maxsize=None)
def diagnosis(folder: str) -> dict:
    from perfreport.documents.jsondoc import json_text
    from perfreport.pipeline import analyze, summary_document

    return json.loads(json_text(summary_document(analyze(folder, workers=1))))


def check_first_cause(folder: Path, kind: str, key: str | None = None) -> tuple[dict, dict]:
    doc = diagnosis(str(folder))
    d = doc["diagnosis"]
    ranks = raw_ranks(folder)
    assert d["rank"] == pace(ranks) and d["method"] == "steps"
    want = expected(ranks[d["rank"]])
    assert d["step_us"] == pytest.approx(want["step"], rel=1e-6)
    judged = [e - s for s, e in steps_of(ranks[d["rank"]])[:-1]]  # the headline's step time: their median
    assert d["step_us_median"] == pytest.approx(statistics.median(judged), rel=1e-6)
    first = d["where_the_time_goes"][0]
    assert first["kind"] == kind and (key is None or key in str(first["key"]))
    name = "dataloader" if first["kind"] == "host" else first["kind"]
    assert first["us_per_step"] == pytest.approx(want[name], rel=1e-6)
    assert first["pct_of_step"] == pytest.approx(100 * want[name] / want["step"], rel=1e-6)
    assert [c["us_per_step"] for c in d["where_the_time_goes"]] == sorted(
        (c["us_per_step"] for c in d["where_the_time_goes"]), reverse=True)
    # the first suggestion is that cause, its evidence the same numbers
    s = d["suggestions"][0]
    assert s["kind"] == kind and s["rank"] == d["rank"] and s["us_per_step"] == first["us_per_step"]
    assert f"{format_us(want[name])} of {format_us(want['step'])}/step" in s["evidence"]
    assert s["seconds_at_stake_per_step"] == pytest.approx(want[name] / 1e6, rel=1e-6)
    # the parts of the rank's steps add up to its mean step
    stake = [r for r in doc["time_at_stake"] if r["rank"] == d["rank"]]
    assert sum(r["us_per_step"] for r in stake) == pytest.approx(want["step"], rel=1e-6)
    return d, want


# --- the tests -------------------------------------------------------------------------------------
def test_host_bound_run_points_at_the_dataloader() -> None:
    d, want = check_first_cause(RECORDED / "workers0" / "run1", "host", "DataLoader")
    assert d["suggestions"][0]["text"].startswith("The GPU waits for the input pipeline")
    assert not any(s["kind"] == "communication" for s in d["suggestions"])
    assert want["dataloader"] > 0.4 * want["step"]  # 17.3 of 35.3 ms/step


def test_gpu_bound_run_points_at_compute_and_not_the_dataloader() -> None:
    d, want = check_first_cause(RECORDED / "gpu_bound_repeat" / "run1", "compute")
    assert want["compute"] > 0.9 * want["step"]
    assert not any(s["kind"] == "host" for s in d["suggestions"])  # DataLoader off the path: no suggestion


def test_gloo_ddp_is_communication_bound_on_the_host() -> None:
    d, want = check_first_cause(RECORDED / "setups" / "ddp_w2_gloo", "communication")
    s = d["suggestions"][0]
    assert s["text"].startswith("Communication runs on the host (gloo)") and "all-reduce (host-side)" in s["evidence"]
    assert want["communication"] > 0.5 * want["step"]
    assert not any(s.get("key") and "DataLoader" in s["key"] for s in d["suggestions"])


def test_stretched_nccl_kernels_flip_the_diagnosis_to_communication(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from trace_edit import read_trace, scale_kernels, write_trace

    src = TRACES / "hta_sampled_2of128rank"
    before = diagnosis(str(src))["diagnosis"]
    assert before["where_the_time_goes"][0]["kind"] == "host"  # as recorded: the host's backward leads
    for path in sorted(src.glob("*.json.gz")):
        write_trace(scale_kernels(read_trace(path), 3.0, r"^nccl"), tmp_path / path.name)
    d, want = check_first_cause(tmp_path, "communication")
    assert d["suggestions"][0]["text"].startswith("Communication is exposed")


def test_the_straggler_is_the_late_rank_with_its_lateness() -> None:
    folder = RECORDED / "setups" / "ddp_w2_gloo"
    doc = diagnosis(str(folder))
    ranks = raw_ranks(folder)
    # the i-th gloo call of each kind in each step, paired across the ranks; lateness behind the earliest
    calls: dict[tuple, dict[int, tuple[float, float]]] = {}
    for rank, events in ranks.items():
        steps = steps_of(events)
        seen: dict[tuple, int] = {}
        for e in sorted((e for e in events if str(e["name"]).startswith("gloo:") and e.get("cat") not in GPU_SIDE),
                        key=lambda e: float(e["ts"])):
            t = float(e["ts"])
            step = next((i for i, (s, end) in enumerate(steps) if s <= t < end), None)
            if step is None:
                continue
            key = (e["name"], step)
            seen[key] = seen.get(key, -1) + 1
            calls.setdefault((*key, seen[key]), {})[rank] = span(e)
    late: dict[int, dict[int, list[float]]] = {r: {} for r in ranks}
    for (name, step, _), by_rank in calls.items():
        if len(by_rank) == len(ranks) and max(s for s, _ in by_rank.values()) <= min(e for _, e in by_rank.values()):
            first = min(s for s, _ in by_rank.values())
            for r, (s, _) in by_rank.items():
                late[r].setdefault(step, []).append(s - first)
    median = {r: statistics.median(statistics.median(v) for v in steps.values()) for r, steps in late.items()}
    walls = {r: [e - s for s, e in steps_of(ev)] for r, ev in ranks.items()}
    noise = statistics.median(1.4826 * statistics.median(abs(w - statistics.median(ws)) for w in ws)
                              for ws in walls.values())
    step = statistics.median(w for ws in walls.values() for w in ws)
    flagged = {r for r, m in median.items() if m > 0 and m >= max(0.05 * step, 2 * noise)}
    assert flagged == {0} and median[1] == 0.0  # rank 0 reaches every all-reduce ~4.9 ms late
    ev = {r["rank"]: r for r in doc["straggler_evidence"]}
    assert {r for r, row in ev.items() if row["is_straggler"]} == flagged
    assert ev[0]["lateness_us_median"] == pytest.approx(median[0], rel=1e-6)
    assert ev[0]["noise_us"] == pytest.approx(noise, rel=1e-6)
    s = next(s for s in doc["diagnosis"]["suggestions"] if s["kind"] == "straggler")
    assert s["rank"] == 0 and s["us_per_step"] == pytest.approx(median[0], rel=1e-6)
    assert s["evidence"].startswith(f"rank 0 started {format_us(median[0])} after the earliest rank (median over "
                                    f"{len(late[0])} steps)")
    # the HTA-measure table uses the same test: no NCCL kernel here, so nobody is late by it
    assert not any(r["is_straggler"] for r in doc["stragglers"])


def test_no_steps_and_no_gpu_fall_back_to_shares_and_say_so() -> None:
    whole = diagnosis(str(TRACES / "hta_a100_alexnet_benchmark"))["diagnosis"]
    assert whole["method"] == "whole_trace" and whole["basis"].startswith("No profiler steps on rank 0")
    assert whole["suggestions"][0]["seconds_at_stake_per_step"] is None
    cpu = diagnosis(str(TRACES / "odd_cpu_only_rank34of300_trimmed"))["diagnosis"]
    assert cpu["method"] == "shares" and cpu["basis"].startswith("No GPU activity on rank 34")
    assert cpu["suggestions"] == [] and cpu["where_the_time_goes"][0]["label"] == "communication on the host"


def test_gloo_collectives_count_as_communication_in_the_overlap_and_collectives() -> None:
    folder = RECORDED / "setups" / "ddp_w2_gloo"
    doc = diagnosis(str(folder))
    for rank, events in raw_ranks(folder).items():
        gloo = [span(e) for e in events if str(e["name"]).startswith("gloo:") and e.get("cat") not in GPU_SIDE]
        compute = merged(span(e) for e in events if e.get("cat") == "kernel")  # no NCCL kernel here
        whole = [(min(s for s, _ in gloo) - 1, max(e for _, e in gloo) + 1)]
        comm = measure(whole, [merged(gloo)], [])
        row = next(r for r in doc["comm_comp_overlap"] if r["rank"] == rank)
        assert row["comm_us"] == pytest.approx(comm, rel=1e-6) and comm > 100_000  # ~26 ms a step
        assert row["exposed_comm_us"] == pytest.approx(measure(whole, [merged(gloo)], [compute]), rel=1e-6)
        gpu = [span(e) for e in events if e.get("cat") in GPU_WORK]
        gpu_span = [(min(s for s, _ in gpu), max(e for _, e in gpu))]
        t = next(r for r in doc["temporal_breakdown"] if r["rank"] == rank)
        host = measure(gpu_span, [merged(gloo)], [merged(gpu)])
        assert t["host_comm_us"] == pytest.approx(host, rel=1e-6) and t["host_comm_us"] < t["idle_us"]
        assert t["host_comm_pct"] + t["other_idle_pct"] == pytest.approx(t["idle_pct"])
        calls = [r for r in doc["collectives"] if r["rank"] == rank]
        assert len(calls) == len(gloo) and {r["kind"] for r in calls} == {"all_reduce", "broadcast"}


def test_attribute_gives_each_instant_to_the_first_active_layer() -> None:
    import numpy as np

    from perfreport.analyses.stake import NO_OP, attribute

    def layer(kind, starts, ends, keys):
        return kind, "GPU", np.array(starts, float), np.array(ends, float), np.array(keys, dtype=object)

    # window [0, 100): compute 10-30 (two kernels share 20-30), comm 20-50, host op 40-90
    parts = attribute(np.array([0.0]), np.array([100.0]), [
        layer("compute", [10, 20], [30, 30], ["a", "b"]), layer("communication", [20], [50], ["all_reduce"]),
        layer("host", [40], [90], ["op"])])
    got = {(k, key): t for k, key, t in zip(parts["kind"], parts["key"], parts["time_us"])}
    assert got == {("compute", "a"): 15.0, ("compute", "b"): 5.0, ("communication", "all_reduce"): 20.0,
                   ("host", "op"): 40.0, ("host", NO_OP): 20.0}
    assert sum(got.values()) == 100.0


def test_c_layer_claims_equal_the_numpy_path_on_a_recorded_trace(monkeypatch) -> None:
    """The time at stake's layers claimed in C (_nest.layer_claim) and in numpy: the same parts,
    float for float, on ns-resolution times (fractional µs: the order of the sums shows)."""
    import numpy as np

    from perfreport.analyses import stake
    from perfreport.analyses.step_metrics import step_windows
    from perfreport.load import load

    if not hasattr(stake._nest, "layer_claim"):
        pytest.skip("the C extension was not built")
    trace = load(RECORDED / "gpu_bound_repeat" / "run1", workers=1)[0]
    w = step_windows(trace)
    ws, we = w["start_us"].to_numpy(np.float64), w["end_us"].to_numpy(np.float64)
    layers = stake._layers(trace, w["step"].to_numpy(np.int64))
    in_c = stake._claims(ws, we, layers)
    monkeypatch.setattr(stake, "_nest", None)
    in_numpy = stake._claims(ws, we, layers)
    for column in ("window", "layer", "code", "time"):
        assert np.array_equal(getattr(in_c, column), getattr(in_numpy, column)), column
    assert len(in_c.time) > 1000 and (in_c.time != np.round(in_c.time)).mean() > 0.5


def test_analyze_prints_what_to_fix_first_and_writes_it_for_ci(tmp_path: Path, capsys) -> None:
    from perfreport.cli import main

    folder = RECORDED / "setups" / "ddp_w2_gloo"
    assert main(["analyze", str(folder), "--out", str(tmp_path), "--format", "json", "-q"]) == 0
    out, err = capsys.readouterr()
    d = json.loads((tmp_path / "report.json").read_text())["diagnosis"]
    first = d["suggestions"][0]
    assert f"where the time goes (rank {d['rank']}):" in out
    assert f"  1. exposed communication {format_us(d['where_the_time_goes'][0]['us_per_step'])}/step" in out
    assert f"fix first: {first['text']}" in out and first["evidence"] in out and err == ""
    assert first["kind"] == "communication" and isinstance(first["seconds_at_stake"], float)
    assert first["seconds_at_stake"] == pytest.approx(first["us_per_step"] * d["steps"] / 1e6)


def test_compute_at_stake_agrees_with_htas_critical_path_on_a_gpu_bound_run() -> None:
    """Where the GPU sets the pace, the compute time at stake of each step is the compute-bound
    part of HTA's critical path (perfreport.hta, HTA's graph) within 2 %."""
    import logging

    from perfreport.analyses.stake import stake_parts
    from perfreport.hta import TraceAnalysis
    from perfreport.load import load

    folder = RECORDED / "gpu_bound_repeat" / "run1"
    parts = stake_parts(load(folder, workers=1)[0])
    analysis = TraceAnalysis(trace_dir=str(folder))
    logging.disable(logging.WARNING)  # HTA's warning on traces without cuda_sync records
    try:
        for instance, step in enumerate(sorted(parts["step"].unique())):  # the ProfilerSteps in order
            graph, ok = analysis.critical_path_analysis(rank=0, annotation="ProfilerStep",
                                                        instance_id=(instance, instance))
            hta = graph.get_critical_path_breakdown().groupby("bound_by")["duration"].sum()["gpu_compute_bound"]
            ours = parts.loc[(parts["step"] == step) & (parts["kind"] == "compute"), "time_us"].sum()
            assert ok and ours == pytest.approx(hta, rel=0.02)
    finally:
        logging.disable(logging.NOTSET)
