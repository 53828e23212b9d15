"""Progress on stderr while ranks load and analyses run: long work never sits silent.

* on a terminal: one live line, rewritten in place (phase, ranks done / total, MB of JSON
  parsed, seconds), refreshed twice a second even while a big rank is still loading;
* elsewhere (CI logs): a few plain lines once the work has taken more than 10 s (a quick run
  leaves the log clean): the status then, every quarter of the ranks, each phase, and a
  "still working" line every 30 s of silence;
* ``--quiet``: nothing.

Progress writes to stderr only, so stdout (the verdict table, JSON) stays clean.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

MB = 1_000_000
TICK_S = 0.5
"""Refresh of the live line on a terminal."""
QUIET_S = 30.0
"""Without a terminal: the longest silence before a "still working" line."""
PLAIN_AFTER_S = 10.0
"""Without a terminal: nothing is written before the work has taken this long."""


class Progress:
    """Counts ranks and bytes as the executor reports them; see the module doc for the modes
    (``mode``: "auto" picks "tty" when ``stream`` is a terminal, else "plain"; or "quiet")."""

    def __init__(self, stream: TextIO | None = None, mode: str = "auto") -> None:
        self.stream = stream if stream is not None else sys.stderr
        if mode == "auto":
            mode = "tty" if getattr(self.stream, "isatty", lambda: False)() else "plain"
        self.mode = mode
        self.t0 = time.monotonic()
        self.label = ""
        self.total = self.done = 0
        self.total_bytes = self.done_bytes = 0
        self._next_quarter = 1
        self._last_write = time.monotonic()
        self._written = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        self._width = 0

    # --- events --------------------------------------------------------------------------------
    def phase(self, label: str) -> None:
        """A new phase ("baseline", "candidate", "cross-rank analyses", "writing reports")."""
        with self._lock:
            self.label = label
        if self.mode == "plain":
            self._line(f"perfreport: {label}...")
        self._refresh()

    def start(self, ranks: int, json_bytes: int) -> None:
        """Ranks are about to load: ``ranks`` of ``json_bytes`` bytes of JSON in all."""
        with self._lock:
            self.total, self.done, self.total_bytes, self.done_bytes = ranks, 0, json_bytes, 0
            self._next_quarter = 1
        if self.mode == "plain":
            self._line(f"{self._prefix()}loading {ranks} rank(s), {json_bytes / MB:,.0f} MB of JSON")
        self._start_ticker()
        self._refresh()

    def rank_done(self, digest) -> None:
        """One rank loaded and analysed (a :class:`~perfreport.running.digest.RankDigest`)."""
        with self._lock:
            self.done += 1
            self.done_bytes += int(getattr(digest.meta, "json_bytes", 0) or 0)
            quarter = self.total and self.done * 4 >= self._next_quarter * self.total
            if quarter:
                while self._next_quarter * self.total <= self.done * 4:
                    self._next_quarter += 1
        if self.mode == "plain" and quarter:
            self._line(self._status())
        self._refresh()

    def finish(self) -> None:
        """Stop the live line (leaves the terminal on a fresh line)."""
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=1)
            self._ticker = None
        if self.mode == "tty" and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    # --- output --------------------------------------------------------------------------------
    def _prefix(self) -> str:
        return f"perfreport: {self.label}: " if self.label else "perfreport: "

    def _status(self) -> str:
        with self._lock:
            parts = [f"{self.done}/{self.total} rank(s)"] if self.total else []
            if self.total_bytes:
                parts.append(f"{self.done_bytes / MB:,.0f}/{self.total_bytes / MB:,.0f} MB")
        parts.append(f"{time.monotonic() - self.t0:.1f} s")
        return self._prefix() + ", ".join(parts)

    def _refresh(self) -> None:
        if self.mode != "tty":
            return
        text = self._status()
        with self._lock:
            pad = max(self._width - len(text), 0)
            self._width = len(text)
            self.stream.write("\r" + text + " " * pad)
            self.stream.flush()

    def _line(self, text: str, force: bool = False) -> None:
        if self.mode == "quiet" or (not force and time.monotonic() - self.t0 < PLAIN_AFTER_S):
            return
        self.stream.write(text + "\n")
        self.stream.flush()
        self._last_write = time.monotonic()
        self._written = True

    def _start_ticker(self) -> None:
        if self.mode == "quiet" or self._ticker is not None:
            return
        self._stop.clear()
        self._ticker = threading.Thread(target=self._tick, name="perfreport-progress", daemon=True)
        self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            if self.mode == "tty":
                self._refresh()
            elif not self._written and time.monotonic() - self.t0 >= PLAIN_AFTER_S:
                self._line(self._status(), force=True)
            elif self._written and time.monotonic() - self._last_write >= QUIET_S:
                self._line(f"{self._status()} (still working)")


def make_progress(quiet: bool = False, stream: TextIO | None = None) -> Progress:
    """The command line's progress: quiet when asked, else by whether stderr is a terminal."""
    return Progress(stream, "quiet" if quiet else "auto")
