#!/usr/bin/env python3
"""A stored baseline re-analysed, against parsing its JSON (issue 12: ≥ 20 × faster).

    python benchmarks/stored_baseline.py [--repeat 7] TRACE [TRACE ...]

Each TRACE (a one-rank ``.json``/``.json.gz`` file, or a stored baseline folder such as
``baselines/demo``) is saved with ``perfreport baseline save`` into a temporary store (a stored
baseline is copied), then timed in this process, CPU seconds, median of ``--repeat``:

* **parse JSON**: perfreport's C loader on the rank's uncompressed JSON text, already in memory
  (``load_rank_file`` on a file in /dev/shm), so neither disk nor gunzip is counted: the fastest
  way there is to get the events back from JSON;
* **column cache**: the per-rank task without the stored analyses (decode the stored columns,
  run every per-rank analysis): what a compare did before digests were stored;
* **stored analyses**: the per-rank task a compare runs on the baseline side
  (``executor.run_job``): checks the digest against the manifest, decodes it.

Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cpu_median(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def stored(trace: Path, store: Path) -> tuple[Path, Path]:
    """(the stored baseline folder, its first rank's JSON text in /dev/shm). A stored baseline
    (``baselines/demo``) is saved again from its rank files, so its analyses are this code's."""
    source = trace / "traces" if (trace / "manifest.json").is_file() else trace  # a stored baseline: its files
    subprocess.run([sys.executable, "-m", "perfreport", "baseline", "save", "b", str(source), "--store", str(store),
                    "-q"], check=True, cwd=REPO, capture_output=True)
    folder = store / "b"
    first = json.loads((folder / "manifest.json").read_text())["ranks"][0]["file"]
    text = gzip.decompress((folder / first).read_bytes())
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    json_path = shm / f"perfreport-bench-{folder.name}-{len(text)}.json"
    json_path.write_bytes(text)
    return folder, json_path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("traces", nargs="+", type=Path)
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args(argv)

    import dataclasses

    from perfreport.config import load_config
    from perfreport.running.executor import run_job
    from perfreport.gate.baselines import read_baseline
    from perfreport.load import load_rank_file
    from perfreport.load.discover import RankFile
    from perfreport.pipeline import analysis_options, baseline_jobs

    options = dataclasses.replace(analysis_options(load_config(None)), attribution=True)
    rows = ["| trace | JSON MB | parse JSON (C loader) s | column cache + analyses s | stored analyses s | "
            "× faster than parsing |", "|---|---:|---:|---:|---:|---:|"]
    for trace in args.traces:
        store = Path(tempfile.mkdtemp(prefix="pr-stored-"))
        try:
            folder, json_path = stored(trace, store)
            job = baseline_jobs(read_baseline(folder))[0]
            digest_file = Path(job.cache).with_suffix(".digest")
            assert digest_file.is_file(), f"{digest_file}: baseline save stored no analyses"
            parse = cpu_median(lambda: load_rank_file(RankFile(json_path, 0, "file name")), args.repeat)
            columns = cpu_median(lambda: run_job(job, options, use_digest_cache=False), max(3, args.repeat // 2))
            cached = cpu_median(lambda: run_job(job, options), args.repeat)
            rows.append(f"| {trace} | {json_path.stat().st_size / 1e6:,.0f} | {parse:.3f} | {columns:.3f} | "
                        f"{cached:.4f} | {parse / cached:.0f} × |")
            print(rows[-1], file=sys.stderr)
            json_path.unlink()
        finally:
            shutil.rmtree(store, ignore_errors=True)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
