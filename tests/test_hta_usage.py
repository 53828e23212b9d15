"""Every call of ../shared/spec/hta-usage.md (HTA tutorial and course notebooks), unchanged apart
from the import, on real traces: they run and return HTA's shapes and column names."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from perfreport.hta import DeviceType, LabeledTrace, TraceAnalysis, TraceDiff

from .conftest import TRACES

NCCL = TRACES / "hta_a100_nccl_rank0of2"       # one rank, profiler steps 4, 5, 6
TWO_RANKS = TRACES / "hta_sampled_2of128rank"  # ranks 0 and 1


@pytest.fixture(scope="module")
def analyzer() -> TraceAnalysis:
    return TraceAnalysis(trace_dir=str(NCCL))


def test_temporal_breakdown_calls(analyzer) -> None:
    for df in (analyzer.get_temporal_breakdown(), analyzer.get_temporal_breakdown(visualize=True),
               analyzer.get_temporal_breakdown(visualize=False)):
        assert len(df) == 1
    row = df[["compute_time(us)", "non_compute_time(us)", "idle_time(us)"]].iloc[0]
    assert row["compute_time(us)"] > 0 and row["idle_time(us)"] > 0


def test_idle_time_breakdown_calls(analyzer) -> None:
    first, second = analyzer.get_idle_time_breakdown()
    assert second is None and set(first["idle_category"]) <= {"host_wait", "kernel_wait", "other"}
    first, stats = analyzer.get_idle_time_breakdown(show_idle_interval_stats=True)
    assert isinstance(stats, pd.DataFrame) and {"count", "mean", "50%"} <= set(stats.columns)
    two = TraceAnalysis(trace_dir=str(TWO_RANKS))
    df, _ = two.get_idle_time_breakdown(ranks=[1], visualize_pctg=False)
    assert set(df["rank"]) == {1}


def test_kernel_breakdown_calls(analyzer) -> None:
    kernel_type_metrics_df, kernel_metrics_df = analyzer.get_gpu_kernel_breakdown()
    assert {"kernel_type", "sum", "percentage"} <= set(kernel_type_metrics_df.columns)
    assert list(kernel_metrics_df.columns) == ["name", "sum (us)", "max (us)", "min (us)", "stddev",
                                               "mean (us)", "kernel_type", "rank"]
    _, small = analyzer.get_gpu_kernel_breakdown(num_kernels=3, duration_ratio=0.01)
    named = small[small["name"] != "others"]
    assert named.groupby("kernel_type").size().max() <= 3
    analyzer.get_gpu_kernel_breakdown(image_renderer="jupyterlab")


def test_overlap_calls(analyzer) -> None:
    for df in (analyzer.get_comm_comp_overlap(), analyzer.get_comm_comp_overlap(visualize=True),
               analyzer.get_comm_comp_overlap(visualize=False)):
        assert df is not None and len(df) > 0
    assert list(df.columns) == ["rank", "comp_comm_overlap_pctg"]


def test_counter_calls(tmp_path: Path) -> None:
    trace_dir = tmp_path / "traces"
    shutil.copytree(TWO_RANKS, trace_dir)
    analyzer = TraceAnalysis(trace_dir=str(trace_dir))
    analyzer.generate_trace_with_counters()
    analyzer.generate_trace_with_counters(ranks=[0, 1])
    written = sorted(p.name for p in trace_dir.glob("*_with_counters*"))
    assert written == ["sampled_rank-0_with_counters.json.gz", "sampled_rank-1_with_counters.json.gz"]
    assert analyzer.get_memory_bw_summary() is not None
    assert analyzer.get_queue_length_summary() is not None
    assert list(analyzer.get_memory_bw_time_series()) == [0]
    assert sorted(analyzer.get_queue_length_time_series(ranks=[0, 1])) == [0, 1]


def test_launch_stats_calls(analyzer) -> None:
    stats = analyzer.get_cuda_kernel_launch_stats()
    assert list(stats) == [0]
    assert list(stats[0].columns) == ["correlation", "cpu_duration", "gpu_duration", "launch_delay"]
    again = analyzer.get_cuda_kernel_launch_stats(runtime_cutoff=100, launch_delay_cutoff=50)
    pd.testing.assert_frame_equal(stats[0], again[0])  # cutoffs only shape the plots


def test_trace_diff_calls() -> None:
    control_lt = LabeledTrace(label="DDP", trace_dir=str(NCCL))
    test_lt = LabeledTrace(label="FSDP", trace_dir=str(NCCL))
    assert control_lt.ranks() == [0]
    assert control_lt.iterations()[:5] == [4, 5, 6]
    df = TraceDiff.compare_traces(control_lt, test_lt, 0, 0, 4, 4, DeviceType.GPU)
    top = df.nlargest(10, "diff_duration")[["diff_duration", "diff_counts"]]
    assert len(top) == 10 and (top["diff_counts"] == 0).all()  # the same trace on both sides
    assert len(df[df[f"{control_lt.label}_counts"] == 0]) == 0
    ops = TraceDiff.ops_diff(control_lt, test_lt, 0, 0, 4, 4, DeviceType.GPU)
    assert set(ops) == {"added", "deleted", "increased", "decreased", "unchanged"}
    assert ops["added"] == [] and len(ops["unchanged"]) == len(df)
    assert [d.name for d in (DeviceType.CPU, DeviceType.GPU, DeviceType.ALL)] == ["CPU", "GPU", "ALL"]
