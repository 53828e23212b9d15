"""Reports: a JSON-ready document -> :class:`Report` -> HTML, PDF, Markdown, JSON, JUnit files.

``build_report(document)`` takes the summary document of one run
(:func:`perfreport.pipeline.summary_document`) or a comparison document
(:mod:`perfreport.report.json_report`); ``write_reports(report, out_dir, formats)`` writes one
file per format, atomically. The report is built from the document only, so every number in
any format is a number of ``report.json``.

    FORMATS            every format, in the order files are written
    available_formats  the ones that work here (pdf needs WeasyPrint)
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from ..storing.atomic import atomic_files
from ..documents.jsondoc import JsonChunks, json_text
from ..errors import ConfigError
from .model import Report

FORMATS = ("html", "pdf", "md", "json", "junit")
INTEROP_FORMATS = ("benchmark-json", "bmf")
"""Exports for other dashboards (:mod:`.interop`): written when asked for, never by default."""
FILENAMES = {"html": "report.html", "pdf": "report.pdf", "md": "report.md", "json": "report.json",
             "junit": "report.junit.xml", "benchmark-json": "benchmark.json", "bmf": "bmf.json"}


def build_report(document: dict) -> Report:
    """The report of a summary or comparison document (:func:`perfreport.report.build.build_report`,
    imported when first needed: it brings pandas, and a command imports this package first to
    check its ``--format`` and start the PDF renderer)."""
    from .build import build_report as build

    return build(document)


def available_formats() -> tuple[str, ...]:
    """The formats that can be written here: all but pdf when WeasyPrint is not installed (it
    is not imported here: that costs half a second; a WeasyPrint that cannot load shows when
    the PDF is rendered)."""
    from .pdf import installed

    return tuple(f for f in FORMATS if f != "pdf" or installed())


def parse_formats(text: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"html,pdf,md"`` (or a list) -> validated formats in :data:`FORMATS` order; None or
    ``"all"`` -> :func:`available_formats`. Raises ConfigError naming the allowed values."""
    if text is None:
        return available_formats()
    items = [t.strip().lower() for t in (text.split(",") if isinstance(text, str) else text) if t.strip()]
    if items == ["all"]:
        return available_formats()
    known = FORMATS + INTEROP_FORMATS
    unknown = [t for t in items if t not in known]
    if unknown or not items:
        raise ConfigError(f"unknown report format {', '.join(unknown) or '(none)'}: choose from "
                          f"{', '.join(known)} (comma-separated) or all")
    return tuple(f for f in known if f in items)


def render(report: Report, fmt: str, *, pdf_appendix: bool = False) -> str | bytes | JsonChunks:
    """One format of the report: text for html/md/junit/benchmark-json/bmf, bytes for pdf (a
    brief unless ``pdf_appendix``), for json the document's chunks (``b"".join`` them for the
    bytes)."""
    if fmt == "html":
        from .html import render_html

        return render_html(report)
    if fmt == "pdf":
        from .pdf import render_pdf

        return render_pdf(report, appendix=pdf_appendix)
    if fmt == "md":
        from .markdown import render_markdown

        return render_markdown(report)
    if fmt == "json":
        return JsonChunks(report.document)  # encoded as it is written
    if fmt == "junit":
        from .junit import render_junit

        return render_junit(report)
    if fmt in INTEROP_FORMATS:
        from .interop import benchmark_json, bmf

        if report.kind != "compare":
            raise ConfigError(f"--format {fmt} exports a comparison's checks: use it with perfreport compare")
        return json_text(benchmark_json(report.document) if fmt == "benchmark-json" else bmf(report.document))
    raise ConfigError(f"unknown report format {fmt!r}: choose from {', '.join(FORMATS)}")


def write_reports(report: Report, out_dir: str | Path, formats: Iterable[str] | str | None = None,
                  extra: dict[str, str | bytes] | None = None, *, pdf_appendix: bool = False) -> list[Path]:
    """Write ``out_dir/report.<ext>`` for each format (default: every available one) and the
    ``extra`` files ({name: content}) as one set: everything is rendered first, then written
    with :func:`perfreport.storing.atomic.atomic_files` (a run killed meanwhile leaves the previous set).
    The PDF is a brief unless ``pdf_appendix``. Returns the paths written: the extra files, then
    the reports in :data:`FORMATS` order."""
    files = dict(extra or {})
    files.update({FILENAMES[fmt]: render(report, fmt, pdf_appendix=pdf_appendix) for fmt in parse_formats(formats)})
    return atomic_files(Path(out_dir), files)


__all__ = ["FORMATS", "FILENAMES", "INTEROP_FORMATS", "Report", "available_formats", "build_report", "parse_formats", "render",
           "write_reports"]
