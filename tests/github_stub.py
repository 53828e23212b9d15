"""A GitHub REST API stand-in on 127.0.0.1 for the tests of ``perfreport github`` and the Action.

It serves the endpoints perfreport uses — list/create/update issue comments, get/list pull
requests — from memory, records every request (method, path, query, headers, body), paginates
like GitHub (``per_page`` up to 100, ``Link: rel="next"``), and can be told to fail: a status
for writes (403 for a fork's read-only token), a number of 5xx or rate-limit answers first.

Hostile answers for the client's defences (``state.hostile``): :func:`redirect` (elsewhere, or
in a loop), :func:`trickle` (a byte at a time), :func:`flood` (a body without end), each bounded
in bytes and seconds on the server's side too.

Bounded: it serves at most ``max_requests`` requests (then 503 and a flag), every request
times out after 10 s, and :meth:`close` stops it. Only the loopback address is used.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Recorded:
    method: str
    path: str
    query: dict
    headers: dict
    body: object


@dataclass
class StubState:
    repo: str = "octo/widgets"
    comments: dict[int, list[dict]] = field(default_factory=dict)   # PR number -> comments
    pulls: list[dict] = field(default_factory=list)
    write_status: int | None = None          # e.g. 403: every POST/PATCH answers this
    fail_first: list[tuple[int, dict]] = field(default_factory=list)  # (status, headers) answered first
    max_requests: int = 200
    hostile: Callable[["BaseHTTPRequestHandler", str, str], bool] | None = None
    """Answers a request its own way (see :func:`redirect`, :func:`trickle`, :func:`flood`);
    True when it did. Called outside the stub's lock, after the request is recorded."""
    requests: list[Recorded] = field(default_factory=list)
    exhausted: bool = False
    next_id: int = 1000


class GitHubStub:
    """``with GitHubStub() as gh: gh.url`` — the API base URL to put in ``GITHUB_API_URL``."""

    def __init__(self, state: StubState | None = None) -> None:
        self.state = state or StubState()
        self._lock = threading.Lock()
        handler = _handler(self)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.timeout = 10
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def __enter__(self) -> "GitHubStub":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    # --- helpers for tests ----------------------------------------------------------------------
    def add_comments(self, pr: int, n: int, *, body: str = "older comment {i}", user: str = "someone") -> None:
        for i in range(n):
            self._new_comment(pr, body.format(i=i), user)

    def _new_comment(self, pr: int, body: str, user: str = "github-actions[bot]") -> dict:
        self.state.next_id += 1
        c = {"id": self.state.next_id, "body": body, "user": {"login": user, "type": "Bot"},
             "html_url": f"https://github.invalid/{self.state.repo}/pull/{pr}#issuecomment-{self.state.next_id}"}
        self.state.comments.setdefault(pr, []).append(c)
        return c

    def writes(self) -> list[Recorded]:
        return [r for r in self.state.requests if r.method in ("POST", "PATCH")]


def _handler(stub: GitHubStub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 10

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_PATCH(self) -> None:
            self._serve("PATCH")

        def _serve(self, method: str) -> None:
            url = urllib.parse.urlsplit(self.path)
            query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            st = stub.state
            with stub._lock:
                st.requests.append(Recorded(method, url.path, query, dict(self.headers.items()), body))
                if len(st.requests) > st.max_requests:
                    st.exhausted = True
                    return self._send(503, {"message": "stub: request budget exhausted"})
                hostile = st.hostile
            if hostile is not None and hostile(self, method, url.path):
                return None
            with stub._lock:
                if st.fail_first:
                    status, headers = st.fail_first.pop(0)
                    return self._send(status, {"message": "stub: failing as told"}, headers)
                if method in ("POST", "PATCH") and st.write_status:
                    return self._send(st.write_status, {"message": "Resource not accessible by integration"})
                return self._route(method, url.path, query, body)

        def _route(self, method: str, path: str, query: dict, body) -> None:
            st = stub.state
            prefix = f"/repos/{st.repo}/"
            if not path.startswith(prefix):
                return self._send(404, {"message": "Not Found"})
            rest = path[len(prefix):].split("/")
            if rest[:1] == ["issues"] and len(rest) == 3 and rest[2] == "comments":
                pr = int(rest[1])
                if method == "GET":
                    return self._page(st.comments.get(pr, []), path, query)
                if method == "POST":
                    return self._send(201, stub._new_comment(pr, body["body"]))
            if rest[:2] == ["issues", "comments"] and len(rest) == 3 and method == "PATCH":
                cid = int(rest[2])
                for comments in st.comments.values():
                    for c in comments:
                        if c["id"] == cid:
                            c["body"] = body["body"]
                            return self._send(200, c)
                return self._send(404, {"message": "Not Found"})
            if rest[:1] == ["pulls"] and method == "GET":
                if len(rest) == 2:
                    pr = next((p for p in st.pulls if p["number"] == int(rest[1])), None)
                    return self._send(200, pr) if pr else self._send(404, {"message": "Not Found"})
                head = query.get("head")
                pulls = [p for p in st.pulls if head is None or p.get("head_label") == head]
                return self._page(pulls, path, query)
            return self._send(404, {"message": "Not Found"})

        def _page(self, items: list, path: str, query: dict) -> None:
            per_page = min(int(query.get("per_page", 30)), 100)
            page = int(query.get("page", 1))
            chunk = items[(page - 1) * per_page: page * per_page]
            headers = {}
            if page * per_page < len(items):
                nxt = urllib.parse.urlencode({**query, "page": page + 1})
                headers["Link"] = f'<{stub.url}{path}?{nxt}>; rel="next"'
            self._send(200, chunk, headers)

        def _send(self, status: int, payload, headers: dict | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)

    return Handler


# --- hostile answers ---------------------------------------------------------------------------
def redirect(location: Callable[[str], str], status: int = 307):
    """Answer every request with a redirect to ``location(path)``."""
    def answer(handler, method: str, path: str) -> bool:
        handler.send_response(status)
        handler.send_header("Location", location(path))
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return True
    return answer


def trickle(body: bytes = b'{"message": "' + b"x" * 10_000 + b'"}', *, every_s: float = 0.05,
            headers_too: bool = False, max_s: float = 20.0):
    """Answer 200 one byte every ``every_s`` seconds (the headers too with ``headers_too``),
    for at most ``max_s`` seconds or until the client hangs up."""
    def answer(handler, method: str, path: str) -> bool:
        head = (f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                .encode())
        data = body if not headers_too else head + body
        if not headers_too:
            handler.wfile.write(head)
        ends = time.monotonic() + max_s
        try:
            for i in range(len(data)):
                if time.monotonic() > ends:
                    break
                handler.wfile.write(data[i:i + 1])
                handler.wfile.flush()
                time.sleep(every_s)
        except OSError:  # the client hung up: what a deadline does
            pass
        handler.close_connection = True
        return True
    return answer


def flood(*, total: int = 256 << 20, declare: bool = False, chunk: int = 1 << 20):
    """Answer 200 with ``total`` bytes of a JSON string (``Content-Length`` only with
    ``declare``), stopping when the client hangs up."""
    def answer(handler, method: str, path: str) -> bool:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if declare:
            handler.send_header("Content-Length", str(total))
        else:
            handler.send_header("Connection", "close")
        handler.end_headers()
        block = b"[" + b'"' + b"x" * (chunk - 4) + b'",'
        try:
            for _ in range(total // chunk):
                handler.wfile.write(block)
        except OSError:
            pass
        handler.close_connection = True
        return True
    return answer
