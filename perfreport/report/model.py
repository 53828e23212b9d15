"""The report model: what a report says, with no formatting.

A :class:`Report` is built from a JSON-ready document (``report/build.py``) and rendered by one
module per format (HTML, Markdown, PDF, JUnit). It holds values exactly as the document has
them, each with its unit, so every number a renderer shows is a number of the document; the
renderers only format (µs as "1.23 ms", shares as "12.3 %") and escape.

Blocks of a section, in order: :class:`Paragraph`, :class:`Table`, :class:`LineFigure`,
:class:`BarFigure`. ``importance`` orders sections for budget-aware renderers (Markdown for a
PR comment): 0 is kept longest, higher numbers are truncated first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union

STATUSES = ("fail", "warn", "inconclusive", "pass")
"""Check and verdict states, most severe first: the order in which checks are listed."""

UNITS = ("us", "ms", "pct", "pp", "bytes", "gbps", "count", "number", "p_value", "text", "name", "bool",
         "status")
"""Units a column may declare. ``us``/``ms`` durations, ``pct`` a share 0-100, ``pp`` percentage
points, ``bytes``, ``gbps`` (GB/s), ``count`` integers, ``number`` unitless, ``p_value``,
``text`` (short fixed strings), ``name`` (arbitrary strings from a trace: escaped and shortened
for display), ``bool``, ``status`` (one of :data:`STATUSES`)."""


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    label: str
    unit: str
    """One of :data:`UNITS`, or "mixed" when every cell is a :class:`Value`."""
    signed: bool = False
    """Show an explicit + on positive values (deltas)."""


@dataclass(frozen=True, slots=True)
class Value:
    """A table cell whose unit is its own (a checks table mixes ms, % and counts in one column)."""

    value: float | None
    unit: str
    signed: bool = False


@dataclass(frozen=True, slots=True)
class Interval:
    """A table cell holding a confidence interval [lo, hi] in ``unit``."""

    lo: float | None
    hi: float | None
    unit: str


@dataclass(frozen=True, slots=True)
class Table:
    """Rows picked from a document table, values unchanged. ``rows_total`` is how many rows the
    document has; fewer in ``rows`` means the table was truncated (said in the renderers).
    ``marked`` are row indices to highlight (outliers, failed checks); ``collapsed`` tables are
    folded by default (HTML/Markdown ``<details>``)."""

    id: str
    title: str
    columns: tuple[Column, ...]
    rows: tuple[tuple[Any, ...], ...]
    rows_total: int
    marked: tuple[int, ...] = ()
    collapsed: bool = False
    note: str = ""

    @property
    def truncated(self) -> bool:
        return len(self.rows) < self.rows_total


@dataclass(frozen=True, slots=True)
class Line:
    """One plotted series. ``y`` may hold None (a gap); ``marked`` are point indices to mark."""

    label: str
    x: tuple[float, ...]
    y: tuple[float | None, ...]
    marked: tuple[int, ...] = ()
    faded: tuple[int, ...] = ()
    """Point indices drawn faded: samples shown for context but not judged (warm-up steps)."""
    band: tuple[tuple[float, ...], tuple[float | None, ...], tuple[float | None, ...]] | None = None
    """(bucket edges, lowest, highest value per bucket; None where the line kept its points): the
    envelope of a steps-post line's merged buckets (:func:`perfreport.analyses.series.steps_downsample`),
    drawn as a band."""


@dataclass(frozen=True, slots=True)
class Panel:
    title: str
    lines: tuple[Line, ...]


@dataclass(frozen=True, slots=True)
class LineFigure:
    """Lines over x, in one or more panels stacked vertically (baseline above candidate).
    ``drawstyle`` "steps-post": each value holds until the next point; "line": joined points."""

    id: str
    title: str
    x_label: str
    y_label: str
    x_unit: str
    y_unit: str
    """Units of the values (:data:`UNITS`); the axis labels name them."""
    panels: tuple[Panel, ...]
    drawstyle: str = "line"
    note: str = ""
    x_ticks: tuple[str, ...] = ()
    """Category labels for x = 1, 2, … (release tags with their dates): drawn instead of numbers,
    thinned to at most :data:`perfreport.report.figures.MAX_X_TICKS`."""


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    values: tuple[float | None, ...]
    """One value per segment of the figure, in ``BarFigure.segments`` order."""


@dataclass(frozen=True, slots=True)
class BarFigure:
    """Horizontal bars, one per label, stacked from ``segments`` (or grouped when not stacked)."""

    id: str
    title: str
    value_label: str
    unit: str
    segments: tuple[str, ...]
    bars: tuple[Bar, ...]
    stacked: bool = True
    note: str = ""


@dataclass(frozen=True, slots=True)
class WaterfallFigure:
    """A change split into parts: a start bar, one floating bar per part (its signed delta),
    an end bar. ``start``/``end`` are (label, value); ``steps`` (label, delta), in order."""

    id: str
    title: str
    value_label: str
    unit: str
    start: tuple[str, float]
    steps: tuple[tuple[str, float], ...]
    end: tuple[str, float]
    note: str = ""


@dataclass(frozen=True, slots=True)
class RooflinePoint:
    label: str
    intensity: float
    """Arithmetic intensity (FLOP/B)."""
    tflops: float
    """Achieved TFLOPS/s."""


@dataclass(frozen=True, slots=True)
class RooflineFigure:
    """Ops as points (arithmetic intensity, achieved TFLOPS/s) on log-log axes under the GPU's
    roofs: for each ``peaks`` entry (label, TFLOPS/s), min(peak, ``bandwidth_tbps`` × intensity)."""

    id: str
    title: str
    points: tuple[RooflinePoint, ...]
    bandwidth_tbps: float
    peaks: tuple[tuple[str, float], ...]
    note: str = ""


@dataclass(frozen=True, slots=True)
class Paragraph:
    text: str


Figure = Union[LineFigure, BarFigure, WaterfallFigure]
Block = Union[Paragraph, Table, LineFigure, BarFigure, WaterfallFigure, RooflineFigure]


@dataclass(frozen=True, slots=True)
class Section:
    id: str
    title: str
    blocks: tuple[Block, ...]
    importance: int = 5
    summary: str = ""
    """One line shown next to the collapsed section (Markdown ``<summary>``)."""

    @property
    def tables(self) -> tuple[Table, ...]:
        return tuple(b for b in self.blocks if isinstance(b, Table))

    @property
    def figures(self) -> tuple[LineFigure | BarFigure, ...]:
        return tuple(b for b in self.blocks if isinstance(b, (LineFigure, BarFigure, WaterfallFigure)))


@dataclass(frozen=True, slots=True)
class Check:
    """One gate check as the document states it. ``unit`` is the unit of baseline, candidate
    and delta ("us", "pct", "count"; a delta of a "pct" metric is in points); ``scope`` is where
    it applies ("job", "rank 3"); ``severity`` the status it gets when it trips (warn/fail);
    ``counted`` is False for a waived check (shown, not part of the verdict)."""

    name: str
    status: str
    message: str
    unit: str
    label: str = ""
    baseline: float | None = None
    candidate: float | None = None
    delta: float | None = None
    delta_pct: float | None = None
    threshold: str = ""
    scope: str = ""
    severity: str = ""
    p_value: float | None = None
    interval: tuple[float | None, float | None] | None = None
    interval_of: str = ""
    evidence: str = ""
    waiver: str = ""
    counted: bool = True


@dataclass(frozen=True, slots=True)
class Verdict:
    """The gate's decision. ``checks`` are ordered fail, warn, inconclusive, pass (stable)."""

    status: str
    headline: str
    explanation: str
    checks: tuple[Check, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Cause:
    """One ranked cause of the headline change: "GPU idle while the CPU runs X", +61.3 ms/step."""

    text: str
    delta_us: float | None
    share_pct: float | None = None


@dataclass(frozen=True, slots=True)
class Headline:
    """The one number that matters most and its top causes. ``text``: "step time +39.4 %
    (126.55 → 176.47 ms/step, p = 0.0079)" (the gate's statistic); ``causes``: the parts of
    the attribution that moved the same way, largest first; ``basis``: how the causes were
    measured when that is another statistic than the headline's (means vs the gate's medians);
    ``counts``: "1 failed · 4 warned · 24 passed findings (35 checks)"."""

    text: str
    causes: tuple[Cause, ...] = ()
    basis: str = ""
    counts: str = ""
    share_of: str = ""
    """What a single run's cause shares are of ("the step", "the trace", "the GPU span")."""
    per_step: bool = False
    """Whether a single run's cause times are per step."""


@dataclass(frozen=True, slots=True)
class Suggestion:
    """Something to try, derived from the numbers (HTA's guidance), with the evidence it rests on:
    ``evidence`` names the figures, ``section`` the report section that shows them."""

    text: str
    evidence: str
    section: str = ""


@dataclass(frozen=True, slots=True)
class Link:
    label: str
    href: str


@dataclass(frozen=True, slots=True)
class Report:
    """A whole report. ``kind`` is "analyze" (one run, no verdict) or "compare"."""

    kind: str
    title: str
    subtitle: str
    created_utc: str
    verdict: Verdict | None
    sections: tuple[Section, ...]
    command: str
    notes: tuple[str, ...] = ()
    links: tuple[Link, ...] = ()
    highlights: tuple[tuple[str, Value], ...] = ()
    """Key figures for the top of the report (label, value), picked from the document."""
    headline: Headline | None = None
    findings: tuple[Any, ...] = ()
    """:class:`perfreport.report.findings.FindingGroup` of the verdict's checks, severity first."""
    suggestions: tuple[Suggestion, ...] = ()
    overview: tuple[Block, ...] = ()
    """Figures for the first screen (step time per step, the attribution waterfall)."""
    document: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """The JSON document the report was built from: what the ``json`` format writes."""

    @property
    def status(self) -> str:
        """The verdict's status, or "info" for a single-run report."""
        return self.verdict.status if self.verdict else "info"
