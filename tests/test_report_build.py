"""perfreport.report.build and perfreport.analyses.series: the report shows the document's own
numbers (checked cell by cell against the document), picks the right rows, and the plotted
series match values worked out by hand on a tiny trace; downsampling keeps every extreme."""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import numpy as np
import pytest

from perfreport.documents.jsondoc import json_text
from perfreport.analyses.series import downsample, time_series
from perfreport.load import load
from perfreport.pipeline import analyze, compare, report_document, summary_document
from perfreport.report import build_report
from perfreport.report.build import MAX_ROWS, TOP_ROWS
from perfreport.report.findings import group_findings
from perfreport.report.model import BarFigure, LineFigure

from .conftest import TRACES
from .test_launch import tiny_events, write_trace

# --- shared documents (built once per test session) -------------------------------------------


@functools.lru_cache(maxsize=None)
def tiny_document_text(root: str) -> str:
    analysis = analyze(write_trace(Path(root), tiny_events()), workers=1)
    return json_text(summary_document(analysis))


def tiny_document(tmp_path_factory) -> dict:
    return json.loads(tiny_document_text(str(tmp_path_factory.getbasetemp() / "tiny_report_trace")))


@functools.lru_cache(maxsize=None)
def real_document() -> dict:
    """Two ranks of a real 128-rank job: multi-rank tables, streams, copies."""
    return json.loads(json_text(summary_document(analyze(TRACES / "hta_sampled_2of128rank", workers=1))))


@functools.lru_cache(maxsize=None)
def comparison_document() -> dict:
    pair = TRACES / "pair_hta_trace_compare_tiny"
    return json.loads(json_text(report_document(compare(pair / "base", pair / "test", workers=1))))


# --- downsampling ----------------------------------------------------------------------------------
def brute_force_buckets(x: np.ndarray, buckets: int) -> list[list[int]]:
    """Indices of each equal-width bucket of x, by plain Python."""
    lo, hi = float(x[0]), float(x[-1])
    out: list[list[int]] = [[] for _ in range(buckets)]
    for i, v in enumerate(x.tolist()):
        b = min(int((v - lo) / (hi - lo) * buckets), buckets - 1)
        out[b].append(i)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_downsample_keeps_every_bucket_extreme(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 20_000
    x = np.sort(rng.uniform(0, 1000, n))
    y = np.cumsum(rng.normal(size=n))
    y[rng.integers(0, n, 5)] += 500.0  # narrow spikes an average would flatten
    y[rng.integers(0, n, 3)] = np.nan
    keep = downsample(x, y, 500)
    assert len(keep) <= 500 and keep[0] == 0 and keep[-1] == n - 1
    assert np.all(np.diff(keep) > 0)
    kept = set(keep.tolist())
    for idx in brute_force_buckets(x, (500 - 2) // 2):
        vals = [(y[i], i) for i in idx if not math.isnan(y[i])]
        if vals:
            assert max(vals)[1] in kept or any(y[i] == max(vals)[0] for i in kept & set(idx))
            assert min(vals)[1] in kept or any(y[i] == min(vals)[0] for i in kept & set(idx))
    assert np.nanmax(y[keep]) == np.nanmax(y) and np.nanmin(y[keep]) == np.nanmin(y)


def test_downsample_short_series_and_one_instant() -> None:
    assert downsample(np.arange(10.0), np.arange(10.0), 500).tolist() == list(range(10))
    x = np.zeros(2000)  # every point at the same time: buckets by position, extremes kept
    y = np.sin(np.arange(2000.0))
    keep = downsample(x, y, 100)
    assert len(keep) <= 100 and y[keep].max() == y.max() and y[keep].min() == y.min()


# --- series on a tiny trace, by hand ------------------------------------------------------------
def test_time_series_tiny_trace_by_hand(tmp_path) -> None:
    series = time_series(load(write_trace(tmp_path / "t", tiny_events()), workers=1))
    q = series["queue_length"]
    assert (q["x_unit"], q["y_unit"], q["drawstyle"], q["lines_total"]) == ("ms", "ops", "steps-post", 1)
    # launches at 12, 40 (graph: two kernels), 52; GPU starts at 30, 60, 66, 70 (µs); trace starts at 0
    assert q["lines"][0]["label"] == "stream 7"
    assert q["lines"][0]["x"] == [0.012, 0.030, 0.040, 0.052, 0.060, 0.066, 0.070]
    assert q["lines"][0]["y"] == [1, 0, 2, 3, 2, 1, 0]
    bw = series["memory_bw"]["lines"]
    assert [(line["label"], line["x"], line["y"]) for line in bw] == [("Memcpy HtoD", [0.070, 0.072], [1.0, 0.0])]
    steps = series["step_time"]
    assert (steps["x_unit"], steps["y_unit"]) == ("step", "ms")
    assert [(line["x"], line["y"]) for line in steps["lines"]] == [([1.0], [0.1])]  # ProfilerStep#1: 100 µs
    assert series["memory"]["lines"] == []  # no [memory] events


def test_series_lines_are_capped_by_peak(tmp_path) -> None:
    events = tiny_events()
    series = time_series(load(write_trace(tmp_path / "t", events), workers=1), max_lines=0)
    assert series["queue_length"]["lines_total"] == 1 and series["queue_length"]["lines"] == []


# --- every number of the report is a number of the document ---------------------------------------
SOURCE = {"op_profile_cpu": "op_profile", "op_profile_gpu": "op_profile", "op_efficiency_none": "op_efficiency",
          "op_efficiency_model": "op_efficiency"}


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return math.isclose(a, b, rel_tol=0, abs_tol=0) or a == b
    return a == b


def assert_tables_come_from(report, sides: dict[str, dict]) -> int:
    """Every analysis table cell equals the value of the document row it was picked from."""
    checked = 0
    for section in report.sections:
        if section.id in ("checks", "passed", "movers", "step-traces"):  # step-traces: tests/test_step_trace.py
            continue
        for t in section.tables:
            name = SOURCE.get(t.id, t.id)
            keys = [c.key for c in t.columns]
            for row in t.rows:
                cells = dict(zip(keys, row))
                side = cells.pop("run", "")
                doc_rows = sides[side][name]
                assert any(all(_same(v, r.get(k)) for k, v in cells.items()) for r in doc_rows), (t.id, cells)
                checked += 1
    return checked


def assert_figures_come_from(report, sides: dict[str, dict]) -> None:
    for section in report.sections:
        for f in section.figures:
            if isinstance(f, BarFigure):
                doc_values = {json.dumps(v) for s in sides.values() for rows in s.values() if isinstance(rows, list)
                              for r in rows if isinstance(r, dict) for v in r.values()}
                for bar in f.bars:
                    assert all(v is None or json.dumps(v) in doc_values for v in bar.values), (f.id, bar)
            else:
                doc_lines = [(line["x"], line["y"]) for s in sides.values()
                             for entry in (s.get("series") or {}).values() for line in entry["lines"]]
                for panel in f.panels:
                    for line in panel.lines:
                        if f.id != "launch_delay":
                            assert (list(line.x), list(line.y)) in doc_lines, (f.id, line.label)


def test_single_run_report_numbers_are_document_numbers() -> None:
    doc = real_document()
    report = build_report(doc)
    assert report.kind == "analyze" and report.verdict is None
    assert assert_tables_come_from(report, {"": doc}) > 50
    assert_figures_come_from(report, {"": doc})
    ids = [s.id for s in report.sections]
    assert ids[:3] == ["overview", "temporal", "steps"] and ids[-1] == "metadata"
    assert "stragglers" in ids  # two ranks


def test_comparison_report_numbers_are_document_numbers() -> None:
    doc = comparison_document()
    report = build_report(doc)
    assert report.kind == "compare"
    sides = {"baseline": doc["baseline"]["analyses"], "candidate": doc["candidate"]["analyses"]}
    assert assert_tables_come_from(report, sides) > 20
    assert_figures_come_from(report, {**sides, "explanation": doc["explanation"]})
    # checks: same values as the document, counted fail/warn first, nothing dropped
    by_id = {c["id"]: c for c in doc["checks"]}
    assert sorted(c.name for c in report.verdict.checks) == sorted(by_id)
    order = {"fail": 0, "warn": 1, "inconclusive": 2, "pass": 3}
    ranks = [(not c.counted, order[c.status]) for c in report.verdict.checks]
    assert ranks == sorted(ranks)
    for c in report.verdict.checks:
        d = by_id[c.name]
        assert (c.status, c.baseline, c.candidate, c.delta, c.p_value) == (
            d["status"], d["baseline_value"], d["candidate_value"], d["delta"], d["evidence"]["p_value"])
        assert c.threshold == d["threshold"]["text"] and c.message == d["message"]
    assert report.verdict.status == doc["status"]
    # one headline number: the step-time check's medians, its causes from the attribution, labelled
    step = by_id["relative.step_time"]
    assert report.headline.text.startswith(f"step time {step['delta_pct']:+.1f} % (")
    assert report.verdict.headline.startswith(report.headline.text)
    x = doc["explanation"]
    assert f"{x['baseline_step_ms']:.1f} → {x['candidate_step_ms']:.1f} ms/step" in report.headline.basis
    assert "mean step time" in report.headline.basis  # the causes' statistic is named
    assert ("median" in report.headline.basis) == bool(report.headline.causes)
    same_way = [c for c in x["contributions"] if c["kind"] != "other" and c["delta_us"] * x["delta_ms"] > 0]
    assert [c.delta_us for c in report.headline.causes] == sorted(
        (c["delta_us"] for c in same_way), key=lambda v: -abs(v))[:3]


def test_findings_tables_have_one_row_per_finding() -> None:
    doc = comparison_document()
    report = build_report(doc)
    tables = [t for s in report.sections if s.id in ("checks", "passed") for t in s.tables]
    groups = group_findings(doc["checks"])
    assert sum(len(t.rows) for t in tables) == len(groups) == len(report.findings)
    assert [c.key for c in tables[0].columns] == ["status", "finding", "threshold", "evidence"]
    summaries = [r[1] for t in tables for r in t.rows]
    assert sorted(summaries) == sorted(g.summary for g in groups)
    passed = next(t for t in tables if t.id == "passed")
    assert passed.collapsed and all(r[0] == "pass" or "(waived)" in r[1] for r in passed.rows)


def test_movers_are_the_explanation_rows_in_order() -> None:
    doc = comparison_document()
    movers = next(s for s in build_report(doc).sections if s.id == "movers")
    contributions = next(t for t in movers.tables if t.id == "contributions")
    expected = [(c["label"], c["delta_us"], c["share_pct"]) for c in doc["explanation"]["contributions"]]
    got = [(r[0], r[3], r[4]) for r in contributions.rows]
    assert got == expected
    waterfall = next(f for f in build_report(doc).overview if f.id == "attribution_waterfall")
    x = doc["explanation"]
    assert waterfall.start[1] == 1000.0 * x["baseline_step_ms"] and waterfall.end[1] == 1000.0 * x["candidate_step_ms"]
    total = sum(d for _, d in waterfall.steps)
    assert abs(waterfall.start[1] + total - waterfall.end[1]) < 1e-6 * max(1.0, waterfall.end[1])


# --- picking, truncating, edge cases --------------------------------------------------------------
def test_top_kernels_are_the_largest_per_rank() -> None:
    doc = real_document()
    table = next(t for s in build_report(doc).sections for t in s.tables if t.id == "kernel_metrics")
    expected = sorted(doc["kernel_metrics"], key=lambda r: -r["sum_us"])[:TOP_ROWS]
    keys = [c.key for c in table.columns]
    got = [dict(zip(keys, row)) for row in table.rows]
    assert [(r["rank"], r["name"], r["sum_us"]) for r in got] == [(r["rank"], r["name"], r["sum_us"]) for r in expected]
    assert table.rows_total == len(doc["kernel_metrics"]) and not table.collapsed
    assert f"the JSON has all {len(doc['kernel_metrics'])}" in table.note


def test_long_tables_are_cut_and_folded_and_say_so() -> None:
    doc = dict(real_document())
    doc["profiler_steps"] = [{"rank": 0, "step": i, "wall_us": 1000.0 + i, "gpu_busy_us": 10.0, "gpu_events": 3}
                             for i in range(500)]
    table = next(t for s in build_report(doc).sections for t in s.tables if t.id == "profiler_steps")
    assert len(table.rows) == MAX_ROWS and table.rows_total == 500 and table.truncated and table.collapsed
    assert [r[1] for r in table.rows] == list(range(MAX_ROWS))  # by step, in order
    assert f"First {MAX_ROWS} of 500 rows" in table.note


def test_the_pdf_brief_shows_a_long_tables_first_rows_and_its_marked_ones() -> None:
    """The PDF's brief cuts a table to its first BRIEF_ROWS rows and keeps every marked row after
    them (re-marked), saying so in place of the page's "First N of M"; the page (HTML) keeps its
    MAX_ROWS, the brief of a short table is the table, and the appendix (not brief) is cut by
    nothing more."""
    import dataclasses

    from perfreport.report.html import BRIEF_ROWS, brief_table, render_html

    doc = dict(real_document())
    doc["profiler_steps"] = [{"rank": 0, "step": i, "wall_us": 1000.0 + i, "gpu_busy_us": 10.0, "gpu_events": 3}
                             for i in range(500)]
    report = build_report(doc)
    table = next(t for s in report.sections for t in s.tables if t.id == "profiler_steps")
    marked = dataclasses.replace(table, marked=(3, BRIEF_ROWS + 7, MAX_ROWS - 1))
    brief = brief_table(marked)
    assert brief.rows == table.rows[:BRIEF_ROWS] + (table.rows[BRIEF_ROWS + 7], table.rows[MAX_ROWS - 1])
    assert brief.marked == (3, BRIEF_ROWS, BRIEF_ROWS + 1) and brief.rows_total == 500
    assert f"First {MAX_ROWS} of 500" not in brief.note
    assert f"The first {BRIEF_ROWS} and 2 marked of 500 rows; report.html shows {MAX_ROWS}, report.json all." in brief.note
    short = dataclasses.replace(table, rows=table.rows[:BRIEF_ROWS])
    assert brief_table(short) is short

    def rows_in(html: str) -> int:
        body = html[html.index('id="tbl-profiler_steps"'):]
        return body[:body.index("</table>")].count("<tr") - 1  # (the header row)

    assert rows_in(render_html(report)) == MAX_ROWS
    assert rows_in(render_html(report, paged=True, brief=True)) == BRIEF_ROWS
    assert rows_in(render_html(report, paged=True, brief=False)) == MAX_ROWS


def test_tiny_trace_temporal_bars_by_hand(tmp_path_factory) -> None:
    doc = tiny_document(tmp_path_factory)
    fig = next(f for s in build_report(doc).sections for f in s.figures if f.id == "temporal_bars")
    # GPU work: gemm 30-40, graph kernels 60-65 and 66-70, memcpy 70-72: span 42, compute 19, copy 2
    (bar,) = fig.bars
    assert fig.segments == ("compute", "non-compute", "idle") and fig.unit == "pct"
    assert bar.values == pytest.approx((100 * 19 / 42, 100 * 2 / 42, 100 * 21 / 42))
    # one profiler step: no "per step" line plot (a lone dot), the step is in the table
    assert not any(f.id == "step_time" for s in build_report(doc).sections for f in s.figures)
    steps = next(t for s in build_report(doc).sections for t in s.tables if t.id == "profiler_steps")
    assert len(steps.rows) == 1 and steps.rows[0][steps.columns.index(
        next(c for c in steps.columns if c.key == "wall_us"))] == pytest.approx(100.0)


def test_a_note_many_ranks_share_is_one_line_naming_them() -> None:
    """Ranks with the same note (CPU-only ranks: no GPU activity) are one note naming them, in
    the order the notes first appear; a note of one rank reads as before."""
    summary = [{"rank": r, "note": "no GPU activity"} for r in range(512) if r != 300]
    summary.insert(5, {"rank": 300, "note": "steps start again"})
    summary += [{"rank": 600, "note": "no GPU activity"}, {"rank": 601}]
    report = build_report({"summary": summary, "source": "x"})
    assert report.notes == ("ranks 0–299, 301–511, 600: no GPU activity", "rank 300: steps start again")


def test_a_real_jobs_cpu_only_ranks_share_one_no_gpu_note(tmp_path: Path) -> None:
    """Two real CPU-only traces as one job: the report says "no GPU activity" once, naming both
    ranks, and their raw events hold no kernel, memcpy or memset."""
    import gzip
    import shutil

    from perfreport.analyses.summary import NO_GPU_NOTE

    job = tmp_path / "job"
    job.mkdir()
    for folder in ("odd_cpu_only_rank34of300_trimmed", "odd_no_gpu_no_distinfo"):
        for path in (TRACES / folder).glob("*.json.gz"):
            shutil.copy(path, job / path.name)
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
    for path in job.glob("*.json.gz"):
        assert not [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("cat") in gpu_cats]
    doc = json.loads(json_text(summary_document(analyze(job, workers=1))))
    ranks = sorted(r["rank"] for r in doc["summary"])
    report = build_report(doc)
    assert len(ranks) == 2 and [n for n in report.notes if NO_GPU_NOTE in n] == [f"ranks {ranks[0]}, {ranks[1]}: {NO_GPU_NOTE}"]


def test_nan_becomes_missing_and_empty_documents_still_build() -> None:
    doc = {"summary": [{"rank": 0, "gpu_busy_us": float("nan"), "note": "no GPU activity"}], "source": "x"}
    report = build_report(doc)
    table = report.sections[0].tables[0]
    assert table.rows[0][table.columns.index(next(c for c in table.columns if c.key == "gpu_busy_us"))] is None
    assert report.notes == ("rank 0: no GPU activity",)
    empty = build_report({})
    assert empty.sections == () and empty.kind == "analyze"
    odd = build_report({"kind": "perfreport.compare", "checks": [], "status": "pass"})
    assert odd.kind == "compare" and odd.verdict.checks == () and odd.status == "pass"


def test_report_schema_validates_both_documents() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((Path(__file__).parents[1] / "perfreport" / "report" / "report-schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for doc in (real_document(), comparison_document()):
        errors = list(validator.iter_errors(doc))
        assert not errors, errors[0].message
    broken = dict(comparison_document(), status="maybe")
    assert list(validator.iter_errors(broken))


def test_a_build_makes_each_table_into_rows_once(monkeypatch, tmp_path_factory):
    """Sections read a table several times; inside a build each Records table is made into
    rows once, and the report is the one built from the plain JSON rows."""
    from perfreport.documents.cells import Records
    from perfreport.report import blocks

    analysis = analyze(write_trace(Path(tmp_path_factory.mktemp("kept")), tiny_events()), workers=1)
    document = summary_document(analysis)
    made = []
    real = Records.tolist
    monkeypatch.setattr(Records, "tolist", lambda self: (made.append(id(self)), real(self))[1])
    report = build_report(document)
    assert made and len(made) == len(set(made))  # each table once
    assert report == build_report(json.loads(json_text(document)))  # as from report.json's rows
    monkeypatch.setattr(blocks, "KEPT_ROWS", 0)  # nothing kept: every read makes its rows
    made.clear()
    assert build_report(document) == report and len(made) > len(set(made))


@pytest.mark.parametrize("seed", range(6))
def test_long_tables_cut_in_numpy_are_the_rows_sorted_as_dicts(seed, monkeypatch):
    """A long table's shown rows, found by sorting its number columns in numpy, are those the
    rows sorted as dicts give: stable, missing (NaN, inf) last, top-N largest first."""
    import pandas as pd

    from perfreport.documents.cells import Records
    from perfreport.report import blocks
    from perfreport.report.blocks import Side, table

    rng = np.random.default_rng(seed)

    def frame(n: int) -> pd.DataFrame:
        f = pd.DataFrame({"rank": rng.integers(0, 3, n), "step": rng.integers(0, 50, n),
                          "x": np.where(rng.random(n) < 0.1, np.nan, rng.integers(0, 20, n).astype(float)),
                          "b": rng.random(n) < 0.5, "name": [f"k{i % 7}" for i in range(n)]})
        f.loc[f.index[::97], "x"] = np.inf
        f.loc[f.index[::89], "x"] = -np.inf
        return f

    sides = [Side("baseline", {"t": Records(frame(1500))}), Side("candidate", {"t": Records(frame(1505))})]
    cases = [(("rank", "step"), False, None), (("x",), True, 15), (("x",), False, 15), (("x", "rank"), False, None),
             (("b", "x"), False, 7), (("x",), True, None), (("name",), False, None)]
    for sort, descending, top in cases:
        fast = table("t", "T", sides, "t", ["rank", "step", "x", "b"], sort=sort, descending=descending, top=top)
        monkeypatch.setattr(blocks, "FIRST_ROWS_FROM", 10**9)
        slow = table("t", "T", sides, "t", ["rank", "step", "x", "b"], sort=sort, descending=descending, top=top)
        monkeypatch.setattr(blocks, "FIRST_ROWS_FROM", 1_000)
        assert fast == slow and fast.rows_total == 3005, (sort, descending, top)


def test_a_report_built_from_tables_is_the_report_built_from_their_json() -> None:
    """The report of a document fresh from the analyses (tables as Records, read a few columns at
    a time: the step-time and launch figures, the step trace's pick) is the report of its JSON."""
    import dataclasses

    from perfreport.documents.cells import Records

    recorded = TRACES.parent / "recorded"  # our H100 recordings: steps enough for every figure
    doc = report_document(compare(recorded / "repeat_base" / "run1", recorded / "sync_each_step" / "run1", workers=1))
    assert isinstance(doc["baseline"]["analyses"]["step_metrics"], Records)
    fresh, read = build_report(doc), build_report(json.loads(json_text(doc)))
    figures = [b for s in fresh.sections for b in s.blocks if isinstance(b, LineFigure)] + list(fresh.overview)
    assert {"step_time_judged", "launch_delay"} <= {f.id for f in figures}
    assert "step-traces" in {s.id for s in fresh.sections}
    assert dataclasses.replace(fresh, document=None) == dataclasses.replace(read, document=None)


def test_the_launch_figure_plots_every_step_of_its_table_and_marks_the_outliers():
    """The launch-delay figure against the table it draws, from a recorded H100 run with its
    steps renumbered from 0 (torch's first step is ProfilerStep#0, which the figure once left
    out): a point per step in step order at the step's delay p95, crossed where the step has
    runtime or launch-delay outliers."""
    from perfreport.analyses import ANALYSES
    from perfreport.documents.cells import Records
    from perfreport.report.blocks import Side
    from perfreport.report.sections import launch_figure

    from .conftest import DATA, load_cached

    table = dict(ANALYSES)["launch_stats_by_step"](load_cached(str(DATA / "recorded" / "repeat_base" / "run1")))
    table = table.assign(iteration=table["iteration"] - table["iteration"].min())
    figure = launch_figure([Side("baseline", {"launch_stats_by_step": Records(table)})])
    (line,) = figure.panels[0].lines
    rows = table.sort_values("iteration", kind="stable")
    assert list(line.x) == rows["iteration"].tolist() and line.x[0] == 0 and len(line.x) > 5
    assert list(line.y) == rows["launch_delay_p95_us"].tolist()
    outliers = (rows["runtime_outliers"] > 0) | (rows["launch_delay_outliers"] > 0)
    assert [line.x[i] for i in line.marked] == rows.loc[outliers, "iteration"].tolist()


def test_the_step_time_figure_plots_each_steps_slowest_rank_and_fades_the_unjudged():
    """The step-time figure against the step metrics it draws, of a recorded 2-rank gloo DDP
    run: a point per step in step order at the slowest rank's step time (the table's maximum
    over ranks), the steps the gate did not judge faded."""
    from perfreport.analyses import ANALYSES
    from perfreport.documents.cells import Records
    from perfreport.report.blocks import Side
    from perfreport.report.overview import step_time_figure

    from .conftest import DATA, load_cached

    table = dict(ANALYSES)["step_metrics"](load_cached(str(DATA / "recorded" / "setups" / "ddp_w2_gloo")))
    assert table["rank"].nunique() == 2
    slowest = table.groupby("step")["step_time_us"].max().sort_index()
    judged = slowest.index[1:].tolist()  # the first step left out, as a warm-up would be
    figure = step_time_figure([Side("baseline", {"step_metrics": Records(table)})], {"baseline": judged})
    (line,) = figure.panels[0].lines
    assert list(line.x) == slowest.index.tolist() and len(line.x) > 3
    assert list(line.y) == slowest.tolist()
    assert list(line.y) != table[table["rank"] == 0].sort_values("step")["step_time_us"].tolist()  # not one rank's
    assert list(line.faded) == [0]


def _launch_points_by_rows(steps, ranks, p95, runtime, delay):
    """report.sections.launch_points as first written, a tuple per row: the reference."""
    from perfreport.report.blocks import order_key

    by_rank: dict = {}
    for step, rank, value, run, late in zip(steps, ranks, p95, runtime, delay):
        if step is not None and step >= 0:
            by_rank.setdefault(rank, []).append((step, value, (run or 0) > 0 or (late or 0) > 0))
    return [(rank, [p[0] for p in pts], [p[1] for p in pts], [i for i, p in enumerate(pts) if p[2]])
            for rank, pts in ((rank, sorted(by_rank[rank], key=lambda p: p[0])) for rank in sorted(by_rank, key=order_key))]


def _slowest_by_rows(steps, values):
    """report.overview.slowest_per_step as first written, a dict entry per row: the reference."""
    import math

    per_step: dict = {}
    for step, value in zip(steps, values):
        if isinstance(step, int) and step >= 0 and isinstance(value, (int, float)):
            per_step[step] = max(per_step.get(step, -math.inf), float(value))
    return sorted(per_step), [per_step[s] for s in sorted(per_step)]


@pytest.mark.parametrize("seed", range(10))
def test_per_step_figure_points_in_numpy_are_the_rows_ones(seed) -> None:
    """The step-time and launch-delay figures' points, made in numpy from plain cells, are those
    a row at a time gives: duplicate steps across ranks and within one, negative steps, NaN and
    None values, ints among floats; and odd cells (a None step, a float step, a bool, text) take
    the row-at-a-time way with the same result."""
    from perfreport.report.overview import slowest_per_step
    from perfreport.report.sections import launch_points

    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 80))
    steps = [int(x) for x in rng.integers(-2, 12, size=n)]
    ranks = [int(x) for x in rng.integers(0, 3, size=n)]
    values = [[1.5, 2.0, float("nan"), 7, None, 3.25][int(k)] for k in rng.integers(0, 6, size=n)]
    runtime = [[0, 1, None, float("nan"), 0.0, 2][int(k)] for k in rng.integers(0, 6, size=n)]
    delay = [[0, None, 3][int(k)] for k in rng.integers(0, 3, size=n)]
    cases = [(steps, ranks, values, runtime, delay)]
    if n:
        odd = list(steps)
        odd[int(rng.integers(0, n))] = [None, 2.0, True][seed % 3]
        cases.append((odd, ranks, values, runtime, delay))

    def same(a, b) -> bool:  # (repr: a NaN equals itself)
        return repr(a) == repr(b)

    for s, r, v, run, late in cases:
        assert same(launch_points(s, r, v, run, late), _launch_points_by_rows(s, r, v, run, late))
        numbers = [x for x in v if x is not None]
        for steps_, values_ in ((s[:len(numbers)], numbers), (s, v)):  # plain cells, then a None among them
            assert same(list(slowest_per_step(steps_, values_)), list(_slowest_by_rows(steps_, values_)))


def test_the_causes_say_which_runs_they_explain_when_the_gate_judged_more() -> None:
    """The attribution explains one run of each side; with a candidate of two runs (``--run``)
    the gate judges both. The headline's and the movers' sentences then say "one run of each
    side" and how many runs the gate judged (the step-time check's evidence), with the
    attribution's own sample counts: those of the one-run comparison of the same two runs.
    One run a side: "the same … samples the gate judged"."""
    recorded = TRACES.parent / "recorded" / "gpu_bound_repeat"
    one = report_document(compare(recorded / "run1", recorded / "run2", workers=1))
    two = report_document(compare(recorded / "run1", recorded / "run2", candidate_runs=[recorded / "run3"],
                                  workers=1))
    step = next(c for c in two["checks"] if c["name"] == "step_time")["evidence"]
    assert (step["baseline_runs"], step["candidate_runs"]) == (1, 2)
    x1, x2 = one["explanation"], two["explanation"]
    assert (x2["baseline_samples"], x2["candidate_samples"]) == (x1["baseline_samples"], x1["candidate_samples"])
    samples = f"{x2['baseline_samples']} vs {x2['candidate_samples']} (rank, step) samples the gate judged"
    basis = build_report(json.loads(json_text(two))).headline.basis
    assert f"over {samples}, from one run of each side (1 vs 2 runs judged)" in basis, basis
    movers = next(s for s in build_report(json.loads(json_text(two))).sections if s.id == "movers")
    text = movers.blocks[0].text
    assert "in one run of each side" in text and "the gate judged 1 baseline and 2 candidate runs" in text, text
    assert f"over the same {x1['baseline_samples']} vs {x1['candidate_samples']}" in build_report(
        json.loads(json_text(one))).headline.basis
