"""Kernel and op names are arbitrary strings from a trace. Real traces with every kernel and op
renamed to hostile strings (markup, pipes, mentions, backticks, template syntax, control
characters, 5,000-character template names) must give reports in which nothing runs, no table
breaks, nobody is mentioned and the XML parses."""

from __future__ import annotations

import functools
import gzip
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from perfreport.documents.jsondoc import json_text
from perfreport.pipeline import analyze, compare, report_document, summary_document
from perfreport.report import build_report
from perfreport.report.html import render_html
from perfreport.report.junit import render_junit
from perfreport.report.markdown import MAX_CHARS, render_markdown
from perfreport.report.pdf import available as pdf_available
from perfreport.report.pdf import render_pdf

from .conftest import TRACES
from .test_report_html import assert_self_contained, parse
from .test_report_markdown import assert_tables_well_formed

LONG_TEMPLATE = "void kernel<" + ", ".join(f"cutlass::gemm::GemmShape<{i}, 128, 32>" for i in range(140)) + ">"
HOSTILE = (
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(2)>",
    "a|b||c | d",
    "@user please review",
    "`rm -rf /` ``` x",
    LONG_TEMPLATE,
    "javascript:alert(3)",
    "]]><!-- --> &amp; &lt;b&gt;",
    "[click](https://evil.example) ![img](https://evil.example/x.png)",
    "$x^2$ #123 **bold** _it_ ~strike~",
    "line1\nline2\r\tend",
    "\x00\x01ctrl\x07\x1b[31m",
    "{{ 7*7 }} {% raw %} ${7*7}",
    "</details><details open><summary>x",
    "<!-- perfreport:report -->",
    "\\|\\`",
)
RENAMED_CATEGORIES = {"kernel", "Kernel", "cpu_op", "Operator", "gpu_memset"}
assert len(LONG_TEMPLATE) > 5000


def hostile_name(i: int) -> str:
    return f"{HOSTILE[i % len(HOSTILE)]} #{i}"


def rename(src: Path, dst: Path, mapping: dict[str, str]) -> Path:
    """Copy the trace folder ``src`` to ``dst`` with kernel, op and memset names replaced
    (``mapping`` shared across calls, so both sides of a pair rename alike)."""
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        data = f.read_bytes()
        doc = json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
        for e in doc["traceEvents"]:
            if e.get("cat") in RENAMED_CATEGORIES and not str(e.get("name", "")).startswith("ProfilerStep"):
                e["name"] = mapping.setdefault(e["name"], hostile_name(len(mapping)))
        (dst / f.name.replace(".gz", "")).write_text(json.dumps(doc))
    return dst


@functools.lru_cache(maxsize=None)
def hostile_documents(root: str) -> tuple[str, str]:
    """(single-run document of a real H100 trace, comparison document of a real pair), renamed."""
    root_path = Path(root)
    single = rename(TRACES / "pair_tracelens_h100_vs_mi300x_bert_small" / "h100", root_path / "single", {})
    mapping: dict[str, str] = {}
    pair = TRACES / "pair_hta_trace_compare_tiny"
    base = rename(pair / "base", root_path / "base", mapping)
    test = rename(pair / "test", root_path / "test", mapping)
    single_doc = summary_document(analyze(single, workers=1))
    return json_text(single_doc), json_text(report_document(compare(base, test, workers=1)))


@pytest.fixture(scope="module")
def docs(tmp_path_factory) -> tuple[dict, dict]:
    single, comparison = hostile_documents(str(tmp_path_factory.mktemp("hostile")))
    single, comparison = json.loads(single), json.loads(comparison)
    # make the comparison fail on a check named after a hostile kernel, so every format shows it
    comparison["status"] = "fail"
    comparison["checks"][0].update(status="fail", id=f"relative.kernel_time[{hostile_name(0)}]", subject=hostile_name(0),
                                   title=f"kernel time [{hostile_name(0)}]",
                                   message=f"{hostile_name(5)} got slower; {hostile_name(3)}")
    return single, comparison


def test_the_hostile_names_reach_the_documents(docs) -> None:
    single, comparison = docs
    names = {r["name"] for r in single["kernel_rank_distribution"]}
    assert any(n.startswith("<script>") for n in names) and any(len(n) > 5000 for n in names)
    assert any(n.startswith(("a|b", "@user", "`rm")) for n in {r["name"] for r in single["kernel_metrics"]})
    assert any("\x00" in n or "ctrl" in n for n in {r["key"] for r in single["op_profile"]})
    keys = {r["key"] for r in comparison["explanation"]["contributions"]}
    assert any(k.startswith("<img") for k in keys) and any(k.startswith("`rm") for k in keys)


@pytest.mark.parametrize("which", [0, 1])
def test_html_runs_nothing_and_shows_the_names_as_text(docs, which) -> None:
    doc = docs[which]
    html = render_html(build_report(doc))
    page = parse(html)
    assert_self_contained(page, html)  # no script/iframe tags, no on* attributes, no URLs, CSP
    assert "<script>alert" not in html and "<img src=x" not in html and "<details open>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "{{ 7*7 }}" in html or which == 1  # template syntax in a name is text, not evaluated
    assert "\x00" not in html and "\x1b" not in html


def test_html_in_a_real_browser_has_no_script(docs, tmp_path) -> None:
    chrome = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not chrome:
        pytest.skip("no Chromium to open the page in")
    path = tmp_path / "report.html"
    path.write_text(render_html(build_report(docs[0])))
    out = subprocess.run(
        [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", path.as_uri()],
        capture_output=True, text=True, timeout=120)
    dom = out.stdout
    assert "<title>perfreport analysis" in dom
    assert not re.search(r"<script\b", dom) and not re.search(r"<img\b", dom)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom


@pytest.mark.parametrize("which", [0, 1])
def test_markdown_breaks_no_table_and_mentions_nobody(docs, which) -> None:
    md = render_markdown(build_report(docs[which]))
    assert len(md) <= MAX_CHARS
    assert_tables_well_formed(md)
    assert not re.search(r"@(?!\u200b)", md), "an @mention survived"
    assert not re.search(r"#(?!\u200b)\d", md), "an issue reference survived"
    assert not re.search(r"(?<!\\)`", md), "an unescaped backtick survived"
    assert not re.search(r"(?<!\\)\$", md), "unescaped math survived"
    assert "<script" not in md and "<img" not in md and "<details open>" not in md
    assert md.count("<details>") == md.count("</details>") and md.count("<summary>") == md.count("</summary>")
    assert "<!-- perfreport:report -->" not in md  # no marker of ours; a name that spells one is escaped
    assert not re.search(r"(?<!\\)\]\(https://evil", md), "a link survived"
    assert max(len(line) for line in md.splitlines()) < 3_000  # 5,000-character names shortened
    assert "\x00" not in md and "\r" not in md


def test_junit_is_valid_xml_with_the_names(docs) -> None:
    text = render_junit(build_report(docs[1]))
    root = ET.fromstring(text)
    cases = root.find("testsuite").findall("testcase")
    assert cases[0].get("name") == f"relative.kernel_time[{hostile_name(0)}]"
    failure = cases[0].find("failure")
    assert failure is not None and failure.get("message").startswith(LONG_TEMPLATE[:100])
    assert "<script>" not in text


@pytest.mark.skipif(not pdf_available(), reason="WeasyPrint (with Pango) is not installed")
def test_pdf_renders_with_hostile_names(docs) -> None:
    pdf = render_pdf(build_report(docs[1]))
    assert pdf.startswith(b"%PDF-") and b"/Subtype /Image" not in pdf


def _assert_safe_markdown(md: str) -> None:
    assert_tables_well_formed(md)
    assert not re.search(r"@(?!\u200b)", md), "an @mention survived"
    assert "<script" not in md and "<img" not in md and "<details open>" not in md
    assert md.count("<details>") == md.count("</details>")
    assert not re.search(r"(?<!\\)\]\(https://evil", md), "a link survived"
    assert "\x00" not in md and "\r" not in md


def test_pr_comment_and_job_summary_from_a_hostile_trace(docs) -> None:
    from perfreport.github.comment import comment_body, utf16_len
    from perfreport.github.workflow import summary_markdown

    run = "https://github.com/o/r/actions/runs/7"
    body = comment_body(docs[1], "gpu", artifact_url=f"{run}/artifacts/1", run_url=run)
    assert body.startswith("<!-- perfreport:gpu -->\n") and body.count("<!-- perfreport:") == 1
    assert utf16_len(body) <= 65_536 and "FAIL" in body.split("\n")[1]
    _assert_safe_markdown(body.split("\n", 1)[1])
    summary = summary_markdown(docs[1], artifact_url=f"{run}/artifacts/1")
    _assert_safe_markdown(summary)
    assert "<!-- perfreport:" not in summary


def test_annotations_from_a_hostile_trace_are_one_command_each(docs) -> None:
    from perfreport.github.workflow import annotation_lines

    lines = annotation_lines(docs[1])
    assert lines and lines[0].startswith("::error title=perfreport FAIL%3A ") and "alert(1)" in lines[0]
    for line in lines:
        assert "\n" not in line and "\r" not in line and "\x00" not in line and "\x1b" not in line
        command, title, message = re.fullmatch(r"::(error|warning) title=([^:]*)::(.*)", line).groups()
        assert "," not in title and "%0A" not in message.replace("%250A", "")


def test_the_pdf_layout_fetches_nothing_and_a_refused_fetch_does_not_lose_the_pdf() -> None:
    """A page that names outside resources (an image over HTTP, a local file in CSS) is still
    laid out: each fetch is refused by perfreport's fetcher, none is made (a server on
    127.0.0.1 that counts requests sees none), and the refusal is WeasyPrint's warning, not an
    error that loses the report."""
    if not pdf_available():
        pytest.skip("WeasyPrint does not load here")
    import http.server
    import threading

    from perfreport.report.pdf import layout_pdf

    hits = []

    class Count(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            hits.append(self.path)
            self.send_error(404)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Count)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        port = server.server_address[1]
        pdf = layout_pdf(f'<html><body><p>report</p><img src="http://127.0.0.1:{port}/x.png">'
                         f'<div style="background: url(file:///etc/hostname)">y</div></body></html>')
    finally:
        server.shutdown()
        server.server_close()
    assert pdf.startswith(b"%PDF-") and hits == []
