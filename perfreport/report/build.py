"""Document -> Report: pick, order and label what a report shows. Pure; computes no number.

The input is a JSON-ready document: the summary document of one run
(:func:`perfreport.pipeline.summary_document`, "analyze") or the comparison document written
by :mod:`perfreport.report.json_report` ("compare": a verdict, its checks, the trace diff, and
the summary document of each side). Every value in the report is a value of the document.

This module is the entry point, :func:`build_report`, and assembles the two kinds of report
from the parts in :mod:`.blocks` (tables and figures from document tables), :mod:`.sections`
(one section per analysis, shared by both kinds) and :mod:`.comparison` (verdict, checks,
what changed). A single run has one *side* (label ""); a comparison has two, "baseline" and
"candidate", shown side by side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..documents.jsondoc import plain_document
from .blocks import (MAX_ROWS, TOP_ROWS, Side, figures_with_data, records, rows_kept, series_figure, sorted_rows,
                     stacked_bars)
from .comparison import (
    BANNER_CHECKS, COMPARE_KIND, SIDES, check_of, checks_sections, comparison_provenance, comparison_verdict,
    movers_section, ordered_checks, step_trace_section,
)
from .findings import group_findings, ranks_text
from .guidance import analysis_headline, suggestions
from .model import Link, Report, Value
from .overview import comparison_headline, step_time_figure, waterfall_figure
from .sections import analysis_sections, metadata_section, temporal_segments
from .setups import MULTI_KIND, multi_report

__all__ = ["BANNER_CHECKS", "COMPARE_KIND", "MAX_ROWS", "TOP_ROWS", "analysis_report", "build_report",
           "comparison_report"]


def build_report(document: Mapping[str, Any]) -> Report:
    """The :class:`Report` of a summary document (one run) or a comparison document."""
    doc = plain_document(document)  # exactly what report.json holds: NaN -> null, numpy unwrapped
    with rows_kept():  # each table made into rows once, however many sections read it
        if doc.get("kind") == MULTI_KIND:
            return multi_report(doc)
        if doc.get("kind") == COMPARE_KIND or isinstance(doc.get("checks"), list):
            return comparison_report(doc)
        return analysis_report(doc)


def default_command(doc: Mapping[str, Any]) -> str:
    return str(doc.get("command") or f"perfreport analyze {doc.get('source', 'TRACE_PATH')} --out DIR")


def analysis_report(doc: dict) -> Report:
    sides = [Side("", doc)]
    command = default_command(doc)
    sections = analysis_sections(sides)
    meta = metadata_section(sides)
    coverage = doc.get("rank_coverage") if isinstance(doc.get("rank_coverage"), dict) else {}
    notes = tuple(([str(coverage["text"])] if coverage.get("text") else []) + rank_notes(records(sides[0], "summary")))
    overview = figures_with_data(
        series_figure("step_time_overview", "Step time per profiler step", sides, "step_time", "profiler step",
                      "step time", one_panel=True),
        stacked_bars("temporal_overview", "Where the GPU time goes, per rank", sides, "temporal_breakdown",
                     temporal_segments(sides), "share of the GPU span (%)", "pct"))
    return Report(
        kind="analyze", title="perfreport analysis", subtitle=str(doc.get("source", "")),
        created_utc=str(doc.get("created_utc") or ""), verdict=None,
        sections=tuple(sections + ([meta] if meta else [])), command=command, notes=notes,
        links=default_links(), highlights=highlights(sides[0]), headline=analysis_headline(doc),
        suggestions=suggestions(doc), overview=overview, document=doc)


def rank_notes(summary: list[dict]) -> list[str]:
    """The ranks' notes (the summary's ``note``), one line per distinct note naming its ranks
    ("ranks 0–511: no GPU activity: …"), in the order the notes first appear: a job of hundreds
    of CPU-only ranks had as many identical lines in every report (512 paragraphs of one PDF)."""
    ranks: dict[str, list] = {}
    for row in summary:
        if row.get("note"):
            ranks.setdefault(str(row["note"]), []).append(row.get("rank"))
    return [f"{_ranks_named(rs)}: {note}" for note, rs in ranks.items()]


def _ranks_named(ranks: list) -> str:
    """"rank 3", "ranks 0–7" (:func:`~perfreport.report.findings.ranks_text`); as given where a
    rank is not a number."""
    if all(isinstance(r, int) and not isinstance(r, bool) for r in ranks):
        return ranks_text(ranks, max_parts=12)
    return ", ".join(f"rank {r}" for r in ranks)


def highlights(side: Side) -> tuple[tuple[str, Value], ...]:
    """Key figures of the rank with the longest median step (else the first rank): picked, not
    computed; the median, as in the headline and the gate."""
    steps = sorted_rows(records(side, "step_times"), ["wall_us_median"], descending=True)
    ranks = [r.get("rank") for r in records(side, "summary")]
    rank = steps[0].get("rank") if steps else (ranks[0] if ranks else None)
    if rank is None:
        return ()

    def pick(name: str) -> dict:
        return next((r for r in records(side, name) if r.get("rank") == rank), {})

    who = f" · rank {rank}" if len(ranks) > 1 else ""
    out = []
    if steps:
        out.append((f"median step time{who}", Value(steps[0].get("wall_us_median"), "us")))
    for label, table_name, key in (("GPU busy", "summary", "gpu_busy_pct"),
                                   ("compute", "temporal_breakdown", "compute_pct"),
                                   ("GPU idle", "temporal_breakdown", "idle_pct")):
        value = pick(table_name).get(key)
        if value is not None:
            out.append((f"{label} (of GPU span){who}", Value(value, "pct")))
    return tuple(out)


def default_links() -> tuple[Link, ...]:
    """Placeholders for the full report; the GitHub glue replaces them with artifact URLs."""
    return (Link("full HTML report", "report.html"), Link("PDF", "report.pdf"), Link("JSON", "report.json"))


def comparison_report(doc: dict) -> Report:
    """The report of a comparison document: verdict and headline, findings, where the time
    went, then both sides' analyses."""
    sides = [Side(label, (doc.get(label) or {}).get("analyses") or {}) for label in SIDES]
    raw = [r for r in doc.get("checks") or [] if isinstance(r, dict)]
    checks = ordered_checks([check_of(r) for r in raw])
    groups = tuple(group_findings(raw))
    headline = comparison_headline(doc, groups)
    verdict = comparison_verdict(doc, checks, headline)
    b_src = (doc.get("baseline") or {}).get("source", "BASELINE")
    c_src = (doc.get("candidate") or {}).get("source", "CANDIDATE")
    command = str(doc.get("command") or f"perfreport compare {b_src} {c_src} --out DIR")
    sections = [*checks_sections(groups)]
    movers = movers_section(doc)
    sections += [movers] if movers else []
    look = step_trace_section(doc)
    sections += [look] if look else []
    sections += analysis_sections(sides)
    meta = metadata_section(sides, comparison_provenance(doc))
    sections += [meta] if meta else []
    x = doc.get("explanation") if isinstance(doc.get("explanation"), dict) else {}
    judged = {"baseline": x.get("baseline_steps") or (), "candidate": x.get("candidate_steps") or ()}
    overview = figures_with_data(step_time_figure(sides, judged), waterfall_figure(x) if x else None)
    return Report(
        kind="compare", title="perfreport comparison", subtitle=f"{b_src} → {c_src}",
        created_utc=str(doc.get("created_utc") or ""), verdict=verdict, sections=tuple(sections), command=command,
        links=default_links(), headline=headline, findings=groups, overview=overview, document=doc)
