"""perfreport.gate.metrics._per_step: the per-(run, step) aggregate of a check's samples. A
table with one row per (run, step) (one rank) skips pandas' grouping; both ways give the same
values, in the same order, as a plain groupby over random tables with NaN, repeats and runs."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from perfreport.gate import metrics


def _grouped(values: pd.Series, frame: pd.DataFrame, how: str, worse: str):
    data = pd.DataFrame({"run": frame["run"].to_numpy(), "step": frame["step"].to_numpy(),
                         "v": values.to_numpy(dtype=np.float64)}).dropna()
    if not len(data):
        return np.empty(0), np.empty(0, dtype=np.int64)
    g = data.groupby(["run", "step"])["v"]
    out = g.mean() if how == "mean" else g.max() if worse == metrics.HIGHER else g.min()
    return out.to_numpy(), out.index.get_level_values("run").to_numpy(dtype=np.int64)


def test_per_step_values_are_the_groupby_s_with_or_without_repeated_steps():
    rng = np.random.default_rng(7)
    fast_path = 0
    for trial in range(200):
        k = int(rng.integers(0, 25))
        if trial % 2:  # one row per (run, step), shuffled, in up to three runs
            runs = rng.integers(0, 3, k)
            steps = rng.permutation(k)
            fast_path += 1
        else:  # several ranks: repeated (run, step)
            runs, steps = rng.integers(0, 2, k), rng.integers(0, 6, k)
        v = rng.normal(100.0, 10.0, k)
        v[rng.random(k) < 0.2] = np.nan
        frame, values = pd.DataFrame({"run": runs, "step": steps}), pd.Series(v)
        for how, worse in itertools.product(("mean", "worst"), (metrics.HIGHER, metrics.LOWER)):
            got, expected = metrics._per_step(values, frame, how, worse), _grouped(values, frame, how, worse)
            assert np.array_equal(got[0], expected[0]) and np.array_equal(got[1], expected[1])
            assert got[1].dtype == np.int64
    assert fast_path == 100
