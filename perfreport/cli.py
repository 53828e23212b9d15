"""The ``perfreport`` command: argument parsing, output files and exit codes only.

Exit codes: 0 success, 2 bad input or usage (one line on stderr naming the file and problem).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from ._io import atomic_write, json_text
from .errors import PerfreportError
from .units import format_pct, format_us

EXIT_OK, EXIT_USAGE = 0, 2
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
    p.add_argument("trace_path", metavar="TRACE_PATH", help="a folder of rank files, or one .json/.json.gz file")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    p.add_argument("--workers", type=int, default=None, metavar="N", help="processes for loading ranks (default: auto)")
    p.set_defaults(run=cmd_analyze)
    return parser


def cmd_analyze(args: argparse.Namespace) -> int:
    from .pipeline import analyze, summary_document

    analysis = analyze(args.trace_path, workers=args.workers)
    out = Path(args.out)
    document = summary_document(analysis)
    atomic_write(out / "summary.json", json_text(document))
    atomic_write(out / "summary.md", render_summary_markdown(document))
    print(render_summary_table(analysis.tables["summary"]))
    print(f"\nloaded {len(analysis.traces)} rank(s) in {analysis.load_s:.2f} s; wrote {out / 'summary.json'}, {out / 'summary.md'}")
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
