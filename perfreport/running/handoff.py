"""Handing a result from a local worker to the parent in an anonymous memory file (a
Linux ``memfd``) passed over a Unix socket, not through the process pool's pipe.

Why: a rank's digest of a many-step 1 GB trace pickles to ~90 MB. The pool sends it through one
pipe, 64 KB per write, the parent's reader thread taking each piece while both cores are busy:
0.2-0.3 s per digest at the end of a compare, on its critical path, and the workers queue on
the pipe's lock one after the other. Written into a memory file it is one copy at memory speed,
and the parent reads it in place.

The file has no name: nothing is left behind whatever happens. The worker sends its descriptor
(``SCM_RIGHTS``) over a datagram socket made before the workers are forked, then closes its
own; the kernel keeps the file while the message is in flight, and frees it when the parent has
read and closed it, or when the socket goes with a dead parent. Systems without
``memfd_create`` or descriptor passing, and a file that cannot be written (no memory), take
the pipe as before.
"""

from __future__ import annotations

import mmap
import os
import pickle
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

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
    """In a worker: :class:`HandedOff` once ``result`` is pickled into a memory file sent over
    ``channel`` (pickled straight into it: no copy of the pickle is held in memory); the result
    itself where there is no channel or no memory for the file (the pipe takes it)."""
    if channel is None:
        return result
    try:
        fd = os.memfd_create("perfreport-result", os.MFD_CLOEXEC)
    except OSError:
        return result
    try:
        with os.fdopen(fd, "wb", buffering=1 << 16, closefd=False) as f:
            pickle.dump(result, f, protocol=pickle.HIGHEST_PROTOCOL)
        socket.send_fds(channel.workers, [job.to_bytes(8, "little")], [fd])
    except OSError:  # no memory for the file, the socket gone: the pipe still works
        return result
    finally:
        os.close(fd)  # (the message in flight keeps the file)
    return HandedOff(job)


def received(result, channel: Channel | None):
    """In the parent: the result a worker sent, read from its memory file when it was handed
    off (:class:`HandedOff`)."""
    if not isinstance(result, HandedOff):
        return result
    fd = _descriptor(channel, result.job)
    try:
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as mapped:
            return pickle.loads(mapped)
    finally:
        os.close(fd)


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
