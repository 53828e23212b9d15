"""Efficiency analysis: the performance model checked against FLOPs computed here, independently,
from the raw JSON of real traces; kernel time checked against a plain correlation + time
containment walk; the GPU table; the TensorBoard metrics."""

from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from perfreport.analyses.efficiency import efficiency_summary, gpu_metrics_per_step, op_efficiency
from perfreport.analyses.efficiency.gpus import GPUS, match_gpu
from perfreport.analyses.efficiency.perfmodel import model

from .conftest import TRACES, load_cached, shared_trace

BERT_H100 = TRACES / "pair_tracelens_h100_vs_mi300x_bert_small" / "h100"
BERT_MI300X = TRACES / "pair_tracelens_h100_vs_mi300x_bert_small" / "mi300x"


def _events(folder: Path) -> list[dict]:
    (path,) = sorted(folder.glob("*.json*"))
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _compact(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def _kernel_us_by_op(events: list[dict], op_name: str) -> dict[str, float]:
    """GPU µs under each call of ``op_name``, by its Input Dims text: kernel -> runtime launch
    (same correlation id) -> the ``op_name`` event on the launch's thread whose span contains it."""
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("name") == op_name]
    out: dict[str, float] = defaultdict(float)
    for k in events:
        if k.get("cat") not in ("kernel", "gpu_memset", "gpu_memcpy"):  # GPU work, as the op–kernel table counts it
            continue
        launch = launches.get(k["args"].get("correlation"))
        if launch is None:
            continue
        for op in ops:
            if (op["tid"] == launch["tid"] and op["ts"] <= launch["ts"]
                    and launch["ts"] + launch.get("dur", 0) <= op["ts"] + op["dur"]):
                out[_compact(op["args"]["Input Dims"])] += k["dur"]
                break
    return out


def test_addmm_flops_bytes_and_time_match_an_independent_count_on_bert_h100():
    events = _events(BERT_H100)
    expected = defaultdict(lambda: [0, 0.0, 0.0])  # calls, flops per call, bytes per call
    for e in events:
        if e.get("name") == "aten::addmm" and e.get("cat") == "cpu_op":
            bias, a, b = e["args"]["Input Dims"][:3]
            m, k, n = a[0], a[1], b[1]
            key = _compact(e["args"]["Input Dims"])
            expected[key][0] += 1
            expected[key][1] = 2 * m * n * k + m * n  # addmm adds C: + M*N
            expected[key][2] = 2 * (m * k + k * n + m * n + n)  # bf16, bias read as a row of N
    times = _kernel_us_by_op(events, "aten::addmm")
    table = op_efficiency(load_cached(str(BERT_H100)))
    rows = table[table.op == "aten::addmm"].set_index("input_dims")
    assert set(rows.index) == set(expected)
    for dims, (calls, flops, nbytes) in expected.items():
        row = rows.loc[dims]
        assert row.calls == calls
        assert row.gflops_per_call * 1e9 == pytest.approx(flops, rel=1e-12)
        assert row.bytes_per_call == nbytes
        assert row.kernel_us == pytest.approx(times[dims], rel=1e-9)
        assert row.tflops_per_s == pytest.approx(calls * flops / (times[dims] * 1e-6) / 1e12, rel=1e-9)
        assert row.pct_of_peak == pytest.approx(100 * row.tflops_per_s / 989.4, rel=1e-9)  # H100 SXM BF16 dense
        assert row.compute_class == "bf16" and row.tensor_core_pct == pytest.approx(100.0)
    # the op that owns the addmm kernels is addmm, not the enclosing aten::linear
    assert "aten::linear" not in set(table.op)


def test_flash_attention_flops_on_bert_h100_and_mi300x():
    for folder in (BERT_H100, BERT_MI300X):
        events = _events(folder)
        sdpa = [e for e in events if e.get("name") == "aten::_scaled_dot_product_flash_attention"]
        assert sdpa
        q = sdpa[0]["args"]["Input Dims"][0]
        b, h, s, d = q
        assert sdpa[0]["args"]["Concrete Inputs"][4] == "False"  # not causal
        table = op_efficiency(load_cached(str(folder)))
        row = table[table.op == "aten::_scaled_dot_product_flash_attention"].iloc[0]
        assert row.calls == len(sdpa)
        assert row.gflops_per_call * 1e9 == pytest.approx(4 * b * h * s * s * d, rel=1e-12)
        assert row.bytes_per_call == 4 * b * h * s * d * 2
        times = _kernel_us_by_op(events, "aten::_scaled_dot_product_flash_attention")
        assert row.kernel_us == pytest.approx(sum(times.values()), rel=1e-9)


def test_the_mi300x_side_is_measured_against_the_mi300x():
    table = op_efficiency(load_cached(str(BERT_MI300X)))
    row = table[table.op == "aten::addmm"].iloc[0]
    assert row.gpu == "AMD Instinct MI300X VF"
    assert row.peak_tflops_per_s == 1307.4
    assert row.pct_of_bw == pytest.approx(100 * row.tb_per_s / 5.3, rel=1e-9)


def test_convolution_backward_flops_on_the_v100_resnet50():
    folder = shared_trace("pair_kineto_resnet50_v100_dataloader/workers0")
    events = _events(folder)
    expected = {}
    for e in events:
        if e.get("name") == "aten::cudnn_convolution_backward":
            x, grad_out, w = e["args"]["Input Dims"][:3]
            # grad_input and grad_weight each cost the forward: 2 * outputs * Cin/g * kh * kw
            expected[_compact(e["args"]["Input Dims"])] = 2 * (2 * math.prod(grad_out) * math.prod(w[1:]))
    table = op_efficiency(load_cached(str(folder)))
    rows = table[table.op == "aten::cudnn_convolution_backward"].set_index("input_dims")
    assert set(rows.index) == set(expected)
    for dims, flops in expected.items():
        assert rows.loc[dims, "gflops_per_call"] * 1e9 == flops
    assert set(rows.compute_class) == {"fp32"}  # V100: no TF32
    # forward convolutions of 2021 traces carry no Concrete Inputs (stride, padding): no model
    conv = table[table.op.str.contains("conv2d|convolution$", regex=True)]
    assert (conv.model == "none").all() and conv.gflops_per_call.isna().all()
    # ProfilerStep#N (an "Operator" in 2021 traces) never owns kernels
    assert not table.op.str.startswith("ProfilerStep").any()


def test_kernel_time_is_conserved_and_every_row_is_grouped_once():
    for folder in (BERT_H100, TRACES / "tracelens_b200_eager_rank0of8"):
        ts = load_cached(str(folder))
        table = op_efficiency(ts)
        assert not table.duplicated(["rank", "op", "input_dims", "input_types", "concrete_inputs"]).any()
        summary = efficiency_summary(ts).iloc[0]
        modelled = table.loc[table.model == "perfreport", "kernel_us"].sum()
        assert summary.modelled_us == pytest.approx(modelled, rel=1e-9)
        assert table.kernel_us.sum() <= summary.kernel_us + 1e-6


# --- formulas (synthetic calls) ----------------------------------------------------------------------
BF16 = '"c10::BFloat16"'


def test_convolution_forward_uses_stride_padding_and_groups():
    dims = "[[8,64,56,56],[128,32,3,3],[128],[],[],[],[],[],[]]"
    types = f"[{BF16},{BF16},{BF16},\"ScalarList\",\"ScalarList\",\"ScalarList\",\"Scalar\",\"ScalarList\",\"Scalar\"]"
    concrete = '["","","","[2, 2]","[1, 1]","[1, 1]","False","[0, 0]","2"]'
    m = model("aten::convolution", dims, types, concrete)
    out = 8 * 128 * 28 * 28  # (56 + 2 - 2 - 1) // 2 + 1 = 28
    assert m.flops == 2 * out * 32 * 9 + out  # groups=2: weight holds Cin/g = 32; + bias
    assert m.bytes == (8 * 64 * 56 * 56 + 128 * 32 * 9 + out + 128) * 2
    # no Concrete Inputs: stride and padding unknown, so no model (never a guess)
    assert model("aten::convolution", dims, types, "") is None


def test_transposed_convolution_counts_input_elements():
    dims = "[[1,16,10,10],[16,8,4,4],[],[],[],[],[],[],[]]"
    types = '["float","float","","ScalarList","ScalarList","ScalarList","Scalar","ScalarList","Scalar"]'
    m = model("aten::convolution", dims, types, '["","","","[2]","[1]","[1]","True","[0]","1"]')
    assert m.flops == 2 * (16 * 10 * 10) * (8 * 16)
    assert m.bytes == (1600 + 16 * 8 * 16 + 8 * 20 * 20) * 4  # out = (10-1)*2 - 2 + 3 + 1 = 20


def test_attention_causal_halves_and_backward_is_two_and_a_half_times():
    q, kv = "[2,16,1024,128]", "[2,4,1024,128]"
    dims, types = f"[{q},{kv},{kv},[],[],[],[]]", f"[{BF16},{BF16},{BF16},\"Scalar\",\"Scalar\",\"Scalar\",\"Scalar\"]"
    fwd = 4 * 2 * 16 * 1024 * 1024 * 128
    dense = model("aten::_scaled_dot_product_flash_attention", dims, types, '["","","","0.","False","False",""]')
    causal = model("aten::_scaled_dot_product_flash_attention", dims, types, '["","","","0.","True","False",""]')
    assert dense.flops == fwd and causal.flops == fwd / 2
    assert model("aten::_scaled_dot_product_flash_attention", dims, types, "") is None  # is_causal unknown
    bdims = f"[[2,16,1024,128],{q},{kv},{kv},[2,16,1024,128],[2,16,1024],[],[],[],[],[],[],[],[],[]]"
    btypes = "[" + ",".join([BF16] * 5 + ['"float"'] + ['"Scalar"'] * 9) + "]"
    bconc = '[' + ",".join(['""'] * 11 + ['"False"'] + ['""'] * 3) + ']'
    bwd = model("aten::_scaled_dot_product_flash_attention_backward", bdims, btypes, bconc)
    gqa_sum = 2 * 1024 * (128 + 128) * (16 // 4 - 1)  # dK, dV summed over the 4 query heads per KV head
    assert bwd.flops == 2.5 * fwd + gqa_sum


def test_gemm_variants_and_no_model():
    assert model("aten::mm", "[[64,32],[32,16]]", f"[{BF16},{BF16}]").flops == 2 * 64 * 16 * 32
    assert model("aten::bmm", "[[4,64,32],[4,32,16]]", '["float","float"]').flops == 4 * 2 * 64 * 16 * 32
    lin = model("aten::linear", "[[2,5,32],[16,32],[16]]", f"[{BF16},{BF16},{BF16}]")
    assert lin.flops == 2 * 10 * 16 * 32 + 10 * 16
    assert model("aten::mm", "", "") is None  # no shapes recorded
    assert model("aten::mm", "[[64,32],[]]", f"[{BF16},\"\"]") is None  # shapes do not fit
    assert model("aten::frobnicate", "[[1]]", '["float"]') is None  # no formula


# --- GPUs -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, expected", [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"), ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200"), ("NVIDIA B200", "B200"), ("NVIDIA A100-SXM4-40GB", "A100 40GB"),
    ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"), ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
    ("Tesla V100-SXM2-16GB", "V100 SXM2"), ("Tesla V100-DGXS-32GB", "V100 SXM2"), ("NVIDIA L4", "L4"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA GeForce RTX 2080 Ti", "RTX 2080 Ti"), ("NVIDIA GeForce RTX 3090", "RTX 3090"),
    ("NVIDIA GeForce RTX 4090", "RTX 4090"), ("AMD Instinct MI210", "MI210"),
    ("AMD Instinct MI250X", "MI250X (one GCD)"),
    ("AMD Instinct MI300X VF", "MI300X"), ("AMD Instinct MI325X", "MI325X"),
])
def test_gpu_names_match_their_spec(name, expected):
    assert match_gpu(name).spec.name == expected


def test_unknown_or_ambiguous_gpus_get_no_peak_and_a_note():
    for name in ("AMD Radeon Graphics", "NVIDIA GeForce RTX 3090 Ti", "NVIDIA A100", "NVIDIA L40"):
        m = match_gpu(name)
        assert m.spec is None and name in m.note
    assert match_gpu("NVIDIA H100", {"numSms": 132}).spec.name == "H100 SXM"
    # Meta's A100 board name with 40 GB: both 40 GB A100s have the same peaks
    assert match_gpu("NVIDIA A100-PG509-200", {"totalGlobalMem": 42297524224}).spec.name == "A100 40GB"
    assert match_gpu("NVIDIA A100-PG509-200", {"totalGlobalMem": 85e9}).spec is None
    assert match_gpu(None).spec is None
    table = op_efficiency(load_cached(str(TRACES / "odd_amd_mi250_rocm62_minitoy")))
    modelled = table[table.model == "perfreport"]
    assert len(modelled) and modelled.pct_of_peak.isna().all() and (modelled.bound == "").all()
    assert modelled.tb_per_s.notna().all()  # absolute figures stay


def test_every_gpu_has_a_source_and_consistent_peaks():
    for spec in GPUS.values():
        assert spec.source and spec.mem_tbps > 0
        tensor = [spec.peaks[c] for c in ("fp16", "bf16") if c in spec.peaks]
        assert tensor and min(tensor) > spec.peaks["fp32"]


# --- TensorBoard metrics ---------------------------------------------------------------------------------
def test_sm_efficiency_and_occupancy_are_duration_weighted_kernel_args():
    events = _events(BERT_H100)
    kernels = [e for e in events if e.get("cat") == "kernel"]
    dur = np.array([k["dur"] for k in kernels])
    eff = np.array([min(k["args"]["blocks per SM"], 1.0) * 100 for k in kernels])
    occ = np.array([k["args"]["est. achieved occupancy %"] for k in kernels])
    row = gpu_metrics_per_step(load_cached(str(BERT_H100))).iloc[0]
    step_rows = efficiency_summary(load_cached(str(BERT_H100))).iloc[0]
    assert step_rows.est_sm_efficiency_pct == pytest.approx((eff * dur).sum() / dur.sum(), rel=1e-6)
    assert step_rows.est_achieved_occupancy_pct == pytest.approx((occ * dur).sum() / dur.sum(), rel=1e-6)
    tc = sum(k["dur"] for k in kernels if any(s in k["name"] for s in ("tensorop", "xmma", "flash_fwd")))
    assert step_rows.tensor_core_pct == pytest.approx(100 * tc / dur.sum(), rel=1e-9)
    assert row.kernel_us == pytest.approx(dur.sum(), rel=1e-9)  # one profiler step holds every kernel


# --- the report ------------------------------------------------------------------------------------------
def test_the_look_first_suggestion_states_numbers_true_of_the_raw_events():
    from perfreport.pipeline import analyze, summary_document
    from perfreport.report.build import build_report

    events = _events(BERT_H100)
    report = build_report(summary_document(analyze(str(BERT_H100), workers=1)))
    (text,) = [s for s in report.suggestions if s.text.startswith("Look first at")]
    # the op with the most kernel time beyond its roofline: addmm 141x512 x 512x512 (memory-bound)
    assert text.text.startswith("Look first at aten::addmm [512, 141×512, 512×512] bf16: it runs at ")
    times = _kernel_us_by_op(events, "aten::addmm")
    key = "[[512],[141,512],[512,512],[],[]]"
    calls = sum(1 for e in events if e.get("name") == "aten::addmm" and _compact(e["args"]["Input Dims"]) == key)
    gpu_total = sum(e["dur"] for e in events if e.get("cat") in ("kernel", "gpu_memset", "gpu_memcpy"))
    nbytes = calls * 2 * (141 * 512 + 512 * 512 + 141 * 512 + 512)
    pct_bw = 100 * nbytes / (times[key] * 1e-6) / 3.35e12  # H100 SXM: 3.35 TB/s
    assert f"{pct_bw:.0f} % of the H100 SXM's memory bandwidth" in text.text
    assert f"on {100 * times[key] / gpu_total:.0f} % of the GPU time (memory-bound)" in text.text
    assert f"{calls} calls, {times[key]:.1f} µs of kernel time" in text.evidence
    assert report.sections and any(s.id == "efficiency" for s in report.sections)


# --- the gate ------------------------------------------------------------------------------------------------
def _edited(tmp_path: Path, dims: list, factor: float, rename: str | None = None) -> Path:
    """BERT-small H100 with the kernels of the addmm calls whose Input Dims start with ``dims``
    made ``factor`` times as long (and renamed to ``rename``)."""
    events_doc = json.load(gzip.open(next(BERT_H100.glob("*.json.gz"))))
    events = events_doc["traceEvents"]
    ops = [e for e in events if e.get("name") == "aten::addmm" and e["args"]["Input Dims"][0] == dims]
    corr = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
            and any(o["tid"] == e["tid"] and o["ts"] <= e["ts"] <= o["ts"] + o["dur"] for o in ops)}
    for e in events:
        if e.get("cat") == "kernel" and e["args"].get("correlation") in corr:
            e["name"], e["dur"] = rename or e["name"], e["dur"] * factor
    out = tmp_path / "candidate"
    out.mkdir()
    (out / "rank0.json.gz").write_bytes(gzip.compress(json.dumps(events_doc).encode(), compresslevel=1))
    return out


def test_fell_off_the_tensor_cores_is_a_structural_finding(tmp_path):
    from perfreport.pipeline import compare

    # the vocabulary projection on a non-Tensor-Core GEMM kernel, 3x as long: same op, another kernel
    result = compare(str(BERT_H100), str(_edited(tmp_path, [30522], 3, "void gemmSN_NN_kernel<float>")), workers=1)
    found = [c for c in result.verdict.checks if c.name == "tensor_cores"]
    (check,) = found
    assert check.status == "warn" and check.family == "structural"
    assert check.subject == "aten::addmm [30522, 141×512, 512×30522] bf16"
    assert (check.baseline_value, check.candidate_value) == (pytest.approx(100.0), 0.0)
    times = _kernel_us_by_op(_events(BERT_H100), "aten::addmm")["[[30522],[141,512],[512,30522],[],[]]"]
    assert f"{times:.1f} → {3 * times:.1f} µs per call" in check.message
    same = compare(str(BERT_H100), str(BERT_H100), workers=1)
    (kept,) = [c for c in same.verdict.checks if c.name == "tensor_cores"]
    assert kept.status == "pass"


def test_different_gpus_get_a_hardware_normalised_note():
    from perfreport.pipeline import compare

    result = compare(str(BERT_H100), str(BERT_MI300X), workers=1)
    (note,) = [n for n in result.verdict.notes if n.message.startswith("hardware-normalised")]
    h100 = op_efficiency(load_cached(str(BERT_H100)))
    mi300x = op_efficiency(load_cached(str(BERT_MI300X)))
    top = h100[h100.model == "perfreport"].iloc[0]
    other = mi300x[(mi300x.op == top.op) & (mi300x.input_dims == top.input_dims)].iloc[0]
    assert f"{top.label}: {top.pct_of_bw:.1f} % → {other.pct_of_bw:.1f} % of each GPU's memory bandwidth" in note.message


def test_achieved_throughput_is_checked_like_kernel_time(tmp_path):
    from perfreport.pipeline import compare

    # the addmm 141x512 x 512x512 calls (17 a step, 98.7 us) at half speed: half the TB/s
    result = compare(str(BERT_H100), str(_edited(tmp_path, [512], 2.0)), workers=1)
    label = "aten::addmm [512, 141×512, 512×512] bf16"
    (check,) = [c for c in result.verdict.checks if c.id == f"relative.op_throughput[{label}]"]
    key = "[[512],[141,512],[512,512],[],[]]"
    us = _kernel_us_by_op(_events(BERT_H100), "aten::addmm")[key]
    tbps = 17 * 2 * (141 * 512 + 512 * 512 + 141 * 512 + 512) / (us * 1e-6) / 1e12
    assert check.baseline_value == pytest.approx(tbps, rel=1e-9)
    assert check.candidate_value == pytest.approx(tbps / 2, rel=1e-3)  # memsets under the op keep their time
    assert check.threshold.kind == "max_decrease_pct" and check.unit == "TB/s"
    # one profiler step a side: beyond the threshold but too few samples, as kernel time would be:
    # a possible regression, which warns (stats.inconclusive_level) and never passes silently
    assert check.status == "warn" and check.message.startswith("possible regression:"), check.message
    assert "too few samples" in check.message


def test_throughput_of_the_v100_resnet50_pair_is_judged_per_step():
    from perfreport.pipeline import compare

    base = shared_trace("pair_kineto_resnet50_v100_dataloader/workers0")
    result = compare(str(base), str(shared_trace("pair_kineto_resnet50_v100_dataloader/workers4")), workers=1)
    checks = [c for c in result.verdict.checks if c.name == "op_throughput"]
    assert len(checks) >= 5
    conv = [c for c in checks if c.subject.startswith("aten::cudnn_convolution_backward [32×256×14×14, 32×256×14×14")]
    (c,) = conv
    table = op_efficiency(load_cached(str(base)))
    row = table[table.label == c.subject].iloc[0]
    # the per-step medians sit around the whole-trace figure of the op_efficiency table
    assert c.baseline_value == pytest.approx(row.tflops_per_s, rel=0.05) and c.status == "pass"
    assert len(c.evidence.baseline_values) == 5  # steps 5..10, the last dropped


def test_kernel_metrics_per_kernel_name_match_the_raw_launch_args():
    from perfreport.analyses.efficiency import kernel_efficiency

    kernels = [e for e in _events(BERT_H100) if e.get("cat") == "kernel"]
    table = kernel_efficiency(load_cached(str(BERT_H100))).set_index("kernel")
    for name in {k["name"] for k in kernels}:
        mine = [k for k in kernels if k["name"] == name]
        row = table.loc[name]
        dur = np.array([k["dur"] for k in mine])
        eff = np.array([min(k["args"]["blocks per SM"], 1.0) * 100 for k in mine])
        assert row["count"] == len(mine) and row.kernel_us == pytest.approx(dur.sum(), rel=1e-9)
        assert row.est_sm_efficiency_pct == pytest.approx((eff * dur).sum() / dur.sum(), rel=1e-6)
        assert row.registers_per_thread == max(k["args"]["registers per thread"] for k in mine)
        assert row.tensor_core == any(s in name for s in ("tensorop", "xmma", "flash_fwd"))


def test_the_roofline_plot_draws_the_top_ops_under_the_gpus_own_roofs():
    """The plot is a statement too: its points are the top ops by kernel time at their
    FLOPs / bytes and achieved TFLOPS/s, counted here from the raw events, under the H100's
    datasheet roofs; a GPU without a known peak gets no roofline at all."""
    from perfreport.pipeline import analyze, summary_document
    from perfreport.report.blocks import Side
    from perfreport.report.build import build_report
    from perfreport.report.efficiency import FIGURE_OPS, _roofline_figure
    from perfreport.report.figures import render_svg
    from perfreport.report.model import RooflineFigure

    doc = summary_document(analyze(str(BERT_H100), workers=1))
    section = next(s for s in build_report(doc).sections if s.id == "efficiency")
    (figure,) = [b for b in section.blocks if isinstance(b, RooflineFigure)]
    assert figure.bandwidth_tbps == 3.35  # H100 SXM HBM3
    assert dict(figure.peaks)["bf16"] == 989.4
    modelled = [r for r in doc["op_efficiency"] if r["model"] != "none" and r["tflops_per_s"]]
    assert len(figure.points) == min(FIGURE_OPS, len(modelled))
    # the vocabulary projection addmm [30522, 141x512, 512x30522], one of the top ops by kernel time
    events = _events(BERT_H100)
    key = "[[30522],[141,512],[512,30522],[],[]]"
    calls = sum(1 for e in events if e.get("name") == "aten::addmm" and _compact(e["args"]["Input Dims"]) == key)
    us = _kernel_us_by_op(events, "aten::addmm")
    m, k, n = 141, 512, 30522
    flops, nbytes = 2 * m * n * k + m * n, 2 * (m * k + k * n + m * n + n)
    point = next(p for p in figure.points if "30522" in p.label)
    assert point.intensity == pytest.approx(flops / nbytes, rel=1e-9)
    assert point.tflops == pytest.approx(calls * flops / (us[key] * 1e-6) / 1e12, rel=1e-9)
    assert all(p.tflops <= min(max(dict(figure.peaks).values()), figure.bandwidth_tbps * p.intensity) * 1.05
               for p in figure.points)  # nothing above the roof (5 %: Winograd-style counts aside)
    svg = render_svg(figure)
    assert svg.count("<path") > len(figure.points) and "arithmetic intensity (FLOP/B)" in svg
    # an unknown GPU: no bandwidth, no peak, no roofline
    unknown = dict(doc, efficiency_summary=[dict(r, mem_tbps=None) for r in doc["efficiency_summary"]])
    assert _roofline_figure([Side("", unknown)]) is None


def test_args_looked_up_together_equal_one_by_one_lookups():
    """args_at shares one search among columns recorded on the same events (a kernel's launch
    args, an op's shapes and types); each column must still read as RankTrace.arg reads it."""
    from perfreport.analyses.efficiency.gpu_metrics import args_at

    t = load_cached(str(BERT_H100))[0]
    rng = np.random.default_rng(3)
    rows = np.unique(np.concatenate([rng.choice(t.n_events, 1000), t.args["Input Dims"].rows[::2],
                                     t.gpu_work_rows()[::2]]))
    keys = [("Input Dims", -1), ("grid", -1), ("Input type", -1), ("blocks per SM", np.nan),
            ("registers per thread", -1), ("Concrete Inputs", -1), ("no such arg", 7)]
    got = args_at(t, keys, rows)
    for (key, default), values in zip(keys, got):
        want = t.arg(key, default, rows)
        assert values.dtype == want.dtype and np.array_equal(values, want, equal_nan=want.dtype.kind == "f"), key
    assert (got[0] >= 0).sum() > 200 and (got[1] >= 0).sum() > 20  # both kinds of column are really hit


def test_distinct_signatures_and_events_equal_np_unique():
    import importlib

    op_eff = importlib.import_module("perfreport.analyses.efficiency.op_efficiency")
    rng = np.random.default_rng(5)
    for n in (0, 1, 7, 4000):
        sig = np.column_stack([rng.integers(-1, 40, n), rng.integers(-1, 9, n), rng.integers(-1, 2, n)])
        _, first, inverse = np.unique(sig, axis=0, return_index=True, return_inverse=True)
        got_first, got_inverse = op_eff.distinct_rows(sig)
        assert np.array_equal(got_first, first) and np.array_equal(got_inverse, inverse.ravel())
        rows = rng.integers(0, 500, n)
        uniq, pos = np.unique(rows, return_inverse=True)
        got_uniq, got_pos = op_eff._distinct_events(rows, 500)
        assert np.array_equal(got_uniq, uniq) and np.array_equal(got_pos, pos.ravel())
    wide = np.column_stack([np.arange(3000) * 7, np.arange(3000) % 11])  # a key range too wide for a table
    assert np.array_equal(op_eff.distinct_rows(wide)[1], np.unique(wide, axis=0, return_inverse=True)[1].ravel())
