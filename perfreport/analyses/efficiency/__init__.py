"""Efficiency: how close each op runs to the hardware (FLOPs, bytes, roofline, Tensor Cores,
occupancy). :mod:`.perfmodel` holds the formulas, :mod:`.gpus` the peaks, :mod:`.gpu_metrics`
the TensorBoard profiler's kernel metrics, :mod:`.op_efficiency` the per-op table."""

from .op_efficiency import op_efficiency
from .summary import efficiency_summary, gpu_metrics_per_step, kernel_efficiency

__all__ = ["efficiency_summary", "gpu_metrics_per_step", "kernel_efficiency", "op_efficiency"]
