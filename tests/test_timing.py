"""Where the time goes: every phase timed, kept in report.json (``timings``) and printed by -v."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from perfreport.analyses import ANALYSES
from perfreport.cli import main
from perfreport.timing import Timings, merged, nested, phase, recording, timing_lines

from .conftest import DATA, TRACES

SCHEMA = Path(__file__).parents[1] / "perfreport" / "report" / "report-schema.json"
ROOT = Path(__file__).parents[1]


def test_nested_phases_keep_inclusive_and_self_time() -> None:
    with recording() as t:
        with phase("outer"):
            time.sleep(0.02)
            with phase("inner"):
                time.sleep(0.03)
        with phase("inner"):
            time.sleep(0.01)
    rows = {r["phase"]: r for r in t.records()}
    assert [r["phase"] for r in t.records()] == ["outer", "inner"]  # the order they started
    assert rows["inner"]["calls"] == 2 and rows["outer"]["calls"] == 1
    assert rows["inner"]["wall_s"] >= 0.039 and rows["outer"]["wall_s"] >= 0.049  # (sleeps only run long)
    # self time leaves the nested phase out: the outer's own 20 ms, not its 50 ms (bounds, not
    # the 30 ms the inner sleep asked for: on a loaded machine a sleep runs long, and a clean
    # clone's suite once measured the outer's self time 20.1 ms beside an inner phase of 48 ms)
    assert 0.019 <= rows["outer"]["self_s"] <= rows["outer"]["wall_s"] - 0.029
    assert rows["outer"]["cpu_s"] < 0.01  # asleep: wall time without CPU time


def test_a_step_timed_inside_a_phase_is_its_own_phase_not_the_enclosing_ones_self_time() -> None:
    """A C function's step it timed itself (the scan's hashing): the enclosing phase's self time
    leaves it out, as it does a nested phase."""
    with recording() as t:
        with phase("scan"):
            time.sleep(0.03)
            nested("checksum (in the scan)", 0.01)
        nested("checksum (in the scan)", 0.002)  # outside any phase: only its own row
    rows = {r["phase"]: r for r in t.records()}
    assert rows["checksum (in the scan)"]["wall_s"] == rows["checksum (in the scan)"]["self_s"] == 0.012
    assert rows["checksum (in the scan)"]["cpu_s"] == 0.012 and rows["checksum (in the scan)"]["calls"] == 2
    assert rows["scan"]["wall_s"] >= 0.03 and abs(rows["scan"]["self_s"] - (rows["scan"]["wall_s"] - 0.01)) < 1e-3
    nested("checksum (in the scan)", 1.0)  # no recording: nothing kept, nothing raised


def test_nothing_is_recorded_outside_a_recording_and_inner_recordings_are_their_own() -> None:
    with phase("nowhere"):
        pass
    with recording() as outer:
        with recording() as inner:
            with phase("task"):
                pass
        with phase("parent"):
            pass
    assert [r["phase"] for r in inner.records()] == ["task"]
    assert [r["phase"] for r in outer.records()] == ["parent"]


def test_merged_sums_phases_over_tasks() -> None:
    a, b = Timings(), Timings()
    a.add("scan", 1.0, 0.9, faults=700)
    b.add("scan", 2.0, 1.5, faults=300)
    b.add("decode", 0.5, 0.5)
    rows = {r["phase"]: r for r in merged([a.records(), b.records()])}
    assert rows["scan"]["wall_s"] == 3.0 and rows["scan"]["cpu_s"] == 2.4 and rows["scan"]["calls"] == 2
    assert rows["scan"]["minor_faults"] == 1000 and rows["decode"]["minor_faults"] == 0
    assert rows["decode"]["self_s"] == 0.5


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread page faults are Linux's")
def test_a_phase_counts_the_page_faults_of_its_thread() -> None:
    """64 MB of fresh pages written once each: a fault a page (4 KB; huge pages refused for
    the map), counted for the phase that wrote them and for the phase around it, not for a
    phase that only slept."""
    import mmap

    import numpy as np

    pages = (64 << 20) // mmap.PAGESIZE
    with recording() as t:
        with phase("outer"):
            with phase("touch"):
                memory = mmap.mmap(-1, 64 << 20)
                if hasattr(mmap, "MADV_NOHUGEPAGE"):
                    memory.madvise(mmap.MADV_NOHUGEPAGE)
                view = np.frombuffer(memory, dtype=np.uint8)
                view[::mmap.PAGESIZE] = 1
                del view
                memory.close()
        with phase("idle"):
            time.sleep(0.01)
    rows = {r["phase"]: r for r in t.records()}
    assert pages <= rows["touch"]["minor_faults"] <= pages + 2_000
    assert rows["outer"]["minor_faults"] >= rows["touch"]["minor_faults"]
    assert rows["idle"]["minor_faults"] < 500


def _validator():
    jsonschema = pytest.importorskip("jsonschema")
    return jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))


def test_analyze_keeps_every_phase_of_the_parent_and_each_rank(tmp_path, capsys) -> None:
    trace = TRACES / "hta_a100_nccl_rank0of2"
    assert main(["analyze", str(trace), "--out", str(tmp_path), "--format", "md", "-q", "-v"]) == 0
    document = json.loads((tmp_path / "report.json").read_text())
    _validator().validate(document)
    timings = document["timings"]
    (rank,) = timings["ranks"]
    assert rank["side"] == "" and rank["rank"] == document["ranks"][0]["rank"]
    # the loader's phases, then one per analysis: nothing the task ran goes untimed
    for name in ("read", "decompress", "scan", "decode", *(f"analysis:{n}" for n, _ in ANALYSES)):
        assert name in rank["phases"], name
    # self times of one task add up to its wall time (the head start's idle time included: a
    # loaded machine once left half of it outside every phase)
    assert 0.8 * rank["wall_s"] <= sum(rank["phases"].values()) <= rank["wall_s"] * 1.05 + 0.01
    parent = [r["phase"] for r in timings["parent"]["phases"]]
    assert parent.index("per-rank tasks (load and analyse)") < parent.index("cross-rank analyses") \
        < parent.index("render:md")
    assert {f"cross-rank:{n}" for n in ("stragglers", "collectives", "step_metrics")} <= set(parent)
    assert parent.index("cross-rank analyses") < parent.index("report: document") < parent.index("report: build") \
        < parent.index("render:md")  # the report's build is timed too, not only its renderers
    assert timings["wall_s"] >= sum(r["self_s"] for r in timings["parent"]["phases"]) - 0.01
    assert timings["parent"]["pid"] == os.getpid() and timings["parent"]["peak_rss_bytes"] > 10_000_000
    # one rank runs in the parent: no worker process
    assert rank["pid"] == os.getpid() and timings["workers"]["processes"] == 0
    err = capsys.readouterr().err
    assert f"perfreport: timings: {timings['wall_s']:.2f} s wall" in err
    assert "rank tasks, summed over 1 rank(s):" in err and "    scan " in err.replace("perfreport: ", "")


def test_a_json_only_analyze_builds_no_report(tmp_path) -> None:
    """report.json is written from the document: with no other format, no report is built and no
    figure planned, and the document is the one a run that builds the report writes."""
    trace = TRACES / "hta_a100_alexnet_benchmark"
    documents, phases = [], []
    for formats in ("json", "json,md"):
        out = tmp_path / formats.replace(",", "-")
        assert main(["analyze", str(trace), "--out", str(out), "--format", formats, "-q"]) == 0
        document = json.loads((out / "report.json").read_text())
        phases.append({r["phase"] for r in document["timings"]["parent"]["phases"]})
        documents.append({k: v for k, v in document.items() if k not in ("timings", "timings_s", "created_utc", "command")})
    assert "report: build" not in phases[0] and "render:plan figures" not in phases[0]
    assert {"report: document", "report: build", "render:md"} <= phases[1]
    assert documents[0] == documents[1]


def test_compare_times_both_sides_in_their_worker_processes(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(ROOT)  # the demo baseline lives in ./baselines
    code = main(["compare", "demo", "examples/resnet50-workers0", "--out", str(tmp_path), "--format", "md",
                 "-q", "--workers", "2"])
    assert code == 1  # the demo's candidate is a real regression
    document = json.loads((tmp_path / "report.json").read_text())
    _validator().validate(document)  # the real document, every check included
    timings = document["timings"]
    sides = {r["side"]: r for r in timings["ranks"]}
    assert set(sides) == {"baseline", "candidate"}
    # the stored baseline is read from its column cache, the candidate parsed from its JSON
    assert "read stored columns" in sides["baseline"]["phases"] and "scan" not in sides["baseline"]["phases"]
    assert "scan" in sides["candidate"]["phases"]
    pids = {r["pid"] for r in timings["ranks"]}
    if timings["workers"]["processes"]:  # two cores or more: each side in a worker of its own
        assert os.getpid() not in pids
        assert timings["workers"]["largest_peak_rss_bytes"] == max(r["peak_rss_bytes"] for r in timings["ranks"])
    parent = {r["phase"] for r in timings["parent"]["phases"]}
    assert {"start: find the rank files", "gate: inputs", "gate: verdict", "attribution", "report: build",
            "render:md"} <= parent
    assert "timings:" not in capsys.readouterr().err  # printed with -v only


LOAD_PHASES = ("read", "decompress", "scan", "decode")


def test_each_sides_load_and_analyses_are_the_time_its_busiest_process_spent_on_them(tmp_path, monkeypatch) -> None:
    """timings_s' load and analyses are measured where they ran: per side, the worker that spent
    the most on its ranks' loads (their load_s summed: their load phases and no less), and on
    their analyses. Not a share of the per-rank stage's span, which here also holds 0.5 s of the
    parent's own work per digest (made slow on purpose, as a compare's other side or the
    workers' start make it): as a share, each side's load grew by more than 0.1 s."""
    from perfreport.running import assemble

    added = assemble.Assembler.add

    def slow_add(self, d, position):
        time.sleep(0.5)
        return added(self, d, position)

    monkeypatch.setattr(assemble.Assembler, "add", slow_add)
    runs = DATA / "recorded" / "short_multirank"
    assert main(["compare", str(runs / "ddp_w2_gloo_1step_run1"), str(runs / "ddp_w2_gloo_1step_run2"), "--out",
                 str(tmp_path), "--format", "json", "-q", "--workers", "2"]) in (0, 1)
    document = json.loads((tmp_path / "report.json").read_text())
    said, ranks = document["timings_s"], document["timings"]["ranks"]
    assert len(ranks) == 4  # (two workers where two cores are: each loads a rank of each side)
    cross_rank = next(p["wall_s"] for p in document["timings"]["parent"]["phases"]
                      if p["phase"] == "cross-rank analyses")  # both sides' (recorded to 0.1 ms)
    assert 0 < cross_rank < 1.0  # not the slow folds (a side's two: 1 s), which are the per-rank stage's
    for side in ("baseline", "candidate"):
        load, analyses, phases = {}, {}, {}
        for r in (r for r in ranks if r["side"] == side):
            assert r["load_s"] >= sum(r["phases"].get(name, 0.0) for name in LOAD_PHASES) - 0.001
            assert r["wall_s"] == pytest.approx(r["load_s"] + r["analyze_s"], abs=0.001)
            load[r["pid"]] = load.get(r["pid"], 0.0) + r["load_s"]
            analyses[r["pid"]] = analyses.get(r["pid"], 0.0) + r["analyze_s"]
            phases[r["pid"]] = phases.get(r["pid"], 0.0) + sum(r["phases"].get(name, 0.0) for name in LOAD_PHASES)
        assert said[f"{side}_load"] == pytest.approx(max(load.values()), abs=0.0015), (load, said)
        assert said[f"{side}_load"] <= max(phases.values()) + 0.1  # (the first load in a worker: its imports)
        # the analyses: the busiest worker's, and the cross-rank ones here (not the slow folds),
        # bounded by what the parent recorded for them, however slow the machine
        assert max(analyses.values()) - 0.0015 <= said[f"{side}_analyze"] <= max(analyses.values()) + cross_rank + 0.0015


def test_timing_lines_show_the_slowest_ranks_and_hide_tiny_phases() -> None:
    records = [{"phase": "scan", "wall_s": 2.0, "self_s": 2.0, "cpu_s": 1.9, "calls": 1},
               {"phase": "memo:tiny", "wall_s": 0.0001, "self_s": 0.0001, "cpu_s": 0.0001, "calls": 1}]
    doc = {"wall_s": 3.0, "parent": {"pid": 1, "peak_rss_bytes": 50e6, "phases": records[:1]},
           "workers": {"processes": 2, "largest_peak_rss_bytes": 300e6}, "rank_phases": records,
           "helpers": {"processes": 3, "largest_peak_rss_bytes": 120e6},
           "ranks": [{"side": "", "rank": r, "pid": 10 + r, "peak_rss_bytes": 1e8, "wall_s": float(r),
                      "phases": {}} for r in range(12)]}
    lines = timing_lines(doc)
    assert lines[2].split()[-2:] == ["calls", "faults"]  # the header of the parent's phases
    assert lines[0] == ("timings: 3.00 s wall; parent peak RSS 50 MB; 2 worker process(es), largest peak RSS 300 MB; "
                        "3 forked helper(s), largest peak RSS 120 MB")
    assert "(1 phase(s) under 0.5 ms not shown; report.json keeps them)" in [ln.strip() for ln in lines]
    ranks = [ln for ln in lines if ln.startswith("    rank ")]
    assert len(ranks) == 8 and ranks[0].strip().startswith("rank 11: 11.000 s")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork, wait4 and /proc")
def test_a_forked_helpers_peak_is_its_own_and_kept_for_the_timings() -> None:
    """A forked helper (a single rank's second half of the analyses, a figure's child, the PDF
    renderer) is neither the parent nor a worker, yet may be the command's largest process: its
    peak RSS, read when it is reaped, goes into ``timings.helpers``."""
    from perfreport.running.forked import Child
    from perfreport.timing import recording, timings_document

    size = 96 << 20

    def work(send) -> None:
        block = bytearray(size)
        block[::4096] = b"\1" * len(range(0, size, 4096))  # every page touched: resident
        send(0, b"done")

    with open("/proc/self/statm") as f:
        before = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    with recording() as timings:
        child = Child(work)
        child.wait([0])
        child.stop(kill=False)
    assert child.messages[0] == b"done" and len(timings.helper_peaks) == 1
    peak = timings.helper_peaks[0]
    assert size <= peak <= before + size + (64 << 20)  # its block, and at most what it shares with this process
    doc = timings_document(timings, {}, 1.0, os.getpid(), before)
    assert doc["helpers"] == {"processes": 1, "largest_peak_rss_bytes": peak}
