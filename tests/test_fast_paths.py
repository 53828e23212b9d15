"""The analyses' shortcuts against the general code they stand in for, on real traces: each
shortcut must give the very same arrays (the reports stay identical to the last bit)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfreport.analyses import grouping
from perfreport.analyses.grouping import Grouped, sorted_codes
from perfreport.analyses.idle import _first_seen_codes, coded_gaps
from perfreport.analyses.intervals import window_overlaps
from perfreport.analyses.step_metrics import step_windows
from perfreport.model import GPU_SIDE_CATEGORIES, KERNEL_CATEGORIES

from .conftest import DATA, TRACES, load_cached

JOBS = [TRACES / "hta_a100_nccl_rank0of2", DATA / "recorded" / "setups" / "ddp_w2_gloo"]


@pytest.fixture(scope="module", params=JOBS, ids=lambda p: p.name)
def trace(request):
    return next(iter(load_cached(str(request.param))))


def test_sorted_codes_are_pandas_sorted_factorize(trace) -> None:
    for column in (trace.iteration, trace.stream, trace.tid, trace.name, trace.iteration[:0],
                   np.array([2**62, -5, 2**62]), trace.dur):  # ranges wide and narrow, floats (pandas' own)
        codes, uniq = sorted_codes(column)
        ref_codes, ref_uniq = pd.factorize(column, sort=True)
        np.testing.assert_array_equal(codes, ref_codes)
        np.testing.assert_array_equal(np.asarray(uniq), np.asarray(ref_uniq))


def test_first_seen_codes_are_pandas_factorize(trace) -> None:
    gaps = coded_gaps(trace, 20.0)
    for column in (gaps["stream"].to_numpy(), gaps["step"].to_numpy(), gaps["gap_us"].to_numpy()):
        codes, first = _first_seen_codes(column)
        ref = pd.factorize(column, use_na_sentinel=False)[0]
        np.testing.assert_array_equal(codes, ref)
        np.testing.assert_array_equal(first, np.unique(ref, return_index=True)[1])


def test_medians_sorting_each_group_equal_the_stable_sort(trace, monkeypatch) -> None:
    gaps = coded_gaps(trace, 20.0)
    results = []
    for each_max in (grouping._SORT_EACH_MAX_GROUPS, 0):  # the per-group sort, then the stable argsort
        monkeypatch.setattr(grouping, "_SORT_EACH_MAX_GROUPS", each_max)
        g = Grouped(gaps, ["stream", "step"])
        results.append([g.median("gap_us"), g.quantile("gap_us", 0.95), g.quantile("gap_us", 0.25)])
    assert len(results[0][0]) > 1
    for fast, reference in zip(*results):
        np.testing.assert_array_equal(fast, reference)


def test_code_masks_by_comparison_equal_the_table_lookup(trace) -> None:
    for codes in (trace.codes(KERNEL_CATEGORIES), trace.codes(GPU_SIDE_CATEGORIES)[:2], np.array([-1, 0]),
                  np.empty(0, dtype=np.int32)):
        table = np.zeros(len(trace.strings) + 1, dtype=bool)
        table[codes] = True
        np.testing.assert_array_equal(trace._code_mask(trace.cat, codes), table[trace.cat])


def test_window_overlaps_one_window_each_equals_the_expansion(trace) -> None:
    windows = step_windows(trace)
    ws, we = windows["start_us"].to_numpy(), windows["end_us"].to_numpy()
    rows = trace.gpu_work_rows()
    s, e = trace.ts[rows], trace.ts[rows] + trace.dur[rows]
    got = window_overlaps(ws, we, s, e)
    # the general expansion, written out: every (interval, window) pair that overlaps
    ev, win = np.nonzero((s[:, None] < we[None, :]) & (e[:, None] > ws[None, :]))
    lo, hi = np.maximum(s[ev], ws[win]), np.minimum(e[ev], we[win])
    ok = hi > lo
    assert len(got[0]) > 0
    for a, b in zip(got, (ev[ok], win[ok], lo[ok], hi[ok])):
        np.testing.assert_array_equal(a, b)
