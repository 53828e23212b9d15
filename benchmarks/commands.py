#!/usr/bin/env python3
"""Whole commands, timed end to end, side by side with HTA 0.5.0 on the same generated traces.

    python benchmarks/commands.py [--sizes 200,1000] [--workdir DIR] [--repeat 3]
                                  [--hta-python /work/hta-venv/bin/python] [--ranks 64 --rank-mb 50]

Every measurement is a fresh process under ``/usr/bin/time -v`` (wall seconds and peak RSS of the
process tree); the figure quoted is the median of ``--repeat`` runs, with the 1-minute load
average at the time (the machine may be shared: compare rows taken under similar load).

* ``analyze --format json`` on one rank of each size, against HTA's load + temporal, idle,
  kernel, comm/comp overlap and launch-stats breakdowns (a script run by HTA's own interpreter,
  from its own venv: HTA is never a perfreport dependency);
* ``compare`` of the trace against a copy of itself with every format;
* the README's demo quick start (``compare demo examples/resnet50-workers0``), every format;
* with ``--ranks N``: ``analyze`` of N ranks x ``--rank-mb`` MB (.json.gz copies of one
  generated rank, each with its own rank number): wall time, the parent's peak RSS and the
  largest worker's.

Traces are made by ``benchmarks/load.py``'s generator (a real trace repeated to the size).
Prints a Markdown table per section (progress on stderr).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load as gen  # noqa: E402  (benchmarks/load.py: the trace generator)

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
HTA_SCRIPT = """
import sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
a = TraceAnalysis(trace_dir=sys.argv[1])
t1 = time.perf_counter()
a.get_temporal_breakdown(visualize=False)
ranks = sorted(a.t.get_ranks())  # HTA's per-rank analyses default to rank 0 and fail without it
a.get_idle_time_breakdown(ranks=ranks, visualize=False)
a.get_gpu_kernel_breakdown(visualize=False)
a.get_comm_comp_overlap(visualize=False)
a.get_cuda_kernel_launch_stats(ranks=ranks, visualize=False)
print(f"HTA load {t1 - t0:.2f} s, analyses {time.perf_counter() - t1:.2f} s", file=sys.stderr)
"""
PARENT_SCRIPT = """
import json, sys
import perfreport.pipeline as p
seen = []
real = p.run_jobs
def spy(*a, **k):
    out = real(*a, **k)
    seen.append(out.worker_peak_rss)
    return out
p.run_jobs = spy
from perfreport.cli import main
code = main(sys.argv[1:])
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(json.dumps({"parent_kb": int(hwm), "worker_bytes": max(seen or [0])}), file=sys.stderr)
sys.exit(code)
"""


def timed(argv: list[str], env: dict | None = None) -> tuple[float, float, int, str]:
    """(wall s, CPU s (user + system, the process tree), peak RSS KB of the process tree,
    stderr) of one run under /usr/bin/time -v."""
    proc = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True, env=env, cwd=REPO)
    err = proc.stderr
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and "Traceback" in proc.stderr):
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(argv)}\n{err[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", err)
    seconds = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1))
    cpu = sum(float(re.search(rf"{k} time \(seconds\): ([\d.]+)", err).group(1)) for k in ("User", "System"))
    return seconds, cpu, rss, err


def median_run(argv: list[str], repeat: int) -> dict:
    runs = []
    for _ in range(repeat):
        load = os.getloadavg()[0]
        wall, cpu, rss, err = timed(argv)
        runs.append((wall, rss, load, err, cpu))
        print(f"    {wall:6.2f} s  cpu {cpu:6.2f} s  {rss / 1024:7.0f} MB  load {load:.1f}  {' '.join(argv[-6:])}",
              file=sys.stderr)
    walls = [r[0] for r in runs]
    return {"wall": statistics.median(walls), "min": min(walls), "max": max(walls),
            "cpu": statistics.median(r[4] for r in runs),
            "rss_mb": max(r[1] for r in runs) / 1024, "load": statistics.median(r[2] for r in runs),
            "err": runs[-1][3]}


def perfreport(*args: str) -> list[str]:
    return [PYTHON, "-m", "perfreport.cli", *args]


def single_rank(sizes: list[int], workdir: Path, repeat: int, hta_python: str | None) -> list[str]:
    source = gen.read_source(gen.DEFAULT_SOURCE)
    rows = ["| JSON MB | command | wall s (median) | min–max | CPU s | peak RSS MB | peak / JSON | load avg | "
            "HTA wall s | HTA CPU s | HTA peak MB | × HTA (wall) | × HTA (CPU) |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for mb in sizes:
        json_path, _, info = gen.generate(source, mb, "line", 6, workdir)
        folder = workdir / f"rank_{mb}MB"
        folder.mkdir(exist_ok=True)
        link = folder / "rank0.json"
        if not link.exists():
            link.symlink_to(json_path)
        twin = workdir / f"twin_{mb}MB"
        twin.mkdir(exist_ok=True)
        if not (twin / "rank0.json").exists():
            (twin / "rank0.json").symlink_to(json_path)
        size = info.json_bytes / 1e6
        out = Path(tempfile.mkdtemp(prefix="pr-cmd-"))
        print(f"  {mb} MB: analyze --format json", file=sys.stderr)
        a = median_run(perfreport("analyze", str(folder), "--out", str(out), "--format", "json", "-q"), repeat)
        hta = None
        if hta_python:
            print(f"  {mb} MB: HTA", file=sys.stderr)
            hta = median_run([hta_python, "-c", HTA_SCRIPT, str(folder)], max(1, min(repeat, 2)))
        print(f"  {mb} MB: compare, every format", file=sys.stderr)
        c = median_run(perfreport("compare", str(folder), str(twin), "--out", str(out), "-q"), repeat)
        shutil.rmtree(out, ignore_errors=True)
        side = (f"{hta['wall']:.1f} | {hta['cpu']:.1f} | {hta['rss_mb']:.0f} | {hta['wall'] / a['wall']:.1f} × | "
                f"{hta['cpu'] / a['cpu']:.1f} × |") if hta else "— | — | — | — | — |"
        rows.append(f"| {size:.0f} | `analyze --format json` | {a['wall']:.2f} | {a['min']:.2f}–{a['max']:.2f} | "
                    f"{a['cpu']:.2f} | {a['rss_mb']:.0f} | {a['rss_mb'] / size:.2f} | {a['load']:.1f} | {side}")
        rows.append(f"| {size:.0f} | `compare` (trace vs itself), every format | {c['wall']:.2f} | "
                    f"{c['min']:.2f}–{c['max']:.2f} | {c['cpu']:.2f} | {c['rss_mb']:.0f} | {c['rss_mb'] / size:.2f} | "
                    f"{c['load']:.1f} | | | | | |")
    return rows


def demo(repeat: int) -> list[str]:
    out = Path(tempfile.mkdtemp(prefix="pr-demo-"))
    rows = ["| command | wall s (median) | min–max | CPU s | peak RSS MB | load avg |", "|---|---:|---:|---:|---:|---:|"]
    for label, fmt in (("every format", None), ("all but pdf", "html,md,json,junit")):
        args = ["compare", "demo", "examples/resnet50-workers0", "--out", str(out), "-q"]
        print(f"  demo quick start, {label}", file=sys.stderr)
        r = median_run(perfreport(*args, *(["--format", fmt] if fmt else [])), repeat)
        rows.append(f"| `compare demo examples/resnet50-workers0`, {label} | {r['wall']:.2f} | "
                    f"{r['min']:.2f}–{r['max']:.2f} | {r['cpu']:.2f} | {r['rss_mb']:.0f} | {r['load']:.1f} |")
    shutil.rmtree(out, ignore_errors=True)
    return rows


def many_ranks(n: int, rank_mb: int, workdir: Path, repeat: int) -> list[str]:
    source = gen.read_source(gen.DEFAULT_SOURCE)
    _, gz_path, info = gen.generate(source, rank_mb, "line", 6, workdir)
    folder = workdir / f"ranks_{n}x{rank_mb}MB"
    folder.mkdir(exist_ok=True)
    text = None
    for rank in range(n):
        target = folder / f"rank{rank}.json.gz"
        if target.exists():
            continue
        if text is None:
            text = gzip.decompress(gz_path.read_bytes())
        head, rest = text[:20000], text[20000:]
        head = re.sub(rb'"distributedInfo": \{[^}]*\}', f'"distributedInfo": {{"rank": {rank}, "world_size": {n}}}'
                      .encode(), head, count=1)
        if b'"distributedInfo"' not in head:
            head = head.replace(b"{", f'{{"distributedInfo": {{"rank": {rank}, "world_size": {n}}},'.encode(), 1)
        target.write_bytes(gzip.compress(head + rest, 1))
    out = Path(tempfile.mkdtemp(prefix="pr-ranks-"))
    rows = ["| ranks × JSON MB | wall s (median) | min–max | CPU s | tree peak RSS MB | parent peak MB | "
            "largest worker peak MB | load avg |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    print(f"  {n} ranks x {rank_mb} MB: analyze --format json", file=sys.stderr)
    r = median_run([PYTHON, "-c", PARENT_SCRIPT, "analyze", str(folder), "--out", str(out), "--format", "json",
                    "-q"], repeat)
    peaks = json.loads(r["err"].strip().splitlines()[[i for i, line in enumerate(r["err"].strip().splitlines())
                                                       if line.startswith('{"parent_kb"')][-1]])
    rows.append(f"| {n} × {info.json_bytes / 1e6:.0f} | {r['wall']:.2f} | {r['min']:.2f}–{r['max']:.2f} | "
                f"{r['cpu']:.2f} | {r['rss_mb']:.0f} | {peaks['parent_kb'] / 1024:.0f} | {peaks['worker_bytes'] / 2**20:.0f} | "
                f"{r['load']:.1f} |")
    shutil.rmtree(out, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="200", help="single-rank JSON sizes in MB (default %(default)s; '' for none)")
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "pr-bench")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--hta-python", default="/work/hta-venv/bin/python",
                   help="an interpreter with HolisticTraceAnalysis==0.5.0 installed ('' to skip HTA)")
    p.add_argument("--ranks", type=int, default=0, help="also analyse this many ranks (e.g. 64)")
    p.add_argument("--rank-mb", type=int, default=50)
    p.add_argument("--no-demo", action="store_true")
    args = p.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    hta = args.hta_python if args.hta_python and Path(args.hta_python).exists() else None
    print(f"machine: {os.cpu_count()} cores, Python {sys.version.split()[0]}; load {os.getloadavg()}")
    if not args.no_demo:
        print("\n### Demo quick start\n\n" + "\n".join(demo(args.repeat)))
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if sizes:
        print("\n### One rank, side by side with HTA 0.5.0\n\n" + "\n".join(single_rank(sizes, args.workdir,
                                                                                     args.repeat, hta)))
    if args.ranks:
        print(f"\n### {args.ranks} ranks on one machine\n\n" + "\n".join(many_ranks(args.ranks, args.rank_mb,
                                                                                  args.workdir, args.repeat)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
