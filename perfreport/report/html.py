"""Report -> one self-contained HTML page.

Inline CSS and inline SVG plots; no script, no font, no image fetched from anywhere (a
Content-Security-Policy meta tag forbids it, so even a name that slipped through escaping could
not run or load anything). Every string from the report is HTML-escaped by the template
(Jinja2 autoescape); the only markup inserted raw is the SVG that :mod:`.figures` produced, whose
text matplotlib escapes. Long tables are folded in ``<details>``; printing unfolds them where
the browser supports ``::details-content``.
"""

from __future__ import annotations

import base64
import dataclasses
import re

from collections.abc import Callable

from .blocks import first_rows_note
from .model import Section, BarFigure, LineFigure, Paragraph, Report, RooflineFigure, Table, WaterfallFigure
from . import templates

Figure = BarFigure | LineFigure | WaterfallFigure | RooflineFigure

TEMPLATE = "report.html.j2"
STYLE_SHEET = "report.css.j2"
"""Included by :data:`TEMPLATE`."""


OVERVIEW_WIDTH_IN = 6.4
"""Width of the first-screen figures, drawn two side by side."""


Draw = Callable[[str, Figure, "float | None", str], str]
"""Draws one figure: (its key in ``svgs``, the figure, width in inches or None for the full
width, element id prefix) -> SVG."""


def draw_svg(key: str, block: Figure, width_in: float | None, prefix: str) -> str:
    """:func:`.figures.render_svg` (matplotlib, imported when the first figure is drawn)."""
    from .figures import render_svg

    return render_svg(block, prefix=prefix) if width_in is None else render_svg(block, width_in, prefix=prefix)


def figure_key(section_id: str, block_id: str, width_in: float | None) -> str:
    """A drawn figure's key in ``svgs``: by section, block and width (see :func:`_blocks`)."""
    return f"{section_id}/{block_id}@{width_in}"


def _blocks(section, svgs: dict[str, str], used: set[str], width_in: float | None = None,
            draw: Draw = draw_svg, brief: bool = False) -> list[dict]:
    """The section's blocks for the template, figures drawn. Each table and figure gets an
    ``anchor``, its element id: ``tbl-``/``fig-`` and the block id, scoped by the section where
    ``used`` (the page's ids so far) already has it. A multi-setup report repeats a block id
    (each candidate's ``step_breakdown``) in several sections, and each must draw its own data
    with its own element ids, so drawn SVGs are cached in ``svgs`` by section, block and width.
    ``brief``: tables as the PDF's brief shows them (:func:`brief_table`)."""
    out = []
    for block in section.blocks:
        if isinstance(block, Paragraph):
            out.append({"kind": "paragraph", "block": block, "svg": "", "anchor": ""})
        elif isinstance(block, Table):
            out.append({"kind": "table", "block": brief_table(block) if brief else block, "svg": "",
                        "anchor": _anchor("tbl", section.id, block.id, used)})
        elif isinstance(block, Figure):
            anchor = _anchor("fig", section.id, block.id, used)
            key = figure_key(section.id, block.id, width_in)
            if key not in svgs:
                svgs[key] = draw(key, block, width_in, anchor)
                svgs[key + "#prefix"] = anchor
            svg, drawn = svgs[key], svgs[key + "#prefix"]
            if drawn != anchor:  # drawn for the other page (the PDF's brief), where ids fell otherwise
                svg = svg.replace(f'id="{drawn}-', f'id="{anchor}-').replace(f'#{drawn}-', f'#{anchor}-')
            out.append({"kind": "figure", "block": block, "svg": svg, "anchor": anchor})
    return out


def _anchor(kind: str, scope: str, block_id: str, used: set[str]) -> str:
    """A page-unique element id: ``kind-block``, else ``kind-scope-block`` (then numbered)."""
    clean = re.sub(r"[^A-Za-z0-9_-]", "-", block_id)
    anchor = f"{kind}-{clean}"
    if anchor in used:
        anchor = f"{kind}-{re.sub(r'[^A-Za-z0-9_-]', '-', scope)}-{clean}"
    base, n = anchor, 2
    while anchor in used:
        anchor, n = f"{base}-{n}", n + 1
    used.add(anchor)
    return anchor


BRIEF_ROWS = 40
"""Rows of a table in the PDF's brief: its first ones, then any marked row after them (an
outlier, a failed check). The HTML page shows up to :data:`~perfreport.report.blocks.MAX_ROWS`
and report.json every row. WeasyPrint lays out a table row in ~3.5 ms: the brief of 512 ranks
held four tables of 200 rows, 3.1 s of layout, the command's last 3.0 s."""


def brief_table(table: Table) -> Table:
    """``table`` as the PDF's brief shows it: its first :data:`BRIEF_ROWS` rows and the marked
    rows after them, with a note saying so (in place of the page's "First N of M rows")."""
    if len(table.rows) <= BRIEF_ROWS:
        return table
    marked = set(table.marked)
    keep = [i for i in range(len(table.rows)) if i < BRIEF_ROWS or i in marked]
    extra = len(keep) - BRIEF_ROWS
    note = table.note.replace(first_rows_note(len(table.rows), table.rows_total), "").strip()
    said = (f"The first {BRIEF_ROWS}" + (f" and {extra} marked" if extra else "") + f" of {table.rows_total:,} rows; "
            f"report.html shows {len(table.rows):,}" + (", report.json all." if table.truncated else "."))
    return dataclasses.replace(table, rows=tuple(table.rows[i] for i in keep),
                               marked=tuple(k for k, i in enumerate(keep) if i in marked),
                               note=f"{note} {said}" if note else said)


BRIEF_IMPORTANCE = {"compare": 1, "analyze": 2}
"""A brief (the default PDF) has the sections up to this importance (by report kind); the rest
is the appendix."""


def context(report: Report, *, paged: bool = False, brief: bool = False, svgs: dict[str, str] | None = None,
            draw: Draw = draw_svg) -> dict:
    """Template context: the first-screen figures and the sections with their figures drawn;
    ``brief`` keeps only the sections up to :data:`BRIEF_IMPORTANCE` and names the others;
    ``present`` holds the ids of the sections on the page, so a link points only at one there
    (a dead internal link is an error in WeasyPrint's log and a dead link in the PDF).
    ``svgs`` ({figure id: SVG}) shares drawn figures between renderings of one report (the
    page and the PDF's paged page draw the same figures): matplotlib is most of their cost."""
    svgs = {} if svgs is None else svgs
    limit = BRIEF_IMPORTANCE.get(report.kind, 1)
    kept = [s for s in report.sections if not brief or s.importance <= limit]
    used: set[str] = set()  # element ids on this page
    overview = _blocks(Section("overview", "", report.overview), svgs, used, OVERVIEW_WIDTH_IN, draw)
    sections = [{"section": s, "blocks": _blocks(s, svgs, used, draw=draw, brief=brief)} for s in kept]
    if paged:  # WeasyPrint lays the page out: each figure as an image of its SVG (see figure_image)
        for b in (b for blocks in (overview, *(s["blocks"] for s in sections)) for b in blocks if b["kind"] == "figure"):
            b["svg"] = figure_image(b["svg"], b["block"].title)
    left_out = [s for s in report.sections if s not in kept]
    return {"report": report, "sections": sections, "overview": overview, "paged": paged, "left_out": left_out,
            "present": {s.id for s in kept}}


def figure_image(svg: str, title: str) -> str:
    """A drawn figure as an ``<img>`` of a ``data:`` URL holding its SVG, for the PDF's page.

    Inline, every element of an SVG (a few hundred per figure: each tick, label and bar) is an
    element of the page to WeasyPrint, which runs the page's CSS cascade over each and parses
    each one's ``style`` attribute as page CSS: a third of the figures' share of the layout.
    As an image the SVG is parsed and drawn by WeasyPrint's SVG renderer alone, the same
    drawing (same text, same paths, same size: the CSS gives ``img.plot`` the size
    ``svg.plot`` has). The page fetches nothing: :func:`perfreport.report.pdf.layout_pdf` reads
    ``data:`` URLs and refuses every other."""
    data = base64.b64encode(svg.encode("utf-8", "surrogatepass")).decode("ascii")
    return f'<img class="plot" alt="{templates.escape_html(title)}" src="data:image/svg+xml;base64,{data}">'


def figures_to_draw(report: Report, *, brief: bool = False, svgs: dict[str, str] | None = None
                    ) -> list[tuple[str, Figure, float | None, str]]:
    """The figures the page (``brief``: the PDF's brief) shows that ``svgs`` lacks, in page order:
    (key in ``svgs``, figure, width in inches or None, element id prefix). Drawing them
    elsewhere and storing each SVG under its key and ``key + "#prefix"`` (the prefix) lets
    :func:`render_html` use them as if it had drawn them."""
    wanted: list[tuple[str, Figure, float | None, str]] = []

    def note(key: str, block: Figure, width_in: float | None, prefix: str) -> str:
        wanted.append((key, block, width_in, prefix))
        return ""

    context(report, brief=brief, svgs=dict(svgs or {}), draw=note)
    return wanted


def render_html(report: Report, *, paged: bool = False, brief: bool = False, svgs: dict[str, str] | None = None) -> str:
    """The report page. ``paged`` renders for print media (tables unfolded, figures as
    images: :func:`figure_image`), as the PDF uses it; ``brief`` leaves the less important
    sections out (named at the end); ``svgs`` as in
    :func:`context`."""
    return render_page(context(report, paged=paged, brief=brief, svgs=svgs))


def render_page(ctx: dict) -> str:
    return templates.render_html(TEMPLATE, **ctx)
