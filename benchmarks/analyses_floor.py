#!/usr/bin/env python3
"""Each per-rank analysis against a plain numpy pass over the event columns it reads.

    python benchmarks/analyses_floor.py TRACE [--repeat N] [--gate]

The analyses of one rank are passes over columns already in memory, so the floor for each is
the time numpy takes to read those columns once. This loads one rank, then:

1. runs :func:`perfreport.running.digest.digest` once on a copy of the rank that records which event
   columns (``ts``, ``dur``, ``name`` …) each analysis phase reads, shared views included (a
   shared view is charged to the phase that computes it first, as ``-v`` charges it);
2. times the real digest (fresh memo) with the phase timer: each phase's *self* CPU seconds
   (``analysis:<name>``, ``memo:<kind>``: the thread's CPU, not wall time, so other jobs on a
   shared machine disturb it less);
3. times, for each phase, one plain numpy pass over its columns (``np.add.reduce`` of each) as
   the floor, and prints CPU s, floor s and their ratio, the worst ratios first.

Each of ``--repeat`` passes runs in this process on a fresh copy of the memo; the fastest
counts per phase. ``--gate`` adds the gate's per-rank inputs (what ``compare`` computes).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
COLUMNS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "stream", "correlation", "external_id", "flow_id",
           "device", "linked", "iteration")


def spy_columns(trace, options) -> dict[str, set[str]]:
    """Per phase (``analysis:…`` / ``memo:…``): the event columns read while it was the
    innermost open phase."""
    from perfreport import timing
    from perfreport.running.digest import digest
    from perfreport.model import RankTrace

    seen: dict[str, set[str]] = {}
    timings = timing.Timings()

    class Spy(RankTrace):
        __slots__ = ()

        def __getattribute__(self, name):
            if name in COLUMNS and timings._stack:
                seen.setdefault(timings._stack[-1].name, set()).add(name)
            return object.__getattribute__(self, name)

    fields = {f.name: getattr(trace, f.name) for f in dataclasses.fields(RankTrace) if f.name != "_memo"}
    with timing.recording(timings):
        digest(Spy(**fields), options)
    return seen


def self_cpu(trace, options, repeat: int) -> dict[str, float]:
    """Fastest self CPU seconds of each phase over ``repeat`` digests (fresh memo each)."""
    from perfreport import timing
    from perfreport.running.digest import digest

    best: dict[str, float] = {}
    for _ in range(repeat):
        trace._memo.clear()
        timings = CpuTimings()
        with timing.recording(timings):
            digest(trace, options)
        for name, seconds in timings.self_cpu.items():
            best[name] = min(best.get(name, np.inf), seconds)
    return best


def floor_s(trace, columns: set[str], repeat: int) -> float:
    """Fastest CPU seconds of one ``np.add.reduce`` over each of ``columns``."""
    arrays = [getattr(trace, c) for c in sorted(columns)]
    best = np.inf
    for _ in range(repeat):
        t0 = time.thread_time()
        for a in arrays:
            np.add.reduce(a)
        best = min(best, time.thread_time() - t0)
    return best if arrays else 0.0


def _cpu_timings_class():
    from perfreport import timing

    class _CpuTimings(timing.Timings):
        """Timings that also keep each phase's self CPU (CPU minus its nested phases' CPU)."""

        def __init__(self):
            super().__init__()
            self.self_cpu: dict[str, float] = {}
            self._child_cpu: list[float] = []

        def phase(self, name):
            from contextlib import contextmanager

            @contextmanager
            def block():
                self._child_cpu.append(0.0)
                c0 = time.thread_time()
                with timing.Timings.phase(self, name):
                    yield
                cpu = time.thread_time() - c0
                children = self._child_cpu.pop()
                self.self_cpu[name] = self.self_cpu.get(name, 0.0) + cpu - children
                if self._child_cpu:
                    self._child_cpu[-1] += cpu

            return block()

    return _CpuTimings


CpuTimings = None


def main(argv: list[str] | None = None) -> int:
    global CpuTimings
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", type=Path, help="one rank's trace file")
    p.add_argument("--repeat", type=int, default=3, help="digests timed; the fastest counts (default %(default)s)")
    p.add_argument("--gate", action="store_true", help="also the gate's per-rank inputs (compare)")
    p.add_argument("--top", type=int, default=30, help="phases listed (default %(default)s)")
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from perfreport.running.digest import AnalysisOptions
    from perfreport.load import load

    CpuTimings = _cpu_timings_class()
    trace = next(iter(load(args.trace, workers=1)))
    options = AnalysisOptions(gate=args.gate, attribution=args.gate)
    columns = spy_columns(trace, options)
    cpu = self_cpu(trace, options, args.repeat)
    rows = [(name, s, floor_s(trace, columns.get(name, set()), args.repeat), sorted(columns.get(name, set())))
            for name, s in cpu.items()]
    every = set().union(*columns.values()) if columns else set()
    total, total_floor = sum(r[1] for r in rows), floor_s(trace, every, args.repeat)
    print(f"\n{args.trace.name}: {trace.n_events:,} events, {args.repeat} digests{' with the gate inputs' * args.gate}, "
          f"measured {time.strftime('%Y-%m-%d %H:%M')}, 1-min load average {os.getloadavg()[0]:.1f}\n")
    print("| phase | self CPU s | numpy pass over its columns s | ratio | columns |")
    print("|---|---:|---:|---:|---|")
    for name, s, f, cols in sorted(rows, key=lambda r: -r[1])[:args.top]:
        ratio = f"{s / f:.0f}×" if f > 0 else "–"
        print(f"| {name} | {s:.3f} | {f:.4f} | {ratio} | {', '.join(cols)} |")
    print(f"| **all phases** | **{total:.3f}** | {total_floor:.4f} (each column once) | "
          f"{total / total_floor:.0f}× | {len(every)} columns |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
