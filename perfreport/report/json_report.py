"""The ``report.json`` document of ``perfreport compare``: the verdict, every check with its
evidence, the notes, the explanation of the step-time change and both sides' analyses.

Data only: built from a :class:`perfreport.gate.verdict.Verdict`, the configuration and
records the pipeline hands in; it computes nothing the verdict uses. Every other output (the
terminal table, HTML, Markdown, JUnit) can be rendered from this document alone. The schema
is documented in ``docs/report-schema.md``; ``schema_version`` changes when a field changes
meaning or disappears (new fields may appear without a bump).
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import __version__
from ..documents.cells import Floats, finite_float_list, scalar_list
from ..documents.jsondoc import json_text
from ..config import Config

if TYPE_CHECKING:  # the gate is imported by a compare, not by an analyze's summary document
    from ..gate.verdict import Check, Verdict

REPORT_SCHEMA_VERSION = 1
KIND = "perfreport.compare"


def check_record(check: Check, sample_rows: int | None = None) -> dict:
    """One check as JSON-ready data (NaN and inf become null). ``sample_rows``: each side's
    samples kept (the first ones; None: all of them); ``baseline_samples`` and
    ``candidate_samples`` count them all, so a list shorter than its count says it was cut."""
    from ..gate.checks import detectable_text

    e = check.evidence
    record = _clean({
        "id": check.id,
        "family": check.family,
        "name": check.name,
        "metric": check.metric,
        "label": check.label,
        "unit": check.unit,
        "worse": check.worse,
        "subject": check.subject,
        "rank": check.rank,
        "aggregation": check.aggregation,
        "level": check.level,
        "status": check.status,
        "counted": check.counts,
        "baseline_value": check.baseline_value,
        "candidate_value": check.candidate_value,
        "delta": check.delta,
        "delta_pct": check.delta_pct,
        "threshold": {"kind": check.threshold.kind, "value": check.threshold.value,
                      "floor_us": check.threshold.floor_us, "text": check.threshold.describe(check.unit)},
        "evidence": {
            "test": e.test, "baseline_samples": e.baseline_samples, "candidate_samples": e.candidate_samples,
            "p_value": e.p_value, "alpha": e.alpha, "method": e.method,
            "interval": list(e.interval) if e.interval else None, "interval_of": e.interval_of,
            "confidence_pct": e.confidence_pct, "significant": e.significant,
            "baseline_values": _samples(e.baseline_values, sample_rows),
            "candidate_values": _samples(e.candidate_values, sample_rows),
            "sample_kind": e.sample_kind, "baseline_runs": e.baseline_runs, "candidate_runs": e.candidate_runs,
            "baseline_steps": e.baseline_steps, "candidate_steps": e.candidate_steps,
            "noise_width": e.noise_width, "noise_widths": e.noise_widths,
            "required_noise_widths": e.required_noise_widths, "between_run_sd": e.between_run_sd,
            "min_detectable": e.min_detectable, "min_detectable_pct": e.min_detectable_pct,
            "min_detectable_text": detectable_text(e, check.unit), "drift": e.drift,
            "possible_regression": e.possible_regression, "to_decide": e.to_decide,
        },
        "message": check.message,
        "title": None,
        "waiver": None if check.waiver is None else {
            "check": check.waiver.check, "reason": check.waiver.reason,
            "expires": check.waiver.expires.isoformat() if check.waiver.expires else None},
    })
    record["title"] = title(record)
    return record


def title(record: Mapping[str, Any]) -> str:
    """A check's name for people: "step time", "kernels @rank0 [added: gemm]"."""
    name = record["label"] if record["family"] != "structural" or not record["subject"] else record["name"]
    if record["rank"] is not None:
        name += f" @rank{record['rank']}"
    if record["subject"]:
        name += f" [{record['subject']}]"
    return name


def change_text(record: Mapping[str, Any]) -> str:
    """A check's change for people: "+39.4 %", "+10.0 pts" (percentages), "+1" (counts)."""
    if record["delta"] is None:
        return "-"
    if record["unit"] == "pct":
        return f"{record['delta']:+.1f} pts"
    if record["delta_pct"] is not None and record["unit"] != "count":
        return f"{record['delta_pct']:+.1f} %"
    return f"{record['delta']:+g}"


def headline(document: Mapping[str, Any]) -> str:
    """The report's one line for people, as every format shows it: the verdict, the headline
    number (the step-time check's statistic, or the most severe finding) and the top cause —
    "FAIL · step time +39.4 % (126.55 → 176.47 ms/step, p = 0.0079) — GPU idle while …". Built
    from the document's checks and explanation by :mod:`perfreport.report.overview`, the one
    definition of the headline."""
    from .findings import group_findings
    from .overview import comparison_headline, headline_line

    h = comparison_headline(document, group_findings(document.get("checks") or []))
    return f"{str(document.get('status', '')).upper()} · {headline_line(h)}"


def side_record(analysis: Any, analyses: Mapping[str, Any], stored: Any = None) -> dict:
    """One side of the comparison: source, ranks, GPUs, the stored baseline's provenance (when
    the side is one) and its full analysis document (the content of ``summary.json``)."""
    traces = analysis.traces
    return {
        "source": traces.source,
        "ranks": list(traces.rank_ids),
        "gpus": sorted({g for t in traces if (g := t.meta.gpu_name())}),
        "stored_baseline": None if stored is None else {
            "name": stored.name, "path": str(stored.path), **{k: stored.manifest.get(k) for k in (
                "schema_version", "created_utc", "commit", "perfreport_version", "source", "gpus", "world_size",
                "versions")}},
        "analyses": dict(analyses),
    }


def compare_document(*, verdict: Verdict, config: Config, explanation: Mapping[str, Any] | None,
                 baseline: Mapping[str, Any], candidate: Mapping[str, Any], explanation_note: str | None = None,
                 timings_s: Mapping[str, float] | None = None, now: _dt.datetime | None = None,
                 sample_rows: int | None = None) -> dict:
    """The report document (see the module docstring and docs/report-schema.md); ``sample_rows``
    as for :func:`check_record`."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    counts = verdict.counts()
    document = _clean({
        "schema_version": REPORT_SCHEMA_VERSION,
        "kind": KIND,
        "perfreport_version": __version__,
        "created_utc": now.astimezone(_dt.timezone.utc).isoformat(timespec="seconds"),
        "status": verdict.status,
        "headline": "",
        "summary": {"checks": len(verdict.checks), **counts, "findings": len(verdict.findings)},
        "findings": [c.id for c in verdict.findings],
        "notes": [{"kind": n.kind, "message": n.message} for n in verdict.notes],
        "checks": [check_record(c, sample_rows) for c in verdict.checks],
        "explanation": dict(explanation) if explanation is not None else None,
        "explanation_note": explanation_note,
        "config": {"source": config.source, **config.to_dict()},
        "baseline": dict(baseline),
        "candidate": dict(candidate),
        "timings_s": {k: round(float(v), 3) for k, v in (timings_s or {}).items()},
    })
    document["headline"] = headline(document)
    return document


def _samples(values, limit: int | None = None) -> Floats | list:
    """A check's samples as the document holds them, the first ``limit`` of them (None: all):
    :class:`Floats` as they are (encoded as a list when written; NaN as null), anything else as
    a list."""
    if limit is not None and len(values) > limit:
        values = Floats(values.array()[:limit]) if isinstance(values, Floats) else list(values)[:limit]
    return values if isinstance(values, Floats) else list(values)


def render(document: Mapping[str, Any]) -> str:
    """The document as JSON text (indented, UTF-8, NaN as null)."""
    return json_text(document)


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        floats = finite_float_list(value)
        if floats is None:
            floats = scalar_list(value)
        return floats if floats is not None else [_clean(v) for v in value]
    return value


__all__ = ["compare_document", "side_record", "check_record", "headline", "title", "change_text", "render",
           "REPORT_SCHEMA_VERSION"]
