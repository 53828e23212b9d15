"""glibc's heap in a process that loads and analyses ranks: what it keeps, what it gives back.

A rank's analyses make and drop temporaries the size of its columns over and over (a mask, an
order, a gathered column: 8 bytes per event each). glibc hands a block past its mmap threshold
(dynamic, at most 32 MiB) straight back to the kernel when freed, and trims free memory off the
top of its heap past twice that, so the next temporary of the same size page-faults fresh,
zeroed memory: on the 1 GB A100-grown rank (3.48 M events), 77,000-88,000 page faults and
0.30-0.40 s of the kernel's time in a compare worker's analyses (6 runs).
:func:`reusing_freed_pages` keeps such blocks in the heap while a rank is analysed, so they are
reused in place (60,000-69,000 faults, mostly the analyses' own growth; 0.22-0.31 s, one run
0.48 s), and gives everything back afterwards.

The thresholds are set only in the console script's process and the workers it forks
(:func:`own_the_heap`): a program that imports perfreport (a notebook, the HTA-compatible API)
keeps glibc's own rules, and only gets its freed heap back after each rank. None of this
changes a result; where the C library is not glibc, every function here does nothing.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator
from contextlib import contextmanager

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8
"""``mallopt`` parameters (glibc's ``malloc.h``)."""

GLIBC_DEFAULT = 128 << 10
"""glibc's initial mmap and trim thresholds (bytes)."""
KEEP_FROM_EVENTS = 1 << 18
"""Ranks of this many events and more (a 2 MB column of 8-byte values) have the thresholds of
:func:`reusing_freed_pages` set (see there)."""


def _libc():
    """The C library when it is glibc (``gnu_get_libc_version`` is glibc's own), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - only glibc has it
        return libc
    except (OSError, AttributeError):  # musl, or no dynamic loader to ask
        return None


_LIBC = _libc()
_owned = False


def own_the_heap() -> None:
    """Let :func:`reusing_freed_pages` set glibc's thresholds in this process (the console
    script's; its forked workers inherit it), and keep numpy's arrays on ordinary pages
    (:func:`plain_pages`). ``mallopt`` ends glibc's dynamic rule for the rest of the process,
    which is the command's to decide, not a library's."""
    global _owned
    _owned = True
    plain_pages()


def plain_pages() -> bool:
    """Stop numpy asking for transparent huge pages under its arrays of 4 MB or more (its
    default on Linux); whether the switch was there. Where memory is short of free 2 MB blocks
    (the page cache full, as after reading traces of many GB), the kernel reclaims and compacts
    at the first touch of each huge page: one digest of HTA's trace_compare tiny grown to 1 GB
    took 3.44-3.85 s with them (0.86-1.25 s in the kernel) against 2.85-2.96 s without (0.29-0.30
    s), free memory 4-5 GB of 24. With most memory free they saved 0.1-0.3 s of such a digest;
    a run must not depend on it. The loader's own columns were measured the same way (its scan:
    1.19-1.56 against 0.87-0.98 s), and its decode runs on plain pages in any process
    (:func:`perfreport.load.kineto._plain_pages`)."""
    switch = hugepage_switch()
    if switch is None:
        return False
    switch(False)
    return True


def hugepage_switch():
    """numpy's (private) ``_set_madvise_hugepage(enabled) -> previous``, None where it has none."""
    import numpy as np

    return getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)


def one_arena() -> None:
    """Keep every thread's allocations in glibc's main arena. A thread of its own otherwise gets
    an arena of its own, and the load's columns, built there, left ~11 MB more resident at the
    peak of a 200 MB rank (measured: 264 MB with the thread's arena, 251 MB without; the same
    load on the main thread, 252 MB). The threads of a process that loads on a thread (the
    load, the checksum, the imports) allocate in turns, not in parallel, so one arena costs
    them no contention."""
    if _LIBC is not None:
        _LIBC.mallopt(M_ARENA_MAX, 1)


def give_back() -> None:
    """Give the freed heap back to the system (before the next rank: glibc keeps ~15 % of a
    loaded trace in its arenas otherwise)."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


@contextmanager
def reusing_freed_pages(n_events: int, more_ranks: bool = False) -> Iterator[None]:
    """Inside the block, freed blocks up to :data:`KEPT_COLUMNS` columns of ``n_events`` (8 bytes
    per event each) stay in the heap, and twice as much free memory stays on its top, so the
    analyses' temporaries reuse pages already there (see the module's doc); after it, the freed heap is
    given back (:func:`give_back`, for every rank: a worker's next rank starts from a trimmed
    heap, 141-146 MB at the peak of a worker of 16 ranks x 50 MB, 171 MB without).

    The thresholds are set only for a rank of :data:`KEEP_FROM_EVENTS` events or more. glibc's
    dynamic rule keeps a freed block in the heap once a block that large was unmapped, up to
    32 MiB, so it served ranks below 2.1 M events (the first bound) as long as the decode freed
    an int64 copy of a column early; since the decode gathers without one (the C extensions'
    take_codes and present_ids), the V100-grown 200 MB rank's decode (1 M events) made 16,300
    page faults on glibc's rule and 10,600 with the thresholds set (0.055 -> 0.045 CPU s; the A100
    and MI250-grown 200 MB ranks' 0.029-0.033 -> 0.026-0.028 s; peaks within 6 MB). Setting them
    ends that rule for the ranks a worker loads next, which the 16 ranks x 50 MB (170,000
    events each) still keep (2.93-3.26 s against 2.87-3.13 s when they were set for every rank).
    Where they are set, glibc's initial thresholds are set again after the block (fixed:
    ``mallopt`` ends its dynamic rule), so the next rank loads much as the first did: its large
    blocks mapped, not kept.

    For the analyses of a loaded rank and its decode (which sets the thresholds early:
    :func:`keep_freed_pages`), not for its scan: the scanner's columns grow by ``realloc``, which
    moves a mapped block without copying it, and a load inside the block peaked 75 MB higher on
    the 1 GB rank (726-730 MB against 651). The peak of the analyses: 857-859 MB against 856-858
    on the 1 GB rank.

    ``more_ranks``: the process goes on to another rank (a local worker). A small rank (below
    :data:`KEEP_FOR_NEXT_RANK` events) then keeps its freed heap for the next one, whose
    analyses reuse its pages instead of faulting fresh ones: 16 ranks x 50 MB (170,000 events
    each) in 2.06-2.16 s against 2.19-2.21 s (6 alternating pairs), the kernel's time 0.53-0.58
    s against 0.69-0.81 s, for a worker peak of 155-164 MB against 139-142 MB. A larger rank
    gives it back: 4 ranks x 200 MB (the V100-grown, 1 M events) gained 3 % for +6 MB, and
    that worker's peak (247-250 MB) is already near 1.3 x its rank's JSON."""
    tune = keep_freed_pages(n_events)
    try:
        yield
    finally:
        if tune:
            _LIBC.mallopt(M_MMAP_THRESHOLD, GLIBC_DEFAULT)
            _LIBC.mallopt(M_TRIM_THRESHOLD, GLIBC_DEFAULT)
        if not (more_ranks and n_events < KEEP_FOR_NEXT_RANK):
            give_back()


def keep_freed_pages(n_events: int) -> bool:
    """Set the thresholds of :func:`reusing_freed_pages` for a rank of ``n_events`` now, and leave
    them set: whether they were (only in the console script's processes, for a rank of
    :data:`KEEP_FROM_EVENTS` events or more). The decode of a loaded rank calls it: its temporaries (a gather's int64 indices, a
    column before it is narrowed to int32: 8 bytes per event each) are then reused from the heap
    instead of mapped fresh and unmapped one after the other, and what the decode frees is there
    for the analyses that follow, in the block that resets the thresholds after them. The V100-
    grown 1 GB rank (5.1 M events): decode 0.357-0.381 -> 0.272-0.279 s, ``analyze`` 3.11-3.34 ->
    2.84-2.91 s (3 alternating pairs each, the kernel's time 1.14-1.34 -> 0.86-0.99 s), the
    peak unchanged (760-769 against 765 MB); the A100 1 GB rank's decode 0.176-0.192 -> 0.156-0.168
    s. Not for the scan (see :func:`reusing_freed_pages`)."""
    column = 8 * max(n_events, 0)
    tune = _LIBC is not None and _owned and n_events >= KEEP_FROM_EVENTS
    if tune:
        _LIBC.mallopt(M_MMAP_THRESHOLD, KEPT_COLUMNS * column)
        _LIBC.mallopt(M_TRIM_THRESHOLD, 2 * KEPT_COLUMNS * column)
    return tune


KEPT_COLUMNS = 8
"""Blocks up to this many 8-byte columns of a rank stay in the heap when freed (and twice as
much free memory on its top): the analyses' largest temporaries (a sort of every interval's
edges, a step's parts) are several columns long, and at two columns (the first setting) each
was mapped fresh and unmapped again. One digest of HTA's trace_compare tiny grown to 1 GB (2.9 M
events): 84,000 -> 52,000-53,000 page faults; the triton example's (4.5 M): 67,000 -> 47,000;
the V100-grown rank's 57,000-59,000 -> 50,000-51,000, the A100's 42,000 -> 36,000-37,000; their
peaks 15 MB lower to 29 MB higher (1,110-1,194 MB at most, 2 runs each). Their `compare`s, alternating with two columns:
tiny 6.93-7.18 -> 6.40-6.51 s (4 pairs), the others within the noise (triton 6.10-6.84 against
6.12-7.16, A100 3.71-3.77 against 3.65-3.89)."""


def keep_freed_heap() -> None:
    """From now on keep freed blocks of up to :data:`KEPT_IN_THE_REDUCE` bytes in this process's
    heap, and twice as much free memory on its top (the console script's process only: see
    :func:`own_the_heap`). For the parent of a run whose ranks ran elsewhere, once their
    digests arrive (its workers are forked by then and keep their own rules): folding the
    digests, the cross-rank analyses, the gate's inputs and the reports make and drop arrays of
    a digest's size one after the other, each mapped fresh and unmapped again under glibc's
    rule. The triton-grown 1 GB ``compare`` (345,319 steps a side), with and without it (3
    alternating pairs): the gate's inputs 0.67-0.79 -> 0.53-0.54 s for the two sides (191,000 ->
    90,000 page faults), the command 6.47-7.40 -> 6.10-6.18 s, the parent's peak 839-847 -> 882-883
    MB. Never reset: the process ends after its reports."""
    global _kept
    if _LIBC is not None and _owned:
        _LIBC.mallopt(M_MMAP_THRESHOLD, KEPT_IN_THE_REDUCE)
        _LIBC.mallopt(M_TRIM_THRESHOLD, 2 * KEPT_IN_THE_REDUCE)
        _kept = True


def not_kept_in_a_worker() -> None:
    """In a worker forked after :func:`keep_freed_heap` (a compare that analyses its ranks again
    to list their calls): glibc's initial thresholds, as a worker's later ranks have them, so that
    its scan's columns are mapped, not grown in the heap (see :func:`reusing_freed_pages`)."""
    global _kept
    if _kept:
        _LIBC.mallopt(M_MMAP_THRESHOLD, GLIBC_DEFAULT)
        _LIBC.mallopt(M_TRIM_THRESHOLD, GLIBC_DEFAULT)
        _kept = False


_kept = False
KEPT_IN_THE_REDUCE = 256 << 20
"""The largest freed block :func:`keep_freed_heap` keeps for reuse (bytes)."""


KEEP_FOR_NEXT_RANK = 500_000
"""Events below which a rank's freed heap stays for the process's next rank (see
:func:`reusing_freed_pages`): ranks of up to ~100-150 MB of JSON, where the costs paid per rank
count most; the ranks of 200 MB and more, whose peak is held to 1.3 x their JSON, give it back."""
