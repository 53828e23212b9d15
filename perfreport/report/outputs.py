"""Writing the report files of one command, the slow parts (figures, the PDF) off the critical path.

WeasyPrint lays the PDF out in pure Python: a second or two, where every other format takes
milliseconds once the figures are drawn, and importing it takes a third of a second more. So a
command that writes a PDF forks a :class:`PdfRenderer` as soon as it starts: the child imports
WeasyPrint (in a thread of lower priority, so the ranks' loading keeps the cores) while the
parent loads the traces, then waits. Drawing the figures (matplotlib) is most of the rest:
``compare`` starts a child drawing the analysis sections' figures as soon as both sides are
analysed, beside the gate (:func:`early_figures`), and once the report is built the remaining
figures are drawn by the parent and forked children together (:mod:`perfreport.report.drawing`), the
PDF's first, so its page goes to the renderer while the HTML page's figures are still being
drawn (by children at a lower priority: the PDF's layout is what the command waits for
last). Then every file is written as one set, as :func:`perfreport.report.write_reports` does.
The renderers are :mod:`perfreport.report`'s, unchanged; this module only decides when and
where they run. Without ``fork`` (Windows) everything is rendered here, in order.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..running.forked import read_exactly, write_all, fork
from ..storing.atomic import atomic_files, temp_name
from ..errors import PerfreportError
from ..documents.jsondoc import JsonChunks
from . import FILENAMES, parse_formats, render
from .model import Report
from ..timing import phase, reaped, record

if TYPE_CHECKING:
    from .drawing import EarlyFigures, FigureDrawing


class PdfRenderer:
    """A forked child that lays out one PDF: it imports WeasyPrint at once, then waits for the
    page (:meth:`send`) and sends back the PDF (:meth:`result`). Closing it without sending
    lets the child exit. Use :meth:`start`; None where the platform cannot fork."""

    def __init__(self, pid: int, to_child: int, from_child: int) -> None:
        self.pid, self._to_child, self._from_child = pid, to_child, from_child

    @classmethod
    def start(cls) -> PdfRenderer | None:
        if not hasattr(os, "fork"):
            return None
        sys.stdout.flush()
        sys.stderr.flush()
        down_r, down_w = os.pipe()
        up_r, up_w = os.pipe()
        parent = os.getpid()
        pid = fork()
        if pid == 0:  # the child: never returns
            from ..running.lifecycle import worker_init

            worker_init(parent)  # dies with the parent, whatever kills it
            os.close(down_w)
            os.close(up_r)
            _child(down_r, up_w)
        os.close(down_r)
        os.close(up_w)
        return cls(pid, down_w, up_r)

    def send(self, html: str) -> None:
        """Give the child the page to lay out (then :meth:`result`)."""
        self._send(html.encode("utf-8", "surrogatepass"))

    def _send(self, page: bytes) -> None:
        """The page's length (8 bytes), then the page. Worker processes forked later hold
        copies of this pipe, so the child never waits for its end: an empty page means stop."""
        fd, self._to_child = self._to_child, -1
        if fd < 0:
            return
        try:
            write_all(fd, len(page).to_bytes(8, "little") + page)
        except OSError:
            pass  # the child is gone: result() says why
        finally:
            os.close(fd)

    def result(self, path: Path) -> bytes:
        """The PDF bytes. PdfUnavailable when WeasyPrint did not load in the child,
        PerfreportError naming ``path`` for any other failure."""
        from .pdf import PdfUnavailable

        payload = self._collect()
        if payload[:1] == b"T":  # the child's phases, timed there (beside the parent's)
            line, _, payload = payload.partition(b"\n")
            import_wall, import_cpu, layout_wall, layout_cpu = (float(x) for x in line[1:].split())
            record("render:pdf import of WeasyPrint (child process, beside)", import_wall, import_cpu)
            record("render:pdf layout (child process, beside)", layout_wall, layout_cpu)
        if payload[:1] == b"O":
            return payload[1:]
        if payload[:1] == b"U":
            raise PdfUnavailable(payload[1:].decode(errors="replace").strip())
        if payload[:1] == b"E":
            raise PerfreportError(f"{path}: cannot write the PDF report ({payload[1:].decode(errors='replace').strip()})")
        raise PerfreportError(f"{path}: cannot write the PDF report (its renderer ended abnormally)")

    def close(self) -> None:
        """Stop the child if nothing was sent (an empty page), and reap it."""
        self._send(b"")
        self._collect()

    def kill(self) -> None:
        """Stop the child now (the command failed or was interrupted)."""
        import signal

        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def _collect(self) -> bytes:
        if self._from_child < 0:
            return b""
        fd, self._from_child = self._from_child, -1
        chunks = []
        with os.fdopen(fd, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                chunks.append(block)
        status = reaped(self.pid)
        payload = b"".join(chunks)
        return payload if os.waitstatus_to_exitcode(status) == 0 else b""


IMPORT_NICE = 5
"""How much the PDF renderer's import of WeasyPrint (a second of CPU) yields the CPU: it runs
while the ranks load, and on a machine with no idle core it would otherwise slow them, which
decides when the command ends. Only the importing thread is lowered (Linux gives each thread
its own nice value): the layout, which the command waits for at its end, runs at the normal
priority. On idle cores a nice value changes nothing."""


def _import_politely(outcome: list) -> None:
    """In a thread of the renderer child: import WeasyPrint at a lower priority; ``outcome``
    gets None, or why it cannot load."""
    from .pdf import PdfUnavailable, import_weasyprint

    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), IMPORT_NICE)  # this thread only, on Linux
    except (AttributeError, OSError):
        pass
    wall, cpu = time.perf_counter(), time.thread_time()
    try:
        import_weasyprint()
        outcome.append(None)
    except PdfUnavailable as exc:
        outcome.append(str(exc))
    except BaseException as exc:  # noqa: BLE001 - said where the PDF is asked for
        outcome.append(f"PDF output needs WeasyPrint: {type(exc).__name__}: {exc}")
    outcome.append((time.perf_counter() - wall, time.thread_time() - cpu))


def _child(page_fd: int, result_fd: int) -> None:
    """The renderer child: import WeasyPrint (a thread of lower priority, while the page is
    awaited), read the page (see :meth:`PdfRenderer._send`), lay it out, send b"O" + the PDF,
    b"U" + why WeasyPrint cannot load, or b"E" + one error line."""
    code = 0
    try:
        from ..running.collector import no_collection
        from .pdf import layout_pdf

        outcome: list = []
        importer = threading.Thread(target=_import_politely, args=(outcome,), name="perfreport-import-weasyprint")
        importer.start()
        size = int.from_bytes(read_exactly(page_fd, 8) or bytes(8), "little")
        html = read_exactly(page_fd, size).decode("utf-8", "surrogatepass")
        os.close(page_fd)
        if html:  # (an empty page: stop at once, the import left unfinished)
            importer.join()
        missing = outcome[0] if outcome else "PDF output needs WeasyPrint (its import did not finish)"
        wall, cpu = time.perf_counter(), time.thread_time()
        if not html:
            payload = b""
        elif missing:
            payload = b"U" + missing.encode()
        else:
            try:
                no_collection()  # this child exits once the page is laid out (perfreport.running.collector)
                payload = b"O" + layout_pdf(html)
            except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent as text
                payload = b"E" + _describe(exc).encode()[:4000]
        if payload:  # the child's phases first: one line of seconds (import wall, CPU, layout wall, CPU)
            seconds = (*(outcome[1] if len(outcome) > 1 else (0.0, 0.0)), time.perf_counter() - wall,
                       time.thread_time() - cpu)
            payload = b"T" + " ".join(f"{x:.4f}" for x in seconds).encode() + b"\n" + payload
        write_all(result_fd, payload)
    except BaseException:  # noqa: BLE001 - a child never returns into the parent's code
        code = 1
    finally:
        os._exit(code)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (PerfreportError, OSError)):
        return str(exc)
    return f"{type(exc).__name__}: {exc} ({traceback.format_exc(limit=3).strip().splitlines()[-1]})"


Content = str | bytes | Iterable[bytes]
"""A file's content as :func:`perfreport.storing.atomic.atomic_files` takes it (chunks: a JSON document)."""


def write_reports(report: Report | None, out_dir: str | Path, formats: Iterable[str] | str | None = None,
                  extra: Mapping[str, Content] | None = None, *, pdf_appendix: bool = False,
                  ready: Mapping[str, Content] | None = None, renderer: PdfRenderer | None = None,
                  pdf_optional: bool = False, before_write: Callable[[], None] | None = None,
                  early: EarlyFigures | None = None) -> list[Path]:
    """:func:`perfreport.report.write_reports` (the report files and the ``extra`` files written as
    one set, :func:`perfreport.storing.atomic.atomic_files`) with the PDF laid out in a child process at the
    same time as the other formats are rendered: ``renderer`` (started early by the command), or
    one forked here. ``ready`` holds formats already rendered. ``pdf_optional``: the PDF was a
    default, not asked for, so where WeasyPrint cannot load it is left out with a note on
    stderr instead of failing. ``early``: figures a child started drawing before the report was
    built (:func:`early_figures`). ``report`` may be None when ``ready`` holds every format
    (``analyze --format json``). ``before_write`` runs once everything is rendered, before any
    file is written (the command puts its phase timings into the document then). Returns the paths: the extra files, then the reports in
    :data:`perfreport.report.FORMATS` order. Raises OSError for a write that failed,
    PerfreportError for a PDF that failed (the other files are written all the same)."""
    from . import pdf

    out = Path(out_dir)
    formats = parse_formats(formats)
    files: dict[str, Content] = dict(extra or {})
    ready = dict(ready or {})
    svgs: dict[str, str] = {}  # figures drawn once, for the page and the PDF's page
    pdf_page = None
    own = None
    drawing = None
    try:
        if {"html", "pdf"} & (set(formats) - set(ready)):  # (md, json, junit: no figure, nothing to plan)
            with phase("render:plan figures"):
                drawing = _figure_drawing(report, formats, ready, pdf_appendix, early)
        if "pdf" in formats and "pdf" not in ready:
            if renderer is None:
                renderer = own = PdfRenderer.start()
            with phase("render:pdf page (figures, HTML)"):
                drawing.draw(0, svgs)
                pdf_page = pdf.paged_html(report, appendix=pdf_appendix, svgs=svgs)
            if renderer is not None:
                renderer.send(pdf_page)
        for fmt in formats:
            if fmt in ready:
                files[FILENAMES[fmt]] = ready[fmt]
            elif fmt == "html":
                from .html import render_html

                with phase("render:html"):
                    drawing.draw(1, svgs)
                    files[FILENAMES[fmt]] = render_html(report, svgs=svgs)
            elif fmt != "pdf":
                with phase(f"render:{fmt}"):
                    files[FILENAMES[fmt]] = render(report, fmt)
        error = None
        if pdf_page is not None:
            path = out / FILENAMES["pdf"]
            if renderer is not None:  # while the child lays the PDF out, this core is free
                with phase("render:json encoded ahead (while the PDF is laid out)"):
                    for name, content in files.items():
                        if isinstance(content, JsonChunks):  # into the file the set will rename into place
                            out.mkdir(parents=True, exist_ok=True)
                            content.encode_ahead(temp_name(out / name))
            try:
                with phase("render:pdf layout (child process; waited for)" if renderer else "render:pdf layout"):
                    files[FILENAMES["pdf"]] = renderer.result(path) if renderer else pdf.layout_pdf(pdf_page)
            except pdf.PdfUnavailable as exc:
                if not pdf_optional:
                    raise
                print(f"perfreport: note: no PDF report ({exc})", file=sys.stderr)
            except PerfreportError as exc:
                error = exc
    except BaseException:
        if drawing is not None:
            drawing.stop()
        if early is not None:
            early.stop()
        raise
    finally:
        if own is not None:
            own.close()
    if drawing is not None:
        drawing.finish()
    elif early is not None:  # (figures no format shows: never the case, but never left running)
        early.stop()
    order = [*(extra or {})] + [FILENAMES[f] for f in formats if FILENAMES[f] in files]
    try:
        if before_write is not None:
            before_write()
        atomic_files(out, {name: files[name] for name in order})
    finally:
        for content in files.values():
            if isinstance(content, JsonChunks):
                content.close()
    if error:
        raise error
    return [out / name for name in order]


def early_figures(formats: Iterable[str], pdf_appendix: bool = False
                  ) -> Callable[[Any, Any], EarlyFigures | None] | None:
    """What ``compare`` calls with the baseline's and the candidate's analyses before its gate
    (its ``analysed``): a child forked to draw the figures of their analysis sections
    (:class:`perfreport.report.drawing.EarlyFigures`) while the gate runs. None when no format shows
    those figures (they are on the HTML page, and in the PDF with its appendix)."""
    if "html" not in formats and not ("pdf" in formats and pdf_appendix):
        return None

    def start(baseline, candidate) -> EarlyFigures | None:
        from .drawing import EarlyFigures

        _import_matplotlib()  # here, once: the child shares it, and the parent draws later anyway
        try:
            return EarlyFigures(lambda: _analysis_sections(baseline, candidate),
                                behind="pdf" in formats and not pdf_appendix)  # HTML only: the PDF's go first
        except OSError:  # no process to spare (EAGAIN, ENOMEM): the figures are drawn later
            return None
    return start


def prepare_renderers(formats: Sequence[str]) -> None:
    """Import what the figures are drawn with and compile the templates ``formats`` render
    with, on a thread while the ranks load elsewhere (see
    :attr:`perfreport.running.executor.Executor.while_waiting`): a third of a second off the end
    for matplotlib, 0.10-0.15 s for the templates (the HTML page's with its style sheet, the
    Markdown's), which the environments keep compiled for the render."""
    from . import templates

    if {"html", "pdf"} & set(formats):
        import perfreport.report.figures  # noqa: F401

        from .html import STYLE_SHEET, TEMPLATE
        for name in (TEMPLATE, STYLE_SHEET):
            templates.html_environment().get_template(name)
    if "md" in formats:
        from .markdown import TEMPLATE

        templates.environment().get_template(TEMPLATE)


def _import_matplotlib() -> None:
    """Import what figures are drawn with (a third of a second), timed the first time."""
    if "perfreport.report.figures" not in sys.modules:
        with phase("render:import matplotlib"):
            import perfreport.report.figures  # noqa: F401


def _analysis_sections(baseline, candidate) -> list:
    """The analysis sections of a comparison report, as :func:`perfreport.report.build.comparison_report`
    makes them from each side's summary document (run in the early child)."""
    from ..documents.jsondoc import plain_document
    from ..pipeline import summary_document
    from .blocks import Side, rows_kept
    from .comparison import SIDES
    from .sections import analysis_sections

    analyses = dict(zip(SIDES, (baseline, candidate)))
    with rows_kept():  # as in the report's build: each table made into rows once
        return analysis_sections([Side(label, plain_document(summary_document(analyses[label]))) for label in SIDES])


def _figure_drawing(report: Report, formats: tuple[str, ...], ready: Mapping[str, Content],
                    pdf_appendix: bool, early: EarlyFigures | None = None) -> FigureDrawing:
    """The figures to draw, started on the other cores: group 0 the PDF's page's, group 1 the rest
    of the HTML page's (:mod:`perfreport.report.drawing`)."""
    from .drawing import FigureDrawing
    from .html import figures_to_draw

    pdf_jobs = figures_to_draw(report, brief=not pdf_appendix) if "pdf" in formats and "pdf" not in ready else []
    html_jobs = figures_to_draw(report, svgs={k: v for key, _, _, prefix in pdf_jobs
                                                      for k, v in ((key, ""), (key + "#prefix", prefix))}) \
        if "html" in formats and "html" not in ready else []
    if pdf_jobs or html_jobs:
        _import_matplotlib()  # before the children fork: they share it
    return FigureDrawing([pdf_jobs, html_jobs], early=early, behind_from=len(pdf_jobs) if pdf_jobs else None)


@contextmanager
def pdf_renderer(formats: Iterable[str]) -> Iterator[PdfRenderer | None]:
    """A renderer started now when ``formats`` include the PDF (a command enters this first, so
    WeasyPrint's import overlaps the loading), stopped on leaving; None otherwise or without
    ``fork``."""
    renderer = PdfRenderer.start() if "pdf" in formats else None
    try:
        yield renderer
    except BaseException:
        if renderer is not None:  # failed or interrupted: the PDF is not wanted, stop laying it out
            renderer.kill()
        raise
    finally:
        if renderer is not None:
            renderer.close()
