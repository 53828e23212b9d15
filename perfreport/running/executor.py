"""Where ranks are loaded and analysed: here, in local worker processes, or on a Dask cluster.

Every executor runs the same task per rank, :func:`run_job` (load the rank, analyse it alone,
send back its :class:`~perfreport.running.digest.RankDigest`), and hands the digests to the caller as
they arrive (:func:`stream`); the cross-rank reduce (:class:`perfreport.running.assemble.Assembler`)
always runs in the calling process. Only digests travel, never event tables.

* ``local`` (default): worker processes, as many as cores and free memory allow (a worker's
  peak is ~2 x the JSON of the rank it loads), one rank per task; one rank, one worker, or ranks
  too small to repay starting workers (:func:`small_job`) run in this process.
* ``dask``: tasks on an existing ``distributed`` cluster (``--scheduler tcp://HOST:PORT``); the
  workers must see the trace paths (shared storage, or ``s3://``, ``gs://``... through fsspec).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .digest import AnalysisOptions, RankDigest, digest
from .forked import fork_after, imports_done
from .handoff import Channel, hand_off, handoff_channel, received
from .heap import not_kept_in_a_worker, reusing_freed_pages
from ..errors import PerfreportError
from ..limits import Limits
from ..limits import current as current_limits
from ..model import RankTrace

EXECUTORS = ("local", "dask")


@dataclass(frozen=True)
class RankJob:
    """One rank to load: a trace file (local path or fsspec URL), or a stored baseline's column
    cache (verified against ``cache_sha256`` before use)."""

    path: str
    rank_hint: int | None = None
    hint_source: str = "none"
    json_bytes: int = 0
    """Uncompressed JSON size when known (sizes the worker pool)."""
    cache: str | None = None
    cache_sha256: str | None = None
    meta_entry: dict | None = None
    """A stored baseline's manifest entry for this rank (its metadata, for the cache)."""
    sha256: str | None = None
    """Known checksum of ``path`` (a stored baseline's): not recomputed."""
    verify: bool = False
    """Check ``path`` against ``sha256`` before loading it (a stored baseline's rank file)."""
    digest_sha256: str | None = None
    """Checksum of the stored baseline's cached analyses (``cache/rank-N.digest``): the cache is
    read only when its bytes match it."""


@dataclass(frozen=True)
class Executor:
    """How to run the per-rank tasks: ``kind`` in :data:`EXECUTORS`, ``workers`` caps local
    processes (None: automatic), ``scheduler`` is the Dask scheduler address."""

    kind: str = "local"
    workers: int | None = None
    scheduler: str | None = None
    while_waiting: Callable[[], None] | None = None
    """Work for this process once the ranks run elsewhere (worker processes, a cluster), on a
    thread of its own: a command imports what its reports need (matplotlib) and compiles their
    templates instead of idling.
    Not called when the ranks run in this process."""

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise PerfreportError(f"unknown executor {self.kind!r}: choose from {', '.join(EXECUTORS)}")
        if self.workers is not None and self.workers < 1:
            raise PerfreportError(f"--workers must be at least 1, got {self.workers}")
        if self.kind == "dask" and not self.scheduler:
            raise PerfreportError("--executor dask needs --scheduler tcp://HOST:PORT (a running Dask scheduler)")


def run_job(job: RankJob, options: AnalysisOptions, use_digest_cache: bool = True,
            limits: Limits | None = None) -> RankDigest:
    """The per-rank task: load ``job``'s rank, analyse it alone, return its digest (a stored
    baseline's: read from its digest cache when that was made by this code for these settings).
    ``limits``: the caller's (``--limit``, ``$PERFREPORT_LIMITS``), which a Dask worker, with an
    environment of its own, would not otherwise see; default this process's."""
    from ..timing import recording

    t0 = time.perf_counter()
    with recording() as timings:  # the task's own phases, sent back with its digest
        result = _cached_or_analysed(job, options, use_digest_cache, limits, t0)
    result.timings, result.pid = timings.records(), os.getpid()
    return result


def _cached_or_analysed(job: RankJob, options: AnalysisOptions, use_digest_cache: bool, limits: Limits | None,
                        t0: float) -> RankDigest:
    from ..timing import phase

    if job.cache is not None and use_digest_cache and job.digest_sha256:
        with phase("read cached analyses"):
            from_cache = _cached_digest(job, options)
        if from_cache is not None and from_cache.checksum == _stored_checksum(job):  # of this very rank file
            from ..gate.baselines import verify_file

            with phase("verify stored columns"):
                verify_file(Path(job.cache), job.cache_sha256)  # damaged stored columns: the load's error line
            from_cache.load_s = time.perf_counter() - t0
            from_cache.worker_peak_rss = peak_rss()
            return from_cache
    return _analyse(job, options, limits, t0)[0]


def _cached_digest(job: RankJob, options: AnalysisOptions) -> RankDigest | None:
    """A stored rank's cached analyses when their bytes match the manifest's checksum; a cache
    that differs (edited, damaged) is never used: the rank is analysed again from its verified
    columns, with a warning naming the file."""
    import hashlib
    import logging

    from . import digest_cache

    path = digest_cache.path_for(job.cache)
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != job.digest_sha256:
        logging.getLogger("perfreport").warning(
            "%s: cached analyses differ from their checksum in the manifest (modified or damaged); not used, the "
            "rank is analysed again from its verified files ('baseline save --force' rewrites the cache)", path)
        return None
    return digest_cache.decode(data, options, job.path)


def save_job(job: RankJob, options: AnalysisOptions, limits: Limits | None = None):
    """The per-rank task of ``baseline save``: what the store keeps of the rank
    (:class:`perfreport.gate.baselines.RankPayload`: its column cache, metadata and digest, so
    later compares read the analyses), made in the worker that loaded it."""
    return _analyse(job, options, limits, time.perf_counter(), payload=True)[1]


def _analyse(job: RankJob, options: AnalysisOptions, limits: Limits | None, t0: float, payload: bool = False):
    """(digest, the baseline payload when ``payload`` else None) of ``job``'s rank, loaded
    here; the rank's memory is given back before returning."""
    source = None
    if payload:
        from ..gate.baselines import source_state

        source = source_state(job.path)  # before loading: the copy stored later must be this file
    trace, checksum, began, waited = _load(job, limits or current_limits())
    # then the freed heap goes back before the next rank (a small rank's stays for it in a worker)
    with reusing_freed_pages(trace.n_events, more_ranks=_started is not None):
        result = digest(trace, options, checksum=checksum, load_s=time.perf_counter() - min(t0, began) - waited,
                        waited_s=waited)
        stored = None
        if payload:
            from ..gate.baselines import rank_payload

            source = dataclasses.replace(source, checksum=checksum) if source is not None and job.cache is None else None
            from ..timing import phase

            with phase("baseline columns"):
                stored = rank_payload(trace, result, source)
        del trace
        result.worker_peak_rss = peak_rss()
    return result, stored


def _load(job: RankJob, limits: Limits) -> tuple[RankTrace, str | None, float, float]:
    """(the rank, its file's checksum, when its load began: ``time.perf_counter()`` now, or
    earlier for a rank that had a head start, and how long that loaded rank waited to be
    claimed: seconds of the task's that are not its load's)."""
    began = time.perf_counter()
    from ..timing import phase
    from ..load import head_start
    from ..load.kineto import load_rank_file
    from ..load.discover import RankFile

    if job.cache is not None:
        from ..gate.baselines import _meta, decode_columns, verify_file

        with phase("read stored columns"):
            data = verify_file(Path(job.cache), job.cache_sha256)
        with phase("decode"):
            return (decode_columns(data, _meta(job.meta_entry, Path(job.path)), Path(job.cache)), _stored_checksum(job),
                    began, 0.0)
    if "://" in job.path:
        return *_load_remote(job, limits), began, 0.0
    path = Path(job.path)
    if job.verify:
        from ..gate.baselines import verify_file

        with phase("verify"):
            verify_file(path, job.sha256)
    rank_file = RankFile(path, job.rank_hint, job.hint_source)
    if job.sha256 or not path.is_file():
        return load_rank_file(rank_file, limits), _stored_checksum(job), began, 0.0
    early = head_start.claim(rank_file, limits)
    if early is not None:
        return early
    return *head_start.load_hashed(rank_file, limits), began, 0.0


def _stored_checksum(job: RankJob) -> str | None:
    """The checksum of a stored baseline's rank file as a digest carries it (its manifest's
    SHA-256); None for a trace file analysed where it lies (hashed while it loads)."""
    return f"sha256:{job.sha256}" if job.sha256 else None


def _load_remote(job: RankJob, limits: Limits):
    """A trace on object storage: copied to a local temporary file by fsspec, loaded, removed."""
    import shutil
    import tempfile

    from ..load.checksums import file_checksum
    from ..load.kineto import load_rank_file
    from ..load.discover import RankFile
    from ..timing import phase

    try:
        import fsspec
    except ImportError:
        raise PerfreportError(f"{job.path}: remote paths need fsspec (pip install 'perfreport[dask]')") from None
    suffix = ".json.gz" if job.path.endswith(".gz") else ".json"
    with tempfile.TemporaryDirectory(prefix="perfreport-") as tmp:
        local = Path(tmp) / f"rank{suffix}"
        with phase("download"), fsspec.open(job.path, "rb") as src, open(local, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 22)
        checksum = file_checksum(local)
        trace = load_rank_file(RankFile(local, job.rank_hint, job.hint_source), limits)
        shutil.rmtree(tmp, ignore_errors=True)
    return dataclasses.replace(trace, meta=dataclasses.replace(trace.meta, path=job.path)), checksum


def run(jobs: Sequence[RankJob], options: AnalysisOptions, executor: Executor = Executor(),
        on_done: Callable[[RankDigest], None] | None = None, task: Callable = run_job) -> list:
    """Every job's result (``task``'s: :func:`run_job`, or :func:`save_job`), in the order of
    ``jobs``. ``on_done`` is called with each result as it arrives (progress)."""
    out: list = [None] * len(jobs)
    for i, result in stream(jobs, options, executor, task):
        if on_done is not None:
            on_done(result)
        out[i] = result
    return out


def stream(jobs: Sequence[RankJob], options: AnalysisOptions, executor: Executor = Executor(),
           task: Callable = run_job) -> Iterator[tuple[int, Any]]:
    """(job index, ``task``'s result) of every job, as each finishes, in no set order: the
    caller folds each in and lets it go (:class:`perfreport.running.assemble.Assembler`)."""
    limits = current_limits()  # the caller's, sent with every task
    if executor.kind == "dask":
        _meanwhile(executor)
        return _dask(jobs, options, executor, limits, task)
    return _local(jobs, options, executor, limits, task)


def _meanwhile(executor: Executor) -> None:
    """Start ``executor.while_waiting`` on a daemon thread (after the workers are forked: a fork
    never copies a half-done import), its time recorded as a phase beside the wait."""
    work = executor.while_waiting
    if work is None:
        return
    import threading

    from ..timing import current

    timings = current()

    def run() -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            work()
        except Exception:  # noqa: BLE001 - only a head start: whoever needs it later does it again
            return
        if timings is not None:
            timings.add("meanwhile (own thread)", time.perf_counter() - t0, time.thread_time() - c0, self_s=0.0)

    thread = threading.Thread(target=run, name="perfreport-meanwhile", daemon=True)
    fork_after(thread)  # it imports: a child forked meanwhile would inherit a held import lock
    thread.start()


def _while_the_head_start_loads(executor: Executor) -> None:
    """Do ``executor.while_waiting`` here, now, when the one rank's file is loading in a forked
    child (:mod:`perfreport.load.head_start`): this process would only wait for it. The 200 MB
    A100 rank's ``analyze`` (every format) imported matplotlib and compiled its templates there
    (0.235 s, after which it waited 0.003 s for its rank) instead of after the analyses."""
    from ..load.head_start import loading_in_a_child
    from ..timing import phase

    if executor.while_waiting is None or not loading_in_a_child():
        return
    with phase("meanwhile (while the head start loads)"):
        try:
            executor.while_waiting()
        except Exception:  # noqa: BLE001 - only a head start: whoever needs it later does it again
            pass


def _local(jobs: Sequence[RankJob], options: AnalysisOptions, executor: Executor, limits: Limits,
           task: Callable) -> Iterator[tuple[int, RankDigest]]:
    n = local_workers(jobs, executor.workers)
    if n <= 1 or len(jobs) == 1:
        from .digest import spare_core
        from .forked import cores

        if len(jobs) == 1:
            _while_the_head_start_loads(executor)
        for i, job in enumerate(jobs):
            with spare_core(len(jobs) == 1 and cores() > 1):  # one rank here: its analyses may use a second core
                result = guarded(task, job, options, limits=limits)
            yield i, result
        return
    with handoff_channel(forked=os.name == "posix") as channel:  # (closed once the workers are done)
        yield from _pooled(jobs, options, executor, limits, task, n, channel)


def _pooled(jobs: Sequence[RankJob], options: AnalysisOptions, executor: Executor, limits: Limits,
            task: Callable, n: int, channel: Channel | None) -> Iterator[tuple[int, RankDigest]]:
    """:func:`_local` with ``n`` worker processes; their results come back in memory files
    over ``channel`` (:mod:`perfreport.running.handoff`)."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")  # (the channel needs fork)
    imports_done()  # an earlier call's head-start thread may still be importing (see forked.fork)
    started = ctx.Array("q", len(jobs), lock=False)  # job index -> pid of the worker running it
    pool = ProcessPoolExecutor(max_workers=n, mp_context=ctx, initializer=_init_worker,
                               initargs=(os.getpid(), started, channel))
    processes: dict[int, Any] = {}  # every worker the pool started, to name a dead one and to stop them all
    pending = iter(enumerate(jobs))
    index = {}

    def submit(items):
        for i, job in items:
            future = pool.submit(_tracked, i, task, job, options, limits=limits)
            index[future] = i
            processes.update(getattr(pool, "_processes", None) or {})
            yield future

    running: set = set()
    interrupted = False
    try:  # from the first submit on: a signal that lands while the workers start still stops them
        # submit as slots free up, not all at once: a failing rank stops the rest promptly
        running = set(submit(_take(pending, n)))
        _meanwhile(executor)  # the workers are forked: this process is free until the first digest
        while running:
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                try:
                    result = received(future.result(), channel)
                except BrokenProcessPool:
                    error = _worker_died(jobs, [index[f] for f in finished | running], started, processes)
                    for process in processes.values():  # the pool only SIGTERMs them: a stopped one would stay
                        if process.exitcode is None:
                            process.kill()
                    raise error from None
                yield index.pop(future), result
                running |= set(submit(_take(pending, 1)))
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM (perfreport.running.lifecycle.Terminated): no worker goes on
        interrupted = True
        processes.update(getattr(pool, "_processes", None) or {})  # one started by a submit the signal cut short
        for process in processes.values():
            if process.exitcode is None:
                process.kill()
        raise
    finally:
        for future in running:  # an error or an early stop: nothing new starts; running ranks end
            future.cancel()
        # (never SIGKILL a worker on an ordinary error: one killed while sending its digest would
        # leave the pool's reader waiting for the rest of the message)
        pool.shutdown(wait=not interrupted, cancel_futures=True)


def local_workers(jobs: Sequence[RankJob], requested: int | None) -> int:
    """Local processes for ``jobs``: ``requested`` (``--workers``) capped at what
    :func:`worker_count` allows (ranks, cores, free memory), with a note when it is capped;
    without a request, 1 (this process) for a :func:`small_job`."""
    allowed = worker_count(jobs)
    if requested is None:
        return 1 if small_job(jobs) else allowed
    if requested > allowed:
        import sys

        sys.stderr.write(f"perfreport: note: --workers {requested:,} capped at {allowed} (at most one worker per "
                         f"rank, per core, and as many as free memory holds)\n")
    return min(requested, allowed)


RANK_FIXED_BYTES = 16 << 20
"""A rank's fixed cost, counted as JSON bytes: any rank, however small, takes ~0.1 CPU s to
analyse (the analyses' own overheads), about what 16 MB of a real trace's JSON adds."""
SMALL_JOB_BYTES = 17 << 20
"""At most this much work (:data:`RANK_FIXED_BYTES` per rank plus its JSON) beside a job's
largest rank is done in this process, one rank after the other: a second rank under 1 MB at
most. Past that, worker processes win on idle cores even though starting them costs 0.1-0.2
CPU s (forking, their imports, sending the digests back). Measured on this project's 2-core
machine, idle, median of 5 (wall s here -> with 2 workers; CPU s here -> with 2 workers):
``analyze --format json`` of 2 tiny ranks 0.55 -> 0.58 s, 0.63 -> 0.78 CPU s; ``compare`` of
two 0.3 MB ranks (json,md,junit) 0.80 -> 0.78 s, 0.93 -> 1.01 CPU s; but 2 ranks of
1.7 MB 0.79 -> 0.68 s, 2 of 9 MB 0.73 -> 0.63 s, the demo compare 2.74 -> 2.53 s: worker
processes, though each costs 0.03-0.2 CPU s more."""


def small_job(jobs: Sequence[RankJob]) -> bool:
    """Whether ``jobs`` are too little work to repay worker processes (:data:`SMALL_JOB_BYTES`):
    every rank's JSON beside the largest rank, each rank counted with its fixed cost. A stored
    rank with cached analyses (its digest is read, not made) counts its fixed cost only; remote
    ranks never run here (their downloads wait on the network, side by side in workers)."""
    if any("://" in j.path for j in jobs):
        return False
    work = sorted(RANK_FIXED_BYTES + (0 if j.cache is not None and j.digest_sha256 else j.json_bytes) for j in jobs)
    return sum(work[:-1]) <= SMALL_JOB_BYTES


def guarded(task: Callable, job: RankJob, options: AnalysisOptions, **kwargs):
    """``task(job, …)`` with any unexpected exception turned into one PerfreportError naming the
    rank's file: what a worker (local or Dask) sends back is always one clear line."""
    try:
        return task(job, options, **kwargs)
    except PerfreportError:
        raise
    except MemoryError:
        raise PerfreportError(f"{job.path}: not enough memory to load and analyse this rank; use fewer workers "
                              f"(--workers 1) or a machine with more memory") from None
    except RecursionError:
        raise PerfreportError(f"{job.path}: nested too deeply to analyse") from None
    except Exception as exc:  # a bug: still one line, with the file it happened on
        raise PerfreportError(f"{job.path}: internal error while analysing this rank: {type(exc).__name__}: "
                              f"{str(exc)[:300]} (please report it)") from None


_started: Any = None
"""In a local worker: the shared array of job index -> pid (see :func:`_tracked`)."""
_channel: Channel | None = None
"""In a local worker: where large results go (:mod:`perfreport.running.handoff`)."""


def _init_worker(parent_pid: int, started, channel: Channel | None) -> None:
    """A local worker's start: it dies with its parent (:func:`perfreport.running.lifecycle.worker_init`)
    and keeps the array in which it notes the jobs it runs and the result channel (inherited:
    neither can be sent)."""
    global _started, _channel
    from .lifecycle import worker_init

    worker_init(parent_pid)
    not_kept_in_a_worker()  # (a parent that reduced digests before kept its freed heap)
    from ..load.files import reuse_texts

    reuse_texts()  # rank after rank: their texts decompressed into one buffer
    _started, _channel = started, channel


def _tracked(i: int, task: Callable, job: RankJob, options: AnalysisOptions, **kwargs):
    """In a worker: note which process runs job ``i`` (to name it if it dies), run it, and hand
    its result back in a memory file (:func:`~.handoff.hand_off`)."""
    _started[i] = os.getpid()
    from ..storing.atomic import checkpoint

    checkpoint("worker.task")
    return hand_off(guarded(task, job, options, **kwargs), _channel, i)


def _worker_died(jobs: Sequence[RankJob], candidates: list[int], started, processes: dict) -> PerfreportError:
    """The error for a worker process that died (SIGKILL by the OOM killer or an operator, a
    crash): the rank it was running and how it ended."""
    from .lifecycle import signal_name

    import time

    by_pid = {pid: p for pid, p in processes.items()}
    deadline = time.monotonic() + 2.0
    while True:
        dead = []
        for i in candidates:
            process = by_pid.get(started[i])
            code = process.exitcode if process is not None else None
            if code is not None and code != -15:  # the pool SIGTERMs the others once one died
                dead.append((i, code))
        # the pool's own thread may be reaping the dead worker right now (its exit code is then
        # unknown for a moment): ask again briefly rather than lose which rank it was
        if dead or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    if not dead:
        return PerfreportError("a worker process died unexpectedly (killed, or out of memory); "
                               "retry with fewer workers (--workers 1)")
    i, code = dead[0]
    job = jobs[i]
    who = f"rank {job.rank_hint}'s worker" if job.rank_hint is not None else "the worker"
    why = " (killed: most often the out-of-memory killer; use fewer workers, --workers 1, or more memory)" \
        if code == -9 else ""
    return PerfreportError(f"{who} died ({signal_name(code)}) while analysing {job.path}{why}")


def _take(it: Iterator, n: int) -> list:
    out = []
    for item in it:
        out.append(item)
        if len(out) >= n:
            break
    return out


def _dask(jobs: Sequence[RankJob], options: AnalysisOptions, executor: Executor, limits: Limits,
          task: Callable) -> Iterator[tuple[int, RankDigest]]:
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise PerfreportError("--executor dask needs Dask: pip install 'perfreport[dask]'") from None
    try:
        client = Client(executor.scheduler, timeout="20s", set_as_default=False)
    except OSError as exc:
        raise PerfreportError(f"{executor.scheduler}: cannot reach the Dask scheduler ({exc})") from None
    try:
        futures = []
        with client.as_current():
            futures = [client.submit(guarded, task, job, options, limits=limits, pure=False,
                                     key=f"perfreport-rank-{i}-{os.getpid()}") for i, job in enumerate(jobs)]
            index = {f.key: i for i, f in enumerate(futures)}
            for future in as_completed(futures):
                i = index[future.key]
                yield i, _dask_result(future, jobs[i])
                future.release()  # the digest is ours now: the cluster may forget it
        futures = []
    finally:
        if futures:  # an error, Ctrl-C or SIGTERM: the cluster stops working for us
            try:
                client.cancel(futures, force=True)
            except Exception:  # noqa: BLE001 - a scheduler already gone: nothing left to cancel
                pass
        client.close()


def _dask_result(future, job: RankJob):
    """A Dask task's result; a worker lost while running it (``KilledWorker``: it died, e.g. by
    the OOM killer, as many times as the scheduler allows) or a task the cluster could not run
    is one PerfreportError naming the rank's file."""
    try:
        return future.result()
    except PerfreportError:
        raise
    except Exception as exc:  # noqa: BLE001 - distributed's own errors: KilledWorker, CancelledError …
        who = f"rank {job.rank_hint}'s task" if job.rank_hint is not None else "the task"
        raise PerfreportError(f"{who} failed on the Dask cluster while analysing {job.path}: {type(exc).__name__}"
                              f"{': ' + str(exc)[:200] if str(exc) else ''} (a worker died: out of memory?)") from None


def worker_count(jobs: Sequence[RankJob]) -> int:
    """Local processes for ``jobs``: see :func:`perfreport.load.memory.worker_count`."""
    from ..load.memory import worker_count as by_cores_and_memory

    return by_cores_and_memory([j.json_bytes for j in jobs])


def peak_rss() -> int:
    """This process's peak RSS in bytes (``VmHWM``; 0 where /proc is not there)."""
    from ..load.memory import proc_bytes

    return proc_bytes("/proc/self/status", "VmHWM") or 0
