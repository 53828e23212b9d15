"""The baseline store: named, versioned, checksummed copies of trace sets, fast to load.

Layout of ``<store>/<name>/`` (default store: ``./baselines``)::

    manifest.json          schema version, provenance, ranks, sha256 of every file
    traces/rank-<N>.json.gz  the rank files, gzip-compressed (kept byte-identical when they were)
    cache/rank-<N>.cols      the rank's model columns, compressed (see below)

The manifest records, per rank, the file, its sha256 and size, the source file it came from,
its profiler steps, event count, GPU and the trace's metadata; for the set: the GPUs, world
size, library versions found in the traces (CUDA/HIP runtime and driver, CUPTI, NCCL,
PyTorch where written), the creation time (UTC), the source commit when given and the
perfreport version. Other top-level files of a baseline folder (a NOTICE, a README) are not
managed and are carried over when the baseline is replaced.

The cache holds exactly the columns of :class:`perfreport.model.RankTrace` (numpy arrays,
the string table, the sparse args), each compressed with zlib level 3 (ISA-L when present),
in one file per rank: loading a stored baseline decompresses arrays instead of parsing JSON
(the demo baseline: ~20 ms instead of ~120 ms, see docs/report-schema.md). A cache written by
another model version (other columns, other format) is ignored and the traces are loaded
from their JSON instead, through the loader the caller passes in (this layer does not import
the loader).

Several runs (schema 2, :mod:`perfreport.gate.baseline_runs`): ``baseline save NAME DIR
--append`` adds a run of the same job (same ranks and GPUs) under ``runs/<id>/traces`` and
``runs/<id>/cache``; the manifest's ``runs`` list names every run with its own ranks, files,
creation time, commit and source, and ``--keep N`` drops the oldest runs beyond N (the last N
main-branch runs). The top-level ``ranks`` are the
newest run's, so a reader of one run (``analyze``, an older perfreport) sees the newest. A
schema-1 manifest (one run, files under ``traces/`` and ``cache/``) reads as one run.

Saving is atomic (``perfreport.storing.atomic.atomic_dir``): everything is written into a temporary folder
inside the store and swapped into place at once, under a lock per name (two concurrent saves of
one name leave one complete baseline); temporaries of killed saves are removed by the next save.
An existing baseline is only replaced with ``force``. An appended run is written into a temporary folder inside the baseline, moved to ``runs/<id>``,
and becomes part of the baseline when the new manifest replaces the old one (``atomic_write``,
under the same lock per name, so two appends cannot lose a run); files of runs
dropped by ``--keep`` are deleted only after that.
Loading verifies the sha256 of every file it reads and raises BaselineError naming the file
on a mismatch. A manifest from a newer perfreport is refused; older schema versions are
migrated on read (none exist yet).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import gzip
import hashlib
import json
import logging
import re
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import __version__
from ..load.checksums import algorithm_of, bytes_checksum
from ..load.files import GZIP_MAGIC
from ..storing.atomic import atomic_dir, atomic_write, checkpoint, clean_stale_temps, store_lock, trash_dir
from ..documents.jsondoc import json_text
from ..errors import BaselineError
from ..model import RankTrace, TraceMeta, TraceSet
from .colcache import CACHE_FORMAT, COLUMNS, decode_columns, encode_columns
from .metrics import versions_of


log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
"""Version of manifest.json; bumped when its meaning changes (older ones are migrated).
2: the ``runs`` list (several runs of one job)."""
DEFAULT_STORE = Path("baselines")
MANIFEST = "manifest.json"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True, slots=True)
class RankPayload:
    """What a baseline keeps of one rank besides its file: made where the rank was loaded (a
    worker process or a Dask worker), so the process that writes the store never holds events.
    ``digest``: the rank's analyses (:mod:`perfreport.running.digest_cache`), stored when given."""

    rank: int
    meta: TraceMeta
    n_events: int
    steps: tuple[int, ...]
    cache: bytes
    digest: Any = None
    source: SourceState | None = None
    """The rank file as it was when loaded: the copy stored must be that file, unchanged."""


@dataclass(frozen=True, slots=True)
class SourceState:
    """Size, modification time and checksum (ALGORITHM:HEX, :mod:`perfreport.load.checksums`)
    of a rank file when it was loaded."""

    size: int
    mtime_ns: int
    checksum: str | None


def source_state(path: str) -> SourceState | None:
    """The size and mtime of a local rank file (its checksum is added once it is computed); None
    for a URL or a file that cannot be read (its loading says why)."""
    if "://" in path:
        return None
    try:
        st = Path(path).stat()
    except OSError:
        return None
    return SourceState(st.st_size, st.st_mtime_ns, None)


def rank_payload(trace: RankTrace, digest: Any = None, source: SourceState | None = None) -> RankPayload:
    """The payload of a loaded rank: its metadata, steps and column cache."""
    return RankPayload(trace.rank, trace.meta, trace.n_events, tuple(int(s) for s in trace.step_numbers()),
                       encode_columns(trace), digest, source)


@dataclass(frozen=True, slots=True)
class RankSet:
    """The ranks of one run to store, in rank order, and where they came from."""

    source: str
    ranks: tuple[RankPayload, ...]

    @property
    def rank_ids(self) -> list[int]:
        return [r.rank for r in self.ranks]

    def __iter__(self):
        return iter(self.ranks)

    def __len__(self) -> int:
        return len(self.ranks)


def as_rank_set(traces: TraceSet | RankSet) -> RankSet:
    """A loaded TraceSet as payloads (its column caches encoded one rank at a time)."""
    if isinstance(traces, RankSet):
        return traces
    return RankSet(traces.source, tuple(rank_payload(t) for t in traces))


@dataclass(frozen=True, slots=True)
class StoredBaseline:
    """A baseline in a store: its folder and its (validated) manifest."""

    name: str
    path: Path
    manifest: Mapping[str, Any]

    @property
    def ranks(self) -> list[int]:
        return [int(r["rank"]) for r in self.manifest["ranks"]]

    @property
    def gpus(self) -> list[str]:
        return list(self.manifest.get("gpus") or [])

    @property
    def runs(self) -> list[Mapping[str, Any]]:
        """The recorded runs, oldest first, each with its ``ranks`` entries."""
        return list(self.manifest["runs"])

    @property
    def created_utc(self) -> str:
        return str(self.manifest.get("created_utc", ""))

    @property
    def commit(self) -> str | None:
        return self.manifest.get("commit")

    def summary(self) -> dict:
        """The manifest without per-rank trace metadata: what ``baseline show`` prints."""
        out = {k: v for k, v in self.manifest.items() if k not in ("ranks", "runs")}
        out["ranks"] = [{k: v for k, v in r.items() if k != "meta"} for r in self.manifest["ranks"]]
        out["runs"] = [{k: v for k, v in run.items() if k != "ranks"} | {"steps": sum(len(r["steps"])
                        for r in run["ranks"])} for run in self.manifest["runs"]]
        return out


# --- saving ----------------------------------------------------------------------------------
def save(store: str | Path, name: str, traces: TraceSet | RankSet, *, force: bool = False,
         commit: str | None = None, now: _dt.datetime | None = None, options: Any = None) -> StoredBaseline:
    """Store ``traces`` (loaded from files, whose paths are in their metadata; or their payloads,
    made by the workers that loaded them) as ``name``. ``options``: the analysis settings of
    the payloads' digests, which are then stored too. A rank file that changed since it was
    loaded, or changes while it is copied, fails the save (BaselineError naming it).

    Raises BaselineError for a bad name, an existing baseline without ``force``, an empty
    trace set or a rank whose source file is gone.
    """
    store = Path(store)
    check_name(name)
    traces = as_rank_set(traces)
    if not len(traces):
        raise BaselineError(f"{traces.source}: no ranks to store")
    target = store / name
    try:
        with store_lock(store, name):  # concurrent saves of one name: one after the other
            clean_stale_temps(store)
            if target.exists() and not force:
                raise BaselineError(f"baseline {name!r} already exists in {store} (use --force to replace it)")
            with atomic_dir(target) as tmp:
                (tmp / "traces").mkdir()
                (tmp / "cache").mkdir()
                ranks = []
                for payload in traces:
                    ranks.append(save_rank(tmp, payload, options))
                    checkpoint("baseline.rank")
                manifest = _manifest(name, traces, ranks, commit, now)
                atomic_write(tmp / MANIFEST, json_text(manifest))
                _carry_over(target, tmp)
    except OSError as exc:
        raise BaselineError(f"{target}: cannot write the baseline ({exc.strerror or exc})") from None
    return StoredBaseline(name=name, path=target, manifest=manifest)


def check_name(name: str) -> None:
    if not NAME.match(name or ""):
        raise BaselineError(f"invalid baseline name {name!r}: use letters, digits, '.', '_' and '-' "
                            f"(starting with a letter or digit, at most 128 characters)")


def save_rank(folder: Path, payload: RankPayload, options: Any = None) -> dict:
    """Write one rank's file (gzip), column cache and, with ``options``, its digest under
    ``folder``; its manifest entry."""
    source = payload.meta.path
    data = _read_unchanged(source, payload.source)
    if data[:2] != GZIP_MAGIC:
        data = gzip.compress(data, compresslevel=6, mtime=0)
    rel = f"traces/rank-{payload.rank}.json.gz"
    (folder / rel).write_bytes(data)
    sha = hashlib.sha256(data).hexdigest()  # the store's own checksum (the analysed file's may be XXH3)
    cache_rel = f"cache/rank-{payload.rank}.cols"
    (folder / cache_rel).write_bytes(payload.cache)
    digest_sha = None
    if payload.digest is not None and options is not None:
        from ..running.digest_cache import encode, path_for

        encoded = encode(dataclasses.replace(payload.digest, checksum=f"sha256:{sha}"), options)
        path_for(folder / cache_rel).write_bytes(encoded)
        digest_sha = hashlib.sha256(encoded).hexdigest()
    meta = {f.name: getattr(payload.meta, f.name) for f in dataclasses.fields(TraceMeta) if f.name != "path"}
    return {
        "rank": payload.rank, "file": rel, "sha256": sha, "bytes": len(data),
        "source_file": str(source), "json_bytes": payload.meta.json_bytes, "events": payload.n_events,
        "steps": list(payload.steps), "gpu": payload.meta.gpu_name(),
        "cache": cache_rel, "cache_sha256": hashlib.sha256(payload.cache).hexdigest(), "cache_bytes": len(payload.cache),
        **({"digest_sha256": digest_sha} if digest_sha else {}),
        "meta": json.loads(json_text(meta)),
    }


def _read_unchanged(source: str, loaded: SourceState | None) -> bytes:
    """The bytes of a rank file, refused (BaselineError) when the file changed while it was
    copied (size or mtime before and after the read differ) or since it was loaded and analysed
    (size, mtime or checksum differ from ``loaded``): a baseline must hold the file its analyses
    describe, never a half-written one."""
    before = source_state(source)
    checkpoint("baseline.copy")
    data = _read_source(source)
    after = source_state(source)
    changed = before != after or (before is not None and len(data) != before.size)
    if loaded is not None and not changed:
        changed = (before is not None and (before.size, before.mtime_ns) != (loaded.size, loaded.mtime_ns)) or \
            (loaded.checksum is not None and bytes_checksum(data, algorithm_of(loaded.checksum)) != loaded.checksum)
    if changed:
        raise BaselineError(f"{source}: the file changed while it was being stored (size, modification time or "
                            f"checksum differ from when it was read); nothing was saved: save again once the file "
                            f"is complete")
    return data


def _read_source(source: str) -> bytes:
    """The bytes of a rank's file: a local path, or a URL through fsspec (a trace on object
    storage that Dask workers analysed)."""
    try:
        if "://" in source:
            import fsspec

            with fsspec.open(source, "rb") as f:
                return f.read()
        return Path(source).read_bytes()
    except (OSError, ImportError) as exc:
        raise BaselineError(f"{source}: cannot read the rank file to store it "
                            f"({getattr(exc, 'strerror', None) or exc})") from None


def _manifest(name: str, traces: RankSet, ranks: list[dict], commit: str | None, now: _dt.datetime | None) -> dict:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    created = now.astimezone(_dt.timezone.utc).isoformat(timespec="seconds")
    versions: dict[str, str] = {}
    for t in traces:
        versions.update({k: v for k, v in versions_of(t.meta).items() if k not in versions})
    world = {t.meta.world_size for t in traces if t.meta.world_size}
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "perfreport.baseline",
        "name": name,
        "created_utc": created,
        "perfreport_version": __version__,
        "commit": commit,
        "source": traces.source,
        "gpus": sorted({r["gpu"] for r in ranks if r["gpu"]}),
        "world_size": max(world) if world else None,
        "versions": versions,
        "cache_format": {"format": CACHE_FORMAT, "columns": list(COLUMNS)},
        "ranks": ranks,
        "runs": [run_entry(0, traces, ranks, commit, created)],
    }


def run_entry(run: int, traces: RankSet, ranks: list[dict], commit: str | None, created: str) -> dict:
    """One entry of the manifest's ``runs`` list."""
    return {"run": run, "created_utc": created, "commit": commit, "source": traces.source, "ranks": ranks}


def _carry_over(target: Path, tmp: Path) -> None:
    """Copy an existing baseline's unmanaged top-level files (NOTICE, README; not traces) into
    its replacement, so ``--force`` keeps them."""
    if not target.is_dir():
        return
    for item in target.iterdir():
        if item.is_file() and item.name != MANIFEST and not item.name.endswith((".json", ".gz")) \
                and not (tmp / item.name).exists():
            shutil.copy2(item, tmp / item.name)


# --- opening and loading ---------------------------------------------------------------------
def open_baseline(store: str | Path, name: str) -> StoredBaseline:
    """The baseline ``name`` of ``store``; BaselineError if it is missing or its manifest is bad."""
    check_name(name)
    clean_stale_temps(Path(store))  # also brings back a baseline an interrupted replacement set aside
    path = Path(store) / name
    if not (path / MANIFEST).is_file():
        available = ", ".join(b.name for b in list_baselines(store)) or "none"
        raise BaselineError(f"no baseline {name!r} in {store} (available: {available}; "
                            f"create one with 'perfreport baseline save {name} TRACE_DIR')")
    baseline = read_baseline(path)
    _tidy(Path(store), baseline)
    return baseline


def _tidy(store: Path, baseline: StoredBaseline) -> None:
    """A reader clears what a killed append left in the baseline (see
    :func:`perfreport.gate.baseline_runs.recover`) when no writer holds its lock and the store
    is writable; otherwise it leaves it for the next writer."""
    from ..storing.atomic import try_store_lock
    from .baseline_runs import recover

    with try_store_lock(store, baseline.path.name) as held:
        if held:
            try:
                recover(read_baseline(baseline.path))
            except OSError:
                pass


def read_baseline(path: str | Path) -> StoredBaseline:
    """The baseline stored in the folder ``path`` (one holding a manifest.json)."""
    path = Path(path)
    manifest_path = path / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BaselineError(f"{manifest_path}: not found (not a stored baseline)") from None
    except (OSError, ValueError) as exc:
        raise BaselineError(f"{manifest_path}: unreadable manifest ({exc})") from None
    manifest = migrate(manifest, manifest_path)
    return StoredBaseline(name=str(manifest.get("name") or path.name), path=path, manifest=manifest)


def migrate(manifest: Any, where: Path) -> dict:
    """Validate a manifest and bring an older schema up to date; refuse a newer one."""
    if not isinstance(manifest, dict) or manifest.get("kind") != "perfreport.baseline":
        raise BaselineError(f"{where}: not a perfreport baseline manifest")
    version = manifest.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise BaselineError(f"{where}: invalid schema_version {version!r}")
    if version > SCHEMA_VERSION:
        raise BaselineError(f"{where}: written by a newer perfreport (baseline schema {version}, this version "
                            f"reads up to {SCHEMA_VERSION}); upgrade perfreport")
    from .manifest_schema import check_manifest

    check_manifest(manifest, where)
    ranks = manifest.get("ranks")
    if not isinstance(ranks, list) or not ranks or not all(_valid_rank_entry(r) for r in ranks):
        raise BaselineError(f"{where}: manifest lists no valid ranks")
    if version == 1:  # one run: its files at the top level
        manifest = {**manifest, "runs": [{"run": 0, "created_utc": manifest.get("created_utc"),
                                          "commit": manifest.get("commit"), "source": manifest.get("source"),
                                          "ranks": ranks}]}
    runs = manifest.get("runs")
    if not isinstance(runs, list) or not runs or not all(isinstance(r, dict) and "run" in r and isinstance(
            r.get("ranks"), list) and r["ranks"] for r in runs):
        raise BaselineError(f"{where}: manifest lists no valid runs")
    for run in [{"run": "top", "ranks": ranks}, *runs]:
        for r in run["ranks"]:
            if not _valid_rank_entry(r):
                raise BaselineError(f"{where}: manifest lists an invalid rank in run {run['run']}")
            for key in ("file", "cache"):
                if r.get(key) is not None and not _inside(r[key]):
                    raise BaselineError(f"{where}: rank {r['rank']}'s {key} {r[key]!r} is outside the baseline folder")
    return manifest


def _valid_rank_entry(r: Any) -> bool:
    """A manifest rank entry with the types every reader relies on."""
    def sha(v: Any) -> bool:
        return isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v) is not None

    return (isinstance(r, dict) and type(r.get("rank")) is int and r["rank"] >= 0
            and isinstance(r.get("file"), str) and sha(r.get("sha256"))
            and (r.get("cache") is None or (isinstance(r["cache"], str) and sha(r.get("cache_sha256"))))
            and (r.get("meta") is None or isinstance(r["meta"], dict)))


def _inside(rel: str) -> bool:
    """Whether a manifest's file path stays inside its baseline folder (a crafted manifest must
    not make perfreport read /etc/passwd or another baseline)."""
    parts = Path(rel).parts
    return bool(parts) and not Path(rel).is_absolute() and ".." not in parts


def resolve(ref: str | Path, store: str | Path = DEFAULT_STORE) -> StoredBaseline | None:
    """What a BASELINE argument names: a stored baseline folder (with a manifest), else a
    baseline of ``store`` by name, else None (a plain trace folder or file, loaded as is).
    Raises BaselineError for a name that is neither a path nor in the store."""
    path = Path(ref)
    clean_stale_temps(Path(store))
    if path.is_dir() and (path / MANIFEST).is_file():
        return read_baseline(path)
    if path.exists():
        return None
    if NAME.match(str(ref)) and (Path(store) / str(ref) / MANIFEST).is_file():
        return read_baseline(Path(store) / str(ref))
    available = ", ".join(b.name for b in list_baselines(store)) or "none"
    raise BaselineError(f"{ref}: neither a trace folder nor a baseline in {store}{did_you_mean(ref, store)} "
                        f"(available: {available})")


def did_you_mean(ref: str | Path, store: str | Path = DEFAULT_STORE) -> str:
    """``" (did you mean NAME?)"``-style text naming the stored baselines whose names are close to
    ``ref`` (a misspelt name), or "" when none is."""
    import difflib

    try:
        names = [b.name for b in list_baselines(store)]
    except (OSError, BaselineError):
        return ""
    close = difflib.get_close_matches(Path(str(ref)).name, names, n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(close)}?" if close else ""


def verify_file(path: Path, expected: str) -> bytes:
    """The bytes of ``path`` if their sha256 is ``expected``; BaselineError naming the file otherwise."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BaselineError(f"{path}: missing or unreadable ({exc.strerror}); the baseline is incomplete") from None
    actual = hashlib.sha256(data).hexdigest()
    if actual != expected:
        raise BaselineError(f"{path}: checksum mismatch (sha256 {actual[:12]}…, manifest says {expected[:12]}…); "
                            f"the baseline was modified or is corrupt, save it again")
    return data


def verify(baseline: StoredBaseline) -> int:
    """Check every file the manifest lists, every run: each rank file's sha256, that its gzip
    stream is whole and holds as many bytes of JSON as were loaded, each column cache's sha256
    and container, each cached analysis's sha256. Returns how many files were checked; raises
    BaselineError naming the first file that fails. A cached analysis without a checksum (saved
    by an older perfreport) is never used, so it is not a failure."""
    checked = 0
    for r in (r for run in baseline.runs for r in run["ranks"]):
        path = baseline.path / r["file"]
        data = verify_file(path, r["sha256"])
        _check_gzip(path, data, (r.get("meta") or {}).get("json_bytes"))
        checked += 1
        if r.get("cache") and (baseline.path / r["cache"]).exists():
            cache = baseline.path / r["cache"]
            decode_columns(verify_file(cache, r["cache_sha256"]), _meta(r, path) if r.get("meta") else
                           TraceMeta(path=str(path), rank=int(r["rank"]), rank_source="mapping", json_bytes=0), cache)
            checked += 1
            digest = cache.with_suffix(".digest")
            if r.get("digest_sha256"):
                verify_file(digest, r["digest_sha256"])
                checked += 1
    return checked


def _check_gzip(path: Path, data: bytes, json_bytes: Any) -> None:
    """A stored rank file's gzip stream ends where it should and holds ``json_bytes`` of JSON
    (when the manifest says): decompressed in blocks, never held whole."""
    import zlib

    d = zlib.decompressobj(wbits=31)
    total, view, step = 0, memoryview(data), 1 << 22
    try:
        for i in range(0, len(view), step):
            chunk = d.decompress(view[i:i + step])
            while True:
                total += len(chunk)
                if d.eof or not d.unconsumed_tail:
                    break
                chunk = d.decompress(d.unconsumed_tail)
            if d.eof:
                break
    except zlib.error as exc:
        raise BaselineError(f"{path}: corrupt gzip stream ({exc}); the baseline is damaged, save it again") from None
    if not d.eof:
        raise BaselineError(f"{path}: truncated gzip stream; the baseline is damaged, save it again")
    if type(json_bytes) is int and json_bytes > 0 and total != json_bytes:
        raise BaselineError(f"{path}: holds {total:,} bytes of JSON, the manifest says {json_bytes:,}; the stored "
                            f"copy is not the file that was analysed, save it again")


def cache_usable(baseline: StoredBaseline, ranks: list[Mapping[str, Any]] | None = None) -> bool:
    """Whether this version can read the column cache of ``ranks`` (default: the newest run's;
    same format and columns, files present); a cache is derived data, so without it the rank
    files are loaded instead."""
    fmt = baseline.manifest.get("cache_format") or {}
    return (fmt.get("format") == CACHE_FORMAT and tuple(fmt.get("columns", ())) == COLUMNS
            and all(r.get("cache") and r.get("meta") is not None and (baseline.path / r["cache"]).is_file()
                    for r in (ranks if ranks is not None else baseline.manifest["ranks"])))


def load_traces(baseline: StoredBaseline, *, fallback: Callable[[Mapping[int, Path]], TraceSet],
                ranks: list[Mapping[str, Any]] | None = None) -> TraceSet:
    """The TraceSet of a stored baseline's ``ranks`` (default: the newest run), from its column
    cache when this version can read it, else from its rank files via ``fallback`` (e.g.
    :func:`perfreport.load.load`). Every file read is verified against the manifest first."""
    ranks = ranks if ranks is not None else baseline.manifest["ranks"]
    if not cache_usable(baseline, ranks):
        log.info("%s: column cache missing or from another version; loading the rank files", baseline.path)
        files = {}
        for r in ranks:
            verify_file(baseline.path / r["file"], r["sha256"])
            files[int(r["rank"])] = baseline.path / r["file"]
        return fallback(files)
    out = {}
    for r in ranks:
        cache_path = baseline.path / r["cache"]
        data = verify_file(cache_path, r["cache_sha256"])
        meta = _meta(r, baseline.path / r["file"])
        out[meta.rank] = decode_columns(data, meta, cache_path)
    return TraceSet(ranks=out, source=str(baseline.path))


def _meta(entry: Mapping[str, Any], path: Path) -> TraceMeta:
    known = {f.name for f in dataclasses.fields(TraceMeta)}
    fields = {k: v for k, v in entry["meta"].items() if k in known and k != "path"}
    fields["rank"] = int(entry["rank"])
    return TraceMeta(path=str(path), **fields)


# --- listing and removing --------------------------------------------------------------------
def list_baselines(store: str | Path) -> list[StoredBaseline]:
    """Every readable baseline in ``store``, by name; unreadable folders are skipped with a warning."""
    store = Path(store)
    if not store.is_dir():
        return []
    clean_stale_temps(store)
    out = []
    for folder in sorted(store.iterdir()):
        if folder.name.startswith(".") or not (folder / MANIFEST).is_file():
            continue
        try:
            out.append(read_baseline(folder))
        except BaselineError:  # unreadable_baselines names them
            continue
    return out


def unreadable_baselines(store: str | Path) -> list[tuple[str, str]]:
    """(name, why) of every folder of ``store`` that holds a manifest this version cannot read."""
    store = Path(store)
    out = []
    for folder in sorted(store.iterdir()) if store.is_dir() else []:
        if folder.name.startswith(".") or not (folder / MANIFEST).is_file():
            continue
        try:
            read_baseline(folder)
        except BaselineError as exc:
            out.append((folder.name, str(exc)))
    return out


def remove(store: str | Path, name: str) -> Path:
    """Delete the baseline ``name`` (moved aside atomically, then deleted); its former path."""
    baseline = open_baseline(store, name)
    try:
        with store_lock(store, name):
            trash_dir(baseline.path)
    except OSError as exc:
        raise BaselineError(f"{baseline.path}: cannot remove the baseline ({exc.strerror or exc})") from None
    return baseline.path


__all__ = ["StoredBaseline", "save", "open_baseline", "read_baseline", "resolve", "load_traces", "list_baselines",
           "remove", "verify", "verify_file", "encode_columns", "decode_columns", "migrate", "check_name",
           "DEFAULT_STORE", "SCHEMA_VERSION", "CACHE_FORMAT", "COLUMNS"]
