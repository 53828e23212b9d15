"""Per-rank summary numbers, cross-checked by brute force on real traces."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from perfreport.analyses.intervals import covered, intersection_length, union
from perfreport.analyses.summary import NO_GPU_NOTE, summary
from perfreport.cli import main

from .conftest import TRACES, brute_union_length, load_cached



def test_union_and_overlap_small_cases() -> None:
    s, e = union(np.array([0.0, 5.0, 2.0, 4.0]), np.array([3.0, 6.0, 4.0, 4.5]))
    assert s.tolist() == [0.0, 5.0] and e.tolist() == [4.5, 6.0]
    assert covered(np.array([]), np.array([])) == 0.0
    a = (np.array([0.0, 10.0]), np.array([5.0, 20.0]))
    b = (np.array([3.0]), np.array([12.0]))
    assert intersection_length(a, b) == 4.0  # [3,5] + [10,12]
    assert intersection_length(a, (np.array([5.0]), np.array([10.0]))) == 0.0  # touching only


def test_summary_on_nccl_trace_matches_brute_force() -> None:
    traces = load_cached(str(TRACES / "hta_a100_nccl_rank0of2"))
    row = summary(traces).iloc[0]
    t = traces[0]
    gpu = t.gpu_activity()
    busy = brute_union_length(t.ts[gpu], t.ts[gpu] + t.dur[gpu])
    assert row["kernels"] == 2700 and row["memcpy"] == 960 and row["memset"] == 114
    assert row["events"] == 40573
    assert abs(row["gpu_busy_us"] - busy) < 1e-6
    span = (t.ts[gpu] + t.dur[gpu]).max() - t.ts[gpu].min()
    assert abs(row["gpu_busy_pct"] - 100 * busy / span) < 1e-9
    assert row["steps"] == 3 and row["first_step"] == 4 and row["last_step"] == 6
    assert row["gpu_name"] == "NVIDIA A100-PG509-200"


def test_summary_without_gpu_activity_says_so() -> None:
    row = summary(load_cached(str(TRACES / "odd_no_gpu_no_distinfo"))).iloc[0]
    assert row["kernels"] == 0 and np.isnan(row["gpu_busy_us"]) and row["note"] == NO_GPU_NOTE
    assert row["steps"] == 1 and row["events"] == 2467


def test_2021_capitalised_categories_are_counted() -> None:
    row = summary(load_cached(str(TRACES / "odd_old2021_tbplugin_gpu_metrics"))).iloc[0]
    assert (row["kernels"], row["memcpy"], row["memset"]) == (30, 2, 0)


def test_analyze_writes_summary_json_for_every_rank(tmp_path: Path, capsys) -> None:
    assert main(["analyze", str(TRACES / "hta_sampled_2of128rank"), "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "report.json").read_text())
    assert [r["rank"] for r in doc["summary"]] == [0, 1]
    assert [r["kernels"] for r in doc["summary"]] == [1154, 1104]
    assert [r["events"] for r in doc["summary"]] == [4855, 4720]
    assert doc["ranks"][1]["world_size"] == 128
    md = (tmp_path / "report.md").read_text()
    assert "| 1 | – | 4,720 | 1,104 | 40 | 10 |" in md
    # one JSON document, no JUnit file without test cases
    written = [p.name for p in tmp_path.iterdir() if p.suffix in (".json", ".xml") and not p.name.startswith(".")]
    assert written == ["report.json"]  # (.perfreport-set.json is the report set's marker: perfreport.storing.fileset)
    assert not (tmp_path / "summary.json").exists() and not (tmp_path / "summary.md").exists()
    out = capsys.readouterr().out
    assert "1,154" in out and "busy %" in out
