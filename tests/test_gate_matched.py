"""Matched GPU op calls (perfreport.gate.matched) against the plain pandas statement of the
matching: filter the calls, sort them by (rank, key, run, step, call), number each (rank, key)'s
calls, map the baseline's ranks to the candidate's, inner-join on (rank, key, number). Same
pairs in the same order: the ratio, its standard error and the sign test are the same floats."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from perfreport.analyses.invocations import gpu_invocations
from perfreport.gate.matched import matched_calls, side_calls
from perfreport.gate.noise import paired_noise
from perfreport.model import COLLECTIVE

from .conftest import TRACES, load_cached
from .inject import slow_kernels


def reference(tables, pairs, cls=None, key=None):
    matched = []
    for table, ranks, to_candidate in ((tables[0], [x for x, _ in pairs], dict(pairs)),
                                       (tables[1], [y for _, y in pairs], None)):
        mask = table["rank"].isin(ranks).to_numpy().copy()
        mask &= (table["cls"] == cls).to_numpy() if cls is not None else (table["cls"] != COLLECTIVE).to_numpy()
        if key is not None:
            mask &= (table["key"].astype(str).str.strip() == key).to_numpy()
        t = table[mask].sort_values(["rank", "key", "run", "step", "call"], kind="stable")
        t = t.assign(n=t.groupby(["rank", "key"], sort=False).cumcount().to_numpy())
        if to_candidate:
            t = t.assign(rank=t["rank"].map(to_candidate))
        matched.append(t[["rank", "key", "n", "dur_us"]])
    both = matched[0].merge(matched[1], on=["rank", "key", "n"], suffixes=("_b", "_c"))
    return paired_noise(both["dur_us_b"].to_numpy(), both["dur_us_c"].to_numpy()) if len(both) else None


KEYS = np.array(["k a", " k a", "k a ", "b", "Memcpy HtoD (Pageable -> Device)", "all_reduce 0", "é"], dtype=object)
CLASSES = np.array(["COMPUTATION", "COMMUNICATION", "MEMORY", COLLECTIVE], dtype=object)


def random_table(rng, ranks):
    n = int(rng.integers(0, 150))
    return pd.DataFrame({"rank": rng.choice(ranks, n), "step": rng.integers(0, 4, n), "key": rng.choice(KEYS, n),
                         "cls": rng.choice(CLASSES, n), "call": rng.integers(0, 5, n), "dur_us": rng.random(n) * 100,
                         "run": rng.integers(0, 2, n)})


def test_random_tables_match_the_pandas_statement():
    rng = np.random.default_rng(7)
    found = 0
    for _ in range(30):
        tables = (random_table(rng, [0, 1, 2, 5]), random_table(rng, [0, 1, 3, 5]))
        if not len(tables[0]) or not len(tables[1]):
            continue
        prepared = side_calls(tables)
        all_pairs = [(0, 1), (1, 0), (2, 3), (5, 5)][: int(rng.integers(1, 5))]
        for rank in (None, 0, 1, 3, 5):
            pairs = [(x, y) for x, y in all_pairs if rank is None or y == rank]
            if not pairs:
                continue
            for select in ({}, {"cls": COLLECTIVE}, {"key": "k a"}, {"key": "b", "cls": COLLECTIVE}):
                expected = reference(tables, pairs, **select)
                assert matched_calls(*prepared, pairs, **select) == expected, (pairs, select)
                found += expected is not None
    assert found > 150  # most selections match some calls: the comparison is not of Nones


def test_a_real_trace_with_slower_kernels():
    trace = load_cached(str(TRACES / "hta_a100_nccl_rank0of2"))
    slower = slow_kernels(trace, 1.3)
    tables = tuple(gpu_invocations(t).assign(run=0) for t in (trace, slower))
    assert len(tables[0]) > 1000
    prepared = side_calls(tables)
    ranks = [(r, r) for r in sorted(set(tables[0]["rank"]))]
    gemm = next(k for k in tables[0]["key"].unique() if "gemm" in k)
    for select in ({}, {"cls": "COMPUTATION"}, {"key": gemm}):
        expected = reference(tables, ranks, **select)
        assert matched_calls(*prepared, ranks, **select) == expected
    got = matched_calls(*prepared, ranks, key=gemm)
    assert got.ratio == pytest.approx(1.3) and got.pairs == (tables[0]["key"] == gemm).sum()


def test_calls_are_numbered_as_pandas_counts_them() -> None:
    """The invocation table's call numbers (counted per rank on the keys' codes) are pandas'
    ``cumcount`` per (step, key) over the calls in start order: with steps (the steps common to
    the ranks kept) and without (one sample, the whole trace), on several ranks."""
    from perfreport.analyses.invocations import _common_steps, _in_steps, rank_invocations

    for name in ("hta_sampled_2of128rank", "odd_tiny_old_format_rank1", "hta_a100_nccl_rank0of2"):
        traces = load_cached(str(TRACES / name))
        table = gpu_invocations(traces)
        steps = _common_steps(traces)
        expected = []
        for t in traces:
            frame = rank_invocations(t)[["rank", "step", "key", "cls", "dur_us"]]
            frame = frame[_in_steps(frame["step"].to_numpy(), steps)] if len(steps) else frame.assign(step=-1)
            expected.append(frame.assign(call=frame.groupby(["step", "key"], sort=False).cumcount().astype("int64")))
        expected = pd.concat(expected, ignore_index=True)
        assert table["call"].max() > 0, name  # keys called more than once: numbers to check
        pd.testing.assert_frame_equal(table.reset_index(drop=True), expected[list(table.columns)], check_dtype=True)
