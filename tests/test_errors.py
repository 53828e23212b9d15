"""Bad input: one clear line naming the file and the problem, exit code 2, no traceback."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from perfreport.cli import main
from perfreport.errors import TraceError
from perfreport.load import load

from .conftest import TRACES

GOOD = next((TRACES / "hta_a100_alexnet_benchmark").glob("*.json.gz"))


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Each broken input and the words its error line must contain."""
    data = GOOD.read_bytes()
    files = {}

    def make(name: str, content: bytes, expect: str) -> None:
        p = tmp_path / name
        p.write_bytes(content)
        files[name] = (p, expect)

    make("truncated.json.gz", data[: len(data) // 2], "truncated gzip")
    make("corrupt.json.gz", data[:20] + b"\x00garbage" * 50 + data[-8:], "corrupt gzip")
    make("invalid.json", b'{"traceEvents": [{"ph": "X",, }]}', "invalid JSON")
    make("cut.json", gzip.decompress(data)[:5000], "invalid JSON")
    make("list.json", b'"a string"', "top level is not a JSON object")
    make("nokey.json", json.dumps({"schemaVersion": 1}).encode(), 'no "traceEvents"')
    make("notlist.json", json.dumps({"traceEvents": {"a": 1}}).encode(), '"traceEvents" is an object')
    make("empty.json", b"", "file is empty")
    make("binary.json", bytes(range(256)) * 4, "invalid JSON")
    return files


@pytest.mark.parametrize("name", ["truncated.json.gz", "corrupt.json.gz", "invalid.json", "cut.json", "list.json",
                                  "nokey.json", "notlist.json", "empty.json", "binary.json"])
def test_bad_file_gives_one_line_and_exit_2(bad_files, capsys, tmp_path: Path, name: str) -> None:
    path, expect = bad_files[name]
    code, out, err = run_cli(capsys, "analyze", str(path), "--out", str(tmp_path / "out"))
    assert code == 2
    assert err.count("\n") == 1, err
    assert str(path) in err and expect in err
    assert not (tmp_path / "out" / "report.json").exists()


def test_missing_path_and_empty_dir(capsys, tmp_path: Path) -> None:
    code, _, err = run_cli(capsys, "analyze", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
    assert code == 2 and "no such file or directory" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(capsys, "analyze", str(tmp_path / "empty"), "--out", str(tmp_path / "o"))
    assert code == 2 and "no trace files" in err and str(tmp_path / "empty") in err


def test_two_files_claiming_one_rank_names_both(tmp_path: Path) -> None:
    for name in ("a.json.gz", "b.json.gz"):
        (tmp_path / name).write_bytes(GOOD.read_bytes())
    with pytest.raises(TraceError) as info:
        load(tmp_path)
    assert "a.json.gz" in str(info.value) and "b.json.gz" in str(info.value) and "rank 0" in str(info.value)


def test_usage_error_exits_2(capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["analyze"])
    assert info.value.code == 2


def test_no_traceback_from_the_installed_command(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    proc = subprocess.run([sys.executable, "-m", "perfreport", "analyze", str(bad), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"perfreport: error: {bad}: invalid JSON (JSON is malformed: object keys must be strings (byte 1))"]
