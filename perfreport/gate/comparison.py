"""What every check family reads: the two sides of one comparison, the configuration, the
rank pairs, and the shared ways to group samples, list keys and test a change for significance."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ..config import Config
from .checks import Evidence
from .metrics import HIGHER, Group, Metric, SideData, aggregate, key_of
from .stats import bootstrap_interval, mann_whitney_u

MEMORY_KEY = re.compile(r"^(Memcpy|Memset)")
"""Op keys of copies and sets (not kernels)."""


class Comparison:
    """The two sides of one comparison and the configuration the checks are built from."""

    def __init__(self, b: SideData, c: SideData, config: Config, pairs: list[tuple[int, int]],
                 hardware_inconclusive: bool) -> None:
        self.b, self.c, self.config, self.pairs = b, c, config, pairs
        self.hw = hardware_inconclusive
        self.stats = config.stats

    def groups(self, b_values: pd.Series, c_values: pd.Series, aggregation: str, worse: str) -> list[Group]:
        return aggregate(self.b.steps, self.c.steps, b_values, c_values, aggregation, worse, self.pairs)

    def keys(self, table: str, key_columns: tuple[str, ...]) -> list[str]:
        """Keys of ``table`` ("op_steps" or "collectives_per_step") on either side, baseline first."""
        keys: list[str] = []
        for side in (self.b, self.c):
            frame = side.ops if table == "op_steps" else side.collectives
            if not len(frame):
                continue
            keys += [k for k in dict.fromkeys(key_of(frame, key_columns)) if k not in keys]
        return keys

    def evidence(self, b: np.ndarray, c: np.ndarray, metric: Metric) -> Evidence:
        """Whether ``c`` is significantly worse than ``b`` (``stats.test``), with the bootstrap interval."""
        s = self.stats
        alternative = "greater" if metric.worse == HIGHER else "less"
        u = mann_whitney_u(c, b, alternative)
        statistic = "difference" if metric.unit == "pct" else "ratio"
        confidence = 100.0 * (1.0 - 2.0 * s.alpha)
        lo, hi = bootstrap_interval(c, b, statistic=statistic, confidence_pct=confidence,
                                    resamples=s.bootstrap_resamples, seed=s.seed)
        if not math.isfinite(lo) and statistic == "ratio":  # a baseline median of 0: no ratio, use the difference
            statistic = "difference"
            lo, hi = bootstrap_interval(c, b, statistic=statistic, confidence_pct=confidence,
                                        resamples=s.bootstrap_resamples, seed=s.seed)
        if s.test == "bootstrap":
            no_change = 1.0 if statistic == "ratio" else 0.0
            significant = bool(lo > no_change) if metric.worse == HIGHER else bool(hi < no_change)
        else:
            significant = bool(u.p_value < s.alpha)
        interval = (lo, hi) if math.isfinite(lo) else None
        return Evidence(test=s.test if s.test == "bootstrap" else "mann-whitney-u", baseline_samples=len(b),
                        candidate_samples=len(c), p_value=u.p_value if u.method != "none" else None, alpha=s.alpha,
                        method=u.method, interval=interval,
                        interval_of=f"{statistic} of medians (candidate {'/' if statistic == 'ratio' else '-'} "
                                    f"baseline)",
                        confidence_pct=confidence, significant=significant)
