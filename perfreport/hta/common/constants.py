"""``hta.common.constants`` values user code reads."""

from __future__ import annotations

from ..counters import CUDA_MAX_LAUNCH_QUEUE_PER_STREAM

MAX_EVENT_DURATION_US: int = 604_800_000_000
"""HTA 0.6's longest valid event (7 days, µs): longer ones are corrupted (CUPTI timestamp
overflow) and dropped. perfreport's loader already drops events longer than its
``max_span_s`` limit (1 day by default, ``--limit max_span_s=...``)."""

__all__ = ["CUDA_MAX_LAUNCH_QUEUE_PER_STREAM", "MAX_EVENT_DURATION_US"]
