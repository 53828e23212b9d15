"""Pure analyses over a TraceSet. ``ANALYSES`` lists them in report order: (name, function)."""

from __future__ import annotations

from .summary import summary

ANALYSES = (("summary", summary),)
