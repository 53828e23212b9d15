"""Handing a result from a local worker to the parent in an anonymous memory file (a
Linux ``memfd``) passed over a Unix socket, not through the process pool's pipe.

Why: a rank's digest of a many-step 1 GB trace pickles to ~90 MB. The pool sends it through one
pipe, 64 KB per write, the parent's reader thread taking each piece while both cores are busy:
0.2-0.3 s per digest at the end of a compare, on its critical path, and the workers queue on
the pipe's lock one after the other. Written into a memory file it is one copy at memory speed,
and the parent reads it in place. Its large arrays (84.7 of the 93 MB of the MI250-grown 1 GB
rank's digest, in 42 arrays) each go in a memory file of their own (pickle protocol 5, out of
band), which the parent maps and unpickles as views of its pages, not copies: each array's memory
goes when the array does (:func:`received`).

The files have no name: nothing is left behind whatever happens. The worker sends their descriptors
(``SCM_RIGHTS``) over a datagram socket made before the workers are forked, then closes its
own; the kernel keeps the files while the message is in flight, and frees each when the parent
has read it and let go of its mapping, or when the socket goes with a dead parent. Systems without
``memfd_create`` or descriptor passing, and a file that cannot be written (no memory), take
the pipe as before.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import pickle
import socket
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

OUT_OF_BAND_BYTES = 256 << 10
"""An array of at least this many bytes gets a memory file of its own; smaller ones stay in the
pickle (copied: 1.3 of the MI250-grown 1 GB rank's 86 MB of arrays, in 140 arrays)."""
MAX_FILES = 253
"""Descriptors one message may carry (Linux's ``SCM_MAX_FD``): the pickle's and 252 arrays'; the
arrays past them stay in the pickle."""
RECEIVE_TIMEOUT_S = 60.0
"""How long the parent waits for a descriptor the pool said was sent (it is already queued)."""


@dataclass(frozen=True)
class HandedOff:
    """What the pipe carries instead of a result sent in a memory file: the job it is for."""

    job: int


class Channel:
    """The socket pair: the parent's end and the workers' end (inherited by fork), and the
    descriptors received for jobs whose :class:`HandedOff` has not been read yet."""

    def __init__(self) -> None:
        self.parent, self.workers = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.parent.settimeout(RECEIVE_TIMEOUT_S)
        self.waiting: dict[int, list[int]] = {}

    def close(self) -> None:
        for fds in self.waiting.values():
            _close_all(fds)
        self.waiting.clear()
        self.parent.close()
        self.workers.close()


@contextmanager
def handoff_channel(forked: bool) -> Iterator[Channel | None]:
    """A :class:`Channel` for workers ``forked`` from this process, closed on the way out (with
    any descriptor not yet read); None where results must take the pipe."""
    if not forked or not hasattr(os, "memfd_create") or not hasattr(socket, "send_fds"):
        yield None
        return
    try:
        channel = Channel()
    except OSError:
        yield None
        return
    try:
        yield channel
    finally:
        channel.close()


def hand_off(result, channel: Channel | None, job: int):
    """In a worker: :class:`HandedOff` once ``result`` is written into memory files sent over
    ``channel`` (:func:`_files`); the result itself where there is no channel or no memory for
    the files (the pipe takes it)."""
    if channel is None:
        return result
    try:
        fds = _files(result)
    except OSError:  # no memfd, no memory for the files: the pipe still works
        return result
    try:
        socket.send_fds(channel.workers, [job.to_bytes(8, "little")], fds)
    except OSError:  # the socket gone
        return result
    finally:
        _close_all(fds)  # (the message in flight keeps the files)
    return HandedOff(job)


def _files(result) -> list[int]:
    """Descriptors of ``result``'s memory files: its pickle (protocol 5), then one file per array
    of :data:`OUT_OF_BAND_BYTES` or more (out of band, at most ``MAX_FILES - 1`` of them). The
    parent maps each array's file and unpickles the array as a view of it instead of copying it:
    the MI250-grown 1 GB rank's digest (93 MB, 43 files) unpickled in 0.033-0.036 s instead of
    0.091-0.101 s, in a forked child as the parent (8,000 page faults instead of 30,000). A file
    per array, not one for them all, keeps each one's memory only as long as the array (8 ranks
    of 7,518 steps: the parent's peak 255-257 MB with one file per digest, 191-192 MB with a
    file per array, 189-195 MB copying)."""
    raws: list[memoryview] = []

    def in_band(buffer: pickle.PickleBuffer) -> bool:
        raw = buffer.raw()
        if raw.nbytes < OUT_OF_BAND_BYTES or len(raws) >= MAX_FILES - 1:
            return True
        raws.append(raw)
        return False

    head = pickle.dumps(result, protocol=5, buffer_callback=in_band)
    fds: list[int] = []
    try:
        for data in (head, *raws):
            fds.append(os.memfd_create("perfreport-result", os.MFD_CLOEXEC))
            with os.fdopen(fds[-1], "wb", buffering=1 << 16, closefd=False) as f:  # (buffered: each write whole)
                f.write(data)
    except BaseException:
        _close_all(fds)
        raise
    return fds


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def received(result, channel: Channel | None):
    """In the parent: the result a worker sent, read from its memory files when it was handed off
    (:class:`HandedOff`): the pickle read, each array's file mapped privately (copy on write,
    :func:`_mapped`) and the array a view of it, writable like any array; its mapping, and so its
    memory, goes with the array."""
    if not isinstance(result, HandedOff):
        return result
    fds = _descriptors(channel, result.job)
    try:
        buffers = [_mapped(fd, os.fstat(fd).st_size) for fd in fds[1:]]
        with mmap.mmap(fds[0], 0, access=mmap.ACCESS_READ) as head:
            return pickle.loads(head, buffers=buffers)
    finally:
        _close_all(fds)  # (a mapping keeps its file)


def _mapped(fd: int, size: int) -> memoryview:
    """The file's ``size`` bytes mapped privately, as a memoryview that unmaps them when the last
    view of it (an array) is gone. Not Python's ``mmap``, which keeps a duplicate of the
    descriptor open for the mapping's life: a command holding thousands of ranks' digests would
    hold as many descriptors. Where the C library cannot be called, a copy of the file."""
    libc = _libc()
    address = libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE, fd, 0) if libc else None
    if not address or address == ctypes.c_void_p(-1).value:
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as file:
            return memoryview(bytearray(file))
    memory = (ctypes.c_char * size).from_address(address)
    unmap = weakref.finalize(memory, libc.munmap, address, size)
    unmap.atexit = False  # at exit the process's memory goes anyway, and an array may still be read
    return memoryview(memory).cast("B")


@functools.cache
def _libc():
    """The C library's ``mmap`` and ``munmap`` (None where ctypes cannot load it)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


def _descriptors(channel: Channel, job: int) -> list[int]:
    """The descriptors sent for ``job``; those of other jobs met on the way are kept for them."""
    while job not in channel.waiting:
        message, fds, _, _ = socket.recv_fds(channel.parent, 16, MAX_FILES)
        if not fds or len(message) != 8:
            _close_all(fds)
            raise OSError("a malformed message on the result channel")
        channel.waiting[int.from_bytes(message, "little")] = fds
    return channel.waiting.pop(job)
