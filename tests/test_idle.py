"""perfreport.analyses.idle, checked against a pure-Python walk over the raw JSON."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from perfreport.analyses.idle import (
    idle_breakdown,
    idle_breakdown_per_step,
    idle_interval_stats,
    stream_gaps,
)
from perfreport.load import load

from .conftest import TRACES, load_cached
from .test_temporal import gpu, launch, raw_events, raw_gpu_work, step, write_trace


def py_gaps(work: pd.DataFrame, delay: float = 30.0) -> list[tuple]:
    """(stream, step, category, gap) of every positive gap, walking each stream in Python."""
    out = []
    for stream, part in work.groupby("stream"):
        reach = None
        for ts, end, s, lts in sorted(zip(part["ts"], part["end"], part["step"], part["launch_ts"])):
            if reach is not None and ts > reach:
                gap = ts - reach
                launched_late = lts is not None and not (isinstance(lts, float) and math.isnan(lts)) and lts > reach
                cat = "host_wait" if launched_late else "kernel_wait" if gap < delay else "other"
                out.append((stream, s, cat, gap))
            reach = end if reach is None else max(reach, end)
    return out


@pytest.mark.parametrize("job", ["hta_sampled_2of128rank", "hta_a100_nccl_rank0of2", "hta_gp100_gpu_user_annotation"])
def test_breakdown_matches_brute_force(job):
    traces = load_cached(str(TRACES / job))
    ours = idle_breakdown(traces).set_index(["rank", "stream", "idle_category"])
    stats = idle_interval_stats(traces).set_index(["rank", "stream", "idle_category"])
    n_rows = 0
    for rank, events in raw_events(TRACES / job).items():
        gaps = pd.DataFrame(py_gaps(raw_gpu_work(events)), columns=["stream", "step", "cat", "gap"])
        for stream in raw_gpu_work(events)["stream"].unique():
            for cat in ("host_wait", "kernel_wait", "other"):
                n_rows += 1
                g = gaps[(gaps["stream"] == stream) & (gaps["cat"] == cat)]["gap"]
                row = ours.loc[(rank, stream, cat)]
                assert row["idle_us"] == pytest.approx(g.sum()), (rank, stream, cat)
                assert row["gaps"] == len(g)
                srow = stats.loc[(rank, stream, cat)]
                assert srow["count"] == len(g)
                if len(g):
                    assert srow["p50_us"] == pytest.approx(g.median())
                    assert srow["max_us"] == pytest.approx(g.max())
    assert len(ours) == n_rows
    shares = ours.groupby(level=["rank", "stream"])["idle_share_pct"].sum()
    assert np.allclose(shares[shares > 0], 100.0)


def test_reference_numbers():
    """hta_sampled_2of128rank rank 0 stream 23 (cross-checked by the brute force above)."""
    df = idle_breakdown(load_cached(str(TRACES / "hta_sampled_2of128rank")))
    df = df.set_index(["rank", "stream", "idle_category"])
    assert df.loc[(0, 23), "idle_us"].tolist() == [1214793.0, 160.0, 34.0]
    assert df.loc[(0, 23), "gaps"].tolist() == [101, 23, 1]


def test_per_step_matches_brute_force():
    job = "hta_sampled_2of128rank"
    ours = idle_breakdown_per_step(load_cached(str(TRACES / job)))
    ours = ours.set_index(["rank", "step", "stream", "idle_category"]).sort_index()
    for rank, events in raw_events(TRACES / job).items():
        gaps = pd.DataFrame(py_gaps(raw_gpu_work(events)), columns=["stream", "step", "cat", "gap"])
        for (s, stream, cat), g in gaps.groupby(["step", "stream", "cat"]):
            assert ours.loc[(rank, s, stream, cat), "idle_us"] == pytest.approx(g["gap"].sum())
    assert set(ours.index.get_level_values("step")) == {551, 552}


def test_hand_built_categories(tmp_path):
    """Stream 7: a [0,10); b [5,12) overlaps a (no gap); c [12,20) touches (no gap);
    d [25,30) launched at 15 (kernel_wait 5); e [100,110) launched at 40 > 30 (host_wait 70);
    f [200,201) launched at 50 (other 90); g [300,301) has no launch (other 99).
    Stream 8: one kernel, no gaps."""
    events = [step(1, 0, 1000), launch(0, 1), gpu("a", 0, 10, 1), launch(1, 2), gpu("b", 5, 7, 2),
              launch(2, 3), gpu("c", 12, 8, 3), launch(15, 4), gpu("d", 25, 5, 4), launch(40, 5), gpu("e", 100, 10, 5),
              launch(50, 6), gpu("f", 200, 1, 6), gpu("g", 300, 1, 99), launch(3, 7), gpu("h", 0, 50, 7, stream=8)]
    ts = load(write_trace(tmp_path / "t", events))
    gaps = stream_gaps(ts[0])
    assert gaps["idle_category"].notna().sum() == 4
    df = idle_breakdown(ts).set_index(["stream", "idle_category"])
    assert df.loc[7, "idle_us"].tolist() == [70.0, 5.0, 189.0]
    assert df.loc[7, "gaps"].tolist() == [1, 1, 2]
    assert df.loc[7, "idle_share_pct"].tolist() == pytest.approx([100 * 70 / 264, 100 * 5 / 264, 100 * 189 / 264])
    assert df.loc[8, "idle_us"].tolist() == [0.0, 0.0, 0.0]
    assert df.loc[8, "idle_share_pct"].isna().all()
    # a lower threshold moves the 5 µs gap to "other"
    low = idle_breakdown(ts, consecutive_kernel_delay_us=5).set_index(["stream", "idle_category"])
    assert low.loc[7, "idle_us"].tolist() == [70.0, 0.0, 194.0]
    stats = idle_interval_stats(ts).set_index(["stream", "idle_category"])
    assert stats.loc[(7, "other"), ["count", "min_us", "max_us", "mean_us"]].tolist() == [2, 90.0, 99.0, 94.5]
    assert stats.loc[(8, "other"), "count"] == 0 and math.isnan(stats.loc[(8, "other"), "mean_us"])
    per_step = idle_breakdown_per_step(ts).set_index(["step", "stream", "idle_category"]).sort_index()
    assert per_step.loc[(1, 7), "idle_us"].tolist() == [70.0, 5.0, 90.0]
    assert per_step.loc[(-1, 7), "idle_us"].tolist() == [0.0, 0.0, 99.0]


def test_no_gpu(tmp_path):
    ts = load(write_trace(tmp_path / "cpu", [step(1, 0, 10)]))
    for fn in (idle_breakdown, idle_interval_stats, idle_breakdown_per_step):
        df = fn(ts)
        assert len(df) == 0 and "idle_category" in df.columns
    assert len(idle_breakdown(load_cached(str(TRACES / "odd_no_gpu_no_distinfo")))) == 0
