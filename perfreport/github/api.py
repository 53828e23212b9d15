"""A small GitHub REST client (standard library only): JSON requests, pagination, bounded retries.

Why not a client library: perfreport needs four endpoints, and a CI step must start fast and
install nothing more. Why retries: GitHub answers a busy or abused API with 5xx, or with a
*secondary rate limit* (403 or 429 carrying ``retry-after``, or ``x-ratelimit-remaining: 0`` with
``x-ratelimit-reset``) that says exactly when to come back. Those are retried, waiting what the
server asks (with exponential backoff where it asks nothing), but never more than
``max_attempts`` requests and ``max_wait_s`` seconds of waiting in all: a CI step must end.

Every other error status is raised at once as :class:`~perfreport.errors.GitHubError` with the
status and GitHub's own message.

**The token stays home.** It goes into the ``Authorization`` header of requests to the API's
own origin (scheme, host and port of ``GITHUB_API_URL``) and nowhere else: a redirect is
followed only within that origin (at most :data:`MAX_REDIRECTS`), a pagination ``Link`` only
under the API URL; anything else is refused before a byte is sent. It is checked before use
(:func:`check_token`: printable ASCII, no whitespace), so it can never break a header or end up
in an exception's text, and any answer that echoes it is shown with ``***`` in its place.

**Every call ends.** A connection must open within :data:`CONNECT_TIMEOUT_S`, each read must
bring bytes within :data:`READ_TIMEOUT_S`, and a whole request (headers and body, however
slowly trickled) is cut at :data:`REQUEST_DEADLINE_S` by a watchdog that shuts its socket. All
the requests and retry waits of one client end within ``deadline_s`` of its first request
(:data:`DEADLINE_S`, or ``PERFREPORT_GITHUB_DEADLINE_S``). An answer is read to at most :data:`MAX_BODY_BYTES`: a
flood is refused, never held whole in memory.
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .. import __version__
from ..errors import GitHubError, printable
from .context import Secret
from .transport import Unusable, Watchdog, read_capped, watched_opener

log = logging.getLogger("perfreport.github")

PER_PAGE = 100
"""The largest page GitHub serves; fewer requests for PRs with long histories."""
MAX_PAGES = 100
"""Pages read at most when listing (10,000 comments): the listing must end."""
CONNECT_TIMEOUT_S = 10.0
"""To open a connection (and finish the TLS handshake)."""
READ_TIMEOUT_S = 30.0
"""Longest silence within an answer: a stalled connection must not hold the job."""
REQUEST_DEADLINE_S = 60.0
"""One request, from connecting to the last byte of the answer, however it trickles."""
DEADLINE_S = 180.0
"""Every request and retry wait of one command: the step ends within about three minutes."""
DEADLINE_ENV = "PERFREPORT_GITHUB_DEADLINE_S"
"""Environment variable that sets ``deadline_s`` for the CLI (seconds, at most 3,600)."""
MAX_BODY_BYTES = 32 << 20
"""The largest answer read: a page of 100 comments of 65,536 characters is ~7 MB of JSON."""
MAX_REDIRECTS = 5
"""Same-origin redirects followed for one request."""
MAX_TOKEN_CHARS = 4096
_TOKEN = re.compile(r"[\x21-\x7e]+")
"""What a token may hold: printable ASCII without spaces (GitHub's are ``[A-Za-z0-9_]``)."""


def check_token(token: Secret, name: str = "the token") -> None:
    """Refuse a token that cannot go into an HTTP header as is, saying why but never showing it
    (a secret pasted with a trailing newline, a non-ASCII character from a copy)."""
    value = token.reveal()
    if not value or _TOKEN.fullmatch(value) and len(value) <= MAX_TOKEN_CHARS:
        return
    if len(value) > MAX_TOKEN_CHARS:
        why = f"it is longer than {MAX_TOKEN_CHARS:,} characters"
    elif "\n" in value or "\r" in value:
        why = "it holds a line break (a secret saved with a trailing newline?)"
    elif any(c.isspace() for c in value):
        why = "it holds a space or another blank"
    elif any(ord(c) > 0x7E for c in value):
        why = "it holds a character outside printable ASCII"
    else:
        why = "it holds a control character"
    raise GitHubError(f"{name}: not a usable API token: {why}; fix the secret (the token is not shown)")


def check_api_url(url: str) -> tuple[str, str, int]:
    """The origin (scheme, host, port) of an API base URL; only plain http(s) URLs are used."""
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in ("https", "http") or not parts.hostname or parts.query \
            or parts.fragment:
        raise GitHubError(f"GITHUB_API_URL {printable(url[:200])!r} is not an http(s) URL of an API")
    if parts.username is not None or parts.password is not None:
        raise GitHubError("GITHUB_API_URL holds credentials (user:password@); give the token in the "
                          "token variable instead")
    return parts.scheme, parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80)


def _origin(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.scheme.lower(), parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80)


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: object


class Client:
    """GitHub REST API at ``api_url`` with ``token``. ``sleep`` and ``clock`` are injectable for
    tests; the timeouts and caps default to the module's constants (see the module docstring)."""

    def __init__(self, api_url: str, token: Secret, *, max_attempts: int = 5, max_wait_s: float = 60.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time,
                 deadline_s: float = DEADLINE_S, request_deadline_s: float = REQUEST_DEADLINE_S,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S, read_timeout_s: float = READ_TIMEOUT_S,
                 max_body_bytes: int = MAX_BODY_BYTES, token_name: str = "the token") -> None:
        self.api_url = api_url.rstrip("/")
        self._origin = check_api_url(self.api_url)
        check_token(token, token_name)
        self._token = token
        self.max_attempts = max_attempts
        self.max_wait_s = max_wait_s
        self._sleep = sleep
        self._clock = clock
        self.deadline_s = deadline_s
        self.request_deadline_s = request_deadline_s
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.max_body_bytes = max_body_bytes
        self._ends_at: float | None = None  # set by the first request: rendering is not API time
        self.requests = 0

    # --- public verbs ---------------------------------------------------------------------------
    def get(self, path: str, params: dict | None = None) -> object:
        return self.request("GET", path, params=params).body

    def post(self, path: str, payload: dict) -> object:
        return self.request("POST", path, payload=payload).body

    def patch(self, path: str, payload: dict) -> object:
        return self.request("PATCH", path, payload=payload).body

    def paginate(self, path: str, params: dict | None = None) -> Iterator[dict]:
        """Every item of a list endpoint, page by page (``per_page=100``), following ``Link:
        rel="next"`` when the server sends one and otherwise asking for the next page until a
        short page; at most :data:`MAX_PAGES` pages."""
        params = {**(params or {}), "per_page": PER_PAGE}
        url: str | None = self._url(path, {**params, "page": 1})
        for page in range(1, MAX_PAGES + 1):
            response = self.request("GET", url)
            items = response.body if isinstance(response.body, list) else []
            yield from (i for i in items if isinstance(i, dict))
            nxt = _next_link(response.headers.get("link", ""))
            if nxt is not None:
                if not nxt.startswith(self.api_url + "/") or _origin(nxt) != self._origin:
                    raise GitHubError(f"GitHub sent a next-page link outside {self.api_url}; not followed")
                url = nxt
            elif len(items) >= PER_PAGE:
                url = self._url(path, {**params, "page": page + 1})
            else:
                return
        log.warning("stopped listing %s after %d pages", printable(path), MAX_PAGES)

    # --- one request, with retries and same-origin redirects ------------------------------------
    def request(self, method: str, path: str, *, params: dict | None = None, payload: dict | None = None) -> Response:
        url = path if path.startswith(self.api_url + "/") else self._url(path, params)
        data = None if payload is None else self._redact_bytes(json.dumps(payload).encode("utf-8"))
        where = f"{method} {printable(_path_of(url))}"
        waited = 0.0
        redirects = 0
        attempt = 0
        while True:
            attempt += 1
            self.requests += 1
            response, reason = self._send(method, url, data)
            if response is not None and response.status in (301, 302, 303, 307, 308):
                url, method, data = self._redirect(where, url, method, data, response, redirects)
                redirects += 1
                attempt -= 1  # a redirect is not a failed attempt
                continue
            if response is not None and response.status < 400:
                return response
            delay = self._retry_delay(response, attempt)
            if delay is None or attempt == self.max_attempts or waited + delay > self.max_wait_s \
                    or delay >= self._left():  # waiting would break a bound: give up now
                raise self._error(where, response, reason, attempt, retryable=delay is not None)
            log.warning("%s: %s; retrying in %.0f s (attempt %d of %d)", where,
                        reason if response is None else f"HTTP {response.status}", delay, attempt + 1,
                        self.max_attempts)
            self._sleep(delay)
            waited += delay

    def _redirect(self, where: str, url: str, method: str, data: bytes | None, response: Response,
                  redirects: int) -> tuple[str, str, bytes | None]:
        """The next request of a redirect, only within the API's origin: the token is never sent
        to another scheme, host or port (``localhost`` is not ``127.0.0.1``)."""
        location = response.headers.get("location", "")
        target = urllib.parse.urljoin(url, location)
        origin = _origin(target)
        if not location or origin is None:
            raise GitHubError(f"{where}: HTTP {response.status} redirect without a usable Location", response.status)
        if origin != self._origin:
            scheme, host, port = origin
            raise GitHubError(f"{where}: HTTP {response.status} redirect to another origin "
                              f"({printable(f'{scheme}://{host}:{port}')[:200]}); not followed: the token is sent "
                              f"only to {self.api_url}", response.status)
        if redirects >= MAX_REDIRECTS:
            raise GitHubError(f"{where}: more than {MAX_REDIRECTS} redirects; not followed", response.status)
        if response.status == 303:  # "see other": fetch it; GitHub repeats the others verbatim
            return target, "GET", None
        return target, method, data

    def _send(self, method: str, url: str, data: bytes | None) -> tuple[Response | None, str]:
        """One HTTP exchange within the deadlines: (answer, "") or (None, why there is none)."""
        left = self._left()
        if left <= 0:
            return None, f"no time left (the {self.deadline_s:g} s deadline of the GitHub steps passed)"
        limit = min(self.request_deadline_s, left)
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": f"perfreport/{__version__}",
            **({"Content-Type": "application/json"} if data is not None else {}),
        }
        if self._token and _origin(url) == self._origin:  # (every URL here is; checked once more)
            headers["Authorization"] = f"Bearer {self._token.reveal()}"
        watch = Watchdog(limit)
        opener = watched_opener(watch, self.connect_timeout_s)
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        watch.start()
        try:
            try:
                with opener.open(req, timeout=self.read_timeout_s) as resp:  # noqa: S310 (http(s) API only)
                    raw = read_capped(resp, self.max_body_bytes)
                    status, got = resp.status, resp.headers
            except urllib.error.HTTPError as exc:
                try:
                    raw = read_capped(exc, 64 << 10) if exc.fp is not None else b""
                finally:
                    exc.close()
                status, got = exc.code, exc.headers
            if watch.fired:
                raise Unusable("cut")
            return Response(status, _headers(got), _json(self._redact_bytes(raw))), ""
        except Unusable as exc:
            if watch.fired:
                return None, f"no complete answer within {limit:g} s"
            raise GitHubError(f"{method} {printable(_path_of(url))}: {exc}") from None  # a flood: not asked again
        except (http.client.InvalidURL, UnicodeError) as exc:  # ours to fix, not the network's: final
            raise GitHubError(f"{method} {printable(_path_of(url))[:200]}: cannot send the request "
                              f"({self._redact(printable(str(exc)))[:200]})") from None
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
            if watch.fired:
                return None, f"no complete answer within {limit:g} s"
            reason = getattr(exc, "reason", None) or exc
            if isinstance(reason, TimeoutError):  # (socket.timeout is TimeoutError since Python 3.10)
                return None, f"no answer (silent for {self.read_timeout_s:g} s)"
            return None, f"no response ({self._redact(printable(str(reason)))[:200]})"
        finally:
            watch.stop()

    def _left(self) -> float:
        if self._ends_at is None:
            self._ends_at = time.monotonic() + self.deadline_s
        return self._ends_at - time.monotonic()

    def _redact(self, text: str) -> str:
        token = self._token.reveal()
        return text.replace(token, "***") if token else text

    def _redact_bytes(self, data: bytes) -> bytes:
        token = self._token.reveal().encode("ascii")
        return data.replace(token, b"***") if token else data

    def _retry_delay(self, response: Response | None, attempt: int) -> float | None:
        """Seconds to wait before the next try, or None when this failure is final."""
        backoff = float(2 ** (attempt - 1))
        if response is None or response.status >= 500:
            return backoff
        if response.status not in (403, 429):
            return None
        h = response.headers
        if "retry-after" in h:
            try:
                return min(max(0.0, float(h["retry-after"])), 1e9)
            except ValueError:
                return backoff
        if h.get("x-ratelimit-remaining") == "0":
            try:
                return min(max(0.0, float(h.get("x-ratelimit-reset", "")) - self._clock()) + 1.0, 1e9)
            except ValueError:
                return backoff
        if response.status == 429:
            return backoff
        message = str(_message(response.body)).lower()
        return backoff if "secondary rate limit" in message else None

    def _error(self, where: str, response: Response | None, reason: str, attempts: int, *,
               retryable: bool) -> GitHubError:
        tries = f" after {attempts} attempt(s)" if retryable else ""
        if response is None:
            return GitHubError(self._redact(f"{where}: {reason}{tries}"), 0)
        message = printable(_message(response.body))
        detail = f": {message}" if message else ""
        return GitHubError(self._redact(f"{where}: HTTP {response.status}{detail}{tries}"), response.status)

    def _url(self, path: str, params: dict | None) -> str:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        return f"{self.api_url}/{path.lstrip('/')}{query}"


def _headers(headers) -> dict[str, str]:
    return {k.lower(): v for k, v in (headers.items() if headers is not None else [])}


def _json(raw: bytes) -> object:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, or nested past what a parser should follow
        return raw[:200].decode("utf-8", "replace")


def _message(body: object) -> str:
    if isinstance(body, dict):
        return str(body.get("message", ""))[:300]
    return str(body or "")[:300]


def _path_of(url: str) -> str:
    return urllib.parse.urlsplit(url).path


def _next_link(link: str) -> str | None:
    """The ``rel="next"`` URL of a ``Link`` header (RFC 8288 as GitHub writes it)."""
    for part in link.split(","):
        section = part.split(";")
        if len(section) < 2:
            continue
        url = section[0].strip()
        if url.startswith("<") and url.endswith(">") and any(s.strip() == 'rel="next"' for s in section[1:]):
            return url[1:-1]
    return None
