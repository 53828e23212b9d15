"""The GPUs perfreport knows the peaks of, matched on the ``deviceProperties`` name Kineto writes.

Every figure is the vendor's *dense* peak (no structured sparsity) at the boost clock, per device
as PyTorch sees it (an MI250X is two devices, one per GCD, so its per-device figures are half
the package's). TFLOPS/s are 1e12 FLOP/s; memory bandwidth is TB/s (1e12 B/s). Where a
datasheet gives only the sparse figure, the dense one is half of it, as the datasheets' own
footnotes say. Each entry names its source.

Peaks are per *compute class* (see :data:`CLASSES`): ``fp64``/``fp32`` vector units, ``fp32_matrix``
(AMD matrix cores running FP32), ``tf32``, ``fp16``, ``bf16``, ``fp8``, ``int8`` (tensor/matrix
cores). A class the GPU lacks is absent: an op of that class gets no percentage, never another
class's peak. An unknown GPU gets no peaks at all, only absolute figures and a note.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Mapping

CLASSES = ("fp64", "fp32", "fp32_matrix", "tf32", "fp16", "bf16", "fp8", "int8")
"""Compute classes a peak is given for (TFLOPS/s, or TOPS/s for int8)."""


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model: its peaks (TFLOPS/s per compute class), memory bandwidth (TB/s), source."""

    name: str
    peaks: Mapping[str, float]
    mem_tbps: float
    source: str
    notes: str = ""

    def peak(self, compute_class: str) -> float | None:
        """Peak TFLOPS/s for ``compute_class``, None when the GPU has no such units."""
        return self.peaks.get(compute_class)


def _nv(fp64: float, fp32: float, tf32: float | None, half: float, fp8: float | None, int8: float | None,
        bf16: bool = True) -> dict[str, float]:
    peaks = {"fp64": fp64, "fp32": fp32, "fp16": half}
    if bf16:
        peaks["bf16"] = half
    for key, value in (("tf32", tf32), ("fp8", fp8), ("int8", int8)):
        if value is not None:
            peaks[key] = value
    return peaks


GPUS: dict[str, GpuSpec] = {spec.name: spec for spec in (
    # --- NVIDIA -------------------------------------------------------------------------------
    GpuSpec("V100 SXM2", _nv(7.8, 15.7, None, 125.0, None, None, bf16=False), 0.900,
            "NVIDIA Tesla V100 datasheet (SXM2: FP64 7.8, FP32 15.7, Tensor 125 TFLOPS; HBM2 900 GB/s)"),
    GpuSpec("V100 PCIe", _nv(7.0, 14.0, None, 112.0, None, None, bf16=False), 0.900,
            "NVIDIA Tesla V100 datasheet (PCIe: FP64 7, FP32 14, Tensor 112 TFLOPS; HBM2 900 GB/s)"),
    GpuSpec("V100S PCIe", _nv(8.2, 16.4, None, 130.0, None, None, bf16=False), 1.134,
            "NVIDIA V100S datasheet (FP64 8.2, FP32 16.4, Tensor 130 TFLOPS; 1134 GB/s)"),
    GpuSpec("A100 40GB", _nv(9.7, 19.5, 156.0, 312.0, None, 624.0), 1.555,
            "NVIDIA A100 datasheet (FP64 9.7, FP32 19.5, TF32 156, BF16/FP16 312, INT8 624 dense; "
            "40GB HBM2 1,555 GB/s)"),
    GpuSpec("A100 80GB SXM", _nv(9.7, 19.5, 156.0, 312.0, None, 624.0), 2.039,
            "NVIDIA A100 datasheet (80GB SXM: 2,039 GB/s; compute as A100 40GB)"),
    GpuSpec("A100 80GB PCIe", _nv(9.7, 19.5, 156.0, 312.0, None, 624.0), 1.935,
            "NVIDIA A100 datasheet (80GB PCIe: 1,935 GB/s; compute as A100 40GB)"),
    GpuSpec("H100 SXM", _nv(34.0, 67.0, 494.7, 989.4, 1978.9, 1978.9), 3.35,
            "NVIDIA H100 datasheet (SXM: FP64 34, FP32 67; TF32 989, BF16/FP16 1,979, FP8 3,958 "
            "with sparsity, halved for dense; HBM3 3.35 TB/s)"),
    GpuSpec("H100 PCIe", _nv(26.0, 51.0, 378.0, 756.0, 1513.0, 1513.0), 2.0,
            "NVIDIA H100 datasheet (PCIe: FP64 26, FP32 51; TF32 756, BF16/FP16 1,513, FP8 3,026 "
            "with sparsity, halved for dense; HBM2e 2 TB/s)"),
    GpuSpec("H100 NVL", _nv(30.0, 60.0, 417.5, 835.5, 1670.5, 1670.5), 3.9,
            "NVIDIA H100 NVL datasheet (FP64 30, FP32 60; TF32 835, BF16/FP16 1,671, FP8 3,341 "
            "with sparsity, halved for dense; HBM3 3.9 TB/s)"),
    GpuSpec("H200", _nv(34.0, 67.0, 494.7, 989.4, 1978.9, 1978.9), 4.8,
            "NVIDIA H200 datasheet (SXM: compute as H100 SXM; HBM3e 4.8 TB/s)"),
    GpuSpec("B200", _nv(37.0, 75.0, 1125.0, 2250.0, 4500.0, 4500.0), 8.0,
            "NVIDIA HGX B200 datasheet, 8-GPU figures / 8 (FP64 296, FP32 600 TFLOPS; TF32 18, "
            "FP16/BF16 36, FP8 72 PFLOPS with sparsity, halved for dense; HBM3e 8 TB/s per GPU)"),
    GpuSpec("L4", _nv(0.49, 30.3, 60.0, 121.0, 242.5, 242.5), 0.300,
            "NVIDIA L4 datasheet (FP32 30.3; TF32 120, BF16/FP16 242, FP8 485 with sparsity, "
            "halved for dense; 300 GB/s)", "FP64 is 1/64 of FP32 (Ada)"),
    GpuSpec("L40S", _nv(1.43, 91.6, 183.0, 362.05, 733.0, 733.0), 0.864,
            "NVIDIA L40S datasheet (FP32 91.6; TF32 366, BF16/FP16 733, FP8 1,466 with sparsity, "
            "halved for dense; 864 GB/s)", "FP64 is 1/64 of FP32 (Ada)"),
    GpuSpec("RTX 2080 Ti", _nv(0.42, 13.4, None, 53.8, None, 215.2, bf16=False), 0.616,
            "NVIDIA Turing architecture whitepaper, RTX 2080 Ti reference (FP32 13.4; FP16 Tensor "
            "with FP32 accumulate 53.8; INT8 215.2 TOPS; 616 GB/s)"),
    GpuSpec("RTX 3090", _nv(0.56, 35.6, 35.6, 71.0, None, 284.0), 0.936,
            "NVIDIA Ampere GA102 whitepaper, RTX 3090 (FP32 35.6; TF32 35.6; FP16/BF16 Tensor with "
            "FP32 accumulate 71; INT8 284 TOPS dense; 936 GB/s)"),
    GpuSpec("RTX 4090", _nv(1.29, 82.6, 82.6, 165.2, 330.3, 660.6), 1.008,
            "NVIDIA Ada Lovelace whitepaper, RTX 4090 (FP32 82.6; TF32 82.6; FP16/BF16 Tensor with "
            "FP32 accumulate 165.2; FP8 330.3; INT8 660.6 TOPS dense; 1,008 GB/s)"),
    # --- AMD (matrix-core peaks; per device = per GCD for the two-die MI250X) ------------------
    GpuSpec("MI210", {"fp64": 22.6, "fp32": 22.6, "fp32_matrix": 45.3, "fp16": 181.0, "bf16": 181.0,
                      "int8": 181.0}, 1.6,
            "AMD Instinct MI210 datasheet (FP64/FP32 vector 22.6, FP32 matrix 45.3, FP16/BF16 181, "
            "INT8 181 TOPS; HBM2e 1.6 TB/s)"),
    GpuSpec("MI250X (one GCD)", {"fp64": 23.95, "fp32": 23.95, "fp32_matrix": 47.85, "fp16": 191.5,
                                 "bf16": 191.5, "int8": 191.5}, 1.6,
            "AMD Instinct MI250X datasheet, package figures / 2 GCDs (FP32 vector 47.9, FP32 "
            "matrix 95.7, FP16/BF16 383, INT8 383 TOPS; HBM2e 3.2 TB/s)",
            "PyTorch sees each of the two GCDs as one device"),
    GpuSpec("MI300X", {"fp64": 81.7, "fp32": 163.4, "fp32_matrix": 163.4, "tf32": 653.7, "fp16": 1307.4,
                       "bf16": 1307.4, "fp8": 2614.9, "int8": 2614.9}, 5.3,
            "AMD Instinct MI300X datasheet (FP64 vector 81.7, FP32 163.4, TF32 653.7, FP16/BF16 "
            "1,307.4, FP8 2,614.9 dense; HBM3 5.3 TB/s)"),
    GpuSpec("MI325X", {"fp64": 81.7, "fp32": 163.4, "fp32_matrix": 163.4, "tf32": 653.7, "fp16": 1307.4,
                       "bf16": 1307.4, "fp8": 2614.9, "int8": 2614.9}, 6.0,
            "AMD Instinct MI325X datasheet (compute as MI300X; HBM3e 6 TB/s)"),
)}

# (pattern on the device name, spec name or a callable choosing by the properties), first match wins
_H100_SMS = {132: "H100 SXM", 114: "H100 PCIe"}
"""H100 variants by SM count, for a name that does not say which (``NVIDIA H100``)."""


def _a100(name: str, props: Mapping) -> str | None:
    memory = props.get("totalGlobalMem")
    big = "80GB" in name or (isinstance(memory, (int, float)) and memory > 60e9)
    if "PCIE" in name.upper():
        return "A100 80GB PCIe" if big else "A100 40GB"
    if "SXM" in name.upper() or "40GB" in name or "80GB" in name:
        return "A100 80GB SXM" if big else "A100 40GB"
    if isinstance(memory, (int, float)) and 0 < memory < 60e9:
        return "A100 40GB"  # SXM and PCIe 40 GB parts share every peak, so the form factor does not matter
    return None  # 80 GB SXM and PCIe differ in bandwidth; a name alone does not say which


def _h100(name: str, props: Mapping) -> str | None:
    upper = name.upper()
    if "NVL" in upper:
        return "H100 NVL"
    if "PCIE" in upper:
        return "H100 PCIe"
    if "SXM" in upper or "HBM3" in upper:
        return "H100 SXM"
    return _H100_SMS.get(props.get("numSms"))


def _v100(name: str, props: Mapping) -> str | None:
    upper = name.upper()
    if "V100S" in upper:
        return "V100S PCIe"
    if "PCIE" in upper:
        return "V100 PCIe"
    if "SXM2" in upper or "DGXS" in upper:  # the DGX Station's V100s are SXM2 parts
        return "V100 SXM2"
    return {80: "V100 SXM2"}.get(props.get("numSms")) if "SXM" in upper else None


_MATCHERS: tuple[tuple[re.Pattern, object], ...] = (
    (re.compile(r"\bV100"), _v100),
    (re.compile(r"\bA100"), _a100),
    (re.compile(r"\bH100"), _h100),
    (re.compile(r"\bH200"), "H200"),
    (re.compile(r"\bB200"), "B200"),
    (re.compile(r"\bL40S\b"), "L40S"),
    (re.compile(r"\bL4\b"), "L4"),
    (re.compile(r"RTX 2080 Ti", re.I), "RTX 2080 Ti"),
    (re.compile(r"RTX 3090(?! Ti)", re.I), "RTX 3090"),
    (re.compile(r"RTX 4090", re.I), "RTX 4090"),
    (re.compile(r"MI210"), "MI210"),
    (re.compile(r"MI250X"), "MI250X (one GCD)"),
    (re.compile(r"MI300X"), "MI300X"),
    (re.compile(r"MI325X"), "MI325X"),
)


@dataclass(frozen=True, slots=True)
class GpuMatch:
    """The GPU of one rank: the device name as recorded, and its spec when known."""

    device_name: str | None
    spec: GpuSpec | None
    note: str | None = field(default=None)


def match_gpu(device_name: str | None, props: Mapping | None = None) -> GpuMatch:
    """The :class:`GpuSpec` for a ``deviceProperties`` name (and the properties, for variants the
    name leaves open), or a match with no spec and a note saying why."""
    props = props or {}
    if not device_name:
        return GpuMatch(None, None, "the trace names no GPU (no deviceProperties): absolute figures only")
    for pattern, target in _MATCHERS:
        if pattern.search(device_name):
            key = target(device_name, props) if callable(target) else target
            if key is not None:
                return GpuMatch(device_name, GPUS[key])
            return GpuMatch(device_name, None, f"{device_name}: the variant (memory, form factor) is not "
                                              "identified, so no peak is assumed: absolute figures only")
    return GpuMatch(device_name, None, f"{device_name} is not in perfreport's GPU table "
                                       "(perfreport/analyses/efficiency/gpus.py): absolute figures only")


def rank_gpu(meta) -> GpuMatch:
    """The GPU of a rank from its :class:`~perfreport.model.TraceMeta` (the first device listed
    that kernels ran on is not known at this point: the first device's name, as HTA does)."""
    props = next((p for p in meta.device_properties if isinstance(p, dict)), {})
    return match_gpu(meta.gpu_name(), props)
