"""perfreport.analyses.overlap, checked on a 1 µs grid built from the raw JSON."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfreport.analyses.overlap import comm_comp_overlap, comm_comp_overlap_per_step
from perfreport.load import load

from .conftest import TRACES, load_cached
from .test_temporal import gpu, launch, raw_events, raw_gpu_work, step, write_trace


def grid_overlap(work) -> tuple[float, float, float]:
    """(comm, compute, both) µs on a 1 µs grid (integer-µs traces)."""
    t0, t1 = int(work["ts"].min()), int(work["end"].max())
    covered = {}
    for cls in ("COMMUNICATION", "COMPUTATION"):
        part = work[work["cls"] == cls]
        cover = np.zeros(t1 - t0 + 1, dtype=np.int64)
        np.add.at(cover, part["ts"].to_numpy(int) - t0, 1)
        np.add.at(cover, part["end"].to_numpy(int) - t0, -1)
        covered[cls] = np.cumsum(cover)[:-1] > 0
    comm, comp = covered["COMMUNICATION"], covered["COMPUTATION"]
    return float(comm.sum()), float(comp.sum()), float((comm & comp).sum())


@pytest.mark.parametrize("job", ["hta_sampled_2of128rank"])
def test_matches_grid(job):
    ours = comm_comp_overlap(load_cached(str(TRACES / job))).set_index("rank")
    for rank, events in raw_events(TRACES / job).items():
        comm, comp, both = grid_overlap(raw_gpu_work(events))
        row = ours.loc[rank]
        assert row[["comm_us", "compute_us", "overlap_us", "exposed_comm_us"]].tolist() == \
            [comm, comp, both, comm - both]
        assert row["overlap_pct"] == pytest.approx(100 * both / comm)


def test_reference_numbers():
    df = comm_comp_overlap(load_cached(str(TRACES / "hta_sampled_2of128rank"))).set_index("rank")
    assert df.loc[0, ["comm_us", "overlap_us"]].tolist() == [396199.0, 59216.0]
    assert df.loc[1, "overlap_pct"] == pytest.approx(100 * 75530 / 379053)


def test_per_step_matches_grid():
    job = "hta_sampled_2of128rank"
    ours = comm_comp_overlap_per_step(load_cached(str(TRACES / job))).set_index(["rank", "step"])
    assert ours.index.tolist() == [(0, 551), (0, 552), (1, 551), (1, 552)]
    for rank, events in raw_events(TRACES / job).items():
        work = raw_gpu_work(events)
        for s, part in work.groupby("step"):
            comm, _, both = grid_overlap(part)
            assert ours.loc[(rank, s), ["comm_us", "overlap_us"]].tolist() == [comm, both]


def test_hand_built(tmp_path):
    """nccl [0,20) on stream 8; compute [5,10) and [15,30) on stream 7; a memcpy [0,40) is
    ignored. Overlap 5 + 5 = 10 of 20 µs -> 50 %. Step 2 has compute only -> NaN."""
    events = [step(1, 0, 50), launch(0, 1), gpu("ncclDevKernel_AllReduce", 0, 20, 1, stream=8),
              launch(1, 2), gpu("gemm", 5, 5, 2), launch(2, 3), gpu("gemm", 15, 15, 3),
              launch(3, 4), gpu("Memcpy DtoD", 0, 40, 4, stream=9, cat="gpu_memcpy"),
              step(2, 60, 50), launch(61, 5), gpu("relu", 100, 4, 5)]
    ts = load(write_trace(tmp_path / "t", events))
    row = comm_comp_overlap(ts).iloc[0]
    assert row[["comm_us", "compute_us", "overlap_us", "exposed_comm_us", "overlap_pct"]].tolist() == \
        [20.0, 24.0, 10.0, 10.0, 50.0]
    per_step = comm_comp_overlap_per_step(ts).set_index("step")
    assert per_step.loc[1, "overlap_pct"] == 50.0
    assert per_step.loc[2, "comm_us"] == 0.0 and math.isnan(per_step.loc[2, "overlap_pct"])


def test_no_comm_and_no_gpu(tmp_path):
    df = comm_comp_overlap(load_cached(str(TRACES / "hta_v100_ns_resolution")))
    assert df["comm_us"].tolist() == [0.0] and df["overlap_pct"].isna().all()
    cpu_only = load(write_trace(tmp_path / "cpu", [step(1, 0, 10)]))
    row = comm_comp_overlap(cpu_only).iloc[0]
    assert row["comm_us"] == 0.0 and math.isnan(row["overlap_pct"])
    assert len(comm_comp_overlap_per_step(cpu_only)) == 0
