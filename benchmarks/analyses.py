#!/usr/bin/env python3
"""Time every registered analysis against the load of the same trace.

    python benchmarks/analyses.py [TRACE] [--repeat N] [--workdir DIR] [--keep]

Loading is meant to dominate ``perfreport analyze``: the analyses work on columns already in
memory, so all of them together should take less time than the load. This prints, for one
trace, the load time and each analysis's time, so that a slow new analysis shows up by name.
Each pass (load + all analyses) runs in a fresh process, like ``perfreport analyze``; the
verdict compares whole passes.

The analyses are taken from ``perfreport.analyses.ANALYSES`` at run time, so the list grows
with the package. Without TRACE, the 200 MB trace of benchmarks/load.py is generated (or reused
from ``--workdir``) and used.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
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
    """Wall and CPU time of one step (seconds) and the size of what it returned."""

    name: str
    wall_s: float
    cpu_s: float
    rows: int | str = ""


def one_pass(path: Path) -> dict:
    """In this process: load ``path``, then every registered analysis in order on it, as
    ``perfreport analyze`` runs them. Returns {"events", "steps": [[name, wall, cpu, rows]]},
    the load first. Derived data is memoised on the loaded traces and shared by the analyses
    of one pass; each analysis is charged for what it computes first."""
    from perfreport.analyses import ANALYSES
    from perfreport.load import load

    def timed(name: str, fn) -> tuple[list, object]:
        t0, c0 = time.perf_counter(), time.process_time()
        result = fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        return [name, wall, cpu, len(result) if hasattr(result, "__len__") else ""], result

    load_step, traces = timed("load", lambda: load(path))
    steps = [load_step] + [timed(name, lambda: fn(traces))[0] for name, fn in ANALYSES]
    return {"events": sum(t.n_events for t in traces), "steps": steps}


def time_analyses(path: Path, repeat: int) -> tuple[list[Timing], int, list[list[Timing]]]:
    """``repeat`` passes (:func:`one_pass`), each in a *fresh* Python process, as a real
    ``perfreport analyze`` starts: no warm allocator, no memo left from a previous pass.

    Returns (the load of each pass, events, the analyses of each pass).
    """
    loads, passes, events = [], [], 0
    for i in range(repeat):
        print(f"pass {i + 1}/{repeat} on {path.name} ...", file=sys.stderr)
        out = subprocess.run([sys.executable, __file__, "--one-pass", str(path)], check=True,
                             capture_output=True, text=True, cwd=REPO).stdout
        result = json.loads(out.strip().splitlines()[-1])
        events = result["events"]
        steps = [Timing(*s) for s in result["steps"]]
        loads.append(steps[0])
        passes.append(steps[1:])
    return loads, events, passes


def markdown_table(loads: list[Timing], passes: list[list[Timing]]) -> str:
    """One line per step, fastest of the passes (the least disturbed by other jobs), then the
    verdict on whole passes: the fastest pass of all analyses against the fastest load, and
    the slowest against the slowest (a per-step minimum would flatter the total)."""
    load = min(loads, key=lambda t: t.wall_s)
    lines = ["| step | wall s | % of load | CPU s | rows |", "|---|---:|---:|---:|---:|",
             f"| load | {load.wall_s:.3f} | 100 | {load.cpu_s:.3f} | |"]
    for steps in zip(*passes):
        best = min(steps, key=lambda t: t.wall_s)
        lines.append(f"| {best.name} | {best.wall_s:.3f} | {100 * best.wall_s / load.wall_s:.1f} | "
                     f"{min(t.cpu_s for t in steps):.3f} | {best.rows} |")
    totals = sorted((sum(t.wall_s for t in p), sum(t.cpu_s for t in p)) for p in passes)
    (wall, cpu), (worst_wall, _) = totals[0], totals[-1]
    worst_load = max(t.wall_s for t in loads)
    verdict = "✅" if wall < load.wall_s else "❌"
    lines.append(f"| **all analyses ({len(passes[0])}), fastest pass** | **{wall:.3f}** | "
                 f"**{100 * wall / load.wall_s:.1f}** {verdict} (target < 100) | {cpu:.3f} | |")
    lines.append(f"| slowest pass vs slowest load | {worst_wall:.3f} | {100 * worst_wall / worst_load:.1f} "
                 f"(load {worst_load:.3f} s) | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", nargs="?", type=Path, help="trace file or folder (default: generated 200 MB trace)")
    p.add_argument("--repeat", type=int, default=5,
                   help="passes (fresh process: load + all analyses); the fastest counts (default %(default)s)")
    p.add_argument("--one-pass", action="store_true", help=argparse.SUPPRESS)  # the child of each pass
    p.add_argument("--workdir", type=Path, help="where to generate / find the default trace")
    p.add_argument("--keep", action="store_true", help="keep the generated trace")
    args = p.parse_args(argv)
    sys.path.insert(0, str(REPO))
    if args.one_pass:
        print(json.dumps(one_pass(args.trace)))
        return 0

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

        loads, events, passes = time_analyses(path, args.repeat)
    finally:
        if not args.keep:
            for f in generated:
                f.unlink(missing_ok=True)
            if made_dir is not None:
                os.rmdir(made_dir)
    scanner = scanner_name() + (" (sanitizer build!)" if bench_load.sanitizer_loaded() else "")
    print(f"\n{path.name}: {events:,} events, scanner {scanner}, {args.repeat} passes (fresh processes), "
          f"measured {time.strftime('%Y-%m-%d %H:%M')}, 1-min load average {os.getloadavg()[0]:.1f}\n")
    print(markdown_table(loads, passes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
