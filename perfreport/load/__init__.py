"""Load Kineto traces: files -> :class:`~perfreport.model.TraceSet` (ranks in parallel processes)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import TraceError
from .discover import discover

if TYPE_CHECKING:
    from ..model import TraceSet

log = logging.getLogger(__name__)


def load(source: str | Path | Mapping[int, str | Path], *, workers: int | None = None) -> TraceSet:
    """Load every rank file of ``source`` (a folder, a file, or a {rank: path} mapping).

    Ranks load in parallel processes, as many as cores and free memory allow (``workers``
    caps it). Raises TraceError for unusable input, including two files claiming one rank.
    """
    from ..model import TraceSet  # here, not above: importing the package loads no numpy (perfreport.__main__)
    from .files import uncompressed_size
    from .kineto import load_rank_file
    from .memory import worker_count

    files = discover(source)
    n_workers = workers or worker_count([uncompressed_size(f.path) for f in files])
    if n_workers <= 1 or len(files) == 1:
        traces = [load_rank_file(f) for f in files]
    else:
        import multiprocessing  # only for several ranks: a single rank stays in one lean process
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        with ProcessPoolExecutor(max_workers=n_workers, mp_context=ctx) as pool:
            traces = list(pool.map(load_rank_file, files, chunksize=1))
    by_rank = one_per_rank(traces)
    return TraceSet(ranks=by_rank, source=str(source if not isinstance(source, Mapping) else "<mapping>"))


def one_per_rank(ranks: Iterable, warn: bool = True) -> dict[int, Any]:
    """{rank: item} of loaded ranks (anything with a ``meta``: traces, digests, a baseline's
    payloads); TraceError naming both files when two claim one rank. ``warn``: log a rank that
    fell back to 0 and a rank with dropped events."""
    by_rank: dict[int, Any] = {}
    for item in ranks:
        claim(by_rank, item, warn)
    return by_rank


def claim(by_rank: dict[int, Any], item: Any, warn: bool = True) -> None:
    """Add ``item`` to ``by_rank`` under its rank (see :func:`one_per_rank`)."""
    meta = item.meta
    other = by_rank.get(meta.rank)
    if other is not None:
        raise TraceError(meta.path, f"claims rank {meta.rank} ({meta.rank_source}), as does {other.meta.path} "
                                    f"({other.meta.rank_source}); pass an explicit {{rank: path}} mapping")
    if warn and meta.rank_source == "default":
        log.warning("%s: no rank in distributedInfo or the file name; using rank 0", meta.path)
    if warn and meta.dropped:
        log.warning("%s: %s", meta.path, meta.dropped_note)
    if warn and meta.step_restarts:
        log.warning("%s: %s", meta.path, meta.step_restarts)
    by_rank[meta.rank] = item


__all__ = ["load", "discover", "one_per_rank", "claim"]
