"""The ``perfreport`` command: argument parsing, output files and exit codes only.

Subcommands: ``analyze`` (one trace set -> report.json), ``compare`` (baseline vs candidate ->
report.json and a verdict table), ``baseline save|list|show|rm`` (the baseline store),
``github comment|summary|annotate|outputs`` (CI steps, :mod:`perfreport.github`) and
``archive add|list|show|rm`` (the release site, :mod:`perfreport.archive`).

Exit codes: 0 success (compare: pass, warnings allowed), 1 compare failed, 2 bad input or
usage (one line on stderr naming the file and problem).
"""

from __future__ import annotations

import argparse
import functools
import os
import shlex
import logging
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from . import __version__
from .documents.jsondoc import JsonChunks
from .errors import OneLineFormatter, PerfreportError, printable
from .limits import override as override_limits
from .running.collector import collect_no_more, imports
from .running.lifecycle import keep_until_exit
from .units import format_pct, format_us

FORMAT_HELP = ("report formats, comma-separated: html,pdf,md,json,junit or all (default: all installed); "
               "also benchmark-json (github-action-benchmark) and bmf (Bencher) for compare")
APPENDIX_HELP = "make the PDF the whole report (default: a brief of the first pages; the HTML has everything)"
FULL_TABLES_HELP = ("keep every row of report.json's per-call and per-step tables (default: each rank's first 20,000 "
                    "collective calls and first 10,000 steps, and a check's first 10,000 samples a side; the "
                    "summaries, the gate and the diagnosis use them all)")
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
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output and, for analyze/compare, where the time went (-vv: debug)")
    parser.add_argument("--debug", action="store_true", help="show a traceback for unexpected errors")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("analyze", help="analyse one trace set and write DIR/report.json",
                       aliases=["analyse"])
    p.add_argument("trace_path", metavar="TRACE_PATH",
                   help="a folder of rank files, one .json/.json.gz file, or a stored baseline (its folder, or "
                        "its name in --store)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (created if missing)")
    p.add_argument("--format", default=None, metavar="LIST", help=FORMAT_HELP)
    store_argument(p)
    run_arguments(p)
    p.add_argument("--pdf-appendix", action="store_true", help=APPENDIX_HELP)
    p.add_argument("--full-tables", action="store_true", help=FULL_TABLES_HELP)
    limit_argument(p)
    p.set_defaults(run=cmd_analyze)

    p = sub.add_parser("compare", help="judge a candidate against a baseline; write DIR/report.json",
                       description="Compare CANDIDATE with BASELINE and say pass, warn or fail (exit 0, 0, 1).")
    p.add_argument("baseline", metavar="BASELINE",
                   help="a stored baseline name (in --store), a stored baseline folder, or a trace folder/file")
    p.add_argument("candidate", metavar="CANDIDATE", nargs="+",
                   help="a trace folder or file (or a stored baseline, to compare two); several: one report with a "
                        "column per setup, each judged against BASELINE, the verdict the worst")
    p.add_argument("--label", action="append", default=None, metavar="NAME",
                   help="name of a setup, repeated: one per CANDIDATE, or the BASELINE's first and then one per "
                        "CANDIDATE (default: the folder names)")
    p.add_argument("--run", dest="runs", action="append", default=[], metavar="PATH",
                   help="another run of the same candidate (repeatable): with 2 or more runs the run is the unit "
                        "of between-run drift; a multi-run stored baseline brings its own runs")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder for the reports (created if missing)")
    p.add_argument("--format", default=None, metavar="LIST", help=FORMAT_HELP)
    p.add_argument("--config", metavar="FILE", default=None,
                   help="perfreport.toml or pyproject.toml (default: found from the current folder upwards)")
    store_argument(p)
    run_arguments(p)
    p.add_argument("--pdf-appendix", action="store_true", help=APPENDIX_HELP)
    p.add_argument("--full-tables", action="store_true", help=FULL_TABLES_HELP)
    limit_argument(p)
    p.set_defaults(run=cmd_compare)

    from .archive.commands import add_parser as add_archive
    from .commands.baseline import add_parser as add_baseline
    from .commands.config import add_parser as add_config
    from .github.commands import add_parser as add_github
    from .commands.step_trace import add_parser as add_step_trace

    add_baseline(sub)
    add_github(sub)
    add_archive(sub)
    add_config(sub)
    add_step_trace(sub)
    return parser


def run_arguments(p: argparse.ArgumentParser) -> None:
    """Where ranks load and analyse, and how loudly."""
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="local processes for loading and analysing ranks (default: by cores and free memory)")
    p.add_argument("--executor", choices=("local", "dask"), default="local",
                   help="local processes (default) or tasks on a Dask cluster (needs --scheduler)")
    p.add_argument("--scheduler", metavar="ADDRESS", default=None, help="Dask scheduler, e.g. tcp://10.0.0.5:8786")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    p.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                   help="print where the time went (every phase, parent and rank tasks; report.json keeps them "
                        "as 'timings') and more log output (-vv: debug)")


def executor_of(args: argparse.Namespace, formats: Sequence[str] = ()):
    """The executor the run options name; with report ``formats``, the parent prepares what
    they are rendered with (matplotlib, the compiled templates) while the ranks load in worker
    processes (:func:`perfreport.report.outputs.prepare_renderers`)."""
    from .running.executor import Executor

    if args.scheduler and args.executor != "dask":
        raise PerfreportError("--scheduler is for --executor dask")
    meanwhile = None
    if {"html", "pdf", "md"} & set(formats):  # (json and junit need nothing prepared)
        from .report.outputs import prepare_renderers

        meanwhile = functools.partial(prepare_renderers, tuple(formats))
    return Executor(kind=args.executor, workers=args.workers, scheduler=args.scheduler, while_waiting=meanwhile)


def step_rows(args: argparse.Namespace) -> int | None:
    """The steps of each per-step table the rank tasks send: those report.json keeps, or every
    one with ``--full-tables`` (:attr:`perfreport.running.digest.AnalysisOptions.step_rows`)."""
    from .documents.table_rows import STEP_ROWS

    return None if args.full_tables else STEP_ROWS


def limit_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE",
                   help="raise or lower a resource limit (repeatable; see README, Errors): gzip_ratio, gzip_max_gb, "
                        "max_events, max_name_kb, max_span_s, memory_check=on|off")


def store_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", metavar="DIR", default="baselines", help="baseline store folder (default: ./baselines)")


# --- compare ---------------------------------------------------------------------------------
def cmd_compare(args: argparse.Namespace) -> int:
    from .report.outputs import pdf_renderer
    from .report import parse_formats

    formats = parse_formats(args.format)  # before the slow part: a typo fails fast
    labels = setup_labels(args.baseline, args.candidate, args.label)
    with pdf_renderer(formats) as renderer:  # first: WeasyPrint's import overlaps everything below
        return compare_one(args, labels, formats, renderer) if len(args.candidate) == 1 else \
            compare_setups(args, labels, formats, renderer)


def compare_one(args: argparse.Namespace, labels: list[str], formats, renderer) -> int:
    """``compare BASELINE CANDIDATE``: the verdict table, the report files, exit 1 on a failure."""
    from .timing import phase

    with phase("start: import pandas and the analyses"), imports():
        from .config import load_config
        from .report.outputs import early_figures, write_reports
        from .pipeline import compare, report_document, summary_document
        from .running.progress import make_progress
        from .report import build_report

    config = load_config(args.config)
    executor = executor_of(args, formats=formats)
    progress = make_progress(args.quiet)
    start_early, early = early_figures(formats, args.pdf_appendix), []
    summaries: list[tuple[dict, dict]] = []

    def judged(baseline, candidate) -> None:  # the sides' documents, while the attribution's child runs
        with phase("report: the sides' documents (beside the attribution)"):
            summaries.append((summary_document(baseline, args.full_tables), summary_document(candidate, args.full_tables)))

    try:
        comparison = compare(args.baseline, args.candidate[0], config=config, store=args.store, executor=executor,
                             candidate_runs=args.runs, progress=progress, step_rows=step_rows(args),
                             analysed=start_early and (lambda b, c: early.extend(filter(None, [start_early(b, c)]))),
                             judged=judged)
        progress.phase("writing reports")
        collect_no_more()  # the reports are the command's last stage (perfreport.running.collector)
        with phase("report: document"):
            document = report_document(comparison, args.full_tables, summaries[0] if summaries else None)
        document["command"] = reproduce_command(args)
        document["candidate"]["commit"] = os.environ.get("GITHUB_SHA") or None  # the commit CI checked out
        out = Path(args.out)
        with phase("report: build"):
            report = build_report(document)
    except BaseException:
        for child in early:
            child.stop()
        raise
    finally:
        progress.finish()
    try:  # report.json is always written: it is what machines and later renders read
        paths = write_reports(report, out, ("json", *formats), pdf_appendix=args.pdf_appendix, renderer=renderer,
                              pdf_optional=args.format in (None, "all"),
                              before_write=timings_hook(args, [document, report.document], {
                                  "baseline": comparison.baseline.rank_timings,
                                  "candidate": comparison.candidate.rank_timings}),
                              early=early[0] if early else None)
    except OSError as exc:
        raise PerfreportError(f"{out}: cannot write the report ({exc.strerror or exc})") from None
    print("\n".join(verdict_lines(document, report=report)))
    print(f"\nwrote {', '.join(str(p) for p in paths)}")
    print_timings(args, document)
    for hint in compare_hints(args, comparison):
        print(f"perfreport: hint: {hint}", file=sys.stderr)
    keep_until_exit(comparison, summaries, document, report)
    return EXIT_FAIL if document["status"] == "fail" else EXIT_OK


def compare_hints(args: argparse.Namespace, comparison) -> list[str]:
    """Hints that BASELINE and CANDIDATE look swapped (:mod:`perfreport.commands.hints`)."""
    from .commands.hints import recorded_at, swapped_hints
    from .pipeline import stored_candidate

    try:
        candidate_stored = stored_candidate(args.candidate[0], args.store) is not None
    except PerfreportError:
        candidate_stored = False
    return swapped_hints(args.baseline, args.candidate[0], baseline_stored=comparison.baseline_ref is not None,
                         candidate_stored=candidate_stored,
                         baseline_times=recorded_at(comparison.baseline.traces),
                         candidate_times=recorded_at(comparison.candidate.traces))


def setup_labels(baseline: str, candidates: list[str], labels: list[str] | None) -> list[str]:
    """Names of the baseline and each candidate: --label once per candidate (the baseline is
    then "baseline") or once per setup, baseline first; default the folder or file names."""
    if not labels:
        names = [Path(str(c).rstrip("/")).name or str(c) for c in candidates]
        return ["baseline", *names] if len(set(names)) == len(names) else \
            ["baseline", *[f"{n} ({i})" for i, n in enumerate(names, 1)]]
    if len(labels) == len(candidates):
        labels = ["baseline", *labels]
    if len(labels) != len(candidates) + 1:
        raise PerfreportError(f"--label given {len(labels)} times: give it once per CANDIDATE ({len(candidates)}) "
                              f"or once per setup, the BASELINE first ({len(candidates) + 1})")
    if len(set(labels)) != len(labels):
        raise PerfreportError(f"--label names must differ: {', '.join(labels)}")
    return labels


def compare_setups(args: argparse.Namespace, labels: list[str], formats, renderer) -> int:
    """``compare BASELINE CANDIDATE CANDIDATE …``: each candidate judged against the baseline,
    one report with a column per setup; exit 1 when any fails."""
    with imports():
        from .config import load_config
        from .report.outputs import write_reports
        from .pipeline import compare_many, report_document
        from .running.progress import make_progress
        from .report import build_report
        from .report.setups import multi_document

    if args.runs:
        raise PerfreportError("--run adds runs of one candidate; with several setups (CANDIDATE …) store each "
                              "setup's runs as a baseline instead")
    config = load_config(args.config)
    executor = executor_of(args, formats=formats)
    progress = make_progress(args.quiet)
    try:
        comparisons = compare_many(args.baseline, args.candidate, config=config, store=args.store, executor=executor,
                                   progress=progress, step_rows=step_rows(args))
        progress.phase("writing reports")
        collect_no_more()  # the reports are the command's last stage (perfreport.running.collector)
        document = multi_document([report_document(c, args.full_tables) for c in comparisons], labels, command=reproduce_command(args))
        out = Path(args.out)
        report = build_report(document)
    finally:
        progress.finish()
    try:
        sides = {"baseline": comparisons[0].baseline.rank_timings,
                 **{label: c.candidate.rank_timings for label, c in zip(labels[1:], comparisons)}}
        paths = write_reports(report, out, ("json", *formats), pdf_appendix=args.pdf_appendix, renderer=renderer,
                              pdf_optional=args.format in (None, "all"), before_write=timings_hook(args, [document, report.document], sides))
    except OSError as exc:
        raise PerfreportError(f"{out}: cannot write the report ({exc.strerror or exc})") from None
    print(f"perfreport compare: {document['status'].upper()} · {report.headline.counts}")
    from .report.setups import severity

    for c, setup in sorted(zip(document["comparisons"], document["setups"][1:]), key=lambda cs: severity(cs[0])):
        h = next(r for r in report.sections[0].tables[0].rows if r[0] == c["label"])
        print(f"  {c['status'].upper():<5} {c['label']}: {h[2]} ({len(setup['ranks'])} rank(s) traced)")
        if h[3] != "–":
            print(f"        top cause: {h[3]}")
    print(f"\nwrote {', '.join(str(p) for p in paths)}")
    print_timings(args, document)
    return EXIT_FAIL if document["status"] == "fail" else EXIT_OK


def timings_hook(args: argparse.Namespace, documents: Sequence[dict], sides: Mapping[str, list]
                 ) -> Callable[[], None]:
    """What :func:`perfreport.report.outputs.write_reports` runs once every format is rendered: the
    command's phases into ``documents`` (``timings``: the command's document and the report's
    plain copy, which report.json is written from)."""
    from .running.rank_task import peak_rss
    from .timing import current, timings_document

    def attach() -> None:
        timings = timings_document(current(), sides, time.perf_counter() - args.started, os.getpid(), peak_rss())
        for document in documents:
            document["timings"] = timings
        args.timings_taken = time.perf_counter()  # the files are written after: -v says how long
    return attach


def print_timings(args: argparse.Namespace, document: dict) -> None:
    """``-v``: where the time went (:func:`perfreport.timing.timing_lines`), on stderr."""
    from .timing import timing_lines

    if args.verbose and document.get("timings"):
        lines = timing_lines(document["timings"])
        taken = getattr(args, "timings_taken", None)
        if taken is not None:  # report.json holds the timings, so it cannot hold its own writing
            lines.append(f"  after these timings were taken: writing the report files, "
                         f"{time.perf_counter() - taken:.3f} s (not in report.json)")
        print("\n".join(f"perfreport: {line}" for line in lines), file=sys.stderr)


def reproduce_command(args: argparse.Namespace) -> str:
    """The command line that reproduces this report (shown in the report's metadata)."""
    return shlex.join(["perfreport", *args.argv])


def verdict_lines(document: dict, max_rows: int = TABLE_ROWS, report=None) -> list[str]:
    """The terminal view of a report document: the verdict and headline number, the sides,
    one row per finding (grouped across ranks), the top causes and the notes."""
    from .report import build_report
    from .report.comparison import finding_evidence
    from .report.overview import signed_ms

    report = report or build_report(document)
    h = report.headline
    lines = [f"perfreport compare: {document['status'].upper()} · {h.text}", f"  {h.counts}"]
    for side in ("baseline", "candidate"):
        d = document[side]
        stored = d["stored_baseline"]
        where = f"{stored['name']} ({d['source']}, saved {stored['created_utc']})" if stored else d["source"]
        lines.append(f"  {side:<9} {where}: {len(d['ranks'])} rank(s), {', '.join(d['gpus']) or 'GPU unknown'}")
    shown = [g for g in report.findings if g.status != "pass" or not g.counted]
    header = ("status", "finding", "threshold", "evidence")
    rows = [header] + [(g.status.upper() + (" (waived)" if g.waived else ""), g.summary,
                        str((g.checks[0].get("threshold") or {}).get("text") or "").split(",")[0], finding_evidence(g))
                       for g in shown[:max_rows]]
    if len(rows) > 1:
        widths = [min(max(len(r[i]) for r in rows), (36, 100, 36, 56)[i]) for i in range(len(header))]
        lines.append("")
        lines += ["  " + "  ".join(_cut(cell, w).ljust(w) for cell, w in zip(r, widths)).rstrip() for r in rows]
    if len(shown) > max_rows:
        lines.append(f"  … and {len(shown) - max_rows} more (see report.json)")
    passed = sum(1 for g in report.findings if g.status == "pass" and g.counted)
    lines.append(f"  {passed} finding(s) passed" + (" (listed in the reports)" if passed else ""))
    if h.causes:
        lines += ["", "top causes:"]
        lines += [f"  {i}. {c.text} {signed_ms(c.delta_us)}/step"
                  + (f" ({c.share_pct:.0f} % of the change)" if c.share_pct is not None else "")
                  for i, c in enumerate(h.causes, 1)]
    if h.basis:
        lines += [f"  ({h.basis})" if h.causes else h.basis]
    if document["notes"]:
        lines += ["", "notes:"] + [f"  - {n['message']}" for n in document["notes"]]
    return lines


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def cmd_analyze(args: argparse.Namespace) -> int:
    from .load import head_start

    if args.executor == "local":  # first of all: a single rank loads while the rest is imported
        head_start.begin_single(args.trace_path)
    from .report.outputs import pdf_renderer
    from .report import parse_formats

    try:
        formats = parse_formats(args.format)
        with pdf_renderer(formats) as renderer:  # first: WeasyPrint's import overlaps the loading
            return analyze_to(args, formats, renderer)
    finally:
        head_start.drop()  # one the command ended without claiming (an error before its rank task)


def analyze_to(args: argparse.Namespace, formats, renderer) -> int:
    """``analyze``: the summary table, ``report.json`` (the one document, docs/analysis-document.md)
    and the report files. No JUnit file: a single run has no checks, so it would hold no test case."""
    from .timing import phase

    with phase("start: import pandas and the analyses"), imports():
        from .report.outputs import write_reports
        from .pipeline import resolve_side, run_jobs, summary_document
        from .running.digest import AnalysisOptions
        from .running.progress import make_progress
        from .report import build_report

    no_junit = "junit" in formats and args.format not in (None, "all")  # asked for: say why there is none
    formats = tuple(f for f in formats if f != "junit")
    executor = executor_of(args, formats=formats)
    progress = make_progress(args.quiet)
    try:  # a trace folder/file, or a stored baseline (its verified cache or traces)
        with phase("start: find the rank files"):
            jobs, label, _ = resolve_side(args.trace_path, candidate=True, store=Path(args.store))
        progress.phase("loading and analysing")
        analysis = run_jobs(jobs, label, executor=executor, progress=progress,
                            options=AnalysisOptions(step_rows=step_rows(args)))
        progress.phase("writing reports")
        collect_no_more()  # the reports are the command's last stage (perfreport.running.collector)
        out = Path(args.out)
        with phase("report: document"):
            document = summary_document(analysis, args.full_tables)
        document["command"] = reproduce_command(args)
        text = JsonChunks(document)  # report.json, encoded as it is written
        report = None  # report.json alone is written from the document: no report to build
        if set(formats) - {"json"}:
            with phase("report: build"):
                report = build_report(document)
    finally:
        progress.finish()
    try:  # report.json is always written: it is what machines and later renders read
        paths = write_reports(report, out, ("json", *formats), ready={"json": text},
                              pdf_appendix=args.pdf_appendix, renderer=renderer,
                              pdf_optional=args.format in (None, "all"),
                              before_write=timings_hook(args, [document], {"": analysis.rank_timings}))
    except OSError as exc:
        raise PerfreportError(f"{out}: cannot write the report ({exc.strerror or exc})") from None
    print(render_summary_table(analysis.tables["summary"]))
    from .report.guidance import terminal_lines

    if document.get("rank_coverage"):
        print(f"partial job: {document['rank_coverage']['text']}")
    for line in terminal_lines(document):
        print(line)
    written = ", ".join(str(p) for p in paths)
    print(f"\nloaded {len(analysis.traces)} rank(s) in {analysis.load_s:.2f} s; wrote {written}")
    print_timings(args, document)
    if no_junit:
        print("perfreport: note: no JUnit report: a single-run analysis has no checks (compare writes one)",
              file=sys.stderr)
    return EXIT_OK


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
    started = time.perf_counter()
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.started = started
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter("perfreport: %(levelname)s: %(message)s"))  # names escaped: one line
    logging.basicConfig(level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
                        handlers=[handler])
    from signal import SIGINT

    from .running.lifecycle import Terminated, ending, install_handlers, said_the_end

    install_handlers()  # SIGTERM unwinds like Ctrl-C: workers stopped, temporaries removed
    from .timing import recording

    try:
        with override_limits(getattr(args, "limit", [])), recording():  # the phases -v prints
            return args.run(args)
    except PerfreportError as exc:
        print(f"perfreport: error: {printable(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:  # Ctrl-C, or a Terminated (SIGTERM, SIGHUP)
        code, line = ending(exc.signum if isinstance(exc, Terminated) else SIGINT)
        print(line, file=sys.stderr)
        said_the_end()
        return code
    except Exception as exc:  # a bug, but the user still gets one line, not a traceback
        if args.debug:
            raise
        print(f"perfreport: internal error: {type(exc).__name__}: {printable(exc)} (rerun with --debug)",
              file=sys.stderr)
        return EXIT_USAGE


def run() -> None:
    """The console script and ``python -m perfreport`` (through :mod:`perfreport.__main__`, which
    sets the process up first): :func:`main`, then the process ends
    without tearing the interpreter down (:func:`perfreport.running.lifecycle.exit_now`). An exit that
    argparse raises (``--help``, a usage error) and ``--debug``'s traceback take Python's way."""
    from .running.collector import own_the_collector
    from .running.heap import one_arena, own_the_heap
    from .running.lifecycle import bound_the_unwinding, ends_without_teardown, exit_now

    # one glibc arena before the first thread (the signal deadline's watch) exists: a thread's
    # first allocation makes an arena of its own, and the head start's loader thread, started
    # later under the limit of one, was given that arena instead of the main one (the 1 GB
    # triton rank's `analyze` peaked at 1,156-1,162 MB so, 1,025-1,032 before the watch existed)
    one_arena()
    bound_the_unwinding()  # a signalled command ends within seconds, whatever its unwinding meets
    own_the_heap()  # glibc keeps a rank's freed temporaries for its next ones (perfreport.running.heap)
    own_the_collector()  # what the imports made is left out of the collector's passes
    ends_without_teardown()
    exit_now(main())


if __name__ == "__main__":  # pragma: no cover
    run()
