"""No orphan, ever (issue 21): after SIGKILL, SIGTERM or SIGINT to the command, its workers and
its PDF renderer are gone within 5 s; a worker killed mid-run (the OOM killer) is one line naming
its rank and signal; --workers is capped with a note; errors inside workers are one line."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from perfreport.storing import atomic as _io
from perfreport.errors import PerfreportError
from perfreport.running.executor import Executor, RankJob, guarded, local_workers

from .test_bad_corpus import run_cli
from .test_baselines import tiny_trace


@pytest.fixture()
def job(tmp_path) -> Path:
    folder = tmp_path / "job"
    tiny_trace(folder, 0)
    tiny_trace(folder, 1)
    return folder


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(x) for x in f.read().split()]


@pytest.fixture()
def paused_commands() -> Iterator[Callable[[list[str]], tuple[subprocess.Popen, list[int]]]]:
    """Starts commands whose two workers stop themselves at their task (SIGSTOP), and kills what
    is left of each command's process tree when the test ends, passed or failed: a failed
    assertion must not leave a command waiting forever on stopped workers (seen under load)."""
    started: list[subprocess.Popen] = []

    def start(args: list[str], command: tuple[str, ...] = ("-m", "perfreport")) -> tuple[subprocess.Popen, list[int]]:
        env = {**os.environ, _io.PAUSE_ENV: "worker.task"}
        proc = subprocess.Popen([sys.executable, *command, *args], env=env, stderr=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, text=True)
        started.append(proc)
        workers = []
        for line in proc.stderr:
            if m := re.search(r"paused at worker\.task \(pid (\d+)\)", line):
                workers.append(int(m.group(1)))
                if len(workers) == 2:
                    return proc, workers
        pytest.fail(f"workers never paused (exit {proc.wait()})")

    yield start
    for proc in started:
        if proc.poll() is None:
            for pid in [*children(proc.pid), proc.pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            proc.wait()
        proc.stderr.close()


def gone_within(pids: list[int], seconds: float = 5.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG")
@pytest.mark.parametrize("sig,code", [(signal.SIGKILL, -9), (signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_no_process_outlives_the_command(job, tmp_path, sig, code, paused_commands):
    """Workers and the forked PDF renderer (format pdf) die with the command however it ends."""
    for _ in range(2):  # repeated
        proc, workers = paused_commands(["analyze", str(job), "--out", str(tmp_path / "o"), "--format",
                                                 "md,pdf", "--workers", "2"])
        kids = children(proc.pid)
        assert set(workers) <= set(kids) and len(kids) >= 3  # two workers and the renderer
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == code
        assert gone_within(kids) == []
        err = proc.stderr.read()
        if sig == signal.SIGTERM:
            assert err.strip() == "perfreport: terminated by signal 15; stopped its workers"
        assert "Traceback" not in err
    assert not (tmp_path / "o").exists() or not [p for p in (tmp_path / "o").iterdir() if not p.name.startswith(".")]


STUCK_UNWINDING = ("-c", "import sys, time\n"
                   "from perfreport.running import lifecycle\n"
                   "from perfreport.report.outputs import PdfRenderer\n"
                   "lifecycle.EXIT_GRACE_S = 0.5\n"
                   "PdfRenderer.close = lambda self: time.sleep(600)\n"
                   "from perfreport.cli import run\n"
                   "sys.argv[0] = 'perfreport'\n"
                   "run()")
"""The console script whose unwinding never ends: the PDF renderer's close hangs (a stand-in for
the rare hang after a Ctrl-C under load, whose cause is not found), with a 0.5 s grace."""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG")
@pytest.mark.parametrize("sig,code,line", [(signal.SIGINT, 130, "perfreport: interrupted"),
                                           (signal.SIGTERM, 143, "perfreport: terminated by signal 15; stopped its workers")])
def test_a_signalled_command_ends_even_when_its_unwinding_hangs(job, tmp_path, sig, code, line, paused_commands):
    proc, workers = paused_commands(["analyze", str(job), "--out", str(tmp_path / "o"), "--format", "md,pdf",
                                     "--workers", "2"], command=STUCK_UNWINDING)
    kids = children(proc.pid)
    t0 = time.monotonic()
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == code
    assert 0.4 < time.monotonic() - t0 < 20  # the grace, not the hang (and not at once: it waited)
    assert gone_within(kids) == []  # the workers and the renderer die with it
    assert proc.stderr.read().strip() == line


def _tgkill() -> Callable[[int, int, int], int] | None:
    """glibc's ``tgkill(pid, tid, sig)``: a signal to one thread of another process (None where
    the C library has none)."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).tgkill
    except (OSError, AttributeError):
        return None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and tgkill")
@pytest.mark.parametrize("sig,code,line", [(signal.SIGINT, 130, "perfreport: interrupted"),
                                           (signal.SIGTERM, 143, "perfreport: terminated by signal 15; stopped its workers")])
def test_a_signal_delivered_to_another_thread_still_ends_the_command(job, tmp_path, sig, code, line, paused_commands):
    """The kernel delivers a signal sent to the process to any of its threads that does not
    block it; Python runs its handler in the main thread only, which, waiting for the paused
    workers, was never woken: such a command hung (the rare hang under load). Sent to each of its
    other threads in turn, the signal ends the command as one sent to the process does: its
    line, its code, its workers and renderer gone, soon (the main thread woken, no deadline)."""
    tgkill = _tgkill()
    if tgkill is None:
        pytest.skip("no tgkill in this C library")
    proc, _ = paused_commands(["analyze", str(job), "--out", str(tmp_path / "o"), "--format", "md,pdf",
                               "--workers", "2"])
    kids = children(proc.pid)
    others = sorted(int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid)
    assert others  # the deadline's watch and the workers' pool's threads
    t0 = time.monotonic()
    assert tgkill(proc.pid, others[-1], sig) == 0
    assert proc.wait(timeout=30) == code
    assert time.monotonic() - t0 < 5  # unwound, not ended by the deadline's 10 s
    assert gone_within(kids) == []
    assert proc.stderr.read().strip() == line


def _busy(job, options, **kwargs):
    """A rank task that takes long (a worker still busy when the command is interrupted)."""
    time.sleep(60)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_an_interrupt_while_the_workers_start_stops_them(monkeypatch):
    """Ctrl-C or SIGTERM lands just after the ranks are handed to the workers (here: raised at
    that very point, where the parent starts its own work beside them): the workers are stopped
    at once, not left busy for the command's exit to wait on (seen under load: a hang)."""
    import perfreport.running.executor as executor_module
    from perfreport.running.digest import AnalysisOptions

    jobs = [RankJob("a", json_bytes=10), RankJob("b", json_bytes=10)]
    if local_workers(jobs, 2) < 2:
        pytest.skip("needs two worker processes (two cores)")
    workers: list[int] = []
    before = set(children(os.getpid()))  # (a helper an earlier test left running: Dask's resource tracker)

    def interrupted(executor) -> None:
        workers.extend(p for p in children(os.getpid()) if p not in before)  # the pool's workers, forked by now
        raise KeyboardInterrupt

    monkeypatch.setattr(executor_module, "_meanwhile", interrupted)
    with pytest.raises(KeyboardInterrupt):
        next(executor_module.stream(jobs, AnalysisOptions(), Executor(workers=2), task=_busy))
    assert len(workers) >= 2
    assert gone_within(workers) == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc")
def test_a_worker_killed_mid_run_is_named_by_rank_and_signal(job, tmp_path, paused_commands):
    proc, workers = paused_commands(["analyze", str(job), "--out", str(tmp_path / "o"), "--format", "md",
                                             "--workers", "2"])
    kids = children(proc.pid)
    os.kill(workers[0], signal.SIGKILL)  # as the OOM killer does
    assert proc.wait(timeout=30) == 2
    err = proc.stderr.read().strip().splitlines()
    assert len(err) == 1, err
    assert re.fullmatch(r"perfreport: error: rank [01]'s worker died \(signal 9, SIGKILL\) while analysing "
                        + re.escape(str(job)) + r"/rank[01]\.json \(killed: most often the out-of-memory killer.*",
                        err[0]), err
    assert gone_within(kids) == []


def test_workers_capped_at_ranks_cores_and_memory(job, tmp_path, capsys):
    code, _, err = run_cli(capsys, "analyze", job, "--out", tmp_path / "o", "--format", "md", "-q",
                           "--workers", "100000")
    assert code == 0
    assert re.search(r"note: --workers 100,000 capped at [12] \(at most one worker per rank", err), err
    jobs = [RankJob("a", json_bytes=10), RankJob("b", json_bytes=10)]
    assert local_workers(jobs, 1) == 1 and local_workers(jobs, 100000) <= 2
    for bad in (0, -3):
        with pytest.raises(PerfreportError, match="--workers must be at least 1"):
            Executor(workers=bad)


@pytest.mark.parametrize("exc,expect", [(OverflowError("Python int too large to convert to C long"),
                                         "internal error while analysing this rank: OverflowError"),
                                        (MemoryError(), "not enough memory to load and analyse this rank"),
                                        (RecursionError(), "nested too deeply to analyse")])
def test_unexpected_errors_in_a_worker_are_one_line_naming_the_file(exc, expect):
    def task(job, options, **kwargs):
        raise exc
    with pytest.raises(PerfreportError, match=expect) as info:
        guarded(task, RankJob("/data/rank3.json"), None)
    assert str(info.value).startswith("/data/rank3.json: ") and "\n" not in str(info.value)


def test_the_command_ends_without_teardown_but_with_everything_an_exit_owes(tmp_path):
    """lifecycle.exit_now (the end of the console script and of ``python -m perfreport``) skips
    the interpreter's teardown, not what an exit owes: a thread that is not a daemon finishes, the
    atexit handlers run, buffered output is flushed, and the exit code is the command's."""
    marker = tmp_path / "thread-finished"
    program = (
        "import atexit, sys, threading, time\n"
        "from perfreport.running.lifecycle import exit_now\n"
        f"threading.Thread(target=lambda: (time.sleep(0.2), open({str(marker)!r}, 'w').write('done'))).start()\n"
        "atexit.register(lambda: print('atexit ran', end=''))\n"
        "print('buffered,', end='')\n"
        "sys.stderr.write('to stderr')\n"
        "exit_now(3)\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60)
    assert result.returncode == 3
    assert result.stdout == "buffered,atexit ran" and result.stderr == "to stderr"
    assert marker.read_text() == "done"


def test_a_compare_holds_its_analyses_to_the_exit_only_in_the_console_script(tmp_path, monkeypatch):
    """A compare's analyses are held until the process ends where it ends without teardown (the
    console script), not freed array by array when its function returns; a program that calls
    main() keeps nothing (a test suite's hundreds of commands would hold them all)."""
    from perfreport.cli import main
    from perfreport.running import lifecycle

    demo = Path(__file__).parent.parent / "examples" / "resnet50-workers0"
    args = ["compare", str(demo), str(demo), "--format", "json", "-q", "--out"]
    monkeypatch.setattr(lifecycle, "_kept", [])
    assert main([*args, str(tmp_path / "library")]) == 0
    assert lifecycle._kept == []
    monkeypatch.setattr(lifecycle, "_ends_without_teardown", True)
    assert main([*args, str(tmp_path / "script")]) == 0
    kept = lifecycle._kept
    assert any(hasattr(k, "verdict") and hasattr(k, "baseline") for k in kept)  # the comparison and its analyses


def test_python_m_perfreport_keeps_its_exit_code_and_output(tmp_path):
    result = subprocess.run([sys.executable, "-m", "perfreport", "analyze", str(tmp_path / "missing"), "--out",
                             str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"perfreport: error: {tmp_path / 'missing'}: no such file or directory\n"


def test_beside_returns_what_the_child_computed_and_falls_back_to_running_here():
    """running.forked.Beside: fn runs in a forked child (its pid is not ours) and its result comes
    back; a child that fails leaves fn to this process, which meets fn's own error; no child
    is left behind either way."""
    from perfreport.running.forked import Beside
    from perfreport.timing import recording

    parent = os.getpid()
    with recording() as timings:
        beside = Beside(lambda: (os.getpid(), {"delta_ms": 1.5}), "sum")
        pid = beside._child.pid
        child_pid, value = beside.result()
    assert child_pid == pid != parent and value == {"delta_ms": 1.5}
    assert "sum (child process, beside)" in {r["phase"] for r in timings.records()}
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped

    def fails_in_the_child():
        if os.getpid() != parent:
            raise MemoryError("the child ran out of memory")
        return "done here"

    beside = Beside(fails_in_the_child, "x")
    assert beside.result() == "done here"

    beside = Beside(lambda: 1 / 0 if os.getpid() == parent else time.sleep(60), "hangs")
    pid = beside._child.pid
    beside.stop()  # killed and reaped
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def test_no_child_is_forked_while_a_head_start_thread_imports(tmp_path, monkeypatch):
    """A child forked while another thread imports a module inherits that module's import lock
    and hangs when it imports the module itself (the figures' children waited out their 5.6 s
    limit on every small compare): running.forked.fork waits for the threads of fork_after."""
    import importlib
    import threading

    from perfreport.running import forked

    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(0.5)\nVALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    thread = threading.Thread(target=lambda: importlib.import_module("slow_to_import"), daemon=True)
    forked.fork_after(thread)
    thread.start()
    time.sleep(0.1)  # the thread is inside the import, holding its lock

    def work(send):
        send(0, str(importlib.import_module("slow_to_import").VALUE).encode())

    started = time.perf_counter()
    child = forked.Child(work)
    child.wait([0], timeout=10)
    child.stop(kill=True)
    assert child.messages.get(0) == b"42" and time.perf_counter() - started < 5
    sys.modules.pop("slow_to_import", None)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc, and ru_maxrss in KiB")
def test_a_childs_message_is_written_as_it_is_not_copied_first() -> None:
    """A forked child's message goes out as it is: the child that sends 64 MB peaks at those 64
    MB, not at twice them (the head was joined to the data, a copy of each message: 253 MB in
    the forked analyses of a 1 GB gloo trace). The parent gets every byte."""
    import resource

    from perfreport.running import forked, heap

    size = 64 << 20

    def work(send):
        # freed heap pages the child inherited resident (another test of this process may have
        # kept them: heap.keep_freed_pages) would hold the message and its copy without growing
        # the RSS past its mark at the fork (0.0 x and 0.71 x measured): given back, and the mark
        # reset to the RSS now (Linux's clear_refs), every new page counts
        heap.give_back()
        with open("/proc/self/clear_refs", "w") as marks:
            marks.write("5")
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
        data = os.urandom(1 << 20) * 64  # made here, every page touched
        send(0, data)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        send(1, str((peak - before) << 10).encode())

    child = forked.Child(work)
    child.wait([0, 1], timeout=30)
    child.stop(kill=False)
    grown = int(child.messages[1])
    assert len(child.messages[0]) == size and child.messages[0][:1 << 20] * 64 == child.messages[0]
    assert size * 0.9 < grown < size * 1.5, grown / size


ENTRY = ("-c", "import os, sys, types\n"
         "import perfreport.__main__ as entry\n"
         "print('numpy' in sys.modules)\n"
         "seen = types.ModuleType('perfreport.cli')\n"
         "seen.run = lambda: print(os.environ.get('OPENBLAS_NUM_THREADS'), 'numpy' in sys.modules)\n"
         "sys.modules['perfreport.cli'] = seen\n"
         "entry.main()")
"""The entry with the command line replaced by a stand-in that says what it found."""


@pytest.mark.parametrize("given,expect", [(None, "1"), ("4", "4")])
def test_the_command_line_starts_numpy_with_one_blas_thread_unless_told_otherwise(given, expect):
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    out = subprocess.run([sys.executable, *ENTRY], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    # importing the package and its entry loads no numpy, so the variable is set before OpenBLAS reads it
    assert out.stdout.split() == ["False", expect, "False"]
