"""perfreport.report.junit: one test case per finding (checks grouped across ranks), failures carry the message,
inconclusive checks are skipped (never a failure), and the XML stays valid for any name."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from perfreport.report import build_report
from perfreport.report.junit import render_junit
from perfreport.report.findings import group_findings
from perfreport.report.templates import format_value

from .test_findings import synthetic_8_rank_checks
from .test_report_build import comparison_document
from .test_report_html import with_findings


def test_one_case_per_finding_and_failures_carry_the_message() -> None:
    doc = with_findings(comparison_document())
    report = build_report(doc)
    root = ET.fromstring(render_junit(report))
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    groups = group_findings(doc["checks"])
    assert [c.get("name") for c in cases] == [g.id for g in groups]
    assert sorted(cid for g in groups for cid in g.check_ids) == sorted(c["id"] for c in doc["checks"])
    by_id = {g.id: g for g in groups}
    statuses = [by_id[c.get("name")].status for c in cases]
    n_fail, n_skip = statuses.count("fail"), statuses.count("inconclusive")
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == (str(len(cases)), str(n_fail), str(n_skip))
    assert suite.get("failures") == str(n_fail) == "1" and suite.get("errors") == "0"
    for case in cases:
        g = by_id[case.get("name")]
        failure, skipped, out = case.find("failure"), case.find("skipped"), case.find("system-out")
        assert (failure is not None) == (g.status == "fail")
        assert (skipped is not None) == (g.status == "inconclusive")
        assert (out is not None) == (g.status == "warn")
        check = g.checks[0]
        message = check["message"] if len(g.checks) == 1 else g.summary
        if failure is not None:
            assert failure.get("message") == message
            assert f"finding: {g.summary}" in failure.text
            assert f"baseline: {format_value(check['baseline_value'], check['unit'])}" in failure.text
            assert f"threshold: {check['threshold']['text']}" in failure.text
        if skipped is not None:
            assert skipped.get("message") == f"inconclusive: {message}"
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["verdict"] == "fail" and props["headline"] == report.headline.text


def test_eight_ranks_are_one_case() -> None:
    checks = synthetic_8_rank_checks()
    doc = {"kind": "perfreport.compare", "status": "fail", "checks": checks, "baseline": {}, "candidate": {}}
    root = ET.fromstring(render_junit(build_report(doc)))
    cases = root.find("testsuite").findall("testcase")
    assert len(cases) == 6 and root.get("failures") == "4"
    names = [c.get("name") for c in cases]
    assert "structural.memcpy[memcpy_dtoh_count]@ranks0-7" in names
    dtoh = cases[names.index("structural.memcpy[memcpy_dtoh_count]@ranks0-7")].find("failure")
    assert dtoh.get("message") == "device-to-host copies per step 0 → 1 on ranks 0–7"
    assert dtoh.text.count("[structural.memcpy[memcpy_dtoh_count]@rank") == 8


def test_single_run_is_an_empty_suite() -> None:
    root = ET.fromstring(render_junit(build_report({"source": "x", "summary": []})))
    assert root.get("tests") == "0" and root.find("testsuite").findall("testcase") == []
    assert root.find("testsuite").get("name") == "perfreport.analyze"


def test_names_with_markup_and_control_characters_stay_valid_xml() -> None:
    nasty = "k<T&U>\"'\x00\x07\x1b[31m\ud800 ]]> <script>alert(1)</script> |@user `x`"
    checks = [{"id": nasty, "family": "relative", "name": "kernel_time", "subject": nasty, "status": "fail",
               "message": nasty * 3, "unit": "us", "baseline_value": 1.0, "candidate_value": 2.0, "delta": 1.0,
               "delta_pct": 100.0, "threshold": {"text": "<5 %"}, "counted": True, "label": "kernel time"},
              {"id": nasty + "2", "family": "structural", "name": "syncs", "status": "inconclusive",
               "message": "\x00why", "unit": "count", "counted": True, "label": "syncs"}]
    doc = {"kind": "perfreport.compare", "status": "fail", "checks": checks,
           "baseline": {"source": nasty}, "candidate": {"source": nasty}}
    text = render_junit(build_report(doc))
    root = ET.fromstring(text)  # raises on invalid XML
    cases = root.find("testsuite").findall("testcase")
    clean = "k<T&U>\"'[31m ]]> <script>alert(1)</script> |@user `x`"
    assert cases[0].get("name") == clean and cases[0].find("failure").get("message") == clean * 3
    assert cases[1].find("skipped").get("message") == "inconclusive: why"
    assert "<script>" not in text  # escaped in the file, restored by the parser
