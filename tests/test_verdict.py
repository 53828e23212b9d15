"""perfreport.gate.verdict: checks, statuses and notes on hand-built per-step tables, and the
gate's two promises on real traces: no false alarm on the same configuration (itself, halves
of one run, ±3 % noise on every duration), and a caught regression when one is injected.

Hand-built sides give exact expectations (medians, p-values from 1 / C(n1+n2, n1)); real
traces are perturbed in memory by :func:`perturb` (a copy of each rank with scaled times).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math

import numpy as np
import pandas as pd
import pytest

from perfreport.analyses.collectives import collectives_per_step
from perfreport.analyses.diff import op_steps
from perfreport.analyses.step_metrics import COLUMNS, step_metrics
from perfreport.config import Config, StepsConfig, Waiver, config_from_mapping
from perfreport.gate.metrics import side_data, warmup_steps
from perfreport.gate.verdict import FAIL, INCONCLUSIVE, PASS, WARN, evaluate, waiver_matches
from perfreport.model import TraceSet
from perfreport.pipeline import gate_side

from .conftest import TRACES, load_cached, shared_trace

NO_WARMUP = StepsConfig(auto_warmup=False)


# --- builders --------------------------------------------------------------------------------
def steps_table(ranks: dict[int, dict[str, list]], n: int | None = None) -> pd.DataFrame:
    """A step_metrics-shaped table: per rank, column -> per-step values (others get neutral values)."""
    frames = []
    for rank, cols in ranks.items():
        lists = [v for v in cols.values() if not isinstance(v, (int, float))]
        length = n or (len(lists[0]) if lists else 5)
        base = {c: np.zeros(length) for c in COLUMNS}
        base.update(rank=np.full(length, rank), step=np.arange(10, 10 + length), step_time_us=np.full(length, 1e5),
                    gpu_window_us=np.full(length, 1e5), gpu_busy_us=np.full(length, 8e4),
                    compute_us=np.full(length, 8e4),
                    idle_us=np.full(length, 2e4), idle_pct=np.full(length, 20.0), compute_pct=np.full(length, 80.0),
                    overlap_pct=np.full(length, np.nan), launches=np.full(length, 1000), kernels=np.full(length, 900),
                    syncs=np.full(length, 2), memcpy_count=np.full(length, 2))
        for c, v in cols.items():
            base[c] = np.asarray(v, dtype=float) if not isinstance(v, (int, float)) else np.full(length, v, dtype=float)
        frames.append(pd.DataFrame(base))
    return pd.concat(frames, ignore_index=True)


def ops_table(steps: pd.DataFrame, kernels: dict[str, tuple[float, float]] | None = None) -> pd.DataFrame:
    """op_steps rows for every sample: kernel key -> (calls, dur_us) per step."""
    rows = []
    for rank, step in steps[["rank", "step"]].itertuples(index=False):
        for key, (count, dur) in (kernels or {"gemm": (10, 5e4)}).items():
            if count:
                rows.append({"rank": rank, "step": step, "kind": "gpu", "key": key, "count": count, "dur_us": dur})
    return pd.DataFrame(rows, columns=["rank", "step", "kind", "key", "count", "dur_us"])


def coll_table(steps: pd.DataFrame, calls: dict[str, tuple[float, float]] | None = None) -> pd.DataFrame:
    rows = [{"rank": r, "step": s, "kind": k, "process_group": "0", "count": c, "dur_us": d, "exposed_us": 0.0,
             "msg_bytes": np.nan}
            for r, s in steps[["rank", "step"]].itertuples(index=False) for k, (c, d) in (calls or {}).items()]
    return pd.DataFrame(rows, columns=["rank", "step", "kind", "process_group", "count", "dur_us", "exposed_us",
                                       "msg_bytes"])


def side(ranks: dict[int, dict[str, list]], *, kernels=None, collectives=None, gpu="A100", steps=NO_WARMUP,
         label="side", per_step_kernels: dict[int, dict] | None = None):
    table = steps_table(ranks)
    ops = ops_table(table, kernels)
    if per_step_kernels:  # extra keys only in some steps: {step index: {key: (calls, dur)}}
        extra = []
        for i, keys in per_step_kernels.items():
            for rank in ranks:
                step = 10 + i
                extra += [{"rank": rank, "step": step, "kind": "gpu", "key": k, "count": c, "dur_us": d}
                          for k, (c, d) in keys.items()]
        ops = pd.concat([ops, pd.DataFrame(extra)], ignore_index=True)
    return side_data(label, table, ops, coll_table(table, collectives), ranks=tuple(ranks),
                     gpus={r: gpu for r in ranks}, steps=steps)


def one(verdict, check_id: str):
    found = [c for c in verdict.checks if c.id == check_id]
    assert len(found) == 1, (check_id, [c.id for c in verdict.checks])
    return found[0]


STABLE = [100.0e3, 101.0e3, 99.5e3, 100.5e3, 100.2e3]


# --- relative checks ---------------------------------------------------------------------------
def test_significant_step_time_regression_fails_with_evidence():
    b = side({0: {"step_time_us": STABLE}})
    c = side({0: {"step_time_us": [v * 1.10 for v in STABLE]}})
    v = evaluate(b, c, Config())
    check = one(v, "relative.step_time")
    assert v.status == FAIL and check.status == FAIL
    assert check.baseline_value == pytest.approx(np.median(STABLE))
    assert check.candidate_value == pytest.approx(np.median(STABLE) * 1.10)
    assert check.delta_pct == pytest.approx(10.0)
    assert check.evidence.p_value == pytest.approx(1 / math.comb(10, 5))
    assert check.evidence.baseline_samples == check.evidence.candidate_samples == 5
    assert check.evidence.baseline_values == tuple(STABLE)
    lo, hi = check.evidence.interval
    assert lo <= 1.10 <= hi
    assert v.findings[0] is check and v.checks[0] is check  # failures come first
    assert "+10.0 %" in check.message and "significant" in check.message


def test_small_changes_pass_and_unprovable_ones_are_inconclusive():
    b = side({0: {"step_time_us": STABLE}})
    assert one(evaluate(b, side({0: {"step_time_us": [x * 1.03 for x in STABLE]}}), Config()),
               "relative.step_time").status == PASS
    few = evaluate(side({0: {"step_time_us": STABLE[:3]}}), side({0: {"step_time_us": [x * 1.2 for x in STABLE[:3]]}}),
                   Config())
    check = one(few, "relative.step_time")
    assert check.status == WARN and "too few samples" in check.message and few.status == WARN
    assert check.evidence.possible_regression and "record at least 4 profiler steps" in check.evidence.to_decide
    assert check.evidence.min_detectable == math.inf
    quiet = evaluate(side({0: {"step_time_us": STABLE[:3]}}), side({0: {"step_time_us": [x * 1.2 for x in STABLE[:3]]}}),
                     config_from_mapping({"stats": {"inconclusive_level": "pass"}}))
    assert one(quiet, "relative.step_time").status == INCONCLUSIVE and quiet.status == PASS
    # the median moved 10 %, but the samples overlap: not significant
    noisy_b = side({0: {"step_time_us": [80e3, 100e3, 120e3, 95e3, 130e3]}})
    noisy_c = side({0: {"step_time_us": [110e3, 90e3, 125e3, 105e3, 140e3]}})
    check = one(evaluate(noisy_b, noisy_c, Config()), "relative.step_time")
    assert check.status == WARN and "not significant" in check.message and check.evidence.drift == "unknown"
    assert check.evidence.to_decide.startswith("record 2 more baseline runs")


def test_floor_ignores_changes_too_small_to_matter():
    """GPU busy +40 % but only 40 µs per 100 ms step: under the 1 %-of-step floor (1 ms). Compute
    has no step-share floor (slower kernels matter even while the host hides them), only 50 µs."""
    b = side({0: {"gpu_busy_us": [100.0, 101, 99, 100, 100], "compute_us": [100.0, 101, 99, 100, 100]}})
    c = side({0: {"gpu_busy_us": [140.0, 141, 139, 140, 140], "compute_us": [140.0, 141, 139, 140, 140]}})
    verdict = evaluate(b, c, Config())
    check = one(verdict, "relative.gpu_busy")
    assert check.status == PASS and check.threshold.floor_us == pytest.approx(1000.0)
    compute = one(verdict, "relative.compute")
    assert compute.status == PASS and compute.threshold.floor_us == pytest.approx(50.0)  # 40 µs < 50 µs
    low_floor = config_from_mapping({"relative": {"compute": {"min_change_us": 10}}})
    assert one(evaluate(b, c, low_floor), "relative.compute").status == FAIL  # compute fails by default
    slower = side({0: {"gpu_busy_us": [100.0, 101, 99, 100, 100], "compute_us": [200.0, 202, 198, 200, 200]}})
    assert one(evaluate(b, slower, Config()), "relative.compute").status == FAIL  # +100 µs: beyond 50 µs


def test_percentage_metrics_use_points():
    b = side({0: {"idle_pct": [20.0, 21, 19, 20, 20.5]}})
    c = side({0: {"idle_pct": [30.0, 31, 29, 30, 30.5]}})
    check = one(evaluate(b, c, Config()), "relative.idle_pct")
    assert check.status == FAIL and check.delta == pytest.approx(10.0) and check.unit == "pct"
    c2 = side({0: {"idle_pct": [23.0, 24, 22, 23, 23.5]}})
    assert one(evaluate(b, c2, Config()), "relative.idle_pct").status == PASS


def test_lost_overlap_and_exposed_communication():
    b = side({0: {"overlap_pct": [90.0, 91, 89, 90, 90], "comm_us": 10e3,
                  "exposed_comm_us": [1e3, 0.9e3, 1.1e3, 1e3, 1e3]}})
    c = side({0: {"overlap_pct": [10.0, 11, 9, 10, 10], "comm_us": 10e3,
                  "exposed_comm_us": [9e3, 8.9e3, 9.1e3, 9e3, 9e3]}})
    v = evaluate(b, c, Config())
    assert one(v, "relative.overlap_pct").status == FAIL
    assert one(v, "relative.exposed_communication").status == FAIL
    # no communication on either side: no overlap or communication checks at all
    v0 = evaluate(side({0: {"step_time_us": STABLE}}), side({0: {"step_time_us": STABLE}}), Config())
    assert not [ch for ch in v0.checks if ch.name in ("overlap_pct", "communication", "exposed_communication")]
    # communication only in the candidate: overlap cannot be compared
    only = evaluate(side({0: {"step_time_us": STABLE}}), c, Config())
    assert one(only, "relative.overlap_pct").status == INCONCLUSIVE


# --- absolute checks ---------------------------------------------------------------------------
def test_absolute_limits_judge_new_violations_only():
    b = side({0: {"idle_pct": [20.0, 21, 19, 20, 20]}})
    c = side({0: {"idle_pct": [60.0, 61, 59, 60, 60]}})
    check = one(evaluate(b, c, Config()), "absolute.idle_pct@rank0")
    assert check.status == WARN and "newly beyond" in check.message and check.threshold.value == 50.0
    already = side({0: {"idle_pct": [55.0, 56, 54, 55, 55]}})
    check = one(evaluate(already, c, Config()), "absolute.idle_pct@rank0")
    assert check.status == PASS and "already in the baseline" in check.message
    strict = config_from_mapping({"absolute": {"idle_pct": {"only_new": False, "level": "fail"}}})
    assert one(evaluate(already, c, strict), "absolute.idle_pct@rank0").status == FAIL


# --- structural checks ---------------------------------------------------------------------------
def test_counts_per_step():
    b = side({0: {"syncs": 2, "launches": 1000, "memcpy_dtoh_count": 0}})
    c = side({0: {"syncs": 3, "launches": 1005, "memcpy_dtoh_count": 1}})
    v = evaluate(b, c, Config())
    assert one(v, "structural.syncs@rank0").status == FAIL
    assert one(v, "structural.memcpy[memcpy_dtoh_count]@rank0").status == FAIL
    assert one(v, "structural.launches@rank0").status == PASS  # 0.5 % is within the 1 % tolerance
    fewer = evaluate(c, b, Config())
    assert one(fewer, "structural.syncs@rank0").status == WARN  # a removed sync is reported, not failed
    assert one(evaluate(b, side({0: {"launches": 1020}}), Config()), "structural.launches@rank0").status == WARN


def test_added_and_removed_kernels_ignore_one_off_work():
    kernels = {"gemm": (10, 5e4), "relu": (5, 1e3)}
    b = side({0: {"step_time_us": STABLE}}, kernels=kernels)
    c = side({0: {"step_time_us": STABLE}}, kernels={"gemm": (10, 5e4), "gelu": (5, 1e3)},
             per_step_kernels={0: {"autotune_probe": (3, 10.0)}})
    v = evaluate(b, c, Config())
    added = one(v, "structural.kernels[added: gelu]@rank0")
    removed = one(v, "structural.kernels[removed: relu]@rank0")
    assert added.status == WARN and removed.status == WARN
    assert (added.baseline_value, added.candidate_value) == (0.0, 5.0)
    assert not [ch for ch in v.checks if ch.family == "structural" and "autotune_probe" in ch.id]  # 1 of 5 steps
    same = evaluate(b, b, Config())
    assert one(same, "structural.kernels@rank0").status == PASS


def test_new_memcpy_kind_and_collective():
    b = side({0: {"step_time_us": STABLE}}, kernels={"gemm": (10, 5e4)}, collectives={"all_reduce": (2, 3e3)})
    c = side({0: {"step_time_us": STABLE}}, kernels={"gemm": (10, 5e4), "Memcpy DtoH (Device -> Pageable)": (1, 50.0)},
             collectives={"all_reduce": (3, 3e3), "all_gather": (1, 1e3)})
    v = evaluate(b, c, Config())
    assert one(v, "structural.memcpy[added: Memcpy DtoH (Device -> Pageable)]@rank0").status == FAIL
    assert one(v, "structural.collectives[added: all_gather 0]@rank0").status == FAIL
    assert one(v, "structural.collectives[calls: all_reduce 0]@rank0").status == FAIL
    assert not [ch for ch in v.checks if ch.id.startswith("structural.kernels[")]  # copies are not kernels


# --- ranks, aggregation, hardware ----------------------------------------------------------------
def test_aggregations_over_ranks():
    b = side({0: {"step_time_us": STABLE}, 1: {"step_time_us": STABLE}})
    c = side({0: {"step_time_us": STABLE}, 1: {"step_time_us": [x * 1.08 for x in STABLE]}})
    worst = one(evaluate(b, c, Config()), "relative.step_time")  # default: per step, the slowest rank
    assert worst.status == FAIL and worst.delta_pct == pytest.approx(8.0)
    mean = one(evaluate(b, c, config_from_mapping({"relative": {"step_time": {"aggregation": "mean"}}})),
               "relative.step_time")
    assert mean.status == PASS and mean.delta_pct == pytest.approx(4.0)
    each = evaluate(b, c, config_from_mapping({"relative": {"step_time": {"aggregation": "each"}}}))
    assert one(each, "relative.step_time@rank0").status == PASS
    assert one(each, "relative.step_time@rank1").status == FAIL


def test_rank_and_hardware_mismatches_give_notes():
    b = side({0: {"step_time_us": STABLE}, 1: {"step_time_us": STABLE}}, gpu="NVIDIA A100")
    c = side({0: {"step_time_us": [x * 1.2 for x in STABLE]}}, gpu="NVIDIA H100")
    v = evaluate(b, c, Config())
    kinds = {n.kind: n.message for n in v.notes}
    assert "only in the baseline: 1" in kinds["ranks"]
    assert "NVIDIA A100" in kinds["hardware"] and "NVIDIA H100" in kinds["hardware"]
    assert one(v, "relative.step_time").status == FAIL
    cautious = evaluate(b, c, config_from_mapping({"hardware_mismatch": "inconclusive"}))
    assert one(cautious, "relative.step_time").status == INCONCLUSIVE
    # a single rank on each side is compared whatever its number
    single = evaluate(side({3: {"step_time_us": STABLE}}), side({1: {"step_time_us": STABLE}}), Config())
    assert "ranks are compared in order: rank 3 with rank 1" in single.notes[0].message
    assert one(single, "absolute.idle_pct@rank1").status == PASS
    # no rank in common and other rank counts: per-rank checks use the mean over ranks
    far = evaluate(side({0: {"step_time_us": STABLE}, 1: {"step_time_us": STABLE}}),
                   side({2: {"step_time_us": STABLE}, 3: {"step_time_us": STABLE}, 4: {"step_time_us": STABLE}}),
                   Config())
    assert "mean over ranks" in far.notes[0].message
    assert one(far, "absolute.idle_pct").rank is None


# --- waivers --------------------------------------------------------------------------------------
def test_waivers_silence_matching_checks_and_report_expired_ones():
    b = side({0: {"step_time_us": STABLE}})
    c = side({0: {"step_time_us": [x * 1.10 for x in STABLE]}})
    waived = dataclasses.replace(Config(), waivers=(Waiver("relative.step_*", "expected: bigger batch"),))
    v = evaluate(b, c, waived)
    check = one(v, "relative.step_time")
    assert check.status == FAIL and check.waiver is not None and not check.counts
    assert v.status == PASS and v.counts()["waived"] == 1 and not v.findings
    expired = dataclasses.replace(Config(), waivers=(Waiver("relative.step_time", "old", dt.date(2020, 1, 1)),))
    v = evaluate(b, c, expired, today=dt.date(2024, 6, 1))
    assert v.status == FAIL and "expired on 2020-01-01" in v.notes[-1].message
    unused = dataclasses.replace(Config(), waivers=(Waiver("relative.nothing", "typo"),))
    assert "matches no check" in evaluate(b, c, unused).notes[-1].message


def test_waiver_patterns_treat_brackets_literally():
    b = side({0: {"step_time_us": STABLE}}, kernels={"sgemm_nn": (10, 5e4)})
    check = one(evaluate(b, b, Config()), "relative.kernel_time[sgemm_nn]")
    assert waiver_matches("relative.kernel_time[*gemm*]", check)
    assert waiver_matches("relative.kernel_time[sgemm_nn]", check)
    assert not waiver_matches("relative.kernel_time[s]", check)
    rank_check = one(evaluate(b, b, Config()), "absolute.idle_pct@rank0")
    assert waiver_matches("absolute.idle_pct", rank_check)
    assert not waiver_matches("absolute.idle_pct@rank1", rank_check)


# --- samples: warm-up, skipped steps --------------------------------------------------------------
def test_warmup_steps_are_dropped_and_noted():
    times = [190e3, 100e3, 101e3, 99e3, 100e3]
    assert warmup_steps(steps_table({0: {"step_time_us": times}}), 20.0, 2) == (10,)
    assert warmup_steps(steps_table({0: {"step_time_us": [100e3, 190e3, 101e3]}}), 20.0, 2) == ()
    b = side({0: {"step_time_us": times}}, steps=StepsConfig())
    assert b.warmup_steps == (10,) and list(b.steps["step"]) == [11, 12, 13, 14]
    v = evaluate(b, side({0: {"step_time_us": times[1:]}}, steps=StepsConfig()), Config())
    assert any("warm-up step(s) 10" in n.message for n in v.notes)
    skipped = side({0: {"step_time_us": STABLE}}, steps=StepsConfig(skip_first=2, auto_warmup=False))
    assert list(skipped.steps["step"]) == [12, 13, 14] and skipped.skipped_steps == 2


def test_bootstrap_test_decides_when_chosen():
    b = side({0: {"step_time_us": STABLE * 2}})
    c = side({0: {"step_time_us": [x * 1.10 for x in STABLE * 2]}})
    config = config_from_mapping({"stats": {"test": "bootstrap"}})
    check = one(evaluate(b, c, config), "relative.step_time")
    assert check.status == FAIL and check.evidence.test == "bootstrap" and check.evidence.interval[0] > 1.0


# --- real traces: no false alarms, caught regressions ---------------------------------------------
def perturb(traces: TraceSet, *, scale: float = 1.0, noise_pct: float = 0.0, gap_scale: float = 1.0,
            seed: int = 0) -> TraceSet:
    """A copy of ``traces`` with every timestamp scaled by ``scale * gap_scale`` and every
    duration by ``scale`` times a uniform ±``noise_pct`` % factor per event. ``gap_scale`` > 1
    stretches the time between events (host-bound slowdown: more GPU idle time) while
    ``scale`` slows everything alike."""
    rng = np.random.default_rng(seed)
    ranks = {}
    for t in traces:
        factor = scale * (1.0 + rng.uniform(-noise_pct, noise_pct, size=t.n_events) / 100.0)
        ranks[t.rank] = dataclasses.replace(t, ts=t.ts * scale * gap_scale, dur=t.dur * factor, _memo={})
    return TraceSet(ranks=ranks, source=f"{traces.source} (perturbed)")


def halves(traces: TraceSet, config: Config):
    """(first half, second half) of one run's steps as two sides of a comparison."""
    steps = step_metrics(traces)
    ops, coll = op_steps(traces), collectives_per_step(traces)
    numbers = np.unique(steps["step"])
    first = set(numbers[: len(numbers) // 2])
    out = []
    for keep in (lambda s: s.isin(first), lambda s: ~s.isin(first)):
        out.append(side_data("half", steps[keep(steps["step"])], ops[keep(ops["step"])], coll[keep(coll["step"])],
                             ranks=tuple(traces.rank_ids), gpus={t.rank: t.meta.gpu_name() for t in traces},
                             steps=config.steps))
    return out


GATE_JOBS = ["hta_a100_rank0of16_cudagraph_triton", "hta_a100_nccl_rank0of2", "hta_v100_ns_resolution",
             "hta_sampled_2of128rank", "odd_amd_mi250_rocm62_minitoy", "pair_tracelens_h100_vs_mi300x_bert_small/h100"]
SHARED_JOBS = ["pair_kineto_resnet50_v100_dataloader/workers4", "pair_hta_trace_diff/test"]


def _traces(job: str) -> TraceSet:
    path = TRACES / job if (TRACES / job).exists() else shared_trace(job)
    return load_cached(str(path))


def _alarms(verdict) -> list[str]:
    return [c.message for c in verdict.findings]


@pytest.mark.parametrize("job", GATE_JOBS + SHARED_JOBS)
def test_no_false_alarm_on_the_same_configuration(job):
    traces = _traces(job)
    config = Config()
    base = gate_side("baseline", traces, config)
    assert _alarms(evaluate(base, gate_side("candidate", traces, config), config)) == []
    for seed in (1, 2):
        noisy = gate_side("candidate", perturb(traces, noise_pct=3.0, seed=seed), config)
        assert _alarms(evaluate(base, noisy, config)) == [], seed
    first, second = halves(traces, config)
    halved = evaluate(first, second, config)  # 2-4 steps a side: a change may only be possible
    assert halved.status != FAIL and all(c.evidence.possible_regression for c in halved.findings)


@pytest.mark.parametrize("job", ["hta_a100_rank0of16_cudagraph_triton", "pair_kineto_resnet50_v100_dataloader/workers0",
                                 "pair_hta_trace_diff/control"])
def test_injected_ten_percent_regression_is_caught(job):
    """Traces whose steps are steady enough to prove a 10 % change with 4-5 steps per side."""
    traces = _traces(job)
    config = Config()
    v = evaluate(gate_side("b", traces, config), gate_side("c", perturb(traces, scale=1.10), config), config)
    check = one(v, "relative.step_time")
    assert v.status == FAIL and check.status == FAIL
    assert check.delta_pct == pytest.approx(10.0, abs=0.01)


def test_injected_idle_time_is_caught():
    """Stretching the gaps between events 1.4x on a GPU-bound trace: the GPU idles ~10 points more.
    With one run per side and nothing but host-side wait changed, that warns by default (it
    cannot be told from run-to-run drift); ``stats.host_wait_level = "fail"`` fails it."""
    traces = _traces("hta_a100_rank0of16_cudagraph_triton")
    config = Config()
    b, c = gate_side("b", traces, config), gate_side("c", perturb(traces, gap_scale=1.4), config)
    v = evaluate(b, c, config)
    idle = one(v, "relative.idle_pct")
    assert idle.status == WARN and idle.delta > 5.0 and v.status == WARN
    assert "grew with unchanged GPU work; record more baseline runs to judge drift" in idle.message
    strict = config_from_mapping({"stats": {"host_wait_level": "fail"}})
    v = evaluate(b, c, strict)
    assert one(v, "relative.idle_pct").status == FAIL and v.status == FAIL


def test_keyed_samples_are_the_pivot_of_the_op_table():
    """keyed_samples sums each (sample, key) cell itself; it must be what pivot_table gives:
    the same float sums, 0 where a key has no row in a sample, NaN left out, keys asked twice
    or absent kept as asked, rows of dropped samples (warm-up) ignored."""
    from perfreport.gate.keyed import key_of, keyed_samples
    from perfreport.gate.metrics import SAMPLE

    data = side({0: {"step_time_us": STABLE}, 1: {"step_time_us": STABLE}},
                kernels={"gemm": (3, 0.1 + 0.2), "relu": (1, 1e-3)},
                per_step_kernels={1: {"conv": (2, 7.7)}, 3: {"gemm": (1, 1e16), "conv": (1, np.nan)}})
    keys = ["relu", "conv", "absent", "gemm", "conv"]
    ops = data.ops.assign(_key=key_of(data.ops, ("key",)), dur_us=data.ops["dur_us"].astype(np.float64))
    index = pd.MultiIndex.from_frame(data.steps[SAMPLE])
    want = ops.pivot_table(index=SAMPLE, columns="_key", values="dur_us", aggfunc="sum", fill_value=0.0) \
        .reindex(index=index, columns=keys, fill_value=0.0).astype(np.float64)
    got = keyed_samples(data, "op_steps", ("key",), "dur_us", keys)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    # laid out as the pivot's frame is: a sum across keys (numpy's, pairwise along memory) adds in the same order
    layout = [[(b.values.shape, b.values.strides, list(b.mgr_locs.as_array)) for b in f._mgr.blocks] for f in (got, want)]
    assert layout[0] == layout[1] and np.array_equal(got.sum(axis=1).to_numpy(), want.sum(axis=1).to_numpy())
    assert list(got.columns) == keys and got.loc[(0, 0, 13), "gemm"] == 1e16  # 0.3 + 1e16, summed as pandas does
    assert got["absent"].eq(0.0).all() and got.loc[(0, 1, 11), "relu"] == 1e-3
    assert (got.loc[(0, 1, 11), "conv"] == 7.7).all() and (got.loc[(0, 0, 13), "conv"] == 0.0).all()  # NaN left out
    dropped = data.steps.iloc[1:]  # a sample the side no longer holds: its rows are not counted anywhere
    fewer = dataclasses.replace(data, steps=dropped)
    assert len(keyed_samples(fewer, "op_steps", ("key",), "count", ["gemm"])) == len(dropped)


@pytest.mark.parametrize("baseline, candidate", [("recorded/repeat_base/run1", "recorded/sync_each_step/run1"),
                                                 ("recorded/short_multirank/ddp_w2_gloo_1step_run1",
                                                  "recorded/short_multirank/ddp_w2_gloo_1step_run2")])
def test_the_checked_keys_are_those_of_the_tables_text(baseline: str, candidate: str):
    """The checks' keys come from codes made once per side (table_keys, sorted_keys); they must
    be the tables' text keys: listed in order of first appearance, the baseline's first; sorted
    as pd.factorize sorts them; the top kernels ranked by pandas' sums grouped by the text (copy
    and set keys left out), on real sides with several kernels per step and with collectives."""
    from perfreport.gate.comparison import MEMORY_KEY, Comparison
    from perfreport.gate.keyed import key_of, sorted_keys
    from perfreport.gate.relative import _top_kernels

    from .conftest import DATA

    b, c = (gate_side(label, load_cached(str(DATA / run)), Config()) for label, run in (("b", baseline), ("c", candidate)))
    cmp = Comparison(b, c, Config(), [(r, r) for r in sorted(set(b.ranks) & set(c.ranks))], False)
    for table, frame_of, columns in (("op_steps", lambda x: x.ops, ("key",)),
                                     ("collectives_per_step", lambda x: x.collectives, ("kind", "process_group"))):
        want = list(dict.fromkeys([*key_of(frame_of(b), columns), *key_of(frame_of(c), columns)]))
        assert cmp.keys(table, columns) == want
        codes, distinct = pd.factorize(key_of(frame_of(b), columns), sort=True)
        got_codes, got_distinct = sorted_keys(b, table, columns)
        assert np.array_equal(got_codes, codes) and got_distinct.tolist() == list(distinct)
    assert len(cmp.keys("op_steps", ("key",))) > 3
    assert len(cmp.keys("collectives_per_step", ("kind", "process_group"))) > 0 or "gloo" not in baseline

    def ranked(side) -> list[str]:
        ops = side.ops[~side.ops["key"].astype(str).str.match(MEMORY_KEY.pattern).to_numpy(bool)]
        return ops.groupby("key")["dur_us"].sum().sort_values(ascending=False, kind="stable").index.tolist()

    for top in (1, 3, 1000):
        assert _top_kernels(cmp, top) == list(dict.fromkeys(ranked(b)[:top] + ranked(c)[:top]))
