"""A gzipped trace scanned as it is decompressed (perfreport.load.streamed) is the trace that
decompressing it whole gives, and every file the streamed scan cannot take goes the old way, with
the old result or the old error."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import numpy as np
import pytest

from perfreport.errors import TraceError
from perfreport.load import files, streamed
from perfreport.load.discover import discover
from perfreport.limits import current

pytestmark = pytest.mark.skipif(not streamed.available(), reason="needs ISA-L and the C scanner")

TRACES = Path(__file__).parent / "data" / "traces"
GZIPPED = [TRACES / "hta_v100_ns_resolution" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
           TRACES / "hta_a100_nccl_rank0of2" / "nccl_data.json.gz",
           TRACES / "tracelens_b200_eager_rank0of8" / "eager_trace.json.gz"]
COLUMNS = ("ph", "cat", "name", "pid_code", "tid_code", "ts", "dur", "external_id", "flow_id", "linked", "iteration")


def load(path: Path, stream: bool, monkeypatch):
    """The rank of ``path`` (a folder of one file), streamed from the first byte or decompressed
    whole; and whether a streamed scan gave it."""
    from perfreport.load.kineto import load_rank_file

    gave = []
    real_scan = streamed.StreamedText.scan

    def recording(self, scan_document):
        done = real_scan(self, scan_document)
        gave.append(done is not None)
        return done

    with monkeypatch.context() as m:
        m.setattr(files, "STREAM_FROM", 0 if stream else 1 << 62)
        m.setattr(streamed.StreamedText, "scan", recording)
        trace = load_rank_file(discover(path)[0], current())
    return trace, gave


def assert_same(a, b) -> None:
    for name in COLUMNS:
        x, y = getattr(a, name), getattr(b, name)
        assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), name
    assert list(a.strings) == list(b.strings)
    assert repr(dataclasses.asdict(a.meta)) == repr(dataclasses.asdict(b.meta))
    assert set(a.args) == set(b.args)
    for key in a.args:
        assert np.array_equal(a.args[key].rows, b.args[key].rows), key
        assert np.array_equal(a.args[key].values, b.args[key].values, equal_nan=a.args[key].values.dtype.kind == "f")


def folder_with(tmp_path: Path, name: str, content: bytes) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "rank0.json.gz").write_bytes(content)
    return folder


@pytest.mark.parametrize("path", GZIPPED, ids=lambda p: p.parent.name)
def test_a_streamed_gzipped_trace_is_the_whole_ones(path: Path, tmp_path: Path, monkeypatch) -> None:
    """Real traces (10-15 MB of text), the decompression a chunk of 4 kB ahead at most 64 kB: the
    scan waits for it again and again, and the trace is the same to the last column."""
    folder = folder_with(tmp_path, "t", path.read_bytes())
    monkeypatch.setattr(streamed, "CHUNK", 4096)
    monkeypatch.setattr(streamed, "LEAD", 65536)
    fed, gave = load(folder, True, monkeypatch)
    whole, none = load(folder, False, monkeypatch)
    assert gave == [True] and none == []
    assert_same(fed, whole)


def test_an_event_longer_than_the_margin_goes_the_old_way(tmp_path: Path, monkeypatch) -> None:
    """With a margin of 64 bytes an event outruns the text being written now and then: the
    streamed scan gives nothing, the text is decompressed whole and scanned again."""
    from perfreport.load import _scan

    folder = folder_with(tmp_path, "t", GZIPPED[0].read_bytes())
    monkeypatch.setattr(streamed, "CHUNK", 4096)
    monkeypatch.setattr(streamed, "LEAD", 8192)
    previous = _scan._set_feed_margin(64)
    try:
        fed, gave = load(folder, True, monkeypatch)
    finally:
        _scan._set_feed_margin(previous)
    whole, _ = load(folder, False, monkeypatch)
    assert gave == [False]
    assert_same(fed, whole)


def test_files_the_streamed_scan_cannot_take_load_or_fail_as_before(tmp_path: Path, monkeypatch) -> None:
    """Two gzip members, a byte-order mark, a bare events list: the same trace as decompressed
    whole; a truncated file, a trailer that says another size: the same one-line error."""
    text = gzip.decompress(GZIPPED[1].read_bytes())
    wrong_size = bytearray(gzip.compress(text, 1))
    wrong_size[-4:] = (len(text) + 1000).to_bytes(4, "little")
    half = len(text) // 2
    cases = {
        "two_members": gzip.compress(text[:half], 1) + gzip.compress(text[half:], 1),
        "bom": gzip.compress(b"\xef\xbb\xbf" + text, 1),
        "bare_list": gzip.compress(b'[{"ph": "X", "name": "k", "cat": "kernel", "ts": 1, "dur": 2, "pid": 0, "tid": 7}]', 1),
    }
    for name, content in cases.items():
        folder = folder_with(tmp_path, name, content)
        fed, gave = load(folder, True, monkeypatch)
        whole, _ = load(folder, False, monkeypatch)
        assert gave == [False], name
        assert_same(fed, whole)
    for name, content, says in (("truncated", gzip.compress(text, 1)[:-5000], "truncated gzip file"),
                                ("wrong_size", bytes(wrong_size), "corrupt gzip file")):
        folder = folder_with(tmp_path, name, content)
        errors = []
        for stream in (True, False):
            with pytest.raises(TraceError) as info:
                load(folder, stream, monkeypatch)
            errors.append(str(info.value))
        assert errors[0] == errors[1] and says in errors[0], name


def test_the_text_is_never_whole_in_memory(tmp_path: Path, monkeypatch) -> None:
    """The decompression stays at most LEAD bytes (and a chunk) ahead of the scan, where LEAD is
    more than the scan's margin (it is never held back short of the text the scan waits for):
    the most text written but not yet scanned, sampled at every chunk, against a 15 MB text;
    also with the other test workers' load beside it (a scan not scheduled for a while)."""
    from perfreport.load import _scan

    folder = folder_with(tmp_path, "t", GZIPPED[0].read_bytes())
    monkeypatch.setattr(streamed, "CHUNK", 65536)
    monkeypatch.setattr(streamed, "LEAD", 2 << 20)
    previous = _scan._set_feed_margin(1 << 20)
    ahead = []
    real_hold = streamed.StreamedText._hold

    def hold(self, written):
        ok = real_hold(self, written)
        ahead.append(written - int(self.feed[streamed.SCANNED]))
        return ok
    monkeypatch.setattr(streamed.StreamedText, "_hold", hold)
    try:
        trace, gave = load(folder, True, monkeypatch)
    finally:
        _scan._set_feed_margin(previous)
    assert gave == [True] and trace.n_events > 60_000
    assert len(ahead) > 100 and max(ahead) <= (2 << 20) + 65536 and min(ahead) < (1 << 20)
