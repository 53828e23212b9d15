"""Straggler detection: a hand-built late rank, HTA's top-k rule, and real two-rank numbers
checked against a plain-Python computation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfreport.analyses.stragglers import RANK_COLUMNS, late_start_counts, straggler_steps, stragglers
from perfreport.load import load

from .conftest import TRACES, load_cached
from .test_steps import cpu, kernel, launch, write_trace

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def job(tmp_path: Path, starts: list[float], wall: float = 1000.0) -> Path:
    """One rank per entry of ``starts``: two steps whose allreduce starts ``start`` µs into the
    step and ends at 900 µs for everybody (the early ranks wait in it)."""
    root = tmp_path / "job"
    for rank, s in enumerate(starts):
        events = []
        for step in (0, 1):
            t0 = step * wall
            events += [cpu(f"ProfilerStep#{step + 1}", t0, wall, cat="user_annotation"),
                       cpu("aten::mm", t0 + 10, s - 20), launch(t0 + s - 5, corr=10 * step + 1),
                       kernel(ALLREDUCE, t0 + s, 900 - s, corr=10 * step + 1)]
        write_trace(root, events, rank=rank, world=len(starts))
    return root


def test_late_rank_is_flagged(tmp_path: Path) -> None:
    traces = load(job(tmp_path, [500.0, 520.0, 800.0]), workers=1)
    steps = straggler_steps(traces)
    assert steps["late_start_us"].tolist() == [0.0, 0.0, 20.0, 20.0, 300.0, 300.0]
    assert (steps["kernel"] == ALLREDUCE).all()
    df = stragglers(traces)
    assert list(df.columns) == list(RANK_COLUMNS)
    assert df["late_start_us_median"].tolist() == [0.0, 20.0, 300.0]
    assert df["late_start_pct"].tolist() == pytest.approx([0.0, 2.0, 30.0])
    assert df["latest_steps"].tolist() == [0, 0, 2]
    assert df["is_straggler"].tolist() == [False, False, True]


def test_one_rank_or_no_steps_flags_nobody(tmp_path: Path) -> None:
    one = stragglers(load(job(tmp_path / "one", [800.0])))
    assert one["is_straggler"].tolist() == [False] and one["late_start_us_median"].tolist() == [0.0]
    none = stragglers(load(write_trace(tmp_path / "none", [cpu("aten::mm", 0, 5)])))
    assert none.empty and list(none.columns) == list(RANK_COLUMNS)
    assert straggler_steps(load(write_trace(tmp_path / "nc", [cpu("ProfilerStep#1", 0, 5)]))).empty


def test_hta_top_k_rule_counts_ties() -> None:
    metric = pd.DataFrame({"rank": [0, 1, 2, 0, 1, 2], "iteration": [5, 5, 5, 6, 6, 6],
                           "metric": [0.1, 0.3, 0.3, 0.5, 0.2, 0.1]})
    assert late_start_counts(metric, 1).to_dict() == {0: 1, 1: 1, 2: 1}  # tie at 0.3 flags both
    assert late_start_counts(metric, 2).to_dict() == {0: 1, 1: 2, 2: 1}
    one_iter = metric[metric["iteration"] == 5]
    assert late_start_counts(one_iter, 5).to_dict() == {0: 1, 1: 1, 2: 1}  # k > ranks: all flagged


def test_two_rank_trace_against_plain_python() -> None:
    traces = load_cached(str(TRACES / "hta_sampled_2of128rank"))
    got = straggler_steps(traces)
    kernel_name = got["kernel"].iloc[0]
    assert kernel_name.startswith("ncclKernel_SendRecv")
    offsets = {}
    for t in traces:
        names = t.decode(t.name)
        for step in (551, 552):
            span = [i for i in range(t.n_events) if names[i] == f"ProfilerStep#{step}"
                    and t.cat[i] != t.code("gpu_user_annotation")]
            k = [i for i in np.flatnonzero(t.kernels()) if names[i] == kernel_name and t.iteration[i] == step]
            last = max(k, key=lambda i: (t.ts[i], i))
            offsets[(t.rank, step)] = t.ts[last] - t.ts[span[0]]
    for row in got.itertuples():
        assert row.offset_us == offsets[(row.rank, row.step)]
        assert row.late_start_us == offsets[(row.rank, row.step)] - min(offsets[(r, row.step)] for r in (0, 1))
    df = stragglers(traces)
    assert df["late_start_us_median"].tolist() == [54.0, 253.5]
    assert df["is_straggler"].tolist() == [False, False]  # 0.04 % of a 617 ms step is noise


def test_one_straggler_test_beyond_the_step_to_step_noise() -> None:
    from perfreport.analyses.stragglers import late_verdict, step_noise_us

    # rank 0's steps swing by ±400 µs around 10 ms, rank 1's by ±100 µs: MADs 400 and 100 µs
    steps = pd.DataFrame({"rank": [0, 0, 0, 1, 1, 1], "wall_us": [9600.0, 10000.0, 10400.0, 9900.0, 10000.0, 10100.0]})
    noise = step_noise_us(steps)
    assert noise == pytest.approx(1.4826 * (400 + 100) / 2)  # the median over ranks of 1.4826 x MAD
    # 600 µs late: 6 % of the step, but under twice the noise (741 µs): not measurably late
    assert not late_verdict(600.0, 10000.0, noise, 2)
    assert late_verdict(800.0, 10000.0, noise, 2)  # above both floors
    assert not late_verdict(400.0, 10000.0, 0.0, 2)  # 4 % of the step: not enough, however steady
    assert not late_verdict(800.0, 10000.0, noise, 1)  # one rank: nobody to wait
    assert not late_verdict(-800.0, 10000.0, 0.0, 2) and not late_verdict(float("nan"), 10000.0, 0.0, 2)
