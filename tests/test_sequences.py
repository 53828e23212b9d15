"""Frequent kernel sequences under an operator: HTA's oracle numbers, an independent containment
check on a real trace, and the outermost-call rule on hand-built traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from perfreport.analyses.sequences import COLUMNS, kernel_sequences
from perfreport.load import load

from .conftest import ORACLE, TRACES, load_cached
from .test_steps import cpu, kernel, launch, write_trace


def test_alexnet_linear_matches_hta_oracle() -> None:
    df = kernel_sequences(load_cached(str(TRACES / "hta_a100_alexnet_benchmark")), operator="aten::linear")
    hta = pd.read_csv(ORACLE / "hta_a100_alexnet_benchmark" / "frequent_cuda_kernel_sequences__rank0.csv")
    assert len(df) == 1 and df.loc[0, "pattern"] == hta.loc[0, "pattern"]
    assert df.loc[0, "count"] == hta.loc[0, "count"] == 2
    assert df.loc[0, "kernel_dur_sum_us"] == hta.loc[0, "GPU kernel duration (us)"] == 208.0
    assert df.loc[0, "cpu_dur_us"] == hta.loc[0, "CPU op duration (us)"] == 10652.0
    assert df.loc[0, "kernels"] == 3 and df.loc[0, "operator"] == "aten::linear"


def test_patterns_equal_time_containment_on_real_trace() -> None:
    t = load_cached(str(TRACES / "hta_a100_alexnet_benchmark"))[0]
    df = kernel_sequences(load_cached(str(TRACES / "hta_a100_alexnet_benchmark")), operator="aten::conv2d")
    names = t.decode(t.name)
    # brute force: GPU events whose launch starts inside a conv2d call on the same thread
    expected: dict[str, list[float]] = {}
    roots = [i for i in range(t.n_events) if names[i] == "aten::conv2d" and t.ph[i] == t.code("X")]
    gpu = np.flatnonzero(t.gpu_activity() & (t.linked >= 0))
    for r in roots:
        lo, hi = t.ts[r], t.ts[r] + t.dur[r]
        mine = [g for g in gpu.tolist() if lo <= t.ts[t.linked[g]] <= hi and t.tid[t.linked[g]] == t.tid[r]]
        if len(mine) < 3:
            continue
        mine.sort(key=lambda g: (t.ts[g], g))
        key = "|".join(["aten::conv2d", *[names[g] for g in mine]])
        acc = expected.setdefault(key, [0, 0.0, 0.0])
        acc[0] += 1
        acc[1] += sum(t.dur[g] for g in mine)
        acc[2] += t.dur[r]
    got = {row.pattern: [row.count, row.kernel_dur_sum_us, row.cpu_dur_us] for row in df.itertuples()}
    assert got == expected and sum(v[0] for v in got.values()) == 10


def test_outermost_calls_at_any_depth(tmp_path: Path) -> None:
    events = [
        # a linear at the top level, with a nested linear inside (counted once, as the outer)
        cpu("aten::linear", 0, 100), cpu("aten::linear", 5, 90),
        launch(10, 1), kernel("a", 200, 5, 1), launch(20, 2), kernel("b", 210, 5, 2),
        launch(30, 3), kernel("c", 220, 5, 3),
        # a linear one level deeper, under a module annotation, not under another linear
        cpu("Module", 300, 100, cat="user_annotation"), cpu("aten::linear", 310, 80),
        launch(320, 4), kernel("a", 500, 6, 4), launch(330, 5), kernel("b", 510, 6, 5),
        launch(340, 6), kernel("c", 520, 6, 6),
        # too few kernels
        cpu("aten::linear", 600, 10), launch(601, 7), kernel("a", 700, 1, 7),
    ]
    df = kernel_sequences(load(write_trace(tmp_path / "a", events)), operator="aten::linear")
    assert df[["pattern", "count", "kernel_dur_sum_us", "cpu_dur_us"]].values.tolist() == [
        ["aten::linear|a|b|c", 2, 33.0, 180.0]]
    assert kernel_sequences(load(write_trace(tmp_path / "b", events)), operator="aten::linear", min_kernels=1)[
        "count"].tolist() == [2, 1]


def test_edge_cases(tmp_path: Path) -> None:
    no_gpu = load(write_trace(tmp_path / "a", [cpu("aten::linear", 0, 10)]))
    df = kernel_sequences(no_gpu, operator="aten::linear")
    assert df.empty and list(df.columns) == list(COLUMNS)
    assert kernel_sequences(no_gpu, operator="aten::nothing").empty
    assert kernel_sequences(no_gpu).empty
