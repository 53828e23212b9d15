"""Document -> Report: pick, order and label what a report shows. Pure; computes no number.

The input is a JSON-ready document: the summary document of one run
(:func:`perfreport.pipeline.summary_document`, "analyze") or the comparison document written
by :mod:`perfreport.report.json_report` ("compare": a verdict, its checks, the trace diff, and
the summary document of each side). Every value in the report is a value of the document; this
module only picks rows (top N by a column the document has), sorts them, truncates long tables
and says so, reshapes long tables into bars, and attaches units for the renderers.

Both kinds share the analysis sections. A single run has one *side* (label ""); a comparison
has two, "baseline" and "candidate", shown side by side (a ``run`` column in tables, one bar
or panel per side in figures). Missing tables (an older document, an analysis that found
nothing) drop their block, never the report.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._io import json_text
from .model import (
    STATUSES, Bar, BarFigure, Block, Check, Column, Interval, Line, LineFigure, Link, Panel, Paragraph, Report,
    Section, Table, Value, Verdict,
)

TOP_ROWS = 15
"""Rows of a top-N table (kernels, operators, movers) per side."""
COLLAPSE_ROWS = 10
"""Tables longer than this are folded by default."""
MAX_ROWS = 200
"""No rendered table is longer; the JSON document has every row."""
MAX_BARS = 48
"""Bars per figure (rank x stream x side); the first ones by rank are kept."""
SIDES = ("baseline", "candidate")
COMPARE_KIND = "perfreport.compare"
"""``kind`` of a comparison document (perfreport.report.json_report)."""
BANNER_CHECKS = 10
"""Failed and warned checks listed in the verdict banner; the checks table has all."""

NAME_KEYS = frozenset({
    "name", "key", "kernel", "launch", "aten_op", "kernel_sequence", "operator", "pattern", "file", "source",
    "gpu_name", "op", "note", "collective", "process_group", "pg_name", "sha256",
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


def _records(side: Side, name: str) -> list[dict]:
    rows = side.doc.get(name)
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def _order_key(value: Any) -> tuple:
    """Sort key that puts None last and never compares str with numbers."""
    if value is None:
        return (2, 0)
    if isinstance(value, str):
        return (1, value)
    return (0, value)


def sorted_rows(rows: list[dict], keys: Sequence[str], descending: bool = False) -> list[dict]:
    """Rows sorted by ``keys`` (stable); rows missing the first key go last either way."""
    def key(r: dict) -> tuple:
        return tuple(_order_key(r.get(k)) for k in keys)
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
        rows = [r for r in _records(side, name) if where is None or where(r)]
        total += len(rows)
        if top is not None:
            rows = sorted_rows(rows, sort, descending)[:top]
        picked += [(index, side.label, r) for r in rows]
    if not picked:
        return None
    if top is None:
        picked.sort(key=lambda p: (*(_order_key(p[2].get(k)) for k in sort), p[0]))
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
        note = (note + " " if note else "") + f"First {len(rows)} of {total} rows; the JSON has all."
    if collapsed is None:  # top-N tables are the point of their section: open
        collapsed = top is None and len(rows) > COLLAPSE_ROWS
    return Table(tid, title, tuple(cols), rows, total, marked, collapsed, note)


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
        for r in _records(side, name):
            if where is None or where(r):
                key = tuple(_order_key(r.get(k)) for k in group)
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
        for r in _records(side, name):
            c = str(r.get(category))
            if categories is None and c not in cats:
                cats.append(c)
            key = (tuple(_order_key(r.get(k)) for k in group), index)
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
    panels, x_unit, y_unit, style, notes = [], "", "", "line", []
    for side in sides:
        entry = (side.doc.get("series") or {}).get(kind)
        if not isinstance(entry, dict) or not entry.get("lines"):
            continue
        x_unit, y_unit, style = entry.get("x_unit", ""), entry.get("y_unit", ""), entry.get("drawstyle", "line")
        lines = tuple(Line(side_label(line["rank"], side.label if one_panel else "", line["label"])
                           if kind != "step_time" else side_label(line["rank"], side.label if one_panel else ""),
                           tuple(line["x"]), tuple(line["y"])) for line in entry["lines"])
        if entry.get("lines_total", len(lines)) > len(lines):
            notes.append(f"{side.label or 'trace'}: {len(lines)} of {entry['lines_total']} lines (highest peaks)")
        panels.append(Panel(side.label, lines))
    if not panels:
        return None
    if one_panel:
        panels = [Panel("", tuple(line for p in panels for line in p.lines))]
    note = "; ".join(notes)
    return LineFigure(fid, title, x_label, y_label, x_unit, y_unit, tuple(panels), style, note)


# --- sections --------------------------------------------------------------------------------------
def _blocks(*blocks: Block | None) -> tuple[Block, ...]:
    return tuple(b for b in blocks if b is not None)


def _section(sid: str, title: str, importance: int, summary: str, *blocks: Block | None) -> Section | None:
    kept = _blocks(*blocks)
    if not any(isinstance(b, (Table, LineFigure, BarFigure)) for b in kept):
        return None
    return Section(sid, title, kept, importance, summary)


def overview_section(sides: Sequence[Side]) -> Section | None:
    return _section(
        "overview", "Ranks and steps", 1, "GPU busy time and step time per rank",
        table("summary", "Ranks", sides, "summary",
              ["rank", ("gpu_name", "GPU"), "events", "kernels", "memcpy", "memset", ("gpu_busy_us", "GPU busy"),
               ("gpu_busy_pct", "GPU busy %"), "steps", ("span_us", "trace span"), "note"], collapsed=False),
        table("step_times", "Step time per rank", sides, "step_times",
              ["rank", "steps", ("wall_us_mean", "mean"), ("wall_us_median", "median"), ("wall_us_min", "min"),
               ("wall_us_max", "max"), ("wall_us_std", "std"), ("gpu_busy_us_mean", "GPU busy per step"),
               ("gpu_busy_pct", "GPU busy %")], collapsed=False),
    )


def temporal_section(sides: Sequence[Side]) -> Section | None:
    return _section(
        "temporal", "Temporal breakdown", 2, "compute, non-compute and idle share of the GPU span per rank",
        Paragraph("Over each rank's GPU span (first to last GPU activity): compute is the time any computation "
                  "kernel runs, non-compute is communication and memory time not hidden under compute, idle is "
                  "the rest. The three shares add up to 100 %."),
        stacked_bars("temporal_bars", "GPU time per rank", sides, "temporal_breakdown",
                     [("compute_pct", "compute"), ("non_compute_pct", "non-compute"), ("idle_pct", "idle")],
                     "share of the GPU span (%)", "pct"),
        table("temporal_breakdown", "Temporal breakdown per rank", sides, "temporal_breakdown",
              ["rank", ("gpu_span_us", "GPU span"), ("busy_us", "busy"), ("idle_us", "idle"),
               ("compute_us", "compute"), ("non_compute_us", "non-compute"), ("idle_pct", "idle %"),
               ("compute_pct", "compute %"), ("non_compute_pct", "non-compute %")]),
    )


def idle_section(sides: Sequence[Side]) -> Section | None:
    return _section(
        "idle", "Idle time per stream", 3, "GPU idle time per stream by cause",
        Paragraph("Gaps between GPU work on each stream: host wait (the launch came only after the stream had "
                  "drained), kernel wait (gaps under 30 µs: launch overhead) and other."),
        pivot_bars("idle_bars", "Idle time per stream", sides, "idle_breakdown", ("rank", "stream"),
                   "idle_category", "idle_us", "idle time", "us", ("host_wait", "kernel_wait", "other")),
        table("idle_breakdown", "Idle time per stream and cause", sides, "idle_breakdown",
              ["rank", "stream", ("idle_category", "cause"), ("idle_us", "idle"), "gaps",
               ("idle_share_pct", "share of stream idle %")], sort=("rank", "stream")),
        table("idle_interval_stats", "Idle gap statistics", sides, "idle_interval_stats",
              ["rank", "stream", ("idle_category", "cause"), "count", ("mean_us", "mean"), ("p50_us", "median"),
               ("p75_us", "p75"), ("max_us", "max")], sort=("rank", "stream"), collapsed=True),
    )


def kernel_section(sides: Sequence[Side]) -> Section | None:
    multi_rank = any(len(_records(s, "summary")) > 1 for s in sides)
    return _section(
        "kernels", "Kernel breakdown", 3, "top kernels, kernel type shares, spread across ranks",
        pivot_bars("kernel_type_bars", "Kernel type shares of GPU busy time", sides, "kernel_type_breakdown",
                   ("rank",), "kernel_type", "busy_pct", "share of GPU busy time (%)", "pct"),
        table("kernel_type_breakdown", "Kernel types", sides, "kernel_type_breakdown",
              ["rank", ("kernel_type", "type"), ("time_us", "time"), ("busy_pct", "share of busy %")]),
        table("kernel_metrics", "Top kernels", sides, "kernel_metrics",
              ["rank", ("kernel_class", "class"), "name", "count", ("sum_us", "total"), ("mean_us", "mean"),
               ("max_us", "max"), ("min_us", "min")], sort=("sum_us",), descending=True, top=TOP_ROWS),
        table("kernel_rank_distribution", "Kernel time across ranks", sides, "kernel_rank_distribution",
              [("kernel_class", "class"), "name", "ranks", ("sum_us_mean", "mean per rank"),
               ("sum_us_min", "min"), ("sum_us_max", "max"), ("sum_us_std", "std"), "min_rank", "max_rank"],
              sort=("sum_us_mean",), descending=True, top=TOP_ROWS) if multi_rank else None,
    )


def operator_section(sides: Sequence[Side]) -> Section | None:
    cols = [("key", "operator"), ("count_per_step", "calls per step"), ("dur_per_step_us", "time per step"),
            ("dur_per_call_us", "per call")]
    return _section(
        "operators", "Top operators", 4, "CPU operators and GPU kernels by time per step",
        table("op_profile_cpu", "CPU operators (nested: times overlap)", sides, "op_profile", cols,
              where=lambda r: r.get("kind") == "cpu_op", sort=("dur_per_step_us",), descending=True, top=TOP_ROWS),
        table("op_profile_gpu", "GPU kernels (names normalised)", sides, "op_profile",
              [("key", "kernel"), *cols[1:]],
              where=lambda r: r.get("kind") == "gpu", sort=("dur_per_step_us",), descending=True, top=TOP_ROWS),
    )


def overlap_section(sides: Sequence[Side]) -> Section | None:
    has_comm = any((r.get("comm_us") or 0) > 0 for s in sides for r in _records(s, "comm_comp_overlap"))
    return _section(
        "overlap", "Communication / computation overlap", 4, "collective time hidden under compute per rank",
        Paragraph("Overlap is the time communication kernels run while computation kernels run too; exposed "
                  "communication is the rest." + ("" if has_comm else " These traces have no communication "
                                                                         "kernels.")),
        stacked_bars("overlap_bars", "Communication time per rank", sides, "comm_comp_overlap",
                     [("overlap_us", "overlapped with compute"), ("exposed_comm_us", "exposed")],
                     "communication time", "us") if has_comm else None,
        table("comm_comp_overlap", "Overlap per rank", sides, "comm_comp_overlap",
              ["rank", ("comm_us", "communication"), ("compute_us", "computation"), ("overlap_us", "overlapped"),
               ("exposed_comm_us", "exposed"), ("overlap_pct", "overlap % of comm")]),
    )


def _outlier(r: dict) -> bool:
    return bool((r.get("runtime_outliers") or 0) > 0 or (r.get("launch_delay_outliers") or 0) > 0)


def launch_figure(sides: Sequence[Side]) -> LineFigure | None:
    """Launch delay p95 per step, points marked where the step has outliers."""
    lines = []
    for side in sides:
        rows = [r for r in _records(side, "launch_stats_by_step") if (r.get("iteration") or -1) >= 0]
        for rank in sorted({r.get("rank") for r in rows}, key=_order_key):
            pts = sorted((r for r in rows if r.get("rank") == rank), key=lambda r: r["iteration"])
            lines.append(Line(side_label(rank, side.label), tuple(r["iteration"] for r in pts),
                              tuple(r.get("launch_delay_p95_us") for r in pts),
                              tuple(i for i, r in enumerate(pts) if _outlier(r))))
    if not lines:
        return None
    return LineFigure("launch_delay", "Launch delay per step (p95; ✕ = step with outliers)", "profiler step",
                      "launch delay p95", "step", "us", (Panel("", tuple(lines)),), "line")


def launch_section(sides: Sequence[Side]) -> Section | None:
    return _section(
        "launch", "Kernel launches", 4, "launch call time and launch delay, outliers marked",
        Paragraph("Launch delay: how long GPU work waited after its launch call returned. Rows and steps with "
                  "runtime outliers (calls over 50 µs) or launch-delay outliers (over 100 µs) are marked."),
        launch_figure(sides),
        table("launch_stats", "Launch statistics per call", sides, "launch_stats",
              ["rank", ("launch", "call"), "launches", ("gpu_ops", "GPU ops"), ("cpu_dur_mean_us", "call mean"),
               ("cpu_dur_p95_us", "call p95"), ("launch_delay_mean_us", "delay mean"),
               ("launch_delay_p95_us", "delay p95"), ("launch_delay_max_us", "delay max"),
               ("short_kernels", "short kernels"), ("runtime_outliers", "runtime outliers"),
               ("launch_delay_outliers", "delay outliers")], sort=("rank", "launch"), mark=_outlier),
        table("launch_stats_by_step", "Launch statistics per step", sides, "launch_stats_by_step",
              ["rank", ("iteration", "step"), "launches", ("launch_delay_p50_us", "delay p50"),
               ("launch_delay_p95_us", "delay p95"), ("launch_delay_max_us", "delay max"),
               ("runtime_outliers", "runtime outliers"), ("launch_delay_outliers", "delay outliers")],
              sort=("rank", "iteration"), mark=_outlier, collapsed=True),
    )


def queue_section(sides: Sequence[Side]) -> Section | None:
    return _section(
        "queue", "Launch queue and copy bandwidth over time", 5, "queue length and memcpy bandwidth",
        series_figure("queue_length", "Launch queue length per stream", sides, "queue_length",
                      "time since trace start", "queued GPU ops"),
        table("queue_length", "Queue length per stream (time-weighted)", sides, "queue_length",
              ["rank", "stream", "ops", ("mean_queue_length", "mean"), ("max_queue_length", "max"),
               ("empty_pct", "empty %"), ("full_us", "full (blocked)")], sort=("rank", "stream")),
        series_figure("memory_bw", "Memory copy bandwidth", sides, "memory_bw", "time since trace start",
                      "bandwidth"),
        table("memory_bw_by_direction", "Copy bandwidth per direction", sides, "memory_bw_by_direction",
              ["rank", "direction", "transfers", ("bytes_total", "bytes"), ("busy_us", "busy"),
               ("bw_gbps", "bandwidth"), ("bw_max_gbps", "fastest transfer")], sort=("rank", "direction")),
    )


def memory_section(sides: Sequence[Side]) -> Section | None:
    """Memory over time, peaks, allocating ops, per step; or the note saying why there is none."""
    notes = [f"{s.label + ': ' if s.label else ''}{n}" for s in sides
             for n in ([s.doc.get("memory_note")] if isinstance(s.doc.get("memory_note"), str) else [])]
    section = _section(
        "memory", "Memory", 5, "allocated memory over time and at its peak",
        *[Paragraph(n) for n in notes],
        series_figure("memory_timeline", "Allocated and reserved memory", sides, "memory",
                      "time since trace start", "memory"),
        table("memory_peaks", "Peak memory per device", sides, "memory_peaks",
              ["rank", "device", "allocations", "frees", ("peak_allocated_bytes", "peak allocated"),
               ("peak_reserved_bytes", "peak reserved"), ("allocated_bytes", "allocated in total")],
              sort=("rank", "device")),
        table("memory_by_op", "Operators that allocate most", sides, "memory_by_op",
              ["rank", "device", "op", "allocations", ("allocated_bytes", "allocated"), ("net_bytes", "left allocated")],
              sort=("allocated_bytes",), descending=True, top=TOP_ROWS),
        table("memory_per_step", "Memory per step", sides, "memory_per_step",
              ["rank", "device", "step", "allocations", ("peak_allocated_bytes", "peak allocated"),
               ("allocated_bytes_delta", "change over the step")], sort=("rank", "device", "step"), collapsed=True),
    )
    if section is None and notes:  # say why there is nothing to show
        return Section("memory", "Memory", tuple(Paragraph(n) for n in notes), 5, "no memory data")
    return section


def collectives_section(sides: Sequence[Side]) -> Section | None:
    """Collective calls, skew and late arrivals; nothing when no side has a collective."""
    if not any(_records(s, "collective_summary") for s in sides):
        return None
    return _section(
        "collectives", "Collectives", 4, "collective calls, sizes, bus bandwidth and skew across ranks",
        Paragraph("Exposed time: collective kernel time not overlapped by computation. Bus bandwidth uses the "
                  "NCCL-tests factor for the group size. Skew: how far apart the ranks start the same call."),
        table("collective_summary", "Collectives per rank and kind", sides, "collective_summary",
              ["rank", ("kind", "kind", "text"), ("process_group", "group", "name"), "count", ("total_us", "total"),
               ("exposed_us", "exposed"), ("exposed_pct", "exposed %"), ("msg_bytes_mean", "message mean"),
               ("algbw_gbps_mean", "algorithm bandwidth"), ("busbw_gbps_mean", "bus bandwidth")],
              sort=("rank", "kind")),
        table("collective_skew", "Largest start skew across ranks", sides, "collective_skew",
              [("kind", "kind", "text"), ("process_group", "group", "name"), "step", "call_index", "ranks",
               ("skew_us", "skew"), "earliest_rank", "latest_rank", ("overlapping", "overlapping", "bool")],
              sort=("skew_us",), descending=True, top=TOP_ROWS),
        table("straggler_evidence", "Who arrives last", sides, "straggler_evidence",
              ["rank", ("calls_compared", "calls compared"), ("latest_calls", "last to start"),
               ("latest_pct", "last %"), ("lateness_us_median", "lateness median"),
               ("late_start_us_median", "late start median"), ("wall_excess_pct", "step excess %"),
               ("is_straggler", "straggler", "bool")], mark=lambda r: bool(r.get("is_straggler"))),
    )


def steps_section(sides: Sequence[Side]) -> Section | None:
    return _section(
        "steps", "Step time", 2, "wall time of every profiler step",
        series_figure("step_time", "Step time per profiler step", sides, "step_time", "profiler step",
                      "step time", one_panel=True),
        table("profiler_steps", "Profiler steps", sides, "profiler_steps",
              ["rank", "step", ("wall_us", "wall time"), ("gpu_busy_us", "GPU busy"), ("gpu_events", "GPU events")],
              sort=("rank", "step")),
    )


def straggler_section(sides: Sequence[Side]) -> Section | None:
    if not any(len(_records(s, "summary")) > 1 for s in sides):
        return None
    return _section(
        "stragglers", "Stragglers", 4, "ranks that make the others wait",
        table("stragglers", "Late start and step time per rank", sides, "stragglers",
              ["rank", "steps", "kernel", ("late_start_us_median", "late start median"),
               ("late_start_pct", "late start % of step"), ("wall_us_median", "step median"),
               ("wall_excess_pct", "step excess %"), ("is_straggler", "straggler")], mark=lambda r: bool(r.get("is_straggler"))),
    )


def metadata_section(sides: Sequence[Side], extra: Sequence[str] = ()) -> Section | None:
    """Provenance: sources, versions, ranks, files with checksums (and ``extra`` lines)."""
    facts = list(extra)
    for s in sides:
        d = s.doc
        facts.append(f"{s.label + ': ' if s.label else ''}source {d.get('source', '?')}, perfreport "
                     f"{d.get('perfreport_version', '?')}, scanner {d.get('scanner', '?')}, created "
                     f"{d.get('created_utc', '?')}.")
    return _section(
        "metadata", "Trace metadata", 6, "GPU, ranks, versions, files, checksums",
        *[Paragraph(f) for f in facts],
        table("ranks", "Ranks", sides, "ranks",
              ["rank", ("gpu_name", "GPU"), "world_size", ("schema_version", "trace schema", "text"),
               ("rank_source", "rank from"), ("json_bytes", "JSON size", "bytes"), "file"], collapsed=False),
        table("files", "Files and checksums", sides, "files",
              ["rank", "file", ("sha256", "SHA-256")], collapsed=False),
    )


ANALYSIS_SECTIONS = (overview_section, temporal_section, steps_section, idle_section, kernel_section,
                     overlap_section, launch_section, queue_section, memory_section, collectives_section,
                     operator_section, straggler_section)


def analysis_sections(sides: Sequence[Side]) -> list[Section]:
    return [s for s in (f(sides) for f in ANALYSIS_SECTIONS) if s is not None]


# --- reports -----------------------------------------------------------------------------------------
def build_report(document: Mapping[str, Any]) -> Report:
    """The :class:`Report` of a summary document (one run) or a comparison document."""
    doc = json.loads(json_text(document))  # exactly what report.json holds: NaN -> null, numpy unwrapped
    if doc.get("kind") == COMPARE_KIND or isinstance(doc.get("checks"), list):
        return comparison_report(doc)
    return analysis_report(doc)


def default_command(doc: Mapping[str, Any]) -> str:
    return str(doc.get("command") or f"perfreport analyze {doc.get('source', 'TRACE_PATH')} --out DIR")


def analysis_report(doc: dict) -> Report:
    sides = [Side("", doc)]
    command = default_command(doc)
    sections = analysis_sections(sides)
    meta = metadata_section(sides)
    notes = tuple(f"rank {r.get('rank')}: {r['note']}" for r in _records(sides[0], "summary") if r.get("note"))
    return Report(
        kind="analyze", title="perfreport analysis", subtitle=str(doc.get("source", "")),
        created_utc=str(doc.get("created_utc") or ""), verdict=None,
        sections=tuple(sections + ([meta] if meta else [])), command=command, notes=notes,
        links=default_links(), highlights=highlights(sides[0]), document=doc)


def highlights(side: Side) -> tuple[tuple[str, Value], ...]:
    """Key figures of the rank with the longest mean step (else the first rank): picked, not computed."""
    steps = sorted_rows(_records(side, "step_times"), ["wall_us_mean"], descending=True)
    ranks = [r.get("rank") for r in _records(side, "summary")]
    rank = steps[0].get("rank") if steps else (ranks[0] if ranks else None)
    if rank is None:
        return ()

    def pick(name: str) -> dict:
        return next((r for r in _records(side, name) if r.get("rank") == rank), {})

    who = f" · rank {rank}" if len(ranks) > 1 else ""
    out = []
    if steps:
        out.append((f"mean step time{who}", Value(steps[0].get("wall_us_mean"), "us")))
    for label, table_name, key in (("GPU busy", "summary", "gpu_busy_pct"),
                                   ("compute", "temporal_breakdown", "compute_pct"),
                                   ("GPU idle", "temporal_breakdown", "idle_pct")):
        value = pick(table_name).get(key)
        if value is not None:
            out.append((f"{label} (of GPU span){who}", Value(value, "pct")))
    return tuple(out)


def default_links() -> tuple[Link, ...]:
    """Placeholders for the full report; the GitHub glue replaces them with artifact URLs."""
    return (Link("full HTML report", "report.html"), Link("PDF", "report.pdf"), Link("JSON", "report.json"))


def status_rank(status: str) -> int:
    return STATUSES.index(status) if status in STATUSES else len(STATUSES)


# --- comparison --------------------------------------------------------------------------------------
def _check(r: dict) -> Check:
    e = r.get("evidence") or {}
    threshold = r.get("threshold") or {}
    waiver = r.get("waiver") or {}
    interval = e.get("interval")
    samples = ""
    if e.get("baseline_samples") is not None:
        samples = f", {e.get('baseline_samples')} vs {e.get('candidate_samples')} samples"
    return Check(
        name=str(r.get("id") or r.get("name") or "?"), status=str(r.get("status") or "?"),
        message=str(r.get("message") or ""), unit=str(r.get("unit") or "number"),
        label=str(r.get("title") or r.get("label") or r.get("id") or ""),
        baseline=r.get("baseline_value"), candidate=r.get("candidate_value"), delta=r.get("delta"),
        delta_pct=r.get("delta_pct"), threshold=str(threshold.get("text") or ""),
        scope="job" if r.get("rank") is None else f"rank {r.get('rank')}", severity=str(r.get("level") or ""),
        p_value=e.get("p_value"),
        interval=(interval[0], interval[1]) if isinstance(interval, list) and len(interval) == 2 else None,
        interval_of=str(e.get("interval_of") or ""), evidence=f"{e.get('test') or ''}{samples}",
        waiver=f"{waiver.get('reason') or ''} (waiver {waiver.get('check')})" if waiver else "",
        counted=bool(r.get("counted", not waiver)))


def ordered_checks(checks: Sequence[Check]) -> tuple[Check, ...]:
    """Counted checks before waived ones, then fail, warn, inconclusive, pass (stable)."""
    return tuple(sorted(checks, key=lambda c: (not c.counted, status_rank(c.status))))


def _delta_unit(unit: str) -> str:
    return "pp" if unit == "pct" else unit


def checks_table(tid: str, title: str, checks: Sequence[Check], *, with_message: bool, collapsed: bool) -> Table | None:
    """The checks as a table of cells that carry their own unit (each check has its own)."""
    if not checks:
        return None
    cols = [Column("status", "status", "status"), Column("check", "check", "name"),
            Column("baseline", "baseline", "mixed"), Column("candidate", "candidate", "mixed"),
            Column("delta", "change", "mixed"), Column("delta_pct", "change %", "pct", signed=True),
            Column("threshold", "threshold", "text"), Column("p_value", "p-value", "p_value"),
            Column("interval", "interval", "mixed")]
    if with_message:
        cols.append(Column("message", "details", "text"))
    if any(c.waiver for c in checks):
        cols.append(Column("waiver", "waiver", "name"))
    rows = []
    for c in checks[:MAX_ROWS]:
        interval_unit = "pp" if c.unit == "pct" else "number"
        cells = {"status": c.status, "check": c.label or c.name, "baseline": Value(c.baseline, c.unit),
                 "candidate": Value(c.candidate, c.unit), "delta": Value(c.delta, _delta_unit(c.unit), True),
                 "delta_pct": c.delta_pct if c.unit != "pct" else None, "threshold": c.threshold,
                 "p_value": c.p_value,
                 "interval": Interval(*c.interval, interval_unit) if c.interval else None,
                 "message": c.message, "waiver": c.waiver}
        rows.append(tuple(cells[col.key] for col in cols))
    marked = tuple(i for i, c in enumerate(checks[:MAX_ROWS]) if c.status in ("fail", "warn"))
    note = "Interval: confidence interval of the ratio of medians (candidate / baseline; of the difference in " \
           "points for shares)." if any(c.interval for c in checks) else ""
    if len(checks) > MAX_ROWS:
        note += f" First {MAX_ROWS} of {len(checks)} checks; the JSON has all."
    return Table(tid, title, tuple(cols), tuple(rows), len(checks), marked, collapsed, note.strip())


def checks_sections(checks: Sequence[Check]) -> list[Section]:
    findings = [c for c in checks if c.counted and c.status != "pass"]
    rest = [c for c in checks if not c.counted or c.status == "pass"]
    out = []
    if findings:
        out.append(Section("checks", "Checks that failed, warned or were inconclusive", (
            checks_table("findings", "Findings", findings, with_message=True, collapsed=False),), 0,
            "checks beyond their thresholds"))
    table_rest = checks_table("passed", "Passed and waived checks", rest, with_message=True, collapsed=True)
    if table_rest is not None:
        out.append(Section("passed", "Passed and waived checks", (table_rest,), 1 if findings else 0,
                           "checks within their thresholds, and waived ones"))
    return out


def _explanation_records(x: dict, key: str) -> list[dict]:
    rows = x.get(key)
    return [r for r in rows if isinstance(r, dict)] if isinstance(rows, list) else []


def movers_section(doc: dict) -> Section | None:
    """What changed: the attribution of the step-time change, and ops found in one run only."""
    x = doc.get("explanation")
    if not isinstance(x, dict):
        note = doc.get("explanation_note")
        return Section("movers", "What changed", (Paragraph(str(note)),), 0, "no attribution") if note else None
    side = Side("", x)
    one_sided = [dict(r, change="added") for r in _explanation_records(x, "added")] + \
                [dict(r, change="removed") for r in _explanation_records(x, "removed")]
    lines = [str(line) for line in x.get("lines") or []]
    return _section(
        "movers", "What changed: where the step time went", 0, "the parts that moved the step time",
        *(Paragraph(line) for line in lines[1:3]),
        table("contributions", "Top movers: time per step and share of the step-time change", [side], "contributions",
              [("label", "part", "name"), ("change", "change", "text"), ("baseline_us", "baseline per step", "us"),
               ("candidate_us", "candidate per step", "us"), Column("delta_us", "change per step", "us", True),
               Column("share_pct", "share of change %", "pct", True)], sort=(), collapsed=False),
        table("by_kind", "Change by kind", [side], "by_kind",
              [("label", "kind", "text"), ("baseline_us", "baseline per step", "us"),
               ("candidate_us", "candidate per step", "us"), Column("delta_us", "change per step", "us", True),
               Column("share_pct", "share of change %", "pct", True)], sort=(), collapsed=False),
        table("added_removed", "Added and removed ops and kernels", [Side("", {"rows": one_sided})], "rows",
              [("change", "change", "text"), ("kind", "kind", "text"), ("key", "name", "name"),
               ("count_per_step", "calls per step", "number"), ("dur_per_step_us", "time per step", "us")],
              sort=(), collapsed=False),
        table("collective_changes", "Collectives that changed", [side], "collectives",
              ["collective", ("changes", "what changed", "text"), ("baseline_count_per_step", "baseline calls/step"),
               ("candidate_count_per_step", "candidate calls/step"),
               ("baseline_msg_nelems", "baseline elements/call", "number"),
               ("candidate_msg_nelems", "candidate elements/call", "number")], sort=()),
    )


def comparison_provenance(doc: dict) -> list[str]:
    """Where the thresholds and the stored baseline came from, as the document says."""
    out = []
    config = doc.get("config") if isinstance(doc.get("config"), dict) else {}
    if config:
        out.append(f"Thresholds and waivers: {config.get('source') or 'defaults'}.")
    stored = (doc.get("baseline") or {}).get("stored_baseline")
    if isinstance(stored, dict):
        out.append(f"Stored baseline {stored.get('name')} ({stored.get('path')}): commit {stored.get('commit') or '?'}, "
                   f"created {stored.get('created_utc') or '?'}, perfreport {stored.get('perfreport_version') or '?'}.")
    return out


def comparison_report(doc: dict) -> Report:
    """The report of a comparison document: verdict, checks, movers, then both sides' analyses."""
    sides = [Side(label, (doc.get(label) or {}).get("analyses") or {}) for label in SIDES]
    checks = ordered_checks([_check(r) for r in doc.get("checks") or [] if isinstance(r, dict)])
    x = doc.get("explanation") if isinstance(doc.get("explanation"), dict) else {}
    lines = [str(line) for line in (x or {}).get("lines") or []]
    status = str(doc.get("status") or "inconclusive")
    headline = str(doc.get("headline") or status.upper()).split(" — ")[0]
    if headline.upper().startswith(status.upper() + ": "):  # the badge already says it
        headline = headline[len(status) + 2:]
    verdict = Verdict(status=status, headline=headline,
                      explanation=lines[0] if lines else str(doc.get("explanation_note") or ""),
                      checks=checks, notes=tuple(str(n.get("message")) for n in doc.get("notes") or []
                                                 if isinstance(n, dict)))
    b_src = (doc.get("baseline") or {}).get("source", "BASELINE")
    c_src = (doc.get("candidate") or {}).get("source", "CANDIDATE")
    command = str(doc.get("command") or f"perfreport compare {b_src} {c_src} --out DIR")
    sections = [*checks_sections(checks)]
    movers = movers_section(doc)
    sections += [movers] if movers else []
    sections += analysis_sections(sides)
    meta = metadata_section(sides, comparison_provenance(doc))
    sections += [meta] if meta else []
    return Report(
        kind="compare", title="perfreport comparison", subtitle=f"{b_src} → {c_src}",
        created_utc=str(doc.get("created_utc") or ""), verdict=verdict, sections=tuple(sections), command=command,
        links=default_links(), document=doc)
