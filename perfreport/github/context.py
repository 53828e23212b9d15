"""What a GitHub Actions job knows about itself: repository, pull request, run, API address, token.

Everything comes from the variables and files the runner sets (``GITHUB_REPOSITORY``,
``GITHUB_EVENT_PATH``, ``GITHUB_API_URL`` …), read once into a :class:`Context`, so the rest of
the package never touches ``os.environ`` and tests pass a plain mapping.

The token is held in a :class:`Secret`, whose ``repr`` and ``str`` never show it: a token must not
reach a log line, an error message or a file, even by accident (an f-string of the context, a
traceback's locals).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import GitHubError

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_SERVER_URL = "https://github.com"


class Secret:
    """A token that cannot be printed: ``str``/``repr``/``format`` give ``***``."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The token itself, for the Authorization header only."""
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __format__ = lambda self, *_: "***"  # noqa: E731


@dataclass(frozen=True)
class Context:
    """The job's view of GitHub. ``event`` is the parsed event payload (``{}`` when absent)."""

    repository: str = ""
    api_url: str = DEFAULT_API_URL
    server_url: str = DEFAULT_SERVER_URL
    event_name: str = ""
    event: Mapping = field(default_factory=dict)
    run_id: str = ""
    run_attempt: str = ""
    sha: str = ""
    token: Secret = field(default_factory=lambda: Secret(""), repr=False)
    summary_path: str = ""
    output_path: str = ""

    @property
    def run_url(self) -> str:
        """Link to the run that made the report: under ``workflow_run`` the triggering run (the
        PR's), else this one; "" outside Actions."""
        triggering = _get(self.event, ("workflow_run", "html_url"))
        if isinstance(triggering, str) and triggering.startswith(("https://", "http://")):
            return triggering
        if not (self.repository and self.run_id):
            return ""
        return f"{self.server_url.rstrip('/')}/{self.repository}/actions/runs/{self.run_id}"

    @property
    def owner_repo(self) -> tuple[str, str]:
        owner, _, repo = self.repository.partition("/")
        if not owner or not repo or "/" in repo:
            raise GitHubError(f"GITHUB_REPOSITORY is {self.repository!r}: expected OWNER/REPO (set it, or run "
                              "inside GitHub Actions)")
        return owner, repo

    def pr_number_from_event(self) -> int | None:
        """The pull request this event is about, where the payload says so directly:
        ``pull_request`` / ``pull_request_target`` (``pull_request.number``), ``issue_comment`` on
        a PR (``issue.number``), ``workflow_run`` with a same-repository PR
        (``workflow_run.pull_requests[0].number``; empty for fork PRs, see
        :func:`perfreport.github.comment.find_pull_request`)."""
        ev = self.event
        for path in (("pull_request", "number"), ("issue", "number"), ("number",)):
            value = _get(ev, path)
            if isinstance(value, int) and value > 0 and (path[0] != "issue" or "pull_request" in ev.get("issue", {})):
                return value
        runs = _get(ev, ("workflow_run", "pull_requests"))
        if isinstance(runs, list) and runs and isinstance(runs[0], Mapping):
            value = runs[0].get("number")
            if isinstance(value, int) and value > 0:
                return value
        return None


def _get(mapping: Mapping, path: tuple[str, ...]):
    value = mapping
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def from_environment(env: Mapping[str, str], *, token_env: str = "GITHUB_TOKEN") -> Context:
    """Read the job's context from ``env`` (``os.environ`` in the CLI). A missing or unreadable
    event file is an error only when it is named and cannot be read."""
    event: Mapping = {}
    event_path = env.get("GITHUB_EVENT_PATH", "")
    if event_path:
        try:
            event = json.loads(Path(event_path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise GitHubError(f"{event_path}: cannot read the GitHub event payload ({exc})") from None
        if not isinstance(event, Mapping):
            raise GitHubError(f"{event_path}: the GitHub event payload is not a JSON object")
    return Context(
        repository=env.get("GITHUB_REPOSITORY", ""),
        api_url=(env.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/"),
        server_url=(env.get("GITHUB_SERVER_URL") or DEFAULT_SERVER_URL).rstrip("/"),
        event_name=env.get("GITHUB_EVENT_NAME", ""),
        event=event,
        run_id=env.get("GITHUB_RUN_ID", ""),
        run_attempt=env.get("GITHUB_RUN_ATTEMPT", ""),
        sha=env.get("GITHUB_SHA", ""),
        token=Secret(env.get(token_env, "")),
        summary_path=env.get("GITHUB_STEP_SUMMARY", ""),
        output_path=env.get("GITHUB_OUTPUT", ""),
    )
