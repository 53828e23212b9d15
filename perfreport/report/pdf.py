"""Report -> PDF through WeasyPrint: the HTML page laid out for A4 paper.

The same template as the HTML, rendered ``paged`` and, by default, as a brief (the sections a
reader needs first; ``appendix=True`` adds every analysis): long tables unfolded, table headers repeated
on every page, rows never split across pages, figures kept whole and vector (inline SVG), and a
running header with the title, the verdict and the date (CSS ``string-set`` from the page's own
heading, so no text is pasted into CSS). WeasyPrint is an optional import: without it
:func:`available` is False and the ``pdf`` format is left out of the defaults.

WeasyPrint is given a URL fetcher that refuses everything: the page references nothing
external, and a hostile name cannot make it read a local file or the network.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import PerfreportError
from .model import Report

log = logging.getLogger(__name__)


def installed() -> bool:
    """Whether WeasyPrint is installed, without importing it (half a second): what the default
    formats go by. Whether it also loads (it needs Pango) shows when a PDF is laid out."""
    import importlib.util

    return importlib.util.find_spec("weasyprint") is not None


def available() -> bool:
    """Whether WeasyPrint imports (it needs Pango; a minimal container may lack it)."""
    try:
        import_weasyprint()
    except PdfUnavailable:
        return False
    return True


def _refuse(url: str, *args, **kwargs):
    raise ValueError(f"perfreport reports fetch nothing (refused {url[:80]!r})")


_refuse._fail_on_errors = False  # type: ignore[attr-defined]
"""WeasyPrint (70+) reads this of its URL fetcher when a fetch raises: False makes a refused
fetch a warning it catches (the resource left out), not an AttributeError that loses the PDF."""


class PdfUnavailable(PerfreportError):
    """WeasyPrint is not installed or does not load (no Pango)."""


def render_pdf(report: Report, *, appendix: bool = False, svgs: dict[str, str] | None = None) -> bytes:
    """The report as PDF bytes: a brief (verdict, headline, figures, findings, where the time
    went, the step) unless ``appendix``, which adds every analysis section. Raises
    PdfUnavailable when WeasyPrint is not installed."""
    return layout_pdf(paged_html(report, appendix=appendix, svgs=svgs))


def paged_html(report: Report, *, appendix: bool = False, svgs: dict[str, str] | None = None) -> str:
    """The page the PDF is laid out from (see :func:`render_pdf`); ``svgs`` as in
    :func:`perfreport.report.html.context`."""
    from .html import render_html

    return render_html(report, paged=True, brief=not appendix, svgs=svgs)


def import_weasyprint():
    """The weasyprint module; PdfUnavailable naming the cause when it is missing or cannot load."""
    try:
        with quiet_libraries():  # the import parses WeasyPrint's own stylesheets, and logs that
            import weasyprint
    except Exception as exc:  # ImportError, or OSError when the Pango library is missing
        raise PdfUnavailable(f"PDF output needs WeasyPrint with Pango (pip install weasyprint): {exc}") from None
    return weasyprint


def layout_pdf(html: str) -> bytes:
    """The page from :func:`paged_html` laid out as PDF bytes by WeasyPrint (seconds of pure
    Python: :mod:`perfreport.report.outputs` runs it beside the other formats)."""
    weasyprint = import_weasyprint()
    with quiet_libraries():
        return weasyprint.HTML(string=html, url_fetcher=_refuse).write_pdf()


@contextmanager
def quiet_libraries() -> Iterator[None]:
    """The PDF libraries' log records dropped inside the block (see :data:`LIBRARY_LOGGERS`)."""
    quiet = [logging.getLogger(name) for name in LIBRARY_LOGGERS]
    for logger in quiet:
        logger.addFilter(_library_record)
    try:
        yield
    finally:
        for logger in quiet:
            logger.removeFilter(_library_record)


LIBRARY_LOGGERS = ("weasyprint", "weasyprint.progress", "fontTools", "fontTools.subset", "fontTools.ttLib")
"""Loggers of the PDF libraries. Their lines are about the page perfreport made (a CSS property
skipped, a font subset), not about the user's traces: never on a user's stderr, which holds
perfreport's own lines only. ``-vv`` (debug) shows them."""


def _library_record(record: logging.LogRecord) -> bool:
    """Log filter: a PDF library's record passes only when perfreport runs with ``-vv``."""
    return logging.getLogger().isEnabledFor(logging.DEBUG)
