"""The comparison-only parts of a report: the verdict, its checks, and what changed.

Reads a comparison document (:mod:`perfreport.report.json_report`): checks become
:class:`Check` values and tables (failed, warned and inconclusive ones first), the explanation
becomes the "What changed" section, and the configuration and stored baseline become
provenance lines.
"""

from __future__ import annotations

from collections.abc import Sequence

from .blocks import MAX_ROWS, Side, make_section, records, table
from .model import STATUSES, Check, Column, Interval, Paragraph, Section, Table, Value, Verdict

SIDES = ("baseline", "candidate")
COMPARE_KIND = "perfreport.compare"
"""``kind`` of a comparison document (perfreport.report.json_report)."""
BANNER_CHECKS = 10
"""Failed and warned checks listed in the verdict banner; the checks table has all."""


def status_rank(status: str) -> int:
    return STATUSES.index(status) if status in STATUSES else len(STATUSES)


def check_of(r: dict) -> Check:
    e = r.get("evidence") or {}
    threshold = r.get("threshold") or {}
    waiver = r.get("waiver") or {}
    interval = e.get("interval")
    samples = ""
    if e.get("baseline_samples") is not None:
        samples = f", {e.get('baseline_samples')} vs {e.get('candidate_samples')} samples"
    return Check(
        name=str(r.get("id") or r.get("name") or "?"), status=str(r.get("status") or "?"),
        message=str(r.get("message") or ""), unit=str(r.get("unit") or "number"),
        label=str(r.get("title") or r.get("label") or r.get("id") or ""),
        baseline=r.get("baseline_value"), candidate=r.get("candidate_value"), delta=r.get("delta"),
        delta_pct=r.get("delta_pct"), threshold=str(threshold.get("text") or ""),
        scope="job" if r.get("rank") is None else f"rank {r.get('rank')}", severity=str(r.get("level") or ""),
        p_value=e.get("p_value"),
        interval=(interval[0], interval[1]) if isinstance(interval, list) and len(interval) == 2 else None,
        interval_of=str(e.get("interval_of") or ""), evidence=f"{e.get('test') or ''}{samples}",
        waiver=f"{waiver.get('reason') or ''} (waiver {waiver.get('check')})" if waiver else "",
        counted=bool(r.get("counted", not waiver)))


def ordered_checks(checks: Sequence[Check]) -> tuple[Check, ...]:
    """Counted checks before waived ones, then fail, warn, inconclusive, pass (stable)."""
    return tuple(sorted(checks, key=lambda c: (not c.counted, status_rank(c.status))))


def _delta_unit(unit: str) -> str:
    return "pp" if unit == "pct" else unit


def checks_table(tid: str, title: str, checks: Sequence[Check], *, with_message: bool, collapsed: bool) -> Table | None:
    """The checks as a table of cells that carry their own unit (each check has its own)."""
    if not checks:
        return None
    cols = [Column("status", "status", "status"), Column("check", "check", "name"),
            Column("baseline", "baseline", "mixed"), Column("candidate", "candidate", "mixed"),
            Column("delta", "change", "mixed"), Column("delta_pct", "change %", "pct", signed=True),
            Column("threshold", "threshold", "text"), Column("p_value", "p-value", "p_value"),
            Column("interval", "interval", "mixed")]
    if with_message:
        cols.append(Column("message", "details", "text"))
    if any(c.waiver for c in checks):
        cols.append(Column("waiver", "waiver", "name"))
    rows = []
    for c in checks[:MAX_ROWS]:
        interval_unit = "pp" if c.unit == "pct" else "number"
        cells = {"status": c.status, "check": c.label or c.name, "baseline": Value(c.baseline, c.unit),
                 "candidate": Value(c.candidate, c.unit), "delta": Value(c.delta, _delta_unit(c.unit), True),
                 "delta_pct": c.delta_pct if c.unit != "pct" else None, "threshold": c.threshold,
                 "p_value": c.p_value,
                 "interval": Interval(*c.interval, interval_unit) if c.interval else None,
                 "message": c.message, "waiver": c.waiver}
        rows.append(tuple(cells[col.key] for col in cols))
    marked = tuple(i for i, c in enumerate(checks[:MAX_ROWS]) if c.status in ("fail", "warn"))
    note = "Interval: confidence interval of the ratio of medians (candidate / baseline; of the difference in " \
           "points for shares)." if any(c.interval for c in checks) else ""
    if len(checks) > MAX_ROWS:
        note += f" First {MAX_ROWS} of {len(checks)} checks; the JSON has all."
    return Table(tid, title, tuple(cols), tuple(rows), len(checks), marked, collapsed, note.strip())


def checks_sections(checks: Sequence[Check]) -> list[Section]:
    findings = [c for c in checks if c.counted and c.status != "pass"]
    rest = [c for c in checks if not c.counted or c.status == "pass"]
    out = []
    if findings:
        out.append(Section("checks", "Checks that failed, warned or were inconclusive", (
            checks_table("findings", "Findings", findings, with_message=True, collapsed=False),), 0,
            "checks beyond their thresholds"))
    table_rest = checks_table("passed", "Passed and waived checks", rest, with_message=True, collapsed=True)
    if table_rest is not None:
        out.append(Section("passed", "Passed and waived checks", (table_rest,), 1 if findings else 0,
                           "checks within their thresholds, and waived ones"))
    return out


def movers_section(doc: dict) -> Section | None:
    """What changed: the attribution of the step-time change, and ops found in one run only."""
    x = doc.get("explanation")
    if not isinstance(x, dict):
        note = doc.get("explanation_note")
        return Section("movers", "What changed", (Paragraph(str(note)),), 0, "no attribution") if note else None
    side = Side("", x)
    one_sided = [dict(r, change="added") for r in records(side, "added")] + \
                [dict(r, change="removed") for r in records(side, "removed")]
    lines = [str(line) for line in x.get("lines") or []]
    return make_section(
        "movers", "What changed: where the step time went", 0, "the parts that moved the step time",
        *(Paragraph(line) for line in lines[1:3]),
        table("contributions", "Top movers: time per step and share of the step-time change", [side], "contributions",
              [("label", "part", "name"), ("change", "change", "text"), ("baseline_us", "baseline per step", "us"),
               ("candidate_us", "candidate per step", "us"), Column("delta_us", "change per step", "us", True),
               Column("share_pct", "share of change %", "pct", True)], sort=(), collapsed=False),
        table("by_kind", "Change by kind", [side], "by_kind",
              [("label", "kind", "text"), ("baseline_us", "baseline per step", "us"),
               ("candidate_us", "candidate per step", "us"), Column("delta_us", "change per step", "us", True),
               Column("share_pct", "share of change %", "pct", True)], sort=(), collapsed=False),
        table("added_removed", "Added and removed ops and kernels", [Side("", {"rows": one_sided})], "rows",
              [("change", "change", "text"), ("kind", "kind", "text"), ("key", "name", "name"),
               ("count_per_step", "calls per step", "number"), ("dur_per_step_us", "time per step", "us")],
              sort=(), collapsed=False),
        table("collective_changes", "Collectives that changed", [side], "collectives",
              ["collective", ("changes", "what changed", "text"), ("baseline_count_per_step", "baseline calls/step"),
               ("candidate_count_per_step", "candidate calls/step"),
               ("baseline_msg_nelems", "baseline elements/call", "number"),
               ("candidate_msg_nelems", "candidate elements/call", "number")], sort=()),
    )


def comparison_provenance(doc: dict) -> list[str]:
    """Where the thresholds and the stored baseline came from, as the document says."""
    out = []
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    if config:
        out.append(f"Thresholds and waivers: {config.get('source') or 'defaults'}.")
    stored = (doc.get("baseline") or {}).get("stored_baseline")
    if isinstance(stored, dict):
        out.append(f"Stored baseline {stored.get('name')} ({stored.get('path')}): commit {stored.get('commit') or '?'}, "
                   f"created {stored.get('created_utc') or '?'}, perfreport {stored.get('perfreport_version') or '?'}.")
    return out


def comparison_verdict(doc: dict, checks: tuple[Check, ...]) -> Verdict:
    """The verdict banner: status, headline (without the status it repeats), the first line of
    the explanation (or the note saying why there is none), the checks and the document's notes."""
    x = doc.get("explanation") if isinstance(doc.get("explanation"), dict) else {}
    lines = [str(line) for line in (x or {}).get("lines") or []]
    status = str(doc.get("status") or "inconclusive")
    headline = str(doc.get("headline") or status.upper()).split(" — ")[0]
    if headline.upper().startswith(status.upper() + ": "):  # the badge already says it
        headline = headline[len(status) + 2:]
    return Verdict(status=status, headline=headline,
                   explanation=lines[0] if lines else str(doc.get("explanation_note") or ""),
                   checks=checks, notes=tuple(str(n.get("message")) for n in doc.get("notes") or []
                                              if isinstance(n, dict)))
