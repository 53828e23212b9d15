"""Document tables -> report blocks: the building blocks the report sections are made of.

Each helper reads rows of a document table for one or two *sides* (a single run has one side,
label ""; a comparison has "baseline" and "candidate") and returns one :class:`Table`,
:class:`BarFigure` or :class:`LineFigure`, or None when no side has rows. They pick rows (top N
by a column the document has), sort them, truncate long tables and say so, reshape long tables
into bars, and attach units for the renderers; they compute no number.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..documents.cells import Records
from .model import Bar, BarFigure, Block, Column, Line, LineFigure, Panel, Section, Table

TOP_ROWS = 15
"""Rows of a top-N table (kernels, operators, movers) per side."""
COLLAPSE_ROWS = 10
"""Tables longer than this are folded by default."""
MAX_ROWS = 200
"""No rendered table is longer; the JSON document has every row."""
MAX_BARS = 48
"""Bars per figure (rank x stream x side); the first ones by rank are kept."""

NAME_KEYS = frozenset({
    "name", "key", "kernel", "launch", "aten_op", "kernel_sequence", "operator", "pattern", "file", "source",
    "gpu_name", "op", "note", "collective", "process_group", "pg_name", "checksum",
})
"""Columns holding strings from a trace (or a path): escaped and shortened when shown."""
ID_KEYS = frozenset({"rank", "stream", "step", "iteration", "min_rank", "max_rank", "first_step", "last_step",
                     "world_size", "kernel_type", "kernel_class", "direction", "idle_category", "device",
                     "rank_source", "kind", "count_change"})
"""Identifiers and fixed categories: shown as written (no thousands separator, no shortening)."""


@dataclass(frozen=True, slots=True)
class Side:
    label: str
    doc: Mapping[str, Any]


# --- columns and tables --------------------------------------------------------------------------
def unit_of(key: str) -> str:
    """The unit of a document column from its name (house rule: units are in the names)."""
    if key in NAME_KEYS:
        return "name"
    if key in ID_KEYS:
        return "text"
    if key.startswith("is_") or key in ("short_kernel", "runtime_outlier", "launch_delay_outlier", "totals_recorded"):
        return "bool"
    for unit, marks in (("pct", ("_pct",)), ("gbps", ("_gbps",)), ("bytes", ("bytes",)), ("us", ("_us",)),
                        ("ms", ("_ms",))):
        if any(key.endswith(m) or f"{m}_" in key or key.startswith(m.lstrip("_")) for m in marks):
            return unit
    return "number"


def label_of(key: str) -> str:
    """Column header from a document key: units dropped (cells carry them), % kept."""
    words = [w for w in key.split("_") if w not in ("us", "ms", "gbps")]
    return " ".join("%" if w == "pct" else w for w in words) or key


ColumnSpec = "str | tuple[str, str] | tuple[str, str, str] | Column"


def _column(spec) -> Column:
    if isinstance(spec, Column):
        return spec
    if isinstance(spec, str):
        return Column(spec, label_of(spec), unit_of(spec))
    key, label, *unit = spec
    return Column(key, label, unit[0] if unit else unit_of(key))


def records(side: Side, name: str) -> list[dict]:
    """The rows of table ``name`` of a side's document (a list from report.json, or
    :class:`perfreport.documents.cells.Records` fresh from the analyses); [] when absent or not a table.
    Inside :func:`rows_kept` a Records table is made into rows once and its rows are shared by
    every reader (read-only, as Records rows are)."""
    rows = side.doc.get(name)
    if isinstance(rows, Records):
        kept = _KEPT.get()
        if kept is not None:
            return list(kept.rows(rows))
        return rows.tolist()
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


class _KeptRows:
    """The rows of the Records tables read during one report build, up to :data:`KEPT_ROWS`
    rows in all (a document of many ranks holds more: those tables are made afresh per read)."""

    def __init__(self) -> None:
        self.tables: dict[int, tuple[Records, list[dict]]] = {}  # by id; the Records kept, so the id stays its
        self.size = 0

    def rows(self, table: Records) -> list[dict]:
        hit = self.tables.get(id(table))
        if hit is not None:
            return hit[1]
        rows = table.tolist()
        if self.size + len(rows) <= KEPT_ROWS:
            self.tables[id(table)] = (table, rows)
            self.size += len(rows)
        return rows


KEPT_ROWS = 100_000
"""Rows kept for the length of a report build (a section reads a table several times)."""
_KEPT: contextvars.ContextVar[_KeptRows | None] = contextvars.ContextVar("perfreport_kept_rows", default=None)


@contextmanager
def rows_kept() -> Iterator[None]:
    """Inside: :func:`records` makes each Records table into rows once (see :class:`_KeptRows`)."""
    token = _KEPT.set(_KeptRows())
    try:
        yield
    finally:
        _KEPT.reset(token)


def order_key(value: Any) -> tuple:
    """Sort key that puts None last and never compares str with numbers."""
    if value is None:
        return (2, 0)
    if isinstance(value, str):
        return (1, value)
    return (0, value)


def sorted_rows(rows: list[dict], keys: Sequence[str], descending: bool = False) -> list[dict]:
    """Rows sorted by ``keys`` (stable); rows missing the first key go last either way."""
    if len(keys) == 1:  # (the usual case, thousands of rows: no generator per row)
        first = keys[0]

        def key(r: dict) -> tuple:
            return (order_key(r.get(first)),)
    else:
        def key(r: dict) -> tuple:
            return tuple([order_key(r.get(k)) for k in keys])
    if not descending:
        return sorted(rows, key=key)
    present = [r for r in rows if r.get(keys[0]) is not None]
    return sorted(present, key=key, reverse=True) + [r for r in rows if r.get(keys[0]) is None]


def table(tid: str, title: str, sides: Sequence[Side], name: str, columns: Iterable, *,
          where: Callable[[dict], bool] | None = None, sort: Sequence[str] = ("rank",), descending: bool = False,
          top: int | None = None, mark: Callable[[dict], bool] | None = None, note: str = "",
          collapsed: bool | None = None) -> Table | None:
    """Rows of document table ``name`` of every side as a :class:`Table` (None when no side has
    rows). Rows are filtered by ``where``, sorted by ``sort`` (then by side), cut to ``top`` rows
    per side when given, and to :data:`MAX_ROWS` overall; a ``run`` column is added for two sides."""
    cols = [_column(c) for c in columns]
    picked, total = [], 0
    for index, side in enumerate(sides):
        first = _first_rows(side.doc.get(name), sort, descending if top is not None else False,
                            top if top is not None else MAX_ROWS) if where is None else None
        if first is not None:  # a long table, sorted by number columns: only the rows shown are made
            rows, count = first
        else:
            rows = [r for r in records(side, name) if where is None or where(r)]
            count = len(rows)
            if top is not None:
                rows = sorted_rows(rows, sort, descending)[:top]
        total += count
        picked += [(index, side.label, r) for r in rows]
    if not picked:
        return None
    if top is None:
        picked.sort(key=lambda p: (*(order_key(p[2].get(k)) for k in sort), p[0]))
    picked = picked[:MAX_ROWS]
    if len(sides) > 1:
        cols.insert(0, Column("run", "run", "text"))
    rows = tuple(tuple(([label] if len(sides) > 1 else []) + [r.get(c.key) for c in cols[len(sides) > 1:]])
                 for _, label, r in picked)
    marked = tuple(i for i, (_, _, r) in enumerate(picked) if mark is not None and mark(r))
    if top is not None and total > len(rows):
        by = next((c.label for c in cols if c.key == sort[0]), label_of(sort[0]))
        note = (note + " " if note else "") + f"Top {top} per run by {by}; the JSON has all {total}."
    elif total > len(rows):
        note = (note + " " if note else "") + first_rows_note(len(rows), total)
    if collapsed is None:  # top-N tables are the point of their section: open
        collapsed = top is None and len(rows) > COLLAPSE_ROWS
    return Table(tid, title, tuple(cols), rows, total, marked, collapsed, note)


def first_rows_note(shown: int, total: int) -> str:
    """What a table cut to its first rows says of it (the PDF's brief replaces it with its own)."""
    return f"First {shown} of {total} rows; the JSON has all."


FIRST_ROWS_FROM = 1_000
"""Tables at least this long are cut to the rows shown before they are made into dicts."""


def _first_rows(table: Any, sort: Sequence[str], descending: bool, limit: int) -> tuple[list[dict], int] | None:
    """The first ``limit`` rows of a long :class:`Records` table in the order
    :func:`sorted_rows` gives (stable; missing values last; ``descending`` for one key only),
    and its length; None where that needs the rows themselves (a short table, a text or missing
    sort column). A job of 37,000 steps has tables of as many rows per side, of which a report
    shows :data:`MAX_ROWS`. Sorting the numbers in numpy instead of 37,000 dicts by a key
    function, and the checks' samples cleaned in C (:func:`~perfreport.documents.cells.finite_float_list`),
    took the report's build of a compare of two such 1 GB ranks from 1.40 to 0.62 s."""
    import numpy as np

    if not isinstance(table, Records) or len(table) < FIRST_ROWS_FROM or (descending and len(sort) != 1):
        return None
    frame = table.frame
    keys = []
    for key in sort:
        column = frame[key] if key in frame.columns else None
        if getattr(column, "ndim", 0) != 1:
            return None  # absent, or a name two columns share
        values = column.to_numpy()
        if not isinstance(values, np.ndarray) or values.dtype.kind not in "biuf":
            return None  # text, objects, nullable numbers: ordered as the rows are (order_key)
        keys.append(values)
    if descending:  # present values, largest first, ties in table order; then the missing ones
        values = keys[0]
        present = np.flatnonzero(np.isfinite(values)) if values.dtype.kind == "f" else np.arange(len(values))
        backwards = present[::-1]
        order = backwards[np.argsort(values[backwards], kind="stable")][::-1]
        if values.dtype.kind == "f":
            order = np.concatenate([order, np.flatnonzero(~np.isfinite(values))])
    else:  # np.lexsort is stable and puts NaN (a missing value: None in the rows) last, as order_key
        order = np.lexsort([np.where(np.isinf(k), np.nan, k) if k.dtype.kind == "f" else k for k in keys[::-1]])
    return Records(frame.iloc[order[:limit]]).tolist(), len(frame)


def side_label(rank: Any, side: str, *more: Any) -> str:
    parts = [f"rank {rank}", *(str(m) for m in more)]
    return " · ".join(parts + ([side] if side else []))


def stacked_bars(fid: str, title: str, sides: Sequence[Side], name: str, segments: Sequence[tuple[str, str]],
                 value_label: str, unit: str, *, group: Sequence[str] = ("rank",),
                 where: Callable[[dict], bool] | None = None) -> BarFigure | None:
    """One bar per row (per ``group`` key and side) with ``segments`` = (document column,
    legend label), in rank order with baseline before candidate."""
    bars = []
    for index, side in enumerate(sides):
        for r in records(side, name):
            if where is None or where(r):
                key = tuple(order_key(r.get(k)) for k in group)
                bars.append((key, index, Bar(_bar_label(r, group, side.label), tuple(r.get(c) for c, _ in segments))))
    if not bars:
        return None
    bars.sort(key=lambda b: (b[0], b[1]))
    return BarFigure(fid, title, value_label, unit, tuple(s for _, s in segments),
                     tuple(b for _, _, b in bars[:MAX_BARS]),
                     note=f"First {MAX_BARS} of {len(bars)} bars." if len(bars) > MAX_BARS else "")


def _bar_label(r: dict, group: Sequence[str], side: str) -> str:
    more = [f"{k} {r.get(k)}" for k in group if k != "rank"]
    return side_label(r.get("rank"), side, *more)


def pivot_bars(fid: str, title: str, sides: Sequence[Side], name: str, group: Sequence[str], category: str,
               value: str, value_label: str, unit: str, categories: Sequence[str] | None = None) -> BarFigure | None:
    """Bars from a long table (one row per group and category): one bar per group and side,
    one segment per category (document order when ``categories`` is None)."""
    cats: list[str] = list(categories or [])
    bars: dict[tuple, dict] = {}
    for index, side in enumerate(sides):
        for r in records(side, name):
            c = str(r.get(category))
            if categories is None and c not in cats:
                cats.append(c)
            key = (tuple(order_key(r.get(k)) for k in group), index)
            bars.setdefault(key, {"label": _bar_label(r, group, side.label)})[c] = r.get(value)
    if not bars:
        return None
    ordered = [bars[k] for k in sorted(bars)]
    return BarFigure(fid, title, value_label, unit, tuple(cats),
                     tuple(Bar(b["label"], tuple(b.get(c) for c in cats)) for b in ordered[:MAX_BARS]),
                     note=f"First {MAX_BARS} of {len(ordered)} bars." if len(ordered) > MAX_BARS else "")


def series_figure(fid: str, title: str, sides: Sequence[Side], kind: str, x_label: str, y_label: str,
                  *, one_panel: bool = False) -> LineFigure | None:
    """A figure from the document's downsampled ``series[kind]``: one panel per side (or one
    panel with every side's lines when ``one_panel``)."""
    panels, x_unit, y_unit, style, notes, banded = [], "", "", "line", [], False
    for side in sides:
        entry = (side.doc.get("series") or {}).get(kind)
        if not isinstance(entry, dict) or not entry.get("lines"):
            continue
        x_unit, y_unit, style = entry.get("x_unit", ""), entry.get("y_unit", ""), entry.get("drawstyle", "line")
        lines = tuple(Line(side_label(line["rank"], side.label if one_panel else "", line["label"])
                           if kind != "step_time" else side_label(line["rank"], side.label if one_panel else ""),
                           tuple(line["x"]), tuple(line["y"]), band=_band(line.get("band")))
                      for line in entry["lines"] if _drawable(line))
        if not lines:
            continue
        banded = banded or any(line.band for line in lines)
        if entry.get("lines_total", len(lines)) > len(lines):
            notes.append(f"{side.label or 'trace'}: {len(lines)} of {entry['lines_total']} lines (highest peaks)")
        panels.append(Panel(side.label, lines))
    if not panels or (x_unit == "step" and not per_step_worth_drawing(line for p in panels for line in p.lines)):
        return None
    if one_panel:
        panels = [Panel("", tuple(line for p in panels for line in p.lines))]
    if banded:
        notes.append(BAND_NOTE)
    note = "; ".join(notes)
    return LineFigure(fid, title, x_label, y_label, x_unit, y_unit, tuple(panels), style, note)


def per_step_worth_drawing(lines: Iterable[Line]) -> bool:
    """Whether lines over profiler steps show a trend: some line has two or more finite points.
    A one-step job's "per step" plot is a lone dot on an invented axis: not drawn. (Read up to
    the second finite point: a line of 173,000 steps is not counted through.)"""
    for line in lines:
        finite = (v for v in line.y if isinstance(v, (int, float)) and math.isfinite(v))
        if next(finite, None) is not None and next(finite, None) is not None:
            return True
    return False


BAND_NOTE = ("shaded: where a line changes more often than the plot can show, the range of its values in each "
             "time slice; the line there holds the slice's mean while non-zero, for exactly its non-zero time")


def _drawable(line: Mapping[str, Any]) -> bool:
    """A line with at least one finite value (an empty line would draw an empty plot)."""
    values = [*(line.get("y") or ()), *((line.get("band") or {}).get("hi") or ())]
    return any(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def _band(band: Mapping[str, Any] | None):
    if not isinstance(band, Mapping) or not band.get("x"):
        return None
    return tuple(band["x"]), tuple(band.get("lo") or ()), tuple(band.get("hi") or ())


# --- sections --------------------------------------------------------------------------------------
def _blocks(*blocks: Block | None) -> tuple[Block, ...]:
    return tuple(b for b in blocks if b is not None)


def has_data(block: Block | None) -> bool:
    """Whether a block is worth drawing: a line or bar figure needs a finite non-zero value (one
    of only zeros or gaps draws an empty plot with an invented axis, −0.04 … 0.04); other blocks
    always are."""
    if isinstance(block, LineFigure):
        values = [v for p in block.panels for line in p.lines
                  for v in (*line.y, *(line.band[2] if line.band else ()))]
    elif isinstance(block, BarFigure):
        values = [v for b in block.bars for v in b.values]
    else:
        return block is not None
    return any(isinstance(v, (int, float)) and math.isfinite(v) and v != 0 for v in values)


def figures_with_data(*figures: Block | None) -> tuple[Block, ...]:
    """The given figures that :func:`has_data`, in order (None ones dropped)."""
    return tuple(f for f in figures if has_data(f))


def make_section(sid: str, title: str, importance: int, summary: str, *blocks: Block | None) -> Section | None:
    """A :class:`Section` of the given blocks (None ones and figures without data dropped); None
    when no table or figure is left."""
    kept = tuple(b for b in _blocks(*blocks) if has_data(b))
    if not any(isinstance(b, (Table, LineFigure, BarFigure)) for b in kept):
        return None
    return Section(sid, title, kept, importance, summary)
