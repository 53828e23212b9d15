"""The top of a single-run report: where the time goes, and what to try (HTA's guidance).

Everything is read off the summary document of the rank with the longest median step (the one
that sets the pace), so each line names its rank. The suggestions are rules on document
numbers, each written with the figures it rests on and the section that shows them:

* GPU idle is mostly *host wait* (the GPU drained its queue before the next launch) ->
  the input pipeline or the Python loop is the bottleneck: more DataLoader workers, pinned
  memory, a larger batch, CUDA graphs;
* most kernels are shorter than their launch call -> launch overhead dominates: fuse ops
  (``torch.compile``) or capture CUDA graphs;
* communication is mostly exposed (little overlap with compute) -> overlap it: DDP
  ``bucket_cap_mb``, FSDP prefetching, ``no_sync`` for accumulation steps;
* a straggler rank -> the others wait for it at every collective;
* memory copies take a large share of GPU busy time -> pinned memory and ``non_blocking``
  copies, or keep the data on the GPU;
* an op far from its roofline on a large share of the GPU time, or off the Tensor Cores (see
  :mod:`.efficiency`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..units import format_us
from .blocks import Side, records
from .efficiency import efficiency_suggestions
from .model import Cause, Headline, Suggestion

IDLE_PCT = 10.0
"""Idle share of the GPU span from which idle time is worth a suggestion."""
HOST_WAIT_SHARE = 50.0
SHORT_KERNEL_SHARE = 50.0
OVERLAP_PCT = 50.0
EXPOSED_COMM_PCT = 5.0
MEMORY_BUSY_PCT = 10.0


def pace_rank(side: Side) -> Any:
    """The rank that sets the pace: the slowest median step, else the first rank listed."""
    steps = [r for r in records(side, "step_times") if isinstance(r.get("wall_us_median"), (int, float))]
    if steps:
        return max(steps, key=lambda r: r["wall_us_median"]).get("rank")
    ranks = [r.get("rank") for r in records(side, "summary")]
    return ranks[0] if ranks else None


def _rows(side: Side, name: str, rank: Any) -> list[dict]:
    return [r for r in records(side, name) if r.get("rank") == rank]


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def analysis_headline(doc: Mapping[str, Any]) -> Headline | None:
    """Step time, GPU idle share and what fills the GPU span, for the pace-setting rank."""
    side = Side("", doc)
    rank = pace_rank(side)
    if rank is None:
        return None
    multi = len(records(side, "summary")) > 1
    who = f" on rank {rank}" + (" (the slowest)" if multi else "")
    steps = next(iter(_rows(side, "step_times", rank)), {})
    temporal = next(iter(_rows(side, "temporal_breakdown", rank)), {})
    parts = []
    if _num(steps.get("wall_us_median")) is not None:
        parts.append(f"step time {format_us(steps['wall_us_median'])} (median of {steps.get('steps')} steps)")
    if _num(temporal.get("idle_pct")) is not None:
        parts.append(f"GPU idle {temporal['idle_pct']:.1f} % of its span")
    text = (", ".join(parts) or "no GPU activity") + who
    causes = []
    if _num(temporal.get("compute_us")) is not None:
        causes.append(Cause("computation kernels", temporal["compute_us"], _num(temporal.get("compute_pct"))))
    idle = sorted(_rows(side, "idle_breakdown", rank), key=lambda r: -(_num(r.get("idle_us")) or 0.0))
    if idle and (_num(idle[0].get("idle_us")) or 0) > 0:
        top = idle[0]
        causes.append(Cause(f"GPU idle, mostly {str(top.get('idle_category')).replace('_', ' ')} on stream "
                            f"{top.get('stream')} ({top.get('idle_share_pct') or 0:.0f} % of its idle time)",
                            _num(temporal.get("idle_us")), _num(temporal.get("idle_pct"))))
    kernels = sorted((r for r in _rows(side, "kernel_metrics", rank) if str(r.get("name")) not in ("others", "other")),
                     key=lambda r: -(_num(r.get("sum_us")) or 0.0))  # HTA's top-N table ends with an "others" row
    if kernels:
        causes.append(Cause(f"top kernel {kernels[0].get('name')}", _num(kernels[0].get("sum_us"))))
    basis = (f"Times over the whole trace of rank {rank}; shares of its GPU span (first to last GPU activity)."
             if temporal else "")
    return Headline(text=text, causes=tuple(causes[:3]), basis=basis)


def suggestions(doc: Mapping[str, Any]) -> tuple[Suggestion, ...]:
    """What to try, each with its evidence (see the module docstring for the rules)."""
    side = Side("", doc)
    rank = pace_rank(side)
    if rank is None:
        return ()
    out: list[Suggestion] = []
    temporal = next(iter(_rows(side, "temporal_breakdown", rank)), {})
    idle_pct = _num(temporal.get("idle_pct")) or 0.0
    idle = sorted(_rows(side, "idle_breakdown", rank), key=lambda r: -(_num(r.get("idle_us")) or 0.0))
    host = next((r for r in idle if r.get("idle_category") == "host_wait"), None)
    if idle_pct >= IDLE_PCT and host and (_num(host.get("idle_share_pct")) or 0) >= HOST_WAIT_SHARE:
        out.append(Suggestion(
            "The GPU waits for the host: feed it faster (more DataLoader workers, pin_memory, a larger batch) or "
            "cut Python overhead per step (CUDA graphs, torch.compile).",
            f"rank {rank}: GPU idle {idle_pct:.1f} % of its span; on stream {host.get('stream')} "
            f"{host.get('idle_share_pct'):.0f} % of the idle time is host wait ({format_us(host.get('idle_us'))})",
            "idle"))
    launches = _rows(side, "launch_stats", rank)
    n = sum(_num(r.get("launches")) or 0.0 for r in launches)
    short = sum(_num(r.get("short_kernels")) or 0.0 for r in launches)
    if n and 100.0 * short / n >= SHORT_KERNEL_SHARE:
        out.append(Suggestion(
            "Most GPU work is shorter than its launch call: launch overhead dominates. Fuse small ops "
            "(torch.compile) or capture the step in a CUDA graph.",
            f"rank {rank}: {short:,.0f} of {n:,.0f} launches ({100.0 * short / n:.0f} %) ran shorter than the "
            f"call that launched them", "launch"))
    overlap = next(iter(_rows(side, "comm_comp_overlap", rank)), {})
    comm, exposed = _num(overlap.get("comm_us")) or 0.0, _num(overlap.get("exposed_comm_us")) or 0.0
    span = _num(temporal.get("gpu_span_us")) or 0.0
    if comm > 0 and (_num(overlap.get("overlap_pct")) or 0.0) < OVERLAP_PCT and span and \
            100.0 * exposed / span >= EXPOSED_COMM_PCT:
        out.append(Suggestion(
            "Communication is mostly exposed: overlap it with compute (DDP bucket_cap_mb, FSDP forward/backward "
            "prefetch, no_sync during gradient accumulation) or shrink it (gradient compression, larger "
            "buckets).",
            f"rank {rank}: {format_us(exposed)} of {format_us(comm)} communication not overlapped "
            f"({overlap.get('overlap_pct') or 0:.0f} % overlap), {100.0 * exposed / span:.1f} % of the GPU span",
            "overlap"))
    stragglers = [r for r in records(side, "stragglers") if r.get("is_straggler")]
    for r in stragglers[:2]:
        out.append(Suggestion(
            f"Rank {r.get('rank')} is a straggler: the other ranks wait for it at every collective. Check its "
            f"input shard, its GPU and host.",
            f"rank {r.get('rank')}: median step {format_us(r.get('wall_us_median'))}, "
            f"{r.get('wall_excess_pct') or 0:.0f} % over the others", "stragglers"))
    memory = next((r for r in _rows(side, "kernel_type_breakdown", rank) if r.get("kernel_type") == "MEMORY"), None)
    if memory and (_num(memory.get("busy_pct")) or 0) >= MEMORY_BUSY_PCT:
        out.append(Suggestion(
            "Memory copies take a large share of GPU busy time: use pinned memory and non_blocking copies, or "
            "keep the data on the GPU.",
            f"rank {rank}: memcpy/memset {format_us(memory.get('time_us'))}, {memory['busy_pct']:.1f} % of GPU busy "
            f"time", "kernels"))
    out += efficiency_suggestions(side, rank)
    return tuple(out)


__all__ = ["analysis_headline", "suggestions"]
