"""Per-rank digests and executors: the same tables whether ranks are analysed together, one by one
in worker processes, or as tasks on a real Dask cluster on loopback."""

from __future__ import annotations

import gzip
import io
import json
import pickle
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from perfreport.documents.jsondoc import json_text
from perfreport.analyses import ANALYSES
from perfreport.analyses.attribution import explain
from perfreport.analyses.memory import memory_note
from perfreport.analyses.series import time_series
from perfreport.cli import main
from perfreport.running.assemble import assemble
from perfreport.running.digest import AnalysisOptions, DigestError, DigestTrace, digest
from perfreport.running.executor import RANK_FIXED_BYTES, SMALL_JOB_BYTES, Executor, RankJob, local_workers, run
from perfreport.running.executor import small_job
from perfreport.load import load
from perfreport.pipeline import trace_jobs
from perfreport.running.progress import Progress

from .test_baselines import tiny_trace
from .conftest import TRACES, current_environment, restore_environment

TWO_RANKS = TRACES / "hta_sampled_2of128rank"
VOLATILE = ("timings_s", "timings", "created_utc", "command")


def plain(value):
    return json.loads(json_text(value))


def eight_ranks(folder: Path, ranks: int = 8) -> Path:
    """A real 8-rank job (or ``ranks``): the two sampled ranks of a 128-rank run, each given to
    every other rank, every copy started 1.5 ms later than the one before (distinct clocks, as
    in a real job)."""
    folder.mkdir(parents=True, exist_ok=True)
    sources = sorted(TWO_RANKS.glob("*.json.gz"))
    docs = [json.loads(gzip.decompress(p.read_bytes())) for p in sources]
    for rank in range(ranks):
        doc = json.loads(json.dumps(docs[rank % 2]))
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": rank, "world_size": ranks}
        for e in doc["traceEvents"]:
            if isinstance(e.get("ts"), (int, float)):
                e["ts"] += 1500 * rank
        (folder / f"rank{rank}.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    return folder


@pytest.fixture(scope="module")
def job8(tmp_path_factory) -> Path:
    return eight_ranks(tmp_path_factory.mktemp("job8"))


@pytest.fixture(scope="module")
def job4(tmp_path_factory) -> Path:
    """Four ranks: for the tests that run every command twice (each rank costs ~0.1 s a command)."""
    return eight_ranks(tmp_path_factory.mktemp("job4"), ranks=4)


@pytest.mark.parametrize("source,compare", [("two", True), ("eight", True), ("eight", False)])
def test_digests_give_the_tables_of_the_whole_trace_set(source, compare, job8):
    """A compare's digests (gate inputs and attribution parts) and an analyze's (neither: a
    smaller digest) give every table of the whole trace set."""
    path = TWO_RANKS if source == "two" else job8
    full = load(path, workers=1)
    options = AnalysisOptions(gate=True, attribution=True) if compare else AnalysisOptions()
    digests = [digest(t, options) for t in load(path, workers=1)]
    traces, tables = assemble(digests, str(path), keep_pairs=compare)
    assert sorted(tables) == sorted(name for name, _ in ANALYSES)
    for name, fn in ANALYSES:
        assert plain(tables[name].to_dict(orient="records")) == plain(fn(full).to_dict(orient="records")), name
    assert plain(time_series(traces)) == plain(time_series(full))
    assert memory_note(traces) == memory_note(full)
    if compare:  # the explanation of a change reads only the digests too
        assert plain(explain(traces, traces).to_dict()) == plain(explain(full, full).to_dict())
    else:  # the gate's extra per-rank inputs are neither made nor sent
        gated = [digest(t, AnalysisOptions(gate=True, attribution=True)) for t in full]
        assert all(set(d.memo) < set(g.memo) for d, g in zip(digests, gated))
        assert sum(len(pickle.dumps(d)) for d in digests) < sum(len(pickle.dumps(g)) for g in gated)
    if source == "eight":
        assert len(tables["stragglers"]) == 8 and tables["collective_skew"]["ranks"].max() == 8


def test_a_digest_holds_no_event_table():
    (trace,) = load(TWO_RANKS / "sampled_rank-0.json.gz", workers=1)
    d = digest(trace)
    stand_in = DigestTrace(d.meta, d.memo, d.n_events)
    with pytest.raises(DigestError, match="'ts'"):
        stand_in.ts
    with pytest.raises(DigestError, match="no 'call_stack'"):
        stand_in.memo("call_stack", lambda: None)
    assert not any(hasattr(v, "__len__") and len(v) >= trace.n_events for v in d.memo.values()
                   if not isinstance(v, (str, dict)))


def test_worker_processes_give_what_one_process_gives(job8):
    jobs = trace_jobs(job8)
    seen = []
    one = run(jobs, AnalysisOptions(), Executor(workers=1))
    many = run(jobs, AnalysisOptions(), Executor(workers=2), on_done=lambda d: seen.append(d.meta.rank))
    assert sorted(seen) == list(range(8))
    assert all(d.worker_peak_rss > 0 for d in many)
    a, b = assemble(one, "x")[1], assemble(many, "x")[1]
    for name in a:
        assert plain(a[name].to_dict(orient="records")) == plain(b[name].to_dict(orient="records")), name


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a thread's own nice value is Linux's")
def test_the_work_done_while_the_workers_load_yields_to_them(job8):
    """What the parent does while its workers load (the reports' imports) runs on a thread at a
    lower priority than theirs, which the workers keep: on two cores it took a core's share from
    the loads. The main thread's priority is untouched."""
    import os
    import threading

    from perfreport.running.executor import MEANWHILE_NICE
    from perfreport.running.forked import cores

    if cores() < 2:
        pytest.skip("one core: the ranks run in this process, with nothing done beside them")

    seen = {}

    def meanwhile() -> None:
        seen["thread"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before = os.getpriority(os.PRIO_PROCESS, 0)
    digests = run(trace_jobs(job8), AnalysisOptions(), Executor(workers=2, while_waiting=meanwhile))
    assert len(digests) == 8
    assert seen["thread"] == min(before + MEANWHILE_NICE, 19) > before
    assert os.getpriority(os.PRIO_PROCESS, 0) == before


def test_small_jobs_run_here_unless_workers_are_asked_for(job8, tmp_path):
    """A job whose ranks are little work beside its largest runs in this process (starting
    workers would cost more than they save); a bigger one, a remote one, or an explicit
    --workers gets the processes it allows."""
    for r in range(2):
        tiny_trace(tmp_path / "two", r)
    two = trace_jobs(tmp_path / "two")
    assert small_job(two) and local_workers(two, None) == 1
    assert local_workers(two, 2) == min(2, local_workers(two, 100))  # asked for: as many as allowed
    assert not small_job(trace_jobs(job8))  # 7 ranks beside the largest: 7 x 16 MB of fixed cost
    beside = SMALL_JOB_BYTES - RANK_FIXED_BYTES  # the JSON one rank may have beside a larger one
    sized = [RankJob("a.json", json_bytes=10 << 30), RankJob("b.json", json_bytes=beside)]
    assert small_job(sized) and not small_job([sized[0], RankJob("b.json", json_bytes=beside + 1)])
    cached = RankJob("c.json", json_bytes=10 << 30, cache="c.cols", digest_sha256="0" * 64)  # its digest is read
    assert small_job([sized[0], cached]) and not small_job([sized[0], RankJob("c.json", json_bytes=10 << 30)])
    assert not small_job([RankJob("s3://bucket/rank0.json"), RankJob("s3://bucket/rank1.json")])


def _summary(folder: Path) -> dict:
    doc = json.loads((folder / "report.json").read_text())
    return {k: v for k, v in doc.items() if k not in VOLATILE}


def _report(folder: Path) -> dict:
    doc = json.loads((folder / "report.json").read_text())
    for side in ("baseline", "candidate"):
        doc[side]["analyses"] = {k: v for k, v in doc[side]["analyses"].items() if k not in VOLATILE}
    return {k: v for k, v in doc.items() if k not in VOLATILE}


@pytest.fixture()
def environment_restored():
    """The environment as it was before the test. Dask's nanny, here in the test's own process,
    sets its workers' variables in it for good (``distributed.nanny.pre-spawn-environ``:
    MALLOC_TRIM_THRESHOLD_, OMP_NUM_THREADS and more), and every process a later test starts
    would inherit them."""
    saved = current_environment()
    yield
    restore_environment(saved)


def test_dask_cluster_gives_the_local_results(tmp_path, job4, capsys, environment_restored):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None, scheduler_port=0, silence_logs=40) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://127.0.0.1:")
        t0 = time.monotonic()
        assert main(["analyze", str(job4), "--out", str(tmp_path / "dask"), "--format", "json", "-q",
                     "--executor", "dask", "--scheduler", address]) == 0
        code = main(["compare", str(TWO_RANKS), str(job4), "--out", str(tmp_path / "dask-cmp"), "--format", "json",
                     "-q", "--executor", "dask", "--scheduler", address])
        assert main(["baseline", "save", "job4", str(job4), "--store", str(tmp_path / "dask-store"), "-q",
                     "--executor", "dask", "--scheduler", address]) == 0
        capsys.readouterr()
        # the caller's limits travel with the tasks (a Dask worker has an environment of its own)
        assert main(["analyze", str(job4), "--out", str(tmp_path / "dask-limited"), "--format", "json", "-q",
                     "--limit", "max_events=1000", "--executor", "dask", "--scheduler", address]) == 2
        dask_limited = capsys.readouterr().err
        # an error inside a Dask worker (a step number beyond int64) is one line naming the file
        huge = tmp_path / "huge"
        trace = tiny_trace(huge, 0)
        trace.write_text(trace.read_text().replace("ProfilerStep#1", f"ProfilerStep#{2**64}"))
        tiny_trace(huge, 1)
        assert main(["analyze", str(huge), "--out", str(tmp_path / "dask-huge"), "--format", "json", "-q",
                     "--executor", "dask", "--scheduler", address]) == 2
        assert capsys.readouterr().err == f"perfreport: error: {trace}: profiler step number 1.84e+19 " \
                                          f"(ProfilerStep#…) is beyond int64; the trace is corrupt\n"
        assert time.monotonic() - t0 < 120
    # here in this process (--workers 1: that forked workers give the same is checked above)
    assert main(["analyze", str(job4), "--out", str(tmp_path / "local"), "--format", "json", "-q", "--workers", "1"]) == 0
    assert main(["compare", str(TWO_RANKS), str(job4), "--out", str(tmp_path / "local-cmp"), "--format", "json",
                 "-q", "--workers", "1"]) == code
    assert main(["baseline", "save", "job4", str(job4), "--store", str(tmp_path / "local-store"), "-q",
                 "--workers", "1"]) == 0
    capsys.readouterr()
    assert main(["analyze", str(job4), "--out", str(tmp_path / "local-limited"), "--format", "json", "-q",
                 "--limit", "max_events=1000", "--workers", "1"]) == 2
    local_limited = capsys.readouterr().err
    for err in (dask_limited, local_limited):  # whichever rank a worker finished first
        assert re.fullmatch(r"perfreport: error: \S+/rank\d\.json\.gz: [\d,]+ events, more than the limit of 1,000; "
                            r"raise it with --limit max_events=2000 \(or PERFREPORT_LIMITS=max_events=2000\)\n", err), err
    dask_doc, local_doc = _summary(tmp_path / "dask"), _summary(tmp_path / "local")
    assert len(dask_doc["ranks"]) == 4 and dask_doc == local_doc
    assert _report(tmp_path / "dask-cmp") == _report(tmp_path / "local-cmp")
    # the same baseline, file for file: traces, column caches and the workers' digests
    stores = [tmp_path / "dask-store" / "job4", tmp_path / "local-store" / "job4"]
    manifests = [json.loads((s / "manifest.json").read_text()) for s in stores]
    for m in manifests:
        m.pop("created_utc"), [r.pop("created_utc") for r in m["runs"]]
    assert manifests[0] == manifests[1] and len(manifests[0]["ranks"]) == 4
    files = [sorted(p.relative_to(s) for p in s.rglob("*") if p.is_file()) for s in stores]
    assert files[0] == files[1] and sum(p.suffix == ".digest" for p in files[0]) == 4
    assert [p for p in files[0] if p.name != "manifest.json"  # (its dates differ: compared above)
            and (stores[0] / p).read_bytes() != (stores[1] / p).read_bytes()] == []


def test_dask_without_a_scheduler_is_a_usage_error(tmp_path, capsys):
    assert main(["analyze", str(TWO_RANKS), "--out", str(tmp_path), "--executor", "dask"]) == 2
    assert "--scheduler" in capsys.readouterr().err


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_is_one_live_line():
    stream = _Tty()
    p = Progress(stream)
    p.phase("baseline")
    p.start(2, 3_000_000)

    class D:
        class meta:
            json_bytes = 1_500_000

    p.rank_done(D)
    p.finish()
    text = stream.getvalue()
    assert "\n" not in text and "\r" in text
    assert "perfreport: baseline: 1/2 rank(s), 2/3 MB" in text


def test_progress_without_a_terminal_is_silent_when_quick_and_plain_when_slow(monkeypatch):
    import perfreport.running.progress as progress

    quick = io.StringIO()
    p = Progress(quick)
    p.start(1, 10)
    p.finish()
    assert quick.getvalue() == ""
    monkeypatch.setattr(progress, "PLAIN_AFTER_S", 0.0)
    slow = io.StringIO()
    p = Progress(slow)
    p.phase("candidate")
    p.start(4, 4_000_000)
    p.finish()
    lines = slow.getvalue().splitlines()
    assert lines[0] == "perfreport: candidate..."
    assert lines[1] == "perfreport: candidate: loading 4 rank(s), 4 MB of JSON"
    quiet = io.StringIO()
    Progress(quiet, "quiet").start(1, 1)
    assert quiet.getvalue() == ""


def test_a_stored_baseline_reads_its_analyses_and_gives_the_same_results(tmp_path, job4, capsys):
    store = tmp_path / "store"  # (every command here in this process: forked workers give the same, see above)
    assert main(["baseline", "save", "b8", str(job4), "--store", str(store), "--workers", "1"]) == 0
    digests = sorted((store / "b8" / "cache").glob("*.digest"))
    assert len(digests) == 4
    for name in ("cached", "again"):
        assert main(["analyze", str(store / "b8"), "--out", str(tmp_path / name), "--format", "json", "-q",
                     "--workers", "1"]) == 0
        assert main(["compare", "b8", str(TWO_RANKS), "--store", str(store), "--out", str(tmp_path / f"{name}-cmp"),
                     "--format", "json", "-q", "--workers", "1"]) in (0, 1)
        for d in digests:  # the second round recomputes from the column cache
            d.unlink(missing_ok=True)
    capsys.readouterr()
    assert _summary(tmp_path / "cached") == _summary(tmp_path / "again")
    assert _report(tmp_path / "cached-cmp") == _report(tmp_path / "again-cmp")


def test_a_digest_from_other_code_or_settings_is_not_used(tmp_path):
    from perfreport.running import digest_cache

    (trace,) = load(TWO_RANKS / "sampled_rank-0.json.gz", workers=1)
    d = digest(trace, AnalysisOptions(gate=True, attribution=True))
    data = digest_cache.encode(d, AnalysisOptions())
    back = digest_cache.decode(data, AnalysisOptions(), "x")
    assert back is not None and back.meta.path == "x" and set(back.memo) == set(d.memo)
    assert digest_cache.decode(data, AnalysisOptions(exact_kernel_names=True), "x") is None
    assert digest_cache.decode(data.replace(digest_cache.code_fingerprint().encode(), b"0" * 64), AnalysisOptions(),
                               "x") is None
    assert digest_cache.decode(b"\x93garbage", AnalysisOptions(), "x") is None


def test_a_bad_rank_in_a_worker_is_the_usual_one_line_error(tmp_path, job8, capsys):
    bad = tmp_path / "job"
    shutil.copytree(job8, bad)
    (bad / "rank3.json.gz").write_bytes(gzip.compress(b'{"foo": 1}'))
    assert main(["analyze", str(bad), "--out", str(tmp_path / "o"), "--workers", "2", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perfreport: error:") and "rank3.json.gz" in err and "not a Kineto trace" in err
    assert err.count("\n") == 1


def test_a_url_through_fsspec_gives_the_local_results(tmp_path, capsys):
    pytest.importorskip("fsspec")
    url = "file://" + str(TWO_RANKS.resolve())
    assert main(["analyze", url, "--out", str(tmp_path / "url"), "--format", "json", "-q"]) == 0
    assert main(["analyze", str(TWO_RANKS), "--out", str(tmp_path / "path"), "--format", "json", "-q"]) == 0
    capsys.readouterr()
    a, b = _summary(tmp_path / "url"), _summary(tmp_path / "path")
    assert a["source"] == url and a["files"][0]["file"].startswith("file://")
    assert [f["checksum"] for f in a["files"]] == [f["checksum"] for f in b["files"]]
    for key in set(a) - {"source", "files", "ranks"}:
        assert a[key] == b[key], key


def test_samples_below_the_step_come_from_the_digests(tmp_path):
    """A compare where a side has few steps judges matched GPU op and collective calls: the
    short ranks send their calls in the digest, a long side is analysed again for them; the
    invocation tables equal those built from the loaded events."""
    import sys

    from pandas.testing import assert_frame_equal

    from perfreport.config import Config
    from perfreport.pipeline import compare, few_steps_limit, gate_side

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from trace_edit import keep_steps, read_trace, write_trace

    def same_calls(digested, path):
        got = gate_side("x", digested, config, invocations=True).invocations
        want = gate_side("x", load(path, workers=1), config, invocations=True).invocations
        assert len(want) > 100
        assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))

    config = Config()
    short = TRACES.parent / "recorded" / "short_multirank"
    run1, run2 = short / "ddp_w2_gloo_1step_run1", short / "ddp_w2_gloo_1step_run2"
    c = compare(run1, run2, config=config, workers=1)
    assert any(ch.evidence.sample_kind == "kernel invocation" for ch in c.verdict.checks if ch.evidence)
    assert all(("invocations", False) in t._memo for t in c.candidate.traces)  # sent by the workers
    same_calls(c.candidate.traces, run2)

    long_run = TRACES.parent / "recorded" / "repeat_base" / "run1"  # 8 steps: its digest leaves the calls out
    doc = read_trace(long_run / "rank0.pt.trace.json.gz")
    steps = sorted({int(e["name"].split("#")[1]) for e in doc["traceEvents"]
                    if str(e.get("name", "")).startswith("ProfilerStep#")})
    assert len(steps) >= few_steps_limit(config)
    write_trace(keep_steps(doc, set(steps[:4])), tmp_path / "short" / "rank0.json")
    mixed = compare(long_run, tmp_path / "short", config=config, workers=1)
    assert any(ch.evidence.sample_kind == "kernel invocation" for ch in mixed.verdict.checks if ch.evidence)
    same_calls(mixed.baseline.traces, long_run)


def document(comparison, summaries=None) -> dict:
    """A comparison's report.json as data, without what differs from run to run (timings, dates)."""
    from perfreport import pipeline

    def clean(d):
        if isinstance(d, dict):
            return {k: clean(v) for k, v in d.items() if k not in ("timings", "timings_s", "created_utc")}
        return [clean(x) for x in d] if isinstance(d, list) else d
    return clean(json.loads(json_text(pipeline.report_document(comparison, summaries=summaries))))


def test_gate_inputs_made_while_the_other_side_runs_are_those_made_after(monkeypatch):
    """A compare makes each side's gate inputs as soon as its ranks are in (here one worker:
    the baseline's while the candidate's rank is still to come), and the comparison is the one
    made from inputs made after both sides are in: same report, checks and explanation."""
    from perfreport import pipeline
    from perfreport.config import Config

    events: list[str] = []
    real_gate_side, real_run_sides = pipeline.gate_side, pipeline.run_sides
    monkeypatch.setattr(pipeline, "gate_side", lambda *a, **k: events.append(a[0]) or real_gate_side(*a, **k))

    def run_sides(*args, **kwargs):
        out = real_run_sides(*args, **kwargs)
        events.append("ranks done")
        return out

    monkeypatch.setattr(pipeline, "run_sides", run_sides)
    runs = TRACES.parent / "recorded" / "repeat_base"
    ahead = pipeline.compare(runs / "run1", runs / "run2", config=Config(), workers=1)
    assert events == ["baseline", "candidate", "ranks done"]
    events.clear()
    monkeypatch.setattr(pipeline, "run_sides", lambda *a, side_done=None, **k: run_sides(*a, **k))
    after = pipeline.compare(runs / "run1", runs / "run2", config=Config(), workers=1)
    assert events == ["ranks done", "baseline", "candidate"]
    assert len(ahead.verdict.checks) > 5
    assert document(ahead) == document(after)


def test_the_sides_documents_made_beside_the_attribution_are_those_made_after(monkeypatch):
    """``judged`` is called once, after the verdict and before the attribution is taken, with
    the two analyses the report describes; the report made from the sides' documents built
    there equals the one that builds them itself, and so does one whose attribution ran here
    (no child), after the op sums it reads were let go for the documents."""
    from perfreport import pipeline
    from perfreport.config import Config

    seen: list = []

    def judged(baseline, candidate) -> None:
        seen.append((baseline, candidate, pipeline.summary_document(baseline), pipeline.summary_document(candidate)))

    runs = TRACES.parent / "recorded" / "repeat_base"
    comparison = pipeline.compare(runs / "run1", runs / "run2", config=Config(), workers=1, judged=judged)
    assert len(seen) == 1
    baseline, candidate, b_doc, c_doc = seen[0]
    assert baseline is comparison.baseline and candidate is comparison.candidate
    made_ahead = document(comparison, (b_doc, c_doc))
    assert made_ahead == document(comparison) and made_ahead["baseline"]["ranks"]

    class Here:  # an attribution whose child could not be made: it runs here, after the documents
        def __init__(self, fn, name, patience=120.0):
            self.fn = fn

        def result(self):
            return self.fn()

        def stop(self):
            pass

    monkeypatch.setattr(pipeline, "Beside", Here)
    here = pipeline.compare(runs / "run1", runs / "run2", config=Config(), workers=1, judged=judged)
    assert here.explanation is not None and document(here) == document(comparison)
