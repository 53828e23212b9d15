#!/usr/bin/env python3
"""Whole commands in one run, side by side with HTA 0.5.0 (and TraceLens where it runs), on the
same generated traces, against issue 24's targets.

    python benchmarks/commands.py [--sizes 200,1000] [--ranks 16 --rank-mb 50] [--repeat 3]
                                  [--hta-python /work/hta-venv/bin/python]
                                  [--tracelens-python /work/tl-venv/bin/python] [--suite]
                                  [--grow-from TRACE,... --grown-mb 200 --hta-timeout 300]
                                  [--many-steps-from TRACE,... --many-steps-mb 1000]

Every measurement is a fresh process under ``/usr/bin/time -v`` (wall, CPU = user + system of
the process tree, peak RSS of the largest process of the tree); a figure is the median of
``--repeat`` runs, with the 1-minute load average when it ran (the machine may be shared).
perfreport's own rows also read the command's ``report.json`` ``timings`` (what ``-v`` prints):
the CPU seconds of a rank task's load (read + decompress + scan + decode) and analyses, and the
peak RSS of the parent, of the largest worker and of the largest forked helper, each against the
rank's JSON size. For each single rank, one more run of ``analyze`` and of ``compare`` samples
the whole process tree's anonymous memory (:func:`tree_anon_peak_mb`), which the workers'
memory budget (``PEAK_PER_JSON_BYTE`` per byte of a rank's JSON) must cover.

* one rank of each ``--sizes`` MB: ``analyze --format json``; HTA's load + temporal, idle,
  kernel, comm/comp overlap and launch-stats breakdowns; TraceLens's perf report; ``compare``
  of the trace against a copy of itself, every format;
* ``--grow-from``: one ``--grown-mb`` MB rank grown from each of other real traces (an event-dense
  V100 trace, a many-step MI250 one): ``analyze``, ``compare`` and HTA, which is stopped after
  ``--hta-timeout`` seconds (its time then a lower bound, shown with ``>``);
* ``--gzipped-mb``: the default rank of that size as ``.json.gz`` (its text is scanned as it is
  decompressed): ``analyze`` and ``compare``, the peak against the text's size;
* ``--compact-from``: one more, the V100 trace's events written without spaces (orjson's and
  msgspec's JSON: ~11 % more events per MB than Kineto's spacing), the same three;
* ``--many-steps-from``: one ``--many-steps-mb`` MB rank grown from each of these tiny real
  traces with steps (the triton example's 71 events: 345,319 profiler steps at 1 GB, every
  per-step table and the gate's per-step samples at their longest; HTA's trace_compare tiny:
  173,000 steps of 16 events, half of them GPU work no launch is linked to, the most analyses
  per GB found): ``analyze`` and ``compare`` only (HTA takes minutes on 1 GB; the ratio is the
  other cases'), against the 1 GB targets;
* ``--ranks N``: ``analyze`` and ``compare`` of N ranks x ``--rank-mb`` MB (.json.gz copies of
  one generated rank, each with its own rank number), and HTA on the same folder;
* the README's demo quick start (``compare demo examples/resnet50-workers0``);
* ``--suite``: the README's test command (``python -m pytest``) in this checkout.

Traces are made by ``benchmarks/load.py``'s generator (a real A100 trace repeated to the size)
into ``--workdir`` and kept there. HTA and TraceLens run from venvs of their own (never
perfreport dependencies): ``python -m venv /work/hta-venv && /work/hta-venv/bin/pip install
HolisticTraceAnalysis==0.5.0``; TraceLens from its repository (github.com/AMD-AGI/TraceLens).
Prints Markdown tables (progress on stderr).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import load as gen  # noqa: E402  (benchmarks/load.py: the trace generator)

from perfreport.load.memory import PEAK_PER_JSON_BYTE  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
MB = 1e6
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
TRACELENS_SCRIPT = """
import sys
from TraceLens.Reporting.generate_perf_report_pytorch import main
sys.argv = ["TraceLens_generate_perf_report_pytorch", "--profile_json_path", sys.argv[1],
            "--output_xlsx_path", sys.argv[2]]
main()
"""
TRACELENS_SOURCE = Path("/work/shared/traces/tracelens_b200_eager_rank0of8/eager_trace.json.gz")
"""A real trace TraceLens reads (it finds no GPU events in the A100 trace the other ranks grow from)."""
GROW_SOURCES = (
    Path("/work/shared/traces/hta_v100_ns_resolution/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"),
    Path("/work/shared/traces/odd_amd_mi250_rocm62_minitoy/mi250_minitoy_train_ROCm6_2_kineto.json.gz"),
)
"""Real traces unlike the A100 one: ~1M events per 200 MB (the A100's ~0.65M: more memory per MB),
and thousands of profiler steps once grown (the per-step analyses' cost)."""
MANY_STEPS_SOURCES = (
    Path("/work/shared/traces/odd_a100_triton_example/triton_example.json.gz"),
    Path("/work/shared/traces/pair_hta_trace_compare_tiny/base/base.json.gz"),
)
"""Real traces of a few steps and a few dozen events. Grown to 1 GB, the triton example has the
most steps (and per-step rows) of any input measured; HTA's trace_compare tiny the most
analyses per GB (every shared trace grown to 1 GB, issue 24's notes): the slowest ``compare``s
of a 1 GB rank found."""
BESIDE = ("decompress (own thread, beside the scan)",)
"""Phases run on a thread of their own beside another (no self time): their CPU counts whole."""
LOAD_PHASES = ("read", "decompress", "scan", "decode", "read stored columns") + BESIDE


@dataclass
class Run:
    """The median of a command's runs, and its report.json timings when it wrote one."""

    wall: float
    low: float
    high: float
    cpu: float
    rss_mb: float
    load_avg: float
    timings: dict = field(default_factory=dict)
    stderr: str = ""
    timed_out: bool = False
    """The command ran past its time limit and was stopped: ``wall`` is the limit (a lower bound)."""
    said: dict = field(default_factory=dict)
    """report.json's ``timings_s``: the wall seconds of the load and the analyses as the command
    states them (the busiest process's: docs/analysis-document.md)."""

    def said_s(self, what: str) -> float:
        """``timings_s``' ``load`` or ``analyze`` (a compare's: its slower side's)."""
        values = [v for k, v in self.said.items() if k == what or k.endswith(f"_{what}")]
        return max(values) if values else float("nan")

    @property
    def wall_text(self) -> str:
        return f"> {self.wall:.0f}" if self.timed_out else f"{self.wall:.2f}"

    def phase_s(self, names: tuple[str, ...] | None = None, prefix: tuple[str, ...] = ()) -> float:
        """CPU seconds of a rank task's phases named ``names`` or starting with ``prefix``: the
        rank tasks' sum (``rank_phases``) over the number of tasks. Only phases without nested
        phases are summed (a nested one's CPU would count twice)."""
        ranks = self.timings.get("ranks") or []
        if not ranks:
            return float("nan")
        rows = [r for r in self.timings.get("rank_phases", [])
                if ((names and r["phase"] in names) or r["phase"].startswith(prefix or ("\0",)))]
        return sum(r["cpu_s"] if r["phase"] in BESIDE else r["cpu_s"] * r["self_s"] / r["wall_s"] if r["wall_s"] else 0.0
                   for r in rows) / len(ranks)

    def analyses_cpu_s(self, gate: bool = False) -> float:
        """CPU seconds of a rank task's analyses, with those a forked child ran beside it (a single
        rank in ``analyze``: their phases carry no self time, the child's CPU is its own phase)."""
        prefix = ("analysis:", "memo:", "gate inputs") if gate else ("analysis:", "memo:")
        ranks = self.timings.get("ranks") or [None]
        child = sum(r["cpu_s"] for r in self.timings.get("rank_phases", [])
                    if r["phase"] == "forked analyses (child process)")
        return self.phase_s(prefix=prefix) + child / len(ranks)

    def analyses_wall_s(self) -> float:
        """Wall seconds of a rank task's analyses on its own path: the self time of its analysis,
        memo and fork phases, the wait for a forked child's half included (the child's phases
        carry no self time: they ran beside the parent's)."""
        ranks = self.timings.get("ranks") or [None]
        prefix = ("analysis:", "memo:", "views both halves", "wait for the forked analyses")
        return sum(r["self_s"] for r in self.timings.get("rank_phases", [])
                   if r["phase"].startswith(prefix)) / len(ranks)

    @property
    def parent_mb(self) -> float:
        return self.timings.get("parent", {}).get("peak_rss_bytes", 0) / MB

    @property
    def worker_mb(self) -> float:
        return self.timings.get("workers", {}).get("largest_peak_rss_bytes", 0) / MB

    @property
    def helper_mb(self) -> float:
        return self.timings.get("helpers", {}).get("largest_peak_rss_bytes", 0) / MB


def timed(argv: list[str], cwd: Path = REPO, timeout: float | None = None) -> tuple[float, float, int, str]:
    """(wall s, CPU s of the process tree, peak RSS KB of its largest process, stderr); with a
    ``timeout``, the command is stopped at that many seconds and TimeoutError raised."""
    proc = subprocess.Popen(["/usr/bin/time", "-v", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd, start_new_session=True)  # its own group: stopped whole
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise TimeoutError(timeout) from None
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and "Traceback" in err):
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(argv)}\n{err[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", err)
    seconds = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", err).group(1))
    cpu = sum(float(re.search(rf"{k} time \(seconds\): ([\d.]+)", err).group(1)) for k in ("User", "System"))
    return seconds, cpu, rss, err


def median_run(argv: list[str], repeat: int, report: Path | None = None, cwd: Path = REPO,
               timeout: float | None = None) -> Run:
    runs = []
    for _ in range(repeat):
        load = os.getloadavg()[0]
        try:
            wall, cpu, rss, err = timed(argv, cwd, timeout)
        except TimeoutError:
            print(f"    stopped after {timeout:.0f} s", file=sys.stderr)
            return Run(timeout, timeout, timeout, float("nan"), float("nan"), load, timed_out=True)
        document = json.loads(report.read_text()) if report and report.exists() else {}
        runs.append(Run(wall, wall, wall, cpu, rss / 1024, load, document.get("timings", {}), err,
                        said=document.get("timings_s", {})))
        shown = [a if len(a) < 80 else "<script>" for a in argv[-5:]]
        print(f"    {wall:7.2f} s  cpu {cpu:7.2f} s  {rss / 1024:7.0f} MB  load {load:.1f}  {' '.join(shown)}",
              file=sys.stderr)
    walls = sorted(r.wall for r in runs)
    mid = sorted(runs, key=lambda r: r.wall)[len(runs) // 2]  # the median run's timings
    return Run(statistics.median(walls), walls[0], walls[-1], statistics.median(r.cpu for r in runs),
               max(r.rss_mb for r in runs), statistics.median(r.load_avg for r in runs), mid.timings, mid.stderr,
               said=mid.said)


def tree_anon_peak_mb(argv: list[str], cwd: Path = REPO) -> float:
    """Peak anonymous memory (MB) of the command's whole process tree: the sum of each process's
    proportional share (``Pss_Anon`` of /proc/PID/smaps_rollup, so pages a forked child still
    shares with its parent count once), sampled every 20 ms in one run of its own (reading
    smaps_rollup walks the page tables: the timed runs are not sampled). What the workers'
    memory budget (``perfreport.load.memory.PEAK_PER_JSON_BYTE``) must cover."""
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cwd,
                            start_new_session=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, sum(_pss_anon(pid) for pid in _tree(proc.pid)))
        time.sleep(0.02)
    return peak / MB


def _tree(root: int) -> list[int]:
    """``root`` and every process below it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                pass  # gone meanwhile
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _pss_anon(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return sum(int(line.split()[1]) * 1024 for line in f if line.startswith("Pss_Anon:"))
    except (OSError, ValueError):
        return 0


def perfreport(*args: str) -> list[str]:
    return [PYTHON, "-m", "perfreport", *args]


def _source_name(source: Path) -> str:
    """The shared trace's folder (``pair_hta_trace_compare_tiny``, not its ``base`` subfolder)."""
    parts = source.parts
    return parts[parts.index("traces") + 1] if "traces" in parts[:-2] else source.parent.name


def one_rank_folders(mb: int, workdir: Path, source: Path = gen.DEFAULT_SOURCE, layout: str = "line",
                     gzipped: bool = False) -> tuple[Path, Path, float]:
    """A folder holding the ``mb`` MB rank grown from ``source`` (its text in ``layout``, see
    ``load.encode_event``; with ``gzipped`` its ``.json.gz``, which the generator writes too) and
    a second folder with a copy of it (symlinks: the same bytes, so a compare of the two is a
    compare of a run with itself); the JSON MB (the text's, for a gzipped rank too)."""
    workdir.mkdir(parents=True, exist_ok=True)
    json_path, gz_path, info = gen.generate(gen.read_source(source), mb, layout, 6, workdir)
    target, suffix = (gz_path, "_gz") if gzipped else (json_path, "")
    folders = []
    for name in (f"rank_{mb}MB{suffix}", f"twin_{mb}MB{suffix}"):
        folder = workdir / name
        folder.mkdir(exist_ok=True)
        link = folder / ("rank0.json.gz" if gzipped else "rank0.json")
        if not link.exists():
            link.symlink_to(target)
        folders.append(folder)
    return folders[0], folders[1], info.json_bytes / MB


def many_rank_folders(n: int, rank_mb: int, workdir: Path, source: Path = gen.DEFAULT_SOURCE) -> tuple[Path, Path, float]:
    """Two folders of ``n`` .json.gz ranks (copies of one rank grown from ``source``, each with its
    own ``distributedInfo.rank``); the JSON MB of one rank."""
    workdir.mkdir(parents=True, exist_ok=True)
    _, gz_path, info = gen.generate(gen.read_source(source), rank_mb, "line", 6, workdir)
    folders = []
    for name in (f"ranks_{n}x{rank_mb}MB", f"ranks_{n}x{rank_mb}MB_twin"):
        folder = workdir / name
        folder.mkdir(exist_ok=True)
        text = None
        for rank in range(n):
            target = folder / f"rank{rank}.json.gz"
            if target.exists():
                continue
            if text is None:
                text = gzip.decompress(gz_path.read_bytes())
            target.write_bytes(gzip.compress(ranked(text, rank, n), 1))
        folders.append(folder)
    return folders[0], folders[1], info.json_bytes / MB


HEAD_BYTES = 1 << 20
"""Where a grown trace's top-level members before its events are (distributedInfo: a line of
its own, up to ~12 kB where it lists 300 ranks of 10 process groups)."""


def ranked(text: bytes, rank: int, n: int) -> bytes:
    """A grown trace's text naming ``rank`` of ``n`` ranks (:func:`with_rank`) where its
    ``distributedInfo`` is: its last HEAD_BYTES where the generator wrote it after the events (a
    source without one: a second, earlier one would lose to it), else its first."""
    tail = text[-HEAD_BYTES:]
    if len(text) > HEAD_BYTES and b'"distributedInfo": {' in tail:
        return text[:-HEAD_BYTES] + with_rank(tail, rank, n)
    return with_rank(text[:HEAD_BYTES], rank, n) + text[HEAD_BYTES:]


def with_rank(head: bytes, rank: int, n: int) -> bytes:
    """A grown trace's head with its ``distributedInfo`` naming ``rank`` of ``n`` ranks, its other
    keys kept (process groups, backend); one added where there is none."""
    m = re.search(rb'"distributedInfo": (\{.*\})', head)  # (one line: "." stops at its end)
    if m is None:
        return head.replace(b"{", f'{{"distributedInfo": {{"rank": {rank}, "world_size": {n}}},'.encode(), 1)
    info = {**json.loads(m.group(1)), "rank": rank, "world_size": n}
    return head[:m.start(1)] + json.dumps(info).encode() + head[m.end(1):]


@dataclass
class Case:
    """One input (a rank size or N ranks) and what every tool did on it."""

    label: str
    json_mb: float
    ranks: int
    analyze: Run
    compare: Run
    hta: Run | None = None
    tracelens: Run | None = None
    tree_mb: tuple[float, float] | None = None
    """Peak anonymous memory of the process tree (:func:`tree_anon_peak_mb`) of ``analyze`` and
    of ``compare`` (both sides), single ranks only."""


def run_case(label: str, folder: Path, twin: Path, json_mb: float, ranks: int, repeat: int, hta: str | None,
             tracelens: str | None, hta_timeout: float | None = None) -> Case:
    out = Path(tempfile.mkdtemp(prefix="pr-bench-out-"))
    try:
        print(f"  {label}: analyze --format json", file=sys.stderr)
        a = median_run(perfreport("analyze", str(folder), "--out", str(out / "a"), "--format", "json", "-q"), repeat,
                       out / "a" / "report.json")
        print(f"  {label}: compare, every format", file=sys.stderr)
        c = median_run(perfreport("compare", str(folder), str(twin), "--out", str(out / "c"), "-q"), repeat,
                       out / "c" / "report.json")
        tree = None
        if ranks == 1:
            print(f"  {label}: the process trees' memory (one run each, sampled)", file=sys.stderr)
            tree = (tree_anon_peak_mb(perfreport("analyze", str(folder), "--out", str(out / "ta"), "--format", "json",
                                                 "-q")),
                    tree_anon_peak_mb(perfreport("compare", str(folder), str(twin), "--out", str(out / "tc"), "-q")))
        h = t = None
        if hta:
            print(f"  {label}: HTA 0.5.0", file=sys.stderr)
            h = median_run([hta, "-c", HTA_SCRIPT, str(folder)], 1 if json_mb * ranks >= 900 else max(1, min(repeat, 2)),
                           timeout=hta_timeout)
        if tracelens and ranks == 1:
            print(f"  {label}: TraceLens", file=sys.stderr)
            t = median_run([tracelens, "-c", TRACELENS_SCRIPT, str(next(folder.iterdir())), str(out / "tl.xlsx")], 1)
        return Case(label, json_mb, ranks, a, c, h, t, tree)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def tools_table(cases: list[Case]) -> list[str]:
    rows = ["| input | tool, command | wall s (median) | min–max | CPU s | peak RSS MB | peak / rank JSON | load avg |"
            " × HTA (wall) |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for case in cases:
        hta_wall = case.hta.wall if case.hta else None
        for name, run in (("perfreport `analyze --format json`", case.analyze), ("HTA 0.5.0 load + 5 analyses", case.hta),
                          ("TraceLens perf report", case.tracelens),
                          ("perfreport `compare` (vs a copy), every format", case.compare)):
            if run is None:
                continue
            ratio = f"{'≥ ' if case.hta.timed_out else ''}{hta_wall / run.wall:.1f} ×" \
                if hta_wall and "analyze" in name else ""
            rows.append(f"| {case.label} | {name} | {run.wall_text} | {run.low:.2f}–{run.high:.2f} | {run.cpu:.2f} | "
                        f"{run.rss_mb:,.0f} | {run.rss_mb / case.json_mb:.2f} | {run.load_avg:.1f} | {ratio} |")
    return rows


def phases_table(cases: list[Case]) -> list[str]:
    """Where perfreport's time and memory go (report.json ``timings``): CPU seconds of one rank task."""
    rows = ["| input | command | load CPU s (read+decompress+scan+decode) | load GB per CPU-s | analyses CPU s | "
            "analyses wall s (task's path) | report.json `timings_s`: load s (GB/s), analyses s | "
            "parent peak MB (/ rank JSON) | largest worker peak MB (/ rank JSON) | "
            "largest forked helper peak MB (/ rank JSON) |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for case in cases:
        for name, run in (("analyze", case.analyze), ("compare", case.compare)):
            load = run.phase_s(LOAD_PHASES)
            analyses = run.analyses_cpu_s(gate=True)
            worker = f"{run.worker_mb:,.0f} ({run.worker_mb / case.json_mb:.2f})" if run.worker_mb else "– (in parent)"
            helper = f"{run.helper_mb:,.0f} ({run.helper_mb / case.json_mb:.2f})" if run.helper_mb else "–"
            rows.append(f"| {case.label} | {name} | {load:.2f} | {case.json_mb / 1000 / load:.2f} | {analyses:.2f} | "
                        f"{run.analyses_wall_s():.2f} | {said_text(run, case)} | "
                        f"{run.parent_mb:,.0f} ({run.parent_mb / case.json_mb:.2f}) | {worker} | {helper} |")
    return rows


def said_text(run: Run, case: Case) -> str:
    """The load and analyses report.json states (a compare's slower side) and, for one rank, the
    load's rate: what a reader of the report sees."""
    load, analyses = run.said_s("load"), run.said_s("analyze")
    if load != load:  # (no report.json)
        return "–"
    rate = f" ({case.json_mb / 1000 / load:.2f})" if case.ranks == 1 else ""
    return f"{load:.2f}{rate}, {analyses:.2f}"


def targets_table(cases: list[Case], suite: Run | None) -> list[str]:
    """Issue 24's goals, met or not, from the figures above."""
    rows = ["| target | measured | met |", "|---|---|---|"]

    def row(target: str, measured: str, ok: bool) -> None:
        rows.append(f"| {target} | {measured} | {'✅' if ok else '❌'} |")

    for case in cases:
        a, c = case.analyze, case.compare
        if case.hta:
            more = "> " if case.hta.timed_out else ""
            row(f"`analyze` ≥ 20 × HTA, {case.label}", f"{a.wall:.2f} s vs {more}{case.hta.wall:.1f} s: "
                f"{'≥ ' if more else ''}{case.hta.wall / a.wall:.1f} ×", case.hta.wall / a.wall >= 20)
        for name, run in (("analyze", a), ("compare", c)) if case.ranks == 1 else ():  # the sizes
            # the forked helpers too (a single rank's second half of the analyses, the figures'
            # children, the PDF renderer): neither the parent nor a worker, one may be the largest
            top = max(run.parent_mb, run.worker_mb, run.helper_mb, run.rss_mb)
            row(f"`{name}` peak ≤ 1.3 × the rank's JSON (every process), {case.label}",
                f"parent {run.parent_mb:,.0f} MB, largest worker {run.worker_mb:,.0f} MB, largest forked helper "
                f"{run.helper_mb:,.0f} MB: {top / case.json_mb:.2f} ×", top / case.json_mb <= 1.3)
        if case.tree_mb:
            per_side = max(case.tree_mb[0], case.tree_mb[1] / 2) / case.json_mb
            row(f"the workers' memory budget ({PEAK_PER_JSON_BYTE} × a rank's JSON) covers the process tree, "
                f"{case.label}", f"`analyze` {case.tree_mb[0]:,.0f} MB, `compare` {case.tree_mb[1]:,.0f} MB "
                f"({per_side:.2f} × a side's JSON at most)", per_side <= PEAK_PER_JSON_BYTE)
        if case.ranks == 1 and case.json_mb >= 900:
            row(f"`compare` {case.label} × 2, every format, ≤ 6 s", f"{c.wall:.2f} s", c.wall <= 6)
        if case.ranks == 1:
            load = a.phase_s(LOAD_PHASES)
            rate = case.json_mb / 1000 / load
            if ".json.gz" in case.label:  # not the JSON target: gzip's decoding alone is ~1.5 GB/CPU-s
                rows.append(f"| load of a gzipped rank, decompression included (no target), {case.label} | "
                            f"{load:.2f} CPU s: {rate:.2f} GB/s | – |")
            else:
                row(f"load ≥ 1 GB/s per core, {case.label}", f"{load:.2f} CPU s: {rate:.2f} GB/s", rate >= 1)
        if case.ranks == 1 and ".json.gz" not in case.label:  # as report.json states them (wall seconds)
            said = [(name, run.said_s("load"), run.said_s("analyze")) for name, run in (("analyze", a), ("compare", c))]
            if all(load == load for _, load, _ in said):
                row(f"report.json's load (`timings_s`) ≥ 1 GB/s, {case.label}",
                    ", ".join(f"`{name}` {load:.2f} s: {case.json_mb / 1000 / load:.2f} GB/s" for name, load, _ in said),
                    all(case.json_mb / 1000 / load >= 1 for _, load, _ in said))
                if case.json_mb >= 900:
                    row(f"report.json's analyses (`timings_s`) ≤ 1.5 s, {case.label}",
                        ", ".join(f"`{name}` {an:.2f} s" for name, _, an in said), all(an <= 1.5 for _, _, an in said))
        if case.ranks == 1 and case.json_mb >= 900:
            wall = a.analyses_wall_s()
            row(f"analyses ≤ 1.5 s, {case.label}", f"{wall:.2f} s on the rank task's path ({a.analyses_cpu_s():.2f} "
                f"CPU s, those of the forked child beside it included)", wall <= 1.5)
    if suite is not None:
        row("the README's test command ≤ 3 min on 2 cores", f"{suite.wall / 60:.1f} min ({suite.cpu:.0f} CPU s)",
            suite.wall <= 180)
    return rows


def demo(repeat: int) -> list[str]:
    out = Path(tempfile.mkdtemp(prefix="pr-demo-"))
    rows = ["| command | wall s (median) | min–max | CPU s | peak RSS MB | load avg |", "|---|---:|---:|---:|---:|---:|"]
    for label, fmt in (("every format", None), ("all but pdf", "html,md,json,junit")):
        print(f"  demo quick start, {label}", file=sys.stderr)
        args = ["compare", "demo", "examples/resnet50-workers0", "--out", str(out), "-q"]
        r = median_run(perfreport(*args, *(["--format", fmt] if fmt else [])), repeat)
        rows.append(f"| `compare demo examples/resnet50-workers0`, {label} | {r.wall:.2f} | {r.low:.2f}–{r.high:.2f} | "
                    f"{r.cpu:.2f} | {r.rss_mb:.0f} | {r.load_avg:.1f} |")
    shutil.rmtree(out, ignore_errors=True)
    return rows


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    import numpy
    import pandas

    sys.path.insert(0, str(REPO))
    from perfreport.load.scanner import scanner_name

    return (f"{os.cpu_count()} cores ({cpu}), {os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} "
            f"GiB RAM, Python {platform.python_version()}, numpy {numpy.__version__}, pandas {pandas.__version__}, "
            f"scanner {scanner_name()}")


_SPEED_PROBE = """
import time, numpy as np
np._core.multiarray._set_madvise_hugepage(False)  # 4 KiB pages, as perfreport's own columns (heap.plain_pages)
t = time.perf_counter(); a = np.ones(1 << 29, np.uint8); touch = time.perf_counter() - t; del a
t = time.perf_counter(); s = 0
for i in range(10**7): s += i
loop = time.perf_counter() - t
x = np.random.default_rng(0).random(10**7); np.sort(x)
t = time.perf_counter(); np.sort(x); sort = time.perf_counter() - t
print(loop, sort, touch)
"""


def speed() -> str:
    """This machine's speed now, in a fresh process: a pure-Python loop, a numpy sort, and the
    first touch of 512 MiB of fresh memory (page faults: on a VM whose host backs memory lazily
    they cost 5-20 times more, and every command's columns are fresh memory). Figures from
    different sessions compare only where these agree: the same VM type ran 2.2 x slower on
    another day (benchmarks/README, session 33)."""
    try:
        out = subprocess.run([PYTHON, "-c", _SPEED_PROBE], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}).stdout.split()
        loop, sort, touch = (float(v) for v in out)
    except (subprocess.SubprocessError, ValueError, OSError):
        return "speed probe failed"
    return (f"a Python loop of 10^7 additions {loop:.2f} s, numpy's sort of 10^7 doubles {sort:.3f} s, a fresh "
            f"process's first touch of 512 MiB {touch:.2f} s ({touch / (1 << 17) * 1e6:.1f} µs a 4 KiB page)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="200,1000", help="single-rank JSON sizes in MB (default %(default)s; '' for none)")
    p.add_argument("--ranks", type=int, default=16, help="also N ranks of --rank-mb MB (0: none; default %(default)s)")
    p.add_argument("--rank-mb", type=int, default=50)
    p.add_argument("--ranks-from", default="",
                   help="also --ranks ranks grown from each of these real traces (comma-separated; default none)")
    p.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "pr-bench")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--hta-python", default="/work/hta-venv/bin/python",
                   help="an interpreter with HolisticTraceAnalysis==0.5.0 ('' to skip HTA)")
    p.add_argument("--tracelens-python", default="/work/tl-venv/bin/python",
                   help="an interpreter with TraceLens installed ('' to skip it)")
    p.add_argument("--tracelens-mb", type=int, default=200,
                   help="also a rank of this many MB grown from a trace TraceLens reads (0: none; default %(default)s)")
    p.add_argument("--tracelens-source", type=Path, default=TRACELENS_SOURCE,
                   help="the real trace it is grown from (default: %(default)s)")
    p.add_argument("--grow-from", default=",".join(str(p) for p in GROW_SOURCES),
                   help="also a --grown-mb MB rank grown from each of these real traces (comma-separated; '' for "
                        "none; default: an event-dense V100 trace and a many-step MI250 one)")
    p.add_argument("--grown-mb", type=int, default=200)
    p.add_argument("--gzipped-mb", type=int, default=200,
                   help="also the default rank of this many MB as .json.gz: analyze and compare (0: none; "
                        "default %(default)s)")
    p.add_argument("--compact-from", default=str(GROW_SOURCES[0]),
                   help="also a --grown-mb MB rank grown from this real trace written compact, without spaces "
                        "(as orjson and msgspec write JSON: the most events per MB; '' for none; default: the V100 "
                        "trace)")
    p.add_argument("--many-steps-from", default=",".join(str(s) for s in MANY_STEPS_SOURCES),
                   help="also a --many-steps-mb MB rank grown from each of these tiny real traces with steps, "
                        "comma-separated, without HTA ('' for none; default: the triton example and HTA's "
                        "trace_compare tiny)")
    p.add_argument("--many-steps-mb", type=int, default=1000)
    p.add_argument("--hta-timeout", type=float, default=300.0,
                   help="stop HTA after this many seconds (its time is then a lower bound; default %(default)s)")
    p.add_argument("--no-demo", action="store_true")
    p.add_argument("--suite", action="store_true", help="also time the README's test command (python -m pytest)")
    args = p.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    hta = args.hta_python if args.hta_python and Path(args.hta_python).exists() else None
    tracelens = args.tracelens_python if args.tracelens_python and Path(args.tracelens_python).exists() else None
    before = os.getloadavg()
    print(f"Machine: {machine()}. 1/5/15-min load average before: {before[0]:.1f} / {before[1]:.1f} / {before[2]:.1f}.")
    print(f"Speed: {speed()}.")
    cases = []
    for mb in [int(s) for s in args.sizes.split(",") if s.strip()]:
        folder, twin, json_mb = one_rank_folders(mb, args.workdir)
        cases.append(run_case(f"1 rank, {json_mb:,.0f} MB", folder, twin, json_mb, 1, args.repeat, hta, None))
    if args.tracelens_mb and args.tracelens_source.exists():
        folder, twin, json_mb = one_rank_folders(args.tracelens_mb, args.workdir / "tracelens-source",
                                                 args.tracelens_source)
        cases.append(run_case(f"1 rank, {json_mb:,.0f} MB grown from {args.tracelens_source.parent.name}", folder, twin,
                              json_mb, 1, args.repeat, hta, tracelens))
    for source in [Path(s) for s in args.grow_from.split(",") if s.strip()]:
        if not source.exists():
            print(f"  {source}: not found, skipped", file=sys.stderr)
            continue
        name = source.parent.name
        folder, twin, json_mb = one_rank_folders(args.grown_mb, args.workdir / f"grown-{name}", source)
        cases.append(run_case(f"1 rank, {json_mb:,.0f} MB grown from {name}", folder, twin, json_mb, 1, args.repeat,
                              hta, None, args.hta_timeout))
    if args.gzipped_mb:
        folder, twin, json_mb = one_rank_folders(args.gzipped_mb, args.workdir, gzipped=True)
        cases.append(run_case(f"1 rank, {json_mb:,.0f} MB (.json.gz)", folder, twin, json_mb, 1, args.repeat, None,
                              None))
    if args.compact_from and Path(args.compact_from).exists():
        source = Path(args.compact_from)
        name = source.parent.name
        folder, twin, json_mb = one_rank_folders(args.grown_mb, args.workdir / f"compact-{name}", source, "compact")
        cases.append(run_case(f"1 rank, {json_mb:,.0f} MB grown from {name} (compact JSON)", folder, twin, json_mb, 1,
                              args.repeat, hta, None, args.hta_timeout))
    for source in [Path(s) for s in args.many_steps_from.split(",") if s.strip()] if args.many_steps_mb else []:
        if not source.exists():
            print(f"  {source}: not found, skipped", file=sys.stderr)
            continue
        name = _source_name(source)
        folder, twin, json_mb = one_rank_folders(args.many_steps_mb, args.workdir / f"many-steps-{name}", source)
        cases.append(run_case(f"1 rank, {json_mb:,.0f} MB grown from {name} (many steps)", folder, twin,
                              json_mb, 1, args.repeat, None, None))
    if args.ranks:
        folder, twin, json_mb = many_rank_folders(args.ranks, args.rank_mb, args.workdir)
        cases.append(run_case(f"{args.ranks} ranks × {json_mb:,.0f} MB (.json.gz)", folder, twin, json_mb, args.ranks,
                              args.repeat, hta, None))
        for source in [Path(s) for s in args.ranks_from.split(",") if s.strip()]:
            name = source.parent.name
            folder, twin, json_mb = many_rank_folders(args.ranks, args.rank_mb, args.workdir / f"ranks-{name}", source)
            cases.append(run_case(f"{args.ranks} ranks × {json_mb:,.0f} MB (.json.gz) grown from {name}", folder, twin,
                                  json_mb, args.ranks, args.repeat, hta, None, args.hta_timeout))
    suite = None
    if args.suite:
        print("  the README's test command", file=sys.stderr)
        suite = median_run([PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider"], 1)
    if cases:
        print("\n### The tools side by side\n\n" + "\n".join(tools_table(cases)))
        print("\n### Where perfreport's time and memory go (report.json `timings`, CPU seconds of one rank task)\n\n"
              + "\n".join(phases_table(cases)))
    if not args.no_demo:
        print("\n### Demo quick start\n\n" + "\n".join(demo(args.repeat)))
    print("\n### Targets (issue 24)\n\n" + "\n".join(targets_table(cases, suite)))
    after = os.getloadavg()
    print(f"\n1/5/15-min load average after: {after[0]:.1f} / {after[1]:.1f} / {after[2]:.1f}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
