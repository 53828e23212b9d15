"""Writing the report files of one command, the slow one (the PDF) alongside the others.

The PDF is laid out by WeasyPrint in pure Python: seconds, where every other format takes tens
of milliseconds. It is rendered in a forked child process started first, while this process
renders the other formats, so the command costs max(PDF, rest) instead of their sum; then every
file is written as one set, as :func:`perfreport.report.write_reports` does. The
renderers themselves are :func:`perfreport.report.render`'s, unchanged; this module only decides
when and where they run. Without ``fork`` (Windows) everything is rendered here, in order.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path

from ._io import atomic_files
from .errors import PerfreportError
from .report import FILENAMES, parse_formats, render
from .report.model import Report

SLOW_FORMATS = ("pdf",)


def write_reports(report: Report, out_dir: str | Path, formats: Iterable[str] | str | None = None,
                  extra: Mapping[str, str | bytes] | None = None, *, pdf_appendix: bool = False,
                  ready: Mapping[str, str | bytes] | None = None) -> list[Path]:
    """:func:`perfreport.report.write_reports` (the report files and the ``extra`` files written as
    one set, :func:`perfreport._io.atomic_files`) with the PDF rendered in a child process at the
    same time as the other formats; ``ready`` holds formats already rendered (e.g. the JSON text
    a command made anyway). Returns the paths: the extra files, then the reports in
    :data:`perfreport.report.FORMATS` order. Raises OSError for a write that failed,
    PerfreportError for a PDF that failed (the other files are written all the same)."""
    out = Path(out_dir)
    formats = parse_formats(formats)
    ready = dict(ready or {})
    options = {"pdf_appendix": True} if pdf_appendix else {}
    slow = [f for f in formats if f in SLOW_FORMATS and f not in ready]
    children = {fmt: _start(report, out / FILENAMES[fmt], fmt, options) for fmt in slow} if hasattr(os, "fork") else {}
    files: dict[str, str | bytes] = dict(extra or {})
    errors: list[str] = []
    try:
        for fmt in formats:
            if fmt not in children:
                files[FILENAMES[fmt]] = ready[fmt] if fmt in ready else render(report, fmt, **options)
    finally:
        for fmt, child in children.items():
            data, error = _wait(child, fmt)
            if error:
                errors.append(error)
            else:
                files[FILENAMES[fmt]] = data
    order = [*(extra or {})] + [FILENAMES[f] for f in formats if FILENAMES[f] in files]
    atomic_files(out, {name: files[name] for name in order})
    if errors:
        raise PerfreportError("; ".join(errors))
    return [out / name for name in order]


def _start(report: Report, path: Path, fmt: str, options: Mapping) -> tuple[int, int]:
    """Fork a child that renders one format and sends it back through a pipe (b"O" + the
    bytes, or b"E" + one error line); (pid, read end of the pipe)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: render, send, never return
        code = 0
        try:
            os.close(r)
            data = render(report, fmt, **options)
            payload = b"O" + (data.encode() if isinstance(data, str) else data)
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent as text
            message = str(exc) if isinstance(exc, (PerfreportError, OSError)) else \
                f"{type(exc).__name__}: {exc} ({traceback.format_exc(limit=3).strip().splitlines()[-1]})"
            payload = b"E" + f"{path}: cannot write the {fmt.upper()} report ({message})".encode()[:4000]
            code = 1
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(w, view):]
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _wait(child: tuple[int, int], fmt: str) -> tuple[bytes, str | None]:
    """Wait for a child: (its rendering, None), or (b"", its error line)."""
    pid, r = child
    chunks = []
    with os.fdopen(r, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            chunks.append(block)
    _, status = os.waitpid(pid, 0)
    payload = b"".join(chunks)
    if payload[:1] == b"E":
        return b"", payload[1:].decode(errors="replace").strip()
    if payload[:1] != b"O" or os.waitstatus_to_exitcode(status) != 0:
        return b"", f"the {fmt.upper()} renderer ended abnormally (status {status})"
    return payload[1:], None
