"""Shared fixtures: where the real traces are, and a loader cache so each is parsed once."""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import subprocess
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
TRACES = DATA / "traces"
ORACLE = DATA / "oracle"
SHARED = Path(__file__).resolve().parents[2] / "shared"
SHARED_TRACES = SHARED / "traces"
SHARED_ORACLE = SHARED / "oracle"


def trace_jobs() -> list[Path]:
    """Every trace job folder in tests/data/traces (a pair contributes each side)."""
    jobs = []
    for d in sorted(TRACES.iterdir()):
        subs = sorted(p for p in d.iterdir() if p.is_dir())
        jobs.extend(subs or [d])
    return jobs


def pytest_sessionstart(session) -> None:
    """Before any test: the package compiled (:func:`compile_the_package`). And in the
    pytest-xdist controller, before it starts the workers: rewrite the asserts of every
    test module once, into pytest's own cache of rewritten modules (``__pycache__/*-pytest-*.pyc``,
    checked against the source's size and mtime), so that the two workers read them instead of
    each rewriting all of them (~4 CPU s a worker, most of what collecting costs). pytest writes
    that cache itself only where bytecode may be written, and a worker finds it only if it is
    there before both start (clean clones, PYTHONDONTWRITEBYTECODE=1 in CI images and on this VM).
    Uses pytest's private rewrite helpers: any change there only turns this off."""
    config = session.config
    if hasattr(config, "workerinput"):
        return  # a worker: the controller has done both
    compile_the_package()
    if not getattr(config.option, "numprocesses", None):
        return  # no workers (-n 0): collecting rewrites what it imports, once
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
        for fn in sorted(Path(__file__).parent.rglob("*.py")):
            if not (fn.name.startswith("test_") or fn.name == "conftest.py"):
                continue  # what pytest rewrites: the test files (python_files) and conftests
            pyc = rewrite.get_cache_dir(fn) / (fn.name[:-3] + rewrite.PYC_TAIL)
            if rewrite._read_pyc(fn, pyc) is not None or not rewrite.try_makedirs(pyc.parent):
                continue
            source_stat, code = rewrite._rewrite_test(fn, config)
            rewrite._write_pyc(state, code, source_stat, pyc)
    except (ImportError, AttributeError, KeyError, TypeError, OSError, SyntaxError):
        return


def compile_the_package() -> None:
    """Compile perfreport's modules (and the tests' helper modules) to bytecode once, before any
    test runs. Where bytecode may not be written (PYTHONDONTWRITEBYTECODE=1, as in CI images and
    on this VM) a clean clone has none, and every interpreter the tests start (the CLI's
    commands, the action's steps: ~70 of them) and each xdist worker compiled the package's
    ~36,000 lines again: 0.5-1 CPU s a process. Python reads bytecode that is there whatever that
    variable says; compileall writes what is missing or stale (checked against each source's
    mtime) and nothing otherwise."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    with contextlib.suppress(OSError):
        compileall.compile_dir(root / "perfreport", quiet=2)
        for helper in Path(__file__).parent.glob("*.py"):
            if not (helper.name.startswith("test_") or helper.name == "conftest.py"):
                compileall.compile_file(helper, quiet=2)


def pytest_collection_finish(session) -> None:
    """What is alive once the tests are collected (numpy, pandas, matplotlib, the test modules)
    lives to the end: moved out of the garbage collector's sight (gc.freeze), so its full
    collections do not walk it again and again (~half their time), nor touch its pages in the
    worker processes each command forks. And the collector runs less often (a young pass every
    20,000 allocations instead of 700): a test worker makes and drops millions of objects, and
    its passes still walked the traces, tables and caches the tests hold, 11 % of the suite's
    CPU in `perf` (2026-11-30). The README's test command: 154.6-171.3 -> 143.3-144.5 s (two
    alternating pairs). Cycles left by a test are still freed, later: a test that needs them
    gone calls gc.collect()."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 50, 100)


@pytest.fixture(autouse=True)
def environment_left_as_found():
    """Each test leaves the environment as it found it. A test worker runs hundreds of tests in
    one process, and the processes they start inherit its environment: a variable left behind
    changes what later tests measure, in whichever worker the scheduler put them (Dask's
    in-process nanny sets MALLOC_TRIM_THRESHOLD_ and OMP_NUM_THREADS for good, and glibc's
    dynamic mmap threshold was gone in test_heap's fresh interpreters after it). The leak is
    undone and the test that made it fails, naming the variables."""
    before = current_environment()
    yield
    after = current_environment()
    if after != before:
        restore_environment(before)
        changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        pytest.fail(f"the test left the environment changed: {', '.join(changed)}")


def current_environment() -> dict[str, str]:
    """The process's environment, but pytest's own PYTEST_CURRENT_TEST (it changes per phase)."""
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def restore_environment(saved: dict[str, str]) -> None:
    """Put the environment back to ``saved`` (a :func:`current_environment`): variables added since
    removed, changed ones set back."""
    import os

    for key in current_environment().keys() - saved.keys():
        del os.environ[key]
    os.environ.update(saved)


@pytest.fixture(scope="session", autouse=True)
def one_cli_parser():
    """The CLI's argparse parser, built once a session. main() builds it on every call (~3.5 ms,
    mostly argparse's gettext look-ups), once a process in real use but thousands of times in the
    in-process CLI tests. A parser keeps no state between parse_args calls."""
    from perfreport import cli

    parser = cli.build_parser()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli, "build_parser", lambda: parser)
        yield


@pytest.fixture(scope="session", autouse=True)
def figures_drawn_once():
    """Each distinct figure drawn once a test process: matplotlib takes 0.05-0.3 s a figure, and
    the same report (the demo comparison above all) is rendered by many tests; the SVG of a
    figure is a pure function of the figure, its width and its id prefix (the same text drawn
    again: tests/test_drawing.py), so a figure met again gets the text drawn the first time,
    byte for byte. Keyed by the pickled arguments: equal bytes, equal figure. Off in
    tests/test_drawing.py, which checks the drawing itself (:func:`figures_drawn_every_time`)."""
    import hashlib
    import pickle

    from perfreport.archive import site
    from perfreport.report import figures

    draw = figures.render_svg
    drawn: dict[bytes, str] = {}

    @functools.wraps(draw)
    def render_svg(*args, **kwargs) -> str:
        key = hashlib.sha256(pickle.dumps((args, sorted(kwargs.items())))).digest()
        if key not in drawn:
            drawn[key] = draw(*args, **kwargs)
        return drawn[key]

    with pytest.MonkeyPatch.context() as patch:
        for module in (figures, site):
            patch.setattr(module, "render_svg", render_svg)
        yield


@pytest.fixture()
def figures_drawn_every_time(monkeypatch):
    """Every figure drawn by matplotlib, none from :func:`figures_drawn_once`'s memo: for the
    tests of the drawing itself."""
    from perfreport.archive import site
    from perfreport.report import figures

    draw = figures.render_svg.__wrapped__
    for module in (figures, site):
        monkeypatch.setattr(module, "render_svg", draw)


def cli_in_process(args: list, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``perfreport ARGS`` run in this process as a shell runs it: ``env`` added to the environment,
    in ``cwd``; its exit code, stdout and stderr (log lines included, as the CLI prints them) kept.
    For a command that is not itself about a process (a kill, a signal, its exit): no interpreter
    to start, no numpy and pandas to import again."""
    from perfreport.cli import main
    from perfreport.errors import OneLineFormatter

    out, err = io.StringIO(), io.StringIO()
    log = logging.StreamHandler(err)
    log.setFormatter(OneLineFormatter("perfreport: %(levelname)s: %(message)s"))
    log.setLevel(logging.WARNING)
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        for key, value in (env or {}).items():
            patch.setenv(key, value)
        if cwd is not None:
            patch.chdir(cwd)
        logging.getLogger().addHandler(log)  # pytest's own handlers keep main() from adding its one
        try:
            code = main([str(a) for a in args])
        finally:
            logging.getLogger().removeHandler(log)
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@functools.lru_cache(maxsize=None)
def load_cached(path: str):
    from perfreport.load import load

    return load(path, workers=1)


def shared_trace(rel: str) -> Path:
    path = SHARED_TRACES / rel
    if not path.exists():
        pytest.skip(f"{path} not available (the shared trace collection is not next to the repo)")
    return path


def brute_union_length(starts, ends) -> float:
    """Length of the union of intervals by a plain-Python sweep: an independent check of
    perfreport.analyses.intervals for tests."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(zip(list(starts), list(ends))):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0.0)


@functools.lru_cache(maxsize=1)
def demo_comparison_json() -> str:
    """report.json of the demo comparison (stored baseline 'demo' against
    examples/resnet50-workers0: FAIL), made once a session for the tests that read it; each parses
    its own copy."""
    from perfreport.config import load_config
    from perfreport.documents.jsondoc import json_text
    from perfreport.pipeline import compare, report_document

    repo = Path(__file__).resolve().parents[1]
    return json_text(report_document(compare("demo", repo / "examples" / "resnet50-workers0", config=load_config(),
                                             store=repo / "baselines", workers=1)))


@functools.lru_cache(maxsize=1)
def small_comparison_json() -> str:
    """report.json of a real comparison, small (the tiny HTA pair, ~60 kB), made once a session:
    the starting point of the untrusted-document corpus and fuzzer."""
    from perfreport.config import load_config
    from perfreport.documents.jsondoc import json_text
    from perfreport.pipeline import compare, report_document

    pair = TRACES / "pair_hta_trace_compare_tiny"
    return json_text(report_document(compare(str(pair / "base"), pair / "test", config=load_config())))
