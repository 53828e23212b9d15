"""Several runs of one job in one stored baseline: appending a run, loading every run.

The layout and the manifest's ``runs`` list are described in :mod:`perfreport.gate.baselines`;
this module adds a run atomically (a temporary folder moved to ``runs/<id>``, then the new
manifest written over the old one under an exclusive lock) and drops the oldest beyond
``keep``, deleting their files only once the new manifest no longer names them.
"""

from __future__ import annotations

import datetime as _dt

import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from .. import __version__
from ..storing.atomic import atomic_write, checkpoint, clean_stale_temps, note_recovered, store_lock, temp_name
from ..documents.jsondoc import json_text
from ..errors import BaselineError
from ..model import TraceSet
from .baselines import (
    MANIFEST, SCHEMA_VERSION, RankSet, StoredBaseline, as_rank_set, run_entry, save_rank, check_name, load_traces,
    read_baseline, save,
)


def append(store: str | Path, name: str, traces: TraceSet | RankSet, *, commit: str | None = None,
           keep: int | None = None, now: _dt.datetime | None = None, options=None) -> StoredBaseline:
    """Add ``traces`` as a new run of the baseline ``name`` (created when missing); with ``keep``,
    drop the oldest runs beyond that many. Raises BaselineError when the run's ranks or GPUs
    differ from the baseline's (another job is another baseline). ``traces`` and ``options``
    as in :func:`save`."""
    check_name(name)
    traces = as_rank_set(traces)
    if keep is not None and keep < 1:
        raise BaselineError(f"--keep must be at least 1, got {keep}")
    if not (Path(store) / name / MANIFEST).is_file():
        return save(store, name, traces, commit=commit, now=now, options=options)
    if not len(traces):
        raise BaselineError(f"{traces.source}: no ranks to store")
    path = Path(store) / name
    try:
        return _append(Path(store), name, path, traces, commit, keep, now, options)
    except OSError as exc:
        raise BaselineError(f"{path}: cannot write the run ({exc.strerror or exc})") from None


def _append(store: Path, name: str, path: Path, traces: RankSet, commit, keep, now, options) -> StoredBaseline:
    with store_lock(store, name):  # save's lock: appends and saves of one name take turns
        baseline = read_baseline(path)  # re-read under the lock: another append may have landed
        recover(baseline)
        m = dict(baseline.manifest)
        ranks_now = sorted(int(r["rank"]) for r in m["ranks"])
        gpus = sorted({t.meta.gpu_name() for t in traces if t.meta.gpu_name()})
        if sorted(traces.rank_ids) != ranks_now:
            raise BaselineError(f"{traces.source}: ranks {_list(traces.rank_ids)} differ from baseline {name!r} "
                                f"(ranks {_list(ranks_now)}); store another job as another baseline")
        if gpus and m.get("gpus") and gpus != list(m["gpus"]):
            raise BaselineError(f"{traces.source}: recorded on {', '.join(gpus)}, baseline {name!r} on "
                                f"{', '.join(m['gpus'])}; store other hardware as another baseline")
        run = max(int(r["run"]) for r in m["runs"]) + 1
        folder = f"runs/{run}"
        tmp = temp_name(path / f"run-{run}")
        tmp.mkdir()
        try:
            (tmp / "traces").mkdir()
            (tmp / "cache").mkdir()
            ranks = [save_rank(tmp, payload, options) for payload in traces]
            for r in ranks:
                r["file"], r["cache"] = f"{folder}/{r['file']}", f"{folder}/{r['cache']}"
            checkpoint("append.staged")
            (path / "runs").mkdir(exist_ok=True)
            os.replace(tmp, path / folder)
            checkpoint("append.moved")  # the run in runs/, the manifest not yet naming it
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise BaselineError(f"{path}: cannot write the run ({exc.strerror or exc})") from None
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        now = now or _dt.datetime.now(_dt.timezone.utc)
        runs = list(m["runs"]) + [run_entry(run, traces, ranks, commit, now.astimezone(_dt.timezone.utc)
                                             .isoformat(timespec="seconds"))]
        dropped = runs[:-keep] if keep is not None and len(runs) > keep else []
        runs = runs[len(dropped):]
        m.update(schema_version=SCHEMA_VERSION, runs=runs, ranks=ranks, commit=commit or m.get("commit"),
                 perfreport_version=__version__)
        atomic_write(path / MANIFEST, json_text(m))
        checkpoint("append.recorded")
        for old in dropped:  # after the new manifest is in place: nothing it names is deleted
            for r in old["ranks"]:
                for key in ("file", "cache"):
                    if r.get(key):
                        (path / r[key]).unlink(missing_ok=True)
                if r.get("cache"):  # its analyses (perfreport.running.digest_cache), derived from the cache
                    (path / r["cache"]).with_suffix(".digest").unlink(missing_ok=True)
            if int(old["run"]) > 0:
                shutil.rmtree(path / f"runs/{old['run']}", ignore_errors=True)
    return StoredBaseline(name=name, path=path, manifest=m)


def recover(baseline: StoredBaseline) -> list[str]:
    """Clear what killed writers left in a baseline's folder, under its lock (so no live writer
    owns any of it): temporaries (``.run-N.tmp-…``, older ``.run.*.tmp``, a manifest's
    temporary) and run folders the manifest does not name (an append killed between moving its
    run into ``runs/`` and writing the manifest). Says what it removed; returns the names."""
    path = baseline.path
    clean_stale_temps(path)
    named = {str(run["run"]) for run in baseline.runs}
    leftovers = [p for p in path.glob(".run.*.tmp")]
    runs = path / "runs"
    if runs.is_dir():
        leftovers += [p for p in runs.iterdir() if p.name.isdigit() and p.name not in named]
    for p in leftovers:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()
    if leftovers:
        note_recovered(path, [str(p.relative_to(path)) for p in leftovers],
                       "removed the files of runs an interrupted append left unrecorded")
    return [p.name for p in leftovers]


def _list(ranks) -> str:
    ranks = list(ranks)
    return ", ".join(map(str, ranks[:8])) + (" …" if len(ranks) > 8 else "")


def load_runs(baseline: StoredBaseline, *, fallback: Callable[[Mapping[int, Path]], TraceSet]) -> list[TraceSet]:
    """Every run of a stored baseline, oldest first (see :func:`load_traces`)."""
    return [load_traces(baseline, fallback=fallback, ranks=run["ranks"]) for run in baseline.runs]


__all__ = ["append", "load_runs"]
