"""A small GitHub REST client (standard library only): JSON requests, pagination, bounded retries.

Why not a client library: perfreport needs four endpoints, and a CI step must start fast and
install nothing more. Why retries: GitHub answers a busy or abused API with 5xx, or with a
*secondary rate limit* (403 or 429 carrying ``retry-after``, or ``x-ratelimit-remaining: 0`` with
``x-ratelimit-reset``) that says exactly when to come back. Those are retried, waiting what the
server asks (with exponential backoff where it asks nothing), but never more than
``max_attempts`` requests and ``max_wait_s`` seconds of waiting in all: a CI step must end.

Every other error status is raised at once as :class:`~perfreport.errors.GitHubError` with the
status and GitHub's own message. The token goes into the ``Authorization`` header and nowhere
else: not into messages, not into logs, and never to a host other than the API's (a
pagination ``Link`` that points elsewhere is not followed).
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from .. import __version__
from ..errors import GitHubError
from .context import Secret

log = logging.getLogger("perfreport.github")

PER_PAGE = 100
"""The largest page GitHub serves; fewer requests for PRs with long histories."""
MAX_PAGES = 100
"""Pages read at most when listing (10,000 comments): the listing must end."""
TIMEOUT_S = 30.0
"""Per request: a stalled connection must not hold the job."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: object


class Client:
    """GitHub REST API at ``api_url`` with ``token``. ``sleep`` is injectable for tests."""

    def __init__(self, api_url: str, token: Secret, *, max_attempts: int = 5, max_wait_s: float = 60.0,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time) -> None:
        self.api_url = api_url.rstrip("/")
        self._token = token
        self.max_attempts = max_attempts
        self.max_wait_s = max_wait_s
        self._sleep = sleep
        self._clock = clock
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
                if not nxt.startswith(self.api_url + "/"):
                    raise GitHubError(f"GitHub sent a next-page link outside {self.api_url}; not followed")
                url = nxt
            elif len(items) >= PER_PAGE:
                url = self._url(path, {**params, "page": page + 1})
            else:
                return
        log.warning("stopped listing %s after %d pages", path, MAX_PAGES)

    # --- one request, with retries --------------------------------------------------------------
    def request(self, method: str, path: str, *, params: dict | None = None, payload: dict | None = None) -> Response:
        url = path if path.startswith(self.api_url + "/") else self._url(path, params)
        data = None if payload is None else json.dumps(payload).encode("utf-8")
        waited = 0.0
        for attempt in range(1, self.max_attempts + 1):
            self.requests += 1
            response, reason = self._send(method, url, data)
            if response is not None and response.status < 400:
                return response
            delay = self._retry_delay(response, attempt)
            where = f"{method} {_path_of(url)}"
            if delay is None or attempt == self.max_attempts or waited + delay > self.max_wait_s:
                raise self._error(where, response, reason, attempt, retryable=delay is not None)
            log.warning("%s: %s; retrying in %.0f s (attempt %d of %d)", where,
                        reason if response is None else f"HTTP {response.status}", delay, attempt + 1,
                        self.max_attempts)
            self._sleep(delay)
            waited += delay
        raise AssertionError("unreachable")  # pragma: no cover

    def _send(self, method: str, url: str, data: bytes | None) -> tuple[Response | None, str]:
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": f"perfreport/{__version__}",
            **({"Authorization": f"Bearer {self._token.reveal()}"} if self._token else {}),
            **({"Content-Type": "application/json"} if data is not None else {}),
        })
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310 (https/http API only)
                return Response(resp.status, _headers(resp.headers), _json(resp.read())), ""
        except urllib.error.HTTPError as exc:
            body = exc.read() if exc.fp is not None else b""
            return Response(exc.code, _headers(exc.headers), _json(body)), ""
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            return None, f"no response ({reason})"

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
                return max(0.0, float(h["retry-after"]))
            except ValueError:
                return backoff
        if h.get("x-ratelimit-remaining") == "0":
            try:
                return max(0.0, float(h.get("x-ratelimit-reset", "")) - self._clock()) + 1.0
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
            return GitHubError(f"{where}: {reason}{tries}", 0)
        message = _message(response.body)
        detail = f": {message}" if message else ""
        return GitHubError(f"{where}: HTTP {response.status}{detail}{tries}", response.status)

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
    except ValueError:
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
