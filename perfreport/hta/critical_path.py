"""HTA-compatible methods of TraceAnalysis: critical_path (see ../../docs/hta-differences.md)."""

from __future__ import annotations


class CriticalPathMixin:
    """Mixed into :class:`perfreport.hta.TraceAnalysis`; uses self.t (an HtaTrace)."""
