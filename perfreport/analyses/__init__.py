"""Pure analyses over a TraceSet. ``ANALYSES`` lists them in report order: (name, function).

Each function takes a TraceSet (all ranks) and returns one DataFrame whose column names carry
their units; ``*_per_step`` variants give one row per profiler step, the gate's samples.
"""

from .annotations import gpu_user_annotation_breakdown
from .callstack import op_kernels
from .efficiency import efficiency_summary, gpu_metrics_per_step, kernel_efficiency, op_efficiency
from .collectives import collective_summary, collectives, collectives_per_step
from .matching import collective_skew, straggler_evidence
from .op_profile import op_profile
from .launch import aten_op_launch_delays, aten_op_launch_delays_by_step, launch_summary, launch_summary_by_step
from .memory import memory_by_op, memory_peaks, memory_per_step, memory_timeline
from .memory_bw import memory_bw_by_direction, memory_bw_by_step, memory_bw_summary
from .queue import queue_length_by_step, queue_length_summary, time_blocked_on_full_queue
from .sequences import kernel_sequences
from .step_metrics import step_metrics
from .steps import profiler_steps, step_times
from .stragglers import straggler_steps, stragglers
from .idle import idle_breakdown, idle_breakdown_per_step, idle_interval_stats
from .kernels import kernel_metrics, kernel_rank_distribution, kernel_type_breakdown, kernel_type_breakdown_per_step
from .overlap import comm_comp_overlap, comm_comp_overlap_per_step
from .stake import time_at_stake
from .summary import summary
from .temporal import temporal_breakdown, temporal_breakdown_per_step

ANALYSES = (
    ("summary", summary),
    ("profiler_steps", profiler_steps),
    ("step_times", step_times),
    ("step_metrics", step_metrics),
    ("time_at_stake", time_at_stake),
    ("temporal_breakdown", temporal_breakdown),
    ("temporal_breakdown_per_step", temporal_breakdown_per_step),
    ("idle_breakdown", idle_breakdown),
    ("idle_interval_stats", idle_interval_stats),
    ("idle_breakdown_per_step", idle_breakdown_per_step),
    ("kernel_type_breakdown", kernel_type_breakdown),
    ("kernel_type_breakdown_per_step", kernel_type_breakdown_per_step),
    ("kernel_metrics", kernel_metrics),
    ("kernel_rank_distribution", kernel_rank_distribution),
    ("comm_comp_overlap", comm_comp_overlap),
    ("comm_comp_overlap_per_step", comm_comp_overlap_per_step),
    ("gpu_user_annotation_breakdown", gpu_user_annotation_breakdown),
    ("queue_length", queue_length_summary),
    ("queue_length_by_step", queue_length_by_step),
    ("time_blocked_on_full_queue", time_blocked_on_full_queue),
    ("memory_bw", memory_bw_summary),
    ("memory_bw_by_direction", memory_bw_by_direction),
    ("memory_bw_by_step", memory_bw_by_step),
    ("launch_stats", launch_summary),
    ("launch_stats_by_step", launch_summary_by_step),
    ("aten_op_launch_delays", aten_op_launch_delays),
    ("aten_op_launch_delays_by_step", aten_op_launch_delays_by_step),
    ("memory_timeline", memory_timeline),
    ("memory_peaks", memory_peaks),
    ("memory_by_op", memory_by_op),
    ("memory_per_step", memory_per_step),
    ("collectives", collectives),
    ("collective_summary", collective_summary),
    ("collectives_per_step", collectives_per_step),
    ("collective_skew", collective_skew),
    ("straggler_evidence", straggler_evidence),
    ("op_profile", op_profile),
    ("op_kernels", op_kernels),
    ("kernel_sequences", kernel_sequences),
    ("efficiency_summary", efficiency_summary),
    ("op_efficiency", op_efficiency),
    ("gpu_metrics_per_step", gpu_metrics_per_step),
    ("kernel_efficiency", kernel_efficiency),
    ("stragglers", stragglers),
    ("straggler_steps", straggler_steps),
)
