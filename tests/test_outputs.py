"""The report files of a command: the PDF laid out in a forked child beside the other formats
(perfreport.report.outputs), its failures one clear line, and the child never left behind."""

from __future__ import annotations

import base64
import multiprocessing
import os
import re

import pytest

from perfreport.report import outputs
from perfreport.errors import PerfreportError
from perfreport.report import build_report
from perfreport.report import pdf as pdf_module

from .conftest import TRACES



@pytest.fixture(scope="module")
def report():
    from perfreport.pipeline import analyze, summary_document

    return build_report(summary_document(analyze(TRACES / "hta_sampled_2of128rank", workers=1)))


@pytest.fixture
def started(monkeypatch):
    """The pids of the renderers started during a test."""
    pids = []
    real = outputs.PdfRenderer.start.__func__

    def start(cls):
        renderer = real(cls)
        pids.append(renderer.pid)
        return renderer

    monkeypatch.setattr(outputs.PdfRenderer, "start", classmethod(start))
    return pids


def _reaped(pids: list[int]) -> bool:
    """Every one of ``pids`` has exited and been waited for (none left as a zombie)."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        return False
    return bool(pids)


def test_the_pdf_is_laid_out_in_a_child_from_the_page_the_parent_drew(report, tmp_path, monkeypatch, started):
    parent = os.getpid()
    pages = []

    def layout(html):  # runs in the child: its pid differs, and what it returns crosses the pipe
        assert os.getpid() != parent
        return b"%PDF-1.7 laid out in the child from " + str(len(html)).encode() + b" characters"

    real_paged = pdf_module.paged_html
    monkeypatch.setattr(pdf_module, "layout_pdf", layout)
    monkeypatch.setattr(pdf_module, "paged_html", lambda *a, **k: pages.append(real_paged(*a, **k)) or pages[-1])
    paths = outputs.write_reports(report, tmp_path / "ok", ("md", "pdf", "json", "html"))
    assert [p.name for p in paths] == ["report.html", "report.pdf", "report.md", "report.json"]
    assert len(pages) == 1 and 'class="paged"' in pages[0]
    assert (tmp_path / "ok" / "report.pdf").read_bytes() == \
        b"%PDF-1.7 laid out in the child from " + str(len(pages[0])).encode() + b" characters"
    # the figures were drawn once: the page and the PDF's page (an image of it) hold the same SVG text
    html = (tmp_path / "ok" / "report.html").read_text()
    first_svg = base64.b64decode(re.search(r'<img class="plot" alt="[^"]*" src="data:image/svg\+xml;base64,([^"]+)"',
                                           pages[0])[1]).decode()
    assert first_svg.startswith("<svg") and first_svg in html
    assert _reaped(started)


def test_a_failing_pdf_is_one_clear_error_and_the_other_files_are_written(report, tmp_path, monkeypatch, started):
    def broken(html):
        raise RuntimeError("no fonts")

    monkeypatch.setattr(pdf_module, "layout_pdf", broken)
    with pytest.raises(PerfreportError, match=r"report\.pdf: cannot write the PDF report \(RuntimeError: no fonts"):
        outputs.write_reports(report, tmp_path / "bad", ("md", "pdf"))
    assert (tmp_path / "bad" / "report.md").is_file() and not (tmp_path / "bad" / "report.pdf").exists()
    assert _reaped(started)


def test_a_weasyprint_that_cannot_load_drops_a_default_pdf_with_a_note_and_fails_an_asked_one(
        report, tmp_path, monkeypatch, capsys, started):
    def missing():
        raise pdf_module.PdfUnavailable("PDF output needs WeasyPrint with Pango (pip install weasyprint): "
                                        "cannot load library 'pango-1.0-0'")

    monkeypatch.setattr(pdf_module, "import_weasyprint", missing)
    paths = outputs.write_reports(report, tmp_path / "default", ("md", "pdf"), pdf_optional=True)
    assert [p.name for p in paths] == ["report.md"]
    assert capsys.readouterr().err.strip() == ("perfreport: note: no PDF report (PDF output needs WeasyPrint with "
                                               "Pango (pip install weasyprint): cannot load library 'pango-1.0-0')")
    with pytest.raises(pdf_module.PdfUnavailable, match="pango-1.0-0"):
        outputs.write_reports(report, tmp_path / "asked", ("md", "pdf"))
    assert not (tmp_path / "asked").exists()
    assert _reaped(started)


def test_a_renderer_started_early_survives_forked_workers_and_stops_when_unused(report, tmp_path, monkeypatch, started):
    monkeypatch.setattr(pdf_module, "layout_pdf", lambda html: b"%PDF-1.7 " + html[:15].encode())
    ctx = multiprocessing.get_context("fork")
    with outputs.pdf_renderer(("pdf",)) as renderer:
        worker = ctx.Process(target=__import__("time").sleep, args=(30,))
        worker.start()  # holds copies of the renderer's pipes, as the executor's workers do
        try:
            outputs.write_reports(report, tmp_path / "early", ("pdf",), renderer=renderer)
        finally:
            worker.kill()
            worker.join()
    assert (tmp_path / "early" / "report.pdf").read_bytes() == b"%PDF-1.7 <!DOCTYPE html>"
    with outputs.pdf_renderer(("pdf", "md")) as unused:  # a command that failed before its reports
        assert unused is not None and unused.pid > 0
    assert _reaped(started)
    with outputs.pdf_renderer(("md", "json")) as none:
        assert none is None


@pytest.mark.skipif(not pdf_module.available(), reason="WeasyPrint (with Pango) is not installed")
def test_the_pdf_tables_have_fixed_widths_that_fit_the_page(report):
    from perfreport.report.templates import PAGE_WIDTH_MM, column_widths_mm

    page = pdf_module.paged_html(report, appendix=True)
    assert page.count('class="fixed"') == sum(len(s.tables) for s in report.sections)
    for section in report.sections:
        for table in section.tables:
            widths = column_widths_mm(table)
            assert len(widths) == len(table.columns) and min(widths) > 0
            assert sum(widths) <= PAGE_WIDTH_MM + 0.5, (table.id, widths)
    assert pdf_module.layout_pdf(page).startswith(b"%PDF-")
