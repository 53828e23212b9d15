"""How often is the gate right? Judge known cases with today's defaults and print a confusion table.

Cases (family: what must happen):

* ``self``: every real trace job in ../shared/traces against itself: pass.
* ``halves``: the first half of a trace's profiler steps against its second half (traces with
  at least 4 steps): must not fail.
* ``real pair``: ResNet50 on a V100, DataLoader workers 4 -> 0 (+40 % step time): fail; and
  0 -> 4 (an improvement): pass.
* ``recorded repeats``: every ordered pair of the repeated runs in tests/data/recorded (the same
  config run as separate processes on an H100; the host-bound ``workers0`` pair included, judged
  both ways): must not fail.
* ``recorded changes``: each repeat against each known-effect change recorded from it (workers 0,
  a sync per step, loss.item() per step, fp32, NCHW, +12.5 % tokens, TF32): fail; the reverse of the
  two pure slowdowns (an improvement): pass.
* ``kernels +N %``: every kernel of a real trace N % longer and what follows shifted
  (:func:`trace_edit.scale_kernels`): +5 % is reported but not scored (below most thresholds);
  +10, +15, +20 % must fail.
* ``+1 D2H/step``, ``+1 sync/step``: a structural change injected into every step: fail.
* ``multi-run baseline``: a stored baseline of several recorded repeats (``perfreport baseline
  save --append``) against one candidate run: every other repeat (each left out in turn, and
  two-run baselines): must not fail; every known-effect change recorded from them, and the
  injected regressions of one repeat against a baseline of the others: fail.

Each case runs ``perfreport.pipeline.compare`` with ``perfreport.config.load_config()``, as
``perfreport compare`` does. "got" is the verdict's status, or ``inconclusive`` when the verdict
passed while a check was inconclusive (beyond its threshold but not significant, or too few
samples: the pass rests on a check that could not tell). A case is
*wrong* when a must-pass case fails or a must-fail case passes or is inconclusive; a ``warn``
where pass or fail was expected is listed as a miss, not counted wrong.

    python benchmarks/gate_accuracy.py                  # everything (~2 CPU-min; 179 cases)
    python benchmarks/gate_accuracy.py --quick          # skip traces over 20 MB of gzip
    python benchmarks/gate_accuracy.py --family recorded --family injected
    python benchmarks/gate_accuracy.py --list           # the cases, without running them

Edited traces are written to ``--workdir`` (default /tmp/perfreport-gate-accuracy) and reused.
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trace_edit import add_per_step, keep_steps, read_trace, scale_kernels, write_trace  # noqa: E402

from perfreport.analyses.steps import step_spans  # noqa: E402
from perfreport.config import load_config  # noqa: E402
from perfreport.load import load  # noqa: E402
from perfreport.errors import PerfreportError  # noqa: E402
from perfreport.load.discover import is_trace_file  # noqa: E402
from perfreport.pipeline import compare  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"
RECORDED = ROOT / "tests" / "data" / "recorded"
PAIR = SHARED / "pair_kineto_resnet50_v100_dataloader"
# Real traces to inject into: several GPUs and formats, one to eight ranks, 1 to 8 steps.
INJECT_INTO = [
    SHARED / "pair_kineto_resnet50_v100_dataloader" / "workers4",   # V100, June-2021 Kineto, 6 steps
    SHARED / "hta_v100_ns_resolution",                             # V100, ns timestamps, 5 steps
    SHARED / "pair_hta_trace_diff" / "control",                     # A100 rank 3 of 8, NCCL, 6 steps
    SHARED / "hta_a100_rank0of16_cudagraph_triton",                 # A100, CUDA graphs + Triton, 5 steps
    SHARED / "hta_sampled_2of128rank",                              # 2 ranks, 2 steps each
    RECORDED / "repeat_base" / "run1",                              # H100, host-bound, 8 steps
    RECORDED / "gpu_bound_repeat" / "run1",                         # H100, GPU-bound, 6 steps
    RECORDED / "short_multirank" / "ddp_w2_gloo_1step_run1",        # H100, 2 ranks, 1 step each
]
SCALES = (5, 10, 15, 20)
UNSCORED = "either"


@dataclass(frozen=True)
class Case:
    family: str
    name: str
    baseline: Path
    candidate: Path
    expect: str  # "pass", "fail" or "either" (reported, not scored)


def rank_files(job: Path) -> list[Path]:
    return sorted(p for p in job.iterdir() if is_trace_file(p)) if job.is_dir() else [job]


def trace_jobs(root: Path) -> list[Path]:
    """Every job folder under ``root`` (a folder with trace files; pair sides count apart)."""
    return sorted({p.parent for p in root.rglob("*") if p.is_file() and is_trace_file(p)})


def gz_mb(job: Path) -> float:
    return sum(p.stat().st_size for p in rank_files(job)) / 1e6


def edited(job: Path, out: Path, edit) -> Path:
    """``edit`` applied to every rank file of ``job``, written under ``out`` (reused if there)."""
    if out.is_dir() and any(out.iterdir()):
        return out
    for f in rank_files(job):
        name = f.name if f.name.endswith(".gz") else f.name + ".gz"
        write_trace(edit(read_trace(f)), out / name)
    return out


def halves(job: Path, workdir: Path) -> tuple[Path, Path] | None:
    """(first half, second half) of the job's steps as trace folders; None under 4 steps."""
    steps = sorted(set(step_spans_of(job)))
    if len(steps) < 4:
        return None
    docs = {f: read_trace(f) for f in rank_files(job)}
    first, second = set(steps[: len(steps) // 2]), set(steps[len(steps) // 2:])
    out = []
    for part, keep in (("first", first), ("second", second)):
        folder = workdir / "halves" / slug(job) / part
        if not (folder.is_dir() and any(folder.iterdir())):
            for f, d in docs.items():
                write_trace(keep_steps(d, keep), folder / (f.name if f.name.endswith(".gz") else f.name + ".gz"))
        out.append(folder)
    return out[0], out[1]


def step_spans_of(job: Path) -> list[int]:
    """Profiler step numbers of every rank of ``job`` (through perfreport's fast loader)."""
    return [int(s) for t in load(str(job), workers=1) for s in step_spans(t)["step"]]


def slug(job: Path) -> str:
    for base in (SHARED, RECORDED):
        if job.is_relative_to(base):
            return ("recorded_" if base == RECORDED else "") + job.relative_to(base).as_posix().replace("/", "_")
    return job.name


def cases(workdir: Path, families: list[str], quick: bool) -> list[Case]:
    def want(family: str) -> bool:
        return not families or any(family.startswith(f) for f in families)

    small = (lambda job: gz_mb(job) <= 20) if quick else (lambda job: True)
    out: list[Case] = []
    shared = [j for j in trace_jobs(SHARED) if small(j)] if SHARED.is_dir() else []
    if want("self"):
        out += [Case("self", slug(j), j, j, "pass") for j in shared]
    if want("halves"):
        for job in shared + [RECORDED / "repeat_base" / "run1", RECORDED / "gpu_bound_repeat" / "run1"]:
            if (pair := halves(job, workdir)) is not None:
                out.append(Case("halves", slug(job), pair[0], pair[1], "pass"))
    if want("real pair") and PAIR.is_dir():
        out += [Case("real pair", "resnet50 workers 4 -> 0", PAIR / "workers4", PAIR / "workers0", "fail"),
                Case("real pair", "resnet50 workers 0 -> 4", PAIR / "workers0", PAIR / "workers4", "pass")]
    if want("recorded"):
        for case in ("repeat_base", "gpu_bound_repeat", "short_multirank", "workers0"):
            runs = sorted(p for p in (RECORDED / case).iterdir() if p.is_dir())
            out += [Case("recorded repeats", f"{case} {a.name} -> {b.name}", a, b, "pass")
                    for a, b in itertools.permutations(runs, 2)]
        changes = {"repeat_base": ["workers0", "sync_each_step", "loss_item_each_step", "fp32_no_amp",
                                   "no_channels_last"],
                   "gpu_bound_repeat": ["gpu_bound_seq1152", "gpu_bound_tf32_no_amp"]}
        for base, changed in changes.items():
            for b in sorted(p for p in (RECORDED / base).iterdir() if p.is_dir()):
                for change in changed:
                    for c in sorted(p for p in (RECORDED / change).iterdir() if p.is_dir()):
                        out.append(Case("recorded changes", f"{base}/{b.name} -> {change}/{c.name}", b, c, "fail"))
                        if change in ("workers0", "gpu_bound_seq1152"):
                            out.append(Case("recorded improvements", f"{change}/{c.name} -> {base}/{b.name}",
                                            c, b, "pass"))
    if want("multi"):
        out += multi_run_cases(workdir)
    if want("injected"):
        for job in (j for j in INJECT_INTO if j.exists() and small(j)):
            for pct in SCALES:
                cand = edited(job, workdir / f"scale{pct}" / slug(job), lambda d, f=1 + pct / 100: scale_kernels(d, f))
                out.append(Case(f"injected kernels +{pct:>2} %", slug(job), job, cand, "fail" if pct >= 10 else UNSCORED))
            for what, label in (("dtoh", "+1 D2H/step"), ("sync", "+1 sync/step")):
                cand = edited(job, workdir / what / slug(job), lambda d, w=what: add_per_step(d, w))
                out.append(Case(f"injected {label}", slug(job), job, cand, "fail"))
    return out


def stored(workdir: Path, runs: list[Path]) -> Path:
    """A stored baseline holding ``runs`` (oldest first), made with ``perfreport baseline save
    --append`` in ``workdir/store`` and reused."""
    name = "__".join(slug(r) for r in runs).replace(".", "_")[:200]
    store = workdir / "store"
    if (store / name / "manifest.json").is_file():
        return store / name
    for run in runs:
        subprocess.run([sys.executable, "-m", "perfreport", "baseline", "save", name, str(run), "--append",
                        "--store", str(store), "--quiet", "--workers", "1"], check=True, cwd=ROOT,
                       stdout=subprocess.DEVNULL)
    return store / name


def multi_run_cases(workdir: Path) -> list[Case]:
    """Stored multi-run baselines against one candidate run: repeats (pass), changes and injections (fail)."""
    out: list[Case] = []
    family = "multi-run baseline"
    changes = {"repeat_base": ["workers0", "sync_each_step", "loss_item_each_step", "fp32_no_amp", "no_channels_last"],
               "gpu_bound_repeat": ["gpu_bound_seq1152", "gpu_bound_tf32_no_amp"]}
    for base, changed in changes.items():
        runs = sorted(p for p in (RECORDED / base).iterdir() if p.is_dir())
        for left in runs:  # each repeat against a baseline of the others
            others = [r for r in runs if r != left]
            out.append(Case(family, f"{base} {'+'.join(r.name for r in others)} -> {left.name}",
                            stored(workdir, others), left, "pass"))
        if len(runs) >= 4:  # two-run baselines
            for pair, left in ((runs[:2], runs[2]), (runs[:2], runs[3]), (runs[2:], runs[0]), (runs[2:], runs[1])):
                out.append(Case(family, f"{base} {'+'.join(r.name for r in pair)} -> {left.name}",
                                stored(workdir, pair), left, "pass"))
        every = stored(workdir, runs)
        for change in changed:
            for c in sorted(p for p in (RECORDED / change).iterdir() if p.is_dir()):
                out.append(Case(family + " changes", f"{base} ({len(runs)} runs) -> {change}/{c.name}", every, c, "fail"))
                if len(runs) >= 4:
                    out.append(Case(family + " changes", f"{base} {'+'.join(r.name for r in runs[:2])} -> "
                                    f"{change}/{c.name}", stored(workdir, runs[:2]), c, "fail"))
        first, others = runs[0], stored(workdir, runs[1:])
        for pct in SCALES[1:]:
            cand = edited(first, workdir / f"scale{pct}" / slug(first), lambda d, f=1 + pct / 100: scale_kernels(d, f))
            out.append(Case(family + " injected", f"{base} others -> {first.name} kernels +{pct} %", others, cand, "fail"))
        for what, label in (("dtoh", "+1 D2H/step"), ("sync", "+1 sync/step")):
            cand = edited(first, workdir / what / slug(first), lambda d, w=what: add_per_step(d, w))
            out.append(Case(family + " injected", f"{base} others -> {first.name} {label}", others, cand, "fail"))
    return out


def judge(case: Case, config) -> tuple[str, str]:
    """(got, the most severe finding or the error) for one case."""
    try:
        verdict = compare(str(case.baseline), str(case.candidate), config=config, workers=1).verdict
    except PerfreportError as exc:
        return "error", str(exc)
    got = verdict.status
    if got == "pass" and any(c.counts and c.status == "inconclusive" for c in verdict.checks):
        got = "inconclusive"  # passed only because a check could not tell
    top = verdict.findings[0].message if verdict.findings else ""
    return got, top


def wrong(expect: str, got: str) -> bool:
    return (expect == "pass" and got in ("fail", "error")) or (expect == "fail" and got in ("pass", "inconclusive", "error"))


def miss(expect: str, got: str) -> bool:
    return not wrong(expect, got) and expect != UNSCORED and got != expect


def report(results: list[tuple[Case, str, str]]) -> str:
    statuses = ("pass", "warn", "fail", "inconclusive", "error")
    rows = defaultdict(Counter)
    for case, got, _ in results:
        rows[(case.family, case.expect)][got] += 1
    lines = ["| family | expected | cases | " + " | ".join(statuses) + " | wrong |",
             "|---|---|---:|" + "---:|" * (len(statuses) + 1)]
    for (family, expect), n in rows.items():
        bad = sum(1 for c, g, _ in results if c.family == family and c.expect == expect and wrong(expect, g))
        lines.append(f"| {family} | {expect} | {sum(n.values())} | " + " | ".join(str(n[s] or "") for s in statuses)
                     + f" | {bad or ''} |")
    total_wrong = sum(wrong(c.expect, g) for c, g, _ in results)
    total_miss = sum(miss(c.expect, g) for c, g, _ in results)
    lines += ["", f"{len(results)} cases: {total_wrong} wrong, {total_miss} warn/inconclusive where pass/fail was expected"]
    for title, pick in (("Wrong", wrong), ("Misses", miss)):
        listed = [(c, g, top) for c, g, top in results if pick(c.expect, g)]
        if listed:
            lines += ["", f"{title}:"]
            lines += [f"- {c.family}: {c.name}: expected {c.expect}, got {g}" + (f" — {top[:160]}" if top else "")
                      for c, g, top in listed]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", action="append", default=[],
                        help="run only families starting with this (self, halves, real, recorded, injected, multi)")
    parser.add_argument("--quick", action="store_true", help="skip trace jobs over 20 MB of gzip")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/perfreport-gate-accuracy"))
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    all_cases = cases(args.workdir, args.family, args.quick)
    print(f"{len(all_cases)} cases ({time.perf_counter() - t0:.0f} s to prepare)", file=sys.stderr)
    if args.list:
        for c in all_cases:
            print(f"{c.family}\t{c.name}\t{c.expect}")
        return 0
    config = load_config()
    results = []
    for i, case in enumerate(all_cases, 1):
        got, top = judge(case, config)
        results.append((case, got, top))
        print(f"[{i}/{len(all_cases)}] {case.family}: {case.name}: {got} (expected {case.expect})", file=sys.stderr)
    print(report(results))
    print(f"\n({time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
