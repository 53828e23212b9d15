"""``perfreport step-trace --report DIR``: one judged step of each side as a small trace file.

Reads ``DIR/report.json`` (written by ``perfreport compare``), picks the steps
(:func:`perfreport.step_trace.pick_steps`), reads the two rank files again and writes
``DIR/step-traces/{baseline,candidate}-rankR-stepN.pt.trace.json`` and ``index.json``. The
GitHub Action runs it after every comparison, so the report artifact holds both.
"""

from __future__ import annotations

import argparse

from ..step_trace import MAX_BYTES, OPEN_HINT, write_step_traces


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("step-trace", help="cut the judged step that moved most out of each side's trace",
                       description="Write one judged profiler step of the baseline and of the candidate as small "
                                   "Kineto JSON files (for Perfetto, chrome://tracing or perfreport).")
    p.add_argument("--report", required=True, metavar="DIR", help="a comparison's report folder (with report.json)")
    p.add_argument("--out", default=None, metavar="DIR", help="where to write them (default: DIR/step-traces)")
    p.add_argument("--max-mb", type=float, default=MAX_BYTES / 1e6, metavar="MB",
                   help=f"largest file, in MB (default {MAX_BYTES / 1e6:g}); a longer step is cut, and says where")
    p.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE",
                   help="a resource limit for reading the traces, as for compare (repeatable)")
    p.set_defaults(run=cmd_step_trace)


def cmd_step_trace(args: argparse.Namespace) -> int:
    from ..errors import PerfreportError

    if not 0.01 <= args.max_mb <= 1000:
        raise PerfreportError(f"--max-mb {args.max_mb:g}: use 0.01 to 1000")
    for e in write_step_traces(args.report, out=args.out, max_bytes=int(args.max_mb * 1e6)):
        cut = f", cut {e['cut_after_us'] / 1000:.1f} ms into the step" if e["cut_after_us"] is not None else ""
        print(f"perfreport: {e['side']} rank {e['rank']} step {e['step']} ({e['step_time_ms']:.2f} ms): {e['file']}, "
              f"{e['bytes'] / 1e6:.1f} MB, {e['events']:,} of {e['events_in_step']:,} events{cut}")
    print(f"perfreport: {OPEN_HINT}")
    return 0
