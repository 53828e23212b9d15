"""How much memory loading a rank needs, how much is free, and the check between the two."""

from __future__ import annotations

import os
from pathlib import Path

from ..load.files import uncompressed_size
from ..errors import TraceError
from ..limits import Limits, how_to_raise
from ..units import format_bytes

PEAK_PER_JSON_BYTE = 1.5
"""Memory one rank's load and analyses take at their peak, per byte of its JSON text: the
anonymous memory (proportional set size) of the whole process tree, sampled every 20 ms, on the
2-core VM (2026-11-30): ``analyze`` of the V100-grown 1 GB rank 0.98 x, of its ``.json.gz``
1.17 x (the decompressed text is the caller's memory until scanned); ``compare`` of two such
ranks 0.78 x a side (1.07 x gzipped), of the triton-grown 1 GB pair (345,319 steps a side,
the parent's digests the largest) 0.93 x. 1.5 leaves more than a quarter to spare over the worst. A
single rank's ``analyze`` may fork a child for half its analyses on a spare core, which grows
the tree further (HTA's trace_compare tiny grown to 1 GB: 1.57 x); it is forked only where free
memory holds that too (:data:`perfreport.running.halves.CHILD_ROOM`). At
2.0 (the budget until then) a compare of two 5 GB ranks ran its sides one after the
other on a machine with 21 GB free (31.6 s); two workers took 20.1-21.2 s, their tree 7.4 GB."""


def proc_bytes(path: str, field: str) -> int | None:
    """A ``kB`` field of a /proc file in bytes (``MemAvailable`` of /proc/meminfo, ``VmHWM`` of
    /proc/self/status); None where the file or the field is not there."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def available_memory() -> int:
    """Bytes the kernel says can be allocated without swapping (MemAvailable)."""
    found = proc_bytes("/proc/meminfo", "MemAvailable")
    return found if found is not None else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def worker_count(json_bytes: list[int]) -> int:
    """Processes to load ranks of these JSON sizes: at most one per core and per rank, and few
    enough that their peaks (:data:`PEAK_PER_JSON_BYTE` × the largest) fit in free memory."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    per_worker = max(max(json_bytes, default=0) * PEAK_PER_JSON_BYTE, 1)
    return max(1, min(cores, len(json_bytes), int(available_memory() * 0.8 // per_worker)))


def check_memory(path: Path, limits: Limits) -> None:
    """Refuse (TraceError) to load a rank whose estimated peak exceeds the free memory: a clear
    line now instead of the OS killing the process half-way (no message, lost work)."""
    if not limits.memory_check:
        return
    try:  # a gzip trailer can claim anything (truncated, crafted): never more than the limit
        size = path.stat().st_size
        json_bytes = min(uncompressed_size(path), max(size, limits.decompressed_limit(size)))
    except OSError:
        return  # unreadable: reading it says why
    need = int(json_bytes * PEAK_PER_JSON_BYTE)
    free = available_memory()
    if need > free:
        raise TraceError(path, f"loading it needs about {format_bytes(need)} of memory ({format_bytes(json_bytes)} "
                               f"of JSON) but only {format_bytes(free)} is free; use fewer workers (--workers 1), "
                               f"the Dask executor (--executor dask) on machines with more memory, or "
                               f"{how_to_raise('memory_check', 'off')} to try anyway")
