"""HTA-compatible API: ``from perfreport.hta import TraceAnalysis, TraceDiff, LabeledTrace, DeviceType``.

Notebooks written for Holistic Trace Analysis 0.5.0 run unchanged apart from the import, and
get the same numbers (deviations where HTA is wrong are listed in docs/hta-differences.md).
This package is the only home of HTA's return shapes and quirks.
"""

from __future__ import annotations

from . import analyzers, common  # noqa: F401  (hta.common.trace... as attributes, as HTA's package)
from .analyzers import critical_path_analysis, cupti_counter_analysis  # noqa: F401
from .counters import CUDA_MAX_LAUNCH_QUEUE_PER_STREAM, TimeSeriesTypes
from .cp_graph import CPGraph
from .cp_save import restore_cpgraph
from .cp_types import CPEdge, CPEdgeType, CPNode
from .trace import HtaTrace as Trace
from .trace_analysis import TraceAnalysis
from .trace_diff import DeviceType, LabeledTrace, TraceDiff

__all__ = ["TraceAnalysis", "TraceDiff", "LabeledTrace", "DeviceType", "TimeSeriesTypes", "Trace", "CPGraph",
           "CPEdge", "CPEdgeType", "CPNode", "restore_cpgraph", "CUDA_MAX_LAUNCH_QUEUE_PER_STREAM"]
