"""Every real trace grown to one size and analysed: which kind of trace is slow, and where.

    python benchmarks/survey.py [--mb 100] [--repeat 3] [--traces ../shared/traces]
                                [--workdir /tmp/pr-survey] [--hta-timeout 0]

``commands.py`` times the issue's cases (the A100 rank and three grown ones); a trace unlike
them can take another path through the loader and the analyses. This grows the first rank file
of every folder under ``--traces`` to ``--mb`` MB (``load.py``'s generator: copies of the trace
shifted in time, ids made unique) and times ``perfreport analyze --format json -v`` on each,
with what report.json's timings and the command's stderr say: the slowest phase, and the writing
of the report files after the timings were taken (not in report.json). ``--hta-timeout S`` also
runs HTA 0.5.0 once per trace (the same load and five analyses as ``commands.py``), stopped
after S seconds. Prints one Markdown table; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from commands import HTA_SCRIPT, MB, REPO, Run, gen, median_run, perfreport  # noqa: E402


def grown(source: Path, mb: int, workdir: Path) -> tuple[Path, int]:
    """A folder holding one rank of ``mb`` MB grown from ``source`` (``rank0.json``, a symlink:
    HTA reads folders), and its event count."""
    workdir.mkdir(parents=True, exist_ok=True)
    json_path, _, info = gen.generate(gen.read_source(source), mb, "line", 6, workdir)
    folder = workdir / "rank"
    folder.mkdir(exist_ok=True)
    if not (folder / "rank0.json").exists():
        (folder / "rank0.json").symlink_to(json_path)
    return folder, info.events


def slowest_phase(run: Run) -> str:
    """The rank task's phase with the most self time (wall time not spent in a nested phase),
    as ``name s``."""
    rows = [r for r in run.timings.get("rank_phases", []) if not r["phase"].startswith("wait")]
    if not rows:
        return "–"
    top = max(rows, key=lambda r: r.get("self_s", 0.0))
    return f"{top['phase']} {top['self_s']:.2f}"


def writing_s(run: Run) -> float:
    """Seconds ``-v`` reports for writing the report files after the timings were taken."""
    found = re.search(r"writing the report files, ([\d.]+) s", run.stderr)
    return float(found.group(1)) if found else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=int, default=100, help="size each trace is grown to (default %(default)s)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--traces", type=Path, default=REPO.parent / "shared" / "traces")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/pr-survey"))
    p.add_argument("--hta-timeout", type=float, default=0.0, help="also run HTA, stopped after this many s (0: not)")
    p.add_argument("--hta-python", default="/work/hta-venv/bin/python")
    args = p.parse_args(argv)

    rows, walls = [], []
    for folder in sorted(d for d in args.traces.iterdir() if d.is_dir()):
        sources = sorted(f for f in folder.rglob("*") if f.name.endswith((".json", ".json.gz")))
        if not sources:
            continue
        print(f"  {folder.name}", file=sys.stderr)
        try:
            rank, events = grown(sources[0], args.mb, args.workdir / folder.name)
        except Exception as exc:  # a trace the generator cannot grow: say so, go on
            rows.append(f"| {folder.name} | cannot grow: {type(exc).__name__} | | | | | | |")
            continue
        out = args.workdir / folder.name / "out"
        run = median_run(perfreport("analyze", str(rank / "rank0.json"), "--format", "json", "--out", str(out), "-v"),
                         args.repeat, report=out / "report.json")
        hta = "–"
        if args.hta_timeout > 0:
            try:
                h = median_run([args.hta_python, "-c", HTA_SCRIPT, str(rank)], 1, timeout=args.hta_timeout)
            except SystemExit as exc:  # HTA cannot analyse this trace (one without GPU kernels): a finding, go on
                print(str(exc)[-400:], file=sys.stderr)
                hta = "fails"
            else:
                hta = (f"> {h.wall:.0f} (≥ {h.wall / run.wall:.0f} ×)" if h.timed_out
                       else f"{h.wall:.1f} ({h.wall / run.wall:.1f} ×)")
        walls.append(run.wall)
        report_mb = (out / "report.json").stat().st_size / MB if (out / "report.json").exists() else float("nan")
        rows.append(f"| {folder.name} | {events:,} | {run.wall:.2f} ({run.low:.2f}–{run.high:.2f}) | "
                    f"{run.wall / (args.mb / 1000):.1f} | {report_mb:.1f} | {writing_s(run):.2f} | {slowest_phase(run)} | {hta} |")

    print(f"### Every trace grown to {args.mb} MB: `analyze --format json` (median of {args.repeat})\n")
    print("| trace | events | wall s (min–max) | s per GB | report.json MB | writing the reports s | "
          "slowest phase (self s) | HTA 0.5.0 s (× perfreport) |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    print("\n".join(rows))
    if walls:
        print(f"\nMedian wall {statistics.median(walls):.2f} s over {len(walls)} traces.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
