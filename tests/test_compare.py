"""``perfreport compare`` and ``perfreport baseline`` end to end: exit codes, report.json and the
terminal verdict, on the real demo pair, on tiny traces with injected regressions (10 % slower
steps, +10 points of GPU idle, lost comm/compute overlap, a new synchronising D2H copy), on
mismatched inputs, and on bad input.

Expected numbers come from the raw JSON (the demo's step times) or from the tiny traces'
construction, never from the code under test.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from perfreport.cli import main

from .conftest import TRACES, shared_trace

REPO = Path(__file__).resolve().parents[1]
DEMO_CANDIDATE = REPO / "examples" / "resnet50-workers0"


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def report(folder: Path) -> dict:
    return json.loads((folder / "report.json").read_text())


def check(doc: dict, check_id: str) -> dict:
    found = [c for c in doc["checks"] if c["id"] == check_id]
    assert len(found) == 1, (check_id, [c["id"] for c in doc["checks"]])
    return found[0]


# --- tiny traces ---------------------------------------------------------------------------------
JITTER = [0, 10, -5, 5, 2, -2, 3, 1]
"""Per-step variation (µs) of the tiny traces: steady, like a GPU-bound job."""


def tiny_job(folder: Path, *, scale: float = 1.0, gap_us: float = 20.0, comm_at: float | None = None,
             d2h: bool = False, rank: int = 0) -> Path:
    """8 profiler steps of ~1 ms; per step two compute kernels (300 and 200 µs, ``gap_us``
    apart), optionally an NCCL kernel of 100 µs starting ``comm_at`` µs into the step on another
    stream, optionally a synchronising D2H copy (cudaMemcpyAsync + its Memcpy DtoH + a
    cudaStreamSynchronize). ``scale`` multiplies every time."""
    events, corr = [], 0

    def launch(name: str, cat: str, ts: float, dur: float, stream: int, call: str = "cudaLaunchKernel",
               args: dict | None = None) -> None:
        nonlocal corr
        corr += 1
        events.append({"ph": "X", "cat": "cuda_runtime", "name": call, "pid": 1, "tid": 1, "ts": ts - 15,
                       "dur": 5, "args": {"correlation": corr}})
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                       "args": {"correlation": corr, "stream": stream, "device": 0, **(args or {})}})

    t0 = 0.0
    for i, jitter in enumerate(JITTER):
        step = (1000.0 + jitter) * scale
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i + 1}", "pid": 1, "tid": 1,
                       "ts": t0, "dur": step})
        launch("ampere_sgemm_128x64_nn", "kernel", t0 + 50 * scale, 300 * scale, 7)
        launch("vectorized_elementwise_kernel<add>", "kernel", t0 + (350 + gap_us) * scale, 200 * scale, 7)
        if comm_at is not None:
            launch("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "kernel", t0 + comm_at * scale, 100 * scale, 8)
        if d2h:
            launch("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", t0 + 800 * scale, 10 * scale, 7,
                   call="cudaMemcpyAsync", args={"bytes": 4})
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
                           "ts": t0 + 790 * scale, "dur": 30 * scale})
        t0 += step
    doc = {"distributedInfo": {"rank": rank, "world_size": 1}, "deviceProperties": [{"id": 0, "name": "NVIDIA A100"}],
           "traceEvents": events}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rank{rank}.json").write_text(json.dumps(doc))
    return folder


def compare(tmp_path: Path, capsys, baseline: Path, candidate: Path, *extra,
            formats: str | None = "json") -> tuple[int, dict, str]:
    """Exit code, report.json and the terminal of ``perfreport compare``. Only report.json is
    written unless ``formats`` says otherwise (None: the default formats, as the README runs it):
    these tests judge the gate; the renderers have tests of their own."""
    out = tmp_path / "out"
    code, stdout, err = run(["compare", baseline, candidate, "--out", out, *extra,
                             *(["--format", formats] if formats else [])], capsys)
    assert err == "" or "warning" in err.lower(), err
    return code, report(out), stdout


# --- the demo ------------------------------------------------------------------------------------
def profiler_step_times(folder: Path) -> dict[int, float]:
    """Brute force from the raw JSON: ProfilerStep#N span per step number (µs)."""
    (path,) = list(folder.glob("*.json.gz"))
    doc = json.loads(gzip.decompress(path.read_bytes()))
    out = {}
    for e in doc["traceEvents"]:
        m = re.match(r"ProfilerStep#(\d+)$", str(e.get("name", "")))
        if m and e.get("ph") == "X" and "dur" in e:
            out[int(m.group(1))] = float(e["dur"])
    return out


def steady_median(times: dict[int, float]) -> float:
    """Median step time after the gate's documented sampling: drop the last step, then a first
    step more than 20 % slower than the median of the rest (warm-up)."""
    values = [times[s] for s in sorted(times)][:-1]
    if values[0] > 1.2 * float(np.median(values[1:])):
        values = values[1:]
    return float(np.median(values))


def test_demo_fails_with_explanation(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)  # the README runs it from the repository root: "demo" is ./baselines/demo
    code, doc, stdout = compare(tmp_path, capsys, "demo", "examples/resnet50-workers0", formats=None)
    assert code == 1 and doc["status"] == "fail"
    step = check(doc, "relative.step_time")
    assert step["status"] == "fail" and step["counted"]
    expected_b = steady_median(profiler_step_times(REPO / "baselines" / "demo" / "traces"))
    expected_c = steady_median(profiler_step_times(DEMO_CANDIDATE))
    assert step["baseline_value"] == pytest.approx(expected_b)
    assert step["candidate_value"] == pytest.approx(expected_c)
    assert step["delta_pct"] == pytest.approx(100 * (expected_c / expected_b - 1))
    assert step["evidence"]["p_value"] < step["evidence"]["alpha"]
    assert doc["findings"][0] == "relative.step_time"
    assert doc["baseline"]["stored_baseline"]["name"] == "demo"
    assert doc["explanation"]["lines"] and doc["explanation"]["delta_ms"] > 0
    assert {"summary", "step_times"} <= set(doc["baseline"]["analyses"]) and doc["candidate"]["analyses"]["summary"]
    # the terminal: verdict and headline first, one row per finding, the top causes
    lines = stdout.splitlines()
    assert lines[0] == f"perfreport compare: FAIL · step time +39.4 % ({step['baseline_value'] / 1e3:.2f} → " \
                       f"{step['candidate_value'] / 1e3:.2f} ms/step, p = {step['evidence']['p_value']:.2g})"
    assert lines[1] == "  1 failed · 36 passed findings (37 checks)"
    table_line = next(line for line in lines if line.strip().startswith("FAIL"))
    assert "step time" in table_line and "+39." in table_line
    assert sum(line.strip().startswith("WARN") for line in lines) == 0  # launches per step: cuDNN's other kernels account for the change
    # cuDNN's other convolution kernels (6 came, 1 left) with the family's GPU time unchanged: a note
    launches = check(doc, "structural.launches@rank0")
    assert launches["status"] == "pass" and launches["message"] == \
        "rank 0: launches per step 1543 → 1516: unchanged (cuDNN's other kernels account for 21)"
    family = check(doc, "relative.kernel_time[cuDNN convolution]")
    assert family["status"] == "pass" and not any("kernels added" in line for line in lines)
    assert f"  - cuDNN picked other convolution kernels: no time change (" in stdout
    assert f"{family['delta_pct']:+.1f} %, within its threshold or noise; 1 kernel(s) left, 6 came)" in stdout
    first = next(c for c in doc["explanation"]["contributions"] if c["delta_us"] > 0)
    assert f"  1. GPU idle while the CPU runs _SingleProcessDataLoaderIter.__next__ (new) " \
           f"+{first['delta_us'] / 1e3:.2f} ms/step" in stdout
    assert f"mean step time, {doc['explanation']['baseline_step_ms']:.1f} →" in stdout


def test_same_trace_passes(tmp_path, capsys):
    job = tiny_job(tmp_path / "a")
    code, doc, stdout = compare(tmp_path, capsys, job, job)
    assert code == 0 and doc["status"] == "pass" and doc["findings"] == []
    assert doc["summary"]["fail"] == doc["summary"]["warn"] == 0
    assert stdout.startswith("perfreport compare: PASS")


# --- injected regressions ----------------------------------------------------------------------
def test_ten_percent_slower_steps_fail(tmp_path, capsys):
    code, doc, _ = compare(tmp_path, capsys, tiny_job(tmp_path / "a"), tiny_job(tmp_path / "b", scale=1.10))
    step = check(doc, "relative.step_time")
    assert code == 1 and step["status"] == "fail"
    # 7 samples a side (the 8th, last step is dropped), perfectly separated: p = 1 / C(14, 7)
    assert step["evidence"]["baseline_samples"] == step["evidence"]["candidate_samples"] == 7
    assert step["evidence"]["p_value"] == pytest.approx(1 / 3432)
    assert step["baseline_value"] == pytest.approx(1002.0)  # median of 1000 + JITTER[:7]
    assert step["delta_pct"] == pytest.approx(10.0)
    assert step["evidence"]["baseline_values"] == pytest.approx([1000.0 + j for j in JITTER[:7]])


def test_ten_more_points_of_idle_fail(tmp_path, capsys):
    code, doc, _ = compare(tmp_path, capsys, tiny_job(tmp_path / "a", gap_us=20), tiny_job(tmp_path / "b", gap_us=80))
    idle = check(doc, "relative.idle_pct")
    # GPU window 300 + gap + 200 µs, busy 500 µs: idle 20/520 -> 80/580 of the window
    assert idle["baseline_value"] == pytest.approx(100 * 20 / 520)
    assert idle["candidate_value"] == pytest.approx(100 * 80 / 580)
    assert code == 1 and idle["status"] == "fail" and idle["unit"] == "pct"
    assert check(doc, "relative.step_time")["status"] == "pass"


def test_lost_overlap_fails(tmp_path, capsys):
    overlapped = tiny_job(tmp_path / "a", comm_at=100)  # all-reduce runs under the 300 µs GEMM
    exposed = tiny_job(tmp_path / "b", comm_at=600)  # after all compute
    code, doc, _ = compare(tmp_path, capsys, overlapped, exposed)
    overlap = check(doc, "relative.overlap_pct")
    assert (overlap["baseline_value"], overlap["candidate_value"]) == (pytest.approx(100.0), pytest.approx(0.0))
    assert overlap["status"] == "fail"
    exposed_comm = check(doc, "relative.exposed_communication")
    assert exposed_comm["status"] == "fail" and exposed_comm["candidate_value"] == pytest.approx(100.0)
    assert code == 1


def test_new_synchronising_d2h_copy_fails(tmp_path, capsys):
    code, doc, stdout = compare(tmp_path, capsys, tiny_job(tmp_path / "a"), tiny_job(tmp_path / "b", d2h=True))
    assert code == 1
    dtoh = check(doc, "structural.memcpy[memcpy_dtoh_count]@rank0")
    assert (dtoh["baseline_value"], dtoh["candidate_value"], dtoh["status"]) == (0.0, 1.0, "fail")
    assert check(doc, "structural.syncs@rank0")["status"] == "fail"
    kind = check(doc, "structural.memcpy[added: Memcpy DtoH (Device -> Pageable)]@rank0")
    assert kind["status"] == "fail"
    assert "Memcpy DtoH" in stdout


def test_noise_on_durations_passes(tmp_path, capsys):
    base = tiny_job(tmp_path / "a")
    noisy = tmp_path / "b"
    noisy.mkdir()
    doc = json.loads((base / "rank0.json").read_text())
    rng = np.random.default_rng(4)
    for e in doc["traceEvents"]:
        e["dur"] *= 1 + rng.uniform(-0.03, 0.03)
    (noisy / "rank0.json").write_text(json.dumps(doc))
    code, report_doc, _ = compare(tmp_path, capsys, base, noisy)
    assert code == 0 and report_doc["findings"] == []


# --- configuration and waivers -------------------------------------------------------------------
def test_config_file_waives_a_failure(tmp_path, capsys):
    config = tmp_path / "perfreport.toml"
    config.write_text('[[waivers]]\ncheck = "relative.step_time"\nreason = "bigger model, PR #7"\n')
    code, doc, stdout = compare(tmp_path, capsys, tiny_job(tmp_path / "a"), tiny_job(tmp_path / "b", scale=1.1),
                                "--config", config)
    step = check(doc, "relative.step_time")
    assert step["status"] == "fail" and not step["counted"] and step["waiver"]["reason"] == "bigger model, PR #7"
    assert doc["config"]["source"] == str(config)
    assert "(waived)" in stdout
    # other time checks (GPU busy, kernels: +10 % warns) still count; nothing fails
    assert code == 0 and doc["status"] in ("pass", "warn")


def test_bad_config_is_a_one_line_error(tmp_path, capsys):
    config = tmp_path / "perfreport.toml"
    config.write_text("[relative.step_tim]\nmax_increase_pct = 3\n")
    job = tiny_job(tmp_path / "a")
    code, out, err = run(["compare", job, job, "--out", tmp_path / "o", "--config", config], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "relative.step_tim: unknown key; did you mean 'step_time'?" in err


# --- mismatched inputs --------------------------------------------------------------------------
def test_mismatched_inputs_give_notes_not_crashes(tmp_path, capsys):
    two = tmp_path / "two"
    tiny_job(two, rank=0)
    tiny_job(two, rank=1)
    one = tiny_job(tmp_path / "one", rank=0)
    code, doc, _ = compare(tmp_path, capsys, two, one)
    assert code == 0 and any("only in the baseline: 1" in n["message"] for n in doc["notes"])
    other = tmp_path / "other"
    tiny_job(other, rank=2)
    tiny_job(other, rank=3)
    code, doc, stdout = compare(tmp_path, capsys, two, other)
    assert code == 0 and any("rank 0 with rank 2, rank 1 with rank 3" in n["message"] for n in doc["notes"])
    assert check(doc, "absolute.idle_pct@rank3")["status"] == "pass"
    tiny_job(other, rank=4)
    code, doc, stdout = compare(tmp_path, capsys, two, other)
    assert code == 0 and any("mean over ranks" in n["message"] for n in doc["notes"])


def test_different_gpus_and_traces_without_steps(tmp_path, capsys):
    pair = TRACES / "pair_tracelens_h100_vs_mi300x_bert_small"
    code, doc, _ = compare(tmp_path, capsys, pair / "h100", pair / "mi300x")
    hardware = [n["message"] for n in doc["notes"] if n["kind"] == "hardware"]
    assert code in (0, 1) and hardware and "H100" in hardware[0] and "MI300X" in hardware[0]
    alexnet = TRACES / "hta_a100_alexnet_benchmark"  # no ProfilerStep at all
    code, doc, _ = compare(tmp_path, capsys, alexnet, alexnet)
    assert code == 0 and any("no ProfilerStep" in n["message"] for n in doc["notes"])
    cpu_only = TRACES / "odd_cpu_only_rank34of300_trimmed"
    code, doc, _ = compare(tmp_path, capsys, cpu_only, cpu_only)
    assert code == 0


def test_bad_input_is_a_one_line_error(tmp_path, capsys):
    job = tiny_job(tmp_path / "a")
    cases = [
        (["compare", job, tmp_path / "missing", "--out", tmp_path / "o"], "missing"),
        (["compare", "nosuch", job, "--out", tmp_path / "o", "--store", tmp_path / "store"],
         "nosuch: neither a trace folder nor a baseline"),
    ]
    not_trace = tmp_path / "bad"
    not_trace.mkdir()
    (not_trace / "x.json").write_text('{"foo": 1}')
    cases.append((["compare", job, not_trace, "--out", tmp_path / "o"], "not a Kineto trace"))
    for argv, message in cases:
        code, out, err = run(argv, capsys)
        assert code == 2 and out == "", argv
        assert err.startswith("perfreport: error:") and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "o").exists()


# --- the baseline store -------------------------------------------------------------------------
def test_baseline_commands(tmp_path, capsys):
    store = tmp_path / "store"
    job = tiny_job(tmp_path / "a")
    code, out, _ = run(["baseline", "save", "nightly", job, "--store", store, "--commit", "0123abcd"], capsys)
    assert code == 0 and "saved baseline 'nightly'" in out and "8 profiler step(s)" in out
    code, out, err = run(["baseline", "save", "nightly", job, "--store", store], capsys)
    assert code == 2 and "already exists" in err and "--force" in err
    assert run(["baseline", "save", "nightly", job, "--store", store, "--force"], capsys)[0] == 0
    code, out, _ = run(["baseline", "list", "--store", store], capsys)
    assert code == 0 and re.search(r"^nightly\s+1\s+NVIDIA A100\s+\S+\s+-$", out, re.M)
    code, out, _ = run(["baseline", "show", "nightly", "--store", store, "--verify"], capsys)
    assert code == 0 and "checksums: all files verified" in out and "rank 0: traces/rank-0.json.gz" in out
    code, out, _ = run(["baseline", "show", "nightly", "--store", store, "--json"], capsys)
    shown = json.loads(out)
    assert shown["name"] == "nightly" and shown["ranks"][0]["steps"] == list(range(1, 9))
    # compare against the stored name: same verdict as against the folder
    code, doc, _ = compare(tmp_path, capsys, "nightly", tiny_job(tmp_path / "b", scale=1.1), "--store", store)
    assert code == 1 and doc["baseline"]["stored_baseline"]["name"] == "nightly"
    assert check(doc, "relative.step_time")["status"] == "fail"
    code, doc, _ = compare(tmp_path, capsys, "nightly", "nightly", "--store", store)  # two stored baselines
    assert code == 0 and doc["status"] == "pass"
    code, out, _ = run(["analyze", store / "nightly", "--out", tmp_path / "summary", "--format", "json"], capsys)
    assert code == 0 and json.loads((tmp_path / "summary" / "report.json").read_text())["summary"][0]["steps"] == 8
    assert run(["baseline", "rm", "nightly", "--store", store], capsys)[0] == 0
    code, out, err = run(["baseline", "show", "nightly", "--store", store], capsys)
    assert code == 2 and "no baseline 'nightly'" in err
    code, out, _ = run(["baseline", "list", "--store", store], capsys)
    assert "no baselines" in out


def test_shared_pair_fails_from_a_stored_copy(tmp_path, capsys):
    pair = shared_trace("pair_kineto_resnet50_v100_dataloader")
    store = tmp_path / "store"
    assert run(["baseline", "save", "w4", pair / "workers4", "--store", store], capsys)[0] == 0
    shutil.rmtree(store / "w4" / "cache")  # without its cache the store loads the verified JSON
    code, doc, _ = compare(tmp_path, capsys, "w4", pair / "workers0", "--store", store)
    assert code == 1 and check(doc, "relative.step_time")["status"] == "fail"


# --- README --------------------------------------------------------------------------------------
def test_readme_quick_start_runs_the_demo_compare():
    text = (REPO / "README.md").read_text()
    section = text.split("## Quick start", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    commands = [line for line in block.strip().splitlines() if line.strip()]
    assert len(commands) == 2
    assert "perfreport compare demo examples/resnet50-workers0" in commands[0]
    assert commands[1] == 'pip install -e ".[test]" && python -m pytest'
