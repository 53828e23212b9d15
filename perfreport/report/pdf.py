"""Report -> PDF through WeasyPrint: the HTML page laid out for A4 paper.

The same template as the HTML, rendered ``paged`` and, by default, as a brief (the sections a
reader needs first; ``appendix=True`` adds every analysis): long tables unfolded, table headers repeated
on every page, rows never split across pages, figures kept whole and vector (inline SVG), and a
running header with the title, the verdict and the date (CSS ``string-set`` from the page's own
heading, so no text is pasted into CSS). WeasyPrint is an optional import: without it
:func:`available` is False and the ``pdf`` format is left out of the defaults.

WeasyPrint is given a URL fetcher that reads ``data:`` URLs (the page's figures) and refuses
everything else: the page references nothing external, and a hostile name cannot make it read a
local file or the network.
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


def _fetch(url: str, *args, **kwargs):
    """WeasyPrint's URL fetcher: the page's own figures (``data:`` URLs, which carry their
    content: :func:`perfreport.report.html.figure_image`) and nothing else."""
    if not url.startswith("data:"):
        raise ValueError(f"perfreport reports fetch nothing (refused {url[:80]!r})")
    import weasyprint

    if hasattr(weasyprint, "default_url_fetcher"):  # WeasyPrint before 70: a function returning a dict
        return weasyprint.default_url_fetcher(url, *args, **kwargs)
    from weasyprint.urls import URLFetcher

    return URLFetcher(allowed_protocols=("data",)).fetch(url)


_fetch._fail_on_errors = False  # type: ignore[attr-defined]
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
    """The weasyprint module; PdfUnavailable naming the cause when it is missing or cannot load.

    First without the linker's search (:func:`no_linker_search`); where that import fails, once
    more with it, so a library only that search finds still loads."""
    try:
        with quiet_libraries():  # the import parses WeasyPrint's own stylesheets, and logs that
            try:
                with no_linker_search():
                    import weasyprint
            except OSError:  # a library not found by its names alone: search as WeasyPrint would
                import weasyprint
    except Exception as exc:  # ImportError, or OSError when the Pango library is missing
        raise PdfUnavailable(f"PDF output needs WeasyPrint with Pango (pip install weasyprint): {exc}") from None
    return weasyprint


@contextmanager
def no_linker_search() -> Iterator[None]:
    """On Linux, ``ctypes.util.find_library`` answering None inside the block.

    WeasyPrint opens each C library (GObject, Pango, HarfBuzz, its optional subsetter...) by
    trying its Windows, macOS and Linux names in turn, and cffi hands every name that does not
    open as it is to ``find_library``, which runs ``ldconfig`` and then ``gcc`` (with its
    ``collect2`` and ``ld``): 26 lookups here, an ``ldconfig`` each and those three for 21 of
    them. On the 2-core VM (2026-11-28, 3 runs each) the import took 0.59-0.68 s with them,
    their CPU 0.23-0.28 s, beside every PDF's layout; 0.39-0.45 s without (0.06 s of CPU in
    child processes: pyenv's shim). Every library's names include its Linux soname, which opens
    as it is through the loader's own search (``LD_LIBRARY_PATH``, the ``ldconfig`` cache),
    where ``find_library``'s answer (a soname too) would be looked up."""
    import sys

    if not sys.platform.startswith("linux"):
        yield
        return
    import ctypes.util
    import io
    from contextlib import redirect_stdout

    search = ctypes.util.find_library
    ctypes.util.find_library = lambda name: None
    try:  # (WeasyPrint prints its troubleshooting text before it raises: not for a retried import)
        with redirect_stdout(io.StringIO()):
            yield
    finally:
        ctypes.util.find_library = search


def layout_pdf(html: str) -> bytes:
    """The page from :func:`paged_html` laid out as PDF bytes by WeasyPrint (seconds of pure
    Python: :mod:`perfreport.report.outputs` runs it beside the other formats)."""
    weasyprint = import_weasyprint()
    with quiet_libraries(), lean_font_subsets():
        return weasyprint.HTML(string=html, url_fetcher=_fetch).write_pdf()


@contextmanager
def lean_font_subsets() -> Iterator[None]:
    """fontTools' subsetter, as WeasyPrint uses it to embed the fonts' used glyphs (where
    HarfBuzz's subsetter is not installed), without decoding the layout tables it drops.

    WeasyPrint has it drop GSUB and GPOS, but fontTools (4.6x) first decodes them whole (to
    convert their formats for the glyph closure), then drops them: a tenth of the layout of
    a report's PDF, for DejaVu Sans and its bold. Inside this block the subsetter removes the
    tables it is told to drop before anything else, as its own first step would (with the
    ``kern`` table where GPOS is there, as that step does): the same font bytes."""
    try:
        from fontTools import subset
    except ImportError:  # WeasyPrint subsets with HarfBuzz alone
        yield
        return
    original = subset.Subsetter.subset

    def lean_subset(self, font):
        drop = [tag for tag in ("GSUB", "GPOS") if tag in self.options.drop_tables and tag in font]
        if "GPOS" in drop and "kern" in font and not self.options.legacy_kern:
            drop.append("kern")
        for tag in drop:
            del font[tag]
        return original(self, font)

    subset.Subsetter.subset = lean_subset
    try:
        yield
    finally:
        subset.Subsetter.subset = original


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
