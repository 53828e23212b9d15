"""No process outlives the command: signals, parent-death and the end of worker processes.

* Every child perfreport forks (local workers, the PDF renderer) asks the kernel for SIGKILL when
  its parent dies (Linux ``prctl(PR_SET_PDEATHSIG)``), so a parent killed by SIGKILL or the OOM
  killer takes its children with it; a child whose parent is already gone exits at once.
* The command turns SIGTERM (a cancelled CI job, ``kill``) into :class:`Terminated`, an
  exception that unwinds like Ctrl-C: the executors stop their workers (and cancel Dask
  futures), temporaries are removed, and the command exits 143 with one line.
* Workers ignore SIGINT (a Ctrl-C reaches the whole process group: the parent alone decides,
  and stops them) and die on SIGTERM without a word.
* The console script bounds that unwinding (:func:`bound_the_unwinding`): a command still
  alive :data:`EXIT_GRACE_S` after the signal ends there, with the same one line and exit code.
  Its children go with it (parent-death signal).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
EXIT_GRACE_S = 10.0
"""Seconds a signalled command may take to unwind (stop its workers and its PDF renderer, remove
its temporaries: well under a second) before it ends regardless: a user's Ctrl-C or a CI job's
cancel must end the command whatever the unwinding meets. (A Ctrl-C to a command whose workers
were stopped hung it now and then under load, the signal delivered to a thread other than the
main one: see :func:`bound_the_unwinding`.)"""


class Terminated(KeyboardInterrupt):
    """SIGTERM (or SIGHUP) arrived: unwind as for Ctrl-C, then exit 128 + the signal number."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, frame) -> None:
    _start_the_deadline(*ending(signum))
    raise Terminated(signum)


def _raise_interrupted(signum: int, frame) -> None:
    _start_the_deadline(*ending(signum))
    raise KeyboardInterrupt


_bounded = False  # set by bound_the_unwinding: the console script's own process, not a library call
_said = threading.Event()  # the command printed its last line (said_the_end)
_watch: list[tuple[int, int]] = []  # (the process that armed the watch, the pipe's end that wakes it)
_deadline: list[tuple[int, str]] = []  # (exit code, line) of the first signal
_wakeup: list[int] = []  # the pipe's end, where it is the interpreter's wakeup descriptor
WATCHED = {int(signal.SIGINT), int(signal.SIGTERM)} | ({int(signal.SIGHUP)} if hasattr(signal, "SIGHUP") else set())
"""The signals whose arrival starts the deadline."""
HANDLER_WAIT_S = 0.05
"""How long the watch lets the main thread run the signal's handler before it sends the signal
to the main thread itself (it went to another thread: see :func:`bound_the_unwinding`)."""


def bound_the_unwinding() -> None:
    """In the console script's process (never in a program that calls :func:`perfreport.cli.main`):
    after SIGINT, SIGTERM or SIGHUP the process ends within :data:`EXIT_GRACE_S` however the
    unwinding goes. Ctrl-C still raises KeyboardInterrupt, as Python's own handler does.

    The watch is a daemon thread started here, before any signal, blocked reading a pipe that
    is the interpreter's wakeup descriptor (:func:`signal.set_wakeup_fd`): whichever thread the
    kernel delivers the signal to, the C-level handler writes its number there, and the watch
    writes its line to the descriptor, not through ``sys.stderr``. That was the rare hang under
    load (three times in three sessions' test runs, once in a clean-clone run since): a signal
    sent to the process may be delivered to any of its threads that does not block it (the
    workers' pool keeps two, the watch is one), and Python runs the handler only in the main
    thread, which, blocked waiting for a lock (the paused workers' results), was never woken.
    Sent to another thread of a command whose workers were paused, SIGINT hung it every time
    (``tgkill``); now the watch wakes the main thread itself, sending it the signal where its
    handler has not run within :data:`HANDLER_WAIT_S`, and the deadline holds either way."""
    global _bounded
    _bounded = True
    try:
        signal.signal(signal.SIGINT, _raise_interrupted)
    except (ValueError, OSError):
        pass
    if not _watch:
        wake_read, wake_write = os.pipe()
        try:
            os.set_blocking(wake_write, False)  # (a wakeup descriptor must not block the handler)
            signal.set_wakeup_fd(wake_write, warn_on_full_buffer=False)
            _wakeup.append(wake_write)
            os.register_at_fork(after_in_child=_no_wakeup_in_a_child)
        except (AttributeError, ValueError, OSError):  # not the main thread, or no such calls (Windows):
            pass  # the handler writes instead
        threading.Thread(target=_watch_the_deadline, args=(wake_read,), name="perfreport-deadline",
                         daemon=True).start()
        _watch.append((os.getpid(), wake_write))


def said_the_end() -> None:
    """The command printed its last line: a deadline that expires after this prints nothing more."""
    _said.set()


def _start_the_deadline(code: int, line: str) -> None:
    """Wake the watch (:func:`bound_the_unwinding`): the process ends with ``code`` (printing
    ``line`` unless the command already printed its own) if it is still alive after
    :data:`EXIT_GRACE_S`; once per process, and only in the process that armed it (a forked
    child shares the pipe). Async-signal-safe: one ``write``, no lock."""
    global _bounded
    if not _bounded or not _watch or _watch[0][0] != os.getpid():
        return
    _bounded = False  # a second signal does not restart the clock
    _deadline.append((code, line))
    if _wakeup:  # the interpreter wrote the signal's number there already
        return
    try:
        os.write(_watch[0][1], bytes([code - 128]))
    except OSError:  # pragma: no cover - the pipe is ours and empty
        pass


def _watch_the_deadline(wake_read: int) -> None:
    signum = 0
    while signum not in WATCHED:  # (another signal with a Python handler wakes it too)
        try:
            got = os.read(wake_read, 1)
        except OSError:  # pragma: no cover
            return
        if not got:  # pragma: no cover
            return
        signum = got[0]
    if not _deadline:
        time.sleep(HANDLER_WAIT_S)
    if not _deadline:  # the signal went to another thread and the main thread sleeps: wake it
        _deadline.append(ending(signum))
        try:
            signal.pthread_kill(threading.main_thread().ident, signum)
        except (AttributeError, OSError, ValueError):  # pragma: no cover - gone, or no such call: the deadline holds
            pass
    time.sleep(EXIT_GRACE_S)
    code, line = _deadline[0]
    if not _said.is_set():
        try:  # (not sys.stderr: the main thread may hold its lock, blocked in the unwinding)
            os.write(2, (line + "\n").encode("utf-8", "replace"))
        except OSError:
            pass
    os._exit(code)


def ending(signum: int) -> tuple[int, str]:
    """(exit code, line) of a command ended by ``signum``: Ctrl-C's, or a termination's."""
    if signum == signal.SIGINT:
        return 130, "perfreport: interrupted"
    return 128 + signum, f"perfreport: terminated by signal {signum}; stopped its workers"


def _no_wakeup_in_a_child() -> None:
    """In a forked child: its signals are not the parent's deadline (the pipe is inherited)."""
    if _wakeup:
        try:
            signal.set_wakeup_fd(-1)
        except (ValueError, OSError):  # pragma: no cover - forked from a thread that cannot
            pass


def install_handlers() -> None:
    """In the command's process: SIGTERM and SIGHUP unwind as :class:`Terminated`."""
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            try:
                signal.signal(sig, _raise_terminated)
            except (ValueError, OSError):  # not the main thread (an embedding program): leave it
                pass


def die_with_parent(parent_pid: int) -> None:
    """In a forked child: SIGKILL when the parent dies; exit now if it already has."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def worker_init(parent_pid: int) -> None:
    """Initializer of a local worker process (see the module's docstring)."""
    global _bounded
    _bounded = False  # the parent's deadline is the parent's
    die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "SIGHUP"):
        signal.signal(signal.SIGHUP, signal.SIG_DFL)


def signal_name(code: int) -> str:
    """``signal 9 (SIGKILL)`` for a negative exit code of a process, ``exit code N`` otherwise."""
    if code < 0:
        try:
            return f"signal {-code}, {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


__all__ = ["Terminated", "install_handlers", "bound_the_unwinding", "said_the_end", "die_with_parent", "worker_init",
           "ending", "signal_name", "ends_without_teardown", "keep_until_exit", "exit_now"]


_kept: list = []
_ends_without_teardown = False


def ends_without_teardown() -> None:
    """Say that this process will end by :func:`exit_now` (the console script's, before its
    command runs): what :func:`keep_until_exit` is given is then held to the end."""
    global _ends_without_teardown
    _ends_without_teardown = True


def keep_until_exit(*objects) -> None:
    """Hold ``objects`` until the process ends where it ends by :func:`exit_now`: a command's
    analyses, freed one array at a time when its function returns, cost time the exit does not
    need (the triton-grown 1 GB ``compare``: 0.07 s of unmapping the digests' arrays and freeing
    the rest, sampled). A program or a test that calls :func:`perfreport.cli.main` keeps nothing."""
    if _ends_without_teardown:
        _kept.extend(objects)


def exit_now(code: int) -> None:
    """End the command's process with ``code`` without tearing the interpreter down.

    Python's own exit frees every object and module one by one: with numpy, pandas and the
    report stack loaded that takes ~0.1 s (measured on the 2-core VM: 0.10-0.13 s between the
    command's last line and the process's end, 0.02 s for a bare interpreter), 7 % of a 200 MB
    ``analyze``. Nothing of it is needed: the command has written its files (atomically) and
    reaped its workers. What an exit must still do is done here, in Python's order: threads that
    are not daemons are joined, the ``atexit`` handlers run (logging's flush, any library's
    clean-up), and stdout / stderr are flushed; then the process ends. The console script and
    ``python -m perfreport`` end this way; :func:`perfreport.cli.main`, called in a program or a
    test, returns as before."""
    import atexit
    import threading

    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: Python's exit would not report it either
            pass
    os._exit(code)
