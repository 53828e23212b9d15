"""A rank's digest drops each shared view once its last reader is done (perfreport.running.digest.LAST_READER):
the same tables and summaries as keeping every view, no view computed twice, less memory held."""

from __future__ import annotations

import contextlib
import dataclasses
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import perfreport.model as model
from perfreport.running import digest as digest_module
from perfreport.running import halves
from perfreport.running.digest import DIGEST_KEYS, GATE_READS, LAST_READER, AnalysisOptions, digest, memo_kind
from perfreport.load import load

from .conftest import DATA, TRACES

ROOT = Path(__file__).parents[1]
TRACE_FILES = [
    ROOT / "examples" / "resnet50-workers0" / "worker0.1623143089861.pt.trace.json.gz",  # V100, one process
    TRACES / "hta_a100_nccl_rank0of2" / "nccl_data.json.gz",  # NCCL collectives
    DATA / "recorded" / "short_multirank" / "ddp_w2_gloo_1step_run1" / "rank0.pt.trace.json.gz",  # gloo DDP, H100
]
MODES = {"analyze": AnalysisOptions(), "compare": AnalysisOptions(gate=True, attribution=True)}


def _rank(path: Path):
    return next(iter(load(str(path), workers=1)))


def _digest_counting(path: Path, options: AnalysisOptions, monkeypatch, forget: bool = True):
    """(digest, computations per memo key, the trace after the digest, the one-rank trace set
    the digest ran the analyses on)."""
    computed: Counter = Counter()
    real = model._memoised
    made: list[model.TraceSet] = []

    def counting(store, key, compute):  # per store: the trace set's and the rank's are two
        if key not in store:
            computed[id(store), key] += 1
        return real(store, key, compute)

    def trace_set(*args, **kwargs):
        made.append(model.TraceSet(*args, **kwargs))
        return made[-1]

    with monkeypatch.context() as m:
        m.setattr(model, "_memoised", counting)
        m.setattr(digest_module, "TraceSet", trace_set)
        if not forget:
            m.setattr(digest_module, "LAST_READER", {})
        trace = _rank(path)
        got = digest(trace, options)
        return got, computed, trace, made[0]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", TRACE_FILES, ids=lambda p: p.parent.name)
def test_views_are_dropped_after_their_last_reader_and_none_is_made_twice(path, mode, monkeypatch) -> None:
    options = MODES[mode]
    got, computed, trace, one = _digest_counting(path, options, monkeypatch)
    twice = {key: n for (_, key), n in computed.items() if n > 1}
    assert not twice, f"views computed again after being dropped (LAST_READER is stale): {twice}"
    dropped = {view for view in LAST_READER
               if memo_kind(view) not in DIGEST_KEYS and not (options.gate and memo_kind(view) in GATE_READS)}
    kept = {memo_kind(k) for k in trace._memo} | set(trace._memo)
    assert not kept & dropped  # what was dropped is gone from the trace: its memory can be given back
    assert {k for _, k in computed} & {view for view in dropped if isinstance(view, tuple)}  # category masks too
    assert {memo_kind(k) for _, k in computed} & dropped  # and the trace did make some of them
    made_on_set = {memo_kind(k) for store, k in computed if store == id(one._memo)}
    assert made_on_set & dropped and not {memo_kind(k) for k in one._memo} & dropped  # the trace set's go too

    want, _, _, _ = _digest_counting(path, options, monkeypatch, forget=False)
    assert got.tables.keys() == want.tables.keys()
    for name in want.tables:
        pd.testing.assert_frame_equal(got.tables[name], want.tables[name], check_exact=True)
    assert got.memo.keys() == want.memo.keys()
    for key, value in want.memo.items():
        _assert_same(got.memo[key], value)


def _assert_same(a, b) -> None:
    from perfreport.running.digest import FrozenFrame

    if isinstance(b, FrozenFrame):  # a summary as a digest carries it: compared as the frame it thaws to
        assert isinstance(a, FrozenFrame)
        pd.testing.assert_frame_equal(a.thaw(), b.thaw(), check_exact=True)
    elif isinstance(b, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    elif isinstance(b, np.ndarray):
        np.testing.assert_array_equal(a, b)
    elif isinstance(b, dict):
        assert a.keys() == b.keys()
        for k in b:
            _assert_same(a[k], b[k])
    elif dataclasses.is_dataclass(b):
        assert type(a) is type(b)
        for f in dataclasses.fields(b):
            _assert_same(getattr(a, f.name), getattr(b, f.name))
    elif isinstance(b, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _assert_same(x, y)
    else:
        assert a == b or (a != a and b != b)  # NaN equals NaN here


@pytest.mark.parametrize("path", TRACE_FILES, ids=lambda p: p.parent.name)
def test_a_rank_shared_with_a_forked_child_digests_the_same(path, monkeypatch) -> None:
    """With a spare core the analyses of CHILD_SHARE run in a forked child: the digest (its
    tables, in order, and every view it carries) is the one made in one process, and this
    process never builds the call stack (only the child's share reads it)."""

    monkeypatch.setattr(halves, "SHARE_MIN_EVENTS", 0)  # small real traces: share them anyway
    want = digest(_rank(path), AnalysisOptions())
    got, computed, trace, phases = _shared_digest_counting(path, monkeypatch)
    twice = {key: n for (_, key), n in computed.items() if n > 1}
    assert not twice, f"views made again in the parent (PARENT_LAST_READER is stale): {twice}"
    kept = {memo_kind(k) for k in trace._memo}
    assert not kept & set(halves.PARENT_LAST_READER)  # the parent let go of what only the child reads on
    assert {memo_kind(k) for _, k in computed} & set(halves.PARENT_LAST_READER)
    assert phases["forked analyses (child process)"]["wall_s"] > 0  # the child ran, and sent its share
    assert all(phases[f"analysis:{n}"]["self_s"] == 0.0 for n in halves.CHILD_SHARE)  # ...beside this process
    assert not {key for _, key in computed} & {"call_stack", "call_stack_levels"}  # (none of ours reads it)
    _assert_same_digest(got, want)


def test_no_child_is_forked_without_the_memory_it_may_take(monkeypatch) -> None:
    """With less free memory than CHILD_ROOM x the rank's JSON, the analyses all run in this
    process (no forked child) and the digest is the same; with just that much, a child runs."""
    from perfreport.load import memory
    from perfreport.timing import recording

    path = TRACE_FILES[1]
    monkeypatch.setattr(halves, "SHARE_MIN_EVENTS", 0)
    want = digest(_rank(path), AnalysisOptions())
    for room, forked in ((-1, False), (0, True)):
        trace = _rank(path)
        need = int(halves.CHILD_ROOM * trace.meta.json_bytes)
        assert need > 0
        with halves.spare_core(), recording() as timings, monkeypatch.context() as m:
            m.setattr(memory, "available_memory", lambda: need + room)  # (after the load: it checks too)
            got = digest(trace, AnalysisOptions())
        assert ("forked analyses (child process)" in {p["phase"] for p in timings.records()}) == forked
        _assert_same_digest(got, want)


def _shared_digest_counting(path: Path, monkeypatch):
    """(digest made with a forked child, computations per memo key in this process, the trace
    after the digest, this process's phases by name)."""
    from perfreport.timing import recording

    computed: Counter = Counter()  # the views made in this process (the parent of the share)
    real = model._memoised

    def counting(store, key, compute):
        if key not in store:
            computed[id(store), key] += 1
        return real(store, key, compute)

    trace = _rank(path)
    with halves.spare_core(), recording() as timings, monkeypatch.context() as m:
        m.setattr(model, "_memoised", counting)
        got = digest(trace, AnalysisOptions())
    return got, computed, trace, {p["phase"]: p for p in timings.records()}


def _assert_same_digest(got, want) -> None:
    """The same tables in the same order, the same views."""
    assert list(got.tables) == list(want.tables)
    for name in want.tables:
        pd.testing.assert_frame_equal(got.tables[name], want.tables[name], check_exact=True)
    assert got.memo.keys() == want.memo.keys()
    for key, value in want.memo.items():
        _assert_same(got.memo[key], value)


def _first_hand_over_when_idle(monkeypatch) -> None:
    """Let this process's first look at its child (before its first analysis) wait until the child
    is done with its own half (60 s at most), so that it is handed work on any machine however
    slow, and at once: the back half of all that is left."""
    import time

    real = halves.Halves.keep

    def keep(self, remaining):
        deadline = time.monotonic() + 60.0
        while not self.handed and not self.idle() and time.monotonic() < deadline:
            time.sleep(0.005)
        return real(self, remaining)

    monkeypatch.setattr(halves.Halves, "keep", keep)


@pytest.mark.parametrize("path", TRACE_FILES[:2], ids=lambda p: p.parent.name)
def test_an_idle_child_is_handed_the_back_half_of_what_is_left(path, monkeypatch) -> None:
    """A child done with its half is handed the back half of the analyses this process has
    left, again whenever it is idle (here the first look waits for it to be done): the digest is
    the one made in one process, no view is made twice here, and this process lets go of the
    views whose last reader it handed over."""
    from perfreport.analyses import ANALYSES

    monkeypatch.setattr(halves, "SHARE_MIN_EVENTS", 0)
    want = digest(_rank(path), AnalysisOptions())
    _first_hand_over_when_idle(monkeypatch)
    got, computed, trace, phases = _shared_digest_counting(path, monkeypatch)
    names = [n for n, _ in ANALYSES]
    ours = [n for n in names if n not in halves.CHILD_SHARE]
    handed = [n for n in ours if phases[f"analysis:{n}"]["self_s"] == 0.0]
    # the back half of all of ours (and of the three finishing steps after them)
    assert handed[-1] == ours[-1] and len(handed) >= 8, handed
    assert phases["analysis:summary"]["self_s"] > 0 and phases["analysis:step_times"]["self_s"] > 0
    assert not {key: n for (_, key), n in computed.items() if n > 1}
    assert not {memo_kind(k) for k in trace._memo} & set(halves.PARENT_LAST_READER)
    _assert_same_digest(got, want)
    assert merged_cuts_of(got) == merged_cuts_of(want)


def merged_cuts_of(d) -> list:
    from perfreport.documents.table_rows import merged_cuts

    return merged_cuts(d.tables_cut, [], list(d.tables))


def test_what_a_failing_child_was_handed_this_process_runs_itself(monkeypatch, tmp_path) -> None:
    """A child that fails in an analysis it was handed sends nothing more: this process runs
    what it did not send, and the digest is the one made in one process."""
    import os

    from perfreport.analyses import ANALYSES
    from perfreport.timing import recording

    path = TRACE_FILES[1]
    monkeypatch.setattr(halves, "SHARE_MIN_EVENTS", 0)
    want = digest(_rank(path), AnalysisOptions())
    _first_hand_over_when_idle(monkeypatch)
    parent = os.getpid()
    last = "kernel_efficiency"  # one of ours, in the back half handed over first
    assert last not in halves.CHILD_SHARE
    fn = dict(ANALYSES)[last]
    failed = tmp_path / "failed in the child"

    def fails_in_the_child(one):
        if os.getpid() != parent:
            failed.touch()
            raise RuntimeError("a bug that shows in the child only")
        return fn(one)

    from perfreport import analyses as analyses_module

    monkeypatch.setattr(analyses_module, "ANALYSES", [(n, fails_in_the_child if n == last else f)
                                                      for n, f in analyses_module.ANALYSES])
    with halves.spare_core(), recording() as timings:
        got = digest(_rank(path), AnalysisOptions())
    phases = {p["phase"]: p for p in timings.records()}
    assert phases["analysis:op_efficiency"]["self_s"] == 0.0  # the child ran its own half...
    assert failed.exists()  # ...was handed this one and failed in it...
    assert phases[f"analysis:{last}"]["self_s"] > 0  # ...so this process ran it
    assert list(got.tables) == list(want.tables)
    for table in want.tables:
        pd.testing.assert_frame_equal(got.tables[table], want.tables[table], check_exact=True)


@pytest.mark.parametrize("share", [False, True], ids=["one process", "forked child"])
def test_per_step_tables_cut_as_they_are_made_are_the_whole_tables_cut(share, monkeypatch) -> None:
    """With ``step_rows`` each per-step table is cut to its first steps as soon as its analysis
    makes it (in the forked child too, which sends its entries back): the tables and
    ``tables_cut`` entries are those of one cut of the whole tables."""
    from perfreport.documents.table_rows import cut_tables, merged_cuts
    from perfreport.timing import recording

    path = TRACE_FILES[1]
    monkeypatch.setattr(halves, "SHARE_MIN_EVENTS", 0)
    whole = digest(_rank(path), AnalysisOptions())
    want, want_cut = cut_tables(whole.tables, call_rows=None, step_rows=1)
    assert {c["table"] for c in want_cut} >= {"profiler_steps", "launch_stats_by_step", "idle_breakdown_per_step"}
    with halves.spare_core() if share else contextlib.nullcontext(), recording() as timings:
        got = digest(_rank(path), AnalysisOptions(step_rows=1))
    assert ("forked analyses (child process)" in {p["phase"] for p in timings.records()}) == share
    assert list(got.tables) == list(want)
    for name in want:
        pd.testing.assert_frame_equal(got.tables[name], want[name], check_exact=True)
    assert merged_cuts(got.tables_cut, [], list(want)) == want_cut
    assert all(len(got.tables[c["table"]]) < c["rows"] for c in got.tables_cut)
    from perfreport.analyses import ANALYSES

    names = [name for name, _ in ANALYSES]
    assert {c["table"] for c in got.tables_cut} & halves.CHILD_SHARE  # (the child's half cuts tables too)


def test_a_forked_child_that_fails_leaves_its_analyses_to_the_parent(monkeypatch) -> None:
    import os

    from perfreport.analyses import ANALYSES

    path = TRACE_FILES[1]
    monkeypatch.setattr(halves, "SHARE_MIN_EVENTS", 0)
    want = digest(_rank(path), AnalysisOptions())
    parent = os.getpid()
    name, fn = next((n, f) for n, f in ANALYSES if n in halves.CHILD_SHARE)

    def fails_in_the_child(one):
        if os.getpid() != parent:
            raise RuntimeError("a bug that shows in the child only")
        return fn(one)

    monkeypatch.setattr("perfreport.analyses.ANALYSES",
                        [(n, fails_in_the_child if n == name else f) for n, f in ANALYSES])
    from perfreport.timing import recording

    with halves.spare_core(), recording() as timings:
        got = digest(_rank(path), AnalysisOptions())
    phases = {p["phase"]: p for p in timings.records()}
    assert "forked analyses (child process)" not in phases  # the child sent nothing...
    assert phases[f"analysis:{name}"]["self_s"] > 0  # ...so this process ran its share itself
    assert list(got.tables) == list(want.tables)
    for table in want.tables:
        pd.testing.assert_frame_equal(got.tables[table], want.tables[table], check_exact=True)


@pytest.mark.parametrize("path", TRACE_FILES[1:], ids=lambda p: p.parent.name)  # NCCL and gloo collectives
def test_the_rank_parts_of_the_straggler_tables_are_what_the_analyses_leave(path, monkeypatch) -> None:
    """A worker makes the per-rank summaries of the collective skew and the straggler tables
    instead of running them on its one rank: the digest is the one those runs leave."""
    options = MODES["compare"]
    got = digest(_rank(path), options)
    monkeypatch.setattr(digest_module, "_rank_parts", lambda: {})  # run every cross-rank analysis
    want = digest(_rank(path), options)
    assert list(got.tables) == list(want.tables)
    assert got.memo.keys() == want.memo.keys()
    assert any(memo_kind(k) == "comm_kernels" for k in want.memo) and any(memo_kind(k) == "collectives" for k in want.memo)
    for key, value in want.memo.items():
        _assert_same(got.memo[key], value)
