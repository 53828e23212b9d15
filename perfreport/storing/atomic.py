"""Storing outputs atomically: files, sets of files, folders, locks, and the clean-up after
killed runs. Every write perfreport makes goes through these primitives (see the comment below)."""

from __future__ import annotations

import errno
import os
import re
import shutil
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any



# --- atomic storage --------------------------------------------------------------------------
# Every write perfreport makes goes through these primitives, so a run killed at any moment
# (SIGKILL, OOM, a cancelled CI job) leaves the previous state intact and loadable:
#   * a file is written to a temporary sibling, fsynced, then renamed over the target;
#   * a folder (a stored baseline, an archive entry) is built in a temporary sibling and swapped
#     in with one atomic exchange (Linux renameat2), or, where that is missing, set aside and
#     replaced in two renames that the next run undoes if a kill fell between them;
#   * temporaries carry the host and pid of their writer in their name, so the next run removes
#     those of dead writers (:func:`clean_stale_temps`) and never those of a live one;
#   * writers of one name serialise on a lock file (:func:`store_lock`).
# Tests stop a writer at a named moment with PERFREPORT_PAUSE_AT (see :func:`checkpoint`).

PAUSE_ENV = "PERFREPORT_PAUSE_AT"
_TEMP_TAGS = ("tmp", "old", "rm")
_hits: dict[str, int] = {}


def checkpoint(point: str) -> None:
    """Test hook: with ``PERFREPORT_PAUSE_AT=point`` (or ``point#N``: its N-th passage) the
    process announces ``paused at point`` on stderr and stops itself (SIGSTOP) right here, so a
    test can SIGKILL it at an exact moment of a write instead of racing a timer."""
    wanted = os.environ.get(PAUSE_ENV)
    if not wanted or not wanted.startswith(point):
        return
    _hits[point] = _hits.get(point, 0) + 1
    name, _, nth = wanted.partition("#")
    if name == point and _hits[point] == int(nth or 1):
        import signal
        import sys

        sys.stderr.write(f"perfreport: paused at {wanted} (pid {os.getpid()})\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSTOP)


def temp_name(target: Path, tag: str = "tmp") -> Path:
    """A unique hidden sibling of ``target`` owned by this process: ``.NAME.TAG-HOST-PID-RANDOM``."""
    import socket
    import secrets

    host = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"
    return target.with_name(f".{target.name}.{tag}-{host}-{os.getpid()}-{secrets.token_hex(4)}")


def _normal_mode(path: Path, mode: int) -> None:
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, mode & ~umask)  # mkstemp/mkdtemp make 0600/0700: give ordinary permissions


def fsync_path(path: Path) -> None:
    """Flush a file or a folder's entries to disk (a rename is durable once its folder is)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse fsync on folders: nothing more can be done
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a fsynced temporary sibling and ``os.replace``: a reader
    (or a run killed half-way) sees the old file or the new one, never a mix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(path)
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        checkpoint("write.temp")
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise
    fsync_path(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` in UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write(path: Path, data: bytes | str) -> None:
    """:func:`atomic_write_text` or :func:`atomic_write_bytes`, by the type of ``data``."""
    atomic_write_bytes(path, data.encode("utf-8") if isinstance(data, str) else data)


def atomic_files(folder: Path, files: Mapping[str, bytes | str | Iterable[bytes]]) -> list[Path]:
    """Write a set of files into ``folder`` (the reports of one run) whole or not at all, with a
    marker naming the run: :func:`perfreport.storing.fileset.write_set`. A file's content is text,
    bytes, or an iterable of byte chunks (a large JSON document,
    :class:`perfreport.documents.jsondoc.JsonChunks`, written as it is encoded)."""
    from .fileset import write_set

    return write_set(folder, files)


@contextmanager
def atomic_dir(target: Path) -> Iterator[Path]:
    """Build a folder that replaces ``target`` all at once::

        with atomic_dir(store / "nightly") as tmp:
            (tmp / "manifest.json").write_text(...)

    The body fills ``tmp`` (a hidden sibling of ``target``); on normal exit every file in it is
    fsynced and it takes ``target``'s place (:func:`replace_dir`); on an exception it is
    deleted and ``target`` is untouched. Call it under :func:`store_lock` when several writers
    may build the same target.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_name(target)
    tmp.mkdir()
    try:
        _normal_mode(tmp, 0o777)
        yield tmp
        for folder, _, names in os.walk(tmp):
            for name in names:
                fsync_path(Path(folder) / name)
            fsync_path(Path(folder))
        checkpoint("dir.built")
        replace_dir(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def replace_dir(src: Path, target: Path) -> None:
    """Put the folder ``src`` at ``target``, replacing a folder there.

    With Linux's ``renameat2(RENAME_EXCHANGE)`` the two swap in one atomic step and the old one
    is then deleted. Without it, the old folder is renamed aside (``.NAME.old-…``) and ``src``
    renamed in; if a kill falls between the two, :func:`clean_stale_temps` renames it back.
    """
    src, target = Path(src), Path(target)
    if not target.exists():
        os.rename(src, target)  # fails (never merges) if another writer got there first
        fsync_path(target.parent)
        return
    if _exchange(src, target):
        checkpoint("dir.exchanged")
        fsync_path(target.parent)
        shutil.rmtree(src, ignore_errors=True)  # src now holds the old folder
        return
    aside = temp_name(target, "old")
    os.rename(target, aside)
    checkpoint("dir.aside")
    try:
        os.rename(src, target)
    except BaseException:
        os.rename(aside, target)
        raise
    fsync_path(target.parent)
    shutil.rmtree(aside, ignore_errors=True)


def trash_dir(target: Path) -> Path:
    """Remove a folder: renamed aside atomically (``.NAME.rm-…``), then deleted; a kill during
    the deletion leaves only a hidden leftover that :func:`clean_stale_temps` removes."""
    trash = temp_name(Path(target), "rm")
    os.rename(target, trash)
    fsync_path(trash.parent)
    checkpoint("dir.trashed")
    shutil.rmtree(trash, ignore_errors=True)
    return trash


_RENAME_EXCHANGE = 2
_renameat2: Any = None
if sys.platform.startswith("linux"):
    try:
        import ctypes

        _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
        _renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    except (OSError, AttributeError):  # not glibc >= 2.28
        _renameat2 = None


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths; False where the system or file system cannot."""
    if _renameat2 is None:
        return False
    at_cwd = -100  # AT_FDCWD
    if _renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    import ctypes

    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<tag>tmp|old|rm|prev)-(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)-[0-9a-f]{8}$")
STALE_AFTER_S = 24 * 3600
"""A temporary of another host (a shared store) is stale after this long."""


def clean_stale_temps(parent: Path) -> list[Path]:
    """Remove the temporaries that killed writers left in ``parent``; returns what it removed.

    A temporary is stale when its writer (host and pid in its name) is no longer running, or,
    written by another host, when it is older than a day. A folder set aside by an interrupted
    :func:`replace_dir` (``.NAME.old-…``) whose NAME is missing is renamed back: the previous
    state returns. Safe to call while other writers run: their temporaries are left alone.
    """
    import socket

    parent = Path(parent)
    try:
        entries = list(parent.iterdir())
    except OSError:
        return []
    host = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"
    removed = []
    for path in entries:
        m = _TEMP.match(path.name)
        if not m or not _is_stale(path, m["host"] == host, int(m["pid"])):
            continue
        original = parent / m["name"]
        try:
            if m["tag"] == "old" and not original.exists():
                os.rename(path, original)
                note_recovered(parent, [m["name"]], "brought back what an interrupted replacement had set aside")
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                _unlink(path)
        except OSError:  # a read-only store, another cleaner first: leave it
            continue
        removed.append(path)
    if removed:
        note_recovered(parent, [p.name for p in removed])
    return removed


def note_recovered(parent: Path, names: list[str], what: str = "removed leftovers of an interrupted run") -> None:
    """Say on stderr what a command cleaned up or brought back before working (one line)."""
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    sys.stderr.write(f"perfreport: note: {parent}: {what}: {shown}\n")


def _is_stale(path: Path, same_host: bool, pid: int) -> bool:
    if same_host:
        if pid == os.getpid():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            return False
        return False
    try:
        return time.time() - path.lstat().st_mtime > STALE_AFTER_S
    except OSError:
        return False


@contextmanager
def store_lock(folder: Path, name: str = "") -> Iterator[None]:
    """Hold an exclusive lock on ``folder/.NAME.lock`` (``folder/.lock`` for the whole folder)
    for the block: writers of one name run one after the other, never interleaved. The lock is
    ``flock``-based, so the kernel releases it when its holder dies; the empty lock file stays."""
    import fcntl

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / (f".{name}.lock" if name else ".lock"), os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


@contextmanager
def try_store_lock(folder: Path, name: str = "") -> Iterator[bool]:
    """:func:`store_lock` without waiting: yields True holding the lock, False when another
    process holds it or the folder cannot be written (a reader's tidy-up is then skipped)."""
    import fcntl

    try:
        fd = os.open(Path(folder) / (f".{name}.lock" if name else ".lock"), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
