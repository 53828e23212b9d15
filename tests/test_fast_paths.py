"""The analyses' shortcuts against the general code they stand in for, on real traces: each
shortcut must give the very same arrays (the reports stay identical to the last bit)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfreport.analyses import grouping
from perfreport.analyses.grouping import Grouped, sorted_codes
from perfreport.analyses.idle import _first_seen_codes, coded_gaps
from perfreport.analyses.step_parts import _first_running, part_order
from perfreport.analyses.intervals import window_candidates, window_overlaps
from perfreport.analyses.step_metrics import step_windows
from perfreport.model import GPU_SIDE_CATEGORIES, KERNEL_CATEGORIES

from .conftest import DATA, TRACES, load_cached

JOBS = [TRACES / "hta_a100_nccl_rank0of2", DATA / "recorded" / "setups" / "ddp_w2_gloo"]


@pytest.fixture(scope="module", params=JOBS, ids=lambda p: p.name)
def trace(request):
    return next(iter(load_cached(str(request.param))))


def test_sorted_codes_are_pandas_sorted_factorize(trace) -> None:
    names = trace.decode(trace.name)  # texts in runs (a thread's ops), and runs with missing values
    runs = np.repeat(np.array(["pg1", "", None, np.nan, "pg0", "pg1"], dtype=object), [3000, 2000, 500, 700, 1, 4000])
    for column in (trace.iteration, trace.stream, trace.tid, trace.name, trace.iteration[:0],
                   np.array([2**62, -5, 2**62]), trace.dur,  # ranges wide and narrow, floats (pandas' own)
                   names, np.sort(names), runs):
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


def test_window_candidates_hold_the_overlapping_pairs_in_their_order(trace) -> None:
    windows = step_windows(trace)
    rows = trace.gpu_work_rows()
    s, e = trace.ts[rows], trace.ts[rows] + trace.dur[rows]
    mid = float(np.median(s))
    for ws, we in ((windows["start_us"].to_numpy(), windows["end_us"].to_numpy()),
                   (np.array([s.min(), mid]), np.array([mid + 1e4, mid + 2.0]))):  # the steps, then windows that overlap
        ev, win = window_candidates(ws, we, s, e)
        overlaps = np.minimum(e[ev], we[win]) > np.maximum(s[ev], ws[win])
        ref_ev, ref_win, _, _ = window_overlaps(ws, we, s, e)
        assert len(ref_ev) > 0
        np.testing.assert_array_equal(ev[overlaps], ref_ev)
        np.testing.assert_array_equal(win[overlaps], ref_win)


def test_first_running_class_is_the_argmax(trace) -> None:
    on = np.random.default_rng(1).random((4, 1000)) < 0.3
    np.testing.assert_array_equal(_first_running(on), np.where(on.any(axis=0), np.argmax(on, axis=0), -1))


def test_part_order_is_the_sort_by_step_and_strings() -> None:
    distinct = [("idle", "b", "CPU"), ("idle", "a", "GPU"), ("compute", "z", "GPU"), ("idle", "a", "CPU")]
    rng = np.random.default_rng(2)
    group = rng.choice(np.arange(5 * len(distinct)), 15, replace=False)
    frame = pd.DataFrame({"step": group // len(distinct), **{c: [distinct[i][k] for i in group % len(distinct)]
                                                           for k, c in enumerate(("kind", "key", "on"))}})
    ref = frame.sort_values(["step", "kind", "key", "on"], kind="stable").index.to_numpy()
    np.testing.assert_array_equal(part_order(group, len(distinct), distinct), ref)


def test_series_grid_by_merge_equals_the_search(trace) -> None:
    from perfreport.analyses.queue import rank_queue_length_series
    from perfreport.analyses.series import _grid

    table = rank_queue_length_series(trace)
    first_stream = table["stream"].to_numpy() == table["stream"].iloc[0]
    x = table["ts_us"].to_numpy(np.float64)[first_stream]
    y = table["queue_length"].to_numpy(np.float64)[first_stream]
    edges = x[0] + (x[-1] - x[0]) * np.arange(125 + 1) / 125
    edges[-1] = x[-1]
    for xs, ys in ((x, y), (np.r_[x, x[-1]], np.r_[y, 7.0])):  # distinct points, then one repeated
        grid, value = _grid(xs, ys, edges)
        np.testing.assert_array_equal(grid, np.union1d(xs, edges))
        np.testing.assert_array_equal(value, ys[np.searchsorted(xs, grid, side="right") - 1])


def test_series_lines_from_sorted_runs_equal_the_groupby(trace, monkeypatch) -> None:
    from perfreport.analyses import series
    from perfreport.analyses.memory_bw import memory_bw_series
    from perfreport.analyses.queue import queue_length_series
    from perfreport.model import TraceSet

    one = TraceSet(ranks={trace.rank: trace}, source="")
    tables = [(queue_length_series(one), "stream", "stream {}", "queue_length"),
              (memory_bw_series(one), "direction", "{}", "bw_gbps")]
    fast = [series._grouped_lines(*t, 50) for t in tables]
    monkeypatch.setattr(series, "_sorted_runs", lambda table, keys: None)
    reference = [series._grouped_lines(*t, 50) for t in tables]
    assert sum(len(lines) for lines in fast) > 1
    for got, ref in zip(fast, reference):
        assert [(g["rank"], g["label"], g["points_total"]) for g in got] == [(r["rank"], r["label"], r["points_total"]) for r in ref]
        for g, r in zip(got, ref):
            np.testing.assert_array_equal(g["x"], r["x"])
            np.testing.assert_array_equal(g["y"], r["y"])
    shuffled = tables[0][0].iloc[::-1]
    assert series._sorted_runs(shuffled, ["rank", "stream"]) is None or shuffled["stream"].nunique() == 1
    # the bandwidth lines made from the change points' arrays, without the table: the same lines
    from perfreport.analyses.memory_bw import bw_change_points

    direct = series._bw_lines(bw_change_points(one), 50)
    assert len(direct) == len(reference[1]) >= 1
    for g, r in zip(direct, reference[1]):
        assert (g["rank"], g["label"], g["points_total"]) == (r["rank"], r["label"], r["points_total"])
        np.testing.assert_array_equal(g["x"], r["x"])
        np.testing.assert_array_equal(g["y"], r["y"])


def test_queue_sorted_runs_aggregate_as_grouped(trace) -> None:
    from perfreport.analyses.queue import _SortedRuns, queue_segments
    from perfreport.model import TraceSet

    seg = queue_segments(TraceSet(ranks={trace.rank: trace}, source=""))
    runs, reference = _SortedRuns.of(seg, ["rank", "stream"]), Grouped(seg, ["rank", "stream"])
    assert runs is not None and runs.n == reference.n > 0
    with_nan = np.where(seg["queue_length"].to_numpy() > 1, seg["length_us"].to_numpy(), np.nan)
    for column in ("length_us", "weighted", "enqueued", with_nan):
        np.testing.assert_array_equal(runs.sum(column), reference.sum(column))
    for column in ("queue_length", with_nan):
        np.testing.assert_array_equal(runs.max(column), reference.max(column))
    pd.testing.assert_frame_equal(runs.frame({}), reference.frame({}))
    assert _SortedRuns.of(seg.iloc[::-1], ["rank", "stream"]) is None or reference.n == 1


@pytest.mark.parametrize("exact", [False, True])
def test_op_steps_grouped_on_integers_equal_the_string_groupby(trace, exact) -> None:
    from perfreport.analyses.diff import STEP_COLUMNS, _events, op_steps
    from perfreport.model import TraceSet

    job = load_cached(str(JOBS[1]))  # two ranks
    for traces in (TraceSet(ranks={trace.rank: trace}, source=""), job):
        events, _ = _events(traces, exact)
        reference = events.groupby(["rank", "step", "kind", "key"], sort=True)[["count", "dur_us"]].sum().reset_index()
        reference = reference.astype({"rank": np.int64, "step": np.int64, "count": np.int64, "dur_us": np.float64})
        got = op_steps(traces, exact)
        assert len(got) > 10
        pd.testing.assert_frame_equal(got, reference[list(STEP_COLUMNS)], check_exact=True)
    assert len(job) == 2


def _time_at_stake_reference(rank: int, p: pd.DataFrame) -> pd.DataFrame:
    """The table of one rank as pandas made it on the strings (the code the integers replace)."""
    from perfreport.analyses.stake import TOP_KEYS, WHOLE_TRACE_STEP
    from perfreport.units import pct

    steps = np.unique(p["step"].to_numpy())
    n = len(steps)
    step_us = float(p["time_us"].sum()) / n
    step_us_median = float(np.median(p.groupby("step", sort=False)["time_us"].sum().to_numpy()))
    g = p.groupby(["kind", "key", "runs_on"], sort=False)["time_us"].sum().reset_index()
    g["us_per_step"] = g["time_us"] / n
    g = g.sort_values(["kind", "us_per_step", "key"], ascending=[True, False, True], kind="stable")
    g["position"] = g.groupby("kind").cumcount()
    top = g.loc[g["position"] < TOP_KEYS]
    rest = g.loc[g["position"] >= TOP_KEYS].groupby("kind", sort=False)["us_per_step"].sum().reset_index()
    f = pd.concat([top[["kind", "key", "runs_on", "us_per_step"]], rest.assign(key="other", runs_on="")],
                  ignore_index=True)
    f["pct_of_step"] = [pct(x, step_us) for x in f["us_per_step"]]
    return f.assign(rank=rank, method="whole_trace" if steps.tolist() == [WHOLE_TRACE_STEP] else "steps", steps=n,
                    step_us=step_us, step_us_median=step_us_median)


def test_time_at_stake_on_integers_equals_the_string_groupby(trace) -> None:
    from perfreport.analyses.stake import _memoised_parts, _Parts, _rank_table

    parts = _memoised_parts(trace)
    # and parts with ties and more than TOP_KEYS keys of a kind, in no particular order
    rng = np.random.default_rng(3)
    triples = [(kind, f"k{i % 13}", on) for i, (kind, on) in enumerate(
        [("host", "CPU"), ("compute", "GPU"), ("host", "GPU")] * 9)]
    triples = sorted(set(triples))
    pick = rng.integers(0, len(triples), 300)
    frame = pd.DataFrame({"rank": 0, "step": rng.integers(0, 5, 300), "kind": [triples[i][0] for i in pick],
                          "key": [triples[i][1] for i in pick], "runs_on": [triples[i][2] for i in pick],
                          "time_us": rng.choice([1.0, 2.5, 0.1, 3.0], 300)})
    synthetic = _Parts(0, frame["step"].to_numpy(), frame["time_us"].to_numpy(), pick.astype(np.int64), triples)
    for p in (parts, synthetic):
        got = _rank_table(7, p)
        want = _time_at_stake_reference(7, p.frame)
        assert (got["key"] == "other").any() or p is parts
        pd.testing.assert_frame_equal(got[list(want.columns)], want, check_exact=True)


@pytest.mark.parametrize("job", JOBS, ids=lambda p: p.name)
def test_attribution_means_on_pair_codes_equal_the_string_groupby(job) -> None:
    """The attribution's per-(kind, key) means over a side's ranks, grouped by the pairs' sorted
    places, are the groupby of the (kind, key) strings of the ranks' step_parts tables put
    together, to the last bit (the gloo job: two ranks, each numbering its pairs its own way)."""
    from perfreport.analyses import attribution

    traces = load_cached(str(job))
    ranks = list(traces)
    steps = attribution.step_parts(ranks[0])["step"].drop_duplicates().to_numpy()[1::2]  # every other sample
    for exact in (False, True):
        side = attribution._side(traces, list(traces.rank_ids), exact, steps.tolist())
        frame = pd.concat([attribution.step_parts(t, side.samples["step"].unique(), exact) for t in ranks],
                          ignore_index=True)
        want = frame.groupby(["kind", "key"])[["time_us", "overlapped_us"]].sum() / len(side.samples)
        got = attribution._means(side)
        assert len(got) > 3
        pd.testing.assert_frame_equal(got, want, check_exact=True, check_index_type=False)


def test_running_max_per_run_in_c_is_numpy_s(trace) -> None:
    """The C pass gives numpy's accumulate per run to the bit: NaN from its first one on in a
    run, and of equal values the later (-0.0 then 0.0 gives 0.0), on the GPU events' ends of a
    real trace grouped by stream and on random values."""
    from perfreport.analyses.intervals import running_max_per_run

    rows = trace.gpu_work_rows()
    order = np.lexsort((trace.ts[rows], trace.stream[rows]))
    ends = (trace.ts + trace.dur)[rows][order]
    runs = np.flatnonzero(np.r_[True, trace.stream[rows][order][1:] != trace.stream[rows][order][:-1]])
    cases = [(ends, runs), (ends, np.array([0]))]
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(1, 400))
        values = np.round(rng.normal(size=n), 1)
        for share, value in ((0.05, np.nan), (0.1, -0.0), (0.1, 0.0)):
            values[rng.random(n) < share] = value
        cases.append((values, np.unique(np.r_[0, rng.integers(0, n, size=int(rng.integers(0, 30)))])))
    for values, starts in cases:
        c = running_max_per_run(values, starts, use_c=True)
        ref = running_max_per_run(values, starts, use_c=False)
        np.testing.assert_array_equal(c, ref)
        np.testing.assert_array_equal(np.signbit(c), np.signbit(ref))
    assert len(runs) > 1 and not np.array_equal(running_max_per_run(ends, runs), np.maximum.accumulate(ends))


def test_sorted_unique_is_numpys_unique(trace) -> None:
    """numpy's own hash-table way for integers is what the sort stands in for (0.1 s at 200,000
    distinct values); other dtypes are numpy's."""
    from perfreport.model import sorted_unique

    for values in (trace.iteration, trace.name, trace.tid, trace.iteration[:0], trace.iteration[:1],
                   np.array([[3, -2], [3, 2**62]]), np.array([True, False, True]), trace.dur,
                   np.array([np.nan, 1.0, np.nan])):
        got, want = sorted_unique(values), np.unique(values)
        assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=want.dtype.kind == "f")


def test_search_sorted_in_c_is_numpys_searchsorted(trace) -> None:
    """The galloping search gives numpy's answers on a real trace's columns (steps' windows
    searched by kernel starts, arg rows by event rows) and on edge values in any key order:
    NaN (numpy sorts it last), -0.0 and 0.0, infinities, ties, keys before and after all."""
    from perfreport import model

    if model._sorted is None:
        pytest.skip("the _sorted extension is not built")
    kernels = np.flatnonzero(trace.is_cat(KERNEL_CATEGORIES))
    windows = np.sort(trace.ts[trace.steps()])
    col = next(c for c in trace.args.values() if len(c.rows) > 100)
    rng = np.random.default_rng(5)
    cases = [(windows, trace.ts[kernels]), (windows, rng.permutation(trace.ts[kernels])),
             (col.rows, np.arange(trace.n_events, dtype=np.int64)), (col.rows, trace.iteration)]
    values = np.array([-np.inf, -1.0, -0.0, 0.0, 2.5, 2.5, 7.0, np.inf, np.nan, np.nan])
    for _ in range(300):
        a = np.sort(rng.choice(values, rng.integers(0, 12)))
        cases.append((a, rng.choice(np.r_[values, 1.0, 9.0], rng.integers(64, 200))))
        ints = np.sort(rng.integers(-3, 4, rng.integers(0, 12)))
        keys = rng.integers(-5, 6, rng.integers(64, 200))
        for a_type, v_type in ((np.int64, np.int64), (np.int32, np.int64), (np.int64, np.int32), (np.int32, np.int32)):
            cases.append((ints.astype(a_type), keys.astype(v_type)))
    wide = np.sort(rng.integers(-2**31, 2**31 - 1, 50)).astype(np.int32)  # int32 rows against int64 keys past them
    cases.append((wide, np.sort(rng.integers(-2**40, 2**40, 500))))
    for a, v in cases:
        for side in ("left", "right"):
            got = model.search_sorted(a, v, side)
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, np.searchsorted(a, v, side))
    assert model.search_sorted(np.arange(3.0), np.array([1.0]), "right").tolist() == [2]  # (a few keys: numpy's)


def test_sorted_edges_ranked_in_c_are_numpys(trace, monkeypatch) -> None:
    """sorted_edges with the C extension's one pass over the order gives numpy's bounds and
    positions: a real trace's GPU work edges (the time at stake's and step parts' input) and
    random ones with ties, -0.0 beside 0.0 (one bound, as np.not_equal says), NaN (each a bound
    of its own, last) and infinities; and none at all."""
    from perfreport import model
    from perfreport.analyses import intervals

    if model._sorted is None or not hasattr(model._sorted, "rank_sorted"):
        pytest.skip("the _sorted extension is not built")
    gpu = trace.gpu_work_rows()
    rng = np.random.default_rng(7)
    values = np.array([-np.inf, -1.0, -0.0, 0.0, 2.5, 7.0, np.inf, np.nan])
    cases = [(trace.ts[gpu], trace.ts[gpu] + trace.dur[gpu], np.sort(trace.ts[trace.steps()])), (np.empty(0),)]
    cases += [tuple(rng.choice(values, rng.integers(0, 40)) for _ in range(int(rng.integers(1, 4)))) for _ in range(300)]
    for arrays in cases:
        got_bounds, got = intervals.sorted_edges(*arrays)
        with monkeypatch.context() as m:
            m.delattr(model._sorted, "rank_sorted")
            want_bounds, want = intervals.sorted_edges(*arrays)
        assert np.array_equal(got_bounds.view(np.int64), want_bounds.view(np.int64))  # -0.0, NaN: the same bits
        assert len(got) == len(want) and all(g.dtype == np.int64 and np.array_equal(g, w) for g, w in zip(got, want))
    with pytest.raises(IndexError):
        model._sorted.rank_sorted(np.arange(3.0), np.array([0, 5, 1]), np.empty(3), np.empty(3, dtype=np.int64))


def test_distinct_codes_ranked_in_c_are_np_unique(trace, monkeypatch) -> None:
    """distinct_codes through the C extension's passes (mark, number, look up) gives
    ``np.unique(codes, return_inverse=True)`` and what its numpy path gives: a real trace's name
    and category codes (int32, -1 for none) and random int32 and int64 codes with and without
    -1, a code range much wider than the codes used and a single code; a code out of [-1, n)
    raises."""
    from perfreport import model

    if model._sorted is None or not hasattr(model._sorted, "rank_codes"):
        pytest.skip("the _sorted extension is not built")
    rng = np.random.default_rng(5)
    n_strings = len(trace.strings)
    cases = [(trace.name, n_strings), (trace.cat, n_strings), (trace.name[trace.gpu_work_rows()], n_strings)]
    for dtype in (np.int32, np.int64):
        for _ in range(100):
            n = int(rng.integers(1, 60))
            codes = rng.integers(-1 if rng.random() < 0.5 else 0, n, int(rng.integers(1, 200))).astype(dtype)
            cases.append((codes, n + int(rng.integers(0, 3 * len(codes)))))
    cases.append((np.array([7], dtype=np.int32), 8))
    for codes, n in cases:
        assert model.fits_a_presence_table(n, len(codes))
        got_uniq, got = model.distinct_codes(codes, n)
        with monkeypatch.context() as m:
            m.delattr(model._sorted, "rank_codes")
            want_uniq, want = model.distinct_codes(codes, n)
        uniq, inverse = np.unique(codes, return_inverse=True)
        assert got_uniq.dtype == codes.dtype and np.array_equal(got_uniq, uniq) and np.array_equal(want_uniq, uniq)
        assert got.dtype == np.int64 and np.array_equal(got, inverse.ravel()) and np.array_equal(want, got)
    for bad in (np.array([0, 8], dtype=np.int32), np.array([0, -2], dtype=np.int64)):
        with pytest.raises(IndexError):
            model.distinct_codes(bad, 8)


def test_rows_among_few_values_in_c_is_np_isin(trace) -> None:
    """The bitmap-and-search lookup gives np.isin's positions on a real trace's columns (starts
    among some kernels' starts, flow ids among a few, rows among an arg's rows) and on edge
    values: NaN on either side (matches nothing), -0.0 and 0.0 (equal), infinities, repeats in
    the few, none, one, and more few than the bitmap has bits (every bit set)."""
    from perfreport import model

    if model._sorted is None or not hasattr(model._sorted, "among"):
        pytest.skip("the _sorted extension is not built")
    rng = np.random.default_rng(11)
    kernels = np.flatnonzero(trace.is_cat(KERNEL_CATEGORIES))
    col = next(c for c in trace.args.values() if len(c.rows) > 100)
    cases = [(trace.ts, trace.ts[kernels[::7]]), (trace.flow_id, trace.flow_id[rng.integers(0, trace.n_events, 40)]),
             (trace.ts, trace.ts[:0]), (col.rows, col.rows[::3].astype(np.int64)), (trace.dur, np.r_[trace.dur[:5], np.nan])]
    edges = np.array([-np.inf, -1.0, -0.0, 0.0, 2.5, 7.0, np.inf, np.nan])
    for _ in range(200):
        cases.append((rng.choice(np.r_[edges, 1.0, 9.0], rng.integers(0, 300)), rng.choice(edges, rng.integers(0, 6))))
        ints = rng.integers(-2**40, 2**40, rng.integers(0, 300))
        few = np.r_[rng.choice(ints, min(len(ints), 3)), rng.integers(-5, 5, 2)] if len(ints) else rng.integers(-5, 5, 2)
        cases += [(ints, few), ((ints % 1000).astype(np.int32), few % 1000)]
    many = rng.integers(0, 2**20, 300_000)  # past 2**18 distinct few: the bitmap full, the search decides
    cases.append((rng.integers(0, 2**21, 100_000), many))
    for values, few in cases:
        want = np.flatnonzero(np.isin(values, few))
        for use_c in (True, False):
            got = model.rows_among(values, few, use_c=use_c)
            assert got.dtype == np.int64
            np.testing.assert_array_equal(got, want)


def test_code_masks_are_np_isin(trace) -> None:
    """Which events hold one of some string codes (model.code_mask: one comparison for one code,
    the C extension's take from a table of a bool per code for more) is np.isin on a real trace's
    name, category and pid columns: no code, one, a few, many, the missing code -1 among them;
    numpy's gather (the reference) gives the same; a code past the table is an IndexError."""
    from perfreport import model

    rng = np.random.default_rng(3)
    n = len(trace.strings)
    for column in (trace.name, trace.cat, trace.pid_code):
        present = np.unique(column)
        for codes in ([], present[:1], present[-1:], present[:3], rng.choice(present, 40), [-1], [-1, present[0]],
                      np.arange(n)):
            codes = np.asarray(codes, dtype=np.int64)
            want = np.isin(column, codes)
            np.testing.assert_array_equal(model.code_mask(column, codes, n), want)
            table = np.zeros(n + 1, dtype=bool)
            table[codes] = True
            np.testing.assert_array_equal(model.take_codes(table, column), want)
            np.testing.assert_array_equal(model.take_codes(table, column.astype(np.int64)), want)  # numpy's
    if model._sorted is not None and hasattr(model._sorted, "take_codes"):
        with pytest.raises(IndexError, match="out of bounds"):
            model.take_codes(np.zeros(3, dtype=bool), np.array([0, 3], dtype=np.int32))


def test_codes_where_without_step_names_is_the_full_loop(trace, monkeypatch) -> None:
    """The prefixes asked with ``no_step_names`` match no ProfilerStep#N name: leaving those out
    gives the codes of the loop over every string."""
    import perfreport.model as model
    from perfreport.analyses.launch import ATEN_PREFIX
    from perfreport.analyses.stragglers import COMM_KERNEL_PREFIXES

    monkeypatch.setattr(model, "STEP_NAMES_SKIPPED_FROM", 0)
    assert (trace.step_name_numbers()[:-1] >= 0).any()  # the trace has step names to leave out
    for predicate in (lambda s: model.CPU_COLLECTIVE.search(s) is not None, lambda s: s.startswith("gloo:"),
                      lambda s: s.startswith(ATEN_PREFIX), lambda s: s.startswith(COMM_KERNEL_PREFIXES)):
        want = trace.codes_where(predicate)
        assert trace.codes_where(predicate, no_step_names=True).tolist() == want.tolist()
