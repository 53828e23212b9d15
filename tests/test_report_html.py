"""perfreport.report.html: one self-contained page (no script, nothing fetched), the verdict
first, every figure an inline SVG with labelled axes, long tables folded, and the demo report
(the real A/B pair) rendered end to end."""

from __future__ import annotations

import copy
import functools
import json
import re
from html import escape
from html.parser import HTMLParser

import pytest

from perfreport.report import FILENAMES, build_report, write_reports
from perfreport.report.html import render_html
from perfreport.report.templates import format_value

from .test_findings import demo_document
from .test_report_build import comparison_document, real_document


class Page(HTMLParser):
    """Every start tag with its attributes, and the text of each element kind."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.stack: list[str] = []
        self.text: dict[str, list[str]] = {}

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag not in ("meta", "br", "img", "link", "input", "path", "use", "rect", "circle", "line", "polyline"):
            self.stack.append(tag)

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop() != tag:
            pass

    def handle_data(self, data):
        if self.stack:
            self.text.setdefault(self.stack[-1], []).append(data)


@functools.lru_cache(maxsize=None)
def real_page(paged: bool = False) -> str:
    """The single-run page of the real two-rank trace (rendered once: matplotlib is slow)."""
    return render_html(build_report(real_document()), paged=paged)


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    return page


def with_findings(doc: dict) -> dict:
    """The comparison document with its first checks failing, warning, inconclusive."""
    doc = copy.deepcopy(doc)
    for check, status in zip(doc["checks"], ("pass", "fail", "warn", "inconclusive")):
        check["status"] = status
    doc["status"] = "fail"
    return doc


def assert_self_contained(page: Page, html: str) -> None:
    tags = [t for t, _ in page.tags]
    assert "script" not in tags and "iframe" not in tags and "object" not in tags and "embed" not in tags
    for tag, attrs in page.tags:
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            if name in ("src", "href", "xlink:href", "action", "poster", "data"):
                local = (value or "").startswith("#") or (tag, value) == ("link", "data:,")  # no favicon fetch
                assert local, (tag, name, value)
    csp = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0] and "script-src" not in csp[0]
    assert "@import" not in html and "url(http" not in html and "@font-face" not in html
    ids = [a["id"] for _, a in page.tags if "id" in a]
    assert len(ids) == len(set(ids)), "duplicate ids (inline SVGs must be prefixed)"


def test_single_run_page_is_self_contained_with_every_section() -> None:
    report = build_report(real_document())
    html = real_page()
    page = parse(html)
    assert_self_contained(page, html)
    section_ids = {a["id"] for t, a in page.tags if t == "section" and "id" in a}
    assert {f"sec-{s.id}" for s in report.sections} <= section_ids
    assert escape(report.headline.text) in html and "Where the time goes" in html
    # every figure is an inline SVG with a title and axis labels that name a unit
    figures = [*report.overview, *(f for s in report.sections for f in s.figures)]
    svgs = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)
    assert len(svgs) == len(figures) > 5
    for svg, fig in zip(svgs, figures):
        assert f"<title>{fig.title}" in svg.replace("&amp;", "&") or "<title>" in svg
        texts = re.findall(r">([^<>]*\([^<>]*\))<", svg)
        assert any(re.search(r"\((%|ms|µs|s|GB/s|GB|MB|kB|B|ops)\)", t) for t in texts), fig.id


def test_numbers_shown_are_formatted_document_values() -> None:
    doc = real_document()
    html = real_page()
    for row in doc["step_times"]:
        assert f">{format_value(row['wall_us_mean'], 'us')}<" in html
    for row in doc["temporal_breakdown"]:
        assert f">{format_value(row['idle_pct'], 'pct')}<" in html


def test_long_tables_fold_and_paged_version_unfolds() -> None:
    report = build_report(real_document())
    html = real_page()
    folded = [t for s in report.sections for t in s.tables if t.collapsed]
    assert folded and html.count("<details>") == len(folded)
    for t in folded:
        assert re.search(rf"<details><summary>{re.escape(t.title)} ", html)
    paged = real_page(paged=True)
    assert "<details>" not in paged and 'class="paged"' in paged


def test_first_screen_is_verdict_headline_causes_and_plots() -> None:
    doc = with_findings(comparison_document())
    report = build_report(doc)
    html = render_html(report)
    page = parse(html)
    assert_self_contained(page, html)
    banner = html[html.index('id="verdict"'):html.index("</section>")]
    assert 'class="banner status-fail"' in html and ">FAIL<" in banner
    failed = next(g for g in report.findings if g.status == "fail")
    assert report.headline.text == failed.summary  # the step time passes here: the failing finding leads
    assert escape(failed.summary) in banner and escape(report.headline.counts) in banner
    assert banner.count("<li>") == len(report.headline.causes)
    # the plots come right after the banner, before the contents and the tables
    overview = html[html.index('id="overview-figures"'):html.index('<nav class="toc"')]
    assert 'id="fig-attribution_waterfall"' in overview
    steps = {side: len({r["step"] for r in doc[side]["analyses"]["step_metrics"]}) for side in ("baseline", "candidate")}
    # the step-time plot only where a run has two steps or more (here: {steps})
    assert ('id="fig-step_time_judged"' in overview) == (max(steps.values()) >= 2)
    assert html.index('id="overview-figures"') < html.index('id="tbl-findings"')
    findings = html[html.index('id="tbl-findings"'):]
    statuses = re.findall(r'<td><span class="pill status-(\w+)">', findings[:findings.index("</table>")])
    assert statuses == ["fail", "warn", "inconclusive"]


def test_demo_comparison_end_to_end(tmp_path) -> None:
    doc = copy.deepcopy(demo_document())  # the shared pair's comparison, made once a session
    report = build_report(doc)
    paths = write_reports(report, tmp_path, "html,md,json,junit")
    assert [p.name for p in paths] == [FILENAMES[f] for f in ("html", "md", "json", "junit")]
    html = (tmp_path / "report.html").read_text()
    assert_self_contained(parse(html), html)
    assert report.status == "fail" and 'class="banner status-fail"' in html
    assert len(html) < 2_000_000
    step = next(c for c in doc["checks"] if c["id"] == "relative.step_time")
    assert step["status"] == "fail" and format_value(step["candidate_value"], "us") in html
    assert json.loads((tmp_path / "report.json").read_text())["status"] == "fail"
    # the headline is the step-time check; the first cause is the DataLoader wait, on the first screen
    assert report.headline.text.startswith("step time +39.4 % (126.55 → 176.47 ms/step")
    assert report.headline.causes[0].text == "GPU idle while the CPU runs _SingleProcessDataLoaderIter.__next__ (new)"
    assert abs(report.headline.causes[0].delta_us - 61346.4) < 1.0
    assert html.index("Top causes") < html.index('id="fig-step_time_judged"') < html.index('<nav class="toc"')
    assert len((tmp_path / "report.md").read_text()) <= 60_000


def test_unknown_format_is_refused(tmp_path) -> None:
    from perfreport.errors import ConfigError

    with pytest.raises(ConfigError, match="choose from html, pdf, md, json, junit"):
        write_reports(build_report({}), tmp_path, "html,docx")
    assert not list(tmp_path.iterdir())
