"""``index.html`` of the release archive, drawn from ``index.json`` alone.

One static page (inline CSS and SVG, a Content-Security-Policy that forbids scripts and every
fetch): the releases newest first with their verdict, key metrics and the change from the
release before (worse beyond the metric's alert level: red), then one trend chart per metric
across releases with those worsening releases marked, and the time of the top kernels.

Charts are the report's own line figures (:mod:`perfreport.report.figures`), so units, colours
and escaping are the same as in every report. Rendering cost grows with the number of releases
only through the chart points: 200 releases draw in about the time of 10.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..report.figures import render_svg
from ..report.model import Line, LineFigure, Panel
from ..report.templates import html_environment
from .metrics import KERNEL_ALERT_PCT, KEY_METRICS, KeyMetric, change, is_worse

TEMPLATE = "archive.html.j2"
CHART_KERNELS = 5
"""Kernels drawn in the kernel trend chart: the latest release's top ones."""


def render_index(index: Mapping) -> str:
    releases = list(index.get("releases") or [])
    env = html_environment()
    return env.get_template(TEMPLATE).render(
        rows=list(reversed(table_rows(releases))),
        metrics=KEY_METRICS,
        charts=charts(releases),
        count=len(releases),
        generator=str(index.get("generator", "perfreport")),
    )


def table_rows(releases: Sequence[Mapping]) -> list[dict]:
    """One row per release (oldest first): its values and changes, with worse ones flagged."""
    rows = []
    previous: Mapping = {}
    for number, release in enumerate(releases, start=1):
        metrics = release.get("metrics") or {}
        cells = []
        for m in KEY_METRICS:
            value = metrics.get(m.key)
            delta = change(previous.get(m.key), value, m.unit)
            cells.append({"value": value, "unit": m.unit, "delta": delta, "delta_unit": "pp" if m.unit == "pct" else "pct",
                          "worse": is_worse(delta, m.worse, m.alert),
                          "better": is_worse(None if delta is None else -delta, m.worse, m.alert)})
        files = {f.rsplit("/", 1)[-1]: f for f in release.get("files") or [] if isinstance(f, str)}
        rows.append({"number": number, "release": release, "cells": cells, "files": files,
                     "commit": str(release.get("commit") or "")[:12]})
        previous = metrics
    return rows


def charts(releases: Sequence[Mapping]) -> list[tuple[str, str]]:
    """(title, inline SVG) trend charts: one per key metric that has values, then the top kernels."""
    if not releases:
        return []
    xs = tuple(float(i) for i in range(1, len(releases) + 1))
    ticks = tuple(release_label(r) for r in releases)
    out = []
    for m in KEY_METRICS:
        ys = tuple(_value((r.get("metrics") or {}).get(m.key)) for r in releases)
        if all(v is None for v in ys):
            continue
        title = f"{m.label} per step ({'%' if m.unit == 'pct' else 'median'})"
        out.append((title, render_svg(_figure(m.key, m.label, m.unit, [Line(m.label, xs, ys, _worse_points(ys, m))], ticks))))
    latest = releases[-1].get("kernels") or {}
    names = [k for k, _ in sorted(latest.items(), key=lambda kv: -kv[1])[:CHART_KERNELS]]
    if names:
        kernel = KeyMetric("", "", "", "us", "higher", KERNEL_ALERT_PCT)
        lines = []
        for name in names:
            ys = tuple(_value((r.get("kernels") or {}).get(name)) for r in releases)
            lines.append(Line(name, xs, ys, _worse_points(ys, kernel)))
        title = f"kernel time per step: the latest release's top {len(names)} kernels"
        out.append((title, render_svg(_figure("kernels", "kernel time", "us", lines, ticks))))
    return out


def release_label(release: Mapping) -> str:
    """An x-axis label: the tag and the release date (YYYY-MM-DD), the way the table names it."""
    tag = str(release.get("tag") or "?")
    date = str(release.get("date") or "")[:10]
    return f"{tag} ({date})" if date else tag


def _figure(key: str, label: str, unit: str, lines: list[Line], ticks: tuple[str, ...]) -> LineFigure:
    return LineFigure(id=f"trend-{key}", title=f"{label} by release", x_label="release (tag, date)",
                      y_label=label, x_unit="step", y_unit=unit, panels=(Panel("", tuple(lines)),), x_ticks=ticks)


def _worse_points(ys: Sequence[float | None], m: KeyMetric) -> tuple[int, ...]:
    """Indices of releases worse than the one before beyond the metric's alert level."""
    return tuple(i for i in range(1, len(ys)) if is_worse(change(ys[i - 1], ys[i], m.unit), m.worse, m.alert))


def _value(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) else None
