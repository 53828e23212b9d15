"""perfreport.gate.baselines: the store round-trips traces exactly, is atomic, refuses to
overwrite, verifies checksums, and loads from its column cache faster than from JSON."""

from __future__ import annotations

import datetime as dt
import gzip
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import pytest

from perfreport.errors import BaselineError
from perfreport.gate import baselines as store_mod
from perfreport.gate.baselines import (
    COLUMNS, list_baselines, load_traces, open_baseline, read_baseline, remove, resolve, save, verify,
)
from perfreport.load import load

from .conftest import TRACES

REPO = Path(__file__).resolve().parents[1]


def tiny_trace(folder: Path, rank: int = 0, steps: int = 3, extra_meta: dict | None = None) -> Path:
    """A plain-JSON rank file: steps, one kernel each, and device/version metadata."""
    events = []
    for i in range(steps):
        t0 = 1000.0 * i
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i + 1}", "pid": 1, "tid": 1, "ts": t0,
             "dur": 900},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t0 + 10, "dur": 5,
             "args": {"correlation": i + 1}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t0 + 20, "dur": 300,
             "args": {"correlation": i + 1, "stream": 7, "device": 0}},
        ]
    doc = {"distributedInfo": {"rank": rank, "world_size": 2, "nccl_version": "2.18.1"},
           "deviceProperties": [{"id": 0, "name": "NVIDIA A100"}], "cuda_runtime_version": "12040",
           "traceEvents": events, **(extra_meta or {})}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"rank{rank}.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture()
def two_ranks(tmp_path) -> Path:
    folder = tmp_path / "job"
    tiny_trace(folder, 0)
    tiny_trace(folder, 1)
    return folder


def test_save_and_load_round_trip(tmp_path, two_ranks):
    traces = load(two_ranks, workers=1)
    store = tmp_path / "store"
    when = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
    stored = save(store, "main", traces, commit="abc123", now=when)
    m = json.loads((store / "main" / "manifest.json").read_text())
    assert m["schema_version"] == 2 and m["name"] == "main" and m["commit"] == "abc123"
    assert [r["run"] for r in m["runs"]] == [0] and m["runs"][0]["ranks"] == m["ranks"]
    assert m["created_utc"] == "2025-03-01T12:00:00+00:00"
    assert m["gpus"] == ["NVIDIA A100"] and m["world_size"] == 2
    assert m["versions"] == {"cuda_runtime": "12040", "nccl": "2.18.1"}
    assert [r["rank"] for r in m["ranks"]] == [0, 1]
    for r in m["ranks"]:
        stored_file = store / "main" / r["file"]
        data = stored_file.read_bytes()
        assert data[:2] == b"\x1f\x8b"  # plain JSON input is stored gzip-compressed
        assert hashlib.sha256(data).hexdigest() == r["sha256"]
        assert gzip.decompress(data) == Path(r["source_file"]).read_bytes()
        assert r["steps"] == [1, 2, 3] and r["events"] == 9
    back = load_traces(open_baseline(store, "main"), fallback=pytest.fail)
    assert back.rank_ids == [0, 1] and back.source == str(stored.path)
    for rank in (0, 1):
        a, b = traces[rank], back[rank]
        for column in COLUMNS:
            assert np.array_equal(getattr(a, column), getattr(b, column), equal_nan=True), column
            assert not getattr(b, column).flags.writeable
        assert list(a.strings) == list(b.strings)
        assert set(a.args) == set(b.args)
        assert b.meta.path == str(store / "main" / f"traces/rank-{rank}.json.gz")
        assert (b.meta.rank, b.meta.distributed_info, b.meta.device_properties) == (
            a.meta.rank, a.meta.distributed_info, a.meta.device_properties)
        assert b.code("gemm") == a.code("gemm") and b.kernels().sum() == 3


def test_gzip_input_is_kept_byte_identical(tmp_path):
    src = TRACES / "hta_a100_alexnet_benchmark"
    stored = save(tmp_path, "alex", load(src, workers=1))
    (original,) = list(src.glob("*.json.gz"))
    assert (stored.path / "traces/rank-0.json.gz").read_bytes() == original.read_bytes()


def test_refuses_to_overwrite_and_force_keeps_notice(tmp_path, two_ranks):
    traces = load(two_ranks, workers=1)
    tmp_path = tmp_path / "store"
    save(tmp_path, "b", traces)
    with pytest.raises(BaselineError, match=r"already exists .* --force"):
        save(tmp_path, "b", traces)
    (tmp_path / "b" / "NOTICE.md").write_text("licence")
    (tmp_path / "b" / "stray.json.gz").write_bytes(b"x")
    save(tmp_path, "b", load(two_ranks / "rank0.json", workers=1), force=True)
    assert read_baseline(tmp_path / "b").ranks == [0]
    assert (tmp_path / "b" / "NOTICE.md").read_text() == "licence"
    assert not (tmp_path / "b" / "stray.json.gz").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.lock", "b"]  # no temporary folders left (the lock file stays)


def test_failed_save_leaves_nothing_behind(tmp_path, two_ranks):
    traces = load(two_ranks, workers=1)
    (two_ranks / "rank1.json").unlink()  # the source file vanished before saving
    with pytest.raises(BaselineError, match=r"rank1.json: cannot read the rank file"):
        save(tmp_path / "store", "x", traces)
    assert [p.name for p in (tmp_path / "store").iterdir()] == [".x.lock"]  # only the (empty) lock file


def test_checksum_mismatch_names_the_file(tmp_path, two_ranks):
    stored = save(tmp_path, "c", load(two_ranks, workers=1))
    cache = stored.path / "cache" / "rank-1.cols"
    data = bytearray(cache.read_bytes())
    data[-1] ^= 0xFF
    cache.write_bytes(bytes(data))
    with pytest.raises(BaselineError, match=r"rank-1.cols: checksum mismatch"):
        load_traces(open_baseline(tmp_path, "c"), fallback=pytest.fail)
    with pytest.raises(BaselineError, match=r"rank-1.cols: checksum mismatch"):
        verify(open_baseline(tmp_path, "c"))
    (stored.path / "traces" / "rank-0.json.gz").unlink()
    with pytest.raises(BaselineError, match=r"rank-0.json.gz: missing or unreadable"):
        verify(open_baseline(tmp_path, "c"))


def test_stale_cache_falls_back_to_the_verified_rank_files(tmp_path, two_ranks):
    stored = save(tmp_path, "d", load(two_ranks, workers=1))
    manifest_path = stored.path / "manifest.json"
    m = json.loads(manifest_path.read_text())
    m["cache_format"]["columns"] = ["ph", "cat"]  # written by a model with other columns
    manifest_path.write_text(json.dumps(m))
    seen = {}

    def fallback(files):
        seen.update(files)
        return load(files, workers=1)

    traces = load_traces(open_baseline(tmp_path, "d"), fallback=fallback)
    assert sorted(seen) == [0, 1] and traces[1].kernels().sum() == 3
    (stored.path / "traces" / "rank-1.json.gz").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    with pytest.raises(BaselineError, match=r"rank-1.json.gz: checksum mismatch"):
        load_traces(open_baseline(tmp_path, "d"), fallback=fallback)


def test_manifest_versions_are_checked(tmp_path, two_ranks):
    stored = save(tmp_path, "e", load(two_ranks, workers=1))
    manifest_path = stored.path / "manifest.json"
    m = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**m, "schema_version": 99}))
    with pytest.raises(BaselineError, match=r"newer perfreport \(baseline schema 99"):
        open_baseline(tmp_path, "e")
    manifest_path.write_text("{not json")
    with pytest.raises(BaselineError, match=r"manifest.json: unreadable manifest"):
        open_baseline(tmp_path, "e")
    manifest_path.write_text(json.dumps({"kind": "something else"}))
    with pytest.raises(BaselineError, match="not a perfreport baseline manifest"):
        read_baseline(stored.path)


def test_list_resolve_and_remove(tmp_path, two_ranks):
    traces = load(two_ranks, workers=1)
    save(tmp_path, "one", traces)
    save(tmp_path, "two", traces)
    assert [b.name for b in list_baselines(tmp_path)] == ["one", "two"]
    assert resolve("one", tmp_path).name == "one"
    assert resolve(str(tmp_path / "two"), tmp_path / "elsewhere").name == "two"  # a baseline folder
    assert resolve(str(two_ranks), tmp_path) is None  # a plain trace folder
    with pytest.raises(BaselineError, match=r"nope: neither a trace folder nor a baseline .*\(available: one, two\)"):
        resolve("nope", tmp_path)
    remove(tmp_path, "one")
    assert [b.name for b in list_baselines(tmp_path)] == ["two"]
    with pytest.raises(BaselineError, match=r"no baseline 'one' .*\(available: two;"):
        open_baseline(tmp_path, "one")
    for bad in ("", "../x", ".hidden", "a/b"):
        with pytest.raises(BaselineError, match="invalid baseline name"):
            save(tmp_path, bad, traces)
    assert list_baselines(tmp_path / "missing") == []


def test_demo_baseline_is_intact_and_loads_faster_than_its_json():
    demo = open_baseline(REPO / "baselines", "demo")
    verify(demo)
    assert demo.gpus == ["Tesla V100-DGXS-32GB"] and demo.ranks == [0]
    assert demo.manifest["ranks"][0]["steps"] == [5, 6, 7, 8, 9, 10]
    assert (demo.path / "NOTICE.md").read_text().count("BSD 3-Clause") == 1

    def best(fn, repeat=3):
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    from_cache = best(lambda: load_traces(demo, fallback=pytest.fail))
    from_json = best(lambda: load(demo.path / "traces", workers=1))
    assert from_cache < from_json / 2, (from_cache, from_json)
    assert store_mod.cache_usable(demo)


def test_baseline_save_in_ci_records_github_sha_unless_told(tmp_path, monkeypatch):
    from perfreport.cli import main

    traces = tiny_trace(tmp_path / "t", steps=4)
    store = tmp_path / "store"
    monkeypatch.setenv("GITHUB_SHA", "f" * 40)
    assert main(["baseline", "save", "ci", str(traces), "--store", str(store), "-q", "--workers", "1"]) == 0
    assert json.loads((store / "ci" / "manifest.json").read_text())["commit"] == "f" * 40
    assert main(["baseline", "save", "told", str(traces), "--store", str(store), "-q", "--workers", "1",
                 "--commit", "abc1234"]) == 0
    assert json.loads((store / "told" / "manifest.json").read_text())["commit"] == "abc1234"


def test_a_trace_with_its_epoch_in_ns_is_stored_and_compared_against(tmp_path, capsys):
    """Kineto writes ``baseTimeNanoseconds``, the trace's epoch in ns since 1970: 1.79e18 in our
    H100 recording, past 2**53. A baseline of such a trace is saved, shown and compared against,
    its epoch kept exactly (the manifest check took the field for a count and refused every
    modern trace's baseline); one past int64 is still one line naming the field."""
    from .test_bad_corpus import run_cli

    src = Path(__file__).parent / "data" / "recorded" / "setups" / "single_w1"
    with gzip.open(next(src.glob("*.json.gz")), "rt") as f:
        epoch = json.load(f)["baseTimeNanoseconds"]
    assert epoch > 2**53
    store = tmp_path / "store"
    code, _, err = run_cli(capsys, "baseline", "save", "b", src, "--store", store, "-q")
    assert code == 0, err
    manifest_path = store / "b" / "manifest.json"
    assert json.loads(manifest_path.read_text())["ranks"][0]["meta"]["base_time_ns"] == epoch
    code, out, err = run_cli(capsys, "baseline", "show", "b", "--store", store, "--verify")
    assert code == 0, err
    code, out, err = run_cli(capsys, "compare", "b", src, "--store", store, "--out", tmp_path / "o",
                             "--format", "md,json", "-q")
    assert code == 0 and "PASS" in out, (out, err)
    m = json.loads(manifest_path.read_text())
    m["ranks"][0]["meta"]["base_time_ns"] = 2**63
    manifest_path.write_text(json.dumps(m))
    code, out, err = run_cli(capsys, "baseline", "show", "b", "--store", store, "--verify")
    assert code == 2 and "base_time_ns: expected a whole number within int64" in err, err
