"""The gate on real run-to-run drift and short traces (issue 11): noise widths from the data,
runs as the unit of drift, matched GPU op calls below the step, and host-side wait on one run
per side. Real traces with changes injected in memory (tests/inject.py); every status, p-value
and sample count asserted is what the statistics give on those traces."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from perfreport.config import Config, StepsConfig, config_from_mapping
from perfreport.gate.metrics import side_data
from perfreport.gate.noise import paired_noise, run_noise, sign_test, step_noise, t_sf
from perfreport.gate.verdict import FAIL, INCONCLUSIVE, PASS, WARN, evaluate
from perfreport.pipeline import gate_side

from .conftest import TRACES, load_cached, shared_trace
from .inject import host_wait, rename_op, replicate_ranks, slow_kernels
from .test_verdict import coll_table, one, ops_table, steps_table

PAIR = "pair_kineto_resnet50_v100_dataloader"
LOADER = r"DataLoader"


# --- the statistics ----------------------------------------------------------------------------
def test_t_and_sign_tests_match_their_tables():
    # Student t upper tails (tables: t = 2.0 at 1 df 0.1476, at 4 df 0.0581; t = 6.314, 1 df: 0.05)
    assert t_sf(2.0, 1) == pytest.approx(0.14758, abs=1e-5)
    assert t_sf(2.0, 4) == pytest.approx(0.05806, abs=1e-5)
    assert t_sf(6.314, 1) == pytest.approx(0.05, abs=1e-4)
    assert t_sf(2.132, 4) == pytest.approx(0.05, abs=1e-4)
    assert t_sf(-2.0, 3) == pytest.approx(1 - t_sf(2.0, 3))
    # sign test: 5 of 5 larger is 1/32; 8 of 10 is (45 + 10 + 1) / 1024
    assert sign_test(5, 5) == (1 / 32, "exact")
    assert sign_test(8, 10)[0] == pytest.approx(56 / 1024)
    assert sign_test(0, 0) == (1.0, "exact")


def test_noise_widths_step_run_and_paired():
    b = np.array([100.0, 101, 99, 100.5, 99.5])
    c = b * 1.10
    n = step_noise(b, c)
    # MAD 0.5 -> σ 0.7413; SE of a median of 5: 1.2533 σ / √5
    se_b = 1.2533 * 1.4826 * 0.5 / math.sqrt(5)
    assert n.width == pytest.approx(math.hypot(se_b, 1.1 * se_b), rel=1e-4)
    assert n.widths(10.0) == pytest.approx(10.0 / n.width)
    # two baseline runs 8 % apart: the candidate's +8 % is within the drift
    runs = run_noise(np.r_[b, b * 1.08], np.r_[np.zeros(5), np.ones(5)], b * 1.08, np.zeros(5))
    assert runs.baseline == pytest.approx(104.0) and runs.candidate == pytest.approx(108.0)
    assert runs.between_run_sd == pytest.approx(8.0 / math.sqrt(2)) and runs.df == 1
    assert runs.p_value > 0.2
    # matched calls: every call +15 %: ratio 1.15, no residual noise, sign test 2^-n
    p = paired_noise(np.array([10.0, 20, 30, 40, 50, 60]), np.array([11.5, 23, 34.5, 46, 57.5, 69]))
    assert p.ratio == pytest.approx(1.15) and p.se == pytest.approx(0.0, abs=1e-12)
    assert p.p_value == pytest.approx(1 / 64) and p.pairs == 6 and p.widths() == math.inf


def _runs_side(runs: list[list[float]], **extra) -> object:
    tables = []
    for i, values in enumerate(runs):
        t = steps_table({0: {"step_time_us": values, **extra}})
        tables.append(t.assign(run=i))
    table = pd.concat(tables, ignore_index=True)
    return side_data("s", table, ops_table(table).assign(run=table["run"].to_numpy()[0]),
                     coll_table(table), ranks=(0,), gpus={0: "A100"}, steps=StepsConfig(auto_warmup=False))


def test_drift_between_baseline_runs_widens_what_counts_as_a_change():
    steady = [100.0e3, 101.0e3, 99.5e3, 100.5e3, 100.2e3]
    candidate = _runs_side([[v * 1.12 for v in steady]])
    # one run per side: +12 % is beyond the 5 % threshold, significant and many noise widths wide
    single = one(evaluate(_runs_side([steady]), candidate, Config()), "relative.step_time")
    assert single.status == FAIL and single.evidence.sample_kind == "step"
    assert single.evidence.p_value == pytest.approx(1 / 252) and single.evidence.noise_widths > 20
    # the baseline's two runs already differ by 8 %: +7.7 % over their mean is within the drift
    drifting = _runs_side([steady, [v * 1.08 for v in steady]])
    check = one(evaluate(drifting, candidate, Config()), "relative.step_time")
    # beyond the threshold but within the drift: no silent pass, a possible regression that warns
    assert check.status == WARN and check.evidence.sample_kind == "run" and check.evidence.possible_regression
    assert check.message.startswith("possible regression: step time +7.7 %")
    assert check.evidence.drift == "borrowed" and (check.evidence.baseline_runs, check.evidence.candidate_runs) == (2, 1)
    assert (check.evidence.baseline_steps, check.evidence.candidate_steps) == (10, 5)
    assert check.baseline_value == pytest.approx(1.04 * 100.2e3) and check.delta_pct == pytest.approx(7.69, abs=0.01)
    assert check.evidence.between_run_sd == pytest.approx(0.08 * 100.2e3 / math.sqrt(2))
    # t = 8.016 ms / hypot(s/√2, s) = 1.155 at 1 df
    assert check.evidence.noise_widths == pytest.approx(1.155, abs=0.001)
    assert check.evidence.p_value == pytest.approx(t_sf(1.155, 1), abs=1e-3) and check.evidence.p_value > 0.2
    assert "2 vs 1 runs (10 vs 5 steps)" in check.message
    # two steady baseline runs: the same candidate run is far beyond their drift
    steady_runs = _runs_side([steady, [v * 1.004 for v in steady]])
    check = one(evaluate(steady_runs, candidate, Config()), "relative.step_time")
    assert check.status == FAIL and check.evidence.sample_kind == "run" and check.evidence.p_value < 0.05
    assert check.evidence.noise_widths >= 3.0
    assert [n.kind for n in evaluate(steady_runs, candidate, Config()).notes] == ["runs"]


# --- real traces -------------------------------------------------------------------------------
def test_real_dataloader_change_keeps_failing_on_step_time():
    """workers 4 -> 0: the DataLoader iterator changed (a CPU op structure change) and kernels
    changed, so the step-time finding is not host-side wait only and keeps its level."""
    config = Config()
    b = gate_side("b", load_cached(str(shared_trace(f"{PAIR}/workers4"))), config)
    c = gate_side("c", load_cached(str(shared_trace(f"{PAIR}/workers0"))), config)
    v = evaluate(b, c, config)
    step = one(v, "relative.step_time")
    assert v.status == FAIL and step.status == FAIL
    assert step.delta_pct == pytest.approx(39.45, abs=0.05)
    assert step.evidence.p_value == pytest.approx(1 / 126)  # 4 vs 5 steps, perfectly separated
    assert step.evidence.noise_widths == pytest.approx(35.3, abs=0.1)
    assert "host-side wait" not in step.message


def test_host_side_wait_alone_warns_on_one_run_and_names_the_op():
    """+20 ms in the DataLoader op of every step of a real run: same kernels, counts, GPU time
    and CPU ops; only the GPU waits longer. One run per side cannot tell that from drift."""
    config = Config()
    traces = load_cached(str(shared_trace(f"{PAIR}/workers0")))
    b = gate_side("b", traces, config)
    c = gate_side("c", host_wait(traces, LOADER, 20_000.0), config)
    v = evaluate(b, c, config)
    step = one(v, "relative.step_time")
    assert v.status == WARN and step.status == WARN
    assert step.delta_pct == pytest.approx(11.33, abs=0.05) and step.evidence.p_value == pytest.approx(1 / 252)
    assert ("host-side wait in enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ grew with unchanged "
            "GPU work; record more baseline runs to judge drift") in step.message
    assert one(v, "relative.idle_pct").status == WARN
    assert one(v, "relative.compute").status == PASS
    strict = config_from_mapping({"stats": {"host_wait_level": "fail"}})
    assert evaluate(b, c, strict).status == FAIL
    # a structural change of the CPU ops next to it keeps the level: another DataLoader iterator
    other = rename_op(host_wait(traces, LOADER, 20_000.0), r"_SingleProcessDataLoaderIter",
                      "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__")
    v = evaluate(b, gate_side("c", other, config), config)
    assert v.status == FAIL and one(v, "relative.step_time").status == FAIL
    assert "host-side wait" not in one(v, "relative.step_time").message
    # a GPU-side change next to it keeps the level: every kernel 10 % slower as well
    both = gate_side("c", slow_kernels(host_wait(traces, LOADER, 20_000.0), 1.10), config)
    v = evaluate(b, both, config)
    assert v.status == FAIL and one(v, "relative.step_time").status == FAIL
    assert "host-side wait" not in one(v, "relative.step_time").message


def test_baseline_runs_absorb_host_side_drift_and_still_catch_gpu_regressions():
    """Baseline: the real run and a run with +20 ms of data loading per step (drift); the
    candidate with +10 ms sits inside that drift, so nothing fails; 10 % slower kernels do."""
    config = Config()
    traces = load_cached(str(shared_trace(f"{PAIR}/workers0")))
    base = gate_side("b", [traces, host_wait(traces, LOADER, 20_000.0)], config)
    assert base.runs == 2
    v = evaluate(base, gate_side("c", host_wait(traces, LOADER, 10_000.0), config), config)
    step = one(v, "relative.step_time")
    assert v.status == PASS and step.status == PASS and step.evidence.sample_kind == "run"
    assert (step.evidence.baseline_runs, step.evidence.baseline_steps) == (2, 10)
    slow = evaluate(base, gate_side("c", slow_kernels(traces, 1.10), config), config)
    compute = one(slow, "relative.compute")
    assert slow.status == FAIL and compute.status == FAIL and compute.evidence.sample_kind == "run"
    assert compute.delta_pct == pytest.approx(10.0, abs=0.05) and compute.evidence.p_value < 0.05


@pytest.mark.parametrize("job", ["hta_a100_rank0of16_cudagraph_triton", "hta_v100_ns_resolution"])
def test_ten_percent_slower_kernels_fail_on_steady_traces(job):
    config = Config()
    traces = load_cached(str(TRACES / job))
    v = evaluate(gate_side("b", traces, config), gate_side("c", slow_kernels(traces, 1.10), config), config)
    compute = one(v, "relative.compute")
    assert v.status == FAIL and compute.status == FAIL
    assert compute.delta_pct == pytest.approx(10.0, abs=0.05)
    assert compute.evidence.p_value == pytest.approx(1 / 70)  # 4 vs 4 steps, perfectly separated
    assert compute.evidence.noise_widths > 10


def test_one_step_per_rank_judged_from_matched_kernel_calls():
    """8 ranks with one judged step each (HTA's sampled 128-rank job, two real ranks cycled):
    every kernel +15 % fails on compute from 4,476 matched kernel invocations; against itself
    nothing fires."""
    config = Config()
    eight = replicate_ranks(load_cached(str(TRACES / "hta_sampled_2of128rank")), 8)
    b = gate_side("b", eight, config)
    assert b.steps.groupby("rank").size().tolist() == [1] * 8
    v = evaluate(b, gate_side("c", slow_kernels(eight, 1.15), config), config)
    compute = one(v, "relative.compute")
    assert v.status == FAIL and compute.status == FAIL
    assert compute.evidence.sample_kind == "kernel invocation" and compute.evidence.test == "sign test"
    assert compute.evidence.baseline_samples == compute.evidence.candidate_samples == 4476
    assert (compute.evidence.baseline_steps, compute.evidence.candidate_steps) == (1, 1)
    assert compute.evidence.p_value < 1e-300 and compute.delta_pct == pytest.approx(14.9, abs=0.05)
    comm = one(v, "relative.communication")
    assert comm.status == WARN and comm.evidence.sample_kind == "collective call"
    assert comm.evidence.baseline_samples == 40 and comm.evidence.p_value == pytest.approx(2.0 ** -40)
    gathers = one(v, "relative.collective_time[all_gather]")  # each collective call of one kind
    assert gathers.status == WARN and gathers.evidence.sample_kind == "collective call"
    assert gathers.evidence.baseline_samples == 8 and gathers.evidence.p_value == pytest.approx(2.0 ** -8)
    same = evaluate(b, gate_side("c", eight, config), config)
    assert same.status == PASS and not [c for c in same.checks if c.status != PASS]


def test_mean_checks_pool_rank_steps_when_steps_are_few():
    config = config_from_mapping({"relative": {"step_time": {"aggregation": "mean"}}})
    eight = replicate_ranks(load_cached(str(TRACES / "hta_sampled_2of128rank")), 8)
    b = gate_side("b", eight, config)
    from .test_verdict import perturb
    v = evaluate(b, gate_side("c", perturb(eight, scale=1.10), config), config)
    step = one(v, "relative.step_time")
    assert step.evidence.sample_kind == "rank-step" and step.evidence.baseline_samples == 8
    assert step.status == FAIL and step.evidence.p_value < 0.05
