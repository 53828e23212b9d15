"""Handing a result from a local worker to the parent in an anonymous memory file (a
Linux ``memfd``) passed over a Unix socket, not through the process pool's pipe.

Why: a rank's digest of a many-step 1 GB trace pickles to ~90 MB. The pool sends it through one
pipe, 64 KB per write, the parent's reader thread taking each piece while both cores are busy:
0.2-0.3 s per digest at the end of a compare, on its critical path, and the workers queue on
the pipe's lock one after the other. Written into a memory file it is one copy at memory speed,
and the parent reads it in place: the arrays (86 of the 93 MB of the MI250-grown 1 GB rank's
digest) are written out of band (pickle protocol 5) and unpickled as views of the file's pages,
not copied out of them (:func:`received`).

The file has no name: nothing is left behind whatever happens. The worker sends its descriptor
(``SCM_RIGHTS``) over a datagram socket made before the workers are forked, then closes its
own; the kernel keeps the file while the message is in flight, and frees it when the parent has
read and closed it, or when the socket goes with a dead parent. Systems without
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
import struct
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_HEADER = struct.Struct("<QQ")
"""A memory file's header: the pickle's length in bytes, the number of out-of-band buffers."""
ALIGN = 64
"""Each buffer starts at a multiple of this many bytes: a cache line (numpy's arrays are
aligned to 16 or more; unaligned views would be slower, and some C code would copy them)."""
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
        self.waiting: dict[int, int] = {}

    def close(self) -> None:
        for fd in self.waiting.values():
            os.close(fd)
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
    """In a worker: :class:`HandedOff` once ``result`` is written into a memory file sent over
    ``channel`` (:func:`_write`); the result itself where there is no channel or no memory for
    the file (the pipe takes it)."""
    if channel is None:
        return result
    try:
        fd = os.memfd_create("perfreport-result", os.MFD_CLOEXEC)
    except OSError:
        return result
    try:
        _write(fd, result)
        socket.send_fds(channel.workers, [job.to_bytes(8, "little")], [fd])
    except OSError:  # no memory for the file, the socket gone: the pipe still works
        return result
    finally:
        os.close(fd)  # (the message in flight keeps the file)
    return HandedOff(job)


def _write(fd: int, result) -> None:
    """``result`` pickled with its arrays' memory out of band (pickle protocol 5): the header
    (:data:`_HEADER`: the pickle's length, the number of buffers), each buffer's length, the
    pickle, then each buffer at an offset aligned to :data:`ALIGN`. The parent unpickles the
    arrays as views of the file's pages (:func:`received`) instead of copying them: the
    MI250-grown 1 GB rank's digest (93 MB, 86 MB of it in 182 arrays) unpickled in 0.035 s
    instead of 0.095 s, in a forked child as the parent (7,700 page faults instead of 30,000).
    Other objects (texts, small tables' object columns) stay in the pickle."""
    buffers: list[pickle.PickleBuffer] = []
    head = pickle.dumps(result, protocol=5, buffer_callback=buffers.append)
    raws = [b.raw() for b in buffers]
    with os.fdopen(fd, "wb", buffering=1 << 16, closefd=False) as f:  # (buffered: each write whole)
        f.write(_HEADER.pack(len(head), len(raws)) + struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws)))
        f.write(head)
        at = _HEADER.size + 8 * len(raws) + len(head)
        for raw in raws:
            pad = -at % ALIGN
            f.write(bytes(pad))
            f.write(raw)
            at += pad + raw.nbytes


def received(result, channel: Channel | None):
    """In the parent: the result a worker sent, read from its memory file when it was handed
    off (:class:`HandedOff`). The file is mapped privately (copy on write, :func:`_mapped`): its
    arrays are views of its pages, writable like any array, and the mapping lasts as long as
    one of them does."""
    if not isinstance(result, HandedOff):
        return result
    fd = _descriptor(channel, result.job)
    try:
        view = _mapped(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)  # (a mapping keeps the file)
    head_bytes, n = _HEADER.unpack_from(view)
    lengths = struct.unpack_from(f"<{n}Q", view, _HEADER.size)
    at = _HEADER.size + 8 * n
    head = view[at:at + head_bytes]
    at += head_bytes
    buffers = []
    for length in lengths:
        at += -at % ALIGN
        buffers.append(view[at:at + length])
        at += length
    return pickle.loads(head, buffers=buffers)


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


def _descriptor(channel: Channel, job: int) -> int:
    """The descriptor sent for ``job``; those of other jobs met on the way are kept for them."""
    while job not in channel.waiting:
        message, fds, _, _ = socket.recv_fds(channel.parent, 16, 1)
        if len(fds) != 1 or len(message) != 8:
            for fd in fds:
                os.close(fd)
            raise OSError("a malformed message on the result channel")
        channel.waiting[int.from_bytes(message, "little")] = fds[0]
    return channel.waiting.pop(job)
