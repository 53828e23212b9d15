"""A gzipped trace's text scanned while it is decompressed, so that it is never whole in memory.

Why: a ``.json.gz`` rank was decompressed whole before its scan, so a ``compare`` worker held
the whole text (and the compressed file) at once: a 200 MB rank's worker peaked at 271-277 MB,
1.36-1.39 x its JSON, where a plain JSON file's scan hands its pages back as it goes. Here a
thread decompresses into a buffer of the text's size (anonymous memory: a page costs nothing
until it is written) and publishes how far it got (``_scan.feed_publish``); the scan follows it
(``scan_document``'s ``feed``: it waits before each event until the text is there) and hands
the scanned pages back, and the thread stays at most :data:`LEAD` bytes ahead of it. Both
release the GIL while they work (ISA-L's decoder, the scanner).

Anything unusual (a text of another size than the gzip trailer says, several gzip members, an
event longer than the scanner's margin, malformed JSON, a corrupt stream) makes
:meth:`StreamedText.scan` give None: the caller then decompresses the text whole and scans it
as before, which also reports any error as before.
"""

from __future__ import annotations

import mmap
import threading
import time
from typing import Any

import numpy as np

from ..timing import record, thread_faults

try:
    from isal import igzip_lib as _igzip
except ImportError:  # pragma: no cover - isal is a declared dependency
    _igzip = None
try:
    from . import _scan  # type: ignore[attr-defined]
except ImportError:  # the extension is optional
    _scan = None

CHUNK = 64 << 10
"""Bytes of text per call of the decoder, each copied into the buffer, then published: below
glibc's mmap threshold, so the decoder's output comes from the heap and is reused (4 MB pieces
were mapped and unmapped each time: 67 munmaps of 0.65-0.86 ms while the scan ran)."""
LEAD = 48 << 20
"""How far the decompression may run ahead of the scan: the text in memory at once, at most
(more when the scan waits for its margin, ``_scan.FEED_MARGIN``: the thread never stops short
of what the scan waits for)."""
AVAIL, DONE, SCANNED, CANCEL, PAUSE, WAITING = range(6)
"""The feed's slots (see ``_scan.scan_document``)."""
PATIENCE_S = 60.0
"""A scan that does not move for this long is given up on (the text is then decompressed whole)."""


def available() -> bool:
    """Whether this build can scan a text as it is decompressed."""
    return (_igzip is not None and _scan is not None and hasattr(_scan, "feed_publish")
            and hasattr(mmap, "MAP_PRIVATE") and hasattr(mmap, "MAP_ANONYMOUS"))


class StreamedText:
    """The text of one gzip member of ``size`` bytes (its trailer's), decompressed into
    :attr:`buffer` by a thread started at once, at most ``limit`` bytes. ``times``: the
    thread's wall and CPU seconds and page faults (the buffer's pages it wrote)."""

    def __init__(self, data: bytes, size: int, limit: int) -> None:
        self.size = size
        # private anonymous memory: a page handed back by the scan is freed (a shared mapping's
        # pages would stay in its shared-memory file while they left this process's RSS)
        self.buffer = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.feed = np.zeros(6, dtype=np.int64)
        self.failed: BaseException | None = None
        self.times = (0.0, 0.0, 0)
        self._thread = threading.Thread(target=self._decompress, args=(data, min(size, limit)),
                                        name="perfreport-gunzip", daemon=True)
        self._thread.start()

    def _decompress(self, data: bytes, bound: int) -> None:
        """The thread: decode, copy, publish; stop early when cancelled or ahead by :data:`LEAD`."""
        wall0, cpu0, faults0 = time.perf_counter(), time.thread_time(), thread_faults()
        written = 0
        view = memoryview(self.buffer)
        try:
            decoder = _igzip.IgzipDecompressor(flag=_igzip.DECOMP_GZIP)
            chunk = decoder.decompress(data, CHUNK)
            del data  # the decoder keeps what it needs of it
            while True:
                if written + len(chunk) > bound:
                    raise ValueError("the text is longer than the gzip trailer says")
                view[written:written + len(chunk)] = chunk
                written += len(chunk)
                _scan.feed_publish(self.feed, written)
                if decoder.eof:
                    break
                if not self._hold(written):
                    if self.feed[CANCEL]:
                        return  # the scan is over (it failed, or it had the text it needed)
                    raise TimeoutError("the scan did not move")
                chunk = decoder.decompress(b"", CHUNK)
                if not chunk and decoder.needs_input:
                    raise EOFError("truncated gzip file")
            if written != self.size or decoder.unused_data.strip(b"\0"):
                raise ValueError("not one gzip member of the trailer's size")
        except BaseException as exc:  # any: the caller decompresses the text whole instead
            self.failed = exc.with_traceback(None)  # (no frame kept, so no view of the buffer)
        finally:
            view.release()  # the buffer can be closed
            self.times = (time.perf_counter() - wall0, time.thread_time() - cpu0, thread_faults() - faults0)
            _scan.feed_publish(self.feed, written, True)

    def _hold(self, written: int) -> bool:
        """Wait while the scan hands pages back (it asks with PAUSE 1; this thread answers 2 and
        sleeps until it is 0: see ``_scan``'s ``feed_pause``) or while this thread is more than
        :data:`LEAD` ahead of it; False once the scan is over (cancelled) or has not moved for
        :data:`PATIENCE_S`."""
        feed, since = self.feed, time.monotonic()
        while not feed[CANCEL] and time.monotonic() - since < PATIENCE_S:
            if feed[PAUSE] == 1:
                feed[PAUSE] = 2
            if not feed[PAUSE] and (written < feed[WAITING] or written - int(feed[SCANNED]) <= LEAD):
                return True  # (never held back short of what the scan waits for: no deadlock)
            time.sleep(0.00002 if feed[PAUSE] else 0.0005)
        return False

    def scan(self, scan_document) -> Any | None:
        """``scan_document(buffer, feed)``'s result, or None where the streamed text cannot be
        trusted (see the module docstring); the thread is stopped and joined either way."""
        try:
            done = scan_document(self.buffer, self.feed)
        except ValueError:
            done = None
        finally:
            self.feed[CANCEL] = 1
            self._thread.join()
            record("decompress (own thread, beside the scan)", *self.times)
        return None if self.failed is not None else done

    def close(self) -> None:
        self.buffer.close()
