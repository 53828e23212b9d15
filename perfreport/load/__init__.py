"""Load Kineto traces: files -> :class:`~perfreport.model.TraceSet` (ranks in parallel processes)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from .._io import uncompressed_size
from ..errors import TraceError
from ..model import RankTrace, TraceSet
from .discover import RankFile, discover
from .kineto import load_rank_file
from .memory import PEAK_PER_JSON_BYTE
from .memory import available_memory as _available_memory

log = logging.getLogger(__name__)


def load(source: str | Path | Mapping[int, str | Path], *, workers: int | None = None) -> TraceSet:
    """Load every rank file of ``source`` (a folder, a file, or a {rank: path} mapping).

    Ranks load in parallel processes, as many as cores and free memory allow (``workers``
    caps it). Raises TraceError for unusable input, including two files claiming one rank.
    """
    files = discover(source)
    n_workers = workers or _worker_count(files)
    if n_workers <= 1 or len(files) == 1:
        traces = [load_rank_file(f) for f in files]
    else:
        import multiprocessing  # only for several ranks: a single rank stays in one lean process
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        with ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx) as pool:
            traces = list(pool.map(load_rank_file, files, chunksize=1))
    by_rank: dict[int, RankTrace] = {}
    for trace in traces:
        other = by_rank.get(trace.rank)
        if other is not None:
            raise TraceError(
                trace.meta.path,
                f"claims rank {trace.rank} ({trace.meta.rank_source}), as does {other.meta.path} "
                f"({other.meta.rank_source}); pass an explicit {{rank: path}} mapping",
            )
        if trace.meta.rank_source == "default":
            log.warning("%s: no rank in distributedInfo or the file name; using rank 0", trace.meta.path)
        if trace.meta.dropped:
            log.warning("%s: %s", trace.meta.path, trace.meta.dropped_note)
        by_rank[trace.rank] = trace
    return TraceSet(ranks=by_rank, source=str(source if not isinstance(source, Mapping) else "<mapping>"))


def _worker_count(files: list[RankFile]) -> int:
    """Processes to use: at most one per core, and few enough that their peaks fit in memory."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    largest = max(uncompressed_size(f.path) for f in files)
    per_worker = max(largest * PEAK_PER_JSON_BYTE, 1)
    by_memory = int(_available_memory() * 0.8 // per_worker)
    return max(1, min(cores, len(files), by_memory))


__all__ = ["load", "discover", "load_rank_file"]
