"""Where ranks are loaded and analysed: here, in local worker processes, or on a Dask cluster.

Every executor runs the same task per rank, :func:`~perfreport.running.rank_task.run_job` (load
the rank, analyse it alone, send back its :class:`~perfreport.running.digest.RankDigest`), and
hands the digests to the caller as they arrive (:func:`stream`); the cross-rank reduce
(:class:`perfreport.running.assemble.Assembler`) always runs in the calling process. Only
digests travel, never event tables.

* ``local`` (default): worker processes, as many as cores and free memory allow (a worker's
  peak is ~2 x the JSON of the rank it loads), one rank per task; one rank, one worker, or ranks
  too small to repay starting workers (:func:`small_job`) run in this process.
* ``dask``: tasks on an existing ``distributed`` cluster (``--scheduler tcp://HOST:PORT``); the
  workers must see the trace paths (shared storage, or ``s3://``, ``gs://``... through fsspec).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .digest import AnalysisOptions, RankDigest
from .forked import fork_after, imports_done
from .handoff import Channel, hand_off, handoff_channel, received
from .heap import not_kept_in_a_worker
from .rank_task import RankJob, in_a_worker, run_job
from ..errors import PerfreportError
from ..limits import Limits
from ..limits import current as current_limits

EXECUTORS = ("local", "dask")


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


def run(jobs: Sequence[RankJob], options: AnalysisOptions, executor: Executor = Executor(),
        on_done: Callable[[RankDigest], None] | None = None, task: Callable = run_job) -> list:
    """Every job's result (``task``'s: :func:`~.rank_task.run_job`, or :func:`~.rank_task.save_job`),
    in the order of ``jobs``. ``on_done`` is called with each result as it arrives (progress)."""
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


MEANWHILE_NICE = 10
"""How much the thread of :func:`_meanwhile` yields the CPU to the workers (its nice value; Linux
gives each thread its own). It imports the figures' and templates' modules while the ranks load,
and at the normal priority it took a core's share from workers that had all the cores: each
side of a 200 MB ``compare`` loaded in 0.19-0.33 s of wall time for 0.13-0.14 s of CPU, the
triton-grown 1 GB rank's in 1.03-1.31 s. At 10 (3 alternating pairs each): that rank's loads
0.95-1.09 s, the command 5.27-5.35 s against 5.28-5.55; the A100-grown 1 GB rank's loads
0.91-0.95 s against 0.87-1.13, the command 3.51-3.58 s against 3.42-3.79; the demo's
quick start unchanged (1.54-1.75 s against 1.55-1.63, 4 pairs): its work still ends long before
the reports need it, on cores the workers leave idle."""


def _meanwhile(executor: Executor) -> None:
    """Start ``executor.while_waiting`` on a daemon thread (after the workers are forked: a fork
    never copies a half-done import), its time recorded as a phase beside the wait, at a lower
    priority than the workers' (:data:`MEANWHILE_NICE`)."""
    work = executor.while_waiting
    if work is None:
        return
    import threading

    from ..timing import current

    timings = current()

    def run() -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), MEANWHILE_NICE)  # this thread only, on Linux
        except (AttributeError, OSError):
            pass
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
        from .halves import spare_core
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
    in_a_worker()
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
