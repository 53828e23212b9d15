"""``perfreport archive add|list|show|rm``: keep a release's report set in a static site folder."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from ..errors import ArchiveError, printable


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("archive", help="per-release archive site (add, list, show, rm)",
                       description="A static site of every release's report and trends, for GitHub Pages.")
    asub = p.add_subparsers(dest="archive_command", required=True, metavar="ACTION")

    a = asub.add_parser("add", help="archive a report folder as release TAG")
    a.add_argument("--release", required=True, metavar="TAG", help="the release tag, e.g. v1.4.0")
    a.add_argument("--report", required=True, metavar="DIR", help="a report folder from perfreport compare --out")
    _store_argument(a)
    a.add_argument("--force", action="store_true", help="replace an archived release of that tag")
    a.add_argument("--commit", default=None, metavar="SHA", help="the release's commit (default: $GITHUB_SHA)")
    a.add_argument("--date", default="", metavar="ISO",
                   help="the release's date, ISO 8601 (default: now, UTC); releases are listed by date")
    a.set_defaults(run=cmd_add)

    a = asub.add_parser("list", help="list the archived releases")
    _store_argument(a)
    a.add_argument("--json", action="store_true", help="print index.json's releases")
    a.set_defaults(run=cmd_list)

    a = asub.add_parser("show", help="show one archived release")
    a.add_argument("tag", metavar="TAG")
    _store_argument(a)
    a.set_defaults(run=cmd_show)

    a = asub.add_parser("rm", help="remove an archived release")
    a.add_argument("tag", metavar="TAG")
    _store_argument(a)
    a.set_defaults(run=cmd_rm)


def _store_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", required=True, metavar="SITE", help="the site folder (created if missing)")


def cmd_add(args: argparse.Namespace) -> int:
    from . import store

    commit = args.commit if args.commit is not None else os.environ.get("GITHUB_SHA", "")
    entry = store.add(args.store, args.release, args.report, force=args.force, commit=commit, date=args.date)
    print(f"archived {entry['tag']} ({entry['status'] or 'no verdict'}) in {printable(args.store)}: "
          f"{len(entry['files'])} file(s); index: {printable(Path(args.store) / store.INDEX_HTML)}")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    """The releases, then every problem of the site that no command can put right (exit 2
    when there is one); what a killed run left is cleared first where the site is writable."""
    from ..report.templates import format_value
    from . import store
    from .metrics import KEY_METRICS

    index = _existing(args.store)
    if args.json:
        print(json.dumps(index["releases"], indent=2, ensure_ascii=True))
    elif not index["releases"]:
        print(f"no release archived in {printable(args.store)}")
    else:
        step = next(m for m in KEY_METRICS if m.key == "step_time_us")
        print(f"{'release':<24} {'date (UTC)':<17} {'verdict':<8} {step.label:>12}")
        for r in index["releases"]:
            date = str(r.get("date", ""))[:16].replace("T", " ")
            value = format_value((r.get("metrics") or {}).get(step.key), step.unit)
            print(f"{r['tag']:<24} {date:<17} {printable(r.get('status') or '–'):<8} {value:>12}")
    found = store.problems(Path(args.store))
    for problem in found:
        print(f"perfreport: error: {printable(args.store)}: cannot recover: {problem}", file=sys.stderr)
    return 2 if found else 0


def cmd_show(args: argparse.Namespace) -> int:
    from ..report.templates import format_value
    from . import store
    from .metrics import KEY_METRICS

    entry = store.find(_existing(args.store), args.tag)
    if entry is None:
        raise ArchiveError(f"{args.store}: no archived release {args.tag}")
    print(f"release   {entry['tag']}\ndate      {entry.get('date', '')}\n"
          f"commit    {printable(entry.get('commit') or '–')}\n"
          f"verdict   {printable(entry.get('status') or '–')}: {printable(entry.get('headline', ''))}")
    for m in KEY_METRICS:
        print(f"  {m.label:<32} {format_value((entry.get('metrics') or {}).get(m.key), m.unit)}")
    for name, value in (entry.get("kernels") or {}).items():
        print(f"  kernel {printable(name[:60]):<60} {format_value(value, 'us')}/step")
    for f in entry.get("files", []):
        print(f"  {printable(Path(args.store) / f)}")
    return 0


def cmd_rm(args: argparse.Namespace) -> int:
    from . import store

    entry = store.remove(args.store, args.tag)
    print(f"removed {entry['tag']} from {printable(args.store)}")
    return 0


def _existing(site: str) -> dict:
    from . import store

    if not (Path(site) / store.INDEX_JSON).is_file():
        raise ArchiveError(f"{site}: no archive here (no {store.INDEX_JSON}); create one with perfreport archive add")
    if os.access(site, os.W_OK):  # a read-only checkout is read as it is
        with store.locked(Path(site)):  # first clear what a killed run left, saying so
            pass
    return store.read_index(Path(site))
