"""``TraceAnalysis``: HTA's analysis entry point with HTA's method names, arguments, defaults
and return shapes. Each group of methods lives in its own mixin module."""

from __future__ import annotations

import logging
# The names HTA's hta.trace_analysis module has in its namespace (code does import them from it)
from collections import defaultdict  # noqa: F401
from enum import Flag, auto  # noqa: F401
from typing import Any, Callable, Dict, List, Optional, Tuple, Union  # noqa: F401

import pandas as pd  # noqa: F401

from .analyzers.classes import (BreakdownAnalysis, CommunicationAnalysis, CudaKernelAnalysis, CuptiCounterAnalysis,
                                StragglerAnalysis, TraceCounters, find_stragglers_with_late_start_comm_kernels)
from .analyzers.critical_path_analysis import CriticalPathAnalysis
from .breakdown import BreakdownMixin
from .collectives import CollectivesMixin
from .counters import CUDA_MAX_LAUNCH_QUEUE_PER_STREAM, CountersMixin, TimeSeriesTypes
from .common.constants import MAX_EVENT_DURATION_US
from .cp_graph import CPGraph
from .critical_path import CriticalPathMixin
from .sequences import SequencesMixin
from .trace import HtaTrace
from .trace import HtaTrace as Trace

DEFAULT_TRACE_DIR = "/tmp/trace"
logger = logging.getLogger("perfreport.hta")

__all__ = ["TraceAnalysis", "TimeSeriesTypes", "Trace", "CPGraph", "CriticalPathAnalysis", "BreakdownAnalysis",
           "CommunicationAnalysis", "CudaKernelAnalysis", "CuptiCounterAnalysis", "StragglerAnalysis", "TraceCounters",
           "find_stragglers_with_late_start_comm_kernels",
           "CUDA_MAX_LAUNCH_QUEUE_PER_STREAM", "DEFAULT_TRACE_DIR", "MAX_EVENT_DURATION_US", "logger"]


class TraceAnalysis(BreakdownMixin, CountersMixin, SequencesMixin, CriticalPathMixin, CollectivesMixin):
    """``TraceAnalysis(trace_dir=...)`` as in HTA 0.5.0 (``trace_files`` may map rank -> path)."""

    def __init__(self, trace_files: dict[int, str] | None = None, trace_dir: str = DEFAULT_TRACE_DIR,
                 include_last_profiler_step: bool = False, *,
                 max_event_duration_us: float | None = None) -> None:
        """``max_event_duration_us``: HTA 0.6's filter, events longer than this (µs) are dropped
        as corrupted. The default, None, leaves perfreport's loader limit (``max_span_s``, 1 day),
        which is stricter than HTA 0.6's default of 7 days (``MAX_EVENT_DURATION_US``)."""
        self.t = HtaTrace(trace_files=trace_files, trace_dir=trace_dir,
                          include_last_profiler_step=include_last_profiler_step,
                          max_event_duration_us=max_event_duration_us)
