"""The archive site's lock: one writer at a time, and no lock file left in what is published.

The lock is ``flock`` on ``SITE/.lock`` (the kernel releases it when its holder dies, even by
SIGKILL). Its holder writes its pid into the file and deletes the file before letting go, so a
site after a normal run holds no lock file; a waiter that then finds it holds a lock on a deleted
file takes the new one instead (the check of the inode below), so two writers never both hold
it. A lock file still there with a pid in it when the lock is free was left by a writer that
was killed: :func:`site_lock` says so.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_FILE = ".lock"


@contextmanager
def site_lock(site: Path) -> Iterator[int | None]:
    """Hold the site's lock for the block; yields the pid of a killed holder whose lock file
    this run found and cleared (None when there was none)."""
    import fcntl

    path = Path(site) / LOCK_FILE
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = os.fstat(fd)
            try:
                now = os.stat(path)
                same = (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        os.close(fd)  # its holder deleted it while we waited: lock the file there now
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        killed = int(text) if text.isdigit() and int(text) != os.getpid() else None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield killed
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)
