"""The diagnosis of one run: where the step time goes and what to fix first, ranked by the time
at stake.

Read off the analysis tables of the rank that sets the pace (the longest median step,
:func:`pace_rank`): :func:`perfreport.analyses.stake.time_at_stake` splits each of its steps
into causes that add up to the step (compute kernels, exposed communication on the GPU or the
host, exposed copies, GPU idle after a host sync, GPU idle inside launch calls, GPU idle while
the host runs a named op). Each cause's µs per step is the time it holds the step: what the step
could give back if that cause went away. "Where the time goes" lists the causes by that time
(compute, communication and copies as one cause each, host ops one cause per op); the
suggestions are rules on the same causes, each written with its evidence and time at stake, in
the same order, plus a straggler suggestion when :func:`perfreport.analyses.stragglers.is_late`
flags a rank (its time at stake: how long the others wait for it per step).

Without profiler steps the split is over the whole trace of the rank (shares of the trace, not
per step); when no window could be split at all, the GPU span's compute / non-compute / idle
shares (:mod:`perfreport.analyses.temporal`) stand in; ``basis`` says which. The result is a
plain JSON-ready dict (``summary.json``'s ``diagnosis``), rendered by
:mod:`perfreport.report.guidance` without computing anything.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from .analyses.stake import BACKWARD, NO_OP
from .units import format_pct, format_us

SUGGEST_PCT = 5.0
"""A cause is worth a suggestion from this share of the step."""
WHERE_TOP = 5
"""Causes listed under "where the time goes"."""
DETAIL_TOP = 3
"""Keys named inside a cause ("all_reduce 23.1 ms, broadcast 1.9 ms")."""

_GROUPED = ("compute", "communication", "memory", "sync", "launch")
_LABELS = {"compute": "compute kernels", "communication": "exposed communication",
           "memory": "exposed memcpy/memset", "sync": "GPU idle after host syncs",
           "launch": "GPU idle inside kernel launch calls"}
_SECTIONS = {"compute": "kernels", "communication": "overlap", "memory": "kernels", "sync": "idle",
             "launch": "launch", "host": "idle", "straggler": "stragglers"}


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def pace_rank(tables: Mapping[str, pd.DataFrame]) -> int | None:
    """The rank that sets the pace: the longest median step, else the first rank analysed."""
    steps = tables.get("step_times")
    if steps is not None and len(steps) and steps["wall_us_median"].notna().any():
        return int(steps.loc[steps["wall_us_median"].idxmax(), "rank"])
    for name in ("time_at_stake", "summary"):
        t = tables.get(name)
        if t is not None and len(t):
            return int(t["rank"].min())
    return None


def host_op_kind(key: str) -> str:
    """What a host op is, for the advice: dataloader, optimizer, backward, no_op or op."""
    if key == NO_OP:
        return "no_op"
    if key == BACKWARD:
        return "backward"
    if "DataLoader" in key or key.endswith("__next__"):
        return "dataloader"
    if "zero_grad" not in key and (key.startswith("Optimizer.step") or "optimizer" in key.lower()):
        return "optimizer"
    return "op"


def short_op(name: str) -> str:
    """"enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" -> the part after ``#``."""
    return name.rsplit("#", 1)[-1] if "#" in name and not name.endswith("#") else name


def _causes(rows: pd.DataFrame) -> list[dict]:
    """One cause per grouped kind and one per host op, with their top keys, largest first."""
    out = []
    for kind in _GROUPED:
        g = rows.loc[rows["kind"] == kind].sort_values("us_per_step", ascending=False, kind="stable")
        total = float(g["us_per_step"].sum())
        if total <= 0:
            continue
        named = g.loc[g["key"] != "other"]
        out.append({"kind": kind, "key": None, "label": _LABELS[kind], "us_per_step": total,
                    "pct_of_step": float(g["pct_of_step"].sum()),
                    "cpu_us_per_step": float(g.loc[g["runs_on"] == "CPU", "us_per_step"].sum()),
                    "top": [{"key": str(r.key), "runs_on": str(r.runs_on), "us_per_step": float(r.us_per_step)}
                            for r in named.head(DETAIL_TOP).itertuples()]})
    for r in rows.loc[rows["kind"] == "host"].itertuples():
        key = str(r.key)
        label = ("GPU idle, host outside any recorded op (Python, untraced waits)" if key == NO_OP
                 else "GPU idle while the host runs other ops" if key == "other"
                 else f"GPU idle while the host runs {short_op(key)}")
        out.append({"kind": "host", "key": key, "label": label, "us_per_step": float(r.us_per_step),
                    "pct_of_step": float(r.pct_of_step), "host_op": host_op_kind(key), "top": []})
    out.sort(key=lambda c: -c["us_per_step"])
    return out


def _detail(cause: Mapping[str, Any]) -> str:
    parts = []
    for t in cause["top"]:
        where = " on the host" if cause["kind"] == "communication" and t["runs_on"] == "CPU" else ""
        parts.append(f"{t['key']}{where} {format_us(t['us_per_step'])}")
    return ", ".join(parts)


def _advice(cause: Mapping[str, Any]) -> str:
    kind = cause["kind"]
    if kind == "communication":
        if cause["cpu_us_per_step"] >= 0.5 * cause["us_per_step"]:
            return ("Communication runs on the host (gloo) while the GPU waits: use the NCCL backend for GPU "
                    "tensors, overlap it with compute (DDP bucket_cap_mb, FSDP prefetch) or communicate less "
                    "(no_sync during gradient accumulation, larger batches).")
        return ("Communication is exposed: overlap it with compute (DDP bucket_cap_mb, FSDP forward/backward "
                "prefetch, no_sync during gradient accumulation) or shrink it (larger buckets, compression).")
    if kind == "compute":
        return ("Compute kernels hold the step: speed up the top kernels (bf16/fp16 autocast, Tensor Core "
                "friendly shapes, fused kernels via torch.compile, FlashAttention) or do less work per step.")
    if kind == "memory":
        return ("Copies hold the GPU with nothing to hide them: pinned memory and non_blocking copies, keep the "
                "data on the GPU, avoid .cpu()/.item() inside the step.")
    if kind == "sync":
        return ("The host blocks on the GPU, then the GPU idles until the next launch: take synchronising calls "
                "(.item(), .cpu(), torch.cuda.synchronize, printing tensors) out of the step.")
    if kind == "launch":
        return ("The GPU idles while the host launches kernels: launch overhead. Fuse small ops (torch.compile) "
                "or capture the step in a CUDA graph.")
    op = cause.get("host_op")
    if op == "dataloader":
        return ("The GPU waits for the input pipeline: more DataLoader workers, pin_memory, persistent_workers "
                "and prefetch_factor, or cheaper per-item decoding.")
    if op == "optimizer":
        return ("The GPU waits while the optimizer step runs on the host: use a fused or foreach optimizer "
                "(fused=True), or capture the step in a CUDA graph.")
    if op == "backward":
        return ("The GPU waits for the CPU side of the backward pass: fewer, larger ops (torch.compile), a larger "
                "batch per step, or CUDA graphs.")
    if op == "no_op":
        return ("The GPU waits while the host runs code outside any recorded op (Python between ops, untraced "
                "waits): profile the Python side (with_stack=True) and move work off the step.")
    return (f"The GPU waits while the host runs {short_op(str(cause['key']))}: cut its host overhead "
            "(torch.compile, CUDA graphs) or move it off the step / make it asynchronous.")


def _evidence(cause: Mapping[str, Any], rank: int, step_us: float, steps: int, whole: bool,
              launch: Mapping[str, float]) -> str:
    per = "" if whole else "/step"
    of = f"of the {format_us(step_us)} trace" if whole else f"of {format_us(step_us)}{per}"
    label = cause["label"]
    main = [t for t in cause["top"] if t["us_per_step"] >= 0.1 * cause["us_per_step"]][:2]
    if cause["kind"] == "communication" and main:
        label = "exposed " + " and ".join(
            f"{t['key'].replace('_', '-')}{' (host-side)' if t['runs_on'] == 'CPU' else ''}" for t in main)
    text = (f"rank {rank}: {label}: {format_us(cause['us_per_step'])} {of} "
            f"({format_pct(cause['pct_of_step'])}" + ("" if whole else f", mean of {_steps_text(steps)}") + ")")
    detail = _detail(cause) if cause["kind"] in ("compute", "memory", "communication") else ""
    if detail:
        text += f"; {detail}"
    if cause["kind"] == "launch" and launch.get("launches"):
        n, short = launch["launches"], launch["short"]
        text += f"; {short:,.0f} of {n:,.0f} launches ({100.0 * short / n:.0f} %) ran shorter than their launch call"
    return text


def _straggler(tables: Mapping[str, pd.DataFrame], step_us: float) -> dict | None:
    ev = tables.get("straggler_evidence")
    if ev is None or not len(ev) or "is_straggler" not in ev:
        return None
    flagged = ev.loc[ev["is_straggler"].astype(bool)]
    if not len(flagged):
        return None
    top = flagged.sort_values("lateness_us_median", ascending=False, kind="stable").iloc[0]  # ties: the first listed, on any CPU
    late = _num(top.get("lateness_us_median")) or 0.0
    rank = int(top["rank"])
    return {
        "kind": "straggler", "key": str(rank), "rank": rank, "us_per_step": late,
        "pct_of_step": 100.0 * late / step_us if step_us else None,
        "text": (f"Rank {rank} is a straggler: it reaches the collectives later than the others, who wait for it. "
                 "Check its input shard, its GPU (clocks, thermal) and its host (CPU contention)."),
        "evidence": (f"rank {rank} started {format_us(late)} after the earliest rank (median over "
                     f"{int(top.get('late_steps') or 0)} steps), last in {int(top.get('latest_calls') or 0)} of "
                     f"{int(top.get('calls_compared') or 0)} collectives matched across ranks; the step-to-step "
                     f"noise is {format_us(_num(top.get('noise_us')) or 0.0)}"),
        "section": _SECTIONS["straggler"],
    }


def _launch_counts(tables: Mapping[str, pd.DataFrame], rank: int) -> dict[str, float]:
    t = tables.get("launch_stats")
    if t is None or not len(t):
        return {}
    mine = t.loc[t["rank"] == rank]
    return {"launches": float(mine["launches"].sum()), "short": float(mine["short_kernels"].sum())}


def _shares(tables: Mapping[str, pd.DataFrame], rank: int) -> dict | None:
    """The fallback without a split step: the GPU span's shares (temporal breakdown)."""
    t = tables.get("temporal_breakdown")
    if t is None or not len(t):
        return None
    row = t.loc[t["rank"] == rank]
    if not len(row) or _num(row["gpu_span_us"].iloc[0]) is None:
        return None
    r = row.iloc[0]
    where = [{"kind": k, "key": None, "label": label, "us_per_step": None, "us": _num(r[f"{k}_us"]),
              "pct_of_step": None, "pct_of_span": _num(r[f"{k}_pct"]), "top": []}
             for k, label in (("compute", "compute kernels"), ("non_compute", "communication and copies not "
                                                                               "hidden by compute"),
                              ("idle", "GPU idle"))]
    where.sort(key=lambda c: -(c["us"] or 0.0))
    return {"method": "shares", "where_the_time_goes": where, "per_step": False, "share_of": "the GPU span",
            "basis": f"No step could be split into causes on rank {rank}: shares of its GPU span "
                     f"({format_us(r['gpu_span_us'])}, first to last GPU activity) instead; no time at stake."}


def _has_gpu(tables: Mapping[str, pd.DataFrame], rank: int) -> bool:
    t = tables.get("temporal_breakdown")
    if t is None or not len(t):
        return False
    row = t.loc[t["rank"] == rank]
    return bool(len(row)) and _num(row["gpu_span_us"].iloc[0]) is not None


def _host_only(rank: int, causes: list[dict], step_us: float, steps: int, whole: bool,
               straggler: dict | None) -> dict:
    """A rank without GPU activity: no GPU waits for anything, so no time at stake; the shares of
    its step (or trace) by what the host runs, communication first."""
    for c in causes:
        c["label"] = ("host outside any recorded op" if c.get("key") == NO_OP
                      else "communication on the host" if c["kind"] == "communication"
                      else f"host runs {short_op(str(c['key']))}" if c["kind"] == "host" else c["label"])
    span = f"its whole trace ({format_us(step_us)})" if whole else \
        f"its {_steps_text(steps)} (mean {format_us(step_us)}/step)"
    return {"rank": rank, "method": "shares", "steps": steps, "step_us": step_us, "per_step": not whole,
            "share_of": "the trace" if whole else "the step",
            "basis": f"No GPU activity on rank {rank}: shares of {span} by what the host runs, no time at stake "
                     "(there is no GPU to feed).",
            "where_the_time_goes": [{k: v for k, v in c.items() if k not in ("cpu_us_per_step", "host_op")}
                                    for c in causes[:WHERE_TOP]],
            "suggestions": [straggler] if straggler else []}


def _steps_text(n: int) -> str:
    return f"{n} step" + ("" if n == 1 else "s")


def diagnose(tables: Mapping[str, pd.DataFrame]) -> dict:
    """The diagnosis document (see the module docstring); ``{}`` for a run without ranks."""
    rank = pace_rank(tables)
    if rank is None:
        return {}
    multi = len(tables["summary"]) > 1 if "summary" in tables else False
    stake = tables.get("time_at_stake")
    rows = stake.loc[stake["rank"] == rank] if stake is not None and len(stake) else pd.DataFrame()
    if not len(rows):
        fallback = _shares(tables, rank) or {"method": "none", "where_the_time_goes": [],
                                             "basis": f"Rank {rank} has no events to split into causes."}
        straggler = _straggler(tables, math.nan)
        return {"rank": rank, "slowest_of": len(tables["summary"]) if multi else 1, **fallback,
                "suggestions": [straggler] if straggler else []}
    step_us, steps = float(rows["step_us"].iloc[0]), int(rows["steps"].iloc[0])
    step_us_median = float(rows["step_us_median"].iloc[0])
    whole = rows["method"].iloc[0] == "whole_trace"
    causes = _causes(rows)
    if not _has_gpu(tables, rank):
        return _host_only(rank, causes, step_us, steps, whole, _straggler(tables, step_us))
    launch = _launch_counts(tables, rank)
    suggestions = []
    for c in causes:
        if c["pct_of_step"] < SUGGEST_PCT or c["key"] == "other":
            continue
        suggestions.append({"kind": c["kind"], "key": c["key"], "rank": rank, "us_per_step": c["us_per_step"],
                            "pct_of_step": c["pct_of_step"], "text": _advice(c),
                            "evidence": _evidence(c, rank, step_us, steps, whole, launch),
                            "section": _SECTIONS[c["kind"]]})
    straggler = _straggler(tables, step_us)
    if straggler:
        suggestions.append(straggler)
    suggestions.sort(key=lambda s: -(s["us_per_step"] or 0.0))
    for s in suggestions:
        s["seconds_at_stake_per_step"] = None if whole else s["us_per_step"] / 1e6
        s["seconds_at_stake"] = s["us_per_step"] * (1 if whole else steps) / 1e6
    gpu_free = not any(c["kind"] in ("compute", "communication", "memory") and
                       any(t["runs_on"] == "GPU" for t in c["top"]) for c in causes)
    if whole:
        basis = (f"No profiler steps on rank {rank}: shares of its whole trace ({format_us(step_us)}), not per step. ")
    else:
        basis = (f"Time at stake on rank {rank}" + (" (the slowest)" if multi else "") + f", over {_steps_text(steps)} "
                 f"(the last, cut-short step left out; mean {format_us(step_us)}/step): each instant of a step goes "
                 "to one cause, first compute kernels, then exposed communication (GPU kernels, or host-side "
                 "collectives while the GPU idles), exposed copies, GPU idle after a host sync or inside a launch "
                 "call, else the host op running while the GPU idles. The parts add up to the step. ")
    if gpu_free:
        basis += "No GPU work in these steps: the GPU idles throughout."
    return {
        "rank": rank, "method": "whole_trace" if whole else "steps", "steps": steps, "step_us": step_us,
        "step_us_median": None if whole else step_us_median, "per_step": not whole, "share_of": "the trace" if whole else "the step",
        "basis": basis.strip(),
        "where_the_time_goes": [{k: v for k, v in c.items() if k not in ("cpu_us_per_step", "host_op")}
                                for c in causes[:WHERE_TOP]],
        "suggestions": suggestions,
    }


__all__ = ["SUGGEST_PCT", "diagnose", "host_op_kind", "pace_rank", "short_op"]
