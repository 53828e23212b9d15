"""A head start for a command that loads one rank file in its own process.

``perfreport analyze TRACE`` of a single rank spends ~0.2 s importing what comes after the load
(pandas, the analyses, the report builders) before it reads a byte. :func:`begin` starts loading
the file first, and the per-rank task then :func:`claim`\\ s the loaded rank instead of loading it
again: on a 2-core machine the imports and the load run side by side.

Which files, and where the load runs:

* a file of up to :data:`HEAD_START_MAX_JSON_BYTES` of JSON loads in a **forked child**, which
  hands the loaded rank back in memory files (:mod:`perfreport.running.handoff`, as a worker
  hands back its digest: the columns are mapped, not copied). A load on a thread of the
  importing process slows its imports by half or more although the scanner holds no GIL
  (measured on the 2-core VM: the imports of a 200 MB ``analyze`` 0.19 CPU s alone, 0.27-0.36
  beside a scan on a thread of the same process, 0.19 beside one in another process). The rank
  was ready 0.29-0.30 s after the start instead of 0.37-0.38 (3 runs each), and 0.53-0.55 s
  instead of 0.59-0.60 for a 500 MB one; the 200 MB A100 rank's ``analyze --format json`` took
  0.62-0.68 s instead of 0.70-0.75 (8 alternating pairs), its parent's peak 164 MB instead of
  180. The process is free meanwhile, so it prepares the report's renderers then
  (:func:`loading_in_a_child`). Where no child can be forked, a thread loads it.
* a larger file gets **no head start**: the task loads it after the imports. Handing a 1 GB
  rank's columns back from a child costs more than it saves (0.09-0.16 s; the triton-grown
  rank was ready 0.15 s later), and on a thread beside the imports its load slowed them five-
  to ninefold. What slows them is the other thread's page faults: a thread of the same process
  that only touches fresh memory made the imports cost 0.40-0.65 CPU s instead of 0.21, one
  that spins or rewrites memory it already has 0.23-0.29, and one in another process faulting
  the same way 0.21. The scan of a 1 GB rank faults in its columns and the file's map all
  along: its imports took 0.7-1.2 CPU s (0.12-0.14 after it) and its scan 0.07-0.28 s more.
  Four ranks grown to 1 GB (A100, V100, rtx2080, triton; ``analyze --format json``, 3
  alternating pairs each): 1.91-1.94 s against 1.96-2.07, 2.51-2.53 against 2.53-2.87,
  2.15-2.22 against 2.23-2.33, 2.98-2.99 against 2.93-3.03, with 0.8-1.2 CPU s less each.

Wherever a rank loads, its file's checksum is computed by the process that loads it
(:func:`load_hashed`).

The claim checks that the task wants exactly what was started: the same file (path, size and
modification time), the same rank hint and the same limits; otherwise the head start is dropped
and the task loads the file itself, as it would have without one. An error of the load (a bad
file) is raised by the claim, in the task, exactly as the task's own load would raise it.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..limits import Limits
from ..limits import current as current_limits
from ..model import RankTrace
from ..running.handoff import Channel
from ..timing import current, phase, record, recording
from .discover import RankFile


def load_hashed(rank_file: RankFile, limits: Limits) -> tuple[RankTrace, str]:
    """The rank and its file's checksum (provenance in the report:
    :mod:`perfreport.load.checksums`).

    A plain JSON file is hashed by the scan itself as it reads it, a few kB behind (the text is
    in the core's cache then): the file is read once, with no hasher beside the scan. A
    compressed file's checksum is of bytes the scan never sees: it is hashed on a second thread
    while the rank loads (the hasher and the scanner both release the GIL), as is any file the
    scan could not hash (one that cannot be mapped, or that the one-pass scan rejects) after it.
    The triton-grown 1 GB ``compare`` took 0.2 s less without hashing at all (5.09-5.30 against
    5.36-5.56 s, 4 alternating pairs): the hasher read each 1 GB file again (0.12 CPU s) beside
    its scan, on a machine whose two cores ran the two scans; in the scan the hash costs
    0.03-0.05 s of its 0.94."""
    from ..load.checksums import file_checksum
    from ..load.files import is_gzip
    from .kineto import load_rank_file, load_rank_file_hashed

    try:
        compressed = is_gzip(rank_file.path)
    except OSError:
        compressed = False  # the load says what is wrong with the file
    if not compressed:
        trace, checksum = load_rank_file_hashed(rank_file, limits)
        if checksum is None:
            with phase("checksum"):
                checksum = file_checksum(rank_file.path)
        return trace, checksum
    from concurrent.futures import ThreadPoolExecutor

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


HEAD_START_MAX_JSON_BYTES = 512 << 20
"""The largest file (bytes of JSON; a ``.json.gz`` counts its text) that gets a head start; a
larger one loads in the task, after the imports (see the module's doc)."""


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
    child: _Child | None = None
    """The forked child loading the file (None: a thread loads it)."""


_started: _Started | None = None
_lock = threading.Lock()


def begin(rank_file: RankFile) -> None:
    """Start loading ``rank_file`` in a forked child, or on a thread where none can be forked (a
    daemon thread: a command that fails before it claims the rank does not wait for it, and
    :func:`drop` ends a child); nothing for a file past :data:`HEAD_START_MAX_JSON_BYTES` (see
    the module's doc). At most one head start is pending; a new one replaces it."""
    global _started
    try:
        identity = _identity(rank_file.path)
        if _uncompressed(rank_file) > HEAD_START_MAX_JSON_BYTES:
            return
    except OSError:
        return  # the task's own load reports the file's problem
    from ..running.heap import one_arena

    started = _Started(rank_file, identity, current_limits())
    one_arena()
    with _lock:
        _drop(_started)
        _started = started
    started.child = _Child.start(started)
    if started.child is None:
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


def loading_in_a_child() -> bool:
    """Whether a head start is pending in a forked child (this process is free meanwhile)."""
    started = _started
    return started is not None and started.child is not None


def drop() -> None:
    """Forget the pending head start, if any (its child killed and reaped): the command that
    began it ends without claiming it (an error before its rank task)."""
    global _started
    with _lock:
        started, _started = _started, None
    _drop(started)


def claim(rank_file: RankFile, limits: Limits) -> tuple[RankTrace, str, float, float] | None:
    """(the rank, its checksum, when its load began: ``time.perf_counter()``, how long the loaded
    rank then waited for this claim: the command still importing) of a head start for
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
        _drop(started)  # a thread finishes on its own and nothing reads its result; a child is killed
        return None
    t0, c0 = time.perf_counter(), time.thread_time()
    if started.child is not None and not started.child.received(started):
        return None  # the child died: the task loads the file itself
    started.done.wait()
    # The load is this task's (its wall time counts from the head start's beginning), run on
    # another thread or in a child: its phases keep their self times. The rest of that time is
    # the wait's own: the task waiting for the load, or the load done while the command still
    # imported what comes after it (0.2 s of a 0.33 s task on the 2-rank NCCL example). So the
    # task's self times add up to its wall time, and the load counts once.
    now = time.perf_counter()
    idle = max(0.0, now - started.began - sum(p["self_s"] for p in started.phases))
    timings = current()
    if timings is not None:
        timings.add("wait for the head start", max(now - t0, idle), time.thread_time() - c0, self_s=idle)
        for p in started.phases:
            timings.add(p["phase"], p["wall_s"], p["cpu_s"], self_s=p["self_s"], calls=p["calls"],
                        faults=p.get("minor_faults", 0))
    if started.error is not None:
        raise started.error
    return *started.result, started.began, idle


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


def _drop(started: _Started | None) -> None:
    """Forget a head start nobody will claim (its child killed and reaped)."""
    if started is not None and started.child is not None:
        started.child.stop()


def _uncompressed(rank_file: RankFile) -> int:
    from .files import uncompressed_size

    return uncompressed_size(rank_file.path)


class _Child:
    """A forked child that loads the file and hands back ``((rank, checksum), error, phases)`` in
    memory files over a socket. A pipe whose only writer is the child says when it is gone, so
    a child that dies without a word (killed, out of memory) is noticed at once and the task
    loads the file itself."""

    def __init__(self, pid: int, channel: Channel, gone: int) -> None:
        self.pid, self.channel, self.gone = pid, channel, gone

    @classmethod
    def start(cls, started: _Started) -> _Child | None:
        """The child loading ``started``'s file; None where none can be forked (no ``fork``,
        ``memfd`` or descriptor passing, no process to spare: a thread loads it instead)."""
        from ..running.forked import fork

        if not (hasattr(os, "fork") and hasattr(os, "memfd_create") and hasattr(socket, "send_fds")):
            return None
        parent = os.getpid()
        try:
            channel = Channel()
        except OSError:
            return None
        gone, gone_w = os.pipe()
        try:
            pid = fork()
        except OSError:
            channel.close()
            os.close(gone)
            os.close(gone_w)
            return None
        if pid == 0:  # the child: never returns
            os.close(gone)
            _child_load(started, channel, parent)
        os.close(gone_w)
        channel.workers.close()
        return cls(pid, channel, gone)

    def received(self, started: _Started) -> bool:
        """Wait for the child's hand-off and fill ``started`` from it; False when the child
        ended without one. The child is reaped either way, killed first when the wait ended
        without its hand-off (a Ctrl-C or SIGTERM here: the child ignores Ctrl-C, and would
        otherwise finish its load before the command could end)."""
        from ..running.handoff import HandedOff, received

        handed = False
        try:
            select.select([self.channel.parent, self.gone], [], [])
            self.channel.parent.setblocking(False)  # the child gone without a word: nothing to read
            try:
                (rank, checksum), error, phases = received(HandedOff(0), self.channel)
            except (OSError, EOFError, ValueError, TypeError, pickle.UnpicklingError):
                return False
            handed = True
            started.result = None if error is not None else (rank, checksum)
            started.error, started.phases = error, phases
            started.done.set()
            return True
        finally:
            self._finish(kill=not handed)

    def stop(self) -> None:
        """Kill and reap the child (its head start dropped)."""
        self._finish(kill=True)

    def _finish(self, kill: bool) -> None:
        from ..timing import reaped

        if self.pid <= 0:
            return
        pid, self.pid = self.pid, -1
        if kill:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reaped(pid)
        os.close(self.gone)
        self.channel.close()


def _child_load(started: _Started, channel: Channel, parent: int) -> None:
    """In the forked child: load the file, hand back the result (or the load's error), exit."""
    from ..running.handoff import HandedOff, hand_off
    from ..running.heap import give_back
    from ..running.lifecycle import worker_init

    code = 1
    try:
        worker_init(parent)
        give_back()
        channel.parent.close()
        with recording() as timings:
            result, error = None, None
            try:
                result = load_hashed(started.rank_file, started.limits)
            except Exception as exc:  # noqa: BLE001 - the claim raises it in the task
                error = exc
        message = ((None, None) if result is None else result, error, timings.records())
        if isinstance(hand_off(message, channel, 0), HandedOff):
            code = 0
    except BaseException:  # noqa: BLE001 - a child never returns into the parent's code
        code = 1
    finally:
        os._exit(code)


def _identity(path: Path) -> tuple:
    st = path.stat()
    return str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino
