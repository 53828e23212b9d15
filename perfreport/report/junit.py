"""Report -> JUnit XML: one test case per finding, for CI systems that show test results.

A finding groups the checks that say the same thing across ranks
(:mod:`perfreport.report.findings`). Test case: class ``perfreport.gate``, name the finding's id
(the check id for a single check, ``relative.step_time``; ``family.name[subject]@ranks0-7`` for
a group). A failed finding is a ``<failure>`` whose message is the check's message (the
finding's summary for a group) and whose text gives, per check, baseline, candidate, delta,
threshold and significance; an inconclusive check is
``<skipped>`` (it must never block, and skipped is what CI shows as neither pass nor fail); a
warning passes with its message in ``<system-out>``. A single-run report has no checks: an
empty suite. Built with ElementTree (which escapes markup), after removing the characters XML
1.0 forbids, so any kernel name gives a well-formed file.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .findings import FindingGroup
from .model import Check, Report
from .templates import clean_text, format_value, valid_xml_text

SUITE = "perfreport"
DETAILED_CHECKS = 16
"""Checks of one finding written out in full; report.json has every one."""


def _details(c: Check) -> str:
    parts = [f"status: {c.status}", f"message: {c.message}"]
    for label, value, unit, signed in (("baseline", c.baseline, c.unit, False),
                                       ("candidate", c.candidate, c.unit, False),
                                       ("delta", c.delta, "pp" if c.unit == "pct" else c.unit, True)):
        if value is not None:
            parts.append(f"{label}: {format_value(value, unit, signed)}")
    if c.delta_pct is not None and c.unit != "pct":
        parts.append(f"delta %: {format_value(c.delta_pct, 'pct', True)}")
    if c.threshold:
        parts.append(f"threshold: {c.threshold}")
    if c.p_value is not None:
        parts.append(f"p-value: {format_value(c.p_value, 'p_value')}")
    if c.interval is not None:
        lo, hi = c.interval
        unit = "pp" if c.unit == "pct" else "number"
        parts.append(f"interval: [{format_value(lo, unit)}, {format_value(hi, unit)}] ({c.interval_of})")
    for label, text in (("scope", c.scope), ("severity", c.severity), ("evidence", c.evidence),
                        ("waiver", c.waiver)):
        if text:
            parts.append(f"{label}: {text}")
    return valid_xml_text("\n".join(parts))


def _group_details(g: FindingGroup, checks_by_id: dict[str, Check]) -> str:
    """The finding's summary, then the detail of each of its checks (per rank)."""
    parts = [f"finding: {g.summary}", f"checks: {len(g.checks)}" + (f" ({g.ranks_text})" if g.ranks_text else "")]
    for cid in g.check_ids[:DETAILED_CHECKS]:
        if cid in checks_by_id:
            parts.append("")
            parts.append(f"[{cid}]")
            parts.append(_details(checks_by_id[cid]))
    if len(g.check_ids) > DETAILED_CHECKS:
        parts.append(f"\n… and {len(g.check_ids) - DETAILED_CHECKS} more checks in report.json")
    return valid_xml_text("\n".join(parts))


def render_junit(report: Report) -> str:
    """The report as a JUnit XML document (text, with an XML declaration): one test case per
    finding (:func:`perfreport.report.findings.group_findings`)."""
    groups = report.findings
    checks_by_id = {c.name: c for c in (report.verdict.checks if report.verdict else ())}
    failures = sum(g.status == "fail" for g in groups)
    skipped = sum(g.status == "inconclusive" for g in groups)
    root = ET.Element("testsuites", name=SUITE, tests=str(len(groups)), failures=str(failures), errors="0",
                      skipped=str(skipped))
    suite = ET.SubElement(root, "testsuite", name=f"{SUITE}.{report.kind}", tests=str(len(groups)),
                          failures=str(failures), errors="0", skipped=str(skipped))
    if report.created_utc:
        suite.set("timestamp", clean_text(report.created_utc))
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="verdict", value=report.status)
    ET.SubElement(props, "property", name="source", value=clean_text(report.subtitle))
    if report.headline is not None:
        ET.SubElement(props, "property", name="headline", value=clean_text(report.headline.text))
    for note in (*(report.verdict.notes if report.verdict else ()), *report.notes):  # partial jobs, hardware …
        ET.SubElement(props, "property", name="note", value=clean_text(note))
    for g in groups:
        case = ET.SubElement(suite, "testcase", classname=f"{SUITE}.gate", name=clean_text(g.id))
        message = clean_text(g.checks[0].get("message") if len(g.checks) == 1 else g.summary)
        if g.status == "fail" and g.counted:
            failure = ET.SubElement(case, "failure", message=message, type="regression")
            failure.text = _group_details(g, checks_by_id)
        elif g.status == "inconclusive":
            ET.SubElement(case, "skipped", message=clean_text(f"inconclusive: {message}"))
        elif g.status == "warn" or not g.counted:
            ET.SubElement(case, "system-out").text = _group_details(g, checks_by_id)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
