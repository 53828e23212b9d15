#!/usr/bin/env python3
"""Time every registered analysis against the load of the same trace.

    python benchmarks/analyses.py [TRACE] [--repeat N] [--workdir DIR] [--keep]

Loading is meant to dominate ``perfreport analyze``: the analyses work on columns already in
memory, so all of them together should take less time than the load. This prints, for one
trace, the load time and each analysis's time, so that a slow new analysis shows up by name.

The analyses are taken from ``perfreport.analyses.ANALYSES`` at run time, so the list grows
with the package. Without TRACE, the 200 MB trace of benchmarks/load.py is generated (or reused
from ``--workdir``) and used.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_SIZE_MB = 200

sys.path.insert(0, str(HERE))
import load as bench_load  # noqa: E402  (benchmarks/load.py: not a package, imported by path)


def default_trace(workdir: Path) -> tuple[Path, list[Path]]:
    """The 200 MB plain-JSON trace of benchmarks/load.py (same generator, same settings)."""
    source = bench_load.read_source(bench_load.DEFAULT_SOURCE)
    json_path, gz_path, _ = bench_load.generate(source, DEFAULT_SIZE_MB, "line", 6, workdir)
    return json_path, [json_path, gz_path, bench_load.info_path_of(json_path)]


@dataclass
class Timing:
    """Fastest wall and CPU time of one step over the repeats (the fastest is the least
    disturbed by other jobs), and the size of what it returned."""

    name: str
    wall_s: float
    cpu_s: float
    rows: int | str = ""


def timed(name: str, fn, repeat: int) -> tuple[Timing, object]:
    """Run ``fn`` ``repeat`` times: (its Timing, the last result)."""
    wall = cpu = float("inf")
    result = None
    for _ in range(repeat):
        result = None  # let the previous result go before the next run: one copy in memory
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        wall, cpu = min(wall, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    rows = len(result) if hasattr(result, "__len__") else ""
    return Timing(name, wall, cpu, rows), result


def time_analyses(path: Path, repeat: int) -> tuple[Timing, int, list[Timing]]:
    """Per repeat: a fresh load of ``path``, then every registered analysis in order on it, as
    ``perfreport analyze`` runs them: (load, events, analyses), fastest of the repeats.

    Each repeat starts from a fresh load on purpose: derived data is memoised on the loaded
    traces (shared by the analyses of one run), so timing repeats on one TraceSet would count
    that work only once and flatter every later repeat.
    """
    from perfreport.analyses import ANALYSES
    from perfreport.load import load

    best: dict[str, Timing] = {}
    events = 0
    for _ in range(repeat):
        load_timing, traces = timed("load", lambda: load(path), 1)
        events = sum(t.n_events for t in traces)
        runs = [load_timing] + [timed(name, lambda: fn(traces), 1)[0] for name, fn in ANALYSES]
        for t in runs:
            old = best.get(t.name)
            best[t.name] = t if old is None else Timing(t.name, min(old.wall_s, t.wall_s), min(old.cpu_s, t.cpu_s), t.rows)
        del traces
    return best["load"], events, [best[name] for name, _ in ANALYSES]


def markdown_table(load: Timing, analyses: list[Timing]) -> str:
    """One line per analysis, then their total, each also as a share of the load time."""
    lines = ["| step | wall s | % of load | CPU s | rows |", "|---|---:|---:|---:|---:|",
             f"| load | {load.wall_s:.3f} | 100 | {load.cpu_s:.3f} | |"]
    for t in analyses:
        lines.append(f"| {t.name} | {t.wall_s:.3f} | {100 * t.wall_s / load.wall_s:.1f} | {t.cpu_s:.3f} | {t.rows} |")
    wall, cpu = sum(t.wall_s for t in analyses), sum(t.cpu_s for t in analyses)
    verdict = "✅" if wall < load.wall_s else "❌"
    lines.append(f"| **all analyses ({len(analyses)})** | **{wall:.3f}** | **{100 * wall / load.wall_s:.1f}** {verdict} "
                 f"(target < 100) | {cpu:.3f} | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", nargs="?", type=Path, help="trace file or folder (default: generated 200 MB trace)")
    p.add_argument("--repeat", type=int, default=3, help="fresh load + all analyses, this many times; the fastest of each step counts (default %(default)s)")
    p.add_argument("--workdir", type=Path, help="where to generate / find the default trace")
    p.add_argument("--keep", action="store_true", help="keep the generated trace")
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO))

    generated: list[Path] = []
    made_dir = None
    path = args.trace
    if path is None:
        if args.workdir is None:
            made_dir = args.workdir = Path(tempfile.mkdtemp(prefix="perfreport-bench-"))
        args.workdir.mkdir(parents=True, exist_ok=True)
        path, generated = default_trace(args.workdir)
    try:
        from perfreport.load.scanner import scanner_name

        load_timing, events, timings = time_analyses(path, args.repeat)
    finally:
        if not args.keep:
            for f in generated:
                f.unlink(missing_ok=True)
            if made_dir is not None:
                os.rmdir(made_dir)
    scanner = scanner_name() + (" (sanitizer build!)" if bench_load.sanitizer_loaded() else "")
    print(f"\n{path.name}: {events:,} events, scanner {scanner}, best of {args.repeat}, "
          f"measured {time.strftime('%Y-%m-%d %H:%M')}, 1-min load average {os.getloadavg()[0]:.1f}\n")
    print(markdown_table(load_timing, timings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
