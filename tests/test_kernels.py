"""perfreport.analyses.kernels: overlap-class times, per-kernel metrics, spread over ranks."""

from __future__ import annotations

import statistics

import numpy as np
import pandas as pd
import pytest

from perfreport.analyses.kernels import (
    kernel_metrics,
    kernel_rank_distribution,
    kernel_type_breakdown,
    kernel_type_breakdown_per_step,
    overlap_class_times,
)
from perfreport.load import load
from perfreport.model import kernel_class

from .conftest import TRACES, load_cached
from .test_temporal import gpu, launch, raw_events, raw_gpu_work, step, write_trace

BITS = {"COMPUTATION": 1, "COMMUNICATION": 2, "MEMORY": 4}


def grid_class_times(work: pd.DataFrame) -> dict[str, float]:
    """Overlap-class times on a 1 µs grid (integer-µs traces): an independent method."""
    t0, t1 = int(work["ts"].min()), int(work["end"].max())
    mask = np.zeros(t1 - t0, dtype=np.int64)
    for cls, bit in BITS.items():
        part = work[work["cls"] == cls]
        cover = np.zeros(t1 - t0 + 1, dtype=np.int64)
        np.add.at(cover, (part["ts"].to_numpy(int) - t0), 1)
        np.add.at(cover, (part["end"].to_numpy(int) - t0), -1)
        mask |= np.where(np.cumsum(cover)[:-1] > 0, bit, 0)
    labels = {m: " overlapping ".join(c for c, b in BITS.items() if m & b) for m in range(1, 8)}
    counts = np.bincount(mask, minlength=8)
    return {labels[m]: float(counts[m]) for m in range(1, 8) if counts[m]}


@pytest.mark.parametrize("job", ["hta_sampled_2of128rank", "hta_gp100_gpu_user_annotation"])
def test_type_breakdown_matches_grid(job):
    ours = kernel_type_breakdown(load_cached(str(TRACES / job)))
    for rank, events in raw_events(TRACES / job).items():
        truth = grid_class_times(raw_gpu_work(events))
        mine = ours[ours["rank"] == rank].set_index("kernel_type")
        assert mine["time_us"].to_dict() == truth
        assert mine["busy_pct"].sum() == pytest.approx(100.0)


def test_type_breakdown_reference_numbers():
    """hta_sampled_2of128rank rank 0 has all seven overlap classes (cross-checked on the grid)."""
    df = kernel_type_breakdown(load_cached(str(TRACES / "hta_sampled_2of128rank")))
    r0 = df[df["rank"] == 0].set_index("kernel_type")["time_us"]
    assert len(r0) == 7
    assert r0["COMPUTATION overlapping COMMUNICATION"] == 59204.0
    assert r0.sum() == 547656.0  # = busy time of the temporal breakdown


def test_type_breakdown_per_step_adds_up():
    traces = load_cached(str(TRACES / "hta_sampled_2of128rank"))
    per_step = kernel_type_breakdown_per_step(traces)
    assert set(per_step["step"]) == {551, 552}
    for (rank, s), part in per_step.groupby(["rank", "step"]):
        events = raw_events(TRACES / "hta_sampled_2of128rank")[rank]
        work = raw_gpu_work(events)
        assert part.set_index("kernel_type")["time_us"].to_dict() == grid_class_times(work[work["step"] == s])


def test_overlap_class_times_edges():
    s = np.array([0.0, 10.0, 5.0, 20.0])
    e = np.array([10.0, 20.0, 15.0, 20.0])
    c = np.array(["COMPUTATION", "COMMUNICATION", "MEMORY", "MEMORY"], dtype=object)
    # [0,5) comp, [5,10) comp+mem, [10,15) comm+mem, [15,20) comm; touching at 10 and the
    # zero-length memset at 20 give no zero-time classes
    assert overlap_class_times(s, e, c) == {"COMPUTATION": 5.0, "COMMUNICATION": 5.0,
                                             "COMPUTATION overlapping MEMORY": 5.0,
                                             "COMMUNICATION overlapping MEMORY": 5.0}
    assert overlap_class_times(np.empty(0), np.empty(0), np.empty(0, dtype=object)) == {}


def py_metrics(work: pd.DataFrame, num_kernels: int, ratio: float) -> dict:
    """{(class, name): (count, sum, max, min, mean, std)} with the top-N / others rule."""
    out = {}
    for cls, part in work.groupby("cls"):
        totals = part.groupby("name")["dur"].sum().sort_values(ascending=False, kind="stable")
        kept, before = set(), 0.0
        if len(totals) > num_kernels:
            for i, (name, total) in enumerate(totals.items()):
                if i < num_kernels and before < ratio * totals.sum():
                    kept.add(name)
                before += total
        else:
            kept = set(totals.index)
        groups: dict[str, list] = {}
        for name, d in zip(part["name"], part["dur"]):
            groups.setdefault(name if name in kept else "others", []).append(float(d))
        for name, ds in groups.items():
            out[(cls, name)] = (len(ds), sum(ds), max(ds), min(ds), statistics.fmean(ds),
                                statistics.stdev(ds) if len(ds) > 1 else 0.0)
    return out


@pytest.mark.parametrize("num_kernels,ratio", [(10, 0.8), (3, 1.0), (1000, 0.8)])
def test_metrics_match_brute_force(num_kernels, ratio):
    job = "hta_sampled_2of128rank"
    ours = kernel_metrics(load_cached(str(TRACES / job)), num_kernels=num_kernels, duration_ratio=ratio)
    for rank, events in raw_events(TRACES / job).items():
        truth = py_metrics(raw_gpu_work(events), num_kernels, ratio)
        mine = ours[ours["rank"] == rank]
        assert len(mine) == len(truth)
        for row in mine.itertuples():
            want = truth[(row.kernel_class, row.name)]
            got = (row.count, row.sum_us, row.max_us, row.min_us, row.mean_us, row.std_us)
            assert got == pytest.approx(want), (row.kernel_class, row.name)


def test_metrics_folding_and_order():
    df = kernel_metrics(load_cached(str(TRACES / "hta_sampled_2of128rank")))
    comp = df[(df["rank"] == 0) & (df["kernel_class"] == "COMPUTATION")]
    assert comp["name"].iloc[-1] == "others"
    named = comp[comp["name"] != "others"]
    assert 1 <= len(named) <= 10 and named["sum_us"].is_monotonic_decreasing
    others = comp.iloc[-1]
    assert others["max_us"] < others["sum_us"]  # per-invocation statistics, not totals


def test_rank_distribution():
    job = "hta_sampled_2of128rank"
    df = kernel_rank_distribution(load_cached(str(TRACES / job))).set_index(["kernel_class", "name"])
    sums = {r: raw_gpu_work(ev).groupby("name")["dur"].sum() for r, ev in raw_events(TRACES / job).items()}
    nccl = [n for n in sums[0].index if n.startswith("ncclKernel")][0]
    row = df.loc[("COMMUNICATION", nccl)]
    per_rank = [sums[0][nccl], sums[1][nccl]]
    assert row["ranks"] == 2
    assert row[["sum_us_mean", "sum_us_min", "sum_us_max"]].tolist() == \
        pytest.approx([np.mean(per_rank), min(per_rank), max(per_rank)])
    assert row["sum_us_std"] == pytest.approx(np.std(per_rank, ddof=1))
    assert row["max_rank"] == int(np.argmax(per_rank))
    only0 = set(sums[0].index) - set(sums[1].index)
    if only0:
        name = sorted(only0)[0]
        r = df.xs(name, level="name").iloc[0]
        assert r["ranks"] == 1 and r["sum_us_min"] == 0.0 and r["min_rank"] == 1


def test_hand_built_and_empty(tmp_path):
    events = [step(1, 0, 100), launch(0, 1), gpu("gemm", 0, 10, 1), launch(1, 2), gpu("gemm", 20, 30, 2),
              launch(2, 3), gpu("ncclKernel_AllReduce", 5, 20, 3, stream=8),
              launch(3, 4), gpu("hipMemcpyWithStream", 60, 4, 4, cat="gpu_memcpy")]
    ts = load(write_trace(tmp_path / "t", events))
    types = kernel_type_breakdown(ts).set_index("kernel_type")["time_us"].to_dict()
    assert types == {"COMPUTATION": 30.0, "COMPUTATION overlapping COMMUNICATION": 10.0, "COMMUNICATION": 10.0,
                     "MEMORY": 4.0}
    metrics = kernel_metrics(ts).set_index(["kernel_class", "name"])
    assert metrics.loc[("COMPUTATION", "gemm"), ["count", "sum_us", "max_us", "min_us", "mean_us"]].tolist() == \
        [2, 40.0, 30.0, 10.0, 20.0]
    assert metrics.loc[("COMPUTATION", "gemm"), "std_us"] == pytest.approx(statistics.stdev([10, 30]))
    assert metrics.loc[("MEMORY", "hipMemcpyWithStream"), "count"] == 1
    cpu_only = load(write_trace(tmp_path / "cpu", [step(1, 0, 10)]))
    for fn in (kernel_type_breakdown, kernel_type_breakdown_per_step, kernel_metrics, kernel_rank_distribution):
        assert len(fn(cpu_only)) == 0


@pytest.mark.parametrize("name, category, expected", [
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "kernel", "COMMUNICATION"),
    ("NCCLKERNEL_AllGather", "kernel", "COMMUNICATION"),          # any case
    ("void at::native::foo<ncclKernel>()", "kernel", "COMMUNICATION"),  # anywhere in the name
    ("rcclGenericKernel", "kernel", "COMMUNICATION"),
    ("c10d::allreduce_", "kernel", "COMMUNICATION"),
    ("Gloo_allreduce", "kernel", "COMMUNICATION"),
    ("my_c10d_helper", "kernel", "COMPUTATION"),                  # c10d:: only at the start
    ("void at::native::vectorized_elementwise_kernel<4>()", "kernel", "COMPUTATION"),
    ("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", "MEMORY"),
    ("hipMemcpyWithStream", "gpu_memcpy", "MEMORY"),              # ROCm copies are memory, not comm
    ("cudaStreamSynchronize", "cuda_sync", "OTHER"),
])
def test_kernel_class(name: str, category: str, expected: str) -> None:
    assert kernel_class(name, category) == expected
