"""Report -> GitHub-flavoured Markdown for a PR comment or a job summary, within a size budget.

This text is the body of the PR comment (the GitHub glue prepends its own hidden marker). Order:
line 1 the verdict and the headline number with its first cause; line 2 the finding counts,
what was compared and the links (the full HTML report artifact, the run); then the sections of
importance 0 open (the failed and warned findings, one row per finding across ranks), the top
causes with the statistic they are measured in, the notes, and every other section folded in
``<details>`` with at most :data:`DETAIL_ROWS` rows per table. Plots are not drawn (the full
report has them).

GitHub rejects a comment over 65,536 characters, so the text is kept under ``max_chars``
(default 60,000, which leaves room for a wrapper the caller adds). When the whole report does
not fit, sections are shortened least important first (highest ``importance``, then the later
one): first their tables are cut to :data:`COMPACT_ROWS` rows, then the section is replaced
by a folded one-line stub; a line at the end names what was shortened. If even the head does
not fit (thousands of checks), its tables are cut too and, as the last resort, the text is cut
at a line boundary with a note. Every string from a trace is escaped (no table-breaking pipe,
no code span, no @mention, no HTML).
"""

from __future__ import annotations

from collections.abc import Sequence

from . import templates
from .model import BarFigure, Link, LineFigure, Paragraph, Report, RooflineFigure, Section, Table

MAX_CHARS = 60_000
"""Default budget: under GitHub's 65,536-character limit for comments, with room to spare."""
COMPACT_ROWS = 5
"""Rows per table of a shortened section."""
LISTED_IMPORTANCE = 3
"""In a comparison, sections this unimportant (the per-run analyses beyond the step) are only
named, with what they show, in one folded list: the PR comment links to the full report."""
DETAIL_ROWS = 10
"""Rows per table of a folded section: a PR comment points at the full report for the rest."""
HEAD_ROWS = (50, 20, 5)
"""Row limits tried, in turn, for the open sections when the head alone is over budget."""
NAME_CHARS = 100
"""Names longer than this are shortened in Markdown tables."""
TEMPLATE = "report.md.j2"
CUT_NOTE = "\n\n> ✂️ Cut here to fit a GitHub comment; the full report has everything.\n"


def _view(section: Section) -> dict:
    blocks = []
    for b in section.blocks:
        if isinstance(b, Table):
            blocks.append({"kind": "table", "block": b})
        elif isinstance(b, Paragraph):
            blocks.append({"kind": "paragraph", "block": b})
    figures = sum(isinstance(b, (LineFigure, BarFigure, RooflineFigure)) for b in section.blocks)
    return {"section": section, "blocks": blocks, "figures": figures}


def render_markdown(report: Report, *, max_chars: int = MAX_CHARS, links: Sequence[Link] | None = None) -> str:
    """The report as Markdown of at most ``max_chars`` characters (see the module docstring).
    ``links`` replace the report's own link placeholders (artifact URLs, for instance)."""
    env = templates.environment()
    env.globals["name_chars"] = NAME_CHARS
    macros = env.get_template(TEMPLATE).module
    links = report.links if links is None else tuple(links)
    views = [_view(s) for s in report.sections]
    open_views = [v for v in views if v["section"].importance == 0]
    listed_from = LISTED_IMPORTANCE if report.verdict is not None else None
    listed = [v["section"] for v in views if listed_from is not None and v["section"].importance >= listed_from]
    folded = [v for v in views if v["section"].importance > 0 and v["section"] not in listed]

    head = _block(macros.head(report, links))
    opened = "".join(_block(macros.open_section(v, None)) for v in open_views)
    for limit in HEAD_ROWS:  # the head and open sections must leave room for the rest
        if len(head) + len(opened) <= max_chars * 3 // 4:
            break
        opened = "".join(_block(macros.open_section(v, limit)) for v in open_views)
    opened += _block(macros.causes(report))

    full = [_block(macros.folded_section(v, DETAIL_ROWS)) for v in folded]
    compact = [_block(macros.folded_section(v, COMPACT_ROWS)) for v in folded]
    stub = [_block(macros.omitted_section(v)) for v in folded]
    chosen = list(full)
    shortened: list[str] = []
    # least important first; among equals the later section first
    order = sorted(range(len(folded)), key=lambda i: (-folded[i]["section"].importance, -i))

    listing = _block(macros.listed_sections(listed))

    def total(names: list[str]) -> int:
        return (len(head) + len(opened) + sum(len(c) for c in chosen) + len(listing)
                + len(_block(macros.tail(report, names))))

    for stage in (compact, stub):
        for i in order:
            if total(shortened) <= max_chars:
                break
            if chosen[i] is not stage[i] and len(stage[i]) < len(chosen[i]):
                chosen[i] = stage[i]
                title = folded[i]["section"].title
                if title not in shortened:
                    shortened.append(title)
    for i in order:  # still too long: drop stubs altogether
        if total(shortened) <= max_chars:
            break
        chosen[i] = ""
    text = (head + opened + "".join(chosen) + _block(macros.listed_sections(listed))
            + _block(macros.tail(report, shortened))).strip("\n") + "\n"
    return text if len(text) <= max_chars else hard_cut(text, max_chars)


def _block(markup) -> str:
    """A rendered piece as its own Markdown block: surrounded by blank lines."""
    return "\n" + str(markup).strip("\n") + "\n\n"


def hard_cut(text: str, max_chars: int) -> str:
    """``text`` cut at a line boundary to at most ``max_chars`` with a note; an open
    ``<details>`` is closed so the rest of the page is not swallowed."""
    closing = "\n</details>\n"
    room = max(0, max_chars - len(CUT_NOTE) - len(closing))
    cut = text[:room]
    cut = cut[: cut.rfind("\n") + 1] if "\n" in cut else cut
    if cut.count("<details>") > cut.count("</details>"):
        cut += closing
    return cut + CUT_NOTE.lstrip("\n")
