"""HTA-compatible methods of TraceAnalysis: breakdown (see ../../docs/hta-differences.md)."""

from __future__ import annotations


class BreakdownMixin:
    """Mixed into :class:`perfreport.hta.TraceAnalysis`; uses self.t (an HtaTrace)."""
