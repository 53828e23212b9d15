"""HTA's trace diff API: ``LabeledTrace``, ``TraceDiff``, ``DeviceType``."""

from __future__ import annotations

from enum import Enum


class DeviceType(Enum):
    """Which events a diff compares: CPU ops, GPU ops, or both (HTA's values)."""

    CPU = 1
    GPU = 2
    ALL = 3
