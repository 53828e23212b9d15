"""Frequent GPU kernel sequences under an operator.

An operator's *pattern* is its name followed by the names of the GPU events (kernels, memcpy,
memset) launched anywhere below it, in start order (ties in file order). Counting patterns
over every call shows what an operator really runs: ``aten::linear`` may be one GEMM on one
shape and GEMM + bias kernel + memset on another.

The roots are the outermost matching calls: an operator whose name contains ``operator``
(every ``cpu_op`` when ``operator`` is None) and that is not itself below another matching
call, with at least ``min_kernels`` GPU events. (HTA instead keeps only the matches at the
single shallowest depth found in the rank, which misses calls made at other depths.)

Edge cases: no matching operator, or none launching ``min_kernels`` GPU events, gives an
empty frame with the columns; times are µs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import CPU_OP_CATEGORIES, RankTrace, TraceSet
from .callstack import ancestor_at_depth, call_stack, kernel_totals

COLUMNS = ("rank", "operator", "pattern", "kernels", "count", "kernel_dur_sum_us", "cpu_dur_us")
MIN_KERNELS = 3
"""Shortest sequence counted, as HTA's ``min_pattern_len``."""


def _outermost(stack, matches: np.ndarray) -> np.ndarray:
    """Rows of ``matches`` with no matching ancestor (a walk up, one depth level at a time)."""
    outer = matches.copy()
    anc = np.where(matches, stack.parent, -1)
    while (anc >= 0).any():
        live = anc >= 0
        hit = np.zeros_like(live)
        hit[live] = matches[anc[live]]
        outer &= ~hit
        anc = np.where(live & ~hit, stack.parent[np.clip(anc, 0, None)], -1)
    return np.flatnonzero(outer)


def rank_sequences(trace: RankTrace, operator: str | None = None, min_kernels: int = MIN_KERNELS) -> pd.DataFrame:
    """Rows of :func:`kernel_sequences` for one rank."""
    stack = call_stack(trace)
    ops = trace.complete & trace.is_cat(CPU_OP_CATEGORIES) & stack.is_node
    if operator is not None:
        ops &= np.isin(trace.name, trace.codes_where(lambda s: operator in s))
    totals = kernel_totals(trace, stack)
    roots = _outermost(stack, ops)
    roots = roots[totals["num_kernels"].to_numpy()[roots] >= min_kernels]
    if len(roots) == 0:
        return pd.DataFrame(columns=list(COLUMNS))
    # every GPU event below a root: its ancestor at the root's depth is the root
    gpu = np.flatnonzero(stack.is_node & trace.gpu_activity())
    is_root = np.zeros(trace.n_events, bool)
    is_root[roots] = True
    owner = np.full(len(gpu), -1, np.int64)
    for d in np.unique(stack.depth[roots]):  # a loop over distinct root depths
        anc = ancestor_at_depth(stack.parent, stack.depth, int(d))[gpu]
        ok = (anc >= 0) & is_root[np.clip(anc, 0, None)]
        owner[ok] = anc[ok]
    keep = owner >= 0
    gpu, owner = gpu[keep], owner[keep]
    order = np.lexsort((gpu, trace.ts[gpu], owner))
    gpu, owner = gpu[order], owner[order]
    lo = np.searchsorted(owner, roots, side="left")
    hi = np.searchsorted(owner, roots, side="right")
    kernel_names = trace.decode(trace.name[gpu]).tolist()
    op_names = trace.decode(trace.name[roots]).tolist()
    patterns = ["|".join([op, *kernel_names[a:b]]) for op, a, b in zip(op_names, lo, hi)]  # per root op
    f = pd.DataFrame({
        "rank": trace.rank, "operator": op_names, "pattern": patterns, "kernels": (hi - lo).astype(np.int64),
        "count": 1, "kernel_dur_sum_us": totals["kernel_dur_sum_us"].to_numpy()[roots],
        "cpu_dur_us": trace.dur[roots],
    })
    f = f.groupby(["rank", "operator", "pattern", "kernels"], as_index=False, sort=False).sum()
    return f.sort_values(["count", "pattern"], ascending=[False, True], kind="stable").reset_index(drop=True)


def kernel_sequences(traces: TraceSet, operator: str | None = None, min_kernels: int = MIN_KERNELS) -> pd.DataFrame:
    """One row per (rank, pattern): the operator, the pattern ("op|kernel|kernel|…"), its
    number of GPU events, how many calls ran it, their GPU time (µs, sum of the GPU events'
    durations) and CPU time (µs, sum of the calls' durations). Most frequent first per rank."""
    frames = [f for f in (rank_sequences(t, operator, min_kernels) for t in traces) if len(f)]
    if not frames:
        return pd.DataFrame(columns=list(COLUMNS))
    return pd.concat(frames, ignore_index=True)
