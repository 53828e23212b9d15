"""Kill tests for every writer at each checkpoint, repeated (issue 21): the next command on a
store or an output folder recovers or clears what the killed writer left, says so, and leaves
the store as it was or as the new run made it; a report set is never a mix of two runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from perfreport.storing.fileset import MARKER, read_marker
from perfreport.gate.baselines import open_baseline, read_baseline, verify

from .test_atomic import kill_at, leftovers, prepare, run
from .test_baselines import tiny_trace


@pytest.fixture()
def jobs(tmp_path) -> tuple[Path, Path]:
    a, b = tmp_path / "a", tmp_path / "b"
    tiny_trace(a, 0, steps=3)
    tiny_trace(b, 0, steps=5)
    return a, b


def run_steps(store: Path) -> list[int]:
    """Profiler steps of each recorded run of baseline b, oldest first (read without the
    tidy-up a reader does, so the next command's recovery is what is tested)."""
    return [sum(len(r["steps"]) for r in run["ranks"]) for run in read_baseline(store / "b").runs]


@pytest.mark.parametrize("point", ["append.staged", "append.moved", "append.recorded"])
def test_killed_append_then_the_next_append_recovers(tmp_path, jobs, point):
    a, b = jobs
    store = tmp_path / "store"
    assert prepare(["baseline", "save", "b", str(a), "--store", str(store), "-q"]) == 0
    for _ in range(2):  # repeated kills at the same moment
        kill_at(["baseline", "save", "b", str(b), "--store", str(store), "--append", "-q"], point)
    recorded = run_steps(store)
    assert recorded == [3] + [5] * (2 if point == "append.recorded" else 0)
    verify(read_baseline(store / "b"))
    proc = run(["baseline", "save", "b", str(b), "--store", str(store), "--append", "-q"])
    assert proc.returncode == 0, proc.stderr
    if point != "append.recorded":
        assert "perfreport: note: " in proc.stderr and ("runs/1" in proc.stderr or ".run-1.tmp" in proc.stderr)
    assert run_steps(store) == recorded + [5]
    stored = open_baseline(store, "b")
    verify(stored)
    assert leftovers(store / "b") == []
    named = {str(r["run"]) for r in stored.runs}
    assert {p.name for p in (store / "b" / "runs").iterdir()} == named - {"0"}


def test_a_reader_clears_a_killed_append(tmp_path, jobs):
    a, b = jobs
    store = tmp_path / "store"
    prepare(["baseline", "save", "b", str(a), "--store", str(store), "-q"])
    kill_at(["baseline", "save", "b", str(b), "--store", str(store), "--append", "-q"], "append.moved")
    assert (store / "b" / "runs" / "1").is_dir()
    proc = run(["baseline", "show", "b", "--store", str(store), "--verify"])
    assert proc.returncode == 0 and "removed the files of runs an interrupted append left unrecorded: runs/1" \
        in proc.stderr, proc.stderr
    assert not (store / "b" / "runs" / "1").exists() and run_steps(store) == [3]


def test_old_style_run_temporaries_are_cleared(tmp_path, jobs):
    a, b = jobs
    store = tmp_path / "store"
    prepare(["baseline", "save", "b", str(a), "--store", str(store), "-q"])
    (store / "b" / ".run.abc123.tmp" / "traces").mkdir(parents=True)  # left by an older perfreport
    proc = run(["baseline", "save", "b", str(b), "--store", str(store), "--append", "-q"])
    assert proc.returncode == 0 and ".run.abc123.tmp" in proc.stderr
    assert leftovers(store / "b") == []


def report_set(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if not p.name.startswith(".")}


def run_of(files: dict[str, bytes]) -> set[int]:
    """Which run wrote each file: the steps of rank 0 in its JSON / Markdown."""
    out = set()
    for name, data in files.items():
        if name.endswith(".json"):
            out.add(json.loads(data)["summary"][0]["steps"])
    return out


@pytest.mark.parametrize("point", ["files.staged", "files.renaming", "files.renamed"])
def test_killed_report_writing_leaves_one_whole_set(tmp_path, jobs, point):
    a, b = jobs
    out = tmp_path / "out"
    args = ["--out", str(out), "--format", "md,json", "-q"]
    assert prepare(["analyze", str(a), *args, "--format", "html,md,json"]) == 0
    first = report_set(out)
    assert "report.html" in first and read_marker(out)["state"] == "complete"
    for _ in range(2):  # repeated
        kill_at(["analyze", str(b), *args], point)
        if point == "files.renamed":  # every file new, the marker not yet "complete"
            assert run_of(report_set(out)) == {5} and read_marker(out)["state"] == "writing"
        elif point == "files.staged":
            assert report_set(out) == first
    proc = run(["analyze", str(a), "--out", str(out), "--format", "md", "-q"])
    assert proc.returncode == 0, proc.stderr
    if point != "files.staged":
        assert "restored the previous set" in proc.stderr
    files = report_set(out)
    marker = read_marker(out)
    assert marker["state"] == "complete" and sorted(marker["files"]) == sorted(files)
    assert "report.html" not in files  # the previous set's own file went
    assert run_of(files) == {3}
    assert leftovers(out) == []


def test_a_failed_swap_rolls_back_at_once(tmp_path, jobs, monkeypatch):
    from perfreport.storing import fileset

    out = tmp_path / "out"
    fileset.write_set(out, {"report.json": "{\"v\": 1}", "report.md": "one"})
    calls = []
    real = os.replace

    def failing(src, dst):
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(src, dst)

    monkeypatch.setattr(fileset.os, "replace", failing)
    with pytest.raises(OSError):
        fileset.write_set(out, {"report.json": "{\"v\": 2}", "report.md": "two", "report.html": "<p>"})
    monkeypatch.setattr(fileset.os, "replace", real)
    assert report_set(out) == {"report.json": b"{\"v\": 1}", "report.md": b"one"}
    assert read_marker(out)["files"] == ["report.json", "report.md"]
    assert leftovers(out) == []


def test_a_tampered_marker_cannot_reach_outside(tmp_path):
    from perfreport.storing import fileset

    out = tmp_path / "out"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (out).mkdir()
    (out / MARKER).write_text(json.dumps({"state": "writing", "files": ["../victim.txt", "/etc/hostname"],
                                          "dropped": ["../victim.txt"], "backups": {}}))
    fileset.write_set(out, {"report.md": "x"})
    assert victim.read_text() == "keep" and (out / "report.md").read_text() == "x"


@pytest.mark.parametrize("value", [None, 1, "x", [1, None, {}], {"a": 1}, 2**64, 1e308, -1])
@pytest.mark.parametrize("key", ["state", "files", "dropped", "backups", "previous", "run"])
def test_set_marker_with_wrong_types(tmp_path, key, value):
    """Every field of the marker with a wrong JSON type: the next write still makes a whole set."""
    from perfreport.storing import fileset

    out = tmp_path / "out"
    fileset.write_set(out, {"report.md": "one", "report.json": "{}"})
    marker = {"state": "writing", "run": "r", "files": ["report.md"], "dropped": [], "backups": {},
              "previous": None, key: value}
    (out / MARKER).write_text(json.dumps(marker))
    fileset.write_set(out, {"report.md": "two"})
    assert (out / "report.md").read_text() == "two"
    assert read_marker(out)["state"] == "complete" and read_marker(out)["files"] == ["report.md"]
    (out / MARKER).write_text("[" * 100000)  # nested past any parser's depth
    fileset.write_set(out, {"report.md": "three"})
    assert read_marker(out)["files"] == ["report.md"]


def test_sigterm_during_save_cleans_up_and_keeps_the_previous_baseline(tmp_path, jobs):
    import signal

    from .test_atomic import start, wait_paused

    a, b = jobs
    store = tmp_path / "store"
    prepare(["baseline", "save", "b", str(a), "--store", str(store), "-q"])
    proc = start(["baseline", "save", "b", str(b), "--store", str(store), "--force", "-q"], "dir.built")
    wait_paused(proc, "dir.built")
    proc.send_signal(signal.SIGTERM)  # delivered once it runs again
    proc.send_signal(signal.SIGCONT)
    assert proc.wait(timeout=30) == 143
    assert proc.stderr.read().strip().endswith("perfreport: terminated by signal 15; stopped its workers")
    assert run_steps(store) == [3] and leftovers(store) == []
