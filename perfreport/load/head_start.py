"""A head start for a command that loads one rank file in its own process.

``perfreport analyze TRACE`` of a single rank spends ~0.3 s importing what comes after the load
(pandas, the analyses, the report builders) before it reads a byte. :func:`begin` starts loading
the file on a thread first; the C scanner runs with the GIL released, so the file is read and
scanned while the main thread imports, and the file's checksum is hashed on a third thread
(the hasher releases the GIL too). The per-rank task then :func:`claim`\\ s the loaded rank instead
of loading it again. On a 2-core machine this takes the imports and the checksum off a 200 MB
rank's critical path.

The claim checks that the task wants exactly what was started: the same file (path, size and
modification time), the same rank hint and the same limits; otherwise the head start is dropped
and the task loads the file itself, as it would have without one. An error of the load (a bad
file) is raised by the claim, in the task, exactly as the task's own load would raise it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..limits import Limits
from ..limits import current as current_limits
from ..model import RankTrace
from ..timing import current, phase, record, recording
from .discover import RankFile


def load_hashed(rank_file: RankFile, limits: Limits) -> tuple[RankTrace, str]:
    """The rank and its file's checksum (provenance in the report:
    :mod:`perfreport.load.checksums`), hashed on a second thread while the rank loads: the
    hasher and the scanner both release the GIL."""
    from concurrent.futures import ThreadPoolExecutor

    from ..load.checksums import file_checksum
    from .kineto import load_rank_file

    with ThreadPoolExecutor(1, thread_name_prefix="perfreport-checksum") as pool:
        checksum = pool.submit(_timed, file_checksum, rank_file.path)
        trace = load_rank_file(rank_file, limits)
        with phase("wait for checksum"):
            sha, wall, cpu = checksum.result()
    record("checksum (own thread)", wall, cpu)
    return trace, sha


def _timed(fn: Callable, *args):
    """(``fn(*args)``, its wall seconds, its thread's CPU seconds)."""
    t0, c0 = time.perf_counter(), time.thread_time()
    value = fn(*args)
    return value, time.perf_counter() - t0, time.thread_time() - c0


@dataclass
class _Started:
    rank_file: RankFile
    identity: tuple
    limits: Limits
    began: float = field(default_factory=time.perf_counter)
    done: threading.Event = field(default_factory=threading.Event)
    result: tuple[RankTrace, str] | None = None
    error: BaseException | None = None
    phases: list[dict] = field(default_factory=list)


_started: _Started | None = None
_lock = threading.Lock()


def begin(rank_file: RankFile) -> None:
    """Start loading ``rank_file`` on a thread (a daemon: a command that fails before it claims
    the rank does not wait for it). At most one head start is pending; a new one replaces it."""
    global _started
    try:
        identity = _identity(rank_file.path)
    except OSError:
        return  # the task's own load reports the file's problem
    from ..running.heap import one_arena

    started = _Started(rank_file, identity, current_limits())
    one_arena()
    with _lock:
        _started = started
    threading.Thread(target=_run, args=(started,), name="perfreport-head-start", daemon=True).start()


def begin_single(source: str | Path) -> None:
    """:func:`begin` when ``source`` (a command's TRACE argument) is exactly one local trace file,
    or a folder holding exactly one; nothing otherwise (several ranks load in worker processes,
    a stored baseline reads its own columns, a bad path is reported by the command)."""
    from .discover import discover

    path = Path(source)
    if "://" in str(source) or not path.exists() or (path / "manifest.json").exists():
        return
    try:
        files = discover(path)
    except Exception:  # the command reports it, in its own words
        return
    if len(files) == 1:
        begin(files[0])


def claim(rank_file: RankFile, limits: Limits) -> tuple[RankTrace, str, float] | None:
    """(the rank, its checksum, when its load began: ``time.perf_counter()``) of a head start for
    ``rank_file`` under ``limits``, once it is done, its phases added to the current recording;
    None when there is none for it. Re-raises the head start's load error."""
    global _started
    with _lock:
        started, _started = _started, None
    if started is None:
        return None
    try:
        same = (started.rank_file == rank_file and started.limits == limits
                and started.identity == _identity(rank_file.path))
    except OSError:
        same = False
    if not same:
        return None  # dropped: its thread finishes on its own, and nothing reads its result
    t0, c0 = time.perf_counter(), time.thread_time()
    started.done.wait()
    timings = current()
    if timings is not None:
        # The load is this task's (its wall time counts from the head start's beginning), run on
        # another thread: its phases keep their self times, and the wait for it has none, so the
        # task's self times still add up to its wall time without counting the load twice.
        timings.add("wait for the head start", time.perf_counter() - t0, time.thread_time() - c0, self_s=0.0)
        for p in started.phases:
            timings.add(p["phase"], p["wall_s"], p["cpu_s"], self_s=p["self_s"], calls=p["calls"],
                        faults=p.get("minor_faults", 0))
    if started.error is not None:
        raise started.error
    return *started.result, started.began


def _run(started: _Started) -> None:
    try:
        with recording() as timings:
            try:
                started.result = load_hashed(started.rank_file, started.limits)
            finally:
                started.phases = timings.records()
    except BaseException as exc:  # handed to the claim, which raises it in the task
        started.error = exc
    finally:
        started.done.set()


def _identity(path: Path) -> tuple:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino
