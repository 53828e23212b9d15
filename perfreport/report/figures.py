"""Report figures -> inline SVG text (matplotlib, vector, no fonts or scripts embedded).

Figures are drawn with matplotlib's object API (``matplotlib.figure.Figure``, rendered by its
SVG backend), so no pyplot state or GUI backend is touched and nothing global changes; the rc
settings apply only inside :func:`render_svg`. Text stays text (``svg.fonttype: none``): sharp
at any zoom, searchable, and small. Math-text parsing is off, so a ``$`` in a label is a dollar.

The SVG is made to live inline in an HTML page next to other SVGs: the XML prolog, DOCTYPE and
metadata are dropped, every ``id`` gets a per-figure prefix (matplotlib's clip-path and marker
ids repeat across figures), and the fixed width/height give way to the viewBox so CSS sizes it.

A line of more points than pixels across (a per-step line of a many-step run) is drawn
through the points that draw the same pixels (:mod:`.decimate`), not every point.

Axis labels carry units. Durations in µs are shown in µs, ms or s by the size of the largest
value, bytes in B/kB/MB/GB: a choice of tick labels, not a new number.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator

from .decimate import drawn_points
from .model import BarFigure, LineFigure, RooflineFigure, WaterfallFigure
from .templates import clean_text, shorten

WIDTH_IN = 10.0
DPI = 96
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac")
SEGMENT_COLOURS = {"compute": "#4e79a7", "non-compute": "#f28e2b", "idle": "#bab0ac", "host_wait": "#e15759",
                   "kernel_wait": "#f28e2b", "other": "#bab0ac", "overlapped with compute": "#59a14f",
                   "exposed": "#e15759", "baseline": "#7f7f7f", "candidate": "#e15759",
                   "compute kernels": "#4e79a7", "exposed communication": "#f28e2b",
                   "exposed memcpy/memset": "#76b7b2", "GPU idle": "#bab0ac"}
"""Fixed colours for fixed categories, so a colour means the same thing in every figure."""
LABEL_CHARS = 48
WATERFALL_LABEL_CHARS = 64
MAX_X_TICKS = 16
"""Category labels on a 10-inch x axis (release tags with dates, rotated): more would overlap."""
MAX_MARKS = 1000
"""Marked points of one line drawn one by one; past this many, one per grid cell (:func:`_shown_marks`)."""
MARK_CELL_PX = 3
"""The cell of that grid, in pixels: about a quarter of a cross's width (~11 pixels), so a line
draws at most ~23,000 crosses however many steps it has (a row of marked steps: ~320)."""
SIDES = ("baseline", "candidate")
SIDE_COLOURS = {"baseline": "#7f7f7f", "candidate": "#e15759"}
RC = {
    "svg.fonttype": "none",
    "svg.hashsalt": "perfreport",
    "text.parse_math": False,
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Liberation Sans", "Arial"],
    "font.size": 9.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#e5e5e5",
    "grid.linewidth": 0.6,
    "axes.axisbelow": True,
    "legend.frameon": False,
}

_SCALES = {
    "us": ((1e6, "s"), (1e3, "ms"), (1.0, "µs")),
    "bytes": ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"), (1.0, "B")),
}
_UNIT_NAMES = {"ms": "ms", "pct": "%", "pp": "pp", "gbps": "GB/s", "count": "count", "ops": "ops", "GB/s": "GB/s"}


class _Figure(Figure):
    """A matplotlib Figure that is drawn once when saved, not twice.

    Saving a figure with a layout engine first draws it into a renderer whose drawing methods
    do nothing, to run the constrained layout, then draws it again for real with the layout
    off. The layout runs before anything is drawn in that first pass, so the first pass's
    drawing (a third of a figure's time: every tick and text measured and placed) only
    repeats what the real pass does again. Here that pass runs the layout alone. The SVG is
    the same, byte for byte (tests/test_report_figures.py draws each figure both ways)."""

    def draw(self, renderer):
        if self.axes and self.get_layout_engine() is not None and _drawing_disabled(renderer):
            try:
                self.get_layout_engine().execute(self)
            except ValueError:  # as Figure.draw: a layout that cannot be made is skipped
                pass
            self.stale = False
            return
        super().draw(renderer)


def _drawing_disabled(renderer) -> bool:
    """Whether ``renderer`` is in matplotlib's measuring pass: ``RendererBase._draw_disabled``
    replaces its drawing methods with no-ops on the instance (for a vector format, on the
    renderer a ``MixedModeRenderer`` wraps)."""
    for r in (renderer, getattr(renderer, "_renderer", None)):
        attributes = getattr(r, "__dict__", {})
        if "draw_path" in attributes and "open_group" in attributes:
            return True
    return False


_TEXT_SIZES: dict[tuple, tuple[float, float, float]] = {}
"""(text, font properties, math?) -> (width, height, descent) as the SVG renderer measures them."""
_FONT_TABLES: dict[tuple, _FontTables] = {}


class _FontTables:
    """A font's SFNT tables, each read once (``get_sfnt_table`` makes a new dict every call)."""

    __slots__ = ("_font", "_tables")

    def __init__(self, font) -> None:
        self._font, self._tables = font, {}

    def get_sfnt_table(self, name: str):
        if name not in self._tables:
            self._tables[name] = self._font.get_sfnt_table(name)
        return self._tables[name]

    def __getattr__(self, name: str):
        return getattr(self._font, name)


@contextmanager
def _measured_once() -> Iterator[None]:
    """Inside the block, what matplotlib measures of text is measured once per process, not
    once per figure and per text: a third of drawing a report's figures, the SVGs unchanged.

    matplotlib keeps text sizes per renderer, and saving a figure makes several, so each tick
    label, title and legend entry of each figure is shaped again (FreeType, at 100 px), and
    every text's layout reads its font's SFNT tables anew (3.10+). Both depend only on the text,
    the font properties and the font file, under the rc settings :data:`RC`, which hold while
    :func:`render_svg` draws (the only place this block is entered): the SVG renderer's text
    sizes are kept by (text, font properties, math?) and each font's tables once read.
    Forked drawing children inherit what the parent measured. Where matplotlib's internals
    differ (another version), the part that does not apply is left out."""
    from matplotlib import text
    from matplotlib.backends import backend_svg

    renderer = backend_svg.RendererSVG
    measure = renderer.__dict__.get("get_text_width_height_descent")
    get_font = getattr(text, "get_font", None)

    def sized(self, s, prop, ismath):
        key = (s, prop, ismath)
        size = _TEXT_SIZES.get(key)
        if size is None:
            size = _TEXT_SIZES[(s, prop.copy(), ismath)] = measure(self, s, prop, ismath)
        return size

    def font_tables(path, *args, **kwargs):
        key = (tuple(path) if isinstance(path, list) else path, args, tuple(sorted(kwargs.items())))
        tables = _FONT_TABLES.get(key)
        if tables is None:
            tables = _FONT_TABLES[key] = _FontTables(get_font(path, *args, **kwargs))
        return tables

    if measure is not None:
        renderer.get_text_width_height_descent = sized
    if get_font is not None:  # matplotlib.text uses it for the SFNT tables alone (Text._get_layout)
        text.get_font = font_tables
    try:
        yield
    finally:
        if measure is not None:
            renderer.get_text_width_height_descent = measure
        if get_font is not None:
            text.get_font = get_font


def axis_scale(unit: str, values: Sequence[float | None]) -> tuple[float, str]:
    """(divisor, unit text) for tick labels of ``values`` in ``unit``; ``(1, "")`` for unitless
    axes (a step number)."""
    if unit in _SCALES:
        finite = [abs(v) for v in values if v is not None and math.isfinite(v)]
        top = max(finite, default=0.0)
        for divisor, name in _SCALES[unit]:
            if top >= divisor:
                return divisor, name
        return _SCALES[unit][-1]
    if unit in ("step", "", "number"):
        return 1.0, ""
    return 1.0, _UNIT_NAMES.get(unit, unit)


def _axis_label(label: str, unit_text: str) -> str:
    return f"{label} ({unit_text})" if unit_text else label


def _formatter(divisor: float) -> FuncFormatter:
    return FuncFormatter(lambda v, _pos: f"{v / divisor:,.6g}")


def _label(text: str) -> str:
    return shorten(clean_text(text), LABEL_CHARS)


def render_svg(figure: BarFigure | LineFigure | WaterfallFigure | RooflineFigure, width_in: float = WIDTH_IN,
               prefix: str | None = None) -> str:
    """The figure as an SVG element (text), ready to inline in HTML; ``width_in`` narrower for
    figures shown side by side (fonts keep their size). ``prefix`` (default ``fig-`` and the
    figure's id) starts every element id of the SVG: unique per figure drawn on a page."""
    with matplotlib.rc_context(RC), _measured_once():
        if isinstance(figure, WaterfallFigure):
            fig = _draw_waterfall(figure, width_in)
        elif isinstance(figure, RooflineFigure):
            fig = _draw_roofline(figure, width_in)
        elif isinstance(figure, BarFigure):
            fig = _draw_bars(figure, width_in)
        else:
            fig = _draw_lines(figure, width_in)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "perfreport"})
    prefix = prefix or f"fig-{re.sub(r'[^A-Za-z0-9_-]', '', figure.id)}"
    return inline_svg(buf.getvalue(), prefix, figure.title)


def _draw_bars(f: BarFigure, width_in: float = WIDTH_IN) -> Figure:
    n = len(f.bars)
    fig = _Figure(figsize=(width_in, 1.1 + 0.28 * max(n, 1)), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    values = [v for b in f.bars for v in b.values]
    divisor, unit_text = axis_scale(f.unit, values if not f.stacked else [
        sum(v for v in b.values if v is not None and math.isfinite(v)) for b in f.bars])
    ys = list(range(n))[::-1]  # first bar on top
    left = [0.0] * n
    height = 0.7 if f.stacked else 0.7 / max(len(f.segments), 1)
    for k, segment in enumerate(f.segments):
        widths = [b.values[k] if b.values[k] is not None and math.isfinite(b.values[k]) else 0.0 for b in f.bars]
        colour = SEGMENT_COLOURS.get(segment, PALETTE[k % len(PALETTE)])
        if f.stacked:
            ax.barh(ys, widths, left=left, height=height, color=colour, label=_label(segment.replace("_", " ")))
            left = [a + w for a, w in zip(left, widths)]  # drawing position, not a reported number
        else:
            ax.barh([y + 0.35 - height * (k + 0.5) for y in ys], widths, height=height, color=colour,
                    label=_label(segment.replace("_", " ")))
    ax.set_yticks(ys, [_label(b.label) for b in f.bars])
    ax.grid(axis="y", visible=False)
    ax.xaxis.set_major_formatter(_formatter(divisor))
    ax.set_xlabel(_axis_label(f.value_label.split(" (")[0], unit_text))
    if f.unit == "pct" and f.stacked:
        ax.set_xlim(0, 100)
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1.0), ncol=min(len(f.segments), 4), fontsize=8)
    return fig


def _draw_lines(f: LineFigure, width_in: float = WIDTH_IN) -> Figure:
    panels = f.panels
    fig = _Figure(figsize=(width_in, 0.9 + 2.3 * len(panels)), dpi=DPI, layout="constrained")
    axes = fig.subplots(len(panels), 1, sharex=True, sharey=True, squeeze=False)[:, 0]
    xs = [v for p in panels for line in p.lines for v in line.x]
    ys = [v for p in panels for line in p.lines for v in (*line.y, *(line.band[2] if line.band else ()))]
    x_div, x_unit = axis_scale(f.x_unit, xs)
    y_div, y_unit = axis_scale(f.y_unit, ys)
    colours: dict[str, str] = {}
    for ax, panel in zip(axes, panels):
        for line in panel.lines:
            key, _, side = line.label.rpartition(" · ")
            if side not in SIDES:
                key, side = line.label, ""
            if not key and side in SIDES:  # a line per run: one colour per run
                colour = SIDE_COLOURS[side]
            else:
                colour = colours.setdefault(key, PALETTE[len(colours) % len(PALETTE)])  # same line, same colour
            y = [float("nan") if v is None else v for v in line.y]
            dashed = side == "baseline"
            style = "steps-post" if f.drawstyle == "steps-post" else "default"
            if line.band:  # merged buckets: their range of values as a band, the line their busy mean
                edges, lo, hi = line.band
                lo = [float("nan") if v is None else v for v in lo]
                hi = [float("nan") if v is None else v for v in hi]
                ax.fill_between(edges, lo + lo[-1:], hi + hi[-1:], step="post", color=colour, alpha=0.25,
                                linewidth=0)
            columns = int(width_in * DPI)  # a long line: the points that draw it (:mod:`.decimate`)
            if line.faded:  # the whole series pale, then the judged points on top
                ax.plot(*drawn_points(line.x, y, columns), drawstyle=style, linewidth=1.0, color=colour, alpha=0.3,
                        linestyle="--" if dashed else "-", marker="o" if len(line.x) <= 40 else None, markersize=3)
                faded = set(line.faded)
                y = [float("nan") if i in faded else v for i, v in enumerate(y)]
            ax.plot(*drawn_points(line.x, y, columns), drawstyle=style,
                    linewidth=1.0, color=colour, linestyle="--" if dashed else "-",
                    marker="o" if len(line.x) <= 40 else None, markersize=3, label=_label(line.label))
            if line.marked:
                shown = _shown_marks(line.x, y, line.marked, xs, ys, width_in)
                ax.plot([line.x[i] for i in shown], [y[i] for i in shown], linestyle="none",
                        marker="x", markersize=8, markeredgewidth=2, color="#cf222e")
        if panel.title:
            ax.set_title(_label(panel.title), loc="left", fontsize=9, fontweight="bold")
        ax.set_ylabel(_axis_label(f.y_label, y_unit))
        ax.yaxis.set_major_formatter(_formatter(y_div))
        if panel.lines:  # every line named: up to 16 in one column, more in two, smaller
            many = len(panel.lines) > 16
            ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=6.5 if many else 8, ncol=2 if many else 1)
    # after every panel is drawn: the y axis is shared, and fixing a limit stops autoscaling
    axes[0].set_ylim(bottom=min(0.0, min((v for v in ys if v is not None and math.isfinite(v)), default=0.0)))
    axes[-1].set_xlabel(_axis_label(f.x_label, x_unit))
    axes[-1].xaxis.set_major_formatter(_formatter(x_div))
    if f.x_unit == "step":
        axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    if f.x_ticks:
        positions = tick_positions(len(f.x_ticks))
        axes[-1].set_xticks([p + 1 for p in positions], [_label(f.x_ticks[p]) for p in positions],
                            rotation=30, ha="right", fontsize=7)
    return fig


def _shown_marks(x: Sequence[float], y: Sequence[float], marked: Sequence[int], xs: Sequence, ys: Sequence,
                 width_in: float) -> list[int]:
    """The marked points drawn: all up to :data:`MAX_MARKS`; past it, one per cell of a grid of
    :data:`MARK_CELL_PX` pixels over the figure's x and y ranges (the first point of each cell),
    which draws the same picture: an 8-point cross covers ~11 pixels, and the crosses a cell
    holds lie on top of each other. Every step of a 37,000-step rank marked made a 5 MB figure
    of 75,000 crosses (49 MB at 173,000 steps)."""
    if len(marked) <= MAX_MARKS:
        return list(marked)
    import numpy as np

    index = np.asarray(marked, dtype=np.int64)
    px, py = np.asarray(x, dtype=np.float64)[index], np.asarray(y, dtype=np.float64)[index]
    x_all, y_all = (np.asarray([v for v in vs if v is not None and math.isfinite(v)], dtype=np.float64)
                    for vs in (xs, ys))
    keep = np.isfinite(px) & np.isfinite(py)
    if not len(x_all) or not len(y_all) or not keep.any():
        return list(marked)
    columns, rows = width_in * DPI / MARK_CELL_PX, 2.3 * DPI / MARK_CELL_PX  # (a panel's size)
    x0, y0 = float(x_all.min()), min(0.0, float(y_all.min()))  # (the y axis starts at 0 or below)
    cx = np.floor((px[keep] - x0) / (max(float(x_all.max()) - x0, 1e-300) / columns))
    cy = np.floor((py[keep] - y0) / (max(float(y_all.max()) - y0, 1e-300) / rows))
    _, first = np.unique(cx * (rows + 2) + cy, return_index=True)
    return index[keep][np.sort(first)].tolist()


def tick_positions(n: int, most: int = 0) -> list[int]:
    """Indices of the category labels to draw: all up to ``most`` (:data:`MAX_X_TICKS`), else
    evenly spaced ones that always include the first and the last."""
    most = most or MAX_X_TICKS
    if n <= most:
        return list(range(n))
    step = math.ceil((n - 1) / (most - 1))
    picked = list(range(0, n - 1, step))
    if n - 1 - picked[-1] < step / 2 and len(picked) > 1:
        picked.pop()  # keep the last label clear of its neighbour
    return picked + [n - 1]


def _draw_waterfall(f: WaterfallFigure, width_in: float = WIDTH_IN) -> Figure:
    """Horizontal waterfall, top to bottom: the start bar, each part floating from the running
    total (red: adds time, green: saves time) with its signed value, the end bar."""
    rows = [(f.start[0], 0.0, f.start[1], "#8c8c8c")]
    level = f.start[1]
    for label, delta in f.steps:
        rows.append((label, level, delta, "#e15759" if delta > 0 else "#59a14f"))
        level += delta  # drawing position, not a reported number
    rows.append((f.end[0], 0.0, f.end[1], "#4e79a7"))
    fig = _Figure(figsize=(width_in, 0.8 + 0.3 * len(rows)), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    divisor, unit_text = axis_scale(f.unit, [r[1] + r[2] for r in rows] + [r[1] for r in rows])
    ys = list(range(len(rows)))[::-1]
    for y, (label, left, width, colour) in zip(ys, rows):
        ax.barh(y, width, left=left, height=0.6, color=colour)
        text = f"{'+' if width > 0 and colour != '#8c8c8c' and colour != '#4e79a7' else ''}{width / divisor:,.3g}"
        ax.annotate(text, (max(left, left + width), y), xytext=(3, 0), textcoords="offset points", va="center",
                    fontsize=8)
    ax.set_yticks(ys, [shorten(clean_text(r[0]), WATERFALL_LABEL_CHARS) for r in rows])
    ax.grid(axis="y", visible=False)
    ax.xaxis.set_major_formatter(_formatter(divisor))
    ax.set_xlabel(_axis_label(f.value_label, unit_text))
    ax.set_xlim(0, max(r[1] + max(r[2], 0) for r in rows) * 1.12)
    return fig


_PROLOG = re.compile(r"<\?xml[^>]*\?>\s*|<!DOCTYPE[^>]*>\s*|<metadata>.*?</metadata>\s*", re.DOTALL)
_ROOT = re.compile(r"<svg\b([^>]*)>")


def _draw_roofline(f: RooflineFigure, width_in: float = WIDTH_IN) -> Figure:
    """Log-log roofline: each roof is flat at its peak and slopes with the memory bandwidth below
    the ridge point (peak / bandwidth FLOP/B); points are numbered, the legend names them."""
    fig = _Figure(figsize=(width_in, 3.6 + 0.16 * len(f.points)), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    ridges = [peak / f.bandwidth_tbps for _, peak in f.peaks]
    xs = [p.intensity for p in f.points] + ridges
    lo, hi = min(xs) / 4, max(xs) * 4
    grid = [lo * (hi / lo) ** (k / 200) for k in range(201)]
    for k, (label, peak) in enumerate(f.peaks):
        ax.plot(grid, [min(peak, f.bandwidth_tbps * x) for x in grid], color=PALETTE[k % len(PALETTE)],
                linewidth=1.2, label=_label(f"roof: {label} {peak:,.0f} TFLOPS/s, {f.bandwidth_tbps:.2f} TB/s"))
    for n, p in enumerate(f.points, start=1):
        ax.scatter([p.intensity], [p.tflops], s=22, color="#333333", zorder=3,
                   label=_label(f"{n}. {p.label}"))
        ax.annotate(str(n), (p.intensity, p.tflops), textcoords="offset points", xytext=(4, 3), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:,.10g}")  # 0.001 … 1,000: the report's fonts draw no mathtext
    ax.xaxis.set_major_formatter(plain)
    ax.yaxis.set_major_formatter(plain)
    ax.set_xlabel("arithmetic intensity (FLOP/B)")
    ax.set_ylabel("achieved (TFLOPS/s)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    return fig


def inline_svg(svg: str, prefix: str, title: str) -> str:
    """An SVG document as an element to inline: prolog and metadata dropped, ids prefixed,
    sized by CSS through its viewBox, titled for screen readers."""
    svg = _PROLOG.sub("", svg)
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}-{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{prefix}-{m.group(1)})", svg)
    svg = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{prefix}-{m.group(1)}"', svg)

    def root(m: re.Match) -> str:
        attrs = re.sub(r'\s(width|height)="[^"]*"', "", m.group(1))
        return f'<svg{attrs} class="plot" role="img" preserveAspectRatio="xMinYMin meet">'

    svg = _ROOT.sub(root, svg, count=1)
    escaped = clean_text(title).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return svg.replace('role="img" preserveAspectRatio="xMinYMin meet">',
                       f'role="img" preserveAspectRatio="xMinYMin meet"><title>{escaped}</title>', 1).strip()
