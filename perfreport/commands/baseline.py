"""``perfreport baseline save|list|show|rm``: the baseline store from the command line.

Argument parsing, printing and exit codes only: the store is :mod:`perfreport.gate.baselines`
(and :mod:`perfreport.gate.baseline_runs`); ``save`` loads and analyses each rank on the
executors, as ``analyze`` does (:func:`perfreport.running.rank_task.save_job`).
"""

from __future__ import annotations

import argparse
import os

from ..documents.jsondoc import json_text
import sys

from ..cli import EXIT_OK, EXIT_USAGE, executor_of, limit_argument, run_arguments, store_argument
from ..units import format_bytes


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("baseline", help="manage stored baselines (save, list, show, rm)")
    bsub = p.add_subparsers(dest="baseline_command", required=True, metavar="ACTION")
    b = bsub.add_parser("save", help="store a trace folder as baseline NAME")
    b.add_argument("name", metavar="NAME")
    b.add_argument("trace_path", metavar="TRACE_DIR", help="a folder of rank files, or one trace file")
    store_argument(b)
    b.add_argument("--force", action="store_true", help="replace an existing baseline of that name")
    b.add_argument("--append", action="store_true",
                   help="add the traces as another run of baseline NAME (created if missing)")
    b.add_argument("--keep", type=int, default=None, metavar="N", help="with --append: keep only the newest N runs")
    b.add_argument("--commit", metavar="SHA", default=None,
                   help="source commit to record in the manifest (default: $GITHUB_SHA when set)")
    run_arguments(b)
    limit_argument(b)
    b.set_defaults(run=cmd_baseline_save)
    b = bsub.add_parser("list", help="list the stored baselines")
    store_argument(b)
    b.add_argument("--verify", action="store_true",
                   help="also verify every stored file of every baseline (exit 2 when one fails)")
    b.set_defaults(run=cmd_baseline_list)
    b = bsub.add_parser("show", help="show a baseline's manifest")
    b.add_argument("name", metavar="NAME")
    store_argument(b)
    b.add_argument("--json", action="store_true", help="print the manifest summary as JSON")
    b.add_argument("--verify", action="store_true", help="also verify the checksum of every stored file")
    b.set_defaults(run=cmd_baseline_show)
    b = bsub.add_parser("rm", help="delete a stored baseline")
    b.add_argument("name", metavar="NAME")
    store_argument(b)
    b.set_defaults(run=cmd_baseline_rm)



def cmd_baseline_save(args: argparse.Namespace) -> int:
    """Each rank is loaded, encoded and analysed by a worker (local processes or Dask, as for
    analyze); this process gets back its column cache and digest and writes the store."""
    import dataclasses

    from ..config import load_config
    from ..errors import BaselineError
    from ..running.executor import run as run_executor
    from ..running.rank_task import save_job
    from ..gate.baseline_runs import append
    from ..gate.baselines import check_name, save
    from ..pipeline import analysis_options, source_label, trace_jobs
    from ..running.progress import make_progress

    check_name(args.name)
    if args.append and args.force:
        raise BaselineError("--append adds a run and --force replaces the baseline: use one of them")
    if args.keep is not None and not args.append:
        raise BaselineError("--keep applies with --append only")
    options = analysis_options(load_config(getattr(args, "config", None)))
    executor = executor_of(args)
    commit = args.commit or os.environ.get("GITHUB_SHA") or None  # CI: the commit the traces were recorded at
    progress = make_progress(args.quiet)
    try:
        jobs = trace_jobs(args.trace_path)
        progress.start(len(jobs), sum(j.json_bytes for j in jobs))
        saved = run_executor(jobs, dataclasses.replace(options, attribution=True), executor,
                             on_done=progress.rank_done, task=save_job)
        ranks = _rank_set(source_label(args.trace_path), saved)
        progress.phase("writing the baseline")
        if args.append:
            stored = append(args.store, args.name, ranks, commit=commit, keep=args.keep, options=options)
        else:
            stored = save(args.store, args.name, ranks, force=args.force, commit=commit, options=options)
    finally:
        progress.finish()
    m = stored.manifest
    steps = sum(len(r["steps"]) for r in m["ranks"])
    size = sum(r["bytes"] for r in m["ranks"]) + sum(r["cache_bytes"] for r in m["ranks"])
    runs = f" (run {len(stored.runs)} of {len(stored.runs)})" if args.append else ""
    print(f"saved baseline {stored.name!r}{runs} in {stored.path}: {len(m['ranks'])} rank(s), {steps} profiler "
          f"step(s), {', '.join(m['gpus']) or 'GPU unknown'}, {format_bytes(size)}")
    return EXIT_OK


def _rank_set(source: str, payloads: list):
    """The payloads in rank order, each rank once (as :func:`perfreport.load.load` checks)."""
    from ..gate.baselines import RankSet
    from ..load import one_per_rank

    by_rank = one_per_rank(payloads)
    return RankSet(source, tuple(by_rank[r] for r in sorted(by_rank)))


def cmd_baseline_list(args: argparse.Namespace) -> int:
    from ..gate.baselines import list_baselines

    from ..errors import BaselineError
    from ..gate.baselines import unreadable_baselines, verify

    baselines = list_baselines(args.store)
    broken = unreadable_baselines(args.store)  # (name, why): listed, never skipped in silence
    if not baselines and not broken:
        print(f"no baselines in {args.store}")
        return EXIT_OK
    rows = [("name", "ranks", "GPU", "created (UTC)", "commit") + (("verified",) if args.verify else ())]
    failed = len(broken)
    for b in baselines:
        row = (b.name, str(len(b.ranks)), ", ".join(b.gpus) or "-", b.created_utc, (b.commit or "-")[:12])
        if args.verify:
            try:
                row += (f"ok ({verify(b)} files)",)
            except BaselineError as exc:
                failed += 1
                row += ("FAILED",)
                print(f"perfreport: error: {exc}", file=sys.stderr)
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())
    for name, why in broken:
        print(f"perfreport: {'error' if args.verify else 'warning'}: {why}", file=sys.stderr)
    if failed and args.verify:
        print(f"perfreport: error: {failed} baseline(s) in {args.store} failed verification or cannot be read",
              file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def cmd_baseline_show(args: argparse.Namespace) -> int:
    from ..gate.baselines import open_baseline, verify

    stored = open_baseline(args.store, args.name)
    checked = verify(stored) if args.verify else 0
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
        print(f"  checksums: all files verified ({checked}: rank files by sha256 and whole gzip stream, column "
              f"caches and cached analyses by sha256)")
    return EXIT_OK


def cmd_baseline_rm(args: argparse.Namespace) -> int:
    from ..gate.baselines import remove

    path = remove(args.store, args.name)
    print(f"removed baseline {args.name!r} ({path})")
    return EXIT_OK


