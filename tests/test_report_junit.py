"""perfreport.report.junit: one test case per check, failures carry the check's message,
inconclusive checks are skipped (never a failure), and the XML stays valid for any name."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from perfreport.report import build_report
from perfreport.report.junit import render_junit
from perfreport.report.model import Check, Report, Verdict
from perfreport.report.templates import format_value

from .test_report_build import comparison_document
from .test_report_html import with_findings


def test_one_case_per_check_and_failures_carry_the_message() -> None:
    doc = with_findings(comparison_document())
    root = ET.fromstring(render_junit(build_report(doc)))
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [c.name for c in build_report(doc).verdict.checks]
    assert sorted(c.get("name") for c in cases) == sorted(c["id"] for c in doc["checks"])
    by_id = {c["id"]: c for c in doc["checks"]}
    statuses = [by_id[c.get("name")]["status"] for c in cases]
    n_fail, n_skip = statuses.count("fail"), statuses.count("inconclusive")
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == (str(len(cases)), str(n_fail), str(n_skip))
    assert suite.get("failures") == str(n_fail) and suite.get("errors") == "0"
    for case in cases:
        check = by_id[case.get("name")]
        failure, skipped, out = case.find("failure"), case.find("skipped"), case.find("system-out")
        assert (failure is not None) == (check["status"] == "fail")
        assert (skipped is not None) == (check["status"] == "inconclusive")
        assert (out is not None) == (check["status"] == "warn")
        if failure is not None:
            assert failure.get("message") == check["message"]
            assert f"baseline: {format_value(check['baseline_value'], check['unit'])}" in failure.text
            assert f"threshold: {check['threshold']['text']}" in failure.text
        if skipped is not None:
            assert skipped.get("message") == f"inconclusive: {check['message']}"
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["verdict"] == "fail"


def test_single_run_is_an_empty_suite() -> None:
    root = ET.fromstring(render_junit(build_report({"source": "x", "summary": []})))
    assert root.get("tests") == "0" and root.find("testsuite").findall("testcase") == []
    assert root.find("testsuite").get("name") == "perfreport.analyze"


def test_names_with_markup_and_control_characters_stay_valid_xml() -> None:
    nasty = "k<T&U>\"'\x00\x07\x1b[31m\ud800 ]]> <script>alert(1)</script> |@user `x`"
    checks = (Check(name=nasty, status="fail", message=nasty * 3, unit="us", baseline=1.0, candidate=2.0,
                    delta=1.0, threshold="<5 %"),
              Check(name=nasty + "2", status="inconclusive", message="\x00why", unit="count"))
    report = Report(kind="compare", title="t", subtitle=nasty, created_utc="2024-01-01T00:00:00+00:00",
                    verdict=Verdict("fail", nasty, "", checks), sections=(), command="c")
    text = render_junit(report)
    root = ET.fromstring(text)  # raises on invalid XML
    cases = root.find("testsuite").findall("testcase")
    clean = "k<T&U>\"'[31m ]]> <script>alert(1)</script> |@user `x`"
    assert cases[0].get("name") == clean and cases[0].find("failure").get("message") == clean * 3
    assert cases[1].find("skipped").get("message") == "inconclusive: why"
    assert "<script>" not in text  # escaped in the file, restored by the parser
