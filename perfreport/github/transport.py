"""How one request of :class:`perfreport.github.api.Client` travels: urllib with its redirects
handed back to the client, connections that open within a connect timeout and then read with a
read timeout, a watchdog that shuts a request's sockets at its deadline, and a body read to a
cap. Standard library only.
"""

from __future__ import annotations

import http.client
import socket
import threading
import urllib.request


class Unusable(Exception):
    """An answer that must not be used (too large, cut by the deadline); its text says why."""


class Watchdog:
    """Shuts the sockets of one request when its deadline passes, whatever the request is
    blocked in (connecting, TLS, headers, a body trickled a byte at a time): the blocked read
    then fails at once and :meth:`perfreport.github.api.Client._send` reports the deadline."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def start(self) -> None:
        self._timer.start()

    def stop(self) -> None:
        self._timer.cancel()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.fired:
                _shut(sock)

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:  # the plain socket's shutdown, also for a TLS socket: nothing of its TLS state is touched
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


def _watched(base: type, watch: Watchdog, connect_timeout_s: float):
    """A connection class of ``base`` that connects within ``connect_timeout_s`` (and the
    request's deadline), then reads with the request's read timeout, its sockets watched."""

    class Connection(base):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self._read_timeout = self.timeout
            create = self._create_connection

            def create_watched(*a, **kw):
                sock = create(*a, **kw)
                watch.watch(sock)
                return sock

            self._create_connection = create_watched

        def connect(self) -> None:
            self.timeout = min(connect_timeout_s, watch.seconds)
            super().connect()
            watch.watch(self.sock)  # the TLS socket that replaced the plain one
            self.sock.settimeout(self._read_timeout)

    return Connection


class _Handler(urllib.request.HTTPHandler):
    def __init__(self, watch: Watchdog, connect_timeout_s: float) -> None:
        super().__init__()
        self._conn = _watched(http.client.HTTPConnection, watch, connect_timeout_s)

    def http_open(self, req):
        return self.do_open(self._conn, req)


class _HttpsHandler(urllib.request.HTTPSHandler):
    def __init__(self, watch: Watchdog, connect_timeout_s: float) -> None:
        super().__init__()
        self._conn = _watched(http.client.HTTPSConnection, watch, connect_timeout_s)

    def https_open(self, req):
        return self.do_open(self._conn, req, context=self._context)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Hands every redirect back to :meth:`Client.request`, which follows it only within the
    API's origin (urllib would follow any, carrying the Authorization header along)."""

    def redirect_request(self, *args, **kwargs):
        return None


def read_capped(resp, cap: int) -> bytes:
    """The answer's body, at most ``cap`` bytes (a larger one is refused, not held)."""
    length = (resp.headers.get("content-length") or "").strip() if resp.headers is not None else ""
    if length.isdigit() and int(length) > cap:
        raise Unusable(f"an answer of {int(length):,} bytes, over the {cap:,}-byte limit; not read")
    chunks, total = [], 0
    read = getattr(resp, "read1", resp.read)
    while block := read(1 << 16):
        total += len(block)
        if total > cap:
            raise Unusable(f"an answer over the {cap:,}-byte limit; not read")
        chunks.append(block)
    return b"".join(chunks)


def watched_opener(watch: Watchdog, connect_timeout_s: float) -> urllib.request.OpenerDirector:
    """An opener whose connections ``watch`` guards and that follows no redirect itself."""
    return urllib.request.build_opener(_NoRedirects(), _Handler(watch, connect_timeout_s),
                                       _HttpsHandler(watch, connect_timeout_s))
