"""``hta.common.trace`` names: ``Trace`` (perfreport's :class:`~perfreport.hta.trace.HtaTrace`)
and the Chrome trace phase constants HTA exports from it."""

from __future__ import annotations

from ..trace import HtaTrace as Trace

PHASE_COUNTER = "C"
PHASE_FLOW_START = "s"
PHASE_FLOW_END = "f"

__all__ = ["Trace", "PHASE_COUNTER", "PHASE_FLOW_START", "PHASE_FLOW_END"]
