"""HTA-compatible methods of TraceAnalysis: counters (see ../../docs/hta-differences.md)."""

from __future__ import annotations


class CountersMixin:
    """Mixed into :class:`perfreport.hta.TraceAnalysis`; uses self.t (an HtaTrace)."""
