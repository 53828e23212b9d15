"""Collectives matched across ranks: which calls are one collective, how far apart the ranks
start them, and which rank makes the others wait.

:func:`collective_skew` pairs the calls (:func:`perfreport.analyses.collectives.collectives`)
that are one collective: the same (process_group, kind, seq) on every rank where the group's
calls carry ``seq`` (HTA 0.6's field), else the i-th call of each (kind, process_group) in each
profiler step on every rank; it checks that the pairing is plausible (the ranks' kernels of one
synchronous collective overlap in time) and measures how far apart they start;
:func:`straggler_report` turns that, together with HTA's late-start method
(:mod:`perfreport.analyses.stragglers`), into a verdict. Cross-rank start times assume the
ranks' clocks agree (one host, or synchronised hosts); HTA's method does not (it measures
within each rank's own step). One rank gives an empty skew table and nobody flagged.

The matching runs in numpy on the calls' text codes (:func:`_match`), never on their texts.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd

from ..model import TraceSet
from ..units import format_pct, format_us, pct
from .collectives import collectives, rank_collectives, typed_empty
from .grouping import Grouped, column_codes, distinct_rows, presence_codes, run_positions
from .steps import profiler_steps
from .stragglers import LATE_START_PCT, late_verdict, step_noise_us, straggler_steps, stragglers

MATCH_KEY = ["kind", "process_group", "step", "call_index"]
"""Calls with equal keys on different ranks are taken to be one collective."""
SKEW_COLUMNS = ("kind", "process_group", "step", "call_index", "ranks", "first_start_us", "skew_us",
                "earliest_rank", "latest_rank", "overlapping", "matched_by")
EVIDENCE_COLUMNS = ("rank", "calls_compared", "latest_calls", "latest_pct", "lateness_us_mean",
                    "lateness_us_median", "lateness_pct", "late_steps", "noise_us", "late_start_us_median",
                    "late_start_pct", "wall_us_median", "wall_excess_pct", "hta_is_straggler", "is_straggler")


def _matched_calls(traces: TraceSet) -> pd.DataFrame:
    """collectives() of the calls seen on at least two ranks (its :data:`MATCHED_COLUMNS`), with
    ``call_index`` (the i-th call of its (kind, process_group) in its step on its rank),
    ``matched_by``, ``ranks`` (how many made the call), ``overlapping`` (whether every rank's
    kernel of the call overlaps every other's: max start <= min end) and ``lateness_us`` (start
    minus the earliest start of the same call on any rank).

    Computed once per trace set (the skew and the straggler evidence share it); each call gets
    its own (shallow, copy-on-write) frame.
    """
    return traces.memo("matched_calls", lambda: _match_calls(traces)).copy(deep=False)


def _match_calls(traces: TraceSet) -> pd.DataFrame:
    if sum(len(rank_collectives(t)) > 0 for t in traces) < 2:  # no call can be seen on two ranks: the empty
        return collectives(traces)[list(MATCHED_COLUMNS)].iloc[:0].reset_index(drop=True).assign(  # result, typed
            call_index=np.empty(0, np.int64), matched_by=np.empty(0, object), ranks=np.empty(0, np.int64),
            overlapping=np.empty(0, bool), lateness_us=np.empty(0, np.float64))
    return _match(collectives(traces))


def _match(c: pd.DataFrame) -> pd.DataFrame:
    """:func:`_matched_calls` of the calls ``c`` of two ranks or more, in numpy on the texts'
    codes (sorted categories order as the texts do): 16 gloo ranks of 50 MB make 1.6 M calls,
    and pandas' sort and five grouped transforms of their texts took 1.1 s of the parent's time.
    The rows come sorted by (rank, kind, process_group, step, start), stably."""
    kind, pg = column_codes(c["kind"]), column_codes(c["process_group"])
    order = np.lexsort((c["ts_us"].to_numpy(), c["step"].to_numpy(), pg[0], kind[0], c["rank"].to_numpy()))
    c = c[list(MATCHED_COLUMNS)].take(order).reset_index(drop=True)
    kind, pg = (kind[0][order], kind[1]), (pg[0][order], pg[1])
    same = (np.diff(c["rank"].to_numpy()) == 0) & (np.diff(kind[0]) == 0) & (np.diff(pg[0]) == 0) \
        & (np.diff(c["step"].to_numpy()) == 0)
    c["call_index"] = run_positions(np.cumsum(np.r_[True, ~same]))  # the i-th of its (rank, kind, pg, step)
    c = _by_sequence_number(c, pg)
    g = Grouped(c, MATCH_KEY)
    ts = c["ts_us"].to_numpy(np.float64)
    c["ranks"] = _distinct_per_group(g, c["rank"].to_numpy())[g.ids]
    c["overlapping"] = g.max(ts)[g.ids] <= g.min(ts + c["dur_us"].to_numpy(np.float64))[g.ids]
    c["lateness_us"] = ts - g.min(ts)[g.ids]
    seen_twice = c["ranks"].to_numpy() >= 2
    if seen_twice.all():  # every call matched (the usual case): no copy of them all (112 MB, 16 gloo ranks)
        return c
    return c.loc[seen_twice].reset_index(drop=True)


MATCHED_COLUMNS = ("rank", "step", "kind", "process_group", "ts_us", "dur_us", "seq")
"""The columns of the calls that matching, the skew and the straggler evidence read: only these
are sorted and kept (16 gloo ranks: 1.6 M calls of 16 columns)."""


def _distinct_per_group(g: Grouped, values: np.ndarray) -> np.ndarray:
    """How many distinct ``values`` each group of ``g`` holds (pandas' ``nunique``). Integer
    values of a narrow range (ranks) are counted through a presence table over (group, value)
    pairs, not a sort of them: the matching's peak (16 gloo-grown ranks of 50 MB, 1.6 M calls
    in 102,755 groups: 272 -> 246 MB over the call table, tracemalloc)."""
    values = values[g.rows]
    coded = presence_codes(values)
    if coded is not None:
        width = len(coded[0])
        pairs = presence_codes(g.ids.astype(np.int64) * width + coded[1], g.n * width)
        if pairs is not None:
            return np.bincount(pairs[0] // width, minlength=g.n).astype(np.int64)
    first, _ = distinct_rows(np.column_stack([g.ids, values]))
    return np.bincount(g.ids[first], minlength=g.n).astype(np.int64)


def _by_sequence_number(c: pd.DataFrame, pg: tuple[np.ndarray, np.ndarray]) -> pd.DataFrame:
    """Calls of a named process group whose every call carries NCCL's ``seq`` are matched by
    (process_group, kind, seq): their ``call_index`` becomes the seq and their ``step`` the
    earliest step any rank saw that call in (ranks may place one collective in different steps).
    The kind stays in the key because PyTorch numbers point-to-point calls apart from
    collectives. Other groups keep the order-based key; ``matched_by`` says which ("seq" or
    "order"). ``pg``: the process group's (code per row, texts)."""
    codes, texts = pg
    seq = c["seq"].to_numpy(np.int64)
    known = (seq >= 0) & (texts != "")[codes]
    by_seq = known & (np.bincount(codes[~known], minlength=len(texts)) == 0)[codes]  # every call of its group
    c["matched_by"] = pd.Categorical.from_codes(by_seq.view(np.int8), categories=pd.Index(["order", "seq"]))
    if by_seq.any():
        rows = np.flatnonzero(by_seq)
        step = c["step"].to_numpy(np.int64).copy()
        g = Grouped({"process_group": codes[rows], "kind": c["kind"].array[rows], "seq": seq[rows]},
                    ["process_group", "kind", "seq"])
        step[rows] = g.min(step[rows])[g.ids].astype(np.int64)
        call_index = c["call_index"].to_numpy(np.int64).copy()
        call_index[rows] = seq[rows]
        c["step"], c["call_index"] = step, call_index
    return c


def collective_skew(traces: TraceSet) -> pd.DataFrame:
    """Per call matched across ranks (the same NCCL seq of a process group, else the i-th call of
    a (kind, process_group) in a step on each rank; ``matched_by`` "seq" or "order", and
    ``call_index`` is the seq or the position): how many ranks made it, the earliest start
    (µs), the skew (latest minus earliest start, µs), the earliest and latest ranks (-1 on a
    tie), and ``overlapping``.

    A synchronous collective cannot finish on any rank before the last rank has joined, so the
    ranks' kernels of one call all overlap in time. When they do not (``overlapping`` False),
    the pairing is wrong (a rank's trace lacks or adds a call, as sampled traces do, or the two
    ranks talk in different groups) or the clocks disagree; such rows are listed but their
    skew is not evidence. Empty with one rank.

    Computed once per trace set (the straggler evidence uses it too); each call gets its own
    (shallow, copy-on-write) frame.
    """
    return traces.memo("collective_skew", lambda: _collective_skew(traces)).copy(deep=False)


def _collective_skew(traces: TraceSet) -> pd.DataFrame:
    c = _matched_calls(traces)
    if not len(c):
        return typed_empty(SKEW_COLUMNS)
    g = Grouped(c, MATCH_KEY)  # groups in sorted key order, as pandas' groupby
    ts, rank = c["ts_us"].to_numpy(np.float64), c["rank"].to_numpy(np.int64)
    first, last = g.min(ts), g.max(ts)
    tie = (last - first) == 0
    out = g.frame({
        "ranks": _distinct_per_group(g, rank), "first_start_us": first, "skew_us": last - first,
        "earliest_rank": np.where(tie, -1, rank[_first_where(g, ts[g.rows] == first[g.ids])]),
        "latest_rank": np.where(tie, -1, rank[_first_where(g, ts[g.rows] == last[g.ids])]),
        "overlapping": np.bincount(g.ids, weights=~c["overlapping"].to_numpy(bool), minlength=g.n) == 0,
        "matched_by": np.asarray(c["matched_by"].array[g.first], dtype=object),
    })
    return out.sort_values(["first_start_us", "kind", "process_group"]).reset_index(drop=True)[list(SKEW_COLUMNS)]


def _first_where(g: Grouped, mask: np.ndarray) -> np.ndarray:
    """Per group of ``g``, its first row (in the frame's order) where ``mask`` (one value per
    grouped row, as ``g.ids``) holds, every group having one: pandas' ``idxmin`` / ``idxmax``
    with ``mask`` the rows at the extreme."""
    first = np.full(g.n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, g.ids[mask], g.rows[mask])
    return first


def step_lateness(traces: TraceSet) -> pd.DataFrame:
    """(rank, step, lateness_us): how far behind the earliest rank each rank reached the
    collectives of each step: the median over the step's calls matched across ranks (overlapping
    ones, :func:`collective_skew`) of its start minus the earliest start; for a step without
    matched calls, HTA's late start of the dominant NCCL kernel (:func:`straggler_steps`)."""
    m = _matched_calls(traces)
    m = m.loc[m["overlapping"] & (m["step"] >= 0)]
    frames = []
    if len(m):
        g = Grouped(m, ["rank", "step"])
        frames.append(g.frame({"lateness_us": g.median("lateness_us")}))
    hta = straggler_steps(traces)
    if len(hta):
        h = hta[["rank", "step", "late_start_us"]].rename(columns={"late_start_us": "lateness_us"})
        if frames:
            seen = set(zip(frames[0]["rank"].tolist(), frames[0]["step"].tolist()))
            h = h.loc[[(r, s) not in seen for r, s in zip(h["rank"].tolist(), h["step"].tolist())]]
        frames.append(h)
    if not frames:
        return pd.DataFrame({"rank": np.empty(0, np.int64), "step": np.empty(0, np.int64),
                             "lateness_us": np.empty(0, np.float64)})
    out = pd.concat(frames, ignore_index=True).astype({"rank": np.int64, "step": np.int64, "lateness_us": np.float64})
    return out.sort_values(["rank", "step"]).reset_index(drop=True)


def straggler_evidence(traces: TraceSet) -> pd.DataFrame:
    """Per rank: how many calls were matched across ranks (overlapping ones only, see
    :func:`collective_skew`), in how many it started last (and %), its mean lateness behind the
    earliest rank over those calls (µs, and % of the reference time: the median step time, else
    the median call duration), ``lateness_us_median`` the median over steps of its per-step
    lateness (:func:`step_lateness`) and ``late_steps`` how many steps measured it, the
    step-to-step noise (µs), HTA's late-start median (µs and % of the median step) and step-time
    excess (% against the median over ranks, signed), HTA's measure put through the same test
    (``hta_is_straggler``), and the verdict :func:`perfreport.analyses.stragglers.late_verdict`
    on the per-step lateness: the one straggler test. One rank: nobody is flagged; no rank at
    all: an empty frame."""
    calls = collectives(traces)
    hta = stragglers(traces)
    ranks = sorted(set(calls["rank"].tolist()) | set(hta["rank"].astype(np.int64).tolist()))
    if not ranks:
        return typed_empty(EVIDENCE_COLUMNS)
    m = _matched_calls(traces)
    m = m.loc[m["overlapping"]]
    skew = collective_skew(traces)
    latest = Counter(skew.loc[skew["overlapping"] & (skew["latest_rank"] >= 0), "latest_rank"].tolist())
    compared, mean = {}, {}
    if len(m):
        per = Grouped(m, ["rank"])
        at = per.frame({})["rank"].tolist()
        compared = dict(zip(at, per.size().tolist()))
        mean = dict(zip(at, per.mean("lateness_us").tolist()))
    lateness = step_lateness(traces)
    by_rank = lateness.groupby("rank")["lateness_us"]
    median, late_steps = by_rank.median().to_dict(), by_rank.size().to_dict()
    hta_columns = ("late_start_us_median", "late_start_pct", "wall_us_median", "wall_excess_pct", "is_straggler")
    h = {c: dict(zip(hta["rank"].astype(np.int64).tolist(), hta[c].tolist())) for c in hta_columns} if len(hta) \
        else {c: {} for c in hta_columns}
    nan = math.nan
    out = pd.DataFrame({
        "rank": np.array(ranks, dtype=np.int64),
        "calls_compared": np.array([compared.get(r, 0) for r in ranks], dtype=np.int64),
        "latest_calls": np.array([latest.get(r, 0) for r in ranks], dtype=np.int64),
        "lateness_us_mean": np.array([mean.get(r, nan) for r in ranks], dtype=np.float64),
        "lateness_us_median": np.array([median.get(r, nan) for r in ranks], dtype=np.float64),
        "late_steps": np.array([late_steps.get(r, 0) for r in ranks], dtype=np.int64),
        **{c: np.array([h[c].get(r, nan) for r in ranks], dtype=np.float64) for c in hta_columns[:4]},
        "hta_is_straggler": np.array([bool(h["is_straggler"].get(r, False)) for r in ranks], dtype=bool),
    })
    out["latest_pct"] = [pct(a, b) for a, b in zip(out["latest_calls"], out["calls_compared"])]
    steps = profiler_steps(traces)
    step_us = float(steps["wall_us"].median()) if len(steps) else math.nan
    reference = step_us if math.isfinite(step_us) else float(calls["dur_us"].median()) if len(calls) else math.nan
    out["lateness_pct"] = [pct(x, reference) for x in out["lateness_us_mean"]]
    noise = step_noise_us(steps)
    out["noise_us"] = noise
    out["is_straggler"] = [late_verdict(x, step_us, noise, len(ranks)) for x in out["lateness_us_median"]]
    return out[list(EVIDENCE_COLUMNS)]


def straggler_report(traces: TraceSet) -> tuple[pd.DataFrame, str]:
    """(:func:`straggler_evidence`, one paragraph naming the straggler and its evidence, or
    saying why there is none)."""
    ev = straggler_evidence(traces)
    if len(traces) < 2 or len(ev) < 2:
        return ev, "one rank: nothing to compare, so no straggler analysis"
    flagged = ev.loc[ev["is_straggler"]]
    pool = flagged if len(flagged) else ev
    top = pool.sort_values(["lateness_us_median", "lateness_us_mean", "late_start_us_median"], ascending=False,
                           na_position="last").iloc[0]
    r = int(top["rank"])
    has_steps = bool(ev["wall_us_median"].notna().any())
    parts = []
    if top["late_steps"] > 0:
        parts.append(f"it reached the collectives {format_us(top['lateness_us_median'])} after the earliest rank "
                     f"(median over {int(top['late_steps'])} steps; step-to-step noise {format_us(top['noise_us'])})")
    if top["calls_compared"] > 0:
        parts.append(f"it started last in {int(top['latest_calls'])} of {int(top['calls_compared'])} collectives "
                     f"matched across ranks ({format_pct(top['latest_pct'])}), "
                     f"{format_us(top['lateness_us_mean'])} after the earliest rank on average "
                     f"({format_pct(top['lateness_pct'])} of {'the median step' if has_steps else 'the median call'})")
    if not math.isnan(top["late_start_us_median"]):
        parts.append(f"HTA late start (median over steps) {format_us(top['late_start_us_median'])}, "
                     f"{format_pct(top['late_start_pct'])} of the median step")
    if not math.isnan(top["wall_excess_pct"]):
        parts.append(f"its median step is {format_us(top['wall_us_median'])}, "
                     f"{top['wall_excess_pct']:+.1f} % against the median over ranks")
    evidence = "; ".join(parts) if parts else "no collectives or steps to compare"
    if len(flagged):
        others = [int(x) for x in flagged["rank"] if int(x) != r]
        also = f" Also flagged: rank{'s' if len(others) > 1 else ''} {', '.join(map(str, others))}." if others else ""
        return ev, f"rank {r} is the straggler: {evidence}.{also}"
    return ev, (f"no straggler among {len(ev)} ranks (flagged: a median lateness at the collectives of at least "
                f"{LATE_START_PCT:g} % of the median step and twice the step-to-step noise); the latest is rank "
                f"{r}: {evidence}.")


__all__ = ["EVIDENCE_COLUMNS", "MATCH_KEY", "SKEW_COLUMNS", "collective_skew", "step_lateness", "straggler_evidence",
           "straggler_report"]
