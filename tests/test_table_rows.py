"""perfreport.documents.table_rows: report.json keeps each rank's first calls of the per-call
``collectives`` table and the rows of its first steps of the per-step tables, says which ranks
were cut and by how much, and keeps every row with ``--full-tables``; checked against the raw
gloo and ProfilerStep events of our FSDP recording."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfreport.cli import main
from perfreport.documents import table_rows
from perfreport.documents.table_rows import cut_tables, cut_text, steps_cut_text

FSDP_GLOO = Path(__file__).parent / "data" / "recorded" / "setups" / "fsdp_full_w2_gloo"


def _raw_gloo_calls() -> dict[int, list[float]]:
    """Per rank: the durations (µs) of its gloo collective spans in start order, from the JSON."""
    out = {}
    for rank in (0, 1):
        with gzip.open(FSDP_GLOO / f"rank{rank}.pt.trace.json.gz") as f:
            events = json.load(f)["traceEvents"]
        calls = sorted((e["ts"], float(e["dur"])) for e in events if e.get("ph") == "X"
                       and str(e.get("name", "")).startswith("gloo:") and e.get("cat") != "gpu_user_annotation")
        out[rank] = [dur for _, dur in calls]
    return out


def test_each_rank_keeps_its_first_rows_in_table_order():
    rng = np.random.default_rng(7)
    ranks = rng.choice([3, 0, 5], size=40, p=[0.5, 0.4, 0.1])
    frame = pd.DataFrame({"rank": ranks, "ts_us": np.arange(40.0)})
    summary = pd.DataFrame({"rank": [0]})
    counts = pd.Series(ranks).value_counts()
    limit = int(counts.sort_values().iloc[1]) - 1  # cuts the two busiest ranks, not the least busy
    out, cut = cut_tables({"collectives": frame, "summary": summary}, limit, None)
    want = frame[frame.groupby("rank").cumcount() < limit].reset_index(drop=True)
    pd.testing.assert_frame_equal(out["collectives"], want)
    assert out["summary"] is summary
    assert cut == [{"table": "collectives", "rank": int(r), "rows": int(counts[r]), "kept": limit}
                   for r in sorted(counts.index) if counts[r] > limit]
    assert len(cut) == 2
    assert cut_tables({"collectives": frame}, None, None)[0]["collectives"] is frame
    assert cut_tables({"collectives": frame}, int(counts.max()), 1) == ({"collectives": frame}, [])


def test_cut_text_names_the_ranks_cut():
    cut = [{"table": "collectives", "rank": r, "rows": 30_000 + r, "kept": 20_000} for r in range(6)]
    assert cut_text([]) is None
    text = cut_text(cut)
    assert text.startswith("report.json keeps each rank's first 20,000 collective calls (rank 0 made 30,000, ")
    assert "rank 3 made 30,003 and 2 more ranks)" in text and "--full-tables" in text and "skew" not in text
    skew = [{"table": "collective_skew", "rows": 41_000, "kept": 20_000, "largest": "skew_us"}]
    assert cut_text(skew).startswith("report.json keeps the 20,000 calls of largest start skew across ranks "
                                     "(of 41,000 matched); ")


def test_matched_calls_keep_those_of_largest_skew_in_their_order():
    skew = pd.DataFrame({"kind": "all_reduce", "step": np.arange(6), "skew_us": [3.0, np.nan, 9.0, 3.0, 1.0, 7.0]})
    out, cut = cut_tables({"collective_skew": skew}, 3, None)
    assert out["collective_skew"]["step"].tolist() == [0, 2, 5]  # 9, 7 and the first of the two 3s, in table order
    assert cut == [{"table": "collective_skew", "rows": 6, "kept": 3, "largest": "skew_us"}]
    assert cut_tables({"collective_skew": skew}, 6, None)[1] == [] and cut_tables({"collective_skew": skew}, None)[1] == []


def keep(monkeypatch, calls: int | None = None, steps: int | None = None) -> None:
    """Bounds as small as a test's traces: the job's CALL_ROWS and STEP_ROWS ``calls`` and
    ``steps``, which its ranks share (no rank keeping more than its share: the floors at 1)."""
    if calls is not None:
        monkeypatch.setattr(table_rows, "CALL_ROWS", calls)
        monkeypatch.setattr(table_rows, "RANK_CALL_ROWS_MIN", 1)
    if steps is not None:
        monkeypatch.setattr(table_rows, "STEP_ROWS", steps)
        monkeypatch.setattr(table_rows, "RANK_STEP_ROWS_MIN", 1)


def test_the_ranks_of_a_job_share_its_bounds():
    """One rank keeps CALL_ROWS calls and STEP_ROWS steps; n ranks a share each, never fewer than
    the floors (which keep every real rank we hold whole)."""
    assert table_rows.rows_kept(1) == (table_rows.CALL_ROWS, table_rows.STEP_ROWS) == (20_000, 10_000)
    assert table_rows.rows_kept(16) == (1_250, 625) and table_rows.rows_kept(0) == table_rows.rows_kept(1)
    assert table_rows.rows_kept(4096) == (table_rows.RANK_CALL_ROWS_MIN, table_rows.RANK_STEP_ROWS_MIN) == (1_000, 100)


def test_report_json_keeps_the_first_calls_of_a_gloo_job(tmp_path, monkeypatch):
    """Each rank's first calls in time order (its share of the job's bound), and of the calls
    matched across the two ranks those of largest start skew (the job's bound), which the report
    lists: checked against the gloo spans of the raw JSON (each rank's durations; each matched
    call's skew, its two ranks' starts apart)."""
    raw = _raw_gloo_calls()
    assert [len(raw[r]) for r in (0, 1)] == [135, 135]
    keep(monkeypatch, calls=100)  # 50 calls a rank, the 100 largest skews
    assert main(["analyze", str(FSDP_GLOO), "--out", str(tmp_path / "cut"), "--format", "json,md", "-q"]) == 0
    doc = json.loads((tmp_path / "cut" / "report.json").read_text())
    assert doc["tables_cut"] == [{"table": "collectives", "rank": r, "rows": 135, "kept": 50} for r in (0, 1)] + [
        {"table": "collective_skew", "rows": 135, "kept": 100, "largest": "skew_us"}]
    for rank, durs in raw.items():
        rows = [c for c in doc["collectives"] if c["rank"] == rank]
        assert [c["dur_us"] for c in rows] == pytest.approx(durs[:50])  # the first 50 calls, in time order
        summary = [s for s in doc["collective_summary"] if s["rank"] == rank]
        assert sum(s["count"] for s in summary) == 135  # the summaries count every call
    starts = _raw_gloo_starts()
    skews = sorted((abs(a - b) for a, b in zip(starts[0], starts[1])), reverse=True)  # the i-th call of each rank
    kept = [r["skew_us"] for r in doc["collective_skew"]]
    assert len(kept) == 100 and sorted(kept, reverse=True) == pytest.approx(skews[:100], abs=1e-3)
    md = (tmp_path / "cut" / "report.md").read_text()
    assert ("report.json keeps each rank's first 50 collective calls (rank 0 made 135, rank 1 made 135) and "
            "the 100 calls of largest start skew across ranks (of 135 matched)") in md

    assert main(["analyze", str(FSDP_GLOO), "--out", str(tmp_path / "all"), "--format", "json,md", "-q",
                 "--full-tables"]) == 0
    doc = json.loads((tmp_path / "all" / "report.json").read_text())
    assert doc["tables_cut"] == [] and len(doc["collectives"]) == 270 and len(doc["collective_skew"]) == 135
    assert sorted((r["skew_us"] for r in doc["collective_skew"]), reverse=True) == pytest.approx(skews, abs=1e-3)
    assert "collective calls (rank" not in (tmp_path / "all" / "report.md").read_text()


def _raw_gloo_starts() -> dict[int, list[float]]:
    """Per rank: the start times (µs) of its gloo collective spans in start order, from the JSON."""
    out = {}
    for rank in (0, 1):
        with gzip.open(FSDP_GLOO / f"rank{rank}.pt.trace.json.gz") as f:
            events = json.load(f)["traceEvents"]
        out[rank] = sorted(float(e["ts"]) for e in events if e.get("ph") == "X"
                           and str(e.get("name", "")).startswith("gloo:") and e.get("cat") != "gpu_user_annotation")
    return out


def test_a_comparison_cuts_each_side(tmp_path, monkeypatch):
    keep(monkeypatch, calls=120)
    out = tmp_path / "cmp"
    assert main(["compare", str(FSDP_GLOO), str(FSDP_GLOO), "--out", str(out), "--format", "json", "-q"]) in (0, 1)
    doc = json.loads((out / "report.json").read_text())
    for side in ("baseline", "candidate"):
        analyses = doc[side]["analyses"]
        assert analyses["tables_cut"] == [{"table": "collectives", "rank": r, "rows": 135, "kept": 60} for r in (0, 1)] \
            + [{"table": "collective_skew", "rows": 135, "kept": 120, "largest": "skew_us"}]
        assert len(analyses["collectives"]) == 120 and len(analyses["collective_skew"]) == 120


def test_each_rank_keeps_the_rows_of_its_first_steps():
    """A per-step table (a row or a few per step, the step column named step or iteration) keeps
    the rows of each rank's first steps by number, and those outside any step (-1); other
    tables stay whole."""
    steps = np.array([5, 1, -1, 3, 3, 2, 4, 1, 2, 9, -1])
    ranks = np.array([0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1])
    per_step = pd.DataFrame({"rank": ranks, "step": steps, "v": np.arange(11.0)})
    by_step = per_step.rename(columns={"step": "iteration"})
    other = pd.DataFrame({"rank": ranks, "step": steps})
    out, cut = cut_tables({"idle_breakdown_per_step": per_step, "launch_stats_by_step": by_step, "op_steps": other},
                          None, 2)
    assert out["op_steps"] is other
    assert [table_rows.is_per_step(n) for n in ("straggler_steps", "step_metrics", "op_steps", "step_times")] == \
        [True, True, False, False]
    assert out["idle_breakdown_per_step"]["v"].tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 7.0, 8.0, 10.0]  # 0: 1, 3; 1: 1, 2
    assert out["launch_stats_by_step"]["v"].tolist() == out["idle_breakdown_per_step"]["v"].tolist()
    assert cut == [{"table": t, "rank": r, "rows": n, "kept": 4, "steps": k, "steps_kept": 2}
                   for t in ("idle_breakdown_per_step", "launch_stats_by_step") for r, n, k in ((0, 5, 3), (1, 6, 4))]
    text = steps_cut_text(cut)
    assert "keep each rank's first 2 profiler steps (rank 0 has 3, rank 1 has 4)" in text
    assert cut_text(cut) is None and steps_cut_text([]) is None


@pytest.mark.parametrize("high", [30, 10**9])  # a narrow range of steps (presence table) and a wide one (sort)
@pytest.mark.parametrize("ranks", [[4], [2, 0, 7]])
def test_first_steps_match_each_ranks_sorted_distinct_steps(high, ranks):
    rng = np.random.default_rng(high + len(ranks))
    rank = rng.choice(ranks, size=500)
    step = rng.integers(-1, high, size=500)
    keep, cut = table_rows._first_steps(pd.DataFrame({"rank": rank, "iteration": step}), "iteration", 5)
    for r in sorted(set(ranks)):
        mine = rank == r
        distinct = sorted(set(step[mine & (step >= 0)].tolist()))
        kept = set(distinct[:5])
        assert keep[mine].tolist() == [s < 0 or s in kept for s in step[mine].tolist()]
        entry = [c for c in cut if c["rank"] == r]
        assert entry == ([{"rank": r, "rows": int(mine.sum()), "kept": int(keep[mine].sum()),
                           "steps": len(distinct), "steps_kept": 5}] if len(distinct) > 5 else [])


def _raw_step_counts() -> dict[int, int]:
    """Per rank: its ProfilerStep#N spans in the raw JSON."""
    out = {}
    for rank in (0, 1):
        with gzip.open(FSDP_GLOO / f"rank{rank}.pt.trace.json.gz") as f:
            events = json.load(f)["traceEvents"]
        out[rank] = len({e["name"] for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith(
            "ProfilerStep#") and e.get("cat") != "gpu_user_annotation"})
    return out


def test_report_json_keeps_the_first_steps_of_a_job(tmp_path, monkeypatch):
    raw = _raw_step_counts()
    assert raw == {0: 5, 1: 5}
    keep(monkeypatch, steps=6)  # 3 steps a rank
    assert main(["analyze", str(FSDP_GLOO), "--out", str(tmp_path / "cut"), "--format", "json,md,html", "-q"]) == 0
    doc = json.loads((tmp_path / "cut" / "report.json").read_text())
    steps_cut = [c for c in doc["tables_cut"] if "steps" in c]
    assert {c["table"] for c in steps_cut} >= {"profiler_steps", "step_metrics", "launch_stats_by_step"}
    assert all(c["steps"] <= raw[c["rank"]] and c["steps_kept"] == 3 and c["kept"] < c["rows"] for c in steps_cut)
    assert [c["steps"] for c in steps_cut if c["table"] == "profiler_steps"] == [raw[0], raw[1]]
    for rank in (0, 1):
        kept = sorted(r["step"] for r in doc["profiler_steps"] if r["rank"] == rank)
        assert kept == sorted(kept)[:3] and len(kept) == 3
    assert [r["steps"] for r in doc["step_times"]] == [raw[0], raw[1]]  # the summaries count every step
    first = _raw_step_numbers()
    for rank in (0, 1):  # the GPU annotations' ProfilerStep#N rows (torch 2.4+): those of the first 3 steps
        named = sorted(int(r["name"].split("#")[1]) for r in doc["gpu_user_annotation_breakdown"]
                       if r["rank"] == rank and r["name"].startswith("ProfilerStep#"))
        assert named == first[rank][:3]
    html = (tmp_path / "cut" / "report.html").read_text()
    assert "keep each rank&#39;s first 3 profiler steps (rank 0 has 5, rank 1 has 5)" in html
    assert main(["analyze", str(FSDP_GLOO), "--out", str(tmp_path / "all"), "--format", "json", "-q",
                 "--full-tables"]) == 0
    whole = json.loads((tmp_path / "all" / "report.json").read_text())
    assert whole["tables_cut"] == [] and len(whole["profiler_steps"]) == sum(raw.values())


def _raw_step_numbers() -> dict[int, list[int]]:
    """Per rank: the N of its ProfilerStep#N spans in the raw JSON, ascending."""
    out = {}
    for rank in (0, 1):
        with gzip.open(FSDP_GLOO / f"rank{rank}.pt.trace.json.gz") as f:
            events = json.load(f)["traceEvents"]
        out[rank] = sorted({int(e["name"].split("#")[1]) for e in events if e.get("ph") == "X" and str(
            e.get("name", "")).startswith("ProfilerStep#") and e.get("cat") != "gpu_user_annotation"})
    return out


def test_a_comparisons_step_figure_draws_the_kept_steps_and_says_so(tmp_path, monkeypatch):
    """The first screen's step-time figure is drawn from step_metrics: with each rank's first 3
    steps kept, it draws those (the raw trace's first three ProfilerStep numbers) and its note
    says so."""
    from perfreport.report import build_report

    first = {rank: steps[:3] for rank, steps in _raw_step_numbers().items()}
    assert first[0] == first[1] and len(_raw_step_numbers()[0]) == 5
    keep(monkeypatch, steps=6)
    out = tmp_path / "cmp"
    assert main(["compare", str(FSDP_GLOO), str(FSDP_GLOO), "--out", str(out), "--format", "json", "-q"]) in (0, 1)
    figure = next(b for b in build_report(json.loads((out / "report.json").read_text())).overview
                  if getattr(b, "id", None) == "step_time_judged")
    assert figure.note.endswith("Each rank's first 3 steps only (report.json's per-step tables).")
    assert [list(line.x) for panel in figure.panels for line in panel.lines] == [first[0], first[0]]


def test_a_comparison_keeps_each_checks_first_samples(tmp_path, monkeypatch):
    """A check's samples (a step each) are cut like the per-step tables: the first STEP_ROWS of
    each side, the counts still counting every sample, and the dashboards' range left out (the
    smallest and largest of the first samples are not the candidate's); --full-tables keeps them."""
    from perfreport.report.interop import benchmark_json

    args = ["compare", str(FSDP_GLOO), str(FSDP_GLOO), "--format", "json,md", "-q"]
    assert main([*args, "--out", str(tmp_path / "all"), "--full-tables"]) in (0, 1)
    monkeypatch.setattr(table_rows, "STEP_ROWS", 2)
    assert main([*args, "--out", str(tmp_path / "cut")]) in (0, 1)
    whole, cut = (json.loads((tmp_path / d / "report.json").read_text()) for d in ("all", "cut"))
    most = max(w["evidence"][f"{side}_samples"] for w in whole["checks"] for side in ("baseline", "candidate")
               if len(w["evidence"][f"{side}_values"] or []) > 2)
    assert most == max(_raw_step_counts().values()) - 1  # a sample a judged step: each rank's ProfilerSteps, the last out
    said = (f"report.json keeps each check's first 2 samples a side (a side here has up to {most:,}); "
            "the verdicts use every sample")
    assert said in (tmp_path / "cut" / "report.md").read_text()  # the report says so, with the largest count
    assert "samples a side" not in (tmp_path / "all" / "report.md").read_text()
    longer = 0
    for w, c in zip(whole["checks"], cut["checks"], strict=True):
        assert w["id"] == c["id"]
        for side in ("baseline", "candidate"):
            full, kept = w["evidence"][f"{side}_values"], c["evidence"][f"{side}_values"]
            assert len(full) == w["evidence"][f"{side}_samples"] == c["evidence"][f"{side}_samples"]
            assert kept == full[:2]
            longer += len(full) > 2
    assert longer  # some check has more than two samples a side: the cut is exercised
    ranged = {e["name"]: "range" in e for e in benchmark_json(whole)}
    assert any(ranged.values())
    relative = [c for c in cut["checks"] if c["family"] == "relative" and c["candidate_value"] is not None]
    assert relative and all(c["evidence"]["candidate_samples"] > 2 for c in relative)  # every one cut
    assert not any("range" in e for e in benchmark_json(cut))


def test_the_gpu_annotations_step_rows_are_cut_by_the_number_in_their_name():
    """gpu_user_annotation_breakdown has a row per annotation name, and torch 2.4+ names one per
    step (ProfilerStep#N): those rows are kept for each rank's first steps by N, the other names'
    rows (and a missing name) all stay."""
    names = ["ProfilerStep#7", "Optimizer.step#SGD.step", "ProfilerStep#2", "ProfilerStep#10", None,
             "ProfilerStep#3", "ProfilerStep#2", "ProfilerStep#5", "## forward ##"]
    frame = pd.DataFrame({"rank": [0, 0, 0, 0, 0, 1, 1, 1, 1], "name": names, "sum_us": np.arange(9.0)})
    out, cut = cut_tables({"gpu_user_annotation_breakdown": frame}, None, 2)
    assert out["gpu_user_annotation_breakdown"]["sum_us"].tolist() == [0.0, 1.0, 2.0, 4.0, 5.0, 6.0, 8.0]
    assert cut == [{"table": "gpu_user_annotation_breakdown", "rank": r, "rows": n, "kept": n - 1, "steps": 3,
                    "steps_kept": 2} for r, n in ((0, 5), (1, 4))]  # ProfilerStep#10 and #5: each rank's third
    assert "first 2 profiler steps (rank 0 has 3, rank 1 has 3)" in steps_cut_text(cut)
    assert cut_tables({"gpu_user_annotation_breakdown": frame}, None, 3)[1] == []


def _without_run_details(document):
    """``document`` without what differs between two runs of one command (times, the command)."""
    if isinstance(document, dict):
        return {k: _without_run_details(v) for k, v in document.items()
                if k not in ("timings", "timings_s", "created_utc", "command")}
    if isinstance(document, list):
        return [_without_run_details(v) for v in document]
    return document


@pytest.mark.parametrize("command", ["analyze", "compare"])
def test_the_rank_tasks_cut_makes_the_document_the_parents_cut_makes(tmp_path, monkeypatch, command):
    """The rank tasks send each per-step table with the rows of report.json's steps only
    (AnalysisOptions.step_rows) and the cut's entries: the document is the one the parent's cut
    of the whole tables makes, every table row and tables_cut entry (in the same order) alike."""
    from perfreport import cli

    keep(monkeypatch, steps=6)
    args = [command, str(FSDP_GLOO), *([str(FSDP_GLOO)] if command == "compare" else []), "--format", "json", "-q"]
    assert main([*args, "--out", str(tmp_path / "tasks")]) in (0, 1)
    monkeypatch.setattr(cli, "step_rows", lambda args: None)  # the tasks send every row; the parent cuts
    assert main([*args, "--out", str(tmp_path / "parent")]) in (0, 1)
    tasks, parent = (_without_run_details(json.loads((tmp_path / d / "report.json").read_text()))
                     for d in ("tasks", "parent"))
    assert tasks == parent
    sides = [tasks] if command == "analyze" else [tasks["baseline"]["analyses"], tasks["candidate"]["analyses"]]
    for side in sides:
        cut = side["tables_cut"]
        assert {c["table"] for c in cut} >= {"profiler_steps", "step_metrics", "launch_stats_by_step",
                                            "gpu_user_annotation_breakdown"}
        assert [c["table"] for c in cut if c["rank"] == 0] == [c["table"] for c in cut if c["rank"] == 1]


def test_merged_cuts_list_the_entries_as_one_cut_of_the_whole_tables_does():
    tables = {"a_per_step": pd.DataFrame({"rank": [0, 0, 1, 1, 1], "step": [1, 2, 1, 2, 3]}),
              "b_by_step": pd.DataFrame({"rank": [1, 1, 0, 0], "step": [5, 6, 5, 6]})}
    _, whole = cut_tables(tables, None, 1)
    per_rank = [c for rank in (1, 0) for name, frame in tables.items()
                for c in cut_tables({name: frame[frame["rank"] == rank]}, None, 1)[1]]
    assert [(c["table"], c["rank"]) for c in per_rank] == [("a_per_step", 1), ("b_by_step", 1), ("a_per_step", 0),
                                                           ("b_by_step", 0)]
    assert table_rows.merged_cuts(per_rank, [], list(tables)) == whole
    assert table_rows.merged_cuts([], whole, list(tables)) == whole
    # a table and rank cut twice (the rank tasks' cut, then the job's share): one entry, the
    # rows before the first cut and those kept after the second
    first = cut_tables({"a_per_step": tables["a_per_step"]}, None, 2)
    second = cut_tables(first[0], None, 1)
    assert table_rows.merged_cuts(first[1], second[1], ["a_per_step"]) == \
        cut_tables({"a_per_step": tables["a_per_step"]}, None, 1)[1]
