"""Find the rank files of a job: a folder, one file, or an explicit {rank: path} mapping."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import TraceError

TRACE_SUFFIXES = (".json", ".json.gz")
_DERIVED = re.compile(r"(_with_counters\.json(\.gz)?$)|(^overlaid_)")
"""Files perfreport/HTA write next to traces (counter and overlay traces): not rank files."""
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_.]?(\d+)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class RankFile:
    """A trace file and the rank its name or the caller gives it (None: decided at load)."""

    path: Path
    rank_hint: int | None
    hint_source: str  # "mapping", "file name" or "none"


def rank_from_file_name(name: str) -> int | None:
    """``rank-3``, ``rank3``, ``rank_3``, ``worker3`` in a file name, else None."""
    m = _RANK_IN_NAME.search(name)
    return int(m.group(1)) if m else None


def is_trace_file(path: Path) -> bool:
    return path.is_file() and path.name.endswith(TRACE_SUFFIXES) and not _DERIVED.search(path.name)


def discover(source: str | Path | Mapping[int, str | Path]) -> list[RankFile]:
    """The rank files named by ``source``, sorted by path.

    A folder contributes every ``*.json`` / ``*.json.gz`` in it (not recursive). A mapping's
    relative paths are taken as they are. Raises TraceError for a missing path, a folder
    without trace files or a file of another type.
    """
    if isinstance(source, Mapping):
        files = []
        for rank, path in source.items():
            p = Path(path)
            if not p.is_file():
                raise TraceError(p, "a symbolic link to nothing (broken, or a symlink loop)" if p.is_symlink()
                                 and not p.exists() else "not a regular file" if p.exists() else "file not found")
            files.append(RankFile(p, int(rank), "mapping"))
        if not files:
            raise TraceError("<mapping>", "no trace files given")
        return sorted(files, key=lambda f: f.rank_hint)
    path = Path(source)
    if not path.exists():
        if path.is_symlink():
            raise TraceError(path, "a symbolic link to nothing (broken, or a symlink loop)")
        raise TraceError(path, "no such file or directory")
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if is_trace_file(p))
        if not found:
            raise TraceError(path, "no trace files (*.json or *.json.gz) in this directory")
    elif path.is_file():
        found = [path]
    else:
        raise TraceError(path, "not a regular file or directory")
    out = []
    for p in found:
        hint = rank_from_file_name(p.name)
        out.append(RankFile(p, hint, "file name" if hint is not None else "none"))
    return out
