"""perfreport.documents.call_rows: report.json keeps each rank's first calls of the per-call
``collectives`` table, says which ranks were cut and by how much, and keeps every call with
``--full-tables``; checked against the raw gloo events of our FSDP recording."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import perfreport.pipeline as pipeline
from perfreport.cli import main
from perfreport.documents.call_rows import cut_tables, cut_text

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
    out, cut = cut_tables({"collectives": frame, "summary": summary}, limit)
    want = frame[frame.groupby("rank").cumcount() < limit].reset_index(drop=True)
    pd.testing.assert_frame_equal(out["collectives"], want)
    assert out["summary"] is summary
    assert cut == [{"table": "collectives", "rank": int(r), "rows": int(counts[r]), "kept": limit}
                   for r in sorted(counts.index) if counts[r] > limit]
    assert len(cut) == 2
    assert cut_tables({"collectives": frame}, None)[0]["collectives"] is frame
    assert cut_tables({"collectives": frame}, int(counts.max())) == ({"collectives": frame}, [])


def test_cut_text_names_the_ranks_cut():
    cut = [{"table": "collectives", "rank": r, "rows": 30_000 + r, "kept": 20_000} for r in range(6)]
    assert cut_text([]) is None
    text = cut_text(cut)
    assert text.startswith("report.json keeps each rank's first 20,000 collective calls (rank 0 made 30,000, ")
    assert "rank 3 made 30,003 and 2 more ranks)" in text and "--full-tables" in text


def test_report_json_keeps_the_first_calls_of_a_gloo_job(tmp_path, monkeypatch):
    raw = _raw_gloo_calls()
    assert [len(raw[r]) for r in (0, 1)] == [135, 135]
    monkeypatch.setattr(pipeline, "CALL_ROWS", 100)
    assert main(["analyze", str(FSDP_GLOO), "--out", str(tmp_path / "cut"), "--format", "json,md", "-q"]) == 0
    doc = json.loads((tmp_path / "cut" / "report.json").read_text())
    assert doc["tables_cut"] == [{"table": "collectives", "rank": r, "rows": 135, "kept": 100} for r in (0, 1)]
    for rank, durs in raw.items():
        rows = [c for c in doc["collectives"] if c["rank"] == rank]
        assert [c["dur_us"] for c in rows] == pytest.approx(durs[:100])  # the first 100 calls, in time order
        summary = [s for s in doc["collective_summary"] if s["rank"] == rank]
        assert sum(s["count"] for s in summary) == 135  # the summaries count every call
    md = (tmp_path / "cut" / "report.md").read_text()
    assert "report.json keeps each rank's first 100 collective calls (rank 0 made 135, rank 1 made 135)" in md

    assert main(["analyze", str(FSDP_GLOO), "--out", str(tmp_path / "all"), "--format", "json,md", "-q",
                 "--full-tables"]) == 0
    doc = json.loads((tmp_path / "all" / "report.json").read_text())
    assert doc["tables_cut"] == [] and len(doc["collectives"]) == 270
    assert "collective calls (rank" not in (tmp_path / "all" / "report.md").read_text()


def test_a_comparison_cuts_each_side(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "CALL_ROWS", 120)
    out = tmp_path / "cmp"
    assert main(["compare", str(FSDP_GLOO), str(FSDP_GLOO), "--out", str(out), "--format", "json", "-q"]) in (0, 1)
    doc = json.loads((out / "report.json").read_text())
    for side in ("baseline", "candidate"):
        analyses = doc[side]["analyses"]
        assert analyses["tables_cut"] == [{"table": "collectives", "rank": r, "rows": 135, "kept": 120} for r in (0, 1)]
        assert len(analyses["collectives"]) == 240
