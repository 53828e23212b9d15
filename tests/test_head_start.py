"""The head start of a single-rank analyze (perfreport.load.head_start) and the scanner's GIL
release it relies on: the same analysis as without it, dropped when the task wants something
else, errors raised where the task's own load raises them."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from perfreport.errors import TraceError
from perfreport.limits import current as current_limits
from perfreport.load import head_start
from perfreport.load.checksums import file_checksum
from perfreport.load.discover import discover
from perfreport.timing import recording

from .conftest import DATA, cli_in_process

RANK = DATA / "recorded" / "repeat_base" / "run1"


def _rank_file(folder: Path = RANK):
    (rank_file,) = discover(folder)
    return rank_file


def _analysis(folder: Path, out: Path, head: bool) -> dict:
    """report.json of ``analyze`` on ``folder``, with the head start or (patched off) without."""
    with pytest.MonkeyPatch.context() as patch:
        if not head:
            patch.setattr(head_start, "begin_single", lambda source: None)
        result = cli_in_process(["analyze", folder, "--out", out, "--format", "json", "-q"])
    assert result.returncode == 0, result.stderr
    document = json.loads((out / "report.json").read_text())
    phases = {p["phase"] for p in document["timings"]["rank_phases"]}
    assert ("wait for the head start" in phases) == head  # the head start was claimed, or there was none
    for key in ("timings", "timings_s", "created_utc", "command"):
        document.pop(key, None)
    return document


def test_a_head_started_analysis_is_the_analysis_without_one(tmp_path):
    with_head = _analysis(RANK, tmp_path / "a", head=True)
    without = _analysis(RANK, tmp_path / "b", head=False)
    assert with_head == without
    assert with_head["ranks"][0]["file"].endswith(".json.gz") and len(with_head["kernel_metrics"]) > 10


@pytest.fixture(params=["child", "thread"])
def where(request, monkeypatch):
    """Where the head start loads: in a forked child, or on a thread where none can be forked
    (forced here)."""
    if request.param == "thread":
        monkeypatch.setattr(head_start._Child, "start", classmethod(lambda cls, started: None))
    return request.param


def _child_pid() -> int | None:
    started = head_start._started
    return started.child.pid if started is not None and started.child is not None else None


def phases_waited(timings) -> float:
    """The self time of the task's wait for its head start: the time its loaded rank waited."""
    return next(p["self_s"] for p in timings.records() if p["phase"] == "wait for the head start")


def _reaped(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_the_task_claims_the_head_start_and_records_its_phases(where):
    rank_file = _rank_file()
    head_start.begin(rank_file)
    assert head_start.loading_in_a_child() == (where == "child")
    pid = _child_pid()
    with recording() as timings:
        claimed = head_start.claim(rank_file, current_limits())
    assert claimed is not None
    trace, sha, began, waited = claimed
    own, own_sha = head_start.load_hashed(rank_file, current_limits())
    assert sha == own_sha == file_checksum(rank_file.path) and sha.startswith("xxh3_128:") and len(sha) == 41
    assert trace.meta.rank == own.meta.rank and len(trace.ts) == len(own.ts) > 1000
    assert began <= time.perf_counter() and 0 <= waited == pytest.approx(phases_waited(timings), abs=1e-4)
    phases = {p["phase"]: p for p in timings.records()}
    assert {"scan", "decode", "wait for the head start", "checksum (own thread)"} <= set(phases)
    assert phases["scan"]["calls"] == 1
    assert head_start.claim(rank_file, current_limits()) is None  # claimed once: nothing pending
    if pid is not None:
        assert _reaped(pid)  # the child was reaped by the claim
        assert trace.ts.sum() == own.ts.sum() and list(trace.strings) == list(own.strings)
        assert len(timings.helper_peaks) == 1 and timings.helper_peaks[0] > 10 << 20  # the child's peak RSS


def test_a_plain_file_is_hashed_by_its_scan_and_any_other_beside_or_after_it(tmp_path, monkeypatch):
    """The checksum of a plain JSON file comes from its scan (one read of the file, no hasher
    thread); a compressed file's is hashed on a thread beside the load; a file the scan does not
    hash (a byte-order mark: the text scanned is a copy without it; a build without the hash)
    after the load. Every one is the checksum of the file's bytes as stored."""
    import gzip

    from perfreport.load import scanner

    plain = tmp_path / "plain" / "rank0.json"
    plain.parent.mkdir()
    plain.write_bytes(gzip.decompress(_rank_file().path.read_bytes()))
    marked = tmp_path / "marked" / "rank0.json"
    marked.parent.mkdir()
    marked.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())

    def hashed(folder: Path) -> tuple[str, set[str], int]:
        rank_file = _rank_file(folder)
        with recording() as timings:
            trace, checksum = head_start.load_hashed(rank_file, current_limits())
        assert checksum == file_checksum(rank_file.path), folder
        return checksum, {p["phase"] for p in timings.records() if "checksum" in p["phase"]}, trace.n_events

    in_scan, phases, n_events = hashed(plain.parent)
    assert phases == {"checksum (in the scan)"} and n_events > 1000
    assert hashed(RANK)[1] == {"checksum (own thread)", "wait for checksum"}  # gzipped
    assert hashed(marked.parent)[1:] == ({"checksum"}, n_events)
    built = scanner._scan
    monkeypatch.setattr(scanner, "_scan", type("OlderBuild", (), {"scan_document": staticmethod(
        lambda *args: built.scan_document(*args[:4]))})())
    assert hashed(plain.parent) == (in_scan, {"checksum"}, n_events)


@pytest.mark.parametrize("load_s", [0.0, 0.5], ids=["done before the imports", "outlasting them"])
def test_the_load_time_said_is_the_loads_own_whether_it_ends_before_or_after_the_imports(tmp_path, monkeypatch,
                                                                                         load_s):
    """"loaded 1 rank(s) in X s" (report.json's ``timings_s.load``) is the time the load took,
    as its phases measured it: not less when it outlasts the imports it began beside (so began
    before the per-rank stage: a 1 GB rank with a head start said 0.82 s for a 1.13 s load), not more
    when it was done before them (a small rank waits to be claimed). The imports are made to
    last 0.3 s here, the load 0.5 s more in one case (a phase of its own, "read")."""
    from contextlib import contextmanager

    import perfreport.cli as cli
    from perfreport.timing import phase

    real_imports, real_load = cli.imports, head_start.load_hashed

    @contextmanager
    def slow_imports():
        with real_imports():
            yield
        time.sleep(0.3)

    def slow_load(rank_file, limits):
        with phase("read"):
            time.sleep(load_s)
        return real_load(rank_file, limits)

    monkeypatch.setattr(cli, "imports", slow_imports)
    monkeypatch.setattr(head_start, "load_hashed", slow_load)  # (the head start's child is forked after this)
    result = cli_in_process(["analyze", RANK, "--out", tmp_path, "--format", "json", "-q"])
    assert result.returncode == 0, result.stderr
    document = json.loads((tmp_path / "report.json").read_text())
    phases = {p["phase"]: p for p in document["timings"]["rank_phases"]}
    loading = sum(phases[name]["self_s"] for name in ("read", "decompress", "scan", "decode"))
    assert loading >= load_s
    said = document["timings_s"]["load"]
    assert loading - 0.001 <= said <= loading + 0.03, (loading, document["timings_s"])  # (ms rounding)


def test_a_file_past_the_head_start_bound_loads_in_the_task_after_the_imports(tmp_path, monkeypatch):
    """A rank of more JSON than HEAD_START_MAX_JSON_BYTES gets no head start (on a thread beside
    the imports its page faults slowed them five- to ninefold): nothing is started, and the task's own
    load gives the same analysis."""
    monkeypatch.setattr(head_start, "HEAD_START_MAX_JSON_BYTES", _rank_file().path.stat().st_size)  # < its JSON
    head_start.begin(_rank_file())
    assert head_start._started is None
    result = cli_in_process(["analyze", RANK, "--out", tmp_path / "b", "--format", "json", "-q"])
    assert result.returncode == 0, result.stderr
    without = json.loads((tmp_path / "b" / "report.json").read_text())
    phases = {p["phase"] for p in without["timings"]["rank_phases"]}
    assert "wait for the head start" not in phases and {"read", "decompress", "scan", "decode"} <= phases
    for key in ("timings", "timings_s", "created_utc", "command"):
        without.pop(key, None)
    monkeypatch.undo()
    assert _analysis(RANK, tmp_path / "a", head=True) == without


def test_a_head_start_child_that_dies_is_replaced_by_the_tasks_own_load():
    """A child killed before it hands the rank back (out of memory, a signal) is noticed at
    once (its pipe closes): the claim gives nothing, the task loads the file itself."""
    rank_file = _rank_file()
    head_start.begin(rank_file)
    pid = _child_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    started = time.perf_counter()
    assert head_start.claim(rank_file, current_limits()) is None
    assert time.perf_counter() - started < 5 and _reaped(pid)


def test_a_claim_interrupted_while_the_child_loads_kills_it(monkeypatch):
    """A signal that ends the wait for the head start's child (the command's Ctrl-C and SIGTERM
    handlers raise) kills and reaps the child at once: it ignores Ctrl-C, and would otherwise
    finish its load before the command could end."""
    class Stop(Exception):
        pass

    def stop(signum, frame):
        raise Stop

    monkeypatch.setattr(head_start, "load_hashed", lambda rank_file, limits: time.sleep(60))  # a load that lasts
    rank_file = _rank_file()
    head_start.begin(rank_file)
    pid = _child_pid()
    assert pid is not None
    before = signal.signal(signal.SIGALRM, stop)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        started = time.perf_counter()
        with pytest.raises(Stop):
            head_start.claim(rank_file, current_limits())
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    assert time.perf_counter() - started < 5 and _reaped(pid)


def test_a_dropped_head_start_leaves_no_process(tmp_path):
    rank_file = _rank_file()
    head_start.begin(rank_file)
    pid = _child_pid()
    head_start.drop()
    assert not head_start.loading_in_a_child() and _reaped(pid)
    head_start.begin(rank_file)  # a new head start replaces a pending one: its child goes
    first = _child_pid()
    head_start.begin(rank_file)
    assert _reaped(first) and _child_pid() not in (None, first)
    head_start.drop()
    # a command that fails before its rank task (a bad --format) ends its head start's child
    children = []
    real_start = head_start._Child.start

    def start(started):
        child = real_start(started)
        children.append(child.pid)
        return child

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(head_start._Child, "start", start)
        result = cli_in_process(["analyze", RANK, "--out", tmp_path / "out", "--format", "bogus"])
    assert result.returncode == 2 and "bogus" in result.stderr
    assert len(children) == 1 and _reaped(children[0])


def test_the_report_formats_are_prepared_while_the_head_start_loads(tmp_path):
    """With the rank loading in a child, the command imports matplotlib and compiles the
    templates while it waits (the executor's while_waiting), not after the analyses."""
    result = cli_in_process(["analyze", RANK, "--out", tmp_path, "--format", "html,json", "-q"])
    assert result.returncode == 0, result.stderr
    timings = json.loads((tmp_path / "report.json").read_text())["timings"]
    assert "meanwhile (while the head start loads)" in {p["phase"] for p in timings["parent"]["phases"]}
    assert timings["helpers"]["processes"] >= 1  # the head start's child, reaped and counted


def test_a_head_start_for_another_file_or_other_limits_is_dropped(tmp_path, where):
    rank_file = _rank_file()
    head_start.begin(rank_file)
    other = _rank_file(DATA / "recorded" / "repeat_base" / "run2")
    assert head_start.claim(other, current_limits()) is None
    head_start.begin(rank_file)
    stricter = dataclasses.replace(current_limits(), max_events=10)
    assert stricter != current_limits()
    assert head_start.claim(rank_file, stricter) is None


def test_a_file_changed_after_the_head_start_is_loaded_again(tmp_path, where):
    folder = tmp_path / "job"
    shutil.copytree(RANK, folder)
    rank_file = _rank_file(folder)
    head_start.begin(rank_file)
    time.sleep(0.01)
    stat = rank_file.path.stat()
    os.utime(rank_file.path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert head_start.claim(rank_file, current_limits()) is None


def test_the_head_starts_load_error_is_raised_by_the_claim(tmp_path, where):
    bad = tmp_path / "rank0.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2,}]}')
    rank_file = _rank_file(tmp_path)
    with pytest.raises(TraceError) as own:
        head_start.load_hashed(rank_file, current_limits())
    head_start.begin(rank_file)
    with pytest.raises(TraceError) as claimed:
        head_start.claim(rank_file, current_limits())
    assert str(claimed.value) == str(own.value) and str(bad) in str(claimed.value)
    result = cli_in_process(["analyze", tmp_path, "--out", tmp_path / "out", "--format", "json"])
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and str(bad) in result.stderr and "Traceback" not in result.stderr


def test_the_scanner_lets_other_threads_run_while_it_scans():
    """The head start is worth something only if the scan releases the GIL: while this thread is
    inside the scanner's C call, a Python thread keeps running. Held for the whole call, the GIL
    would stop that thread for the call's full length: the longest gap between its samples would
    be at least the call's duration."""
    from perfreport.load import _scan
    from perfreport.load.fields import ARG_FIELDS, TOP_FIELDS

    event = b'{"ph": "X", "cat": "kernel", "name": "void gemm_kernel<float>(float*)", "pid": 0, "tid": 7, ' \
            b'"ts": 1234567.125, "dur": 12.5, "args": {"correlation": 42, "stream": 7, "device": 0}}'
    document = b'{"traceEvents": [' + b", ".join([event] * 300_000) + b"]}"  # ~50 MB: a ~60 ms scan
    samples: list[float] = []
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(time.perf_counter())

    thread = threading.Thread(target=sample)
    thread.start()
    try:
        time.sleep(0.01)
        t0 = time.perf_counter()
        n_events = _scan.scan_document(document, TOP_FIELDS, ARG_FIELDS)[0]
        t1 = time.perf_counter()
    finally:
        stop.set()
        thread.join()
    assert n_events == 300_000
    inside = [t0] + [s for s in samples if t0 < s < t1] + [t1]
    longest = max(b - a for a, b in zip(inside, inside[1:]))
    assert longest < 0.5 * (t1 - t0), f"the other thread stopped for {1000 * longest:.0f} ms of a {1000 * (t1 - t0):.0f} ms scan"


def test_a_scan_beside_a_busy_python_thread_never_waits_for_the_gil():
    """Numbers the fast path cannot convert (more than 19 significant digits: kernel occupancy
    figures such as 0.018518518518518517) are parsed by the C library in the "C" locale, not by
    Python's parser under the GIL: a thread running Python beside the scan would otherwise hold
    the scan up to 5 ms (the switch interval) at each one (a 200 MB trace has ~2,000)."""
    from perfreport.load import _scan
    from perfreport.load.fields import ARG_FIELDS, TOP_FIELDS

    plain = b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1661203462598738, "dur": 12, "args": {"stream": 7}}'
    long_number = b'{"ph": "X", "cat": "kernel", "name": "k", "ts": 1661203462598739, "dur": 3, ' \
                  b'"args": {"blocks per SM": 0.018518518518518517, "warps per SM": 0.07407407407407407}}'
    document = b'{"traceEvents": [' + b", ".join(([plain] * 49 + [long_number]) * 2_000) + b"]}"
    done = threading.Event()
    times: list[float] = []

    def scan():
        t0, c0 = time.perf_counter(), time.thread_time()
        _scan.scan_document(document, TOP_FIELDS, ARG_FIELDS)
        times.extend([time.perf_counter() - t0, time.thread_time() - c0])
        done.set()

    thread = threading.Thread(target=scan)
    thread.start()
    spins = 0
    while not done.is_set():  # Python on this thread all along: it holds the GIL whenever it runs
        spins += 1
    thread.join()
    wall, cpu = times
    assert spins > 0 and wall < 5 * cpu + 0.05, f"a {1000 * cpu:.0f} ms scan took {1000 * wall:.0f} ms beside Python"
