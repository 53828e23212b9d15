"""perfreport: where does the GPU time go, and did this change make it worse?

Reads PyTorch profiler (Kineto) traces, one JSON or JSON.gz file per rank.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .errors import PerfreportError, TraceError  # noqa: E402
from .load import load  # noqa: E402
from .model import RankTrace, TraceSet  # noqa: E402

__all__ = ["load", "PerfreportError", "TraceError", "RankTrace", "TraceSet", "__version__"]
