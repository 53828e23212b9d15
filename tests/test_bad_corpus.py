"""The broken-input corpus (tests/data/bad/make.py): every case exits 0 with sane, finite numbers
(bad events dropped and counted in a note) or exits 2 with one line naming the file and the
problem. Never a traceback, an "internal error", a numpy/pandas warning or a NaN/Infinity in an
output. Warnings are errors while the CLI runs, so any numpy or pandas warning fails the case."""

from __future__ import annotations

import importlib.util
import json
import os
import pwd
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

from perfreport.cli import main

BAD = Path(__file__).parent / "data" / "bad"
_spec = importlib.util.spec_from_file_location("make_bad_corpus", BAD / "make.py")
make = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = make  # (dataclasses look their module up)
_spec.loader.exec_module(make)

FILES = make.FILES
CASES = [case for case, _ in make.corpus()]
COMPARE_CASES = [case for case, _ in make.compare_corpus()]
FORMATS = "md,json,junit"
NON_FINITE = re.compile(r"\b(nan|inf|infinity)\b", re.IGNORECASE)


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """The CLI in this process, with every warning turned into an error (so it cannot hide)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def strict_json(path: Path):
    """Parse JSON refusing NaN/Infinity (Python's json accepts them by default)."""
    def refuse(token):
        raise AssertionError(f"{path.name}: non-finite number {token} in the output")
    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def assert_no_noise(out: str, err: str) -> None:
    for bad in ("Traceback", "internal error", "Warning:", "warnings.warn"):
        assert bad not in err and bad not in out, err
    assert not NON_FINITE.search(out), out


def assert_error(code: int, err: str, path: Path, expect: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perfreport: error: "), err
    assert str(path) in lines[0] and expect in lines[0], lines[0]


def assert_sane_outputs(out_dir: Path) -> list[dict]:
    """Every output finite; the per-rank summary's numbers within their bounds. Returns its rows."""
    rows = []
    for path in sorted(out_dir.iterdir()):
        if path.suffix == ".json":
            document = strict_json(path)
            rows = document.get("summary", rows) if isinstance(document.get("summary"), list) else rows
        elif path.suffix in (".md", ".xml"):
            assert not NON_FINITE.search(path.read_text(encoding="utf-8")), path.name
    for r in rows:
        if r["gpu_busy_us"] is not None:
            assert 0 <= r["gpu_busy_pct"] <= 100
            assert 0 <= r["gpu_busy_us"] <= r["gpu_span_us"] + 1e-6 <= r["span_us"] + 2e-6
        assert r["span_us"] is None or 0 <= r["span_us"] < 86_400e6
    return rows


def test_committed_files_match_the_script(tmp_path):
    make.write(tmp_path)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            committed = FILES / path.relative_to(tmp_path)
            assert committed.is_file() and committed.read_bytes() == path.read_bytes(), \
                f"{committed} is stale: run python tests/data/bad/make.py"
    assert len(CASES) + len(COMPARE_CASES) + len(make.BAD_CONFIGS) >= 40


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_trace_case(case, capsys, tmp_path):
    path = FILES / case.name
    code, out, err = run_cli(capsys, "analyze", path, "--out", tmp_path / "out", "--format", FORMATS)
    assert_no_noise(out, err)
    if case.expect != "ok":
        assert_error(code, err, path, case.expect)
        assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
        return
    assert code == 0, err
    rows = assert_sane_outputs(tmp_path / "out")
    assert len(rows) == 1
    if case.note:
        assert case.note in (rows[0]["note"] or ""), rows[0]["note"]


@pytest.mark.parametrize("case", COMPARE_CASES, ids=lambda c: c.name)
def test_compare_case(case, capsys, tmp_path):
    code, out, err = run_cli(capsys, "compare", FILES / "good_baseline_job", FILES / case.name,
                             "--out", tmp_path / "out", "--format", FORMATS, "--config", FILES / "empty.toml")
    assert_no_noise(out, err)
    assert code in (0, 1), err  # pass/warn or a failed verdict: both are answers
    document = strict_json(tmp_path / "out" / "report.json")
    assert document["status"] in ("pass", "warn", "fail", "inconclusive")
    assert_sane_outputs(tmp_path / "out")


@pytest.mark.parametrize("name", sorted(make.BAD_CONFIGS))
def test_bad_config(name, capsys, tmp_path):
    expect = make.BAD_CONFIGS[name][1]
    job = FILES / "good_baseline_job"
    code, out, err = run_cli(capsys, "compare", job, job, "--out", tmp_path / "out", "--config", FILES / name)
    assert_no_noise(out, err)
    assert_error(code, err, FILES / name, expect)


@pytest.fixture(scope="module")
def special(tmp_path_factory) -> dict:
    return make.build_special(tmp_path_factory.mktemp("special"))


@pytest.mark.parametrize("name", ["gzip_bomb", "gzip_bomb_multi_member", "name_10mb", "rank_path_is_directory",
                                  "symlink_loop", "dangling_symlink", "fifo"])
def test_special_case(name, special, capsys, tmp_path):
    path, expect = special[name]
    code, out, err = run_cli(capsys, "analyze", path, "--out", tmp_path / "out", "--format", "json")
    assert_no_noise(out, err)
    assert_error(code, err, path, expect)


def test_gzip_bomb_limit_can_be_raised(special, capsys, tmp_path):
    path, _ = special["gzip_bomb"]
    code, out, err = run_cli(capsys, "analyze", path, "--out", tmp_path / "out", "--format", "json",
                             "--limit", "gzip_ratio=5000")
    assert code == 0, err
    assert "PERFREPORT_LIMITS" not in os.environ  # restored after the run


def test_folder_with_a_symlink_loop_and_a_directory_loads_the_good_file(special, capsys, tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    shutil.copy(special["symlink_loop"][0].parent.parent / "good.json", folder / "rank0.json")
    os.symlink(folder / "rank1.json", folder / "rank2.json")
    os.symlink(folder / "rank2.json", folder / "rank1.json")
    (folder / "rank3.json").mkdir()
    code, out, err = run_cli(capsys, "analyze", folder, "--out", tmp_path / "out", "--format", "json")
    assert code == 0, err
    assert [r["rank"] for r in assert_sane_outputs(tmp_path / "out")] == [0]


def _nobody() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        return None


def _run_as(user: pwd.struct_passwd, args: list[str]) -> tuple[int, str, str]:
    """main(args) in a forked child that has dropped root for ``user`` (a fork, not an exec:
    the interpreter lives under /root, which that user may not read)."""
    import io

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 99
        try:
            os.close(read_end)
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
            code = main(args)
            os.write(write_end, json.dumps([sys.stdout.getvalue(), sys.stderr.getvalue()]).encode())
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    out, err = json.loads(data) if data else ("", "child wrote nothing")
    return os.waitstatus_to_exitcode(status), out, err


def test_unreadable_rank_file(capsys):
    """As a user who may not read the file (root may read anything: the CLI then runs as nobody)."""
    folder = Path(tempfile.mkdtemp(prefix="perfreport-unreadable-"))
    try:
        os.chmod(folder, 0o777)
        path = folder / "rank0.json"
        path.write_bytes(make.dumps(make.doc(make.events())))
        os.chmod(path, 0o000)
        args = ["analyze", str(path), "--out", str(folder / "out"), "--format", "json"]
        if os.geteuid() != 0:
            code, out, err = run_cli(capsys, *args)
        else:
            user = _nobody()
            if user is None:
                pytest.skip("running as root and no 'nobody' user to drop privileges to")
            readable = folder / "readable.json"  # a run as root first: every lazy import is done
            readable.write_bytes(make.dumps(make.doc(make.events())))
            assert run_cli(capsys, "analyze", readable, "--out", folder / "warm", "--format", "json")[0] == 0
            code, out, err = _run_as(user, args)
        assert_no_noise(out, err)
        assert_error(code, err, path, "cannot read file (Permission denied)")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- stored baselines broken on disk ------------------------------------------------------------
@pytest.fixture()
def store(tmp_path, capsys) -> Path:
    store = tmp_path / "store"
    code, _, err = run_cli(capsys, "baseline", "save", "b", FILES / "good_baseline_job", "--store", store)
    assert code == 0, err
    return store


def _manifest(store: Path) -> dict:
    return json.loads((store / "b" / "manifest.json").read_text())


BROKEN_BASELINES = {
    "cache_flipped": ("cache/rank-1.cols", "checksum mismatch"),
    "trace_flipped_no_cache": ("traces/rank-0.json.gz", "checksum mismatch"),
    "manifest_garbage": ("manifest.json", "unreadable manifest"),
    "manifest_wrong_types": ("manifest.json", "ranks[0].rank: expected a rank from 0 to"),
    "manifest_path_escape": ("manifest.json", "outside the baseline"),
    "manifest_from_the_future": ("manifest.json", "newer perfreport"),
    "manifest_truncated": ("manifest.json", "unreadable manifest"),
}


@pytest.mark.parametrize("kind", sorted(BROKEN_BASELINES))
def test_broken_stored_baseline(kind, store, capsys, tmp_path):
    rel, expect = BROKEN_BASELINES[kind]
    folder = store / "b"
    target = folder / rel
    m = _manifest(store)
    if kind == "cache_flipped":
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))
    elif kind == "trace_flipped_no_cache":
        shutil.rmtree(folder / "cache")
        data = bytearray(target.read_bytes())
        data[-10] ^= 0xFF
        target.write_bytes(bytes(data))
    elif kind == "manifest_garbage":
        target.write_bytes(b"\x00\xffgarbage{{{")
    elif kind == "manifest_wrong_types":
        m["ranks"] = [{"rank": "x", "file": 5, "sha256": None}]
        target.write_text(json.dumps(m))
    elif kind == "manifest_path_escape":
        m["ranks"][0]["file"] = "../../../../etc/passwd"
        target.write_text(json.dumps(m))
    elif kind == "manifest_from_the_future":
        m["schema_version"] = 99
        target.write_text(json.dumps(m))
    elif kind == "manifest_truncated":
        target.write_text(target.read_text()[:200])
    code, out, err = run_cli(capsys, "compare", "b", FILES / "good_baseline_job", "--store", store,
                             "--out", tmp_path / "out", "--format", "json", "--config", FILES / "empty.toml")
    assert_no_noise(out, err)
    assert_error(code, err, target, expect)


# --- limits ---------------------------------------------------------------------------------------
def test_memory_check_refuses_a_rank_larger_than_free_memory(capsys, tmp_path, monkeypatch):
    from perfreport.load import memory

    monkeypatch.setattr(memory, "available_memory", lambda: 1000)
    path = FILES / "dur_1e308.json"
    code, out, err = run_cli(capsys, "analyze", path, "--out", tmp_path / "out", "--format", "json")
    assert_error(code, err, path, "of memory")
    assert "--workers 1" in err and "--executor dask" in err and "--limit memory_check=off" in err
    code, out, err = run_cli(capsys, "analyze", path, "--out", tmp_path / "out", "--format", "json",
                             "--limit", "memory_check=off")
    assert code == 0, err


def test_event_cap(capsys, tmp_path):
    path = FILES / "reversed_events.json"
    code, out, err = run_cli(capsys, "analyze", path, "--out", tmp_path / "out", "--limit", "max_events=5")
    assert_error(code, err, path, "12 events, more than the limit of 5; raise it with --limit max_events=10")


@pytest.mark.parametrize("value", ["max_events=0", "gzip_ratio=abc", "nope=1", "memory_check=maybe", "max_span_s"])
def test_bad_limit_values(value, capsys, tmp_path):
    code, out, err = run_cli(capsys, "analyze", FILES / "array_form.json", "--out", tmp_path / "o", "--limit", value)
    assert code == 2 and err.startswith("perfreport: error: limit ") and len(err.strip().splitlines()) == 1


def test_gunzip_members_padding_garbage_and_limit():
    import gzip

    from perfreport.load.files import DecompressionLimit, gunzip

    text = b'{"traceEvents": []}'
    members = b"".join(gzip.compress(text[i:i + 1], mtime=0) for i in range(len(text)))
    assert gunzip(members) == text and gunzip(members + b"\0" * 100) == text
    assert gunzip(gzip.compress(b"x" * 100, mtime=0) * 20_000) == b"x" * 2_000_000  # many members, linear time
    with pytest.raises(ValueError, match="after the end"):
        gunzip(gzip.compress(text) + b"junk")
    with pytest.raises(EOFError):
        gunzip(members[:-3])
    with pytest.raises(DecompressionLimit):
        gunzip(gzip.compress(b" " * 1000), limit=999)
    with pytest.raises(DecompressionLimit):
        gunzip(members, limit=len(text) - 1)
    assert gunzip(gzip.compress(b" " * 1000), limit=1000) == b" " * 1000


# --- a report.json from an untrusted run (the fork-safe workflow_run flow, archive add) ----------
@pytest.fixture(scope="module")
def comparison_doc() -> dict:
    """A real comparison document, small (the tiny HTA pair)."""
    from .conftest import small_comparison_json

    return json.loads(small_comparison_json())


def _deep(levels: int, leaf: str = "1") -> str:
    return "[" * levels + leaf + "]" * levels


def _with(doc: dict, path: tuple, value) -> str:
    doc = json.loads(json.dumps(doc))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return json.dumps(doc)


HOSTILE_REPORTS = {
    # name: (report.json text from the real document, what the error line says)
    "nested_20000_deep": (lambda d: _deep(20_000), "nested deeper than"),
    "nested_2000_in_a_field": (lambda d: json.dumps(d)[:-1] + ', "extra": ' + _deep(2000) + "}", "nested deeper than"),
    "nested_100_in_checks": (lambda d: _with(d, ("checks", 0, "extra"), json.loads(_deep(100))), "nested deeper"),
    "not_an_object": (lambda d: "[1, 2, 3]", "not a JSON object"),
    "checks_a_string": (lambda d: _with(d, ("checks",), "all good"), "checks: expected array"),
    "a_check_a_number": (lambda d: _with(d, ("checks", 0), 7), "checks[0]: expected object"),
    "rank_a_string": (lambda d: _with(d, ("checks", 0, "rank"), "0"), "checks[0].rank: expected integer or null"),
    "value_a_string": (lambda d: _with(d, ("checks", 0, "candidate_value"), "fast"), "candidate_value: expected number"),
    "value_beyond_int64": (lambda d: _with(d, ("checks", 0, "candidate_value"), 2**64), "beyond int64"),
    "value_1e999": (lambda d: _with(d, ("checks", 0, "delta"), 1.0).replace('"delta": 1.0', '"delta": 1e999', 1),
                    "not a finite number"),
    "nan_literal": (lambda d: _with(d, ("checks", 0, "delta"), 1.0).replace('"delta": 1.0', '"delta": NaN', 1),
                    "NaN is not a JSON number"),
    "status_a_number": (lambda d: _with(d, ("status",), 3), "status: expected one of"),
    "headline_an_object": (lambda d: _with(d, ("headline",), {"x": 1}), "headline: expected string"),
    "baseline_a_list": (lambda d: _with(d, ("baseline",), []), "baseline: expected object"),
    "summary_rows_a_string": (lambda d: _with(d, ("candidate", "analyses", "summary"), "x"),
                              "candidate.analyses.summary: expected array"),
    "series_lines_a_number": (lambda d: _with(d, ("candidate", "analyses", "series"), {"memory": {"lines": 5}}),
                              "lines: expected array"),
    "findings_objects": (lambda d: _with(d, ("findings",), [{"a": 1}]), "findings[0]: expected string"),
    "not_utf8": (lambda d: json.dumps(d).replace('"pass"', '"\udcff"', 1), "cannot read the report"),
    "truncated": (lambda d: json.dumps(d)[:1000], "cannot read the report"),
}
UNTRUSTED_COMMANDS = ("comment", "summary", "annotate", "outputs", "archive-add")


def _run_untrusted(capsys, monkeypatch, tmp_path: Path, command: str, report: Path) -> tuple[int, str, str]:
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "output"))
    monkeypatch.delenv("GITHUB_EVENT_PATH", raising=False)
    if command == "archive-add":
        return run_cli(capsys, "archive", "add", "--release", "v1", "--report", report, "--store", tmp_path / "site")
    return run_cli(capsys, "github", command, "--report", report)


@pytest.mark.parametrize("command", UNTRUSTED_COMMANDS)
@pytest.mark.parametrize("name", sorted(HOSTILE_REPORTS))
def test_hostile_report_json_is_one_line(name, command, comparison_doc, capsys, monkeypatch, tmp_path):
    make_text, expect = HOSTILE_REPORTS[name]
    report = tmp_path / "report"
    report.mkdir()
    text = make_text(comparison_doc)
    (report / "report.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    code, out, err = _run_untrusted(capsys, monkeypatch, tmp_path, command, report)
    assert_no_noise(out, err)
    assert_error(code, err, report / "report.json", expect)
    assert not (tmp_path / "site" / "index.json").exists() and not (tmp_path / "output").exists()


@pytest.mark.parametrize("command", UNTRUSTED_COMMANDS)
def test_the_real_document_passes_every_untrusted_reader(command, comparison_doc, capsys, monkeypatch, tmp_path):
    """The check is no stricter than what perfreport writes (the control for the cases above)."""
    report = tmp_path / "report"
    report.mkdir()
    (report / "report.json").write_text(json.dumps(comparison_doc))
    code, out, err = _run_untrusted(capsys, monkeypatch, tmp_path, command, report)
    assert code == 0 and "error" not in err, err


@pytest.mark.parametrize("command", [*UNTRUSTED_COMMANDS, "analyze"])
def test_names_with_newlines_and_escapes_cannot_forge_lines(command, capsys, monkeypatch, tmp_path):
    """A folder named 'x\\nperfreport: error: forged\\x1b[31m' is shown escaped, on one line."""
    report = tmp_path / "x\nperfreport: error: forged\x1b[31m\u202e"
    report.mkdir()
    (report / "report.json").write_text('{"kind": "perfreport.compare", "checks": 5}')
    if command == "analyze":
        code, out, err = run_cli(capsys, "analyze", report / "rank0.json", "--out", tmp_path / "out")
    else:
        code, out, err = _run_untrusted(capsys, monkeypatch, tmp_path, command, report)
    assert code == 2 and err.count("\n") == 1 and err.startswith("perfreport: error: "), err
    assert "\x1b" not in err and "\u202e" not in err and "\\nperfreport: error: forged\\x1b[31m\\u202e" in err


def test_a_multi_candidate_document_is_checked_too(comparison_doc, capsys, monkeypatch, tmp_path):
    """compare BASE A B writes a document of several comparisons: they are checked as
    comparisons, its setups as sides."""
    from perfreport.report.setups import multi_document

    doc = json.loads(json.dumps(multi_document([comparison_doc, comparison_doc], ["base", "a", "b"])))
    report = tmp_path / "report"
    report.mkdir()
    for change, expect in ((None, None), (("comparisons", 1, "checks", 0, "rank"), "comparisons[1].checks[0].rank"),
                           (("setups", 2, "ranks"), "setups[2].ranks: expected array")):
        (report / "report.json").write_text(_with(doc, change, "x") if change else json.dumps(doc))
        code, out, err = _run_untrusted(capsys, monkeypatch, tmp_path, "annotate", report)
        if expect is None:
            assert code == 0 and err == "", err
        else:
            assert_error(code, err, report / "report.json", expect)
