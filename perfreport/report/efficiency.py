"""The Efficiency section and its suggestions: which op to look at first, and how far each op
runs from the GPU's roofline. Reads the ``op_efficiency``, ``efficiency_summary`` and
``gpu_metrics_per_step`` tables (:mod:`perfreport.analyses.efficiency`); computes no number.

Rules of the suggestions (each with the figures it rests on):

* the op with the most time at stake (kernel time beyond its roofline time) when that is at
  least :data:`STAKE_SHARE_PCT` % of the rank's GPU time -> look at it first;
* a GEMM / convolution / attention op in FP16, BF16 or TF32 that spends less than half its kernel
  time in Tensor Core kernels, on at least :data:`STAKE_SHARE_PCT` % of the GPU time -> it fell
  off the Tensor Cores.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..units import format_us
from .blocks import TOP_ROWS, Side, make_section, records, side_label, sorted_rows, table
from .model import Bar, BarFigure, Paragraph, RooflineFigure, RooflinePoint, Section, Suggestion

STAKE_SHARE_PCT = 5.0
"""Share of the rank's GPU time from which an op's gap to its roofline is worth a suggestion."""
TENSOR_CORE_CLASSES = ("fp16", "bf16", "tf32", "fp8")
CLASS_LABEL = {"fp64": "FP64", "fp32": "FP32", "fp32_matrix": "FP32 matrix", "tf32": "TF32", "fp16": "FP16",
               "bf16": "BF16", "fp8": "FP8", "int8": "INT8"}
FIGURE_OPS = 12

OP_COLUMNS = [
    ("label", "op [shapes] dtype", "name"), "calls", ("kernel_us", "kernel time"),
    ("share_of_gpu_pct", "% of GPU time"), ("tflops_per_s", "TFLOPS/s", "number"), ("tb_per_s", "TB/s", "number"),
    ("pct_of_peak", "% of peak"), ("pct_of_bw", "% of bandwidth"), ("pct_of_roofline", "% of roofline"),
    ("bound", "bound", "text"), ("time_at_stake_us", "time at stake"), ("tensor_core_pct", "Tensor Core %"),
]
MODEL_COLUMNS = [
    ("label", "op [shapes] dtype", "name"), ("kind", "kind", "text"), ("gflops_per_call", "GFLOP per call", "number"),
    ("bytes_per_call", "bytes per call"), ("arithmetic_intensity", "FLOP/byte", "number"),
    ("compute_class", "peak of", "text"), ("peak_tflops_per_s", "peak TFLOPS/s", "number"),
    ("est_sm_efficiency_pct", "est. SM efficiency %"), ("est_achieved_occupancy_pct", "est. achieved occupancy %"),
]


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _modelled(r: dict) -> bool:
    return r.get("model") == "perfreport"


def _gpu_paragraphs(sides: Sequence[Side]) -> list[Paragraph]:
    out = []
    for side in sides:
        for r in records(side, "efficiency_summary"):
            who = side_label(r.get("rank"), side.label)
            gpu = (f"{r.get('gpu')} (peaks of the {r.get('gpu_model')}: {r.get('peak_source')})" if r.get("gpu_model")
                   else str(r.get("gpu_note") or "no GPU named"))
            cover = _num(r.get("modelled_pct"))
            text = f"{who}: {gpu}."
            if cover is not None:
                text += f" The performance model covers {cover:.1f} % of the GPU time."
            no_shapes = _num(r.get("no_shapes_us")) or 0.0
            if no_shapes > 0:
                text += (f" {format_us(no_shapes)} of GPU time ran under ops without recorded shapes (profile "
                         f"with record_shapes=True to model them).")
            out.append(Paragraph(text))
    return out


def _roofline_figure(sides: Sequence[Side]) -> RooflineFigure | None:
    """The top ops by kernel time on the roofline of the GPU they ran on. The roofs are the
    GPU table's (memory bandwidth, and the peak of each plotted op's dtype): an unknown GPU has
    none, so no figure rather than a made-up roof. Ops of another GPU (a compare across GPUs)
    are left out, and the note says so."""
    picked: list[tuple[Side, dict]] = []
    for side in sides:
        rows = [r for r in records(side, "op_efficiency") if _modelled(r)
                and (_num(r.get("arithmetic_intensity")) or 0) > 0 and (_num(r.get("tflops_per_s")) or 0) > 0
                and (_num(r.get("peak_tflops_per_s")) or 0) > 0]
        picked += [(side, r) for r in sorted_rows(rows, ["kernel_us"], descending=True)[:FIGURE_OPS]]
    if not picked:
        return None
    side0, top = picked[0]
    summary = next((r for r in records(side0, "efficiency_summary") if r.get("rank") == top.get("rank")), {})
    bandwidth = _num(summary.get("mem_tbps"))
    if not bandwidth or bandwidth <= 0:
        return None
    gpu = top.get("gpu")
    kept = [(side, r) for side, r in picked if r.get("gpu") == gpu]
    points = tuple(RooflinePoint(side_label(r.get("rank"), side.label, r.get("label")),
                                 float(r["arithmetic_intensity"]), float(r["tflops_per_s"])) for side, r in kept)
    peaks = sorted({(str(r.get("compute_class") or r.get("dtype") or "peak"), float(r["peak_tflops_per_s"]))
                    for _, r in kept}, key=lambda p: -p[1])
    note = (f"{gpu}: the roofs are its peak for each plotted dtype and its memory bandwidth; the further a "
            "point sits below its roof, the further the op runs from what the GPU could do at its intensity.")
    if len(kept) < len(picked):
        note += f" Ops that ran on another GPU ({len(picked) - len(kept)}) are not drawn on this GPU's roofline."
    return RooflineFigure("roofline", "Roofline: the top ops by kernel time", points, bandwidth, tuple(peaks),
                          note=note)


def _roofline_bars(sides: Sequence[Side]) -> BarFigure | None:
    bars = []
    for side in sides:
        rows = [r for r in records(side, "op_efficiency")
                if _modelled(r) and _num(r.get("pct_of_roofline")) is not None]
        for r in sorted_rows(rows, ["kernel_us"], descending=True)[:FIGURE_OPS]:
            bars.append(Bar(side_label(r.get("rank"), side.label, r.get("label")), (r.get("pct_of_roofline"),)))
    if not bars:
        return None
    return BarFigure("roofline_bars", "Top ops by kernel time: % of their roofline", "% of roofline", "pct",
                     ("achieved",), tuple(bars), stacked=False,
                     note="100 % = the op's FLOPs at the GPU's peak for its dtype or its bytes at the memory "
                          "bandwidth, whichever takes longer.")


def efficiency_section(sides: Sequence[Side]) -> Section | None:
    return make_section(
        "efficiency", "Efficiency", 3, "how close each op runs to the GPU's peak: look first at the most time at stake",
        *_gpu_paragraphs(sides),
        Paragraph("Per op and shapes: FLOPs and bytes per call from the recorded Input Dims and types, achieved "
                  "TFLOPS/s and TB/s over the op's kernel time, and the share of the GPU's peak for the op's dtype "
                  "and of its memory bandwidth. Time at stake is the kernel time beyond the roofline's; the "
                  "table is ordered by it. A Winograd or FFT convolution does fewer FLOPs than the algorithm "
                  "counts, so it can show more than 100 %."),
        _roofline_figure(sides),
        _roofline_bars(sides),
        table("op_efficiency", "Where to look first: ops by time at stake", sides, "op_efficiency", OP_COLUMNS,
              where=_modelled, sort=("time_at_stake_us",), descending=True, top=TOP_ROWS),
        table("op_efficiency_model", "The model behind each op (by kernel time)", sides, "op_efficiency",
              MODEL_COLUMNS, where=_modelled, sort=("kernel_us",), descending=True, top=TOP_ROWS, collapsed=True),
        table("op_efficiency_none", "GPU time under ops with no performance model", sides, "op_efficiency",
              [("label", "op [shapes]", "name"), "calls", ("kernel_us", "kernel time"),
               ("share_of_gpu_pct", "% of GPU time"), ("tensor_core_pct", "Tensor Core %")],
              where=lambda r: not _modelled(r), sort=("kernel_us",), descending=True, top=TOP_ROWS, collapsed=True),
        table("efficiency_summary", "GPU metrics per rank (TensorBoard's definitions)", sides, "efficiency_summary",
              ["rank", ("gpu", "GPU", "name"), ("kernel_us", "GPU time"), ("modelled_pct", "modelled %"),
               ("tensor_core_pct", "Tensor Core %"), ("est_sm_efficiency_pct", "est. SM efficiency %"),
               ("est_achieved_occupancy_pct", "est. achieved occupancy %")], collapsed=False,
              note="Tensor Core %: share of kernel time in Tensor Core kernels (by name). Est. SM efficiency: "
                   "min(blocks per SM, 1), weighted by kernel time. Est. achieved occupancy: Kineto's estimate "
                   "from the launch (blocks, registers, shared memory), weighted by kernel time."),
        table("kernel_efficiency", "GPU metrics per kernel", sides, "kernel_efficiency",
              ["rank", ("kernel", "kernel", "name"), "count", ("kernel_us", "time"),
               ("tensor_core", "Tensor Core", "bool"),
               ("est_sm_efficiency_pct", "est. SM efficiency %"),
               ("est_achieved_occupancy_pct", "est. achieved occupancy %"),
               ("registers_per_thread", "registers per thread", "number"),
               ("shared_memory_bytes", "shared memory", "bytes")],
              sort=("kernel_us",), descending=True, top=TOP_ROWS, collapsed=True),
        table("gpu_metrics_per_step", "GPU metrics per step", sides, "gpu_metrics_per_step",
              ["rank", "step", ("kernel_us", "kernel time"), ("tensor_core_pct", "Tensor Core %"),
               ("est_sm_efficiency_pct", "est. SM efficiency %"),
               ("est_achieved_occupancy_pct", "est. achieved occupancy %")], sort=("rank", "step"), collapsed=True),
    )


def efficiency_suggestions(side: Side, rank: Any) -> list[Suggestion]:
    """The suggestions of the module docstring for ``rank``."""
    rows = [r for r in records(side, "op_efficiency") if r.get("rank") == rank and _modelled(r)]
    summary = next((r for r in records(side, "efficiency_summary") if r.get("rank") == rank), {})
    gpu = summary.get("gpu_model") or summary.get("gpu") or "GPU"
    out = []
    staked = [r for r in rows if (_num(r.get("time_at_stake_us")) or 0) > 0]
    if staked:
        top = sorted_rows(staked, ["time_at_stake_us"], descending=True)[0]
        share = _num(top.get("share_of_gpu_pct")) or 0.0
        stake_pct = share * (_num(top.get("time_at_stake_us")) or 0.0) / (_num(top.get("kernel_us")) or 1.0)
        if stake_pct >= STAKE_SHARE_PCT:
            cls = CLASS_LABEL.get(str(top.get("compute_class")), str(top.get("compute_class")))
            where = (f"{top.get('pct_of_peak'):.0f} % of the {gpu}'s {cls} peak" if top.get("bound") == "compute"
                     else f"{top.get('pct_of_bw'):.0f} % of the {gpu}'s memory bandwidth")
            out.append(Suggestion(
                f"Look first at {top.get('label')}: it runs at {where} on {share:.0f} % of the GPU time "
                f"({top.get('bound')}-bound).",
                f"rank {rank}: {top.get('calls')} calls, {format_us(top.get('kernel_us'))} of kernel time, "
                f"{top.get('pct_of_roofline'):.0f} % of its roofline; {format_us(top.get('time_at_stake_us'))} "
                f"at stake", "efficiency"))
    off = [r for r in rows if r.get("kind") in ("gemm", "conv", "attention")
           and r.get("compute_class") in TENSOR_CORE_CLASSES and (_num(r.get("tensor_core_pct")) or 0) < 50
           and (_num(r.get("share_of_gpu_pct")) or 0) >= STAKE_SHARE_PCT]
    for r in sorted_rows(off, ["kernel_us"], descending=True)[:2]:
        out.append(Suggestion(
            f"{r.get('label')} does not run on the Tensor Cores: check its shapes' alignment (multiples of 8 "
            f"for FP16/BF16), its layout and that the dtype reaches the kernel.",
            f"rank {rank}: {r.get('tensor_core_pct'):.0f} % of its {format_us(r.get('kernel_us'))} in Tensor "
            f"Core kernels, {r.get('share_of_gpu_pct'):.0f} % of the GPU time", "efficiency"))
    return out
