"""Generate the broken-input corpus: ``python tests/data/bad/make.py`` rewrites tests/data/bad/files/.

Every case is a small file (or a small set of files) that a user, a crashed profiler or an
attacker could hand perfreport, and what perfreport must answer:

* ``ok``: exit 0, sane numbers; events with unusable values dropped and counted in a note
  (``note`` names the words the summary's note must contain);
* ``error``: exit 2 and one line ``perfreport: error: <file>: <problem>`` (``expect`` is a
  piece of the problem's wording).

Files that are big when written out (a gzip bomb, a 10 MB name) or that cannot live in git (a
directory, a symlink loop, an unreadable file) are made at test time by :func:`build_special`;
everything else is committed so it can be fed to other tools by hand. tests/test_bad_corpus.py
runs every case and checks the committed files match this script.
"""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
FILES = HERE / "files"


@dataclass(frozen=True)
class Case:
    name: str  # file (or folder) name under files/
    expect: str  # "ok" or a piece of the error message
    note: str = ""  # ok: words the rank's note must contain
    command: str = "analyze"  # analyze | compare (compare: baseline = files/good_baseline_job)


def events(steps: int = 3, rank_offset: float = 0.0) -> list[dict]:
    """A well-formed rank: ProfilerSteps, a launch and a kernel in each (µs, unix-epoch-like ts)."""
    out = []
    for i in range(steps):
        t0 = 1.7e12 + 1000.0 * i + rank_offset
        out += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i + 1}", "pid": 1, "tid": 1, "ts": t0,
             "dur": 900},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t0 + 5, "dur": 20},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t0 + 10,
             "dur": 5, "args": {"correlation": i + 1, "External id": i + 1}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t0 + 20, "dur": 300,
             "args": {"correlation": i + 1, "stream": 7, "device": 0, "External id": i + 1}},
        ]
    return out


def doc(evs: list, rank: int = 0, **meta) -> dict:
    return {"schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 1},
            "deviceProperties": [{"id": 0, "name": "NVIDIA A100"}], **meta, "traceEvents": evs}


def dumps(value) -> bytes:
    return json.dumps(value).encode()


def with_event(extra: dict | list, steps: int = 3) -> bytes:
    """A good trace with one more (bad) event appended."""
    return dumps(doc(events(steps) + [extra]))


def kernel(**fields) -> dict:
    base = {"ph": "X", "cat": "kernel", "name": "bad", "pid": 0, "tid": 7, "ts": 1.7e12 + 50, "dur": 10,
            "args": {"stream": 7, "device": 0, "correlation": 99}}
    base.update(fields)
    return base


def nested(depth: int) -> bytes:
    """A trace whose extra kernel's args hold ``depth`` nested arrays and objects."""
    deep = b'{"a": [' * (depth // 2) + b"1" + b"]}" * (depth // 2)
    return with_event(kernel(args={"stream": 7, "correlation": 99, "deep": "@DEEP@"})).replace(b'"@DEEP@"', deep)


# --- the committed cases: name -> (bytes, Case) ---------------------------------------------------
def corpus() -> list[tuple[Case, bytes]]:
    good = dumps(doc(events()))
    gz = gzip.compress(good, mtime=0)
    cases: list[tuple[Case, bytes]] = [
        # the four failures of issue 13
        (Case("name_not_utf8.json", "ok"), good.replace(b'"gemm"', b'"ge\xff\xfemm\x80"', 1)),
        (Case("dur_1e308.json", "ok", note="duration over"), with_event(kernel(dur=1e308))),
        (Case("array_form.json", "ok"), dumps(events())),
        (Case("array_form_unterminated.json", "ok"), dumps(events())[:-1] + b",\n"),
        (Case("array_form_nan.json", "NaN and Infinity are not valid JSON"),
         dumps(events()).replace(b'"dur": 300', b'"dur": NaN', 1)),
        # absurd numbers
        (Case("dur_negative.json", "ok", note="negative duration"), with_event(kernel(dur=-5))),
        (Case("dur_huge_finite.json", "ok", note="duration over"), with_event(kernel(dur=1e12))),
        (Case("ts_negative_far.json", "ok", note="from the others"), with_event(kernel(ts=-1e15))),
        (Case("ts_1e308.json", "ok", note="numeric timestamp"), with_event(kernel(ts=1e308))),
        (Case("ts_1e20.json", "ok", note="numeric timestamp"), with_event(kernel(ts=1e20))),
        (Case("ts_far_future.json", "ok", note="from the others"), with_event(kernel(ts=9e15))),
        (Case("nan_literal.json", "NaN and Infinity are not valid JSON"), good.replace(b'"dur": 300', b'"dur": NaN', 1)),
        (Case("infinity_literal.json", "NaN and Infinity are not valid JSON"), good.replace(b'"dur": 300', b'"dur": Infinity', 1)),
        (Case("minus_infinity_literal.json", "NaN and Infinity are not valid JSON"), good.replace(b'"ts": 1700000000020.0', b'"ts": -Infinity', 1)),
        (Case("ts_string.json", "ok", note="numeric timestamp"), with_event(kernel(ts="yesterday"))),
        (Case("ts_object.json", "ok", note="numeric timestamp"), with_event(kernel(ts={"us": 5}))),
        (Case("ts_array.json", "ok", note="numeric timestamp"), with_event(kernel(ts=[1, 2]))),
        (Case("ts_null.json", "ok", note="numeric timestamp"), with_event(kernel(ts=None))),
        (Case("ts_bool.json", "ok", note="numeric timestamp"), with_event(kernel(ts=True))),
        (Case("dur_string.json", "ok", note="finite duration"), with_event(kernel(dur="long"))),
        (Case("dur_object.json", "ok", note="finite duration"), with_event(kernel(dur={"v": 1}))),
        (Case("dur_missing.json", "ok", note="finite duration"), with_event({k: v for k, v in kernel().items()
                                                                             if k != "dur"})),
        (Case("ts_numeric_string.json", "ok"), with_event(kernel(ts="1700000000050.5", dur="10"))),
        (Case("huge_ids.json", "ok"), with_event(kernel(pid="Spans", tid=1e30, args={"correlation": 10**30,
                                                                                      "stream": "x"}))),
        # structure
        (Case("events_not_objects.json", "ok", note="not a JSON object"),
         dumps(doc(events() + [1, "x", None, [], True, 2.5]))),
        (Case("ph_unknown.json", "ok"), with_event(kernel(ph="Q"))),
        (Case("ph_not_string.json", "ok"), with_event(kernel(ph=7))),
        (Case("ph_missing.json", "ok", note="phase"), with_event({k: v for k, v in kernel().items() if k != "ph"})),
        (Case("nul_and_control_chars.json", "ok"),
         with_event(kernel(name="k\u0000\u0001\u001b[31mred\u007f\u2028<script>alert(1)</script>\n::error::x"))),
        (Case("args_nested_1000.json", "ok"), nested(1000)),
        (Case("args_nested_3000.json", "nested too deep"), nested(3000)),
        (Case("args_not_object.json", "ok"), with_event(kernel(args=[1, 2, 3]))),
        (Case("overlapping_kernels.json", "ok"), dumps(doc(events() + [kernel(ts=1.7e12 + 20, dur=900),
                                                                       kernel(ts=1.7e12 + 21, dur=50, tid=8)]))),
        (Case("reversed_events.json", "ok"), dumps(doc(events()[::-1]))),
        (Case("overlapping_steps.json", "ok"), dumps(doc(events() + [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 1.7e12 + 100,
             "dur": 5000}]))),
        (Case("zero_gpu_events.json", "ok", note="no GPU activity"),
         dumps(doc([e for e in events() if e["cat"] != "kernel"]))),
        (Case("zero_steps.json", "ok"), dumps(doc([e for e in events() if e["cat"] != "user_annotation"]))),
        (Case("zero_events.json", "ok", note="no GPU activity"), dumps(doc([]))),
        (Case("only_metadata_events.json", "ok", note="no GPU activity"),
         dumps(doc([{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}]))),
        (Case("zero_durations.json", "ok"), dumps(doc([dict(e, dur=0) for e in events()]))),
        (Case("duplicate_keys.json", "ok"), good.replace(b'"dur": 300', b'"dur": 1e308, "dur": 300', 1)),
        (Case("distributed_info_garbage.json", "ok"),
         dumps(doc(events(), distributedInfo={"rank": "zero", "world_size": -4}))),
        (Case("device_properties_garbage.json", "ok"), dumps(doc(events(), deviceProperties={"id": "x"}))),
        (Case("metadata_not_utf8.json", "ok"), dumps(doc(events(), traceName="t")).replace(b'"t"', b'"t\xff"', 1)),
        (Case("bom.json", "ok"), b"\xef\xbb\xbf" + good),
        # not traces
        (Case("empty.json", "file is empty"), b""),
        (Case("whitespace.json", "invalid JSON"), b" \n\t "),
        (Case("top_level_string.json", "top level is not a JSON object"), b'"trace"'),
        (Case("top_level_number.json", "top level is not a JSON object"), b"42"),
        (Case("trace_events_null.json", '"traceEvents" is null'), b'{"traceEvents": null}'),
        (Case("no_trace_events.json", 'no "traceEvents"'), b'{"schemaVersion": 1}'),
        (Case("binary_garbage.json", "invalid JSON"), bytes(range(256)) * 8),
        (Case("cut_in_half.json", "invalid JSON"), good[: len(good) // 2]),
        (Case("lone_surrogate_escape.json", "invalid JSON"), good.replace(b'"gemm"', b'"\\ud800"', 1)),
        # gzip
        (Case("truncated.json.gz", "truncated gzip"), gz[: len(gz) // 2]),
        (Case("gzip_trailing_garbage.json.gz", "corrupt gzip"), gz + b"garbage after the stream"),
        (Case("gzip_zero_padding.json.gz", "ok"), gz + b"\0" * 512),
        (Case("gzip_multi_member.json.gz", "ok"), gzip.compress(good[:100], mtime=0) + gzip.compress(good[100:],
                                                                                                     mtime=0)),
        (Case("plain_json_named_gz.json.gz", "ok"), good),
        (Case("gzip_of_garbage.json.gz", "invalid JSON"), gzip.compress(b"\x00\x01garbage", mtime=0)),
    ]
    return cases


# --- compare cases: folders -------------------------------------------------------------------------
def compare_corpus() -> list[tuple[Case, dict[str, bytes]]]:
    """Candidates for ``compare files/good_baseline_job CANDIDATE`` (the baseline: ranks 0-1, 6 steps)."""
    return [
        (Case("disjoint_ranks_job", "ok", command="compare"),
         {"rank2.json": dumps(doc(events(6), rank=2)), "rank3.json": dumps(doc(events(6), rank=3))}),
        (Case("disjoint_steps_job", "ok", command="compare"),
         {"rank0.json": dumps(doc([dict(e, name=e["name"].replace("Step#", "Step#10")) for e in events(6)])),
          "rank1.json": dumps(doc([dict(e, name=e["name"].replace("Step#", "Step#10")) for e in events(6)],
                                  rank=1))}),
        (Case("zero_gpu_job", "ok", command="compare"),
         {"rank0.json": dumps(doc([e for e in events(6) if e["cat"] != "kernel"]))}),
        (Case("zero_steps_job", "ok", command="compare"),
         {"rank0.json": dumps(doc([e for e in events(6) if e["cat"] != "user_annotation"]))}),
    ]


GOOD_BASELINE_JOB = {"rank0.json": dumps(doc(events(6))), "rank1.json": dumps(doc(events(6), rank=1))}
BAD_CONFIGS = {  # name -> (perfreport.toml text, words of the error)
    "config_not_toml.toml": ("[relative.step_time\nmax_increase_pct = 3\n", "invalid TOML"),
    "config_bad_value.toml": ("[relative.step_time]\nmax_increase_pct = -5\n", "max_increase_pct"),
    "config_bad_level.toml": ('[relative.step_time]\nlevel = "explode"\n', "level"),
    "config_unknown_key.toml": ("[relative.step_tiem]\nmax_increase_pct = 3\n", "step_tiem"),
    "config_wrong_type.toml": ('[relative.step_time]\nmax_increase_pct = "three"\n', "max_increase_pct"),
    "config_nan.toml": ("[relative.step_time]\nmax_increase_pct = nan\n", "max_increase_pct"),
}


def write(folder: Path = FILES) -> None:
    """Write every committed case into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for case, data in corpus():
        (folder / case.name).write_bytes(data)
    for case, files in [*compare_corpus(), (Case("good_baseline_job", "ok"), GOOD_BASELINE_JOB)]:
        (folder / case.name).mkdir(exist_ok=True)
        for name, data in files.items():
            (folder / case.name / name).write_bytes(data)
    for name, (text, _) in BAD_CONFIGS.items():
        (folder / name).write_text(text)
    (folder / "empty.toml").write_text("# the default configuration\n")


# --- made at test time --------------------------------------------------------------------------
def gzip_bomb(path: Path, expanded_mb: int = 200) -> Path:
    """One gzip member of a valid trace padded with whitespace: ~1000x smaller than its text."""
    body = b'{"traceEvents": [' + b" " * (expanded_mb << 20) + b"]}"
    path.write_bytes(gzip.compress(body, compresslevel=1, mtime=0))
    return path


def gzip_bomb_multi_member(path: Path, members: int = 300) -> Path:
    """Many small members whose last trailer (ISIZE) looks harmless: only streaming catches it."""
    member = gzip.compress(b" " * (1 << 20), compresslevel=9, mtime=0)
    path.write_bytes(gzip.compress(b'{"traceEvents": [', mtime=0) + member * members + gzip.compress(b"]}", mtime=0))
    return path


def build_special(folder: Path) -> dict[str, tuple[Path, str]]:
    """Cases that cannot be committed: {name: (path to analyze, expected error words)}."""
    folder.mkdir(parents=True, exist_ok=True)
    good = dumps(doc(events()))
    out = {
        "gzip_bomb": (gzip_bomb(folder / "bomb.json.gz"), "gzip bomb"),
        "gzip_bomb_multi_member": (gzip_bomb_multi_member(folder / "bomb_multi.json.gz"), "gzip bomb"),
    }
    big = folder / "name_10mb.json"
    big.write_bytes(with_event(kernel(name="x" * (10 << 20))))
    out["name_10mb"] = (big, "max_name_kb")
    directory = folder / "dir_rank" / "rank0.json"
    directory.mkdir(parents=True)
    out["rank_path_is_directory"] = (directory, "no trace files")
    loop_a, loop_b = folder / "loop" / "rank0.json", folder / "loop" / "rank1.json"
    loop_a.parent.mkdir()
    os.symlink(loop_b, loop_a)
    os.symlink(loop_a, loop_b)
    out["symlink_loop"] = (loop_a, "symbolic link")
    dangling = folder / "dangling.json"
    os.symlink(folder / "nowhere.json", dangling)
    out["dangling_symlink"] = (dangling, "symbolic link")
    fifo = folder / "fifo.json"
    os.mkfifo(fifo)
    out["fifo"] = (fifo, "not a regular file")
    (folder / "good.json").write_bytes(good)
    return out


if __name__ == "__main__":
    write()
    print(f"wrote {len(corpus()) + len(compare_corpus()) + 1 + len(BAD_CONFIGS)} cases to {FILES}")
