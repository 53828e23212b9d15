"""Finding and rendering the Jinja2 templates shipped as the ``perfreport.templates`` package,
and the one place that turns report values into text (units, statuses, escaping).

The top-level ``templates/`` folder is mapped into the wheel as ``perfreport/templates``; in a
source checkout without installation the folder next to the package is used.

Formatting only: a value is shown in its unit (durations through :func:`perfreport.units.format_us`,
so 1234.5 µs reads "1.23 ms"); nothing here derives a new quantity.
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup, escape

from ..units import format_bytes, format_pct, format_us

STATUS_STYLES = {
    "fail": ("FAIL", "❌", "#cf222e", "#ffebe9"),
    "warn": ("WARN", "⚠️", "#9a6700", "#fff8c5"),
    "inconclusive": ("INCONCLUSIVE", "❔", "#57606a", "#f6f8fa"),
    "pass": ("PASS", "✅", "#1a7f37", "#dafbe1"),
    "info": ("ANALYSIS", "ℹ️", "#0969da", "#ddf4ff"),
}
"""Per status: label, icon, text colour, background. The only definition of status looks."""

NAME_CHARS = 160
"""Names (kernels, operators, paths) longer than this are shortened in tables; the JSON has them whole."""
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
"""Characters XML 1.0 forbids (C0 controls but tab/newline/CR, lone surrogates, U+FFFE/FFFF) and DEL."""


def templates_dir() -> Path:
    """``perfreport/templates`` in an installed wheel, else the checkout's top-level ``templates/``.

    (``importlib.resources`` is no help here: ``perfreport.templates`` is a namespace package
    without ``__init__.py``, which it resolves differently across Python versions and install
    modes.)
    """
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "templates", package.parent / "templates"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"perfreport's report templates are missing (looked in {package / 'templates'})")


@functools.lru_cache(maxsize=None)
def environment() -> jinja2.Environment:
    """Templates with autoescaping off (Markdown/text) and the unit formatters as filters. One a
    process: the environment keeps each template compiled (~20 ms a template), so a process that
    renders many reports (a library user, the in-process CLI tests) compiles each once; the
    loader still reloads a template whose file changed."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    _add_filters(env)
    env.filters.update(md=escape_markdown)
    return env


@functools.lru_cache(maxsize=None)
def html_environment() -> jinja2.Environment:
    """Templates for HTML: every ``{{ value }}`` is HTML-escaped unless marked safe. One a
    process, as :func:`environment`."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    _add_filters(env)
    return env


def _add_filters(env: jinja2.Environment) -> None:
    env.filters.update(us=format_us, pct=format_pct, bytes=format_bytes, value=format_value, shorten=shorten,
                       status_label=status_label, status_icon=status_icon, clean=clean_text,
                       signed_duration=lambda us: format_value(us, "us", True))
    env.globals.update(STATUS_STYLES=STATUS_STYLES, format_cell=format_cell, column_widths_mm=column_widths_mm)


def render(name: str, **context) -> str:
    return environment().get_template(name).render(**context)


def render_html(name: str, **context) -> str:
    return html_environment().get_template(name).render(**context)


# --- values ----------------------------------------------------------------------------------------
def _missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and not math.isfinite(value))


def _signed(text: str, value: float, signed: bool) -> str:
    return "+" + text if signed and value > 0 else text


def format_value(value: Any, unit: str, signed: bool = False) -> str:
    """A document value as text in its unit ("-" when missing). Units: see ``report.model.UNITS``."""
    if _missing(value):
        return "–"
    if unit in ("text", "name", "status"):
        return clean_text(value)
    if unit == "bool" or isinstance(value, bool):
        return "yes" if value else "no"
    if not isinstance(value, (int, float)):
        return clean_text(value)
    if unit == "us":
        return _signed(format_us(value), value, signed)
    if unit == "ms":
        return _signed(format_us(value * 1000.0) if abs(value) < 1 else f"{value:,.2f} ms", value, signed)
    if unit == "pct":
        return _signed(format_pct(value), value, signed)
    if unit == "pp":
        return _signed(f"{value:.1f} pp", value, signed)
    if unit == "bytes":
        return _signed(format_bytes(value), value, signed)
    if unit == "gbps":
        return _signed(f"{value:,.1f} GB/s" if abs(value) >= 1 else f"{value:.3g} GB/s", value, signed)
    if unit == "p_value":
        return f"{value:.2g}" if value >= 0.001 else "<0.001"
    if isinstance(value, int):
        return _signed(f"{value:,}", value, signed)
    if value == int(value) and abs(value) < 1e15:
        return _signed(f"{int(value):,}", value, signed)
    return _signed(f"{value:,.2f}" if abs(value) >= 100 else f"{value:.3g}", value, signed)


def format_cell(cell: Any, column) -> str:
    """A table cell: a ``report.model.Value`` or ``Interval`` carries its unit, else the
    column's unit applies."""
    if hasattr(cell, "unit") and hasattr(cell, "value"):
        return format_value(cell.value, cell.unit, cell.signed)
    if hasattr(cell, "lo") and hasattr(cell, "hi"):
        if _missing(cell.lo) and _missing(cell.hi):
            return "–"
        return f"[{format_value(cell.lo, cell.unit)}, {format_value(cell.hi, cell.unit)}]"
    return format_value(cell, column.unit, column.signed)


def clean_text(value: Any) -> str:
    """``str(value)`` on one line, without the characters XML forbids (see :func:`valid_xml_text`)."""
    return valid_xml_text(value).replace("\r", " ").replace("\n", " ").replace("\t", " ")


def valid_xml_text(value: Any) -> str:
    """``str(value)`` without control characters (invalid in XML 1.0, invisible in HTML), lone
    surrogates and non-characters; newlines and tabs kept."""
    return _CONTROL.sub("", str(value))


def shorten(text: Any, limit: int = NAME_CHARS) -> str:
    """At most ``limit`` characters: the start and the end of a long name, joined by " … "."""
    s = clean_text(text)
    if len(s) <= limit:
        return s
    head = (limit - 3) * 2 // 3
    return s[:head] + " … " + s[len(s) - (limit - 3 - head):]


def status_label(status: str) -> str:
    return STATUS_STYLES.get(status, (status.upper(), "", "", ""))[0]


def status_icon(status: str) -> str:
    return STATUS_STYLES.get(status, ("", "", "", ""))[1]


# --- paged tables ------------------------------------------------------------------------------------
PAGE_WIDTH_MM = 188.0
"""The width of an A4 page's text in the PDF (210 mm less the 11 mm margins of ``report.css.j2``)."""
CHAR_MM = 1.5
"""Width of a lower-case letter or digit in a 7.2 pt table cell (Liberation Sans digits are
0.56 em of 2.54 mm), generous so a number never overflows its column."""
UPPER_MM = 1.9
"""…and of a capital (up to 0.72 em, bold in the header)."""
CELL_PADDING_MM = 3.0
WRAPPED_MIN_MM = 24.0
"""Narrowest a wrapping (name, text) column is squeezed to when a table is wider than the page."""
_WRAPS = ("name", "text")


def column_widths_mm(table) -> list[float]:
    """Column widths in mm for a table laid out with ``table-layout: fixed`` in the PDF.

    WeasyPrint's automatic table layout measures every cell's minimum and maximum width with
    its line breaker (most of the PDF's rendering time); the widths here come from the
    formatted text instead: each column as wide as its longest cell (numbers do not wrap) or
    header word, names and text columns shrunk, down to :data:`WRAPPED_MIN_MM`, to fit the page.
    """
    widths, wraps = [], []
    for i, column in enumerate(table.columns):
        header = max((_text_mm(word) for word in str(column.label).split()), default=CHAR_MM)
        cells = (_text_mm(shorten(format_cell(row[i], column))) for row in table.rows if i < len(row))
        width = max(header, max(cells, default=CHAR_MM))
        if column.unit == "status":
            width += 2 * CHAR_MM  # the pill's padding
        widths.append(width + CELL_PADDING_MM)
        wraps.append(column.unit in _WRAPS)
    excess = sum(widths) - PAGE_WIDTH_MM
    shrinkable = sum(max(0.0, w - WRAPPED_MIN_MM) for w, wrap in zip(widths, wraps) if wrap)
    if excess > 0 and shrinkable > 0:
        cut = min(1.0, excess / shrinkable)
        widths = [w - cut * max(0.0, w - WRAPPED_MIN_MM) if wrap else w for w, wrap in zip(widths, wraps)]
    total = sum(widths)
    if total > PAGE_WIDTH_MM:  # still too wide: every column in proportion (numbers may wrap)
        widths = [w * PAGE_WIDTH_MM / total for w in widths]
    return [round(w, 1) for w in widths]


def _text_mm(text: str) -> float:
    """Printed width of ``text`` in a PDF table cell, by :data:`CHAR_MM` and :data:`UPPER_MM`."""
    upper = sum(1 for c in text if c.isupper())
    return upper * UPPER_MM + (len(text) - upper) * CHAR_MM


# --- escaping --------------------------------------------------------------------------------------
_MD_BACKSLASH = str.maketrans({c: "\\" + c for c in "\\|`*_[]~$"})


def escape_markdown(text: object) -> str:
    """Text safe anywhere in GitHub Markdown, table cells included: one line, no table-breaking
    pipe, no code span, emphasis, link, math or HTML, no @mention or #issue reference."""
    s = clean_text(text).translate(_MD_BACKSLASH)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return s.replace("@", "@\u200b").replace("#", "#\u200b")


def escape_html(text: object) -> Markup:
    return escape(clean_text(text))
