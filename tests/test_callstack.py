"""Call-stack nesting (analyses.nesting, analyses.callstack): the sweep order's tie rules by
hand, the C sweep against the numpy one, the numpy stack walk against a plain Python one, and
the tree helpers against brute force on a real trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfreport.analyses import nesting
from perfreport.analyses.callstack import (
    _in_one_loop, ancestor_at_depth, call_stack, cpu_events, cpu_ops, kernel_totals, levels, nearest_match,
    op_kernels, reduce_levels, subtree_gpu_work, subtree_reduce, topmost_match, tree_depth, tree_ints,
)
from perfreport.analyses.nesting import parents_from_sweep, sweep_order, thread_ids
from perfreport.load import load

from .conftest import TRACES, load_cached
from .test_steps import cpu, kernel, launch, write_trace


# the numpy sweep always; the C sweep too where the extension was built (it is in CI: a
# compiler is there), so that both paths answer every case below
SWEEPS = [False] + ([True] if nesting._nest is not None else [])


@pytest.fixture(params=SWEEPS, ids=lambda c: "c" if c else "numpy")
def use_c(request) -> bool:
    return request.param


def nest(spans: list[tuple[float, float]], use_c: bool = False) -> list[int]:
    """Parent (position, -1 = top) of each (start, dur) span on one thread, rows in list order."""
    start = np.array([s for s, _ in spans], float)
    dur = np.array([d for _, d in spans], float)
    return nesting.nest(np.zeros(len(spans), np.int64), start, dur, np.arange(len(spans)), use_c=use_c)[0].tolist()


def test_tie_rules_by_hand(use_c: bool) -> None:
    nest = lambda spans: globals()["nest"](spans, use_c)  # noqa: E731 - the same cases on each path
    # back-to-back siblings: the one ending at 10 closes before the one starting at 10 opens
    assert nest([(0, 10), (10, 10)]) == [-1, -1]
    # equal spans nest in file order; the longer of two starting together is the outer one
    assert nest([(0, 10), (0, 10), (0, 4)]) == [-1, 0, 1]
    assert nest([(0, 4), (0, 10)]) == [1, -1]
    # a zero-length event at the end of an op belongs to it; at the start of one, to that one
    assert nest([(0, 10), (10, 0)]) == [-1, 0]
    assert nest([(5, 0), (5, 10)]) == [1, -1]
    # one op ends and another starts at 10: file order places the zero-length event
    assert nest([(0, 10), (10, 0), (10, 5)]) == [-1, 0, -1]
    assert nest([(0, 10), (10, 5), (10, 0)]) == [-1, -1, 1]
    # zero-length events at one instant nest in file order (HTA's rule)
    assert nest([(3, 0), (3, 0)]) == [-1, 0]
    # the real case from the cudagraph trace: unsqueeze 867 [16230, 16231), as_strided 868 at
    # 16231, unsqueeze 869 [16231, 16232) under stack 860 -> 868 in 867, 869 its sibling
    assert nest([(16221, 55), (16230, 1), (16231, 0), (16231, 1)]) == [-1, 0, 1, 0]


def test_partial_overlap_pops_the_newest(use_c: bool) -> None:
    # [0,10) and [5,15) do not nest: the close at 10 pops the newest open one (HTA's walk)
    assert nest([(0, 10), (5, 10), (12, 1)], use_c) == [-1, 0, 0]


@pytest.mark.skipif(nesting._nest is None, reason="the C extension was not built")
@pytest.mark.parametrize("seed", range(20))
def test_c_sweep_equals_numpy_sweep_on_tie_heavy_spans(seed: int) -> None:
    # integer times on a small grid: most points share an instant with others (back-to-back
    # spans, zero-length events, equal spans, partial overlaps, big instants sorted by qsort)
    rng = np.random.default_rng(seed)
    n = 3000
    group = rng.integers(0, 4, n) * 7 + 3  # not dense: the C path renumbers
    start = rng.integers(0, 200 if seed % 2 else 10, n).astype(float)  # 10 slots: instants of ~150 points
    dur = np.where(rng.random(n) < 0.3, 0.0, rng.integers(1, 40, n)).astype(float)
    row = rng.permutation(n)
    numpy_parent, numpy_depth = nesting.nest(group, start, dur, row, use_c=False)
    c_parent, c_depth = nesting.nest(group, start, dur, row, use_c=True)
    assert (c_parent == numpy_parent).all() and (c_depth == numpy_depth).all()
    assert (numpy_parent >= 0).sum() > n // 2  # the spans really nest


@pytest.mark.skipif(nesting._nest is None, reason="the C extension was not built")
def test_c_sweep_equals_numpy_sweep_on_real_threads() -> None:
    t = load_cached(str(TRACES / "hta_a100_nccl_rank0of2"))[0]
    rows = np.flatnonzero(cpu_events(t))
    gid = thread_ids(t.pid[rows], t.tid[rows])
    args = gid, t.ts[rows], np.maximum(t.dur[rows], 0.0), rows
    numpy_parent, numpy_depth = nesting.nest(*args, use_c=False)
    c_parent, c_depth = nesting.nest(*args, use_c=True)
    assert (c_parent == numpy_parent).all() and (c_depth == numpy_depth).all()
    assert numpy_depth.max() >= 5


@pytest.mark.skipif(not hasattr(nesting._nest, "nest_rows"), reason="the C extension was not built")
def test_nest_rows_writes_what_nest_gives_at_the_rows() -> None:
    """The call stack's C form (spans gathered and answers scattered in C) against nest() and a
    numpy scatter, on a real trace's threads; a negative duration counts as 0, and a NaN span
    sends the whole pass to numpy. Into int64 and into int32 answers (the call stack's where the
    extension takes them), not into two of different widths."""
    t = load_cached(str(TRACES / "hta_a100_nccl_rank0of2"))[0]
    rows = np.flatnonzero(cpu_events(t))
    gid = thread_ids(t.pid[rows], t.tid[rows])
    dur = t.dur.copy()
    dur[rows[::97]] = -1.0
    par, dep = nesting.nest(gid, t.ts[rows], np.maximum(dur[rows], 0.0), rows, use_c=False)
    want_parent, want_depth = np.full(t.n_events, -1), np.full(t.n_events, -1)
    want_parent[rows], want_depth[rows] = np.append(rows, -1)[par], dep
    widths = (np.int64, np.int32) if getattr(nesting._nest, "INT32_TREES", 0) else (np.int64,)
    for use_c in (None, False):
        for dtype in widths:
            parent, depth = np.full(t.n_events, -1, dtype), np.full(t.n_events, -1, dtype)
            nesting.nest_rows(gid, rows, t.ts, dur, parent, depth, use_c=use_c)
            assert np.array_equal(parent, want_parent) and np.array_equal(depth, want_depth)
    assert want_depth.max() >= 5
    if len(widths) == 2:
        with pytest.raises(ValueError):
            nesting._nest.nest_rows(rows, gid, t.ts, dur, int(gid.max()) + 1, np.full(t.n_events, -1, np.int32),
                                    np.full(t.n_events, -1, np.int64))
    dur[rows[5]] = np.nan  # numpy's NaN order decides: the C pass declines and writes nothing
    assert not nesting._nest.nest_rows(rows, gid, t.ts, dur, int(gid.max()) + 1, parent, depth)
    par, dep = nesting.nest(gid, t.ts[rows], np.maximum(dur[rows], 0.0), rows, use_c=False)
    nesting.nest_rows(gid, rows, t.ts, dur, parent, depth)
    assert np.array_equal(parent[rows], np.append(rows, -1)[par]) and np.array_equal(depth[rows], dep)


@pytest.mark.skipif(not hasattr(nesting._nest, "level_order"), reason="the C extension was not built")
def test_c_levels_equal_the_sorted_levels() -> None:
    """The counting sort by depth in C gives the stable sort's levels, from an int32 depth (the
    call stack's, into int32 positions: half the bytes) as from an int64 one."""
    t = load_cached(str(TRACES / "hta_a100_nccl_rank0of2"))[0]
    stack_depth = call_stack(t).depth
    assert stack_depth.dtype == tree_ints(t.n_events)
    for depth in (stack_depth, stack_depth.astype(np.int64)):
        got = levels(depth)
        nodes = np.flatnonzero(depth >= 0)
        order = nodes[np.argsort(-depth[nodes], kind="stable")]
        want = np.split(order, np.flatnonzero(np.diff(depth[order])) + 1)
        assert np.array_equal(got.order, order) and len(got) == len(want) == depth.max() + 1
        assert all(np.array_equal(a, b) for a, b in zip(got, want))
        assert got.order.dtype == depth.dtype
    assert levels(np.full(4, -1)) == [] and len(levels(np.full(4, -1)).order) == 0


@pytest.mark.skipif(not hasattr(nesting._nest, "tree_sum"), reason="the C extension was not built")
def test_c_tree_passes_equal_the_numpy_level_loops_on_a_real_trace() -> None:
    """reduce_levels (np.add), topmost_match and nearest_match in one C loop over
    ``Levels.order``: the same sums bit for bit, the same matches, as level by level in numpy;
    over the call stack's int32 parents and level positions as over int64 ones."""
    t = load_cached(str(TRACES / "hta_a100_nccl_rank0of2"))[0]
    st = call_stack(t)
    by_level = levels(st.depth)
    plain = list(by_level)  # no .order: the numpy loop
    wide = levels(st.depth.astype(np.int64))
    assert _in_one_loop(by_level, st.parent) is not None and _in_one_loop(wide, st.parent.astype(np.int64)) is not None
    ops = cpu_ops(t, st)
    for parent, lv in ((st.parent.astype(np.int64), wide), (st.parent, wide), (st.parent.astype(np.int64), by_level)):
        assert np.array_equal(topmost_match(parent, lv, ops), topmost_match(st.parent, plain, ops))
        values = np.where(st.is_node & t.gpu_activity(), np.nan_to_num(t.dur) * 1.0001, 0.0)
        assert np.array_equal(reduce_levels(parent, lv, values, np.add), reduce_levels(st.parent, plain, values, np.add))
    gpu = st.is_node & t.gpu_activity()
    dur = np.where(gpu, np.nan_to_num(t.dur) * 1.0001, 0.0)  # fractional µs: the order of the additions shows
    for values in (gpu.astype(np.int64), dur):
        c, py = reduce_levels(st.parent, by_level, values, np.add), reduce_levels(st.parent, plain, values, np.add)
        assert c.dtype == py.dtype and np.array_equal(c, py)
    assert reduce_levels(st.parent, by_level, dur, np.add)[st.depth == 0].sum() > 0
    count, total = subtree_gpu_work(t)  # tree_sum2: both sums in one C loop
    assert np.array_equal(count, reduce_levels(st.parent, plain, gpu.astype(np.int64), np.add))
    assert np.array_equal(total, reduce_levels(st.parent, plain, np.where(gpu, np.nan_to_num(t.dur), 0.0), np.add))
    ops = cpu_ops(t, st)
    some = t.kernels() | (np.arange(t.n_events) % 5 == 0)
    assert np.array_equal(topmost_match(st.parent, by_level, ops), topmost_match(st.parent, plain, ops))
    assert np.array_equal(nearest_match(st.parent, by_level, some), nearest_match(st.parent, plain, some))
    assert (topmost_match(st.parent, by_level, ops) >= 0).sum() > 1000


def python_stack_walk(ev: np.ndarray, is_open: np.ndarray, n: int) -> list[int]:
    parent, stack = [-1] * n, []
    for e, o in zip(ev.tolist(), is_open.tolist()):
        if o:
            parent[e] = stack[-1] if stack else -1
            stack.append(e)
        elif stack:
            stack.pop()
    return parent


def test_numpy_walk_equals_python_walk_on_real_threads() -> None:
    t = load_cached(str(TRACES / "hta_a100_nccl_rank0of2"))[0]
    rows = np.flatnonzero(cpu_events(t))
    gid = thread_ids(t.pid[rows], t.tid[rows])
    ev, is_open = sweep_order(gid, t.ts[rows], t.dur[rows], rows)
    assert len(ev) == 2 * len(rows) > 40000
    got = parents_from_sweep(ev, is_open, len(rows))[0].tolist()
    assert got == python_stack_walk(ev, is_open, len(rows))


def test_call_stack_nests_by_containment_on_real_trace() -> None:
    t = load_cached(str(TRACES / "hta_a100_nccl_rank0of2"))[0]
    st = call_stack(t)
    rows = np.flatnonzero(st.is_node & (st.parent >= 0) & cpu_events(t))
    p = st.parent[rows]
    assert (t.pid[p] == t.pid[rows]).all() and (t.tid[p] == t.tid[rows]).all()
    inside = (t.ts[p] <= t.ts[rows]) & (t.ts[rows] + t.dur[rows] <= t.ts[p] + t.dur[p])
    assert inside.mean() > 0.999  # the rest are spans that overlap without nesting
    assert (st.depth[rows] == st.depth[p] + 1).all()
    # GPU events hang under their launch
    gpu = np.flatnonzero(st.is_node & t.gpu_activity())
    assert len(gpu) == 3774 and (st.parent[gpu] == t.linked[gpu]).all()


def test_kernel_totals_match_brute_force() -> None:
    t = load_cached(str(TRACES / "hta_a100_alexnet_benchmark"))[0]
    st = call_stack(t)
    tot = kernel_totals(t, st)
    gpu = np.flatnonzero(st.is_node & t.gpu_activity())
    ancestors = {}
    for g in gpu.tolist():  # brute force: walk each GPU event up to the root
        a = g
        while a >= 0:
            ancestors.setdefault(a, []).append(g)
            a = int(st.parent[a])
    for row, kids in ancestors.items():
        assert tot.loc[row, "num_kernels"] == len(kids)
        assert tot.loc[row, "kernel_dur_sum_us"] == pytest.approx(sum(t.dur[k] for k in kids))
        assert tot.loc[row, "first_kernel_start_us"] == min(t.ts[k] for k in kids)
        assert tot.loc[row, "last_kernel_end_us"] == max(t.ts[k] + t.dur[k] for k in kids)
    without = np.setdiff1d(np.arange(t.n_events), list(ancestors))
    assert (tot["num_kernels"].to_numpy()[without] == 0).all()
    assert np.isnan(tot["first_kernel_start_us"].to_numpy()[without]).all()


def test_tree_helpers_on_a_small_forest() -> None:
    #        0        5
    #      1   2      6
    #      3          7 (depth 2)
    #      4
    parent = np.array([-1, 0, 0, 1, 3, -1, 5, 6])
    depth = tree_depth(parent)
    assert depth.tolist() == [0, 1, 1, 2, 3, 0, 1, 2]
    ones = np.ones(8, np.int64)
    assert subtree_reduce(parent, depth, ones, np.add).tolist() == [5, 3, 1, 2, 1, 3, 2, 1]
    vals = np.array([9., 4., 7., 1., 8., 2., 3., 5.])
    assert subtree_reduce(parent, depth, vals, np.maximum).tolist() == [9, 8, 7, 8, 8, 5, 5, 5]
    assert ancestor_at_depth(parent, depth, 1).tolist() == [-1, 1, 2, 1, 1, -1, 6, 6]
    assert ancestor_at_depth(parent, depth, 0).tolist() == [0, 0, 0, 0, 0, 5, 5, 5]
    with pytest.raises(ValueError, match="cycle"):
        tree_depth(np.array([1, 0]))


def test_op_kernels_on_alexnet() -> None:
    traces = load_cached(str(TRACES / "hta_a100_alexnet_benchmark"))
    df = op_kernels(traces).set_index("name")
    lin = df.loc["aten::linear"]
    # six calls with 2, 2, 3, 2, 2, 3 kernels; the two 3-kernel calls are HTA's oracle pattern
    # (208 us GPU, 10652 us CPU), the others add 830 + 406 + 820 + 400 us
    assert lin["calls"] == 6 and lin["num_kernels"] == 14
    assert lin["kernel_dur_sum_us"] == 208.0 + 830 + 406 + 820 + 400
    t = traces[0]
    assert lin["cpu_dur_us"] == t.dur[t.decode(t.name) == "aten::linear"].sum() == 22273.0


def test_a_2021_step_span_is_no_operator_against_the_raw_events() -> None:
    """A 2021 trace records ``ProfilerStep#N`` as an operator (category ``Operator``). The op
    tables treat it as the step it is: the kernels launched under it belong to the outermost
    real operators below it. Checked against the file's raw events: each GPU event's launch
    (same correlation), the ``Operator`` events on the launch's thread that contain it, the
    outermost of those that is not a step span."""
    import json

    from perfreport.analyses.sequences import kernel_sequences

    folder = TRACES / "odd_old2021_tbplugin_gpu_metrics"
    events = json.loads((folder / "gpu_metrics_input.json").read_text())["traceEvents"]
    ops = [e for e in events if e.get("cat") == "Operator" and e.get("ph") == "X"]
    assert any(e["name"].startswith("ProfilerStep#") for e in ops)  # the case under test
    launches = {e["args"]["correlation"]: e for e in events if e.get("cat") == "Runtime" and "correlation" in e.get("args", {})}
    expected: dict[str, int] = {}
    for g in (e for e in events if e.get("cat") in ("Kernel", "Memcpy", "Memset")):
        lau = launches.get(g["args"].get("correlation"))
        if lau is None:
            continue
        around = [o for o in ops if not o["name"].startswith("ProfilerStep#") and o["tid"] == lau["tid"]
                  and o["ts"] <= lau["ts"] and lau["ts"] + lau["dur"] <= o["ts"] + o["dur"]]
        if around:
            outer = min(around, key=lambda o: (o["ts"], -o["dur"]))
            expected[outer["name"]] = expected.get(outer["name"], 0) + 1
    traces = load_cached(str(folder))
    table = op_kernels(traces)
    got = {name: n for name, n in zip(table["name"], table["num_kernels"]) if n}
    assert got == expected and sum(expected.values()) >= 20
    sequences = kernel_sequences(traces)
    assert len(sequences) and not sequences["operator"].str.startswith("ProfilerStep").any()


def test_hand_built_stack_and_edge_cases(tmp_path: Path) -> None:
    events = [cpu("aten::linear", 0, 100), cpu("aten::addmm", 10, 50), launch(20, corr=1),
              kernel("gemm", 30, 40, corr=1), cpu("other", 200, 10, tid=2)]
    t = load(write_trace(tmp_path / "a", events))[0]
    st = call_stack(t)
    assert st.parent[:5].tolist() == [-1, 0, 1, 2, -1] and st.depth[:5].tolist() == [0, 1, 2, 3, 0]
    tot = kernel_totals(t, st)
    assert tot["num_kernels"].tolist()[:5] == [1, 1, 1, 1, 0]
    assert tot["kernel_span_us"].tolist()[:5] == [40.0, 40.0, 40.0, 40.0, 0.0]
    empty = load(write_trace(tmp_path / "b", [{"ph": "i", "name": "marker", "pid": 1, "tid": 1, "ts": 0, "s": "t"}]))
    st = call_stack(empty[0])
    assert not st.is_node.any()
    assert op_kernels(empty).empty


@pytest.mark.skipif(nesting._nest is None, reason="the C extension was not built")
@pytest.mark.parametrize("seed", range(4))
def test_c_sweep_of_threads_in_many_runs_equals_numpy_sweep(seed: int) -> None:
    """A thread whose events come in far more runs than a few (an old profiler lists them by
    end, say) is sorted by its starts' bits (radix), not merged: the same call stack, negative
    starts and -0.0 (equal to 0.0) included."""
    rng = np.random.default_rng(seed)
    n = 20_000
    start = rng.integers(-500, 500, n).astype(float) * 0.25
    start[rng.random(n) < 0.05] = -0.0
    start[rng.random(n) < 0.05] = 0.0
    dur = np.where(rng.random(n) < 0.2, 0.0, rng.integers(1, 80, n) * 0.25)
    order = np.argsort(start + dur, kind="stable")  # listed by end: thousands of runs of starts
    group, start, dur = np.zeros(n, np.int64), start[order], dur[order]
    assert np.count_nonzero(start[1:] < start[:-1]) > 1000
    row = np.arange(n)
    numpy_parent, numpy_depth = nesting.nest(group, start, dur, row, use_c=False)
    c_parent, c_depth = nesting.nest(group, start, dur, row, use_c=True)
    assert (c_parent == numpy_parent).all() and (c_depth == numpy_depth).all()
    assert numpy_depth.max() >= 3
