"""Collectives on the HTA API (HTA 0.6 parses NCCL's ``seq_num`` / ``collective_name`` but has no
method that uses them): ``TraceAnalysis.get_collectives`` and ``get_collective_skew`` are
perfreport's own tables (:mod:`perfreport.analyses.collectives`, :mod:`perfreport.analyses.matching`)
over the loaded trace set, with calls matched across ranks by (process group, seq_num) where the
trace has it."""

from __future__ import annotations

import pandas as pd

from ..analyses.collectives import collectives
from ..analyses.matching import collective_skew


class CollectivesMixin:
    """Mixed into :class:`perfreport.hta.TraceAnalysis`; uses self.t.traceset."""

    def get_collectives(self) -> pd.DataFrame:
        """One row per collective call of every rank: kind, process_group, seq (NCCL's, -1 when
        absent), start/duration/exposed µs on the job's common clock, message bytes, algbw and
        busbw (GB/s)."""
        return collectives(self.t.traceset)

    def get_collective_skew(self) -> pd.DataFrame:
        """Per collective matched across ranks (by NCCL seq within its process group, else by
        order within the step; ``matched_by``): ranks, first start, start skew (µs), earliest
        and latest rank, and whether the ranks' kernels overlap as one collective's must."""
        return collective_skew(self.t.traceset)
