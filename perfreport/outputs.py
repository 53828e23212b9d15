"""Writing the report files of one command, the slow one (the PDF) alongside the others.

The PDF is laid out by WeasyPrint in pure Python: seconds, where every other format takes tens
of milliseconds. It is rendered in a forked child process started first, while this process
writes the other formats, so the command costs max(PDF, rest) instead of their sum. The
renderers themselves are :func:`perfreport.report.render`'s, unchanged; this module only decides
when and where they run. Without ``fork`` (Windows) everything is written here, in order.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path

from ._io import atomic_write
from .errors import PerfreportError
from .report import FILENAMES, parse_formats, render
from .report.model import Report

SLOW_FORMATS = ("pdf",)


def write_reports(report: Report, out_dir: str | Path, formats: Iterable[str] | str | None = None, *,
                  ready: Mapping[str, str | bytes] | None = None) -> list[Path]:
    """Write ``out_dir/report.<ext>`` for each format (each atomically), the PDF in a child
    process at the same time as the rest; ``ready`` holds formats already rendered (e.g. the
    JSON text a command wrote anyway). Returns the paths, in :data:`perfreport.report.FORMATS`
    order. Raises OSError for a write that failed, PerfreportError for a PDF that failed."""
    out = Path(out_dir)
    formats = parse_formats(formats)
    ready = dict(ready or {})
    slow = [f for f in formats if f in SLOW_FORMATS and f not in ready]
    children = {fmt: _start(report, out / FILENAMES[fmt], fmt) for fmt in slow} if hasattr(os, "fork") else {}
    try:
        for fmt in formats:
            if fmt in children:
                continue
            atomic_write(out / FILENAMES[fmt], ready[fmt] if fmt in ready else render(report, fmt))
    finally:
        errors = [e for fmt, child in children.items() if (e := _wait(child, fmt))]
    if errors:
        raise PerfreportError("; ".join(errors))
    return [out / FILENAMES[f] for f in formats]


def _start(report: Report, path: Path, fmt: str) -> tuple[int, int]:
    """Fork a child that renders and writes one format; (pid, read end of its error pipe)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: render, write, report an error as one line, never return
        code = 0
        try:
            os.close(r)
            atomic_write(path, render(report, fmt))
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent as text
            message = str(exc) if isinstance(exc, (PerfreportError, OSError)) else \
                f"{type(exc).__name__}: {exc} ({traceback.format_exc(limit=3).strip().splitlines()[-1]})"
            os.write(w, f"{path}: cannot write the {fmt.upper()} report ({message})".encode()[:4000])
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def _wait(child: tuple[int, int], fmt: str) -> str | None:
    """Wait for a child; its error line, or None when it wrote its file."""
    pid, r = child
    chunks = []
    with os.fdopen(r, "rb") as f:
        for block in iter(lambda: f.read(4096), b""):
            chunks.append(block)
    _, status = os.waitpid(pid, 0)
    message = b"".join(chunks).decode(errors="replace").strip()
    if message:
        return message
    if os.waitstatus_to_exitcode(status) != 0:
        return f"the {fmt.upper()} renderer ended abnormally (status {status})"
    return None
