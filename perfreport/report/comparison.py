"""The comparison-only parts of a report: the verdict, its checks, and what changed.

Reads a comparison document (:mod:`perfreport.report.json_report`): checks become
:class:`Check` values and tables (failed, warned and inconclusive ones first), the explanation
becomes the "What changed" section, and the configuration and stored baseline become
provenance lines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..documents.table_rows import samples_cut_text
from .blocks import MAX_ROWS, TOP_ROWS, Side, make_section, records, table
from .findings import FindingGroup
from .model import STATUSES, Check, Column, Headline, Paragraph, Section, Table, Verdict
from .overview import breakdown_figure, headline_line, judged_runs, signed_ms, top_kernels_figure

SIDES = ("baseline", "candidate")
COMPARE_KIND = "perfreport.compare"
"""``kind`` of a comparison document (perfreport.report.json_report)."""
BANNER_CHECKS = 10
"""Failed and warned findings listed in the verdict banner; the findings table has all."""


def status_rank(status: str) -> int:
    return STATUSES.index(status) if status in STATUSES else len(STATUSES)


def check_of(r: dict) -> Check:
    e = r.get("evidence") or {}
    threshold = r.get("threshold") or {}
    waiver = r.get("waiver") or {}
    interval = e.get("interval")
    samples = f", {samples_text(e)}" if samples_text(e) else ""
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


def samples_text(e: dict) -> str:
    """How many samples a verdict rests on, of which kind: "4 vs 5 samples" (steps), "3 vs 2 runs
    (24 vs 16 steps)", "812 vs 812 kernel calls"; "" when the evidence has no counts."""
    if e.get("baseline_samples") is None:
        return ""
    kind = e.get("sample_kind") or "step"
    if kind == "run":
        return (f"{e.get('baseline_runs')} vs {e.get('candidate_runs')} runs "
                f"({e.get('baseline_steps')} vs {e.get('candidate_steps')} steps)")
    if kind != "step":
        return f"{e.get('baseline_samples')} vs {e.get('candidate_samples')} {str(kind).replace('_', ' ')}s"
    return f"{e.get('baseline_samples')} vs {e.get('candidate_samples')} samples"


def ordered_checks(checks: Sequence[Check]) -> tuple[Check, ...]:
    """Counted checks before waived ones, then fail, warn, inconclusive, pass (stable)."""
    return tuple(sorted(checks, key=lambda c: (not c.counted, status_rank(c.status))))


def finding_evidence(g: FindingGroup) -> str:
    """What the finding's status rests on, in a few words: "Mann-Whitney U, 4 vs 5 samples"."""
    e = g.checks[0].get("evidence") or {}
    test = {"mann-whitney-u": "Mann-Whitney U", "median count per step": "median per step"}.get(
        str(e.get("test") or ""), str(e.get("test") or ""))
    if samples_text(e) and (e.get("baseline_samples") or e.get("candidate_samples")):
        test += f", {samples_text(e)}"
    if len(g.checks) > 1:
        test += f"; {len(g.checks)} checks"
    detects = e.get("min_detectable_text")
    if detects:
        test += f"; detects ≥ {detects}" if not detects.startswith("none") else f"; detects {detects}"
    if e.get("to_decide"):
        test += f"; {e['to_decide']}"
    return test.strip(", ")


def findings_table(tid: str, title: str, groups: Sequence[FindingGroup], *, collapsed: bool) -> Table | None:
    """One row per finding (:func:`group_findings`): status, the finding in one line (values,
    change, ranks), its threshold and evidence; per-rank detail stays in the JSON."""
    if not groups:
        return None
    cols = (Column("status", "status", "status"), Column("finding", "finding", "text"),
            Column("threshold", "threshold", "text"), Column("evidence", "evidence", "text"))
    shown = groups[:MAX_ROWS]
    rows = tuple((g.status, g.summary + (" (waived)" if g.waived else ""),
                  str((g.checks[0].get("threshold") or {}).get("text") or ""), finding_evidence(g)) for g in shown)
    marked = tuple(i for i, g in enumerate(shown) if g.status in ("fail", "warn") and g.counted)
    note = f"First {MAX_ROWS} of {len(groups)} findings; the JSON has all." if len(groups) > MAX_ROWS else ""
    return Table(tid, title, cols, rows, len(groups), marked, collapsed, note)


def checks_sections(groups: Sequence[FindingGroup]) -> list[Section]:
    """Findings that failed, warned or were inconclusive (open), then the passed and waived
    ones as one compact folded table; the first says so where report.json keeps only each
    check's first samples."""
    findings = [g for g in groups if g.counted and g.status != "pass"]
    rest = [g for g in groups if not g.counted or g.status == "pass"]
    cut = samples_cut_text([c for g in groups for c in g.checks])
    said = (Paragraph(cut),) if cut else ()
    out = []
    if findings:
        out.append(Section("checks", "Findings", (
            *said, findings_table("findings", "Failed, warned and inconclusive findings", findings, collapsed=False)),
            0, "findings beyond their thresholds"))
        said = ()
    table_rest = findings_table("passed", "Passed and waived checks", rest, collapsed=True)
    if table_rest is not None:
        out.append(Section("passed", "Passed and waived checks", (*said, table_rest), 1 if findings else 0,
                           f"{len(rest)} findings within their thresholds, or waived"))
    return out


def movers_section(doc: dict) -> Section | None:
    """Where the time went: the attribution of the mean step time (its parts add up), the step
    split by kind, the top kernels of both runs, and ops and kernels found in one run only."""
    x = doc.get("explanation")
    if not isinstance(x, dict):
        note = doc.get("explanation_note")
        return Section("movers", "Where the time went", (Paragraph(str(note)),), 1, "no attribution") if note else None
    side = Side("", x)
    sides = [Side(label, (doc.get(label) or {}).get("analyses") or {}) for label in SIDES]
    one_sided = [dict(r, change="added") for r in records(side, "added")] + \
                [dict(r, change="removed") for r in records(side, "removed")]
    runs = judged_runs(doc)
    which = "" if runs == (1, 1) else (f" in one run of each side, the baseline's latest and the candidate's own "
                                       f"(the gate judged {runs[0]} baseline and {runs[1]} candidate runs)")
    basis = (f"Means over the {x.get('baseline_samples')} baseline and {x.get('candidate_samples')} candidate "
             f"(rank, step) samples the gate judged{which}: {x.get('baseline_step_ms', math.nan):.1f} → "
             f"{x.get('candidate_step_ms', math.nan):.1f} ms/step ({signed_ms(1000.0 * (x.get('delta_ms') or 0.0))}/step, "
             f"{x.get('delta_pct') or 0.0:+.1f} %). The parts add up to this change of the mean; the step-time check "
             f"compares medians. GPU idle here is any time of the step with nothing on the GPU (waits before the "
             f"step's first kernel included); the GPU idle checks count only the gaps between the step's first and "
             f"last GPU work.")
    return make_section(
        "movers", "Where the time went", 1, "the parts that moved the mean step time",
        Paragraph(basis),
        breakdown_figure(x),
        table("contributions", "Largest parts of the change (time per step)", [side], "contributions",
              [("label", "part", "name"), ("baseline_us", "baseline", "us"), ("candidate_us", "candidate", "us"),
               Column("delta_us", "change", "us", True), Column("share_pct", "share of change %", "pct", True)],
              sort=(), collapsed=False),
        table("by_kind", "Change by kind (time per step)", [side], "by_kind",
              [("label", "kind", "text"), ("baseline_us", "baseline", "us"), ("candidate_us", "candidate", "us"),
               Column("delta_us", "change", "us", True), Column("share_pct", "share of change %", "pct", True)],
              sort=(), collapsed=False),
        top_kernels_figure(sides),
        table("added_removed", "Ops and kernels in one run only", [Side("", {"rows": one_sided})], "rows",
              [("change", "change", "text"), ("kind", "kind", "text"), ("key", "name", "name"),
               ("count_per_step", "calls per step", "number"), ("dur_per_step_us", "time per step", "us")],
              sort=("dur_per_step_us",), descending=True, top=TOP_ROWS, collapsed=False),
        table("collective_changes", "Collectives that changed", [side], "collectives",
              ["collective", ("changes", "what changed", "text"), ("baseline_count_per_step", "baseline calls/step"),
               ("candidate_count_per_step", "candidate calls/step"),
               ("baseline_msg_bytes", "baseline bytes/call", "bytes"),
               ("candidate_msg_bytes", "candidate bytes/call", "bytes")], sort=()),
    )


def config_line(config: dict) -> str:
    """Which configuration judged the run: its file and SHA-256, or the defaults, and the command
    that prints every value in force."""
    source = str(config.get("source") or "defaults")
    if source == "defaults":
        return ("Thresholds and waivers: the defaults (no perfreport.toml or [tool.perfreport] found); "
                "perfreport config show lists them.")
    checksum = str(config.get("checksum") or "")
    digest = f" (SHA-256 {checksum[:16]})" if checksum else " (no checksum recorded)"
    return (f"Thresholds and waivers: {source}{digest}; perfreport config show --config {source} "
            "lists them.")


def comparison_provenance(doc: dict) -> list[str]:
    """Where the thresholds and the stored baseline came from, as the document says."""
    out = []
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    if config:
        out.append(config_line(config))
    stored = (doc.get("baseline") or {}).get("stored_baseline")
    if isinstance(stored, dict):
        out.append(f"Stored baseline {stored.get('name')} ({stored.get('path')}): commit {stored.get('commit') or '?'}, "
                   f"created {stored.get('created_utc') or '?'}, perfreport {stored.get('perfreport_version') or '?'}.")
    return out


def comparison_verdict(doc: dict, checks: tuple[Check, ...], headline: Headline) -> Verdict:
    """The verdict banner: status, the headline number with its first cause, the basis of the
    causes (or the note saying why there are none), the checks and the document's notes."""
    return Verdict(status=str(doc.get("status") or "inconclusive"), headline=headline_line(headline),
                   explanation=headline.basis, checks=checks,
                   notes=tuple(str(n.get("message")) for n in doc.get("notes") or [] if isinstance(n, dict)))


def step_trace_section(doc: dict) -> Section | None:
    """"Look at the trace": which step of each side ``perfreport step-trace`` cuts out (the same
    choice, made from this document), the file names and how to open them."""
    from ..step_trace import FOLDER, MAX_BYTES, OPEN_HINT, pick_steps

    picks = pick_steps(doc)
    if not picks:
        return None
    rows = tuple((p.side, p.rank, p.step, p.wall_us, p.why, f"{FOLDER}/{p.filename}") for p in picks.values())
    text = (f"One judged step of each side as its own small trace (Kineto JSON, at most {MAX_BYTES / 1e6:.0f} MB "
            f"each): perfreport step-trace --report DIR writes them into DIR/{FOLDER}/ (the GitHub Action does, so "
            f"they are in the report artifact); {OPEN_HINT}.")
    return Section("step-traces", "Look at the trace", (Paragraph(text), Table(
        "step_traces", "The step of each side", (
            Column("side", "side", "text"), Column("rank", "rank", "count"), Column("step", "step", "count"),
            Column("wall_us", "step time", "us"), Column("why", "why this step", "text"),
            Column("file", "file", "text")), rows, len(rows))), importance=LISTED_IMPORTANCE_STEP_TRACES,
        summary="one judged step of each side, for Perfetto or chrome://tracing")


LISTED_IMPORTANCE_STEP_TRACES = 3
"""Shown in full in the HTML and PDF; in Markdown only listed: the PR comment has its own block."""

