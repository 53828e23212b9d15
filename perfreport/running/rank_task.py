"""One rank's task, wherever it runs (this process, a local worker, a Dask worker): load the
rank (its trace file, or a stored baseline's verified columns or cached analyses), analyse it
alone and return its :class:`~perfreport.running.digest.RankDigest` (:func:`run_job`), or what
a stored baseline keeps of it (:func:`save_job`). :mod:`perfreport.running.executor` decides
where the tasks run and gathers their results."""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from .digest import AnalysisOptions, RankDigest, digest
from .heap import reusing_freed_pages
from ..errors import PerfreportError
from ..limits import Limits
from ..limits import current as current_limits
from ..model import RankTrace

_more_ranks = False
"""This process goes on to other ranks (a local worker): a small rank's freed heap stays for the
next one (:func:`perfreport.running.heap.reusing_freed_pages`)."""


def in_a_worker() -> None:
    """Note that this process is a local worker, which runs rank after rank."""
    global _more_ranks
    _more_ranks = True


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
    result.timings, result.pid, result.host = timings.records(), os.getpid(), socket.gethostname()
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
    with reusing_freed_pages(trace.n_events, more_ranks=_more_ranks):
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
    """A trace on object storage: copied to a local temporary file by fsspec, loaded and hashed
    as a local file is (:func:`~perfreport.load.head_start.load_hashed`: a plain JSON file by
    its own scan, not read a second time), removed."""
    import shutil
    import tempfile

    from ..load.discover import RankFile
    from ..load.head_start import load_hashed
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
        trace, checksum = load_hashed(RankFile(local, job.rank_hint, job.hint_source), limits)
        shutil.rmtree(tmp, ignore_errors=True)
    return dataclasses.replace(trace, meta=dataclasses.replace(trace.meta, path=job.path)), checksum


def peak_rss() -> int:
    """This process's peak RSS in bytes (``VmHWM``; 0 where /proc is not there)."""
    from ..load.memory import proc_bytes

    return proc_bytes("/proc/self/status", "VmHWM") or 0
