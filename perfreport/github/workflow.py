"""What a job step hands back to the runner: the job summary, annotations and step outputs.

- **Job summary**: Markdown appended to ``$GITHUB_STEP_SUMMARY``. GitHub rejects a step's summary
  over 1 MiB ("upload aborted, supports content up to a size of 1024k"), so the report is
  rendered within what is left of that budget.
- **Annotations**: ``::error title=…::message`` lines on stdout. GitHub keeps 10 of each kind per
  step and silently drops the rest, so the findings are grouped (one finding on eight ranks is
  one line) and the most important come first; past ten, the tenth line says how many more.
  Trace strings are escaped the way the runner decodes them (``%``, CR, LF; in properties also
  ``:`` and ``,``) and control characters are removed, so a kernel name holding a newline and
  ``::`` cannot start a workflow command of its own.
- **Outputs**: ``name=value`` lines appended to ``$GITHUB_OUTPUT``, a heredoc with a fresh
  random delimiter for values that span lines.
"""

from __future__ import annotations

import re
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path

from ..errors import GitHubError, printable

SUMMARY_LIMIT = 1024 * 1024
"""Bytes GitHub accepts in one step's summary file."""
ANNOTATIONS_PER_KIND = 10
"""GitHub shows at most 10 errors and 10 warnings per step."""
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u2028\u2029]")
_LEVELS = {"fail": "error", "warn": "warning"}


def escape_data(text: str) -> str:
    """A workflow command's message: decoded by the runner back to ``text`` (minus controls)."""
    text = _CONTROL.sub("", text)
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``title=…``): also ``:`` and ``,`` are special."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation_lines(document: Mapping, *, limit: int = ANNOTATIONS_PER_KIND) -> list[str]:
    """``::error``/``::warning`` lines for the failed and warned findings of a comparison,
    grouped across ranks, most important first, at most ``limit`` of each kind."""
    from ..report.findings import group_findings

    groups = [g for g in group_findings(list(document.get("checks") or [])) if g.status in _LEVELS]
    lines = []
    for status, kind in _LEVELS.items():
        mine = [g for g in groups if g.status == status]
        shown = mine if len(mine) <= limit else mine[: limit - 1]
        for g in shown:
            where = f" ({g.ranks_text})" if g.ranks_text and g.ranks_text not in g.summary else ""
            title = f"perfreport {status.upper()}: {g.title}"
            lines.append(f"::{kind} title={escape_property(title)}::{escape_data(g.summary + where)}")
        if len(shown) < len(mine):
            rest = len(mine) - len(shown)
            lines.append(f"::{kind} title={escape_property(f'perfreport {status.upper()}: {rest} more')}::"
                         f"{escape_data(f'{rest} more {status}ed finding(s): see the job summary and the report')}")
    return lines


def summary_markdown(document: dict, *, used_bytes: int = 0, artifact_url: str = "",
                     limit: int = SUMMARY_LIMIT) -> str:
    """The report's Markdown for the job summary, within ``limit - used_bytes`` UTF-8 bytes."""
    from ..report import build_report
    from ..report.markdown import render_markdown
    from ..report.model import Link
    from .comment import safe_url

    links = [Link("HTML/PDF report (artifact)", artifact_url)] if safe_url(artifact_url, "--artifact-url") else []
    room = limit - used_bytes - 16
    if room < 1_000:
        raise GitHubError(f"the job summary has {used_bytes} bytes already: no room for the report "
                          f"(GitHub's limit is {limit} bytes a step)")
    report = build_report(document)
    chars = min(room, 500_000)  # far more than a summary needs; bounded render time
    while True:
        text = render_markdown(report, max_chars=chars, links=links)
        size = len(text.encode("utf-8"))
        if size <= room or chars < 1_000:
            return text
        chars = int(chars * room / size) - 64


def append_summary(path: str | Path, text: str) -> int:
    """Append ``text`` to the summary file; returns the bytes written."""
    data = ("\n" + text if not text.startswith("\n") else text).encode("utf-8")
    _append(path, data, "GITHUB_STEP_SUMMARY")
    return len(data)


def file_size(path: str | Path, variable: str) -> int:
    """Bytes in the file a runner variable names (0 when it does not exist yet)."""
    try:
        info = Path(path).stat()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise GitHubError(f"{variable}={printable(path)}: cannot use it ({exc.strerror or exc})") from None
    if stat.S_ISDIR(info.st_mode):
        raise GitHubError(f"{variable}={printable(path)}: is a directory, not the file the runner appends to")
    return info.st_size


def _append(path: str | Path, data: bytes, variable: str) -> None:
    """Append to a runner's file (summary, outputs): a directory or unwritable path is one line."""
    file_size(path, variable)
    try:
        with open(path, "ab") as f:
            f.write(data)
    except OSError as exc:
        raise GitHubError(f"{variable}={printable(path)}: cannot append to it ({exc.strerror or exc})") from None


def output_text(values: Mapping[str, str]) -> str:
    """``$GITHUB_OUTPUT`` lines: ``name=value``, or a heredoc whose delimiter is in no value."""
    out = []
    for name, value in values.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", name):
            raise GitHubError(f"output name {name!r} is not a valid identifier")
        value = "" if value is None else str(value)
        if "\n" in value or "\r" in value:
            delimiter = f"ghadelimiter_{secrets.token_hex(16)}"
            while delimiter in value:  # pragma: no cover (a 128-bit collision)
                delimiter = f"ghadelimiter_{secrets.token_hex(16)}"
            out.append(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")
        else:
            out.append(f"{name}={value}\n")
    return "".join(out)


def write_outputs(path: str | Path, values: Mapping[str, str]) -> None:
    _append(path, output_text(values).encode("utf-8"), "GITHUB_OUTPUT")


def report_outputs(document: Mapping, report_dir: str | Path) -> dict[str, str]:
    """The step outputs of a report folder: status (pass/warn/fail; empty for an analysis),
    report-dir, markdown-file (empty when report.md was not written), headline."""
    folder = Path(report_dir)
    md = folder / "report.md"
    return {
        "status": str(document.get("status") or ""),
        "report-dir": str(folder),
        "markdown-file": str(md) if md.is_file() else "",
        "headline": str(document.get("headline") or ""),
    }
