"""Grouped (numpy group aggregations) against pandas groupby on the same frames."""

from __future__ import annotations

import importlib

import numpy as np
import pandas as pd
import pytest

from perfreport.analyses.grouping import Grouped


def frame(seed: int, n: int, missing_names: bool = False) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    value = rng.random(n) * 1000
    value[rng.random(n) < 0.15] = np.nan
    name = rng.choice(["mm", "conv", "Memcpy HtoD", "ncclKernel"], n).astype(object)
    if missing_names:  # rows pandas drops from the groups (and Grouped, from its rows)
        name[rng.random(n) < 0.1] = None
    return pd.DataFrame({
        "rank": rng.integers(0, 3, n),
        "step": rng.integers(-1, 5, n),
        "name": name,
        "value": value,
        "full": rng.random(n) * 100,  # no value missing: the aggregations' shortcut
        "none": np.full(n, np.nan),  # every value missing (a gloo rank's message sizes): the other shortcut
        "count": rng.integers(0, 9, n),
        "flag": rng.random(n) < 0.3,
    })


@pytest.mark.parametrize("seed, n", [(0, 2000), (1, 40), (2, 1), (3, 0)])
@pytest.mark.parametrize("keys", [["rank"], ["rank", "name"], ["rank", "step", "name"]])
@pytest.mark.parametrize("missing_names", [False, True])
def test_grouped_equals_pandas_groupby(seed: int, n: int, keys: list[str], missing_names: bool) -> None:
    f = frame(seed, n, missing_names)
    g, p = Grouped(f, keys), f.groupby(keys, sort=True)
    expected_keys = p.size().reset_index()[keys]
    got_keys = g.frame({})
    assert got_keys.shape == expected_keys.shape
    for k in keys:
        assert got_keys[k].tolist() == expected_keys[k].tolist()
    np.testing.assert_array_equal(g.size(), p.size().to_numpy())
    np.testing.assert_array_equal(g.sum("count"), p["count"].sum().to_numpy())
    np.testing.assert_array_equal(g.sum("flag"), p["flag"].sum().to_numpy())
    np.testing.assert_array_equal(g.max("count"), p["count"].max().to_numpy())
    np.testing.assert_array_equal(g.count("value"), p["value"].count().to_numpy())
    # order statistics bit for bit; sums and means to the last bits (pandas compensates)
    np.testing.assert_array_equal(g.median("value"), p["value"].median().to_numpy())
    np.testing.assert_array_equal(g.quantile("value", 0.95), p["value"].quantile(0.95).to_numpy())
    np.testing.assert_array_equal(g.max("value"), p["value"].max().to_numpy())
    np.testing.assert_array_equal(g.min("value"), p["value"].min().to_numpy())
    np.testing.assert_allclose(g.sum("value"), p["value"].sum().to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(g.sum("value", min_count=1), p["value"].sum(min_count=1).to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(g.mean("value"), p["value"].mean().to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(g.std("value"), p["value"].std().to_numpy(), rtol=1e-9)
    for how in ("median", "max", "min", "count"):
        np.testing.assert_array_equal(getattr(g, how)("full"), getattr(p["full"], how)().to_numpy())
    for how in ("sum", "mean", "std"):
        np.testing.assert_allclose(getattr(g, how)("full"), getattr(p["full"], how)().to_numpy(), rtol=1e-9)
    for how in ("sum", "mean", "std", "median", "max", "min", "count"):
        np.testing.assert_array_equal(getattr(g, how)("none"), getattr(p["none"], how)().to_numpy())
    np.testing.assert_array_equal(g.sum("none", min_count=1), p["none"].sum(min_count=1).to_numpy())
    assert g.sum("value").dtype == g.mean("value").dtype == np.float64  # also with no rows at all
    if n > 100:
        assert g.n >= 3 and np.isnan(g.sum("value", min_count=1)).sum() == 0  # groups are big enough here


def test_rows_with_a_missing_key_are_dropped() -> None:
    f = pd.DataFrame({"k": ["a", None, "b", "a"], "v": [1.0, 2.0, 3.0, 4.0]})
    g = Grouped(f, ["k"])
    assert g.frame({"v": g.sum("v")}).to_dict("list") == {"k": ["a", "b"], "v": [5.0, 3.0]}


@pytest.mark.parametrize("seed", range(4))
def test_categorical_keys_group_as_their_texts(seed: int) -> None:
    """A categorical key groups by its codes: categories in any order (the groups still come in
    text order), unused categories, missing values (dropped), and a dict of a Categorical alike;
    the keys of the result read as texts."""
    rng = np.random.default_rng(seed)
    texts = np.array(["gloo:all_reduce", "", "nccl:broadcast", "all_gather", "b"], dtype=object)
    values = texts[rng.integers(0, len(texts), 400)]
    values[rng.random(400) < 0.05] = None
    order = list(rng.permutation(["zz-unused", *texts]))  # categories unsorted, one never used
    frame = pd.DataFrame({"step": rng.integers(0, 5, 400), "k": pd.Categorical(values, categories=order),
                          "v": rng.random(400)})
    plain = frame.assign(k=values)
    for data in (frame, {"step": frame["step"].to_numpy(), "k": frame["k"].array, "v": frame["v"].to_numpy()}):
        g = Grouped(data, ["step", "k"])
        expected = Grouped(plain, ["step", "k"])
        got = g.frame({"v": g.sum("v"), "n": g.size()})
        assert got.to_dict("list") == expected.frame({"v": expected.sum("v"), "n": expected.size()}).to_dict("list")
        p = plain.groupby(["step", "k"], sort=True)["v"].sum()
        assert got["k"].tolist() == p.index.get_level_values("k").tolist()
        assert not isinstance(got["k"].dtype, pd.CategoricalDtype)


def test_many_high_cardinality_keys_keep_their_order() -> None:
    # seven keys of ~3000 values each: the mixed-radix code would overflow int64 without renumbering
    rng = np.random.default_rng(0)
    f = pd.DataFrame({k: rng.integers(0, 3000, 5000) * 10**9 for k in "abcdefg"})
    g, p = Grouped(f, list("abcdefg")), f.groupby(list("abcdefg")).size()
    assert g.n == len(p) > 4900
    np.testing.assert_array_equal(g.size(), p.to_numpy())
    np.testing.assert_array_equal(g.frame({})[list("abcdefg")].to_numpy(), p.reset_index()[list("abcdefg")].to_numpy())


@pytest.mark.parametrize("layout", ["shuffled", "sorted", "sorted, no NaN", "larger groups in order",
                                    "one row a group", "one row a group, sorted, no NaN"])
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("c_loop", [True, False])
def test_code_sums_are_pandas_grouped_sums_to_the_last_bit(seed: int, layout: str, c_loop: bool,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """code_sums against ``groupby(code, sort=True).sum()``: the same codes and sums bit for bit
    (pandas compensates its float sums: a plain sum of a group of several rows would differ),
    with groups of one and of many rows, NaN (a group of NaN sums to 0), -0.0, magnitudes from
    1e-5 to 1e16 (where the compensation shows), and codes sparse or dense in their range; codes
    in order with and without NaN (pandas then adds runs by reduceat where it can), and codes
    out of order whose groups of several rows alone come in order (their rows, summed apart,
    must still take pandas' compensated path). ``c_loop``: pandas' loop run by the C extension
    ``_groupsum`` where it is built, else by numpy and pandas (as on a machine without it)."""
    from perfreport.analyses.grouping import code_sums

    _c_loop_or_not(c_loop, monkeypatch)

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5000))
    span = int(rng.choice([n // 3 + 1, 2 * n, 50 * n]))  # many rows a group / mostly one / a range too wide for a table
    code = rng.integers(0, span, n)
    if layout.startswith("one row a group"):  # a single rank's (step, op) sums: every code once
        code = rng.permutation(max(span, n))[:n]
        span = max(span, n)
    if "sorted" in layout:
        code = np.sort(code)
    elif layout == "larger groups in order":
        counts = np.bincount(code, minlength=span)
        repeated = counts[code] > 1
        code[repeated] = np.sort(code[repeated])
        singles = np.flatnonzero(~repeated)
        code[singles] = code[singles][::-1]  # the one-row groups out of order
    dur = rng.standard_normal(n) * 10.0 ** rng.integers(-5, 17, n)
    if not layout.endswith("no NaN"):
        dur[rng.random(n) < 0.05] = np.nan
    if layout == "larger groups in order":  # NaN in one-row groups only: the larger ones' rows have none
        dur[repeated & np.isnan(dur)] = 1.0
        dur[singles[:1]] = np.nan
    dur[rng.random(n) < 0.05] = -0.0
    count = rng.integers(0, 1000, n)
    want = pd.DataFrame({"count": count, "dur_us": dur}).groupby(code, sort=True).sum()
    codes, sums = code_sums(code, span, {"count": count, "dur_us": dur})
    np.testing.assert_array_equal(codes, want.index.to_numpy())
    assert sums["count"].dtype == np.int64 and np.array_equal(sums["count"], want["count"].to_numpy())
    assert np.array_equal(sums["dur_us"].view(np.int64), want["dur_us"].to_numpy().view(np.int64))  # -0.0 and all


def _c_loop_or_not(c_loop: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The C extension's compensated loop (skipped where it is not built), or none."""
    grouping = importlib.import_module("perfreport.analyses.grouping")
    if c_loop and grouping._groupsum is None:
        pytest.skip("the C extension _groupsum is not built")
    if not c_loop:
        monkeypatch.setattr(grouping, "_groupsum", None)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("c_loop", [True, False])
def test_key_sums_are_pandas_grouped_sums_to_the_last_bit(seed: int, c_loop: bool,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """key_sums against ``groupby(key, sort=False).sum()`` sorted by key, bit for bit: keys of
    one and two rows (NaN skipped, -0.0, infinities, magnitudes where rounding shows, keys in
    runs (pandas 3.1 then sums by reduceat where no value is NaN) or spread, offset far from 0),
    a key of three rows more (pandas' compensated loop on its rows), and keys over a range far
    wider than their count (numbered by a sort instead of a presence table). ``c_loop`` as in
    the test above."""
    from perfreport.analyses.grouping import key_sums

    _c_loop_or_not(c_loop, monkeypatch)

    def same_as_pandas(key, values) -> None:
        want = pd.DataFrame(values).groupby(key, sort=False).sum().sort_index()
        got = key_sums(key, values)
        np.testing.assert_array_equal(got[0], want.index.to_numpy())
        for name in values:
            assert np.array_equal(got[1][name].view(np.int64), want[name].to_numpy().view(np.int64))

    rng = np.random.default_rng(seed)
    n_keys = int(rng.integers(1, 3000))
    keys = 10**9 + rng.choice(3 * n_keys, n_keys, replace=False)  # a step x n_ids range, far from 0
    key = np.concatenate([keys, rng.choice(keys, int(rng.integers(0, n_keys + 1)), replace=False)])
    if seed % 4 == 0:
        key = np.sort(key)  # each key's rows one run
    else:
        rng.shuffle(key)
    values = {name: rng.standard_normal(len(key)) * 10.0 ** rng.integers(-5, 17, len(key)) for name in ("a", "b")}
    for v in values.values():
        v[rng.random(len(key)) < 0.05] = rng.choice([np.nan, -0.0, np.inf, -np.inf])
    if seed % 2 == 0:  # some sides have no NaN at all
        values["a"][np.isnan(values["a"])] = 1.0
        values["b"][np.isnan(values["b"])] = 2.0
    same_as_pandas(key, values)
    three = np.concatenate([key, key[:1], key[:1]])  # a key of three rows
    same_as_pandas(three, {name: np.r_[v, rng.standard_normal(2) * 1e16] for name, v in values.items()})
    same_as_pandas(key * 1000, values)  # a range far wider than the keys


@pytest.mark.parametrize("seed", range(4))
def test_tuples_in_is_the_multiindex_membership(seed: int) -> None:
    """tuples_in against ``MultiIndex.isin`` on (run, rank, step)-like tuples: negative steps
    (the whole trace is step -1), tuples absent from either side, ranges wide enough that the
    members' joint code would overflow (the MultiIndex way then), no rows or no tuples; members
    of one value on both sides (a one-rank side's run and rank), or one value on each side but
    not the same, and every member of one value."""
    from perfreport.model import tuples_in

    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(0, 3000)), int(rng.integers(0, 300))
    wide = 10 ** 17  # seed 3: steps so far apart that three members do not fit one int64
    rows = [rng.integers(0, 3, n), rng.integers(0, 8, n), rng.integers(-1, 40, n) * (wide if seed == 3 else 1)]
    among = [rng.integers(0, 3, m), rng.integers(0, 8, m), rng.integers(-1, 40, m) * (wide if seed == 3 else 1)]
    one_rank = [np.zeros(n, np.int64), np.full(n, 5), rows[2]], [np.zeros(m, np.int64), np.full(m, 5), among[2]]
    other_rank = [np.zeros(n, np.int64), np.full(n, 5), rows[2]], [np.zeros(m, np.int64), np.full(m, 6), among[2]]
    constant = [np.zeros(n, np.int64), np.full(n, 5)], [np.zeros(m, np.int64), np.full(m, 5)]
    extremes = np.array([-9 * 10**18, -1, 0, 9 * 10**18])  # a first member whose range passes 2**63
    wide_first = [extremes[rows[0]], rows[1]], [extremes[among[0] + 1], among[1]]
    for r, a in ((rows, among), one_rank, other_rank, constant, wide_first):
        want = pd.MultiIndex.from_arrays(r).isin(pd.MultiIndex.from_arrays(a)) if n else np.zeros(0, bool)
        got = tuples_in(r, a)
        assert got.dtype == bool and np.array_equal(got, want)
    want = pd.MultiIndex.from_arrays(rows).isin(pd.MultiIndex.from_arrays(among)) if n else np.zeros(0, bool)
    assert want.any() or not n or not m or seed == 3
    assert not tuples_in(*other_rank).any() and (tuples_in(*constant).all() or not m)


@pytest.mark.parametrize("seed", range(4))
def test_distinct_rows_are_numpys_unique_rows(seed: int) -> None:
    """distinct_rows gives np.unique(axis=0)'s first occurrences and row numbers: one to four
    integer columns of small ranges, wide ranges, ranges too wide for one integer per row
    (the lexsort), negative values, and no rows."""
    from perfreport.analyses.grouping import distinct_rows

    rng = np.random.default_rng(seed)
    for trial in range(60):
        n, k = int(rng.integers(0, 300)), int(rng.integers(1, 5))
        low, high = [(-1, 5), (-10**6, 10**6), (-2**62, 2**62), (0, 3)][trial % 4]
        matrix = rng.integers(low, high, (n, k)).astype(np.int64)
        if trial % 4 == 3:
            matrix *= 10**15  # few values, far apart
        first, inverse = distinct_rows(matrix)
        if n:
            _, want_first, want_inverse = np.unique(matrix, axis=0, return_index=True, return_inverse=True)
            np.testing.assert_array_equal(first, want_first)
            np.testing.assert_array_equal(inverse, want_inverse.ravel())
        else:
            assert len(first) == len(inverse) == 0


@pytest.mark.parametrize("seed", range(3))
def test_run_ids_by_bytes_are_those_column_by_column(seed: int, monkeypatch) -> None:
    """run_ids tells runs apart as byte strings where a length has few runs per code (kernel
    sequences: few calls of many kernels) and column by column elsewhere: the same ids and the
    same first runs as the column-by-column path alone, for codes of 1 and 2 bytes (up to 300
    distinct, negative too), short and long runs, repeated and not; more than 65,536 distinct
    codes are not packed."""
    from perfreport.analyses import grouping
    from perfreport.analyses.grouping import run_ids

    rng = np.random.default_rng(seed)
    packed_lengths = set()
    for trial in range(80):
        alphabet = [3, 40, 300, 100_000][trial % 4]
        pattern = rng.integers(0, alphabet, int(rng.integers(1, 600))) * 7 - 11  # not from 0, negative too
        codes = np.tile(pattern, int(rng.integers(1, 5))).astype(np.int64)
        starts = np.unique(np.r_[0, rng.integers(0, len(codes), int(rng.integers(0, 300)))])
        got = run_ids(codes, starts)
        with monkeypatch.context() as m:
            m.setattr(grouping, "_packed", lambda codes: None)
            want = run_ids(codes, starts)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        if grouping._packed(codes) is not None:
            packed_lengths.add(grouping._packed(codes).dtype.itemsize)
    assert packed_lengths == {1, 2}
    assert grouping._packed(np.arange(70_000)) is None and grouping._packed(np.arange(65_536)) is not None
