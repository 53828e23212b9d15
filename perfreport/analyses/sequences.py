"""Frequent GPU kernel sequences under an operator.

An operator's *pattern* is its name followed by the names of the GPU events (kernels, memcpy,
memset) launched anywhere below it, in start order (ties in file order). Counting patterns
over every call shows what an operator really runs: ``aten::linear`` may be one GEMM on one
shape and GEMM + bias kernel + memset on another.

The roots are the outermost matching calls: an operator whose name contains ``operator``
(every ``cpu_op`` when ``operator`` is None, but a 2021 trace's ``ProfilerStep#N`` span, which
is the step: :func:`~.callstack.outermost_ops`) and that is not itself below another matching
call, with at least ``min_kernels`` GPU events. (HTA instead keeps only the matches at the
single shallowest depth found in the rank, which misses calls made at other depths.)

Edge cases: no matching operator, or none launching ``min_kernels`` GPU events, gives an
empty frame with the columns; times are µs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..model import RankTrace, TraceSet
from .callstack import call_stack, cpu_ops, outermost_ops, roots_of, stack_levels, subtree_gpu_work, topmost_match
from .grouping import Grouped, run_ids, string_keys

COLUMNS = ("rank", "operator", "pattern", "kernels", "count", "kernel_dur_sum_us", "cpu_dur_us")
MIN_KERNELS = 3
"""Shortest sequence counted, as HTA's ``min_pattern_len``."""


def _topmost(trace: RankTrace, stack, operator: str | None) -> np.ndarray:
    """Per event: its outermost matching operator (itself included), -1 if none."""
    if operator is None:
        return outermost_ops(trace)  # every cpu_op matches: shared with op_kernels
    matches = cpu_ops(trace, stack) & trace.name_in(trace.codes_where(lambda s: operator in s))
    return topmost_match(stack.parent, stack_levels(trace), matches)


def rank_sequences(trace: RankTrace, operator: str | None = None, min_kernels: int = MIN_KERNELS) -> pd.DataFrame:
    """Rows of :func:`kernel_sequences` for one rank."""
    stack = call_stack(trace)
    top = _topmost(trace, stack, operator)
    num_kernels, kernel_dur = subtree_gpu_work(trace)
    roots = roots_of(top)
    roots = roots[num_kernels[roots] >= min_kernels]
    if len(roots) == 0:
        return pd.DataFrame(columns=list(COLUMNS))
    # every GPU event below a root: a root has no matching ancestor, so it is the event's
    # outermost match (GPU events under a match left out for too few kernels have none)
    gpu = np.flatnonzero(stack.is_node & trace.gpu_activity())
    is_root = np.zeros(trace.n_events, bool)
    is_root[roots] = True
    owner = top[gpu]
    keep = owner >= 0
    keep[keep] = is_root[owner[keep]]
    gpu, owner = gpu[keep], owner[keep]
    order = np.lexsort((gpu, trace.ts[gpu], owner))
    gpu, owner = gpu[order], owner[order]
    lo = np.searchsorted(owner, roots, side="left")
    hi = np.searchsorted(owner, roots, side="right")
    text, pattern_key = _patterns(trace, trace.name[roots], trace.name[gpu], lo)
    op_key, op_names = string_keys(trace.name[roots], trace.strings)
    kernels = (hi - lo).astype(np.int64)
    # one group per (operator, pattern, kernels), in order of first appearance, as a groupby of the strings
    group = pd.factorize((op_key * (int(pattern_key.max()) + 1) + pattern_key) * (int(kernels.max()) + 1)
                         + kernels)[0]
    g = Grouped({"group": group}, ["group"])  # factorize numbered the groups by first appearance
    first = g.first
    f = pd.DataFrame({
        "rank": trace.rank, "operator": op_names[op_key[first]], "pattern": text[first], "kernels": kernels[first],
        "count": g.size(), "kernel_dur_sum_us": g.sum(kernel_dur[roots]), "cpu_dur_us": g.sum(trace.dur[roots]),
    })
    return f.sort_values(["count", "pattern"], ascending=[False, True], kind="stable").reset_index(drop=True)


def _patterns(trace: RankTrace, op_codes: np.ndarray, kernel_codes: np.ndarray,
              lo: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(text, key) per root op: its pattern "op|kernel|kernel|…" (the kernels of root i are
    ``kernel_codes[lo[i]:lo[i+1]]``) and an integer equal for equal texts.

    Equal code runs are found first (:func:`run_ids`), so each distinct pattern is joined once,
    not once per call.
    """
    starts = lo + np.arange(len(lo))  # each run: the op code, then its kernels' codes
    codes = np.empty(len(kernel_codes) + len(lo), dtype=np.int64)
    is_op = np.zeros(len(codes), dtype=bool)
    is_op[starts] = True
    codes[is_op], codes[~is_op] = op_codes, kernel_codes
    ids, rep = run_ids(codes, starts)
    ends = np.append(starts[1:], len(codes))
    names = trace.decode(codes).tolist()
    texts = np.array(["|".join(names[a:b]) for a, b in zip(starts[rep], ends[rep])], dtype=object)
    _, key = np.unique(texts, return_inverse=True)  # distinct runs may still join to one text
    return texts[ids], key.ravel()[ids]


def kernel_sequences(traces: TraceSet, operator: str | None = None, min_kernels: int = MIN_KERNELS) -> pd.DataFrame:
    """One row per (rank, pattern): the operator, the pattern ("op|kernel|kernel|…"), its
    number of GPU events, how many calls ran it, their GPU time (µs, sum of the GPU events'
    durations) and CPU time (µs, sum of the calls' durations). Most frequent first per rank."""
    frames = [f for f in (rank_sequences(t, operator, min_kernels) for t in traces) if len(f)]
    if not frames:
        return pd.DataFrame(columns=list(COLUMNS))
    return pd.concat(frames, ignore_index=True)
