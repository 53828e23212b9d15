"""A verdict that holds both ways (issue 23): one noise model for steps and runs, no silent pass,
kernel variants that are no structure - on the recorded H100 repeats and on synthetic sides."""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import pytest

from perfreport.config import Config, config_from_mapping
from perfreport.gate.noise import run_noise, t_quantile
from perfreport.gate.variants import family_of
from perfreport.gate.verdict import FAIL, PASS, WARN, evaluate
from perfreport.model import TraceSet
from perfreport.pipeline import gate_side

from .conftest import DATA, load_cached
from .test_gate_noise import _runs_side
from .test_verdict import one

RECORDED = DATA / "recorded"
STEADY = [100.0e3, 101.0e3, 99.5e3, 100.5e3, 100.2e3, 99.8e3, 100.6e3]


def _side(run: str, label: str, traces: TraceSet | None = None):
    return gate_side(label, traces, Config()) if traces is not None else _recorded_side(run)


@functools.lru_cache(maxsize=None)
def _recorded_side(run: str):
    """A recorded run as a gate side, built once per session (the label does not enter the verdict)."""
    return gate_side("side", load_cached(str(RECORDED / run)), Config())


# --- one noise model --------------------------------------------------------------------------
def test_run_noise_splits_run_drift_from_step_noise():
    b = np.array(STEADY)
    runs = np.r_[np.zeros(7), np.ones(7)]
    # two runs that agree within their step noise: no drift, the steps' power (many df)
    agree = run_noise(np.r_[b, b[::-1] * 1.001], runs, b * 1.06, np.zeros(7))
    assert agree.drift_sd == 0.0 and agree.df >= 10
    assert agree.p_value < 0.001 and agree.width < 0.01 * agree.baseline
    # two runs 8 % apart: the drift is measured (σ_b ≈ the spread of run medians), 1 df, +6 % unprovable
    drift = run_noise(np.r_[b, b * 1.08], runs, b * 1.10, np.zeros(7))
    assert drift.between_run_sd == pytest.approx(0.08 * 100.2e3 / math.sqrt(2), rel=1e-6)
    assert drift.drift_sd == pytest.approx(drift.between_run_sd, rel=0.01) and drift.df == 1
    assert drift.p_value > 0.05


def test_t_quantile_inverts_t_sf():
    assert t_quantile(0.05, 1) == pytest.approx(6.3138, abs=1e-3)
    assert t_quantile(0.05, 3) == pytest.approx(2.3534, abs=1e-3)
    assert t_quantile(0.05, 1000) == pytest.approx(1.6464, abs=1e-3)


# --- no silent pass ----------------------------------------------------------------------------
def test_beyond_the_threshold_within_the_drift_is_a_possible_regression():
    """The issue's case: two baseline runs 3.2 % apart, one candidate run +11 %: a 1-df t-test
    cannot prove it, so it warns and says how many more candidate runs would."""
    baseline = _runs_side([STEADY, [v * 1.032 for v in STEADY]])
    candidate = _runs_side([[v * 1.127 for v in STEADY]])
    verdict = evaluate(baseline, candidate, Config())
    check = one(verdict, "relative.step_time")
    e = check.evidence
    assert check.delta_pct == pytest.approx(11.0, abs=0.1) and e.sample_kind == "run" and e.drift == "borrowed"
    assert e.p_value > 0.05 and check.status == WARN and verdict.status == WARN and e.possible_regression
    drift_pct = 100.0 * e.between_run_sd / check.baseline_value
    assert drift_pct == pytest.approx(3.2 / math.sqrt(2), abs=0.05)
    # k more candidate runs: width hypot(s/√2, s/√(1+k)) at 1+k df; k = 1 reaches t ≥ max(3, t crit)
    s = e.between_run_sd
    width = math.hypot(s / math.sqrt(2), s / math.sqrt(2))
    assert check.delta / width >= max(3.0, t_quantile(0.05, 2))
    assert e.to_decide == (f"record 1 more candidate run (`--run`) to tell {check.delta_pct:+.1f} % from the {drift_pct:.1f} % "
                           f"run-to-run drift")
    assert check.message.startswith(f"possible regression: step time {check.delta_pct:+.1f} %")
    assert e.to_decide in check.message
    # what it could have detected: the 1-df critical value times the noise width
    assert e.min_detectable == pytest.approx(e.noise_width * t_quantile(0.05, 1), rel=1e-6)
    assert e.min_detectable_pct == pytest.approx(100 * e.min_detectable / check.baseline_value)
    # stats.inconclusive_level: "pass" keeps the old inconclusive check; "fail" never exceeds the check's level
    quiet = evaluate(baseline, candidate, config_from_mapping({"stats": {"inconclusive_level": "pass"}}))
    assert one(quiet, "relative.step_time").status == "inconclusive" and quiet.status == PASS
    strict = config_from_mapping({"stats": {"inconclusive_level": "fail"}})
    assert one(evaluate(baseline, candidate, strict), "relative.step_time").status == FAIL
    assert one(evaluate(baseline, candidate, strict), "relative.idle").status != FAIL  # idle is warn-level


def test_every_relative_check_says_what_it_could_detect():
    verdict = evaluate(_side("repeat_base/run1", "b"), _side("repeat_base/run3", "c"), Config())
    relative = [c for c in verdict.checks if c.family == "relative"]
    assert relative and all(c.evidence.min_detectable is not None for c in relative)
    step = one(verdict, "relative.step_time")
    # one run a side: the step-level bound, 3 noise widths over the threshold's 5 %; drift unknown
    assert step.evidence.drift == "unknown" and "drift between runs unknown" in step.message
    assert step.evidence.min_detectable == pytest.approx(max(0.05 * step.baseline_value, 3 * step.evidence.noise_width))


# --- both ways --------------------------------------------------------------------------------
@pytest.mark.parametrize("a, b", [("workers0/run1", "workers0/run2"), ("repeat_base/run1", "repeat_base/run4"),
                                  ("repeat_base/run2", "repeat_base/run4"),  # launches 356 -> 352: a split-K pick
                                  ("short_multirank/ddp_w2_gloo_1step_run1", "short_multirank/ddp_w2_gloo_1step_run2"),
                                  ("gpu_bound_repeat/run1", "gpu_bound_repeat/run3")])
def test_recorded_repeats_never_fail_in_either_direction(a, b):
    """workers0 run2 -> run1 (step +10.7 %, p = 0.0003, only host-side wait and cuDNN's other kernels) failed."""
    x, y = _side(a, "x"), _side(b, "y")
    forward, backward = evaluate(x, y, Config()), evaluate(y, x, Config())
    assert FAIL not in (forward.status, backward.status)
    assert not [c.id for v in (forward, backward) for c in v.findings if c.family == "structural"]


def test_a_real_change_fails_whichever_repeats_are_compared():
    for base in ("gpu_bound_repeat/run1", "gpu_bound_repeat/run3"):
        assert evaluate(_side(base, "b"), _side("gpu_bound_seq1152/run1", "c"), Config()).status == FAIL
    for base, change in (("repeat_base/run1", "workers0/run2"), ("repeat_base/run4", "workers0/run1")):
        assert evaluate(_side(base, "b"), _side(change, "c"), Config()).status == FAIL, (base, change)


# --- kernel variants ---------------------------------------------------------------------------
def test_cudnn_kernel_families():
    assert family_of("cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816dgrad_optimized_bf16_64x64_64x5_nhwc_align8>") \
        == family_of("sm90_xmma_wgrad_indexed_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_kernel__5x_cudnn") \
        == "cuDNN convolution bf16"
    assert family_of("sm90_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nhwckrsc_nhwc_kernel__5x_cudnn") == \
        "cuDNN convolution tf32"
    for other in ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", "cudnn::batchnorm_fwtr_nhwc_semiPersist<float>",
                  "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x128_1x4x1_cga1x1x1_kernel0_0"):
        assert family_of(other) is None


def test_another_cudnn_kernel_with_unchanged_time_is_a_note():
    verdict = evaluate(_side("repeat_base/run1", "b"), _side("repeat_base/run2", "c"), Config())
    assert not [c for c in verdict.checks if c.id.startswith("structural.kernels[") and c.status != PASS]
    family = one(verdict, "relative.kernel_time[cuDNN convolution bf16]")
    assert family.status == PASS and abs(family.delta_pct) < 2.0
    assert "cuDNN picked sm90_xmma_" in family.message or "cuDNN picked cutlass" in family.message
    [note] = [n.message for n in verdict.notes if n.kind == "kernels"]
    assert note.startswith("cuDNN picked other convolution bf16 kernels: no time change (")
    assert f"{family.delta_pct:+.1f} %" in note


def test_another_cudnn_kernel_that_is_slower_is_the_familys_timing_finding():
    traces = load_cached(str(RECORDED / "repeat_base" / "run2"))
    ranks = {}
    for t in traces:
        names = t.decode(t.name)
        slow = t.kernels() & np.array([family_of(str(n)) == "cuDNN convolution bf16" for n in names])
        ranks[t.rank] = dataclasses.replace(t, dur=np.where(slow, t.dur * 1.3, t.dur), _memo={})
    slower = TraceSet(ranks=ranks, source="conv kernels x1.3")
    verdict = evaluate(_side("repeat_base/run1", "b"), _side("", "c", slower), Config())
    family = one(verdict, "relative.kernel_time[cuDNN convolution bf16]")
    assert family.status == WARN and family.delta_pct == pytest.approx(30.0, abs=2.0)
    assert " instead of " in family.message and "cuDNN picked " in family.message
    assert not [n for n in verdict.notes if n.kind == "kernels"]


def test_host_wait_rule_holds_when_gpu_work_moves_a_little():
    """workers0 run2 -> run1 with every kernel of run1 3 % slower: compute +4 % (over the
    2 % tolerance) explains nothing of the +3.4 ms step: still host-side wait, a warning."""
    from .inject import slow_kernels

    slower = slow_kernels(load_cached(str(RECORDED / "workers0" / "run1")), 1.03)
    verdict = evaluate(_side("workers0/run2", "b"), _side("", "c", slower), Config())
    step, compute = one(verdict, "relative.step_time"), one(verdict, "relative.compute")
    assert compute.status == PASS and 2.0 < compute.delta_pct < 5.0  # under the 5 % compute threshold
    assert step.status == WARN and step.delta_pct > 10 and "host-side wait" in step.message
    assert verdict.status == WARN


def test_inconclusive_level_is_validated():
    from perfreport.errors import ConfigError

    assert config_from_mapping({"stats": {"inconclusive_level": "fail"}}).stats.inconclusive_level == "fail"
    assert Config().stats.inconclusive_level == "warn"
    with pytest.raises(ConfigError, match="stats.inconclusive_level"):
        config_from_mapping({"stats": {"inconclusive_level": "block"}})
