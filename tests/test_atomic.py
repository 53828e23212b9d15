"""Atomic storage under kill: every writer is stopped at exact moments (PERFREPORT_PAUSE_AT makes
it SIGSTOP itself there), SIGKILLed, and the previous state must be intact and loadable; the next
run cleans up; two concurrent saves of one name leave one complete baseline."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from perfreport.storing import atomic as _io
from perfreport.storing.fileset import MARKER
from perfreport.gate.baselines import list_baselines, load_traces, open_baseline, verify
from perfreport.load import load

from .conftest import cli_in_process
from .test_baselines import tiny_trace

NO_EXCHANGE = ("import sys, perfreport.storing.atomic as io; io._renameat2 = None; from perfreport.cli import main; "
               "sys.exit(main(sys.argv[1:]))")
"""The CLI without renameat2 (as on macOS or an old libc): the rename-aside fallback is exercised."""


def start(args: list[str], pause_at: str, exchange: bool = True) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "perfreport"] if exchange else [sys.executable, "-c", NO_EXCHANGE]
    env = {**os.environ, _io.PAUSE_ENV: pause_at}
    return subprocess.Popen(cmd + args, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)


def wait_paused(proc: subprocess.Popen, pause_at: str) -> None:
    """Block until the process says it stopped at ``pause_at`` (it is SIGSTOPped then)."""
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if f"paused at {pause_at}" in line:  # written just before it stops itself: wait for the stop
            _, status = os.waitpid(proc.pid, os.WUNTRACED)
            assert os.WIFSTOPPED(status), status
            return
    proc.wait()
    pytest.fail(f"never reached {pause_at} (exit {proc.returncode}): {''.join(seen)}")


def wait_blocked_on_lock(proc: subprocess.Popen, timeout_s: float = 60) -> None:
    """Block until ``proc`` waits for a lock another process holds: the kernel lists it in
    /proc/locks as a blocked request ("->", then its pid). Where there is no /proc/locks, it is
    given 3 s, in which its load (well under a second) ends and it must still be running."""
    import time

    locks = Path("/proc/locks")
    if not locks.exists():
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=3)
        return
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(line.split()[1:2] == ["->"] and str(proc.pid) in line.split()
               for line in locks.read_text().splitlines()):
            assert proc.poll() is None
            return
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.01)
    pytest.fail(f"process {proc.pid} never waited for the lock")


def kill_at(args: list[str], pause_at: str, exchange: bool = True) -> None:
    proc = start(args, pause_at, exchange)
    try:
        wait_paused(proc, pause_at)
    finally:
        proc.kill()  # SIGKILL, also wakes nothing: the process dies stopped
        proc.wait()
    assert proc.returncode == -signal.SIGKILL


def run(args: list[str]) -> subprocess.CompletedProcess:
    """``perfreport ARGS`` as a user runs it: the next command after a kill, which finds what the
    killed process left (the kills are of real processes; this command is run in this process)."""
    return cli_in_process(args)


def prepare(args: list[str]) -> int:
    """``perfreport ARGS`` in this process (no interpreter to start), for a step that only sets the
    scene before a kill: its exit code is all a test reads."""
    from perfreport.cli import main

    return main(args)


@pytest.fixture()
def jobs(tmp_path) -> tuple[Path, Path]:
    """Two trace sets that a stored baseline tells apart: 3 steps on 2 ranks, 5 steps on 1 rank."""
    old, new = tmp_path / "old", tmp_path / "new"
    tiny_trace(old, 0, steps=3)
    tiny_trace(old, 1, steps=3)
    tiny_trace(new, 0, steps=5)
    return old, new


def assert_intact(store: Path, name: str, ranks: list[int], steps: int) -> None:
    stored = open_baseline(store, name)
    verify(stored)
    traces = load_traces(stored, fallback=load)
    assert stored.ranks == ranks and sorted(traces.ranks) == ranks
    assert all(len(t.step_numbers()) == steps for t in traces)


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and not p.name.endswith(".lock")
                  and p.name != MARKER)


# (pause point, use renameat2): every moment of a save between "nothing written" and "done"
SAVE_MOMENTS = [("baseline.copy", True), ("baseline.rank#1", True), ("write.temp", True), ("dir.built", True), ("dir.exchanged", True),
                ("dir.built", False), ("dir.aside", False)]


@pytest.mark.parametrize("point,exchange", SAVE_MOMENTS, ids=[f"{p}-{'exchange' if e else 'aside'}"
                                                              for p, e in SAVE_MOMENTS])
def test_killed_baseline_save_keeps_the_previous_baseline(tmp_path, jobs, point, exchange):
    old, new = jobs
    store = tmp_path / "store"
    assert prepare(["baseline", "save", "b", str(old), "--store", str(store)]) == 0
    kill_at(["baseline", "save", "b", str(new), "--store", str(store), "--force"], point, exchange)
    if point == "dir.exchanged":  # killed after the swap: the new baseline is in place, complete
        assert_intact(store, "b", [0], 5)
    else:
        assert_intact(store, "b", [0, 1], 3)
    assert [b.name for b in list_baselines(store)] == ["b"]
    proc = run(["baseline", "save", "b", str(new), "--store", str(store), "--force"])  # the next run cleans up
    assert proc.returncode == 0, proc.stderr
    assert_intact(store, "b", [0], 5)
    assert leftovers(store) == []


def test_killed_first_save_leaves_no_baseline(tmp_path, jobs):
    old, _ = jobs
    store = tmp_path / "store"
    kill_at(["baseline", "save", "b", str(old), "--store", str(store)], "dir.built")
    assert leftovers(store) != [] and list_baselines(store) == []  # (a reader cleans up too)
    assert run(["baseline", "save", "b", str(old), "--store", str(store)]).returncode == 0
    assert_intact(store, "b", [0, 1], 3)
    assert leftovers(store) == []


def test_killed_remove_removes_and_the_leftover_goes(tmp_path, jobs):
    old, _ = jobs
    store = tmp_path / "store"
    prepare(["baseline", "save", "b", str(old), "--store", str(store)])
    prepare(["baseline", "save", "c", str(old), "--store", str(store)])
    kill_at(["baseline", "rm", "b", "--store", str(store)], "dir.trashed")
    assert [b.name for b in list_baselines(store)] == ["c"]
    assert run(["baseline", "save", "d", str(old), "--store", str(store)]).returncode == 0
    assert leftovers(store) == []
    assert_intact(store, "c", [0, 1], 3)


def report_files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if not p.name.startswith(".")}


@pytest.mark.parametrize("point", ["files.staged", "files.renaming"])
def test_killed_report_writing_keeps_complete_files(tmp_path, jobs, point):
    old, new = jobs
    out = tmp_path / "out"
    args = ["--out", str(out), "--format", "md,json,junit"]
    assert prepare(["analyze", str(old), *args]) == 0
    before = report_files(out)
    kill_at(["analyze", str(new), *args], point)
    after = report_files(out)
    assert set(after) == set(before)
    if point == "files.staged":
        assert after == before
    for name, data in after.items():  # each file whole: the old one or the new one
        if name.endswith(".json"):
            ranks = [r["rank"] for r in json.loads(data)["ranks"]]
            assert ranks in ([0, 1], [0])
    assert leftovers(out) != []
    assert run(["analyze", str(new), *args]).returncode == 0
    assert leftovers(out) == []
    assert json.loads((out / "report.json").read_text())["summary"][0]["steps"] == 5


def test_concurrent_saves_of_one_name_leave_one_complete_baseline(tmp_path, jobs):
    old, new = jobs
    store = tmp_path / "store"
    first = start(["baseline", "save", "b", str(old), "--store", str(store), "--force"], "dir.built")
    wait_paused(first, "dir.built")  # holds the lock, its folder built, not yet swapped in
    second = subprocess.Popen([sys.executable, "-m", "perfreport", "baseline", "save", "b", str(new),
                               "--store", str(store), "--force"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_blocked_on_lock(second)
    first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=60) == 0
    assert second.wait(timeout=60) == 0, second.stderr.read()
    assert_intact(store, "b", [0], 5)  # the later save, whole
    assert leftovers(store) == []


def test_concurrent_save_without_force_is_refused(tmp_path, jobs):
    old, new = jobs
    store = tmp_path / "store"
    first = start(["baseline", "save", "b", str(old), "--store", str(store)], "dir.built")
    wait_paused(first, "dir.built")
    second = subprocess.Popen([sys.executable, "-m", "perfreport", "baseline", "save", "b", str(new),
                               "--store", str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first.send_signal(signal.SIGCONT)
    assert first.wait(timeout=60) == 0
    assert second.wait(timeout=60) == 2
    assert "already exists" in second.stderr.read()
    assert_intact(store, "b", [0, 1], 3)


# --- the primitives ----------------------------------------------------------------------------
def test_clean_stale_temps_spares_live_writers_and_restores_a_set_aside_folder(tmp_path):
    live = _io.temp_name(tmp_path / "a")  # this process: alive
    live.mkdir()
    dead = tmp_path / live.name.replace(f"-{os.getpid()}-", "-999999999-")
    dead.mkdir()
    aside = _io.temp_name(tmp_path / "gone", "old")
    aside = aside.with_name(aside.name.replace(f"-{os.getpid()}-", "-999999999-"))
    aside.mkdir()
    (aside / "manifest.json").write_text("{}")
    (tmp_path / ".user-file").write_text("not ours")
    removed = _io.clean_stale_temps(tmp_path)
    assert removed == [dead]
    assert live.exists() and (tmp_path / "gone" / "manifest.json").exists() and (tmp_path / ".user-file").exists()


def test_atomic_dir_replaces_or_leaves_untouched(tmp_path):
    target = tmp_path / "t"
    with _io.atomic_dir(target) as tmp:
        (tmp / "x").write_text("1")
    with pytest.raises(RuntimeError):
        with _io.atomic_dir(target) as tmp:
            (tmp / "x").write_text("2")
            raise RuntimeError("boom")
    assert (target / "x").read_text() == "1" and leftovers(tmp_path) == []
    with _io.atomic_dir(target) as tmp:
        (tmp / "y").write_text("3")
    assert sorted(p.name for p in target.iterdir()) == ["y"] and leftovers(tmp_path) == []


def test_atomic_write_text_and_bytes(tmp_path):
    _io.atomic_write_text(tmp_path / "a" / "f.txt", "é")
    _io.atomic_write_bytes(tmp_path / "a" / "f.txt", b"\x00\x01")
    assert (tmp_path / "a" / "f.txt").read_bytes() == b"\x00\x01" and leftovers(tmp_path / "a") == []
