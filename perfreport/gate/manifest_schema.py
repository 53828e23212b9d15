"""The JSON types of a stored baseline's manifest, checked before anything reads it.

A manifest is a file on disk that anyone may have edited (a fork's pull request, a damaged
store): every field a reader uses is checked here for its JSON type and range, so a wrong type
is one :class:`~perfreport.errors.BaselineError` naming the manifest and the field, never a
``TypeError`` three modules later. Unknown fields are left alone (a newer perfreport's extras).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import BaselineError

MAX_COUNT = 2**53
"""Largest count or size a manifest may state (exact as a float, inside int64)."""
MAX_RANK = 2**31 - 1
INT64 = (-2**63, 2**63 - 1)
"""The range of an "int64" field: a trace's epoch in ns since 1970 (Kineto's
``baseTimeNanoseconds``, 1.79e18 in a 2026 recording) is past :data:`MAX_COUNT`."""

# field -> (kinds, required); kinds: "int" (0..MAX_COUNT), "signed" (±MAX_COUNT), "int64", "rank",
# "str", "list[int]", "list[str]", "dict", "dict[str,str]", "dict[str,int]", "list[dict]"; a
# trailing "?": may be missing or null, "~": may be missing, never null
TOP = {"name": "str?", "created_utc": "str?", "perfreport_version": "str?", "commit": "str?", "source": "str?",
       "gpus": "list[str]?", "world_size": "int?", "versions": "dict[str,str]?", "cache_format": "dict?"}
CACHE_FORMAT = {"format": "int~", "columns": "list[str]~"}
RANK = {"rank": "rank", "file": "str", "sha256": "str", "bytes": "int", "source_file": "str?", "json_bytes": "int?",
        "events": "int", "steps": "list[int]", "gpu": "str?", "cache": "str?", "cache_sha256": "str?",
        "cache_bytes": "int~", "digest_sha256": "str?", "meta": "dict?"}
RUN = {"run": "int", "created_utc": "str?", "commit": "str?", "source": "str?"}
META = {"rank": "rank~", "rank_source": "str", "json_bytes": "int", "ts_origin_us": "signed~",
        "distributed_info": "dict~", "device_properties": "list[dict]~", "base_time_ns": "int64?",
        "display_time_unit": "str?", "trace_name": "str?", "other": "dict~", "dropped": "dict[str,int]~",
        "step_restarts": "str?"}


def check_manifest(manifest: dict, where: Path) -> None:
    """Raise BaselineError naming ``where`` and the field when a field has the wrong type."""
    _fields(manifest, TOP, where, "")
    for key in ("ranks", "runs"):
        if key in manifest and not isinstance(manifest[key], list):
            raise BaselineError(f"{where}: {key}: expected a list, got {_kind(manifest[key])}")
    if isinstance(manifest.get("cache_format"), dict):
        _fields(manifest["cache_format"], CACHE_FORMAT, where, "cache_format.")
    for i, r in enumerate(manifest.get("ranks") or []):
        _rank(r, where, f"ranks[{i}].")
    for i, run in enumerate(manifest.get("runs") or []):
        if not isinstance(run, dict):
            raise BaselineError(f"{where}: runs[{i}]: expected an object, got {_kind(run)}")
        _fields(run, RUN, where, f"runs[{i}].")
        if not isinstance(run.get("ranks"), list) or not run["ranks"]:
            raise BaselineError(f"{where}: runs[{i}].ranks: expected a list of ranks, got {_kind(run.get('ranks'))}")
        for j, r in enumerate(run["ranks"]):
            _rank(r, where, f"runs[{i}].ranks[{j}].")


def _rank(r: Any, where: Path, prefix: str) -> None:
    if not isinstance(r, dict):
        raise BaselineError(f"{where}: {prefix[:-1]}: expected an object, got {_kind(r)}")
    _fields(r, RANK, where, prefix)
    if r.get("meta") is not None:
        _fields(r["meta"], META, where, prefix + "meta.")


def _fields(obj: dict, spec: dict[str, str], where: Path, prefix: str) -> None:
    for name, kind in spec.items():
        nullable, may_miss = kind.endswith("?"), kind.endswith(("?", "~"))
        kind = kind.rstrip("?~")
        if name not in obj:
            if may_miss:
                continue
            raise BaselineError(f"{where}: {prefix}{name}: missing")
        if obj[name] is None and nullable:
            continue
        if not _fits(obj[name], kind):
            raise BaselineError(f"{where}: {prefix}{name}: expected {_describe(kind)}, got {_kind(obj[name])}")


def _is_int(v: Any, low: int, high: int) -> bool:
    return type(v) is int and low <= v <= high


def _fits(v: Any, kind: str) -> bool:
    if kind == "int":
        return _is_int(v, 0, MAX_COUNT)
    if kind == "signed":
        return _is_int(v, -MAX_COUNT, MAX_COUNT)
    if kind == "int64":
        return _is_int(v, *INT64)
    if kind == "rank":
        return _is_int(v, 0, MAX_RANK)
    if kind == "str":
        return isinstance(v, str)
    if kind == "dict":
        return isinstance(v, dict)
    if kind == "list[int]":
        return isinstance(v, list) and all(_is_int(x, -MAX_COUNT, MAX_COUNT) for x in v)
    if kind == "list[str]":
        return isinstance(v, list) and all(isinstance(x, str) for x in v)
    if kind == "list[dict]":
        return isinstance(v, list) and all(isinstance(x, dict) for x in v)
    if kind == "dict[str,str]":
        return isinstance(v, dict) and all(isinstance(x, str) for x in v.values())
    if kind == "dict[str,int]":
        return isinstance(v, dict) and all(_is_int(x, 0, MAX_COUNT) for x in v.values())
    raise AssertionError(kind)  # pragma: no cover


def _describe(kind: str) -> str:
    return {"int": f"a whole number from 0 to {MAX_COUNT}", "signed": "a whole number",
            "int64": "a whole number within int64", "rank":
            f"a rank from 0 to {MAX_RANK:,}", "str": "a string", "dict": "an object",
            "list[int]": "a list of whole numbers", "list[str]": "a list of strings",
            "list[dict]": "a list of objects", "dict[str,str]": "an object of strings",
            "dict[str,int]": "an object of counts"}[kind]


def _kind(v: Any) -> str:
    text = repr(v)
    return f"{type(v).__name__} {text[:40]}{'…' if len(text) > 40 else ''}"


__all__ = ["check_manifest"]
