"""Work in forked children: a child runs a function and streams its results back through a pipe.

The report's figures (:mod:`perfreport.report.drawing`), a single rank's analyses
(:func:`perfreport.running.digest.digest` with a spare core) and a comparison's attribution beside
its verdict (:class:`Beside`) are shared with children this way: a fork
shares everything the parent has (nothing is pickled on the way in), the child sends back
bytes. A child dies with its parent and ignores Ctrl-C (:func:`perfreport.running.lifecycle.worker_init`);
one that fails exits 1 without a word, leaving its work to the parent, which does it itself
(and meets the error itself).
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from ..timing import reaped

T = TypeVar("T")

_TIMES = 0xFFFFFFFF
"""The index of a child's last message: its wall and CPU seconds."""


_IMPORTING: list[threading.Thread] = []
"""Threads that import modules beside the main one (the figures' head start): joined before
any fork (:func:`fork`)."""


def fork_after(thread: threading.Thread) -> None:
    """Let no child be forked before ``thread`` (an importing one) has finished."""
    _IMPORTING.append(thread)


def fork() -> int:
    """``os.fork()`` once no thread of :func:`fork_after` is still importing.

    A child forked while another thread imports a module inherits that module's import lock,
    held by a thread the child does not have, and waits forever the first time it imports the
    module itself: the figures' children of a compare of two tiny traces hung until their time
    limit (5.6-6.6 s) while the parent's head-start thread was importing matplotlib. Waiting for
    that import instead costs at most the rest of it (~0.4 s), and nothing once it is done."""
    imports_done()
    return os.fork()


def imports_done() -> None:
    """Wait for the threads of :func:`fork_after` (before forking by other means: a pool)."""
    while _IMPORTING:
        _IMPORTING.pop().join()


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class Child:
    """A forked child running ``work(send)``: ``send(index, data)`` streams one message back
    (index: 4 bytes, length: 8 bytes, the data), and a reader thread here collects them in
    :attr:`messages`. After ``work`` the child sends its wall and CPU seconds (:attr:`times`)."""

    def __init__(self, work: Callable[[Callable[[int, bytes], None]], None]) -> None:
        self.messages: dict[int, bytes] = {}
        self.times: tuple[float, ...] = ()
        self.done = threading.Event()  # the child's pipe closed: it has sent all it will
        self.arrived = threading.Condition()
        self.pid = -1
        read_fd, write_fd = os.pipe()
        parent = os.getpid()
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            pid = fork()
        except OSError:
            os.close(read_fd)
            os.close(write_fd)
            raise
        if pid == 0:  # the child: never returns
            os.close(read_fd)
            _child(parent, work, write_fd)
        os.close(write_fd)
        self.pid = pid
        self._thread = threading.Thread(target=self._read, args=(read_fd,), name="perfreport-child", daemon=True)
        self._thread.start()

    def _read(self, fd: int) -> None:
        try:
            with os.fdopen(fd, "rb") as f:
                while True:
                    head = f.read(12)
                    if len(head) < 12:
                        return
                    index, size = int.from_bytes(head[:4], "little"), int.from_bytes(head[4:], "little")
                    body = f.read(size)
                    if len(body) < size:
                        return
                    if index == _TIMES:
                        self.times = tuple(float(x) for x in body.decode().split())
                    with self.arrived:
                        self.messages[index] = body
                        self.arrived.notify_all()
        except (OSError, ValueError):
            return
        finally:
            with self.arrived:
                self.done.set()
                self.arrived.notify_all()

    def wait(self, indices: Sequence[int], timeout: float | None = None) -> None:
        """Until the child has sent each of ``indices`` or stopped sending (or ``timeout`` seconds
        have passed)."""
        deadline = None if timeout is None else time.perf_counter() + timeout
        with self.arrived:
            while not self.done.is_set() and any(i not in self.messages for i in indices):
                left = None if deadline is None else deadline - time.perf_counter()
                if left is not None and left <= 0:
                    return
                self.arrived.wait(left)

    def stop(self, kill: bool) -> None:
        """Reap the child (killed first with ``kill``, or when it is still drawing)."""
        if self.pid <= 0:
            return
        pid, self.pid = self.pid, -1
        if kill or not self.done.is_set():
            import signal

            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        reaped(pid)
        self._thread.join()


class Beside(Generic[T]):
    """``fn()`` run in a forked child while this process does something else: :meth:`result`
    is what it returned (pickled back). Where the platform cannot fork, no process can be made,
    or the child fails or dies, :meth:`result` runs ``fn()`` here (and meets its error here).
    ``fn`` must return something small: it crosses a pipe. Call :meth:`result` or :meth:`stop`.
    A child still silent after ``patience`` seconds (it should never hang) is given up on."""

    def __init__(self, fn: Callable[[], T], name: str, patience: float = 120.0) -> None:
        self._fn, self.name, self.patience = fn, name, patience
        self._child: Child | None = None
        if hasattr(os, "fork"):
            try:
                self._child = Child(lambda send: send(0, pickle.dumps(fn(), protocol=pickle.HIGHEST_PROTOCOL)))
            except OSError:  # no process to spare (EAGAIN, ENOMEM): fn runs here, later
                self._child = None

    def result(self) -> T:
        child, self._child = self._child, None
        if child is not None:
            child.wait([0], timeout=self.patience)
            child.done.wait(5.0)  # its times follow its result, then it exits
            child.stop(kill=False)
            if child.times:
                from ..timing import record

                record(f"{self.name} (child process, beside)", *child.times)
            if 0 in child.messages:
                return pickle.loads(child.messages.pop(0))  # (the text goes as soon as it is read)
        return self._fn()

    def stop(self) -> None:
        """Kill and reap the child (the command failed or was interrupted)."""
        child, self._child = self._child, None
        if child is not None:
            child.stop(kill=True)


def _child(parent: int, work: Callable[[Callable[[int, bytes], None]], None], fd: int) -> None:
    """In the forked child: run ``work``; exit 1 at the first failure (the parent does what was
    not sent, and meets the error itself).

    The child first gives back the free heap it inherited (:func:`~.heap.give_back`). The parent
    keeps its freed pages for reuse (:mod:`.heap`); a child that allocated into them would copy
    each one from the parent on its first write (a copy-on-write fault, where a fresh page is
    only zeroed), and each page the child still shares costs the parent a copy too when it
    writes there. MI250-grown 1 GB ``analyze``, whose second half of the analyses runs in a child:
    the child's CPU 0.75-0.91 s (mean 0.83) against 0.77-1.08 s (0.89) without, 5 alternating pairs."""
    code = 0
    try:
        from .heap import give_back
        from .lifecycle import worker_init

        worker_init(parent)
        give_back()  # the free heap inherited from the parent (see the docstring)
        wall0, cpu0 = time.perf_counter(), time.process_time()
        work(lambda index, data: _send(fd, index, data))
        _send(fd, _TIMES, f"{time.perf_counter() - wall0} {time.process_time() - cpu0}".encode())
    except BaseException:  # noqa: BLE001 - a child never returns into the parent's code
        code = 1
    finally:
        os._exit(code)


def _send(fd: int, index: int, data: bytes) -> None:
    """One message: its index and length, then the data, written as it is (not joined to its
    12-byte head first: that was a copy of every message, 253 MB in the child of a 1 GB gloo
    trace's ``analyze``, whose peak it raised from ~1.27 to 1.53 GB)."""
    write_all(fd, index.to_bytes(4, "little") + len(data).to_bytes(8, "little"))
    write_all(fd, data)


def write_all(fd: int, data: bytes) -> None:
    """All of ``data`` to the pipe ``fd`` (a write may take only part of it)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_exactly(fd: int, size: int) -> bytes:
    """``size`` bytes from the pipe ``fd``, or fewer where its writer closed it first (a process
    that ended); read a MiB at most at a time."""
    chunks, left = [], size
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
