"""All-steps-at-once interval arithmetic (analyses.segments) against the one-group functions of
analyses.intervals, group by group: on the GPU work of real traces split by launch step, and on
hand-made edge cases (touching and nested intervals, empty groups, one interval per group)."""

from __future__ import annotations

import numpy as np
import pytest

from perfreport.analyses.intervals import merged_intersection_length, union
from perfreport.analyses.kernels import CLASSES, class_overlap_times, WorkUnions, gpu_work, gpu_work_classes
from perfreport.analyses.segments import intersection_lengths, overlap_times, segment_union

from .conftest import DATA, TRACES, load_cached

JOBS = [TRACES / "hta_a100_nccl_rank0of2", DATA / "recorded" / "setups" / "fsdp_full_w2_gloo",
        TRACES / "hta_v100_ns_resolution"]


def _per_group(group: np.ndarray, n: int, starts: np.ndarray, ends: np.ndarray):
    return [union(starts[group == k], ends[group == k]) for k in range(n)]


def _check_union(group: np.ndarray, n: int, starts: np.ndarray, ends: np.ndarray):
    seg = segment_union(group, n, starts, ends)
    for k, (s, e) in enumerate(_per_group(group, n, starts, ends)):
        got_s, got_e = seg.of(k)
        np.testing.assert_array_equal(got_s, s)  # the same merged values, not merely close ones
        np.testing.assert_array_equal(got_e, e)
        assert seg.lengths()[k] == pytest.approx(float((e - s).sum()), rel=1e-12, abs=0)
    return seg


def test_edge_cases() -> None:
    # group 0: touching [0,1) [1,2) merge; nested [3,10) holds [4,5); group 1 empty; group 2 one
    # interval that starts before group 0's end (no reach across groups); group 3 zero length.
    group = np.array([2, 0, 0, 0, 0, 3])
    starts = np.array([1.5, 0.0, 1.0, 3.0, 4.0, 7.0])
    ends = np.array([2.5, 1.0, 2.0, 10.0, 5.0, 7.0])
    seg = _check_union(group, 4, starts, ends)
    np.testing.assert_array_equal(seg.counts(), [2, 0, 1, 1])
    np.testing.assert_array_equal(seg.lengths(), [9.0, 0.0, 1.0, 0.0])
    np.testing.assert_array_equal(seg.first_start(), [0.0, np.nan, 1.5, 7.0])
    np.testing.assert_array_equal(seg.last_end(), [10.0, np.nan, 2.5, 7.0])
    empty = segment_union(np.empty(0, dtype=np.int64), 3, np.empty(0), np.empty(0))
    assert empty.lengths().dtype == np.float64 and empty.lengths().tolist() == [0.0, 0.0, 0.0]
    # the overlap of group 0 with a second set: [0.5, 3.5) meets [0, 2) for 1.5 and [3, 10) for 0.5
    other = segment_union(np.array([0, 2]), 4, np.array([0.5, 2.5]), np.array([3.5, 9.0]))
    np.testing.assert_array_equal(intersection_lengths(seg, other), [2.0, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("job", JOBS, ids=lambda p: p.name)
def test_real_steps_match_one_group_at_a_time(job) -> None:
    for trace in load_cached(str(job)):
        rows, starts, ends, _ = gpu_work(trace)
        classes = gpu_work_classes(trace)
        steps, group = np.unique(trace.iteration[rows], return_inverse=True)
        n = len(steps)
        assert n > 1
        busy = _check_union(group, n, starts, ends)
        by_class = [_check_union(group[classes == b], n, starts[classes == b], ends[classes == b])
                    for b in range(len(CLASSES))]
        times = overlap_times(by_class)
        both = intersection_lengths(by_class[0], by_class[1])
        for k in range(n):
            unions = WorkUnions(busy.of(k), tuple(c.of(k) for c in by_class))
            expected = class_overlap_times(unions)
            got = {label: times[k, mask] for label, mask in _labels().items() if times[k, mask] > 0}
            assert got.keys() == expected.keys()
            for label, t in expected.items():
                assert got[label] == pytest.approx(t, rel=1e-12, abs=0)
            assert both[k] == pytest.approx(merged_intersection_length(by_class[0].of(k), by_class[1].of(k)),
                                            rel=1e-12, abs=1e-9)


def _labels() -> dict[str, int]:
    return {" overlapping ".join(c for bit, c in enumerate(CLASSES) if mask & (1 << bit)): mask for mask in range(1, 8)}
