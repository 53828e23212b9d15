"""The top of a single-run report: where the time goes, and what to try.

Picked, not computed: the document's ``diagnosis`` (:func:`perfreport.diagnosis.diagnose`,
measured on the rank that sets the pace) holds the causes ranked by the step time at stake and
the suggestions with their evidence; this module turns them into the report's headline causes and
suggestion lines, followed by the efficiency suggestions (:mod:`.efficiency`: the op furthest
from its roofline, ops off the Tensor Cores). The headline's numbers (median step, GPU idle share) come from the same rank's
step and temporal tables. A document without a diagnosis (written by an older version) gets the
headline alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..units import format_us
from .blocks import Side, records
from .efficiency import efficiency_suggestions
from .model import Cause, Headline, Suggestion


def pace_rank(side: Side) -> Any:
    """The rank that sets the pace: the diagnosis's rank, else the slowest median step, else the
    first rank listed."""
    diagnosis = side.doc.get("diagnosis") if isinstance(side.doc, Mapping) else None
    if isinstance(diagnosis, Mapping) and diagnosis.get("rank") is not None:
        return diagnosis["rank"]
    steps = [r for r in records(side, "step_times") if isinstance(r.get("wall_us_median"), (int, float))]
    if steps:
        return max(steps, key=lambda r: r["wall_us_median"]).get("rank")
    ranks = [r.get("rank") for r in records(side, "summary")]
    return ranks[0] if ranks else None


def _rows(side: Side, name: str, rank: Any) -> list[dict]:
    return [r for r in records(side, name) if r.get("rank") == rank]


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _diagnosis(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    d = doc.get("diagnosis")
    return d if isinstance(d, Mapping) else {}


def analysis_headline(doc: Mapping[str, Any]) -> Headline | None:
    """Step time and GPU idle share of the pace-setting rank; the diagnosis's causes."""
    side = Side("", doc)
    rank = pace_rank(side)
    if rank is None:
        return None
    multi = len(records(side, "summary")) > 1
    who = f" on rank {rank}" + (" (the slowest)" if multi else "")
    steps = next(iter(_rows(side, "step_times", rank)), {})
    temporal = next(iter(_rows(side, "temporal_breakdown", rank)), {})
    d = _diagnosis(doc)
    parts = []
    if d.get("method") == "steps" and _num(d.get("step_us_median")) is not None:  # the steps the diagnosis judged
        parts.append(f"step time {format_us(d['step_us_median'])} (median of the {d.get('steps')} judged steps)")
    elif _num(steps.get("wall_us_median")) is not None:
        parts.append(f"step time {format_us(steps['wall_us_median'])} (median of {steps.get('steps')} steps)")
    if _num(temporal.get("idle_pct")) is not None:
        parts.append(f"GPU idle {temporal['idle_pct']:.1f} % of its span")
    text = (", ".join(parts) or "no GPU activity") + who
    where = [c for c in d.get("where_the_time_goes") or [] if isinstance(c, Mapping)]
    per_step = bool(d.get("per_step"))
    causes = []
    for c in where:
        label = str(c.get("label")) + (f" ({cause_detail(c)})" if cause_detail(c) else "")
        value = _num(c.get("us_per_step")) if c.get("us_per_step") is not None else _num(c.get("us"))
        share = _num(c.get("pct_of_step")) if c.get("pct_of_step") is not None else _num(c.get("pct_of_span"))
        causes.append(Cause(label, value, share))
    if causes and d.get("method") == "steps":
        text += f"; most of the step: {where[0].get('label')} ({causes[0].share_pct or 0:.0f} %)"
    share_of = str(d.get("share_of") or "")
    return Headline(text=text, causes=tuple(causes), basis=str(d.get("basis") or ""), share_of=share_of,
                    per_step=per_step)


def cause_detail(cause: Mapping[str, Any]) -> str:
    """What a cause's label names besides itself: the collectives or copies it is made of, the
    top compute kernel; nothing for launches and syncs (the calls' names say nothing more)."""
    top = [t for t in cause.get("top") or [] if isinstance(t, Mapping)]
    kind = cause.get("kind")
    if kind == "compute" and top:
        return f"top: {top[0].get('key')}"
    if kind in ("communication", "memory"):
        host = " on the host" if kind == "communication" else ""
        return ", ".join(f"{t.get('key')}{host if t.get('runs_on') == 'CPU' else ''}" for t in top)
    return ""


def terminal_lines(doc: Mapping[str, Any], top: int = 3) -> list[str]:
    """The diagnosis for a terminal: the first causes with their time, the first suggestion."""
    d = _diagnosis(doc)
    where = [c for c in d.get("where_the_time_goes") or [] if isinstance(c, Mapping)]
    if not where:
        return []
    unit = "/step" if d.get("per_step") else ""
    lines = ["", f"where the time goes (rank {d.get('rank')}):"]
    for i, c in enumerate(where[:top], 1):
        value = c.get("us_per_step") if c.get("us_per_step") is not None else c.get("us")
        share = c.get("pct_of_step") if c.get("pct_of_step") is not None else c.get("pct_of_span")
        lines.append(f"  {i}. {c.get('label')}" + (f" {format_us(value)}{unit}" if _num(value) is not None else "")
                     + (f" ({share:.0f} % of {d.get('share_of') or 'the step'})" if _num(share) is not None else ""))
    first = next((s for s in d.get("suggestions") or [] if isinstance(s, Mapping)), None)
    if first:
        lines += ["", f"fix first: {first.get('text')}", f"  ({first.get('evidence')})"]
    return lines


def suggestions(doc: Mapping[str, Any]) -> tuple[Suggestion, ...]:
    """What to try, in the diagnosis's order (the time at stake), each with its evidence."""
    out = []
    for s in _diagnosis(doc).get("suggestions") or []:
        if isinstance(s, Mapping) and s.get("text"):
            out.append(Suggestion(str(s["text"]), str(s.get("evidence") or ""), str(s.get("section") or "")))
    side = Side("", doc)
    rank = pace_rank(side)
    if rank is not None:  # then how well the GPU time is spent: the op furthest from its roofline
        out += efficiency_suggestions(side, rank)
    return tuple(out)


__all__ = ["analysis_headline", "cause_detail", "pace_rank", "suggestions", "terminal_lines"]
