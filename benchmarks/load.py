#!/usr/bin/env python3
"""Benchmark ``perfreport.load.load`` on big single-rank Kineto traces.

    python benchmarks/load.py [--sizes 50,200,1000] [--source PATH] [--workdir DIR] [--keep]

Real traces of the sizes that matter (hundreds of MB to GBs per rank) are too big to keep in
the repository, so this script *makes* them: it replicates the events of a real trace K times,
back to back in time, with ids kept unique, until the JSON text reaches each requested size.
Every trace is written twice, as plain ``.json`` and as ``.json.gz``, because users hand us both
and gzip costs real time.

Each (size, variant) is then loaded in a fresh Python process, so that its peak RSS is the
loader's alone and not polluted by the generator or by an earlier load. The table printed at
the end is Markdown, ready to paste into benchmarks/README.md.

Units: 1 MB = 10**6 bytes. MB/s is per MB of the *uncompressed* JSON text, for both variants
(so the gzip row shows what decompression costs on top).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import gzip
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = Path("/work/shared/traces/pair_hta_trace_diff/control/control.json.gz")
DEFAULT_SIZES_MB = (50, 200, 1000)
MB = 1_000_000
TARGET_CPU_MB_S = 1000.0
"""Throughput target (issue 24): MB of JSON text per CPU-second of the whole load (read,
decompress, scan, decode), i.e. 1 GB/s per core."""
TARGET_PEAK_RATIO = 1.3
"""Memory target: peak RSS of a loading process at most this many times its JSON size."""
PHASES = ("decompress", "scan", "decode")
"""Phases of the load (perfreport.timing) shown in the table with their CPU seconds."""
GAP_US = 1000
"""Idle time left between two copies of the source trace."""
CHUNK_EVENTS = 30_000
"""Events are encoded and written in chunks of this many (~8 MB): never the whole text at once."""
FLOW_PHASES = ("s", "f", "t")
STEP = re.compile(r"^(ProfilerStep\s*#\s*)(\d+)$")
LAYOUTS = ("line", "indent", "compact")
GENERATOR_VERSION = 2
"""Bump when the generated text changes, so that traces kept from an older run are not reused."""


# --- the source trace -------------------------------------------------------------------
@dataclass
class Source:
    """A real trace, decoded, plus what is needed to shift its copies in time and in id space."""

    path: Path
    head: list[tuple[str, object]]
    """Top-level keys before ``traceEvents`` (schemaVersion, deviceProperties, ...), in order."""
    tail: list[tuple[str, object]]
    """Top-level keys after ``traceEvents`` (Kineto writes traceName, baseTimeNanoseconds here)."""
    events: list[dict]
    span_us: float
    id_stride: int
    step_stride: int


def read_source(path: Path) -> Source:
    """Decode ``path`` with the package's own reader (so .json and .json.gz both work)."""
    from perfreport.load.files import read_trace_bytes  # only the parent process needs perfreport here

    top = json.loads(read_trace_bytes(path))
    keys = list(top)
    at = keys.index("traceEvents")
    events = top["traceEvents"]
    starts = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    ends = [e["ts"] + e.get("dur", 0) for e in events if isinstance(e.get("ts"), (int, float))]
    steps = [int(m.group(2)) for e in events if (m := STEP.match(str(e.get("name", ""))))]
    return Source(
        path=path,
        head=[(k, top[k]) for k in keys[:at]],
        tail=[(k, top[k]) for k in keys[at + 1:]],
        events=events,
        span_us=max(ends) - min(starts),
        id_stride=_max_id(events) + 1,
        step_stride=(max(steps) - min(steps) + 1) if steps else 0,
    )


def _max_id(events: list[dict]) -> int:
    """Largest correlation, External id or flow id: copy k adds k * (this + 1) to all of them."""
    best = 0
    for e in events:
        args = e.get("args") or {}
        for value in (args.get("correlation"), args.get("External id"), e.get("id") if e.get("ph") in FLOW_PHASES else None):
            if isinstance(value, int) and value > best:
                best = value
    return best


# --- copies -----------------------------------------------------------------------------
def shifted_copy(source: Source, k: int) -> Iterator[dict]:
    """Events of copy ``k``: later by k x (span + gap), ids and step numbers moved past copy k-1's.

    Copy 0 is the source itself. Process/thread metadata events (ph "M") appear in copy 0 only,
    as in one long real trace. Events are shallow copies: the source is never modified.
    """
    if k == 0:
        yield from source.events
        return
    dt = k * (source.span_us + GAP_US)
    did = k * source.id_stride
    for e in source.events:
        if e.get("ph") == "M":
            continue
        out = dict(e)
        if isinstance(e.get("ts"), (int, float)):
            out["ts"] = e["ts"] + dt
        if e.get("ph") in FLOW_PHASES and isinstance(e.get("id"), int):
            out["id"] = e["id"] + did
        if source.step_stride and (m := STEP.match(str(e.get("name", "")))):
            out["name"] = f"{m.group(1)}{int(m.group(2)) + k * source.step_stride}"
        args = e.get("args")
        if args and ("correlation" in args or "External id" in args):
            args = out["args"] = dict(args)
            for key in ("correlation", "External id"):
                if isinstance(args.get(key), int):
                    args[key] += did
        yield out


def encode_event(event: dict, layout: str) -> str:
    """One event as text. ``line``: one event per line, Kineto's ", "/": " separators but no
    indentation (~284 B/event on the default source against Kineto's ~319: denser text means
    more events per MB, so MB/s and peak/JSON are measured on the hard side). ``indent``:
    ``json.dumps(indent=1)``, closer to Kineto's whitespace. ``compact``: no space after ':' and
    ',' (``separators=(",", ":")``, as orjson and msgspec write JSON): the densest text, ~250
    B/event."""
    if layout == "indent":
        return json.dumps(event, indent=1)
    if layout == "compact":
        return json.dumps(event, separators=(",", ":"))
    return json.dumps(event)


# --- writing ----------------------------------------------------------------------------
@dataclass
class Generated:
    """What was written, and from what (stored beside the files, to reuse them next time)."""

    generator: int
    source: str
    source_mtime: float
    target_mb: int
    layout: str
    gzip_level: int
    copies: float
    events: int
    json_bytes: int
    gz_bytes: int


class TeeWriter:
    """Writes each chunk to the plain file and (in a background thread) to the gzip file.

    zlib releases the GIL, so compression overlaps with the JSON encoding of the next chunk.
    At most one chunk is in flight: memory stays at about two chunks.
    """

    def __init__(self, json_path: Path, gz_path: Path, level: int):
        self.plain = open(json_path, "wb")
        self.gz = gzip.open(gz_path, "wb", compresslevel=level)
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.pending: concurrent.futures.Future | None = None
        self.bytes = 0

    def write(self, text: str) -> None:
        data = text.encode("utf-8")
        self.plain.write(data)
        if self.pending is not None:
            self.pending.result()
        self.pending = self.pool.submit(self.gz.write, data)
        self.bytes += len(data)

    def close(self) -> None:
        if self.pending is not None:
            self.pending.result()
        self.pool.shutdown()
        self.plain.close()
        self.gz.close()


def all_copies(source: Source) -> Iterator[dict]:
    """Copy 0, copy 1, ... without end: the writer stops when the text is big enough."""
    for k in itertools.count():
        yield from shifted_copy(source, k)


def write_trace(source: Source, target_bytes: int, layout: str, json_path: Path, gz_path: Path, level: int) -> tuple[int, int]:
    """Stream copies of the source's events to both files until the text reaches ``target_bytes``
    (the last copy is usually partial). Returns (events, JSON bytes)."""
    out = TeeWriter(json_path, gz_path, level)
    try:
        out.write("{\n" + "".join(f'  "{k}": {json.dumps(v)},\n' for k, v in source.head) + '  "traceEvents": [\n')
        chunk: list[str] = []
        size = out.bytes
        n = 0
        for event in all_copies(source):
            text = ("  " if n == 0 else ",\n  ") + encode_event(event, layout)
            chunk.append(text)
            size += len(text)
            n += 1
            if size >= target_bytes or len(chunk) >= CHUNK_EVENTS:
                out.write("".join(chunk))
                chunk = []
                if size >= target_bytes:
                    break
        out.write("\n  ]" + "".join(f',\n  "{k}": {json.dumps(v)}' for k, v in source.tail) + "\n}\n")
    finally:
        out.close()
    return n, out.bytes


def generate(source: Source, target_mb: int, layout: str, level: int, workdir: Path) -> tuple[Path, Path, Generated]:
    """The plain and gzipped trace of about ``target_mb`` MB in ``workdir``, reused if already there."""
    json_path = workdir / f"trace_{target_mb}MB_{layout}.json"
    gz_path, info_path = Path(f"{json_path}.gz"), info_path_of(json_path)
    expected = dict(generator=GENERATOR_VERSION, source=str(source.path), source_mtime=source.path.stat().st_mtime,
                    target_mb=target_mb, layout=layout, gzip_level=level)
    if info_path.exists() and json_path.exists() and gz_path.exists():
        info = json.loads(info_path.read_text())
        if all(info.get(k) == v for k, v in expected.items()):
            return json_path, gz_path, Generated(**info)
    info_path.unlink(missing_ok=True)  # written again only once both files are complete
    t0 = time.perf_counter()
    events, json_bytes = write_trace(source, target_mb * MB, layout, json_path, gz_path, level)
    copies = round(events / len(source.events), 2)
    info = Generated(**expected, copies=copies, events=events, json_bytes=json_bytes, gz_bytes=gz_path.stat().st_size)
    info_path.write_text(json.dumps(asdict(info), indent=1))
    print(f"  wrote {json_path.name}: {copies} copies, {events:,} events, {json_bytes / MB:.0f} MB "
          f"(.gz {info.gz_bytes / MB:.0f} MB) in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return json_path, gz_path, info


def info_path_of(json_path: Path) -> Path:
    return json_path.with_suffix(".info.json")


def remove(files: list[Path], folder: Path | None) -> None:
    """Delete the generated traces (they are big), and ``folder`` too when this run made it."""
    for f in files:
        f.unlink(missing_ok=True)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


# --- measuring --------------------------------------------------------------------------
@dataclass
class Measurement:
    """One load of one file in a fresh process."""

    wall_s: float
    cpu_s: float
    """CPU time of the load (user + system): robust when other jobs share the cores."""
    events: int
    scanner: str
    baseline_rss_kb: int
    """RSS of the child after importing perfreport, before loading: not the loader's doing."""
    peak_rss_kb: int
    """VmHWM of the child: see :func:`measure` for why not ``ru_maxrss``."""
    phase_cpu_s: dict[str, float]
    """CPU seconds of each phase of the load (perfreport.timing): where the time goes."""


def child_main(path: str, python_scanner: bool) -> None:
    """Run in the fresh process: import, load once, print one JSON line with the figures."""
    from perfreport.load import load, scanner
    from perfreport.load.scanner import scanner_name
    from perfreport.timing import recording

    if python_scanner:
        scanner._scan = None  # as if the C extension had not been built

    baseline = _status_kb("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    with recording() as timings:  # one file: loaded in this process and thread
        traces = load(path)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    events = sum(t.n_events for t in traces)
    used = scanner_name() + (" (sanitizer build!)" if sanitizer_loaded() else "")
    phases = {r["phase"]: r["cpu_s"] for r in timings.records()}
    if "decompress (own thread, beside the scan)" in phases:  # a gzipped text scanned as it is decompressed
        phases["decompress"] = phases.get("decompress", 0.0) + phases["decompress (own thread, beside the scan)"]
    print(json.dumps(dict(wall_s=wall, cpu_s=cpu, events=events, scanner=used, phase_cpu_s=phases,
                          baseline_rss_kb=baseline, peak_rss_kb=_status_kb("VmHWM"))))


def sanitizer_loaded() -> bool:
    """True when an ASan/UBSan-instrumented build of the C scanner is in use: its timings and
    memory figures mean nothing (the scanner's author builds one now and then, in place)."""
    with open("/proc/self/maps") as f:
        return any("libasan" in line or "libubsan" in line for line in f)


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def measure(path: Path, python_scanner: bool = False) -> Measurement:
    """Load ``path`` in a fresh interpreter and collect the figures it prints.

    Peak RSS is the child's own VmHWM. ``ru_maxrss`` (getrusage/wait4) would be wrong here:
    Linux carries the high-water mark of the pre-exec image into it, i.e. the RSS of this
    parent at fork time, which holds the decoded source trace (~220 MB) and would mask
    every load smaller than that.
    """
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    command = [sys.executable, __file__, "--child", str(path)] + (["--python-scanner"] if python_scanner else [])
    done = subprocess.run(command, stdout=subprocess.PIPE, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"loading {path} failed (exit {done.returncode})")
    return Measurement(**json.loads(done.stdout.decode().strip().splitlines()[-1]))


@dataclass
class Row:
    """All runs of one (size, variant): one line of the table."""

    size_mb: int
    variant: str
    json_bytes: int
    file_bytes: int
    runs: list[Measurement]

    @property
    def wall_s(self) -> float:
        """Best of the runs: on a shared machine the slower runs measure the neighbours."""
        return min(m.wall_s for m in self.runs)

    @property
    def cpu_s(self) -> float:
        return min(m.cpu_s for m in self.runs)

    @property
    def mb_s(self) -> float:
        return self.json_bytes / MB / self.wall_s

    @property
    def cpu_mb_s(self) -> float:
        """MB per CPU-second: what the wall figure would be on an otherwise idle core."""
        return self.json_bytes / MB / self.cpu_s

    def phase_cpu_s(self, name: str) -> float | None:
        """CPU seconds of one phase in the run with the least CPU (None: the phase did not run)."""
        best = min(self.runs, key=lambda m: m.cpu_s)
        return best.phase_cpu_s.get(name)

    @property
    def peak_bytes(self) -> int:
        return max(m.peak_rss_kb for m in self.runs) * 1024

    @property
    def baseline_bytes(self) -> int:
        return max(m.baseline_rss_kb for m in self.runs) * 1024


def markdown_table(rows: list[Row]) -> str:
    """The results, one line per (size, variant), with the targets checked beside the numbers."""
    lines = [
        f"| JSON MB | file | events | scanner | load s (best of {len(rows[0].runs)}) | MB/s "
        f"| CPU s | MB/CPU-s (≥ {TARGET_CPU_MB_S:.0f}) | "
        + " | ".join(f"{p} CPU s (MB/CPU-s)" for p in PHASES)
        + f" | peak RSS MB | of which imports | peak / JSON (≤ {TARGET_PEAK_RATIO:g}) | (peak − imports) / JSON |",
        "|---:|---|---:|---|---:|---:|---:|---:|" + "---:|" * len(PHASES) + "---:|---:|---:|---:|",
    ]
    for r in rows:
        ratio = r.peak_bytes / r.json_bytes
        lines.append(
            f"| {r.json_bytes / MB:.0f} | {r.variant} ({r.file_bytes / MB:.0f} MB) | {r.runs[0].events:,} "
            f"| {r.runs[0].scanner} | {r.wall_s:.2f} | {r.mb_s:.0f} "
            f"| {r.cpu_s:.2f} | {r.cpu_mb_s:.0f} {_check(r.cpu_mb_s >= TARGET_CPU_MB_S)} | "
            + " | ".join(_phase_cell(r.phase_cpu_s(p), r.json_bytes) for p in PHASES) + " "
            f"| {r.peak_bytes / MB:.0f} | {r.baseline_bytes / MB:.0f} "
            f"| {ratio:.2f} {_check(ratio <= TARGET_PEAK_RATIO)} "
            f"| {(r.peak_bytes - r.baseline_bytes) / r.json_bytes:.2f} |"
        )
    return "\n".join(lines)


def _phase_cell(cpu_s: float | None, json_bytes: int) -> str:
    if cpu_s is None:
        return "–"
    return f"{cpu_s:.2f} ({json_bytes / MB / cpu_s:.0f})" if cpu_s > 0 else f"{cpu_s:.2f}"


def _check(ok: bool) -> str:
    return "✅" if ok else "❌"


# --- command line -----------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES_MB)), help="JSON sizes in MB (default %(default)s)")
    p.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="real trace to replicate (.json or .json.gz)")
    p.add_argument("--workdir", type=Path, help="where to write the traces (default: a fresh folder in $TMPDIR); "
                   "traces already there from an earlier --keep run with the same settings are reused")
    p.add_argument("--keep", action="store_true", help="keep the generated traces (else they are deleted at the end)")
    p.add_argument("--repeat", type=int, default=3, help="loads per file, each in a fresh process (default %(default)s)")
    p.add_argument("--layout", choices=LAYOUTS, default="line", help="event text layout (see encode_event)")
    p.add_argument("--gzip-level", type=int, default=6, choices=range(1, 10), metavar="1-9", help="default %(default)s")
    p.add_argument("--variants", default="json,json.gz", help="which files to load (default %(default)s)")
    p.add_argument("--python-scanner", action="store_true", help="use the pure-Python scanner even if the C one is built")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        child_main(args.child, args.python_scanner)
        return 0
    sys.path.insert(0, str(REPO))
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    variants = [v.strip() for v in args.variants.split(",")]
    if not set(variants) <= {"json", "json.gz"}:
        raise SystemExit(f"--variants: json and/or json.gz, not {args.variants!r}")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="perfreport-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"source {args.source}; traces in {workdir}", file=sys.stderr)
    source = read_source(args.source)
    rows: list[Row] = []
    written: list[Path] = []
    load_before = os.getloadavg()[0]
    try:
        for size in sizes:
            json_path, gz_path, info = generate(source, size, args.layout, args.gzip_level, workdir)
            written += [json_path, gz_path, info_path_of(json_path)]
            for variant in variants:
                path = json_path if variant == "json" else gz_path
                runs = [measure(path, args.python_scanner) for _ in range(args.repeat)]
                row = Row(size, variant, info.json_bytes, path.stat().st_size, runs)
                rows.append(row)
                print(f"  {path.name}: {row.wall_s:.2f} s, {row.mb_s:.0f} MB/s, peak {row.peak_bytes / MB:.0f} MB",
                      file=sys.stderr)
    finally:
        if not args.keep:
            remove(written, workdir if args.workdir is None else None)
    print(f"\nMeasured {time.strftime('%Y-%m-%d %H:%M')} on {os.cpu_count()} cores, Python {sys.version.split()[0]}, "
          f"layout {args.layout}, gzip level {args.gzip_level}, source {args.source.name}; "
          f"1-min load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after (other jobs on the machine)\n")
    print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
