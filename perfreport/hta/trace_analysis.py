"""``TraceAnalysis``: HTA's analysis entry point with HTA's method names, arguments, defaults
and return shapes. Each group of methods lives in its own mixin module."""

from __future__ import annotations

from .breakdown import BreakdownMixin
from .counters import CountersMixin
from .critical_path import CriticalPathMixin
from .sequences import SequencesMixin
from .trace import HtaTrace


class TraceAnalysis(BreakdownMixin, CountersMixin, SequencesMixin, CriticalPathMixin):
    """``TraceAnalysis(trace_dir=...)`` as in HTA 0.5.0 (``trace_files`` may map rank -> path)."""

    def __init__(self, trace_files: dict[int, str] | None = None, trace_dir: str = "/tmp/trace",
                 include_last_profiler_step: bool = False) -> None:
        self.t = HtaTrace(trace_files=trace_files, trace_dir=trace_dir,
                          include_last_profiler_step=include_last_profiler_step)
