"""A worker's small gzipped ranks decompressed into one reused buffer (perfreport.load.files):
the same bytes, the same errors and the same loaded ranks as a fresh decompression."""

from __future__ import annotations

import gzip
import threading

import numpy as np
import pytest

from perfreport.errors import TraceError
from perfreport.load import files
from perfreport.load.discover import RankFile
from perfreport.load.kineto import load_rank_file

from .conftest import TRACES


def _read(path, reuse: bool):
    """(bytes read, None) or (None, the error's type and text)."""
    try:
        return bytes(files.read_trace_bytes(path, reuse=reuse)), None
    except Exception as exc:  # noqa: BLE001 - compared between the two ways
        return None, (type(exc), str(exc))


def _lying_trailer(data: bytes, size: int) -> bytes:
    """``data`` with its ISIZE trailer saying ``size``: the text is larger or smaller than it claims."""
    return data[:-4] + (size % (1 << 32)).to_bytes(4, "little")


def test_every_gzip_form_reads_the_same_reused_or_not(tmp_path, monkeypatch):
    text = b'{"traceEvents": [' + b",".join(b'{"ph": "X", "ts": %d, "dur": 1}' % i for i in range(20_000)) + b"]}"
    one = gzip.compress(text, mtime=0)
    members = gzip.compress(text[:1000], mtime=0) + gzip.compress(text[1000:], mtime=0)
    cases = {"one member": one, "padded": one + b"\0" * 64, "members": members, "junk after": one + b"junk",
             "truncated": one[:-40], "trailer says less": _lying_trailer(one, 100),
             "trailer says more": _lying_trailer(one, len(text) * 3), "small": gzip.compress(b"[]", mtime=0),
             "bomb": gzip.compress(b" " * 5_000_000, mtime=0)}
    monkeypatch.setattr(files, "_texts", threading.local())  # this test's own buffer
    for name, data in cases.items():  # in this order: the buffer is sized by the first, then grows
        path = tmp_path / f"{name}.json.gz"
        path.write_bytes(data)
        assert _read(path, reuse=True) == _read(path, reuse=False), name
    assert _read(tmp_path / "one member.json.gz", True)[0] == text
    assert "gzip_ratio" in _read(tmp_path / "bomb.json.gz", True)[1][1]
    assert _read(tmp_path / "truncated.json.gz", True)[1][0] is TraceError


def test_only_texts_up_to_the_bound_use_the_buffer(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_texts", threading.local())
    monkeypatch.setattr(files, "REUSED_TEXT_MAX", 1000)
    path = tmp_path / "r.json.gz"
    path.write_bytes(gzip.compress(b"[" + b" " * 998 + b"]", mtime=0))
    assert isinstance(files.read_trace_bytes(path, reuse=True), memoryview)
    path.write_bytes(gzip.compress(b"[" + b" " * 999 + b"]", mtime=0))
    assert isinstance(files.read_trace_bytes(path, reuse=True), bytes)
    assert isinstance(files.read_trace_bytes(path, reuse=False), bytes)


def test_ranks_loaded_one_after_another_through_the_buffer_are_those_loaded_fresh(monkeypatch):
    """As in a worker: each rank's text overwrites the last one's in the same buffer. Every rank
    loaded so is what a fresh load gives, also after the next one reused the buffer (nothing
    loaded keeps a view of its text), and the buffer is the same object throughout."""
    paths = [p for p in sorted(TRACES.glob("*/*.json.gz")) if p.stat().st_size < 2_000_000][:6]
    assert len(paths) >= 3
    monkeypatch.setattr(files, "_texts", threading.local())
    monkeypatch.setattr(files, "_reusing", True)
    reused = [load_rank_file(RankFile(p, None, "none")) for p in paths]
    buffers = {id(files._texts.buffer)}
    reused.append(load_rank_file(RankFile(paths[0], None, "none")))  # (the largest buffer is still large enough)
    buffers.add(id(files._texts.buffer))
    monkeypatch.setattr(files, "_reusing", False)
    fresh = [load_rank_file(RankFile(p, None, "none")) for p in paths + paths[:1]]
    assert len(buffers) == 1  # (it grows only for a larger text)
    for a, b in zip(reused, fresh):
        assert a.n_events == b.n_events and list(a.strings) == list(b.strings)
        for column in ("ts", "dur", "name", "cat", "pid_code", "tid_code"):
            np.testing.assert_array_equal(getattr(a, column), getattr(b, column), err_msg=column)


def _reusing_here(job, options, limits=None) -> bool:
    """A rank task that only says whether its process reuses text buffers."""
    return files.reused_texts()


def test_worker_processes_reuse_texts_and_the_command_does_not(tmp_path):
    """Worker processes turn the reuse on (they load rank after rank); the process that runs a
    command leaves it off (its one rank's text would only stay in memory after the scan)."""
    from perfreport.running.digest import AnalysisOptions
    from perfreport.running.executor import Executor, RankJob, local_workers, run

    jobs = [RankJob(str(tmp_path / f"r{i}.json"), json_bytes=10) for i in range(2)]
    if local_workers(jobs, 2) < 2:
        pytest.skip("needs two worker processes (two cores)")
    assert run(jobs, AnalysisOptions(), Executor(workers=2), task=_reusing_here) == [True, True]
    assert run(jobs, AnalysisOptions(), Executor(workers=1), task=_reusing_here) == [False, False]
    assert files.reused_texts() is False
