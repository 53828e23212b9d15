"""Hostile stores, configurations and numbers (issue 21): a stored baseline cannot lie (tampered
cached analyses, a rank file changing while it is stored, truncated copies), every manifest field
with a wrong JSON type, numbers at the edges of int64/float64, deep nesting, a read-only store.
Each case: one line naming the file and the problem, the right exit code, the store as it was."""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from perfreport.storing import atomic as _io
from perfreport.running import digest_cache
from perfreport.config import Config, config_from_mapping
from perfreport.errors import ConfigError
from perfreport.pipeline import analysis_options

from .test_bad_corpus import assert_no_noise, run_cli
from .test_baselines import tiny_trace


def one_line_error(code: int, err: str, *expect: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("perfreport: error: "), err
    assert all(e in lines[0] for e in expect), lines[0]
    return lines[0]


@pytest.fixture()
def job(tmp_path) -> Path:
    folder = tmp_path / "job"
    tiny_trace(folder, 0, steps=4)
    return folder


@pytest.fixture()
def store(tmp_path, job, capsys) -> Path:
    store = tmp_path / "store"
    code, _, err = run_cli(capsys, "baseline", "save", "b", job, "--store", store, "-q")
    assert code == 0, err
    return store


def manifest(store: Path) -> dict:
    return json.loads((store / "b" / "manifest.json").read_text())


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
            and not p.name.endswith(".lock")}


# --- the cached analyses ----------------------------------------------------------------------
def test_tampered_cached_analyses_are_not_used(store, job, capsys, caplog, tmp_path):
    """The issue's case: the digest edited (step times doubled, its rank checksum kept) made the
    baseline FAIL against its own traces; now it is refused by its checksum and recomputed."""
    path = store / "b" / "cache" / "rank-0.digest"
    options = analysis_options(Config())
    d = digest_cache.read(path, options, "x")
    assert d is not None
    tables = {}
    for name, table in d.tables.items():  # every time in it doubled, its rank file's checksum kept
        table = table.copy()
        for c in table.columns:
            if str(c).endswith("_us") and table[c].dtype.kind == "f":
                table[c] = table[c] * 2
        tables[name] = table
    path.write_bytes(digest_cache.encode(dataclasses.replace(d, tables=tables), options))
    code, out, err = run_cli(capsys, "compare", "b", job, "--store", store, "--out", tmp_path / "o", "--format",
                             "json", "-q", "--workers", "1")  # in this process: its log is captured
    assert code == 0 and "PASS" in out, out + err
    assert "rank-0.digest: cached analyses differ from their checksum" in caplog.text
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    assert report["status"] == "pass"
    code, _, err = run_cli(capsys, "baseline", "show", "b", "--store", store, "--verify")
    one_line_error(code, err, "rank-0.digest", "checksum mismatch")
    code, out, err = run_cli(capsys, "baseline", "list", "--store", store, "--verify")
    assert code == 2 and "FAILED" in out and "rank-0.digest" in err


def test_verify_checks_every_stored_file(store, capsys):
    code, out, _ = run_cli(capsys, "baseline", "show", "b", "--store", store, "--verify")
    assert code == 0 and "checksums: all files verified (3:" in out
    code, out, _ = run_cli(capsys, "baseline", "list", "--store", store, "--verify")
    assert code == 0 and "ok (3 files)" in out


def test_verify_finds_a_truncated_copy_with_a_matching_checksum(store, capsys):
    """A copy cut short whose checksum was recorded for the cut bytes (what a file changing
    during the copy stored before): the gzip stream's end and its JSON size give it away."""
    m = manifest(store)
    trace = store / "b" / m["ranks"][0]["file"]
    whole = gzip.decompress(trace.read_bytes())
    cut = gzip.compress(whole[: len(whole) // 2], mtime=0)
    trace.write_bytes(cut)
    for entry in (m["ranks"][0], m["runs"][0]["ranks"][0]):
        entry["sha256"] = hashlib.sha256(cut).hexdigest()
    (store / "b" / "manifest.json").write_text(json.dumps(m))
    code, _, err = run_cli(capsys, "baseline", "show", "b", "--store", store, "--verify")
    one_line_error(code, err, "rank-0.json.gz", "bytes of JSON, the manifest says")
    trace.write_bytes(cut[:-12])
    for entry in (m["ranks"][0], m["runs"][0]["ranks"][0]):
        entry["sha256"] = hashlib.sha256(cut[:-12]).hexdigest()
    (store / "b" / "manifest.json").write_text(json.dumps(m))
    code, _, err = run_cli(capsys, "baseline", "show", "b", "--store", store, "--verify")
    one_line_error(code, err, "rank-0.json.gz", "truncated gzip stream")


# --- a rank file that changes while it is stored ----------------------------------------------
def _save_paused(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, _io.PAUSE_ENV: "baseline.copy"}
    proc = subprocess.Popen([sys.executable, "-m", "perfreport", *args], env=env, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    for line in proc.stderr:
        if "paused at baseline.copy" in line:
            os.waitpid(proc.pid, os.WUNTRACED)
            return proc
    pytest.fail(f"never paused: {proc.wait()}")


@pytest.mark.parametrize("change", ["append", "rewrite_same_size"])
def test_rank_file_changing_during_save_fails_the_save(store, job, tmp_path, change):
    before = snapshot(store)
    rank = job / "rank0.json"
    for force in (True, True):  # repeated: the store stays as it was each time
        proc = _save_paused(["baseline", "save", "b", str(job), "--store", str(store), "--force", "-q"] if force
                            else [])
        text = rank.read_text()
        if change == "append":
            rank.write_text(text + " " * 10)
        else:  # same size, other bytes: only the checksum tells
            rank.write_text(text.replace("gemm", "gemn"))
        proc.send_signal(signal.SIGCONT)
        assert proc.wait(timeout=60) == 2
        err = proc.stderr.read()
        one_line_error(2, err, str(rank), "changed while it was being stored")
        assert snapshot(store) == before
        tiny_trace(job, 0, steps=4)  # back to the file the baseline holds
    assert not [p for p in (store).iterdir() if p.name.startswith(".") and not p.name.endswith(".lock")]


# --- wrong JSON types in every manifest field -------------------------------------------------
def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list) and obj:
        yield from _paths(obj[0], prefix + (0,))


BAD_VALUES = [None, "x", {"a": 1}, 1.5, 2**64, -1]


def test_every_manifest_field_with_a_wrong_type_is_one_line(store, job, capsys, tmp_path):
    m0 = manifest(store)
    checked = 0
    for i, path in enumerate(p for p in _paths(m0) if p):
        for j, value in enumerate(BAD_VALUES):
            m = json.loads(json.dumps(m0))
            target = m
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = value
            (store / "b" / "manifest.json").write_text(json.dumps(m))
            commands = [["baseline", "show", "b", "--store", store, "--verify"]]
            if j == i % len(BAD_VALUES):  # loading is slower: one wrong type per field, in turn
                commands.append(["analyze", store / "b", "--out", tmp_path / "o", "--format", "md", "-q"])
            for args in commands:
                code, out, err = run_cli(capsys, *args)
                assert code in (0, 2), (path, value, err)
                assert_no_noise(out, err)
                if code == 2:
                    one_line_error(code, err, "")
                checked += 1
    assert checked > 250


# --- configurations and numbers at the edges --------------------------------------------------
@pytest.mark.parametrize("table,expect", [
    ({"stats": {"min_samples": 10**9}}, "stats.min_samples: must be between 2 and 10,000"),
    ({"stats": {"bootstrap_resamples": 10**12}}, "stats.bootstrap_resamples: must be between 100 and 100,000"),
    ({"absolute": {"idle_pct": {"max": -5}}}, "absolute.idle_pct.max: must be 0 or more"),
    ({"absolute": {"compute_pct": {"min": 250}}}, "absolute.compute_pct.min: is a share of the step in %"),
    ({"stats": {"seed": 2**70}}, "stats.seed: out of range"),
    ({"steps": {"skip_first": 2**63}}, "steps.skip_first: out of range"),
    ({"relative": {"step_time": {"max_increase_pct": 1.7e308}}}, "out of range"),
])
def test_config_values_out_of_range(table, expect):
    with pytest.raises(ConfigError, match=expect.replace("(", r"\(").replace("%", "%")):
        config_from_mapping(table)


def test_min_samples_600_is_valid_and_fast():
    assert config_from_mapping({"stats": {"min_samples": 600}}).stats.min_samples == 600


def test_config_nested_thousands_deep(tmp_path, capsys):
    path = tmp_path / "perfreport.toml"
    path.write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    code, _, err = run_cli(capsys, "compare", "x", "y", "--out", tmp_path / "o", "--config", path)
    one_line_error(code, err, str(path), "nested too deeply")


@pytest.mark.parametrize("field,value,expect", [
    ("step", 2**64 + 1, "profiler step number 1.84e+19"),
    ("step", 2**63, "beyond int64"),
    ("rank", 2**64, "distributedInfo.rank 1.84e+19"),
    ("rank", 2**31, "is beyond any job"),
])
def test_numbers_beyond_int64_in_a_trace(tmp_path, capsys, field, value, expect):
    folder = tmp_path / "job"
    path = tiny_trace(folder, 0)
    doc = json.loads(path.read_text())
    if field == "step":
        doc["traceEvents"][0]["name"] = f"ProfilerStep#{value}"
    else:
        doc["distributedInfo"]["rank"] = value
    path.write_text(json.dumps(doc))
    for command in (["analyze", folder, "--out", tmp_path / "o", "--format", "md", "-q"],
                    ["baseline", "save", "b", folder, "--store", tmp_path / "s", "-q"]):
        code, _, err = run_cli(capsys, *command)
        one_line_error(code, err, str(path), expect)


@pytest.mark.parametrize("value,expect", [("max_events=0.5", "expected a whole number, at least 1"),
                                          ("gzip_max_gb=1e300", "expected a positive number up to 1e+15")])
def test_limit_flag_is_blamed_not_the_environment(tmp_path, capsys, monkeypatch, value, expect):
    monkeypatch.delenv("PERFREPORT_LIMITS", raising=False)
    tiny_trace(tmp_path / "job", 0)
    code, _, err = run_cli(capsys, "analyze", tmp_path / "job", "--out", tmp_path / "o", "--limit", value)
    line = one_line_error(code, err, expect)
    assert "PERFREPORT_LIMITS" not in line


# --- a read-only store ------------------------------------------------------------------------
@pytest.fixture()
def read_only(store, tmp_path):
    """The store bind-mounted read-only (a real EROFS); skipped where mounting is not allowed."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ok = subprocess.run(["mount", "--bind", str(store), str(ro)], capture_output=True).returncode == 0 and \
        subprocess.run(["mount", "-o", "remount,bind,ro", str(ro)], capture_output=True).returncode == 0
    if not ok:
        subprocess.run(["umount", str(ro)], capture_output=True)
        pytest.skip("cannot bind-mount read-only here (needs root)")
    yield ro
    subprocess.run(["umount", str(ro)], check=True)


def test_read_only_store_reads_and_refuses_writes(read_only, job, capsys, tmp_path):
    code, out, err = run_cli(capsys, "baseline", "list", "--store", read_only, "--verify")
    assert code == 0 and "ok (3 files)" in out, err
    code, out, err = run_cli(capsys, "compare", "b", job, "--store", read_only, "--out", tmp_path / "o",
                             "--format", "md", "-q")
    assert code == 0, err
    for args, what in ((["baseline", "save", "c", job], "cannot write the baseline"),
                       (["baseline", "save", "b", job, "--append"], "cannot write the run"),
                       (["baseline", "rm", "b"], "cannot remove the baseline")):
        code, _, err = run_cli(capsys, *args, "--store", read_only, *(["-q"] if args[1] == "save" else []))
        one_line_error(code, err, what, "Read-only file system")
