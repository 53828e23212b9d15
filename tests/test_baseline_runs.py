"""Multi-run baselines (issue 11): ``baseline save --append/--keep`` keeps several runs of one
job, ``compare`` judges all of them (and several ``--run`` candidates) with the run as the unit,
and a schema-1 baseline (the demo) still loads as one run."""

from __future__ import annotations

import json
from pathlib import Path

from perfreport.gate.baseline_runs import load_runs
from perfreport.gate.baselines import read_baseline
from perfreport.load import load

from .test_compare import REPO, check, compare, run, tiny_job


def test_append_keep_and_show(tmp_path, capsys):
    store = tmp_path / "store"
    jobs = [tiny_job(tmp_path / f"r{i}", scale=1.0 + i / 100) for i in range(3)]
    code, out, _ = run(["baseline", "save", "main", jobs[0], "--store", store, "--append", "--commit", "c0"], capsys)
    assert code == 0 and "saved baseline 'main' (run 1 of 1)" in out  # --append creates a missing baseline
    assert run(["baseline", "save", "main", jobs[1], "--store", store, "--append", "--commit", "c1"], capsys)[0] == 0
    first = store / "main" / "traces" / "rank-0.json.gz"
    assert first.is_file()
    code, out, _ = run(["baseline", "save", "main", jobs[2], "--store", store, "--append", "--keep", "2",
                        "--commit", "c2"], capsys)
    assert code == 0 and "(run 2 of 2)" in out
    m = json.loads((store / "main" / "manifest.json").read_text())
    assert m["schema_version"] == 2 and [r["run"] for r in m["runs"]] == [1, 2]
    assert [r["commit"] for r in m["runs"]] == ["c1", "c2"] and m["commit"] == "c2"
    assert m["ranks"] == m["runs"][-1]["ranks"] and m["ranks"][0]["file"] == "runs/2/traces/rank-0.json.gz"
    assert not first.exists()  # the dropped run's files are gone, the kept ones verify
    code, out, _ = run(["baseline", "show", "main", "--store", store, "--verify"], capsys)
    assert code == 0 and "runs: 2 (1: " in out and "checksums: all files verified" in out
    runs = load_runs(read_baseline(store / "main"), fallback=lambda files: load(files, workers=1))
    steps = [float(t[0].dur[t[0].steps()].max()) for t in runs]
    assert steps == [1010.0 * 1.01, 1010.0 * 1.02]  # the longest ProfilerStep of each kept run


def test_append_refuses_another_job_and_conflicting_flags(tmp_path, capsys):
    store = tmp_path / "store"
    assert run(["baseline", "save", "main", tiny_job(tmp_path / "a"), "--store", store], capsys)[0] == 0
    code, _, err = run(["baseline", "save", "main", tiny_job(tmp_path / "b", rank=1), "--store", store, "--append"],
                       capsys)
    assert code == 2 and "ranks 1 differ from baseline 'main' (ranks 0)" in err
    code, _, err = run(["baseline", "save", "main", tiny_job(tmp_path / "a"), "--store", store, "--append",
                        "--force"], capsys)
    assert code == 2 and "use one of them" in err
    code, _, err = run(["baseline", "save", "main", tiny_job(tmp_path / "a"), "--store", store, "--keep", "2"], capsys)
    assert code == 2 and "--keep applies with --append only" in err
    assert len(json.loads((store / "main" / "manifest.json").read_text())["runs"]) == 1


def test_compare_judges_every_run(tmp_path, capsys):
    store = tmp_path / "store"
    for i, scale in enumerate((1.0, 1.01, 0.995)):
        assert run(["baseline", "save", "main", tiny_job(tmp_path / f"b{i}", scale=scale), "--store", store,
                    "--append"], capsys)[0] == 0
    slow = [tiny_job(tmp_path / f"c{i}", scale=1.10 + i / 200) for i in range(2)]
    code, doc, out = compare(tmp_path, capsys, "main", slow[0], "--run", slow[1], "--store", store,
                           "--format", "json")
    step = check(doc, "relative.step_time")
    e = step["evidence"]
    assert code == 1 and step["status"] == "fail"
    assert (e["sample_kind"], e["test"], e["baseline_runs"], e["candidate_runs"]) == ("run", "t-test on run medians",
                                                                                         3, 2)
    assert (e["baseline_steps"], e["candidate_steps"]) == (21, 14) and e["p_value"] < 0.05
    assert e["noise_widths"] >= e["required_noise_widths"] == 3.0
    assert "3 vs 2 runs (21 vs 14 steps)" in out
    assert [n["kind"] for n in doc["notes"]] == ["runs"]
    # a candidate inside the baseline runs' spread passes
    code, doc, _ = compare(tmp_path, capsys, "main", tiny_job(tmp_path / "same", scale=1.005), "--store", store,
                           "--format", "json")
    assert code == 0 and check(doc, "relative.step_time")["status"] == "pass"
    # a multi-run stored candidate brings every run: the baseline against itself, 3 vs 3 runs
    code, doc, _ = compare(tmp_path, capsys, "main", "main", "--store", store, "--format", "json")
    e = check(doc, "relative.step_time")["evidence"]
    assert code == 0 and doc["status"] == "pass" and (e["baseline_runs"], e["candidate_runs"]) == (3, 3)


def test_demo_baseline_of_schema_one_reads_as_one_run():
    demo = read_baseline(REPO / "baselines" / "demo")
    on_disk = json.loads((REPO / "baselines" / "demo" / "manifest.json").read_text())
    assert on_disk["schema_version"] == 1 and "runs" not in on_disk
    assert len(demo.runs) == 1 and demo.runs[0]["ranks"] == on_disk["ranks"] and demo.runs[0]["run"] == 0
    assert Path(REPO / "baselines" / "demo" / demo.runs[0]["ranks"][0]["file"]).is_file()
