"""HTA-compatible methods of TraceAnalysis: sequences (see ../../docs/hta-differences.md)."""

from __future__ import annotations


class SequencesMixin:
    """Mixed into :class:`perfreport.hta.TraceAnalysis`; uses self.t (an HtaTrace)."""
