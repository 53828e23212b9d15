"""Python's cyclic garbage collector in the command's processes: what it need not look at again.

The collector's full passes walk every container object the process holds. After its imports a
command's process holds ~60,000 (pandas, numpy, the analyses), none of which will ever be
garbage, and every pass the command's own objects trigger walks them again; a forked child that
collects also writes to each object's header, copying the pages it shares with its parent.
:func:`imports` moves what the imports made out of the collector's reach (``gc.freeze``)
once they are done; what the command makes afterwards is collected as before. Measured with
``gc.callbacks`` on the hta_sampled-grown 1 GB ``compare`` (2026-11-29): the parent's passes
took 241 ms (three full ones: 13, 81 and 52 ms), 74 ms with the imports frozen (14 and 12 ms).

:func:`imports` and :func:`collect_no_more` act only in the console script's process and the
children it forks (:func:`own_the_collector`): a program that imports perfreport (a notebook,
the tests) keeps its collector as it is. Drawing figures pauses the collector in any process
(:func:`paused`), and the forked children that draw or lay out a page stop it
(:func:`no_collection`): they exit when done.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

_owned = False


def own_the_collector() -> None:
    """Let :func:`imports` and :func:`collect_no_more` act in this process (the console
    script's, before anything imports pandas)."""
    global _owned
    _owned = True


@contextmanager
def imports() -> Iterator[None]:
    """The command's imports: without the collector's passes inside the block (they make
    ~60,000 objects and no garbage, and a full pass while they did took 20-24 ms of a 200 MB
    ``analyze``), then what they made is left out of every later pass (``gc.freeze``, see the
    module's doc). In a process of :func:`own_the_collector` only; elsewhere the block changes
    nothing. Objects alive at the block's end that later become cyclic garbage are never freed:
    the block holds imports, not data."""
    if not _owned:
        yield
        return
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_on:
            gc.enable()


def collect_no_more() -> None:
    """Stop the collector for the rest of the command, once its results are made and only its
    reports are left to write (in a process of :func:`own_the_collector` only: the process ends
    after them). Building the report's document, rows, figures and files makes short-lived
    objects by the hundred thousand, and the passes they trigger walk everything the command
    holds: the parent's passes of a 16 x 50 MB ``compare`` took 287 ms, 118 ms of them in its
    last quarter second. The command: 6.12-6.30 -> 5.80-6.04 s (3 alternating pairs), the
    parent's peak 207 -> 211-213 MB; a compare of two 200 MB ranks of 35,000 steps: 3.26-3.48 ->
    3.27-3.34 s, its peak 306-318 -> 308-320 MB."""
    if _owned:
        gc.disable()


def no_collection() -> None:
    """Stop the collector in a short-lived forked child that only lays out a page or draws
    figures, then exits. The PDF's layout: its passes took 0.05-0.10 s of the 0.55-0.60 s of a
    1 GB ``compare``'s PDF (6 pages; 3 runs each), 0.49-0.50 s without them, for 20-45 MB more
    at the child's peak, given back when it exits (the child's passes in that ``compare``: 109 ms
    -> 23 ms, those left before the layout: WeasyPrint's import). Figures: see :func:`paused`."""
    gc.disable()


@contextmanager
def paused() -> Iterator[None]:
    """The collector off inside the block, as it was after. matplotlib makes thousands of
    short-lived objects per figure (artists, transforms, paths), and the passes they trigger
    walk everything else the process holds: the 14 figures of a 16 x 50 MB ``compare`` took
    1.41-1.47 s with them and 1.09-1.14 s without (2 runs each, warm), for 17 MB more at the
    end, which the collector frees when it runs again (matplotlib's figures are cycles)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
