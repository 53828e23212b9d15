"""Several training setups in one report: a baseline and candidates (single GPU, DDP, FSDP …),
each candidate judged against the baseline, one column per setup.

The document (``kind`` :data:`MULTI_KIND`, written by :func:`multi_document`) holds each setup's
analyses once (``setups``) and, per candidate, its comparison with the baseline
(``comparisons``: verdict, checks, attribution) as :mod:`.json_report` writes them for one pair,
without the analyses. The verdict is the worst of the comparisons.

The report (:func:`multi_report`): the verdict per setup, the setups side by side (one column
each: ranks, step time, where the GPU time goes, communication, memory, collectives), step time
per step and the temporal breakdown as figures, one section per candidate with its findings,
the attribution of its step-time change and what was added or removed, then every analysis
with one run per setup. Setups may differ in world size: every per-rank table has a run column,
and the side-by-side figures are read off the slowest rank of each setup (picked, not averaged).
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import replace
from collections.abc import Mapping, Sequence
from typing import Any

from .. import __version__
from .blocks import Side, figures_with_data, has_data, records, stacked_bars
from .comparison import checks_sections, finding_evidence, movers_section
from .findings import group_findings
from .guidance import pace_rank
from .model import Column, Headline, Link, Paragraph, Report, Section, Table, Value, Verdict
from .overview import comparison_headline, headline_line, signed_ms, step_time_figure
from .sections import analysis_sections, metadata_section, temporal_segments

MULTI_KIND = "perfreport.compare-multi"
SETUP_FOCUS = ("temporal", "overlap", "memory", "collectives", "steps")
"""Analyses a comparison of setups is about (time, communication, memory): kept in the brief."""
ORDER = ("fail", "warn", "inconclusive", "pass")


def worst(statuses: Sequence[str]) -> str:
    """The overall status of several verdicts: fail, else warn, else pass."""
    return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "pass"


def multi_document(documents: Sequence[Mapping[str, Any]], labels: Sequence[str], *, command: str = "",
                   now: _dt.datetime | None = None) -> dict:
    """One document from the comparison documents of each candidate with the same baseline
    (``labels``: the baseline's, then one per candidate)."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    first = documents[0]
    setups = [{"label": labels[0], "role": "baseline", **dict(first["baseline"])}]
    comparisons = []
    for label, doc in zip(labels[1:], documents):
        setups.append({"label": label, "role": "candidate", **dict(doc["candidate"])})
        comparisons.append({"label": label, **{k: v for k, v in doc.items() if k not in ("baseline", "candidate")}})
    status = worst([str(d.get("status")) for d in documents])
    return {
        "schema_version": first.get("schema_version", 1), "kind": MULTI_KIND, "perfreport_version": __version__,
        "created_utc": now.astimezone(_dt.timezone.utc).isoformat(timespec="seconds"), "status": status,
        "headline": "; ".join(f"{c['label']}: {c.get('headline')}" for c in sorted(comparisons, key=severity)),
        "setups": setups, "comparisons": comparisons, "config": first.get("config"), "command": command,
    }


def _pair_document(doc: Mapping[str, Any], comparison: Mapping[str, Any]) -> dict:
    """A candidate's comparison as a one-pair document (what the comparison helpers read)."""
    by_label = {s["label"]: s for s in doc.get("setups") or []}
    base = next((s for s in doc.get("setups") or [] if s.get("role") == "baseline"), {})
    return {**comparison, "baseline": base, "candidate": by_label.get(comparison.get("label"), {})}


def _pick(side: Side, name: str, rank: Any) -> dict:
    return next((r for r in records(side, name) if r.get("rank") == rank), {})


def glance_table(sides: Sequence[Side], setups: Sequence[Mapping[str, Any]],
                 verdicts: Mapping[str, tuple[str, str]]) -> Table:
    """Metric rows, one column per setup; per-rank figures are those of the setup's slowest rank."""
    rows: list[tuple] = []
    picked = [pace_rank(s) for s in sides]

    def add(label: str, unit: str, values: Sequence[Any]) -> None:
        if any(v is not None for v in values):
            rows.append((label, *[v if unit in ("text", "name") else Value(v, unit) for v in values]))

    add("role", "text", [s.get("role") for s in setups])
    add("ranks traced", "count", [len(records(s, "summary")) for s in sides])
    add("world size", "count", [next((r.get("world_size") for r in records(s, "ranks") if r.get("world_size")), None)
                                for s in sides])
    add("GPU", "name", [next((r.get("gpu_name") for r in records(s, "summary") if r.get("gpu_name")), None)
                        for s in sides])
    add("verdict vs the baseline", "text", [verdicts.get(s.label, ("", ""))[0].upper() or None for s in sides])
    add("slowest rank", "count", picked)
    add("step time, median of every recorded step", "us", [_pick(s, "step_times", r).get("wall_us_median") for s, r in zip(sides, picked)])
    for label, key in (("GPU busy %", "gpu_busy_pct"),):
        add(label, "pct", [_pick(s, "step_times", r).get(key) for s, r in zip(sides, picked)])
    for label, key in (("compute % of GPU span", "compute_pct"), ("non-compute % of GPU span", "non_compute_pct"),
                       ("idle % of GPU span", "idle_pct")):
        add(label, "pct", [_pick(s, "temporal_breakdown", r).get(key) for s, r in zip(sides, picked)])
    for label, key, unit in (("communication time", "comm_us", "us"), ("exposed communication", "exposed_comm_us", "us"),
                             ("comm overlapped with compute", "overlap_pct", "pct")):
        add(label, unit, [_pick(s, "comm_comp_overlap", r).get(key) for s, r in zip(sides, picked)])
    add("peak memory allocated (any device)", "bytes",
        [max((r.get("peak_allocated_bytes") or 0 for r in records(s, "memory_peaks")), default=None) or None
         for s in sides])
    colls = [[r for r in records(s, "collective_summary") if r.get("rank") == rank] for s, rank in zip(sides, picked)]
    add("collective calls", "count", [sum(r.get("count") or 0 for r in c) if c else None for c in colls])
    top = [max(c, key=lambda r: r.get("total_us") or 0) if c else {} for c in colls]
    add("largest collective", "name", [f"{t.get('kind')}" + (f" ({t['process_group']})" if t.get("process_group") else "")
                                       if t else None for t in top])
    add("its mean message", "bytes", [t.get("msg_bytes_mean") for t in top])
    add("its bus bandwidth", "gbps", [t.get("busbw_gbps_mean") for t in top])
    cols = (Column("metric", "metric", "name"), *(Column(f"setup{i}", s.label, "mixed") for i, s in enumerate(sides)))
    return Table("setups", "Setups side by side", cols, tuple(rows), len(rows),
                 note="Per-rank figures (step time, shares, communication, collectives) are those of each setup's "
                      "slowest rank; setups may have different world sizes.")


def verdicts_table(doc: Mapping[str, Any], reports: Sequence[tuple[str, Headline, str]]) -> Table:
    cols = (Column("setup", "setup", "name"), Column("status", "verdict", "status"),
            Column("headline", "headline (the gate's statistic)", "text"), Column("cause", "top cause", "text"),
            Column("counts", "findings", "text"))
    rows = tuple((label, status, h.text, (f"{h.causes[0].text} {signed_ms(h.causes[0].delta_us)}/step"
                                          if h.causes and h.causes[0].delta_us is not None else "–"), h.counts)
                 for label, h, status in reports)
    marked = tuple(i for i, r in enumerate(reports) if r[2] in ("fail", "warn"))
    return Table("verdicts", "Each candidate against the baseline, worst first", cols, rows, len(rows), marked)


def severity(comparison: Mapping[str, Any]) -> tuple[int, float]:
    """Sort key of a candidate, worst first: its verdict (fail, warn, inconclusive, pass), then
    its step-time change (the gate's step-time check, else the attribution's mean), largest
    increase first."""
    status = str(comparison.get("status"))
    check = next((c for c in comparison.get("checks") or [] if isinstance(c, dict) and c.get("id") == "relative.step_time"),
                 None)
    x = comparison.get("explanation") if isinstance(comparison.get("explanation"), dict) else {}
    delta = (check or {}).get("delta_pct")
    if not isinstance(delta, (int, float)):
        delta = x.get("delta_pct")
    delta = float(delta) if isinstance(delta, (int, float)) and math.isfinite(delta) else -math.inf
    return (ORDER.index(status) if status in ORDER else len(ORDER), -delta)


def multi_report(doc: dict) -> Report:
    setups = [s for s in doc.get("setups") or [] if isinstance(s, dict)]
    sides = [Side(str(s.get("label")), s.get("analyses") or {}) for s in setups]
    base_label = next((str(s.get("label")) for s in setups if s.get("role") == "baseline"), "baseline")
    reports, pair_sections, all_groups = [], [], []
    judged: dict[str, Sequence[int]] = {}
    # worst candidate first: the first line, the top causes and the sections lead with it
    for c in sorted((c for c in doc.get("comparisons") or [] if isinstance(c, dict)), key=severity):
        pair = _pair_document(doc, c)
        groups = group_findings([r for r in c.get("checks") or [] if isinstance(r, dict)])
        all_groups += groups
        h = comparison_headline(pair, groups)
        label, status = str(c.get("label")), str(c.get("status"))
        reports.append((label, h, status))
        x = c.get("explanation") if isinstance(c.get("explanation"), dict) else {}
        judged[label] = x.get("candidate_steps") or ()
        judged.setdefault(base_label, x.get("baseline_steps") or ())
        pair_sections.append(_pair_section(pair, label, base_label, groups, h, status))
    status = str(doc.get("status") or worst([r[2] for r in reports]))
    lead = reports[0] if reports else None
    text = f"{lead[0]}: {lead[1].text}" if lead else "no candidates"
    counts = " · ".join(f"{sum(r[2] == s for r in reports)} {w}" for s, w in
                        (("fail", "failed"), ("warn", "warned"), ("pass", "passed")) if any(r[2] == s for r in reports))
    headline = Headline(text=text, causes=lead[1].causes if lead else (), basis=lead[1].basis if lead else "",
                        counts=f"{len(reports)} setups against {base_label}: {counts}")
    verdict = Verdict(status=status, headline=headline_line(headline) if lead else text, explanation=headline.basis,
                      checks=(), notes=())
    glance = glance_table(sides, setups, {label: (st, h.text) for label, h, st in reports})
    first = Section("setups", "Setups side by side", (
        verdicts_table(doc, reports), glance,
        stacked_bars("setup_temporal", "Where the GPU time goes, per setup and rank", sides, "temporal_breakdown",
                     temporal_segments(sides), "share of the GPU span (%)", "pct"),
        stacked_bars("setup_overlap", "Communication per setup and rank", sides, "comm_comp_overlap",
                     [("overlap_us", "overlapped with compute"), ("exposed_comm_us", "exposed")],
                     "communication time", "us"),
    ), 0, "verdicts and key figures, one column per setup")
    first = Section(first.id, first.title, tuple(b for b in first.blocks if has_data(b)), 0, first.summary)
    analyses = [replace(s, importance=min(s.importance, 1)) if s.id in SETUP_FOCUS else s
                for s in analysis_sections(sides)]
    sections = [first, *pair_sections, *analyses]
    meta = metadata_section(sides)
    sections += [meta] if meta else []
    overview = figures_with_data(step_time_figure(sides, judged),
                                 next((b for b in first.blocks if getattr(b, "id", "") == "setup_temporal"), None))
    labels = [s.label for s in sides]
    command = str(doc.get("command") or "perfreport compare " + " ".join(str(s.get("source")) for s in setups))
    return Report(kind="compare", title="perfreport: setups compared", subtitle=" · ".join(labels),
                  created_utc=str(doc.get("created_utc") or ""), verdict=verdict, sections=tuple(sections),
                  command=command, links=(Link("full HTML report", "report.html"), Link("PDF", "report.pdf"),
                                          Link("JSON", "report.json")),
                  headline=headline, findings=tuple(all_groups), overview=overview, document=doc)


def _pair_section(pair: dict, label: str, base_label: str, groups, h: Headline, status: str) -> Section:
    """One candidate against the baseline: headline, non-passing findings, where the time went,
    what was added or removed."""
    findings = [s for s in checks_sections(groups) if s.id == "checks"]
    movers = movers_section(pair)
    blocks: list = [Paragraph(f"{status.upper()} · {h.text} · {h.counts}")]
    if h.causes:
        blocks.append(Paragraph("Top causes: " + "; ".join(
            f"{c.text} {signed_ms(c.delta_us)}/step" for c in h.causes if c.delta_us is not None) + "."))
    notes = [str(n.get("message")) for n in pair.get("notes") or [] if isinstance(n, dict) and n.get("message")]
    if notes:  # what a reader must know to trust this candidate's verdict (a partial job, other GPUs …)
        blocks.append(Paragraph("Notes: " + "; ".join(notes) + "."))
    for s in findings:
        blocks += [b for b in s.blocks]
    if movers is not None:
        blocks += [b for b in movers.blocks if getattr(b, "id", None) in (None, "contributions", "added_removed",
                                                                           "collective_changes", "step_breakdown")]
    sid = "vs-" + "".join(ch if ch.isalnum() else "-" for ch in label.lower())
    return Section(sid, f"{label} vs {base_label}", tuple(blocks), 0 if status in ("fail", "warn") else 1,
                   f"{status.upper()}: {h.text}")


__all__ = ["MULTI_KIND", "multi_document", "multi_report", "worst", "finding_evidence"]
