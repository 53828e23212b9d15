"""The analysis sections of a report: one builder per analysis, shared by both report kinds.

Each builder takes the sides (one for a single run, baseline and candidate for a comparison)
and returns a :class:`Section`, or None when no side has anything for it: a missing table (an
older document, an analysis that found nothing) drops its block, never the report.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..documents.table_rows import cut_text, steps_cut_text
from ..documents.cells import table_columns
from .blocks import (
    TOP_ROWS, Side, make_section, order_key, per_step_worth_drawing, pivot_bars, records, series_figure, side_label,
    stacked_bars, table,
)
from .efficiency import efficiency_section
from .model import Line, LineFigure, Panel, Paragraph, Section


def overview_section(sides: Sequence[Side]) -> Section | None:
    return make_section(
        "overview", "Ranks and steps", 1, "GPU busy time and step time per rank",
        table("summary", "Ranks", sides, "summary",
              ["rank", ("gpu_name", "GPU"), "events", "kernels", "memcpy", "memset", ("gpu_busy_us", "GPU busy"),
               ("gpu_busy_pct", "GPU busy %"), "steps", ("span_us", "trace span"), "note"], collapsed=False),
        table("step_times", "Step time per rank, over every recorded profiler step", sides, "step_times",
              ["rank", "steps", ("first_step", "first step"), ("last_step", "last step"),
               ("wall_us_mean", "mean, all steps"), ("wall_us_median", "median, all steps"), ("wall_us_min", "min"),
               ("wall_us_max", "max"), ("wall_us_std", "std"), ("gpu_busy_us_mean", "GPU busy per step"),
               ("gpu_busy_pct", "GPU busy %")], collapsed=False,
              note="Every recorded step, the last and warm-up ones included; a comparison's headline and checks "
                   "judge the steps its notes name, so their medians may differ."),
    )


def temporal_segments(sides: Sequence[Side]) -> list[tuple[str, str]]:
    """The temporal shares drawn as stacked bars: compute, non-compute, and idle split into the
    time host-side communication (gloo) runs and the rest when a rank has such time."""
    split = any((r.get("host_comm_us") or 0) > 0 and r.get("other_idle_pct") is not None
                for s in sides for r in records(s, "temporal_breakdown"))
    idle = [("host_comm_pct", "idle: host-side communication"), ("other_idle_pct", "idle, other")] if split \
        else [("idle_pct", "idle")]
    return [("compute_pct", "compute"), ("non_compute_pct", "non-compute"), *idle]


def temporal_section(sides: Sequence[Side]) -> Section | None:
    return make_section(
        "temporal", "Temporal breakdown", 2, "compute, non-compute and idle share of the GPU span per rank",
        Paragraph("Over each rank's GPU span (first to last GPU activity): compute is the time any computation "
                  "kernel runs, non-compute is communication and memory time not hidden under compute, idle is "
                  "the rest; the three shares add up to 100 %. Host-side communication: the idle time during "
                  "which a collective runs on the host (gloo), part of idle."),
        stacked_bars("temporal_bars", "GPU time per rank", sides, "temporal_breakdown", temporal_segments(sides),
                     "share of the GPU span (%)", "pct"),
        table("temporal_breakdown", "Temporal breakdown per rank", sides, "temporal_breakdown",
              ["rank", ("gpu_span_us", "GPU span"), ("busy_us", "busy"), ("idle_us", "idle"),
               ("compute_us", "compute"), ("non_compute_us", "non-compute"), ("idle_pct", "idle %"),
               ("compute_pct", "compute %"), ("non_compute_pct", "non-compute %"),
               *([("host_comm_us", "idle: host-side communication")] if len(temporal_segments(sides)) > 3 else [])]),
    )


def idle_section(sides: Sequence[Side]) -> Section | None:
    return make_section(
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
    multi_rank = any(len(records(s, "summary")) > 1 for s in sides)
    return make_section(
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
    return make_section(
        "operators", "Top operators", 4, "CPU operators and GPU kernels by time per step",
        table("op_profile_cpu", "CPU operators (nested: times overlap)", sides, "op_profile", cols,
              where=lambda r: r.get("kind") == "cpu_op", sort=("dur_per_step_us",), descending=True, top=TOP_ROWS),
        table("op_profile_gpu", "GPU kernels (names normalised)", sides, "op_profile",
              [("key", "kernel"), *cols[1:]],
              where=lambda r: r.get("kind") == "gpu", sort=("dur_per_step_us",), descending=True, top=TOP_ROWS),
    )


def overlap_section(sides: Sequence[Side]) -> Section | None:
    has_comm = any((r.get("comm_us") or 0) > 0 for s in sides for r in records(s, "comm_comp_overlap"))
    return make_section(
        "overlap", "Communication / computation overlap", 4, "collective time hidden under compute per rank",
        Paragraph("Overlap is the time communication (collective kernels, and collectives that run on the host "
                  "such as gloo's) runs while computation kernels run; exposed communication is the rest."
                  + ("" if has_comm else " These traces have no communication, on the GPU or the host.")),
        stacked_bars("overlap_bars", "Communication time per rank", sides, "comm_comp_overlap",
                     [("overlap_us", "overlapped with compute"), ("exposed_comm_us", "exposed")],
                     "communication time", "us") if has_comm else None,
        table("comm_comp_overlap", "Overlap per rank", sides, "comm_comp_overlap",
              ["rank", ("comm_us", "communication"), ("compute_us", "computation"), ("overlap_us", "overlapped"),
               ("exposed_comm_us", "exposed"), ("overlap_pct", "overlap % of comm")]),
    )


def _outlier(r: dict) -> bool:
    return bool((r.get("runtime_outliers") or 0) > 0 or (r.get("launch_delay_outliers") or 0) > 0)


def launch_points(steps: list, ranks: list, p95: list, runtime: list, delay: list) -> list[tuple]:
    """Per rank (in rank order): its steps (>= 0, step 0 too: torch's first ProfilerStep#0) in
    order (ties in the table's), their delay p95 and the positions of those with outliers. Plain
    cells (int steps and ranks, numbers or None) in numpy: a many-step compare has 173,000 rows a
    side, which a tuple each sorted in Python took 0.2 s of the report's build; others one by
    one."""
    plain = not set(map(type, steps)) - {int} and not set(map(type, ranks)) - {int} and \
        not (set(map(type, runtime)) | set(map(type, delay))) - {int, float, type(None)}
    if plain:
        try:
            s, r = np.array(steps, dtype=np.int64), np.array(ranks, dtype=np.int64)
        except OverflowError:  # (beyond int64: one by one below)
            plain = False
    if plain:
        outliers = (np.array(runtime, dtype=np.float64) > 0) | (np.array(delay, dtype=np.float64) > 0)  # None: NaN
        rows = np.flatnonzero(s >= 0)
        rows = rows[np.lexsort((s[rows], r[rows]))]  # by rank, then step; ties in the table's order
        starts = np.flatnonzero(np.r_[True, r[rows][1:] != r[rows][:-1]]) if len(rows) else rows
        out = []
        for lo, hi in zip(starts.tolist(), np.append(starts[1:], len(rows)).tolist()):  # a loop over ranks
            g = rows[lo:hi]
            out.append((int(r[g[0]]), s[g].tolist(), [p95[i] for i in g.tolist()],
                        np.flatnonzero(outliers[g]).tolist()))
        return out
    by_rank: dict[Any, list[tuple]] = {}  # (step, delay p95, outliers) per rank, in the table's order
    for step, rank, value, run, late in zip(steps, ranks, p95, runtime, delay):
        if step is not None and step >= 0:
            by_rank.setdefault(rank, []).append((step, value, (run or 0) > 0 or (late or 0) > 0))
    out = []
    for rank in sorted(by_rank, key=order_key):
        pts = sorted(by_rank[rank], key=lambda p: p[0])
        out.append((rank, [p[0] for p in pts], [p[1] for p in pts], [i for i, p in enumerate(pts) if p[2]]))
    return out


def launch_figure(sides: Sequence[Side]) -> LineFigure | None:
    """Launch delay p95 per step, points marked where the step has outliers."""
    lines = []
    for side in sides:
        columns = table_columns(side.doc.get("launch_stats_by_step"), (
            "iteration", "rank", "launch_delay_p95_us", "runtime_outliers", "launch_delay_outliers"))
        for rank, steps, p95, marked in launch_points(*columns):
            lines.append(Line(side_label(rank, side.label), tuple(steps), tuple(p95), tuple(marked)))
    if not per_step_worth_drawing(lines):
        return None
    return LineFigure("launch_delay", "Launch delay per step (p95; ✕ = step with outliers)", "profiler step",
                      "launch delay p95", "step", "us", (Panel("", tuple(lines)),), "line")


def launch_section(sides: Sequence[Side]) -> Section | None:
    return make_section(
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
    return make_section(
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
    section = make_section(
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
    if not any(records(s, "collective_summary") for s in sides):
        return None
    return make_section(
        "collectives", "Collectives", 4, "collective calls, sizes, bus bandwidth and skew across ranks",
        Paragraph("Calls run by GPU kernels and by the host (gloo: kernel column = the op, 0 kernels, size "
                  "unknown). Exposed time: call time not overlapped by computation kernels. Bus bandwidth uses the "
                  "NCCL-tests factor for the group size. Skew: how far apart the ranks start the same call."),
        *cut_paragraphs(sides, cut_text),
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
               ("latest_pct", "last %"), ("lateness_us_median", "lateness median over steps"),
               ("late_steps", "steps measured"), ("noise_us", "step-to-step noise"),
               ("late_start_us_median", "late start median"), ("wall_excess_pct", "step excess %"),
               ("is_straggler", "straggler", "bool")], mark=lambda r: bool(r.get("is_straggler"))),
    )


def cut_paragraphs(sides: Sequence[Side], text_of) -> list[Paragraph]:
    """Where report.json keeps only a rank's first calls or steps (``tables_cut``, said by
    ``text_of``: :func:`~perfreport.documents.table_rows.cut_text` or ``steps_cut_text``), one
    sentence per side."""
    out = []
    for side in sides:
        text = text_of(list(side.doc.get("tables_cut") or ()))
        if text:
            out.append(Paragraph(f"{side.label}: {text}" if side.label else text))
    return out


def steps_section(sides: Sequence[Side]) -> Section | None:
    return make_section(
        "steps", "Step time", 2, "wall time of every profiler step",
        *cut_paragraphs(sides, steps_cut_text),
        series_figure("step_time", "Step time per profiler step", sides, "step_time", "profiler step",
                      "step time", one_panel=True),
        table("profiler_steps", "Profiler steps", sides, "profiler_steps",
              ["rank", "step", ("wall_us", "wall time"), ("gpu_busy_us", "GPU busy"), ("gpu_events", "GPU events")],
              sort=("rank", "step")),
    )


def straggler_section(sides: Sequence[Side]) -> Section | None:
    if not any(len(records(s, "summary")) > 1 for s in sides):
        return None
    partial = [str(c["text"]) for c in (s.doc.get("rank_coverage") for s in sides) if isinstance(c, dict)
               and c.get("text")]
    return make_section(
        "stragglers", "Stragglers", 4, "ranks that make the others wait",
        *(Paragraph(f"Partial job: {text}.") for text in partial),
        table("stragglers", "Late start and step time per rank", sides, "stragglers",
              ["rank", "steps", "kernel", ("late_start_us_median", "late start median"),
               ("late_start_pct", "late start % of step"), ("wall_us_median", "step median"),
               ("wall_excess_pct", "step excess %"), ("is_straggler", "late by HTA's measure", "bool")],
              mark=lambda r: bool(r.get("is_straggler"))),
    )


def metadata_section(sides: Sequence[Side], extra: Sequence[str] = ()) -> Section | None:
    """Provenance: sources, versions, ranks, files with checksums (and ``extra`` lines)."""
    facts = list(extra)
    for s in sides:
        d = s.doc
        facts.append(f"{s.label + ': ' if s.label else ''}source {d.get('source', '?')}, perfreport "
                     f"{d.get('perfreport_version', '?')}, scanner {d.get('scanner', '?')}, created "
                     f"{d.get('created_utc', '?')}.")
    return make_section(
        "metadata", "Trace metadata", 6, "GPU, ranks, versions, files, checksums",
        *[Paragraph(f) for f in facts],
        table("ranks", "Ranks", sides, "ranks",
              ["rank", ("gpu_name", "GPU"), "world_size", ("schema_version", "trace schema", "text"),
               ("rank_source", "rank from"), ("json_bytes", "JSON size", "bytes"), "file"], collapsed=False),
        table("files", "Files and checksums", sides, "files",
              ["rank", "file", ("checksum", "checksum (algorithm:hex)")], collapsed=False),
    )


def annotation_section(sides: Sequence[Side]) -> Section | None:
    """What the analyses compute about user annotations and recurring kernel sequences, shown
    (they were in the JSON only)."""
    return make_section(
        "annotations", "User annotations and kernel sequences", 3,
        "GPU time under each record_function annotation; kernel sequences that recur under one operator",
        table("gpu_user_annotation_breakdown", "GPU time per user annotation", sides, "gpu_user_annotation_breakdown",
              ["rank", ("name", "annotation"), "count", ("sum_us", "total"), ("mean_us", "mean"), ("max_us", "max"),
               "kernels", ("kernel_us", "kernel time")], sort=("sum_us",), descending=True, top=TOP_ROWS),
        table("kernel_sequences", "Most frequent kernel sequences", sides, "kernel_sequences",
              ["rank", ("operator", "operator"), ("kernels", "kernels in sequence"), ("count", "occurrences"),
               ("kernel_dur_sum_us", "kernel time"), ("cpu_dur_us", "CPU time"), ("pattern", "sequence", "text")],
              sort=("kernel_dur_sum_us",), descending=True, top=TOP_ROWS),
    )


ANALYSIS_SECTIONS = (overview_section, temporal_section, steps_section, idle_section, kernel_section,
                     efficiency_section, overlap_section, launch_section, queue_section, memory_section,
                     collectives_section, operator_section, annotation_section, straggler_section)


def analysis_sections(sides: Sequence[Side]) -> list[Section]:
    return [s for s in (f(sides) for f in ANALYSIS_SECTIONS) if s is not None]
