"""perfreport.analyses.queue: launch-queue length per stream, time-weighted, checked against a
plain-Python walk over the raw trace JSON and a hand-computed tiny trace."""

from __future__ import annotations

from bisect import bisect_right

import pytest

from perfreport.analyses.queue import (
    BLOCKED_COLUMNS,
    SERIES_COLUMNS,
    queue_length_by_step,
    queue_length_series,
    queue_length_summary,
    time_blocked_on_full_queue,
)
from perfreport.load import load

from .conftest import TRACES, load_cached
from .test_launch import cpu, gpu, raw_events, raw_launch_pairs, tiny_events, write_trace


def brute_force_queue(events: list[dict]) -> dict[int, list[tuple[float, int]]]:
    """{stream: [(time, queue length after every change at that time)]} by counting, at each
    change time, the launches made so far minus the ops started so far."""
    launch, ops = raw_launch_pairs(events)
    per_stream: dict[int, tuple[list, list]] = {}
    for corr, e in launch.items():
        for op in ops.get(corr, []):
            ups, downs = per_stream.setdefault(op["args"]["stream"], ([], []))
            ups.append(e["ts"])
            downs.append(op["ts"])
    out = {}
    for stream, (ups, downs) in per_stream.items():
        ups, downs = sorted(ups), sorted(downs)
        times = sorted(set(ups) | set(downs))
        out[stream] = [(t, bisect_right(ups, t) - bisect_right(downs, t)) for t in times]
    return out


def weighted(points: list[tuple[float, int]], threshold: int) -> tuple[float, float, float, int]:
    """(time-weighted mean, span, time at >= threshold, max) of a step function."""
    area = full = 0.0
    for (t0, q), (t1, _) in zip(points, points[1:]):
        area += q * (t1 - t0)
        full += (t1 - t0) if q >= threshold else 0.0
    span = points[-1][0] - points[0][0]
    return area / span, span, full, max(q for _, q in points)


def test_tiny_trace_by_hand(tmp_path):
    traces = load(write_trace(tmp_path / "t", tiny_events()))
    series = queue_length_series(traces)
    assert list(series.columns) == list(SERIES_COLUMNS)
    # +1@12 -1@30 +2@40 (graph: two kernels) +1@52 -1@60 -1@66 -1@70
    assert series[["ts_us", "queue_length"]].values.tolist() == [[12, 1], [30, 0], [40, 2], [52, 3], [60, 2],
                                                                  [66, 1], [70, 0]]
    row = queue_length_summary(traces, max_queue_length=3).iloc[0]
    assert (row["stream"], row["ops"], row["span_us"], row["max_queue_length"]) == (7, 4, 58, 3)
    assert row["mean_queue_length"] == pytest.approx(82 / 58)  # 1*18 + 2*12 + 3*8 + 2*6 + 1*4
    assert row["empty_pct"] == pytest.approx(100 * 10 / 58) and row["full_us"] == 8
    blocked = time_blocked_on_full_queue(traces, max_queue_length=3)
    assert list(blocked.columns) == list(BLOCKED_COLUMNS)
    assert blocked[["stream", "blocked_us", "blocked_pct"]].values.tolist() == [[7, 8, 8.0]]  # of span 0..100
    by_step = queue_length_by_step(traces)
    assert by_step[["iteration", "stream", "ops"]].values.tolist() == [[1, 7, 4]]


def test_launch_and_start_at_the_same_time_never_go_negative(tmp_path):
    events = [cpu("cudaLaunchKernel", 10, 2, cat="cuda_runtime", correlation=1), gpu("k", 10, 5, 1),
              cpu("cudaLaunchKernel", 20, 2, cat="cuda_runtime", correlation=2), gpu("k", 25, 5, 2)]
    series = queue_length_series(load(write_trace(tmp_path / "t", events)))
    assert series["queue_length"].tolist() == [0, 1, 0] and series["queue_length"].min() >= 0


def test_no_launches(tmp_path):
    traces = load(write_trace(tmp_path / "t", [cpu("aten::mm", 0, 5), gpu("orphan", 1, 1, 9)]))
    for fn in (queue_length_series, queue_length_summary, queue_length_by_step, time_blocked_on_full_queue):
        out = fn(traces)
        assert out.empty and len(out.columns) > 0
    assert queue_length_summary(load_cached(str(TRACES / "odd_cpu_only_rank34of300_trimmed"))).empty


@pytest.mark.parametrize("job", ["hta_a100_rank0of16_cudagraph_triton", "hta_a100_alexnet_benchmark",
                                 "odd_amd_mi250_rocm62_minitoy"])
def test_matches_brute_force(job):
    traces = load_cached(str(TRACES / job))
    origin = traces[0].meta.ts_origin_us
    expected = brute_force_queue(raw_events(TRACES / job))
    series = queue_length_series(traces)
    threshold = 4
    summary = queue_length_summary(traces, max_queue_length=threshold).set_index("stream")
    blocked = time_blocked_on_full_queue(traces, max_queue_length=threshold).set_index("stream")
    assert sorted(summary.index) == sorted(expected)
    for stream, points in expected.items():
        ours = series[series["stream"] == stream]
        assert ours["queue_length"].tolist() == [q for _, q in points]
        assert (ours["ts_us"] + origin).tolist() == pytest.approx([t for t, _ in points], abs=1e-3)
        mean, span, full, top = weighted(points, threshold)
        row = summary.loc[stream]
        assert row["mean_queue_length"] == pytest.approx(mean, rel=1e-6)  # raw JSON floats lose sub-ns digits
        assert row["span_us"] == pytest.approx(span, abs=1e-3) and row["max_queue_length"] == top
        assert blocked.loc[stream, "blocked_us"] == pytest.approx(full, abs=1e-3)


def test_reference_numbers_cudagraph_trace():
    """Stream 7 of this trace keeps ~660 kernels queued on average, close to CUDA's 1024 limit
    (HTA's change-point mean is 656.7 over its 9680 points, without the graph kernels)."""
    summary = queue_length_summary(load_cached(str(TRACES / "hta_a100_rank0of16_cudagraph_triton"))).set_index("stream")
    assert summary.loc[7, "max_queue_length"] == 994
    assert summary.loc[7, "mean_queue_length"] == pytest.approx(664.668, abs=1e-3)
    assert summary["ops"].sum() == 6875  # every kernel, memcpy and memset linked to a launch
