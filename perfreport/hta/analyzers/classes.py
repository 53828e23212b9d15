"""HTA 0.5.0's analyzer classes (``BreakdownAnalysis``, ``TraceCounters``, ...): class methods
taking HTA's ``Trace`` first, as ``hta.trace_analysis`` exports them. Each forwards to the
:class:`~perfreport.hta.TraceAnalysis` method of the same meaning over that trace, with the
class method's own argument names and defaults (which differ from ``TraceAnalysis``'s in places:
``get_idle_time_breakdown(t, consecutive_kernel_delay, rank=0)``, ``include_memory_kernels``
defaulting to False)."""

from __future__ import annotations

import pandas as pd

from ...analyses.stragglers import late_start_counts
from ..sequences import COMM_KERNEL_PREFIXES, _hta_late_start_metric


def _on(t):
    """A TraceAnalysis over an existing HTA trace object (no reload)."""
    from ..trace_analysis import TraceAnalysis

    analysis = TraceAnalysis.__new__(TraceAnalysis)
    analysis.t = t
    return analysis


def find_stragglers_with_late_start_comm_kernels(df: pd.DataFrame, symbol_table, n_stragglers: int = 2,
                                                 visualize: bool = False) -> pd.Series:
    """HTA's default straggler metric on ``df`` (all ranks' rows with a ``rank`` column): per
    rank, the number of iterations in which it starts the dominant communication kernel among
    the ``n_stragglers`` latest (normalised to its step); empty when none qualifies."""
    comm_ids = [i for i, s in enumerate(symbol_table.sym_table) if s.startswith(COMM_KERNEL_PREFIXES)]
    metric = _hta_late_start_metric(df[["rank", "ts", "dur", "stream", "iteration", "name"]], comm_ids)
    if metric is None:
        return pd.Series(dtype="int64")
    return late_start_counts(metric, n_stragglers)


class BreakdownAnalysis:
    @classmethod
    def get_gpu_kernel_breakdown(cls, t, visualize: bool = True, duration_ratio: float = 0.8, num_kernels: int = 10,
                                 include_memory_kernels: bool = False, image_renderer="notebook"):
        return _on(t).get_gpu_kernel_breakdown(visualize, duration_ratio, num_kernels, include_memory_kernels,
                                               image_renderer)

    @classmethod
    def get_gpu_kernels_with_user_annotations(cls, t, rank: int, expand_names: bool = True,
                                              shortern_names: bool = True):
        return _on(t).get_gpu_kernels_with_user_annotations(rank, expand_names, shortern_names)

    @classmethod
    def get_gpu_user_annotation_breakdown(cls, t, use_gpu_annotation: bool = True, visualize: bool = True,
                                          duration_ratio: float = 0.8, num_kernels: int = 1000,
                                          allowlist_patterns=None, image_renderer=None):
        return _on(t).get_gpu_user_annotation_breakdown(use_gpu_annotation, visualize, duration_ratio, num_kernels,
                                                        allowlist_patterns, image_renderer)

    @classmethod
    def get_temporal_breakdown(cls, t, visualize: bool = True):
        return _on(t).get_temporal_breakdown(visualize)

    @classmethod
    def get_idle_time_breakdown(cls, t, consecutive_kernel_delay: int, rank: int = 0, streams=None,
                                visualize: bool = True, visualize_pctg: bool = True, show_idle_interval_stats=False):
        return _on(t).get_idle_time_breakdown([rank], streams, visualize, visualize_pctg, show_idle_interval_stats,
                                              consecutive_kernel_delay)


class CommunicationAnalysis:
    @classmethod
    def get_comm_comp_overlap(cls, t, visualize: bool = True):
        return _on(t).get_comm_comp_overlap(visualize)


class CudaKernelAnalysis:
    @classmethod
    def get_frequent_cuda_kernel_sequences(cls, t, operator_name: str, output_dir: str, min_pattern_len: int = 3,
                                           rank: int = 0, top_k: int = 5, visualize: bool = True,
                                           compress_other_kernels: bool = True):
        return _on(t).get_frequent_cuda_kernel_sequences(operator_name, output_dir, min_pattern_len, rank, top_k,
                                                         visualize, compress_other_kernels)

    @classmethod
    def get_aten_op_kernels_and_delay(cls, trace, ranks=None, sort_by=None):
        return _on(trace).get_aten_op_kernels_and_delay(ranks, sort_by)

    @classmethod
    def cuda_kernel_launch_stats(cls, t, ranks=None, runtime_cutoff: int = 50, launch_delay_cutoff: int = 100,
                                 include_memory_events: bool = True, visualize: bool = True):
        return _on(t).get_cuda_kernel_launch_stats(ranks, runtime_cutoff, launch_delay_cutoff, include_memory_events,
                                                   visualize)


class CuptiCounterAnalysis:
    @classmethod
    def get_counter_data_with_operators(cls, t, ranks=None):
        return _on(t).get_cupti_counter_data_with_operators(ranks)


class StragglerAnalysis:
    @classmethod
    def get_profiler_steps(cls, t):
        return _on(t).get_profiler_steps()

    @classmethod
    def get_potential_stragglers(cls, t, profiler_steps=None, num_candidates: int = 2, visualize: bool = False,
                                 straggler_identification_impl=None):
        return _on(t).get_potential_stragglers(profiler_steps, num_candidates, visualize,
                                               straggler_identification_impl)


class TraceCounters:
    @classmethod
    def get_queue_length_time_series(cls, t, ranks=None):
        return _on(t).get_queue_length_time_series(ranks)

    @classmethod
    def get_queue_length_summary_from_time_series(cls, t, queue_length_dict):
        return _on(t).get_queue_length_summary_from_time_series(queue_length_dict)

    @classmethod
    def get_queue_length_summary(cls, t, ranks=None):
        return _on(t).get_queue_length_summary(ranks)

    @classmethod
    def get_time_spent_blocked_on_full_queue(cls, t, queue_length_dict, max_queue_length: int = 1024):
        return _on(t).get_time_spent_blocked_on_full_queue(queue_length_dict, max_queue_length)

    @classmethod
    def get_memory_bw_time_series(cls, t, ranks=None):
        return _on(t).get_memory_bw_time_series(ranks)

    @classmethod
    def get_memory_bw_summary(cls, t, ranks=None):
        return _on(t).get_memory_bw_summary(ranks)


__all__ = ["BreakdownAnalysis", "CommunicationAnalysis", "CudaKernelAnalysis", "CuptiCounterAnalysis",
           "StragglerAnalysis", "TraceCounters", "find_stragglers_with_late_start_comm_kernels"]
