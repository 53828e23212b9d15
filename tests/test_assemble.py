"""The parent's fold of per-rank digests (perfreport.running.assemble): digests arriving in any order
give the tables of the whole trace set, and what the parent keeps does not grow with ranks
where it need not (op profile sums, cut time-series lines, one copy of each string)."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import perfreport.running.assemble as assemble_module
from perfreport.analyses import ANALYSES
from perfreport.analyses.op_profile import OpProfileFold, op_profile
from perfreport.analyses.series import time_series
from perfreport.running.assemble import Assembler, StringPool, assemble
from perfreport.running.digest import AnalysisOptions, FrozenFrame, digest
from perfreport.load import load
from perfreport.pipeline import analyze

from .test_diff import Builder
from .test_executor import eight_ranks, plain

OWN_PAIRS, WHOLE_PAIRS = ("op_pairs", "own", False), ("op_pairs", (), False)


@pytest.fixture(scope="module")
def job8(tmp_path_factory) -> Path:
    return eight_ranks(tmp_path_factory.mktemp("job8"))


@pytest.fixture(scope="module")
def digests8(job8):
    full = load(job8, workers=1)
    return full, [digest(t, AnalysisOptions()) for t in full]


def _tables(traces_and_tables):
    return {name: plain(df.to_dict(orient="records")) for name, df in traces_and_tables[1].items()}


def test_digests_in_any_order_and_stacked_in_small_groups_give_the_same_tables(digests8, monkeypatch):
    full, digests = digests8
    in_order = _tables(assemble(digests, "x"))
    monkeypatch.setattr(assemble_module, "STACK_EVERY", 3)  # several joined groups and a pending one
    shuffled = [digests[i] for i in (5, 2, 7, 0, 3, 6, 1, 4)]
    assert _tables(assemble(shuffled, "x")) == in_order
    for name, fn in ANALYSES:
        assert in_order[name] == plain(fn(full).to_dict(orient="records")), name
    assert len(in_order["kernel_sequences"]) > 8 * 3  # rows of several ranks per group


def test_time_series_lines_beyond_the_plot_keep_only_their_peak(digests8):
    full, digests = digests8
    traces, _ = assemble(digests, "x", max_lines=2)
    cut = time_series(traces, max_lines=2)
    assert plain(cut) == plain(time_series(full, max_lines=2))
    assert cut["queue_length"]["lines_total"] > 2 and len(cut["queue_length"]["lines"]) == 2
    kept = [line for t in traces for line in t.memo(("series", 500), None)["queue_length"]]
    drawn = {(line["rank"], line["label"]) for line in cut["queue_length"]["lines"]}
    assert all(len(line["x"]) <= 1 for line in kept if (line["rank"], line["label"]) not in drawn)
    assert sum(len(line["x"]) > 1 for line in kept) == 2


def test_op_profile_fold_holds_one_ranks_sums_however_many_ranks(digests8):
    _, digests = digests8
    d = digests[0]
    fold = OpProfileFold()
    sizes = []
    for _ in range(6):
        fold.add(d.memo["step_numbers"], d.memo[OWN_PAIRS], d.memo[WHOLE_PAIRS])
        sizes.append((len(fold.steps.pair), len(fold.whole.pair)))
    assert sizes[0][0] > 100 and len(set(sizes)) == 1  # the same (kind, name, step) rows
    six, one = fold.table(), OpProfileFold()
    one.add(d.memo["step_numbers"], d.memo[OWN_PAIRS], d.memo[WHOLE_PAIRS])
    one = one.table()
    assert (six["samples"] == 6 * one["samples"]).all()
    np.testing.assert_allclose(six["dur_per_step_us"], one["dur_per_step_us"], rtol=1e-12)
    assert six["count_per_step"].tolist() == one["count_per_step"].tolist()


def test_op_profile_of_ranks_that_share_no_step_uses_whole_traces(tmp_path: Path):
    """It used to fail in the parent ("the digest has no ('op_pairs', (), False)")."""
    Builder().step(1, 0, 100).op("aten::add", 10, 5).op("aten::mul", 20, 1).write(tmp_path / "job", rank=0)
    Builder().step(2, 100, 100).op("aten::add", 120, 9).write(tmp_path / "job", rank=1)
    got = analyze(tmp_path / "job", workers=1).tables["op_profile"].set_index("key")
    assert got.loc["aten::add", ["samples", "count_per_step", "dur_per_step_us"]].tolist() == [2, 1.0, 7.0]
    assert got.loc["aten::mul", "dur_per_step_us"] == 0.5
    assert got.equals(op_profile(load(tmp_path / "job", workers=1)).set_index("key"))


def test_the_parent_keeps_one_copy_of_each_string_and_summary_tables_as_columns(digests8, monkeypatch):
    """Past the first POOL_FROM ranks of a side, a rank's summaries take their strings from the
    side's pool: one object per name however many ranks name it (the first ranks keep their own,
    already one object per name within a digest)."""
    from perfreport.running import assemble as assemble_module

    monkeypatch.setattr(assemble_module, "POOL_FROM", 1)
    _, digests = digests8
    copies = [pickle.loads(pickle.dumps(digests[0])) for _ in range(3)]
    copies = [dataclasses.replace(d, meta=dataclasses.replace(d.meta, rank=r)) for r, d in enumerate(copies)]
    assembler = Assembler("x")
    for i, d in enumerate(copies):
        assembler.add(d, i)
    names = [assembler.ranks[r]._memo["class_name_totals"] for r in range(3)]
    assert all(isinstance(n, FrozenFrame) for n in names)
    assert all(a is b for a, b in zip(names[1].columns["name"], names[2].columns["name"]))  # pooled
    pairs = [(a, b) for a, b in zip(names[0].columns["name"], names[1].columns["name"]) if len(a) > 1]
    assert pairs and not any(a is b for a, b in pairs)  # rank 0 kept its own (Python shares 1-char strings)
    assert isinstance(assembler.ranks[1].memo("class_name_totals", None), pd.DataFrame)
    assert OWN_PAIRS not in assembler.ranks[0]._memo  # folded, not kept (an analyze)
    before = pickle.dumps(copies[1].tables)
    assembler.finish()
    assert pickle.dumps(copies[1].tables) == before  # the caller's digests are left as they were


def test_string_pool_keeps_dtypes_and_values():
    pool = StringPool()
    df = pd.DataFrame({"name": ["a" * 40, "b"], "n": [1, 2], "obj": np.array(["x", None], dtype=object)})
    out = pool.frame(df)
    assert out.dtypes.tolist() == df.dtypes.tolist() and out.equals(df)
    again = pool.frame(df.copy(deep=True))
    assert again["name"].iloc[0] is out["name"].iloc[0]


def test_string_pool_pools_a_frozen_frames_columns_and_names():
    """A summary frozen before pooling (as the parent now does) has its text columns' strings,
    object or pandas strings, and its column names from the pool, its values and dtypes as
    they were."""
    pool = StringPool()
    df = pd.DataFrame({"name": ["k" * 40, "b"], "n": [1, 2], "text": pd.array(["s" * 30, None], dtype="string")})
    first = pool(FrozenFrame.of(df))
    again = pool(FrozenFrame.of(df.copy(deep=True)))
    assert first.thaw().equals(df) and first.thaw().dtypes.tolist() == df.dtypes.tolist()
    assert again.columns["name"][0] is first.columns["name"][0] and again.columns["text"][0] is first.columns["text"][0]
    assert all(a is b for a, b in zip(again.columns, first.columns))


def test_string_pool_long_text_columns_share_one_string_per_text():
    pool = StringPool()
    names = [f"kernel_{i % 7}_" + "x" * 30 for i in range(500)]
    mixed = np.array([None if i % 50 == 0 else ("t" if i % 3 else 1.5) for i in range(500)], dtype=object)
    df = pd.DataFrame({"name": names, "mixed": mixed})
    out = pool.frame(df)
    assert out.equals(df) and out.dtypes.tolist() == df.dtypes.tolist()
    again = pool.frame(pd.DataFrame({"name": [n[:] + "" for n in names[::-1]]}))
    firsts = {v: v for v in out["name"]}  # one object per text, the same in the next frame
    assert all(v is firsts[v] for v in out["name"]) and all(v is firsts[v] for v in again["name"])
    assert len({id(v) for v in out["name"]}) == 7


def test_op_profile_sums_appended_in_order_are_those_the_grouping_gives(digests8, monkeypatch):
    """A rank's sums that come after every held (kind, pair) are appended as they are: the same
    arrays, bit for bit, as grouping them with the held ones (NaN and -0.0 durations too)."""
    import sys

    op_module = sys.modules[OpProfileFold.__module__]  # (the package exports the function op_profile)
    _, digests = digests8

    def folded(fast: bool) -> list[np.ndarray]:
        with monkeypatch.context() as m:
            if not fast:
                m.setattr(op_module._Sums, "_after_held", lambda self, kind, pair: False)
            sums, held = op_module._Sums(), []
            for d in digests[:3]:
                for p in d.memo[OWN_PAIRS]:
                    kind = np.full(len(p.label), op_module.KINDS.index(p.kind), dtype=np.int64)
                    dur = p.dur_us.copy()
                    dur[:3] = [np.nan, -0.0, 0.5]
                    sums.add(kind, (p.step.astype(np.int64) + 1) << 24 | p.label, p.count, dur)
                    held += [sums.kind, sums.pair, sums.count, sums.dur_us.view(np.int64)]  # after every add
            return held

    fast, slow = folded(True), folded(False)
    assert len(fast) == len(slow) and all(np.array_equal(a, b) for a, b in zip(fast, slow))
    first = digests[0].memo[OWN_PAIRS][0]  # the first rank's rows: appended, not grouped
    assert op_module._Sums()._after_held(np.zeros(len(first.label), dtype=np.int64),
                                         (first.step.astype(np.int64) + 1) << 24 | first.label)


def test_the_parent_lets_the_matched_calls_go_once_the_cross_rank_analyses_have_read_them():
    """The calls matched across ranks are read by the skew and the straggler evidence alone: the
    reduce lets them go, and what they gave stays what the matching gives again."""
    from perfreport.analyses.matching import collective_skew, straggler_evidence

    gloo = Path(__file__).parent / "data" / "recorded" / "setups" / "fsdp_full_w2_gloo"
    analysis = analyze(gloo, workers=2)
    assert set(assemble_module.READ_IN_THE_REDUCE_ONLY).isdisjoint(analysis.traces._memo)
    assert "collective_skew" in analysis.traces._memo and len(analysis.tables["collective_skew"]) > 0
    pd.testing.assert_frame_equal(straggler_evidence(analysis.traces), analysis.tables["straggler_evidence"])
    pd.testing.assert_frame_equal(collective_skew(analysis.traces), analysis.tables["collective_skew"])


def test_each_ranks_calls_are_its_rows_of_the_jobs_call_table():
    """Once the job's call table is made, a rank's memoised calls are its rows of it (no second
    copy): the same calls, texts and starts (the rank's own clock) as the rank's digest sent."""
    from perfreport.analyses.collectives import collectives, rank_collectives
    from perfreport.running.digest import DigestTrace

    def memory(column: pd.Series) -> np.ndarray:
        return column.array.codes if isinstance(column.dtype, pd.CategoricalDtype) else column.to_numpy()

    gloo = Path(__file__).parent / "data" / "recorded" / "setups" / "fsdp_full_w2_gloo"
    analysis = analyze(gloo, workers=2)
    table = collectives(analysis.traces)
    held_rows = 0
    for path in sorted(gloo.glob("*.json*")):
        sent = rank_collectives(next(iter(load(path))))
        trace = analysis.traces[int(sent["rank"].iloc[0])]
        assert isinstance(trace, DigestTrace)
        held = rank_collectives(trace)
        assert len(held) == len(sent) > 0
        for c in sent.columns:
            pd.testing.assert_series_equal(held[c].astype(object), sent[c].astype(object))
            assert np.shares_memory(memory(held[c]), memory(table[c])) == (c != "ts_us")
        held_rows += len(held)
    assert held_rows == len(table)
