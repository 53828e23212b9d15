"""Report -> one self-contained HTML page.

Inline CSS and inline SVG plots; no script, no font, no image fetched from anywhere (a
Content-Security-Policy meta tag forbids it, so even a name that slipped through escaping could
not run or load anything). Every string from the report is HTML-escaped by the template
(Jinja2 autoescape); the only markup inserted raw is the SVG that :mod:`.figures` produced, whose
text matplotlib escapes. Long tables are folded in ``<details>``; printing unfolds them where
the browser supports ``::details-content``.
"""

from __future__ import annotations

from .figures import render_svg
from .model import Section, BarFigure, LineFigure, Paragraph, Report, Table, WaterfallFigure
from . import templates

TEMPLATE = "report.html.j2"


OVERVIEW_WIDTH_IN = 6.4
"""Width of the first-screen figures, drawn two side by side."""


def _blocks(section, svgs: dict[str, str], width_in: float | None = None) -> list[dict]:
    out = []
    for block in section.blocks:
        if isinstance(block, Paragraph):
            out.append({"kind": "paragraph", "block": block, "svg": ""})
        elif isinstance(block, Table):
            out.append({"kind": "table", "block": block, "svg": ""})
        elif isinstance(block, (LineFigure, BarFigure, WaterfallFigure)):
            if block.id not in svgs:
                svgs[block.id] = render_svg(block) if width_in is None else render_svg(block, width_in)
            out.append({"kind": "figure", "block": block, "svg": svgs[block.id]})
    return out


BRIEF_IMPORTANCE = {"compare": 1, "analyze": 2}
"""A brief (the default PDF) has the sections up to this importance (by report kind); the rest
is the appendix."""


def context(report: Report, *, paged: bool = False, brief: bool = False, svgs: dict[str, str] | None = None) -> dict:
    """Template context: the first-screen figures and the sections with their figures drawn;
    ``brief`` keeps only the sections up to :data:`BRIEF_IMPORTANCE` and names the others.
    ``svgs`` ({figure id: SVG}) shares drawn figures between renderings of one report (the
    page and the PDF's paged page draw the same figures): matplotlib is most of their cost."""
    svgs = {} if svgs is None else svgs
    limit = BRIEF_IMPORTANCE.get(report.kind, 1)
    kept = [s for s in report.sections if not brief or s.importance <= limit]
    sections = [{"section": s, "blocks": _blocks(s, svgs)} for s in kept]
    overview = _blocks(Section("overview", "", report.overview), svgs, OVERVIEW_WIDTH_IN)
    left_out = [s for s in report.sections if s not in kept]
    return {"report": report, "sections": sections, "overview": overview, "paged": paged, "left_out": left_out}


def render_html(report: Report, *, paged: bool = False, brief: bool = False, svgs: dict[str, str] | None = None) -> str:
    """The report page. ``paged`` renders for print media (tables unfolded), as the PDF uses
    it; ``brief`` leaves the less important sections out (named at the end); ``svgs`` as in
    :func:`context`."""
    return render_page(context(report, paged=paged, brief=brief, svgs=svgs))


def render_page(ctx: dict) -> str:
    return templates.render_html(TEMPLATE, **ctx)
