"""The ``perfreport`` command: argument parsing, output files and exit codes only.

Subcommands: ``analyze`` (one trace set -> summary.json), ``compare`` (baseline vs candidate ->
report.json and a verdict table), ``baseline save|list|show|rm`` (the baseline store).

Exit codes: 0 success (compare: pass, warnings allowed), 1 compare failed, 2 bad input or
usage (one line on stderr naming the file and problem).
"""

from __future__ import annotations

import argparse
import shlex
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from ._io import atomic_write, json_text
from .errors import PerfreportError
from .units import format_bytes, format_pct, format_us

FORMAT_HELP = "report formats, comma-separated: html,pdf,md,json,junit or all (default: all installed)"
EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
TABLE_ROWS = 40
"""Findings listed in the terminal; the rest are in report.json."""
log = logging.getLogger("perfreport")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="perfreport",
        description="Analyse PyTorch profiler (Kineto) traces: where does the GPU time go?",
    )
    parser.add_argument("--version", action="version", version=f"perfreport {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv: debug)")
    parser.add_argument("--debug", action="store_true", help="show a traceback for unexpected errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("analyze", help="analyse one trace set and write DIR/summary.json")
    p.add_argument("trace_path", metavar="TRACE_PATH",
                   help="a folder of rank files, one .json/.json.gz file, or a stored baseline's folder")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    p.add_argument("--format", default=None, metavar="LIST", help=FORMAT_HELP)
    p.add_argument("--workers", type=int, default=None, metavar="N", help="processes for loading ranks (default: auto)")
    p.set_defaults(run=cmd_analyze)

    p = sub.add_parser("compare", help="judge a candidate against a baseline; write DIR/report.json",
                       description="Compare CANDIDATE with BASELINE and say pass, warn or fail (exit 0, 0, 1).")
    p.add_argument("baseline", metavar="BASELINE",
                   help="a stored baseline name (in --store), a stored baseline folder, or a trace folder/file")
    p.add_argument("candidate", metavar="CANDIDATE",
                   help="a trace folder or file (or a stored baseline, to compare two)")
    p.add_argument("--run", dest="runs", action="append", default=[], metavar="PATH",
                   help="another run of the same candidate (repeatable): with 2 or more runs the run is the unit "
                        "of between-run drift; a multi-run stored baseline brings its own runs")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder for the reports (created if missing)")
    p.add_argument("--format", default=None, metavar="LIST", help=FORMAT_HELP)
    p.add_argument("--config", metavar="FILE", default=None,
                   help="perfreport.toml or pyproject.toml (default: found from the current folder upwards)")
    _store_argument(p)
    p.add_argument("--workers", type=int, default=None, metavar="N", help="processes for loading ranks (default: auto)")
    p.set_defaults(run=cmd_compare)

    p = sub.add_parser("baseline", help="manage stored baselines (save, list, show, rm)")
    bsub = p.add_subparsers(dest="baseline_command", required=True, metavar="ACTION")
    b = bsub.add_parser("save", help="store a trace folder as baseline NAME")
    b.add_argument("name", metavar="NAME")
    b.add_argument("trace_path", metavar="TRACE_DIR", help="a folder of rank files, or one trace file")
    _store_argument(b)
    b.add_argument("--force", action="store_true", help="replace an existing baseline of that name")
    b.add_argument("--append", action="store_true",
                   help="add the traces as another run of baseline NAME (created if missing)")
    b.add_argument("--keep", type=int, default=None, metavar="N", help="with --append: keep only the newest N runs")
    b.add_argument("--commit", metavar="SHA", default=None, help="source commit to record in the manifest")
    b.add_argument("--workers", type=int, default=None, metavar="N", help="processes for loading ranks (default: auto)")
    b.set_defaults(run=cmd_baseline_save)
    b = bsub.add_parser("list", help="list the stored baselines")
    _store_argument(b)
    b.set_defaults(run=cmd_baseline_list)
    b = bsub.add_parser("show", help="show a baseline's manifest")
    b.add_argument("name", metavar="NAME")
    _store_argument(b)
    b.add_argument("--json", action="store_true", help="print the manifest summary as JSON")
    b.add_argument("--verify", action="store_true", help="also verify the checksum of every stored file")
    b.set_defaults(run=cmd_baseline_show)
    b = bsub.add_parser("rm", help="delete a stored baseline")
    b.add_argument("name", metavar="NAME")
    _store_argument(b)
    b.set_defaults(run=cmd_baseline_rm)
    return parser


def _store_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="DIR", default="baselines", help="baseline store folder (default: ./baselines)")


# --- compare ---------------------------------------------------------------------------------
def cmd_compare(args: argparse.Namespace) -> int:
    from .config import load_config
    from .pipeline import compare, report_document
    from .report import build_report, parse_formats, write_reports

    formats = parse_formats(args.format)  # before the slow part: a typo fails fast
    config = load_config(args.config)
    comparison = compare(args.baseline, args.candidate, config=config, store=args.store, workers=args.workers,
                         candidate_runs=args.runs)
    document = report_document(comparison)
    document["command"] = reproduce_command(args)
    out = Path(args.out)
    try:  # report.json is always written: it is what machines and later renders read
        paths = write_reports(build_report(document), out, ("json", *formats))
    except OSError as exc:
        raise PerfreportError(f"{out}: cannot write the report ({exc.strerror or exc})") from None
    print("\n".join(verdict_lines(document)))
    print(f"\nwrote {', '.join(str(p) for p in paths)}")
    return EXIT_FAIL if document["status"] == "fail" else EXIT_OK


def reproduce_command(args: argparse.Namespace) -> str:
    """The command line that reproduces this report (shown in the report's metadata)."""
    return shlex.join(["perfreport", *args.argv])


def verdict_lines(document: dict, max_rows: int = TABLE_ROWS) -> list[str]:
    """The terminal view of a report document: status, sides, findings table, notes, explanation."""
    s = document["summary"]
    counts = f"{s['fail']} failed, {s['warn']} warned, {s['inconclusive']} inconclusive, {s['pass']} passed"
    if s["waived"]:
        counts += f", {s['waived']} waived"
    lines = [f"perfreport compare: {document['status'].upper()} ({counts})"]
    for side in ("baseline", "candidate"):
        d = document[side]
        stored = d["stored_baseline"]
        where = f"{stored['name']} ({d['source']}, saved {stored['created_utc']})" if stored else d["source"]
        lines.append(f"  {side:<9} {where}: {len(d['ranks'])} rank(s), {', '.join(d['gpus']) or 'GPU unknown'}")
    shown = [c for c in document["checks"] if c["status"] != "pass" or not c["counted"]]
    header = ("status", "check", "baseline", "candidate", "change", "threshold", "evidence")
    rows = [header] + [_row(c) for c in shown[:max_rows]]
    if len(rows) > 1:
        widths = [min(max(len(r[i]) for r in rows), 64 if i == 1 else 40) for i in range(len(header))]
        lines.append("")
        lines += ["  " + "  ".join(_cut(cell, w).ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    if len(shown) > max_rows:
        lines.append(f"  … and {len(shown) - max_rows} more (see report.json)")
    lines.append(f"  {s['pass']} check(s) passed" + (" (listed in report.json)" if s["pass"] else ""))
    if document["notes"]:
        lines += ["", "notes:"] + [f"  - {n['message']}" for n in document["notes"]]
    explanation = document.get("explanation")
    if explanation:
        lines += ["", "why the step time changed (attribution: means over the steps the gate judged):"]
        lines += [f"  {line}" for line in explanation["lines"]]
    elif document.get("explanation_note"):
        lines += ["", document["explanation_note"]]
    return lines


def _row(c: dict) -> tuple[str, ...]:
    from .report.json_report import change_text

    status = c["status"].upper() + (" (waived)" if not c["counted"] else "")
    e = c["evidence"]
    evidence = f"{e['baseline_samples']} vs {e['candidate_samples']} samples"
    kind = e.get("sample_kind") or "step"
    if kind == "run":
        evidence = (f"{e['baseline_runs']} vs {e['candidate_runs']} runs "
                    f"({e['baseline_steps']} vs {e['candidate_steps']} steps)")
    elif kind != "step":
        evidence = f"{e['baseline_samples']} vs {e['candidate_samples']} {kind}s"
    if e["p_value"] is not None:
        evidence = f"p={e['p_value']:.2g}, " + evidence
    return (status, c["title"], _value(c["baseline_value"], c["unit"]), _value(c["candidate_value"], c["unit"]),
            change_text(c), c["threshold"]["text"].split(",")[0], evidence)


def _value(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    return format_us(v) if unit == "us" else format_pct(v) if unit == "pct" else f"{v:g}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# --- baseline store --------------------------------------------------------------------------
def cmd_baseline_save(args: argparse.Namespace) -> int:
    from .errors import BaselineError
    from .gate.baseline_runs import append
    from .gate.baselines import check_name, save
    from .load import load

    check_name(args.name)
    if args.append and args.force:
        raise BaselineError("--append adds a run and --force replaces the baseline: use one of them")
    if args.keep is not None and not args.append:
        raise BaselineError("--keep applies with --append only")
    traces = load(args.trace_path, workers=args.workers)
    if args.append:
        stored = append(args.store, args.name, traces, commit=args.commit, keep=args.keep)
    else:
        stored = save(args.store, args.name, traces, force=args.force, commit=args.commit)
    m = stored.manifest
    steps = sum(len(r["steps"]) for r in m["ranks"])
    size = sum(r["bytes"] for r in m["ranks"]) + sum(r["cache_bytes"] for r in m["ranks"])
    runs = f" (run {len(stored.runs)} of {len(stored.runs)})" if args.append else ""
    print(f"saved baseline {stored.name!r}{runs} in {stored.path}: {len(m['ranks'])} rank(s), {steps} profiler "
          f"step(s), {', '.join(m['gpus']) or 'GPU unknown'}, {format_bytes(size)}")
    return EXIT_OK


def cmd_baseline_list(args: argparse.Namespace) -> int:
    from .gate.baselines import list_baselines

    baselines = list_baselines(args.store)
    if not baselines:
        print(f"no baselines in {args.store}")
        return EXIT_OK
    rows = [("name", "ranks", "GPU", "created (UTC)", "commit")]
    for b in baselines:
        rows.append((b.name, str(len(b.ranks)), ", ".join(b.gpus) or "-", b.created_utc, (b.commit or "-")[:12]))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    return EXIT_OK


def cmd_baseline_show(args: argparse.Namespace) -> int:
    from .gate.baselines import open_baseline, verify

    stored = open_baseline(args.store, args.name)
    if args.verify:
        verify(stored)
    summary = stored.summary()
    if args.json:
        print(json_text(summary), end="")
        return EXIT_OK
    print(f"baseline {stored.name!r} ({stored.path})")
    for key in ("created_utc", "commit", "perfreport_version", "source", "gpus", "world_size", "versions"):
        value = summary.get(key)
        print(f"  {key}: {', '.join(value) if isinstance(value, list) else value if value not in ({}, None) else '-'}")
    print(f"  runs: {len(summary['runs'])} (" + ", ".join(
        f"{r['run']}: {r['created_utc']}, {r['steps']} steps" + (f", {r['commit'][:12]}" if r.get("commit") else "")
        for r in summary["runs"]) + ")")
    for r in summary["ranks"]:
        print(f"  rank {r['rank']}: {r['file']} ({format_bytes(r['bytes'])}, sha256 {r['sha256'][:12]}…), "
              f"{r['events']:,} events, steps {r['steps'] or '-'}, from {r['source_file']}")
    if args.verify:
        print("  checksums: all files verified")
    return EXIT_OK


def cmd_baseline_rm(args: argparse.Namespace) -> int:
    from .gate.baselines import remove

    path = remove(args.store, args.name)
    print(f"removed baseline {args.name!r} ({path})")
    return EXIT_OK


def cmd_analyze(args: argparse.Namespace) -> int:
    from .pipeline import analyze, summary_document
    from .report import build_report, parse_formats, write_reports

    formats = parse_formats(args.format)

    if (Path(args.trace_path) / "manifest.json").is_file():  # a stored baseline: its verified traces
        from .pipeline import analyze_loaded, load_candidate

        traces, load_s = load_candidate(args.trace_path, workers=args.workers)
        analysis = analyze_loaded(traces, load_s)
    else:
        analysis = analyze(args.trace_path, workers=args.workers)
    out = Path(args.out)
    document = summary_document(analysis)
    document["command"] = reproduce_command(args)
    try:
        atomic_write(out / "summary.json", json_text(document))
        atomic_write(out / "summary.md", render_summary_markdown(document))
        paths = write_reports(build_report(document), out, formats)
    except OSError as exc:
        raise PerfreportError(f"{out}: cannot write the report ({exc.strerror or exc})") from None
    print(render_summary_table(analysis.tables["summary"]))
    written = ", ".join(str(p) for p in [out / "summary.json", out / "summary.md", *paths])
    print(f"\nloaded {len(analysis.traces)} rank(s) in {analysis.load_s:.2f} s; wrote {written}")
    return EXIT_OK


def render_summary_markdown(document: dict) -> str:
    from .report.templates import render

    return render("summary.md.j2", source=document["source"], ranks=_as_ns(document["summary"]),
                  version=document["perfreport_version"])


def _as_ns(rows: list[dict]) -> list:
    from types import SimpleNamespace

    return [SimpleNamespace(**r) for r in rows]


def render_summary_table(df) -> str:
    """A fixed-width terminal table of the per-rank summary."""
    header = ("rank", "events", "kernels", "memcpy", "memset", "GPU busy", "busy %", "steps", "span", "GPU")
    rows = [header]
    for r in df.to_dict(orient="records"):
        rows.append((
            str(r["rank"]), f"{r['events']:,}", f"{r['kernels']:,}", f"{r['memcpy']:,}", f"{r['memset']:,}",
            format_us(r["gpu_busy_us"]), format_pct(r["gpu_busy_pct"]), str(r["steps"]),
            format_us(r["span_us"]), r["gpu_name"] or "-",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(w) if i < len(header) - 1 else cell for i, (cell, w) in enumerate(zip(row, widths)))
             for row in rows]
    notes = sorted({f"rank {r['rank']}: {r['note']}" for r in df.to_dict(orient="records") if r["note"]})
    return "\n".join(lines + notes)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        format="perfreport: %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return args.run(args)
    except PerfreportError as exc:
        print(f"perfreport: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("perfreport: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, but the user still gets one line, not a traceback
        if args.debug:
            raise
        print(f"perfreport: internal error: {type(exc).__name__}: {exc} (rerun with --debug)", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
