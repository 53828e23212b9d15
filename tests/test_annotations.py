"""perfreport.analyses.annotations, checked against a pairwise Python walk over the raw JSON."""

from __future__ import annotations

import statistics

import numpy as np
import pytest

from perfreport.analyses.annotations import gpu_user_annotation_breakdown, innermost_overlapping
from perfreport.load import load

from .conftest import TRACES, load_cached
from .test_temporal import WORK_CATS, gpu, launch, raw_events, step, write_trace


def _events(job: str) -> list[dict]:
    (events,) = raw_events(TRACES / job).values()
    return events


def py_breakdown(events: list[dict]) -> dict[str, tuple]:
    """{name: (count, sum, max, min, mean, std, kernels, kernel_us)} by checking every pair."""
    annos = [e for e in events if e.get("ph") == "X" and e.get("cat") == "gpu_user_annotation"]
    work = [e for e in events if e.get("ph") == "X" and e.get("cat") in WORK_CATS and "dur" in e]
    attributed: dict[str, list[float]] = {}
    for k in work:
        hits = [a for a in annos if a["pid"] == k["pid"] and a["tid"] == k["tid"]
                and k["ts"] < a["ts"] + a["dur"] and a["ts"] < k["ts"] + k["dur"]]
        if hits:
            inner = min(hits, key=lambda a: (a["dur"], -a["ts"]))
            attributed.setdefault(inner["name"], []).append(k["dur"])
    out = {}
    for name in {a["name"] for a in annos}:
        ds = [float(a["dur"]) for a in annos if a["name"] == name]
        ks = attributed.get(name, [])
        out[name] = (len(ds), sum(ds), max(ds), min(ds), statistics.fmean(ds),
                     statistics.stdev(ds) if len(ds) > 1 else 0.0, len(ks), float(sum(ks)))
    return out


@pytest.mark.parametrize("job", ["hta_a100_nccl_rank0of2", "hta_gp100_gpu_user_annotation", "odd_amd_mi250_rocm62_minitoy"])
def test_matches_pairwise_walk(job):
    ours = gpu_user_annotation_breakdown(load_cached(str(TRACES / job)))
    truth = py_breakdown(_events(job))
    assert len(ours) == len(truth) > 0
    for row in ours.itertuples():
        got = (row.count, row.sum_us, row.max_us, row.min_us, row.mean_us, row.std_us, row.kernels, row.kernel_us)
        assert got == pytest.approx(truth[row.name]), row.name


def test_reference_numbers():
    """ns_resolution: 5 forward spans; kernels attributed to the innermost annotation only."""
    df = gpu_user_annotation_breakdown(load_cached(str(TRACES / "hta_v100_ns_resolution"))).set_index("name")
    assert df.index.tolist() == ["DistributedDataParallel.forward", "Optimizer.step#SGD.step", "## backward ##"]
    assert df.loc["DistributedDataParallel.forward", ["count", "kernels"]].tolist() == [5, 2300]
    assert df.loc["Optimizer.step#SGD.step", "kernels"] == 45
    assert df.loc["## backward ##", "sum_us"] == pytest.approx(138.341)


def test_innermost_overlapping_rules():
    # annotations on group 0: A [0,100) prio 0, B [10,20) prio 1; group 1: C [0,100) prio 2
    a_ts, a_end = np.array([0.0, 10.0, 0.0]), np.array([100.0, 20.0, 100.0])
    a_group, prio = np.array([0, 0, 1]), np.array([0, 1, 2])
    k_ts = np.array([12.0, 18.0, 50.0, 100.0, 20.0, 15.0, 5.0])
    k_end = np.array([14.0, 25.0, 60.0, 110.0, 20.0, 15.0, 9.0])
    k_group = np.array([0, 0, 0, 0, 0, 0, 1])
    got = innermost_overlapping(k_ts, k_end, k_group, a_ts, a_end, a_group, prio)
    # inside B; straddles B's end; only in A; starts at A's end (no overlap);
    # zero-length at B's end (outside B, inside A); zero-length inside B; other group
    assert got.tolist() == [1, 1, 0, -1, 0, 1, 2]
    assert innermost_overlapping(k_ts, k_end, k_group, a_ts[:0], a_end[:0], a_group[:0], prio[:0]).tolist() == [-1] * 7


def test_hand_built_and_without_annotations(tmp_path):
    events = [step(1, 0, 500), launch(0, 1), gpu("k1", 10, 10, 1), launch(1, 2), gpu("k2", 30, 5, 2),
              launch(2, 3), gpu("k3", 200, 5, 3),
              {"ph": "X", "cat": "gpu_user_annotation", "name": "fwd", "pid": 0, "tid": 7, "ts": 0, "dur": 100},
              {"ph": "X", "cat": "gpu_user_annotation", "name": "fwd", "pid": 0, "tid": 7, "ts": 190, "dur": 20},
              {"ph": "X", "cat": "gpu_user_annotation", "name": "attn", "pid": 0, "tid": 7, "ts": 28, "dur": 10}]
    df = gpu_user_annotation_breakdown(load(write_trace(tmp_path / "t", events))).set_index("name")
    assert df.loc["fwd", ["count", "sum_us", "max_us", "min_us", "kernels", "kernel_us"]].tolist() == \
        [2, 120.0, 100.0, 20.0, 2, 15.0]
    assert df.loc["attn", ["count", "kernels", "kernel_us", "std_us"]].tolist() == [1, 1, 5.0, 0.0]
    none = gpu_user_annotation_breakdown(load_cached(str(TRACES / "hta_sampled_2of128rank")))
    assert len(none) == 0 and list(none.columns)[:3] == ["rank", "name", "count"]
