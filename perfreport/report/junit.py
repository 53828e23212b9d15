"""Report -> JUnit XML: one test case per gate check, for CI systems that show test results.

Test case: class ``perfreport.gate``, name the check id (``relative.step_time@rank0``). A
failed check is a ``<failure>`` whose message is the check's message and whose text gives
baseline, candidate, delta, threshold and significance; an inconclusive check is
``<skipped>`` (it must never block, and skipped is what CI shows as neither pass nor fail); a
warning passes with its message in ``<system-out>``. A single-run report has no checks: an
empty suite. Built with ElementTree (which escapes markup), after removing the characters XML
1.0 forbids, so any kernel name gives a well-formed file.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .model import Check, Report
from .templates import clean_text, format_value, valid_xml_text

SUITE = "perfreport"


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


def render_junit(report: Report) -> str:
    """The report as a JUnit XML document (text, with an XML declaration)."""
    checks = report.verdict.checks if report.verdict else ()
    failures = sum(c.status == "fail" for c in checks)
    skipped = sum(c.status == "inconclusive" for c in checks)
    root = ET.Element("testsuites", name=SUITE, tests=str(len(checks)), failures=str(failures), errors="0",
                      skipped=str(skipped))
    suite = ET.SubElement(root, "testsuite", name=f"{SUITE}.{report.kind}", tests=str(len(checks)),
                          failures=str(failures), errors="0", skipped=str(skipped))
    if report.created_utc:
        suite.set("timestamp", clean_text(report.created_utc))
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="verdict", value=report.status)
    ET.SubElement(props, "property", name="source", value=clean_text(report.subtitle))
    for c in checks:
        case = ET.SubElement(suite, "testcase", classname=f"{SUITE}.gate", name=clean_text(c.name))
        if c.status == "fail":
            failure = ET.SubElement(case, "failure", message=clean_text(c.message), type="regression")
            failure.text = _details(c)
        elif c.status == "inconclusive":
            ET.SubElement(case, "skipped", message=clean_text(f"inconclusive: {c.message}"))
        elif c.status == "warn":
            ET.SubElement(case, "system-out").text = _details(c)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
