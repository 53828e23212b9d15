"""perfreport step-trace: the judged step that moved most, per side, as a small Kineto JSON that
Perfetto / chrome://tracing and perfreport itself read, with the step's numbers unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from perfreport.analyses.steps import profiler_steps
from perfreport.errors import PerfreportError
from perfreport.load import load
from perfreport.load.checksums import file_checksum
from perfreport.step_trace import MAX_BYTES, pick_steps, write_step_traces

from .conftest import demo_comparison_json

REPO = Path(__file__).resolve().parent.parent
CANDIDATE = REPO / "examples" / "resnet50-workers0"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[Path, dict]:
    document = json.loads(demo_comparison_json())
    folder = tmp_path_factory.mktemp("report")
    (folder / "report.json").write_text(json.dumps(document))
    return folder, document


@pytest.fixture(scope="module")
def written(report) -> list[dict]:
    return write_step_traces(report[0])


def _steps(document: dict, side: str) -> list[dict]:
    judged = set(document["explanation"][f"{side}_steps"])
    return [r for r in document[side]["analyses"]["profiler_steps"] if r["step"] in judged]


def test_picks_the_candidate_step_furthest_from_the_baseline_median_and_a_typical_baseline_step(report):
    _, document = report
    picks = pick_steps(document)
    base, cand = _steps(document, "baseline"), _steps(document, "candidate")
    median = float(np.median([r["wall_us"] for r in base]))
    assert document["explanation"]["delta_ms"] > 0  # a regression: the slowest judged step
    slowest = max(cand, key=lambda r: r["wall_us"])
    assert (picks["candidate"].rank, picks["candidate"].step, picks["candidate"].wall_us) == \
        (slowest["rank"], slowest["step"], slowest["wall_us"])
    typical = min(base, key=lambda r: abs(r["wall_us"] - median))
    assert (picks["baseline"].step, picks["baseline"].wall_us) == (typical["step"], typical["wall_us"])
    assert picks["candidate"].file.endswith(".pt.trace.json.gz")
    assert picks["candidate"].checksum == file_checksum(Path(picks["candidate"].file))  # xxh3_128:…
    assert pick_steps({**document, "kind": "perfreport.analysis"}) == {}


def test_each_step_trace_is_valid_json_and_perfreport_reads_the_same_step(report, written):
    folder, document = report
    picks = pick_steps(document)
    for entry in written:
        path = folder / "step-traces" / entry["file"]
        data = json.loads(path.read_text())  # plain JSON: what Perfetto and chrome://tracing take
        assert data["deviceProperties"] and data["perfreport_step_trace"]["step"] == entry["step"]
        assert all("ph" in e and ("ts" in e or e["ph"] == "M") for e in data["traceEvents"])
        assert all("dur" in e for e in data["traceEvents"] if e["ph"] == "X")
        assert entry["bytes"] == path.stat().st_size <= MAX_BYTES and entry["cut_after_us"] is None
        mine = profiler_steps(load(str(path), workers=1)).iloc[0]
        original = next(r for r in document[entry["side"]]["analyses"]["profiler_steps"]
                        if r["step"] == entry["step"] and r["rank"] == entry["rank"])
        for key in ("wall_us", "gpu_events", "gpu_busy_us", "gpu_busy_in_step_us"):
            assert mine[key] == pytest.approx(original[key], abs=1e-3), (entry["side"], key)
        assert entry["step_time_ms"] == pytest.approx(picks[entry["side"]].wall_us / 1000)
    index = json.loads((folder / "step-traces" / "index.json").read_text())
    assert index["steps"] == written and index["max_bytes"] == MAX_BYTES and "ui.perfetto.dev" in index["open"]


def test_timestamps_are_written_exactly(report, written):
    folder, document = report
    entry = next(e for e in written if e["side"] == "candidate")
    original = next(iter(load(str(CANDIDATE), workers=1)))
    cut = next(iter(load(str(folder / "step-traces" / entry["file"]), workers=1)))
    a = np.sort(original.ts[(original.iteration == entry["step"]) & original.kernels()] + original.meta.ts_origin_us)
    b = np.sort(cut.ts[(cut.iteration == entry["step"]) & cut.kernels()] + cut.meta.ts_origin_us)
    assert len(a) == len(b) > 1000 and np.array_equal(a, b)


def test_a_step_over_the_size_bound_is_cut_and_says_where(report, tmp_path):
    folder, _ = report
    entries = write_step_traces(folder, out=tmp_path, max_bytes=400_000)
    for entry in entries:
        path = tmp_path / entry["file"]
        data = json.loads(path.read_text())
        assert path.stat().st_size <= 400_000 and 0 < entry["events"] < entry["events_in_step"]
        meta = data["perfreport_step_trace"]
        assert meta["cut_after_us"] == entry["cut_after_us"] > 0 and meta["events"] == entry["events"]
        step = next(e for e in data["traceEvents"] if e.get("name") == f"ProfilerStep#{entry['step']}"
                    and e.get("cat") != "gpu_user_annotation")
        latest = max(e["ts"] for e in data["traceEvents"] if e["ph"] != "M")
        assert latest - step["ts"] <= entry["cut_after_us"]  # everything kept starts before the cut


def test_a_changed_or_missing_trace_file_is_one_clear_error(report, tmp_path):
    folder, document = report
    doc = json.loads(json.dumps(document))
    entry = doc["candidate"]["analyses"]["files"][0]
    for wrong, algorithm in (({"checksum": "xxh3_128:" + "0" * 32}, "xxh3_128"), ({"sha256": "0" * 64}, "sha256")):
        entry.pop("checksum", None)
        entry.update(wrong)  # (an older report wrote a bare SHA-256 under "sha256")
        (tmp_path / "report.json").write_text(json.dumps(doc))
        with pytest.raises(PerfreportError, match=f"changed since the report was made \\(its {algorithm} checksum"):
            write_step_traces(tmp_path)
    entry.pop("sha256")
    entry["checksum"] = "md5:" + "0" * 32
    (tmp_path / "report.json").write_text(json.dumps(doc))
    with pytest.raises(PerfreportError, match="unknown algorithm \\('md5'\\)"):
        write_step_traces(tmp_path)
    doc["baseline"]["analyses"]["files"][0]["file"] = str(tmp_path / "gone.json.gz")
    (tmp_path / "report.json").write_text(json.dumps(doc))
    with pytest.raises(PerfreportError, match="gone.json.gz: the baseline's rank 0 trace"):
        write_step_traces(tmp_path)


def test_cli_step_trace_prints_sizes_and_how_to_open(report, tmp_path, capsys):
    from perfreport.cli import main

    folder, _ = report
    assert main(["step-trace", "--report", str(folder), "--out", str(tmp_path), "--max-mb", "20"]) == 0
    out = capsys.readouterr().out
    assert out.count(" MB, ") == 2 and "https://ui.perfetto.dev" in out and "chrome://tracing" in out
    assert main(["step-trace", "--report", str(tmp_path / "none")]) == 2
    assert "no report.json" in capsys.readouterr().err


def test_the_html_report_names_the_steps_and_how_to_open_them(report):
    from perfreport.report import build_report

    _, document = report
    picks = pick_steps(document)
    section = next(s for s in build_report(document).sections if s.id == "step-traces")
    table = section.tables[0]
    assert [(r[0], r[1], r[2], r[3], r[5]) for r in table.rows] == [
        (p.side, p.rank, p.step, p.wall_us, f"step-traces/{p.filename}") for p in picks.values()]
    assert "ui.perfetto.dev" in section.blocks[0].text and "chrome://tracing" in section.blocks[0].text
    assert "furthest above the baseline's median step time" in picks["candidate"].why


def _pick_by_rows(document):
    """pick_steps as first written, a dict per step and Python's min and max: the reference."""
    import math

    from perfreport.documents.cells import table_columns

    x = document.get("explanation") or {}
    rows = {}
    for side in ("baseline", "candidate"):
        steps = ((document.get(side) or {}).get("analyses") or {}).get("profiler_steps")
        wanted = {int(s) for s in x.get(f"{side}_steps") or [] if isinstance(s, (int, float))}
        rows[side] = [{"rank": r, "step": s, "wall_us": float(w)}
                      for w, r, s in zip(*table_columns(steps, ("wall_us", "rank", "step")))
                      if isinstance(w, (int, float)) and math.isfinite(w) and isinstance(r, int) and isinstance(s, int)
                      and (not wanted or s in wanted)]
    if not rows["baseline"] or not rows["candidate"]:
        return None
    median = float(np.median([r["wall_us"] for r in rows["baseline"]]))
    sign = 1.0 if float(x.get("delta_ms") or 0.0) >= 0 else -1.0
    cand = max(rows["candidate"], key=lambda r: (sign * (r["wall_us"] - median), -r["rank"], -r["step"]))
    same = [r for r in rows["baseline"] if r["rank"] == cand["rank"]] or rows["baseline"]
    base = min(same, key=lambda r: (abs(r["wall_us"] - median), r["step"]))
    return (base["rank"], base["step"], base["wall_us"]), (cand["rank"], cand["step"], cand["wall_us"])


@pytest.mark.parametrize("seed", range(12))
def test_the_steps_picked_over_arrays_are_those_of_a_dict_per_step(seed) -> None:
    """Random step tables (ties, repeated walls, odd cells: None, text, NaN, a float step, a
    rank of another side only; judged lists or none; either direction): the same picks."""
    rng = np.random.default_rng(seed)

    def table(n: int) -> list[dict]:
        walls = rng.choice([100.0, 200.0, 150.5, 300.0], size=n) + rng.integers(0, 3, size=n)
        rows = [{"rank": int(rng.integers(0, 3)), "step": int(i), "wall_us": float(w)} for i, w in enumerate(walls)]
        for r in rng.choice(n, size=min(3, n), replace=False):
            rows[int(r)][["wall_us", "rank", "step"][int(rng.integers(0, 3))]] = \
                [None, "x", float("nan"), 2.0, float("inf")][int(rng.integers(0, 5))]
        return rows

    n = int(rng.integers(1, 60))
    doc = {"kind": "perfreport.compare",
           "explanation": {"delta_ms": float(rng.choice([-1.0, 0.0, 2.0])),
                           "baseline_steps": sorted(rng.choice(n, size=n // 2, replace=False).tolist()) if seed % 2 else None,
                           "candidate_steps": None},
           "baseline": {"analyses": {"profiler_steps": table(n)}},
           "candidate": {"analyses": {"profiler_steps": table(int(rng.integers(1, 60)))}}}
    picks = pick_steps(doc)
    want = _pick_by_rows(doc)
    if want is None:
        assert picks == {}
        return
    assert (picks["baseline"].rank, picks["baseline"].step, picks["baseline"].wall_us) == want[0]
    assert (picks["candidate"].rank, picks["candidate"].step, picks["candidate"].wall_us) == want[1]
