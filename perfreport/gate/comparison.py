"""What every check family reads: the two sides of one comparison, the configuration, the
rank pairs, and the shared ways to group samples, list keys and test a change for significance."""

from __future__ import annotations

import functools
import math
import re

import numpy as np
import pandas as pd

from ..config import Config
from .checks import Evidence, Note
from .hostwait import HostWait, host_wait_only
from .keyed import table_keys
from .matched import SideCalls, matched_calls, side_calls
from .metrics import HIGHER, Group, Metric, SideData, aggregate
from .noise import Paired
from .stats import bootstrap_interval, mann_whitney_u
from .variants import Swap, kernel_swaps

MEMORY_KEY = re.compile(r"^(Memcpy|Memset)")
"""Op keys of copies and sets (not kernels)."""


class Comparison:
    """The two sides of one comparison and the configuration the checks are built from."""

    def __init__(self, b: SideData, c: SideData, config: Config, pairs: list[tuple[int, int]],
                 hardware_inconclusive: bool) -> None:
        self.b, self.c, self.config, self.pairs = b, c, config, pairs
        self.hw = hardware_inconclusive
        self.stats = config.stats
        self.notes: list[Note] = []
        """Notes the checks found on the way (kernel variants with unchanged time)."""
        self._step_medians: dict = {}
        """The baseline's median step times, by aggregation (:func:`~.metrics.aggregate`)."""

    def groups(self, b_values: pd.Series, c_values: pd.Series, aggregation: str, worse: str) -> list[Group]:
        return aggregate(self.b.steps, self.c.steps, b_values, c_values, aggregation, worse, self.pairs,
                         self._step_medians)

    def pooled(self, column: str) -> Group:
        """Every (rank, step) of ``column`` pooled over ranks: the samples of a ``mean`` check
        whose per-step means are too few (NaN dropped)."""
        out = []
        for side in (self.b, self.c):
            values = side.steps[column].to_numpy(np.float64)
            keep = ~np.isnan(values)
            out.append((values[keep], side.steps["run"].to_numpy()[keep]))
        step = self.b.steps["step_time_us"].to_numpy(np.float64)
        return Group(rank=None, baseline=out[0][0], candidate=out[1][0],
                     baseline_step_us=float(np.nanmedian(step)) if len(step) else math.nan,
                     baseline_runs=out[0][1], candidate_runs=out[1][1], sample_kind="rank-step")

    def paired(self, rank: int | None, *, cls: str | None = None, key: str | None = None) -> Paired | None:
        """Matched GPU op calls of the (candidate) ``rank`` (None: every rank pair): the i-th call
        of a key (normalised name) on a rank in the baseline against the i-th on its paired rank
        in the candidate, over the judged steps in order; ``cls`` or ``key`` select the calls.
        None when a side has no call table or no ranks pair."""
        pairs = [(x, y) for x, y in self.pairs if rank is None or y == rank]
        if self._calls is None or not pairs:
            return None
        return matched_calls(*self._calls, pairs, cls=cls, key=key)

    @functools.cached_property
    def _calls(self) -> tuple[SideCalls, SideCalls] | None:
        """Both sides' call tables, prepared once for every check's :meth:`paired`."""
        tables = (self.b.invocations, self.c.invocations)
        return None if any(t is None or not len(t) for t in tables) else side_calls(tables)

    @functools.cached_property
    def host_wait(self) -> HostWait | None:
        """Whether the sides differ only in host-side wait (:mod:`.hostwait`); None otherwise."""
        launches = self.config.structural.get("launches")
        return host_wait_only(self.b, self.c, gpu_tolerance_pct=self.stats.host_wait_gpu_tolerance_pct,
                              min_change_us=self.config.relative["step_time"].min_change_us,
                              launch_tolerance_pct=launches.tolerance_pct if launches else 1.0)

    @functools.cached_property
    def kernel_swaps(self) -> dict[str, Swap]:
        """Kernel families whose kernels changed while the family ran on both sides (:mod:`.variants`)."""
        keys = [k for k in self.keys("op_steps", ("key",)) if not MEMORY_KEY.match(k)]
        return kernel_swaps(self.b, self.c, self.pairs, keys)

    @functools.cached_property
    def faster_step(self) -> str | None:
        """A sentence when the candidate's steps are significantly faster beyond the step-time
        threshold (one-sided Mann-Whitney U on every (run, rank, step) sample), else None. GPU
        idle can then grow inside the GPU window while the step shrinks (a data wait that moved
        from before the first kernel to between kernels): a change of where the GPU waits, not a
        regression."""
        b = self.b.steps["step_time_us"].to_numpy(dtype=float) if len(self.b.steps) else np.empty(0)
        c = self.c.steps["step_time_us"].to_numpy(dtype=float) if len(self.c.steps) else np.empty(0)
        b, c = b[np.isfinite(b)], c[np.isfinite(c)]
        if min(len(b), len(c)) < self.stats.min_samples:
            return None
        b_med, c_med = float(np.median(b)), float(np.median(c))
        limit = self.config.relative["step_time"].max_increase_pct
        if not b_med or 100.0 * (b_med - c_med) / b_med <= limit:
            return None
        if mann_whitney_u(c, b, "less").p_value >= self.stats.alpha:
            return None
        return (f"the step got faster ({100.0 * (c_med - b_med) / b_med:+.1f} %, median "
                f"{b_med / 1000:.2f} → {c_med / 1000:.2f} ms): the GPU waits elsewhere in a shorter step")

    def keys(self, table: str, key_columns: tuple[str, ...]) -> list[str]:
        """Keys of ``table`` ("op_steps" or "collectives_per_step") on either side, baseline first."""
        keys: dict[str, None] = {}
        for side in (self.b, self.c):
            frame = side.ops if table == "op_steps" else side.collectives
            if len(frame):
                keys.update(dict.fromkeys(table_keys(side, table, key_columns)[1].tolist()))
        return list(keys)

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
