"""The top of a comparison report: the headline, its causes and the figures a person looks at first.

One headline number with one definition: the gate's own statistic for the most important
finding (the step-time check's medians and p-value when there is one, else the most severe
finding), written by :func:`perfreport.report.findings.group_findings`. The causes come from
the attribution (:mod:`perfreport.analyses.attribution`), which splits the *mean* step time of
the very steps the gate judged into parts that add up; when that is another statistic than the
headline's, :attr:`Headline.basis` says so in one line, so no number on the page contradicts
another without a label.

Figures (values picked from the document, nothing computed): step time per profiler step of
both runs (steps the gate did not judge drawn faded), the attribution as a waterfall, the
step split into compute / communication / copies / idle side by side, and the top kernels of
both runs as paired bars.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..documents.cells import table_columns
from ..units import format_us
from .blocks import Side, per_step_worth_drawing, records
from .findings import FindingGroup
from .model import Bar, BarFigure, Cause, Headline, Line, LineFigure, Panel, WaterfallFigure

TOP_CAUSES = 3
WATERFALL_PARTS = 6
"""Attribution parts drawn in the waterfall; the rest is one "other" bar."""
TOP_KERNELS = 10
KIND_SEGMENTS = (("kernel", "compute kernels"), ("communication", "exposed communication"),
                 ("memory", "exposed memcpy/memset"), ("idle", "GPU idle"))
"""Attribution kinds in the order they are stacked, with their legend labels."""


def short_op(name: str) -> str:
    """A CPU op's name for a headline: the part after ``#`` of a PyTorch record function
    ("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__" -> "_SingleProcessDataLoaderIter.__next__")."""
    return name.rsplit("#", 1)[-1] if "#" in name and not name.endswith("#") else name


def cause_text(c: Mapping[str, Any]) -> str:
    """One attribution part for people: "GPU idle while the CPU runs X (new)", "kernel Y"."""
    kind, key, change = c.get("kind"), str(c.get("key") or ""), c.get("change")
    tag = {"added": " (new)", "removed": " (gone)"}.get(str(change), "")
    if kind == "idle":
        where = "outside any CPU op" if key == "<no op>" else f"while the CPU runs {short_op(key)}"
        return f"GPU idle {where}{tag}"
    if kind == "communication":
        return f"exposed {key}{tag}"
    if kind == "memory":
        return f"exposed {key}{tag}"
    return f"kernel {key}{tag}"


def signed_ms(us: float | None) -> str:
    if us is None or not math.isfinite(us):
        return "n/a"
    return ("+" if us >= 0 else "−") + format_us(abs(us))


def comparison_headline(doc: Mapping[str, Any], groups: Sequence[FindingGroup]) -> Headline:
    """The headline of a comparison document (see the module docstring)."""
    counted = [g for g in groups if g.counted]
    main = next((g for g in counted if g.name == "step_time"), None)
    if main is None or (main.status == "pass" and counted and counted[0].status in ("fail", "warn")):
        main = counted[0] if counted else None
    text = main.summary if main is not None else "no checks"
    x = doc.get("explanation") if isinstance(doc.get("explanation"), dict) else None
    causes: tuple[Cause, ...] = ()
    basis = str(doc.get("explanation_note") or "") if x is None else ""
    if x is not None and isinstance(x.get("delta_ms"), (int, float)):
        total_us = 1000.0 * float(x["delta_ms"])
        parts = [c for c in x.get("contributions") or [] if isinstance(c, dict) and c.get("kind") != "other"
                 and isinstance(c.get("delta_us"), (int, float)) and c["delta_us"] * total_us > 0]
        parts.sort(key=lambda c: -abs(c["delta_us"]))
        causes = tuple(Cause(cause_text(c), c["delta_us"], c.get("share_pct")) for c in parts[:TOP_CAUSES])
        runs = judged_runs(doc)
        scope = (f"the same {x.get('baseline_samples')} vs {x.get('candidate_samples')} (rank, step) samples the "
                 f"gate judged" if runs == (1, 1) else
                 f"{x.get('baseline_samples')} vs {x.get('candidate_samples')} (rank, step) samples the gate judged, "
                 f"from one run of each side ({runs[0]} vs {runs[1]} runs judged)")
        basis = (f"Causes: the attribution of the mean step time, {x.get('baseline_step_ms', math.nan):.1f} → "
                 f"{x.get('candidate_step_ms', math.nan):.1f} ms/step ({signed_ms(total_us)}/step), over {scope}; "
                 f"its parts add up to the mean")
        basis += ", while the gate judges the median." if main is not None and main.name == "step_time" else "."
        if not causes:
            basis = (f"No part of the step moved the mean step time the same way as the change "
                     f"({x.get('baseline_step_ms', math.nan):.1f} → {x.get('candidate_step_ms', math.nan):.1f} "
                     f"ms/step, {signed_ms(total_us)}/step).")
    return Headline(text=text, causes=causes, basis=basis, counts=counts_text(groups))


def judged_runs(doc: Mapping[str, Any]) -> tuple[int, int]:
    """(baseline, candidate) runs the gate judged, from the step-time check's evidence; (1, 1)
    without one. The attribution explains one run of each side (the baseline's latest, the
    candidate's own: :func:`perfreport.pipeline.compare_many`), so a sentence about its samples
    says so where the gate judged more."""
    for check in doc.get("checks") or []:
        evidence = check.get("evidence") if isinstance(check, dict) and check.get("name") == "step_time" else None
        if isinstance(evidence, dict):
            runs = (evidence.get("baseline_runs"), evidence.get("candidate_runs"))
            if all(isinstance(r, int) and r >= 1 for r in runs):
                return runs[0], runs[1]
    return 1, 1


def counts_text(groups: Sequence[FindingGroup]) -> str:
    """"1 failed · 4 warned · 24 passed findings (35 checks)"."""
    parts = []
    for status, word in (("fail", "failed"), ("warn", "warned"), ("inconclusive", "inconclusive"), ("pass", "passed")):
        n = sum(1 for g in groups if g.counted and g.status == status)
        if n:
            parts.append(f"{n} {word}")
    waived = sum(1 for g in groups if not g.counted)
    if waived:
        parts.append(f"{waived} waived")
    checks = sum(len(g.checks) for g in groups)
    return " · ".join(parts) + f" findings ({checks} checks)" if parts else "no checks"


def headline_line(headline: Headline) -> str:
    """Headline and the first cause in one line: "step time +39.4 % (…) — GPU idle while … +61.3 ms/step"."""
    if not headline.causes:
        return headline.text
    c = headline.causes[0]
    return f"{headline.text} — {c.text} {signed_ms(c.delta_us)}/step"


# --- figures -------------------------------------------------------------------------------------
def step_time_figure(sides: Sequence[Side], judged: Mapping[str, Sequence[int]]) -> LineFigure | None:
    """Step time per profiler step of each side (slowest rank per step), steps not judged faded."""
    lines = []
    for side in sides:
        steps, values = slowest_per_step(*table_columns(side.doc.get("step_metrics"), ("step", "step_time_us")))
        if not steps:
            continue
        keep = set(judged.get(side.label) or steps)
        lines.append(Line(side.label or "run", tuple(steps), tuple(values),
                          faded=tuple(i for i, s in enumerate(steps) if s not in keep)))
    if not per_step_worth_drawing(lines):
        return None
    multi = any(len(set(table_columns(s.doc.get("step_metrics"), ("rank",))[0])) > 1 for s in sides)
    kept = [c.get("steps_kept") for s in sides for c in s.doc.get("tables_cut") or ()
            if isinstance(c, dict) and c.get("table") == "step_metrics" and isinstance(c.get("steps_kept"), int)]
    return LineFigure("step_time_judged", "Step time per step" + (" (slowest rank)" if multi else ""),
                      "profiler step", "step time", "step", "us", (Panel("", tuple(lines)),), "line",
                      note="Faded points: steps the gate did not judge (warm-up). The last step of each run is "
                           "left out (the profiler cuts it short)."
                           + (f" Each rank's first {min(kept):,} steps only (report.json's per-step tables)."
                              if kept else ""))


def slowest_per_step(steps: list, values: list) -> tuple[list[int], list[float]]:
    """The steps (>= 0, ascending) and each one's largest value (its slowest rank), NaN values
    ignored (a step of NaN only: -inf). Plain cells (ints, floats) in numpy: a many-step compare
    has 37,000-173,000 rows a side, a dict entry each in Python (0.2 s of the report's build at
    173,000); other cells one by one."""
    if not set(map(type, steps)) - {int} and not set(map(type, values)) - {int, float}:
        try:
            s = np.array(steps, dtype=np.int64)
        except OverflowError:  # (a step beyond int64: one by one below)
            s = None
        if s is not None:
            v = np.array(values, dtype=np.float64)
            keep = s >= 0
            s, v = s[keep], np.where(np.isnan(v[keep]), -np.inf, v[keep])
            if not len(s):
                return [], []
            order = np.argsort(s, kind="stable")
            s, v = s[order], v[order]
            starts = np.flatnonzero(np.r_[True, s[1:] != s[:-1]])
            return s[starts].tolist(), np.maximum.reduceat(v, starts).tolist()
    per_step: dict[int, float] = {}
    for step, value in zip(steps, values):
        if isinstance(step, int) and step >= 0 and isinstance(value, (int, float)):
            per_step[step] = max(per_step.get(step, -math.inf), float(value))
    ordered = sorted(per_step)
    return ordered, [per_step[s] for s in ordered]


def waterfall_figure(x: Mapping[str, Any]) -> WaterfallFigure | None:
    """The attribution: baseline mean step, the largest parts, "other", candidate mean step."""
    contributions = [c for c in x.get("contributions") or [] if isinstance(c, dict)
                     and isinstance(c.get("delta_us"), (int, float))]
    b, c = x.get("baseline_step_ms"), x.get("candidate_step_ms")
    if not contributions or not isinstance(b, (int, float)) or not isinstance(c, (int, float)):
        return None
    parts = [p for p in contributions if p.get("kind") != "other"]
    shown = sorted(parts, key=lambda p: -abs(p["delta_us"]))[:WATERFALL_PARTS]
    rest = sum(p["delta_us"] for p in contributions) - sum(p["delta_us"] for p in shown)
    steps = tuple((cause_text(p), float(p["delta_us"])) for p in shown) + (("everything else", rest),)
    return WaterfallFigure("attribution_waterfall", "Where the mean step time went", "time per step", "us",
                           ("baseline (mean)", 1000.0 * b), steps, ("candidate (mean)", 1000.0 * c),
                           note="Means over the steps the gate judged; the bars add up from the baseline to the "
                                "candidate.")


def breakdown_figure(x: Mapping[str, Any]) -> BarFigure | None:
    """Each side's mean step split into compute / exposed communication / exposed copies / idle."""
    by_kind = {r.get("kind"): r for r in x.get("by_kind") or [] if isinstance(r, dict)}
    if not by_kind:
        return None
    segments = [(k, label) for k, label in KIND_SEGMENTS if k in by_kind]
    bars = tuple(Bar(side, tuple(by_kind[k].get(f"{side}_us") for k, _ in segments))
                 for side in ("baseline", "candidate"))
    return BarFigure("step_breakdown", "The mean step split by what the GPU does", "time per step", "us",
                     tuple(label for _, label in segments), bars,
                     note="Compute kernels hold the GPU first; communication and copies count only where no "
                          "compute hides them; idle is the rest of the step.")


def top_kernels_figure(sides: Sequence[Side]) -> BarFigure | None:
    """The kernels with the most time per step on either side, baseline and candidate paired."""
    per_side = [{str(r.get("key")): r.get("dur_per_step_us") for r in records(s, "op_profile")
                 if r.get("kind") == "gpu" and isinstance(r.get("dur_per_step_us"), (int, float))} for s in sides]
    if not any(per_side):
        return None
    keys = sorted(set().union(*per_side), key=lambda k: (-max(d.get(k) or 0.0 for d in per_side), k))[:TOP_KERNELS]
    bars = tuple(Bar(k, tuple(d.get(k) for d in per_side)) for k in keys)
    return BarFigure("top_kernels", f"Top {len(keys)} kernels by time per step", "time per step", "us",
                     tuple(s.label for s in sides), bars, stacked=False,
                     note="Kernel names normalised (template arguments and numbers folded).")


__all__ = ["comparison_headline", "headline_line", "counts_text", "judged_runs", "cause_text", "short_op",
           "step_time_figure", "waterfall_figure", "breakdown_figure", "top_kernels_figure", "TOP_CAUSES"]
