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

    from perfreport._io import DecompressionLimit, gunzip

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
