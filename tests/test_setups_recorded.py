"""A three-setup compare of our own H100 recordings (tests/data/recorded/setups): the worst
candidate leads, each section draws its own figures, and every element id on the page is unique."""

from __future__ import annotations

import base64
import collections
import functools
import json
import re

import pytest

from perfreport.documents.jsondoc import json_text
from perfreport.pipeline import compare_many, report_document
from perfreport.report import build_report
from perfreport.report.html import render_html
from perfreport.report.markdown import render_markdown
from perfreport.report.setups import multi_document

from .conftest import DATA

SETUPS = DATA / "recorded" / "setups"
LABELS = ["single", "DDP gloo", "FSDP gloo", "DDP nccl"]
RUNS = ["single_w1", "ddp_w2_gloo", "fsdp_full_w2_gloo", "ddp_w1_nccl"]


@functools.lru_cache(maxsize=None)
def setups_document() -> dict:
    paths = [SETUPS / r for r in RUNS]
    comparisons = compare_many(paths[0], paths[1:], workers=1)
    docs = [json.loads(json_text(report_document(c))) for c in comparisons]
    return json.loads(json_text(multi_document(docs, LABELS, command="perfreport compare …")))


@functools.lru_cache(maxsize=None)
def setups_page(paged: bool = False, brief: bool = False) -> str:
    """The three-setup report's HTML page, drawn once per layout (its figures are the slow part)."""
    return render_html(build_report(setups_document()), paged=paged, brief=brief)


def _step_change_pct(comparison: dict) -> float:
    """The candidate's step-time change, from its step-time check's raw medians."""
    check = next(c for c in comparison["checks"] if c["id"] == "relative.step_time")
    return 100.0 * (check["candidate_value"] / check["baseline_value"] - 1.0)


def test_the_worst_candidate_leads() -> None:
    doc = setups_document()
    changes = {c["label"]: _step_change_pct(c) for c in doc["comparisons"]}
    assert all(c["status"] == "fail" for c in doc["comparisons"])  # one status: ordered by the change
    worst = max(changes, key=changes.get)
    assert worst == "FSDP gloo" and changes[worst] > 500  # ~166 ms vs ~21 ms per step
    report = build_report(doc)
    assert report.headline.text.startswith(f"{worst}: ")
    lead = next(c for c in doc["comparisons"] if c["label"] == worst)
    lead_headline = build_report({**lead, "baseline": doc["setups"][0],
                                  "candidate": doc["setups"][LABELS.index(worst)]}).headline
    assert [c.text for c in report.headline.causes] == [c.text for c in lead_headline.causes]
    verdicts = report.sections[0].tables[0]
    assert [r[0] for r in verdicts.rows] == sorted(changes, key=lambda k: -changes[k])
    assert [s.title for s in report.sections[1:4]] == [f"{k} vs single" for k in sorted(changes, key=lambda k: -changes[k])]
    assert render_markdown(report).splitlines()[0].startswith(f"### ❌ FAIL · {worst}: ")
    assert doc["headline"].startswith(f"{worst}: ")


def test_each_section_shows_its_own_causes_and_figures() -> None:
    doc = setups_document()
    report = build_report(doc)
    html = setups_page()
    for c in doc["comparisons"]:
        own = build_report({**c, "baseline": doc["setups"][0],
                            "candidate": doc["setups"][LABELS.index(c["label"])]}).headline
        section = next(s for s in report.sections if s.title == f"{c['label']} vs single")
        text = " ".join(getattr(b, "text", "") for b in section.blocks)
        assert own.causes and own.causes[0].text in text
    # each candidate's step split is its own: different SVGs, each titled with its own step times
    figures = {m.group(1): m.group(2) for m in re.finditer(r'<figure id="([^"]+)">(.*?)</figure>', html, re.S)}
    splits = {k: v for k, v in figures.items() if k.endswith("step_breakdown")}
    assert len(splits) == 3
    bodies = [re.sub(r'(id|href)="[^"]*"|url\(#[^)]*\)', "", v) for v in splits.values()]
    assert len(set(bodies)) == 3
    for c in doc["comparisons"]:  # the section's figure holds its own candidate's step split
        section = next(s for s in report.sections if s.title == f"{c['label']} vs single")
        figure = next(f for f in section.figures if f.id == "step_breakdown")
        by_kind = {r["kind"]: r["candidate_us"] for r in c["explanation"]["by_kind"]}
        candidate = next(b for b in figure.bars if b.label == "candidate")
        assert sum(candidate.values) == pytest.approx(sum(by_kind[k] for k in by_kind if k in (
            "kernel", "communication", "memory", "idle")), rel=1e-9)


def test_element_ids_are_unique_and_references_resolve() -> None:
    """In the page, and in each figure of the PDF's page (an image of its SVG: a document of its own)."""
    page, paged = setups_page(), setups_page(paged=True, brief=True)
    images = [base64.b64decode(m).decode() for m in re.findall(r'src="data:image/svg\+xml;base64,([^"]+)"', paged)]
    assert len(images) >= 3 and "<svg" not in paged
    for html, least in ((page, 500), (paged, 40), *((image, 20) for image in images)):
        ids = re.findall(r'\bid="([^"]+)"', html)
        repeated = [k for k, n in collections.Counter(ids).items() if n > 1]
        assert len(ids) > least and repeated == []
        refs = set(re.findall(r'url\(#([^)]+)\)', html)) | set(re.findall(r'href="#([^"]+)"', html))
        assert refs and refs <= set(ids)
