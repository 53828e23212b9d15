"""Report -> one self-contained HTML page.

Inline CSS and inline SVG plots; no script, no font, no image fetched from anywhere (a
Content-Security-Policy meta tag forbids it, so even a name that slipped through escaping could
not run or load anything). Every string from the report is HTML-escaped by the template
(Jinja2 autoescape); the only markup inserted raw is the SVG that :mod:`.figures` produced, whose
text matplotlib escapes. Long tables are folded in ``<details>``; printing unfolds them where
the browser supports ``::details-content``.
"""

from __future__ import annotations

from .comparison import BANNER_CHECKS
from .figures import render_svg
from .model import BarFigure, LineFigure, Paragraph, Report, Table
from . import templates

TEMPLATE = "report.html.j2"


def _blocks(section, svgs: dict[str, str]) -> list[dict]:
    out = []
    for block in section.blocks:
        if isinstance(block, Paragraph):
            out.append({"kind": "paragraph", "block": block, "svg": ""})
        elif isinstance(block, Table):
            out.append({"kind": "table", "block": block, "svg": ""})
        elif isinstance(block, (LineFigure, BarFigure)):
            if block.id not in svgs:
                svgs[block.id] = render_svg(block)
            out.append({"kind": "figure", "block": block, "svg": svgs[block.id]})
    return out


def context(report: Report, *, paged: bool = False) -> dict:
    """Template context: sections with their figures drawn, and the checks to list first."""
    svgs: dict[str, str] = {}
    sections = [{"section": s, "blocks": _blocks(s, svgs)} for s in report.sections]
    first = [c for c in (report.verdict.checks if report.verdict else ()) if c.status in ("fail", "warn") and c.counted]
    return {"report": report, "sections": sections, "checks_first": first[:BANNER_CHECKS],
            "more_checks": len(first) > BANNER_CHECKS, "paged": paged}


def render_html(report: Report, *, paged: bool = False) -> str:
    """The report page. ``paged`` renders for print media (tables unfolded), as the PDF uses it."""
    return render_page(context(report, paged=paged))


def render_page(ctx: dict) -> str:
    return templates.render_html(TEMPLATE, **ctx)
