"""The sticky pull-request comment: one comment per PR (and per ``--comment-id``), updated in place.

The comment is found again by a hidden marker at the start of its body,
``<!-- perfreport:ID -->``, among **all** the PR's comments (listed 100 a page, every page: a
busy PR has hundreds). Found: PATCH it; not found, or not ours to edit: POST a new one.

The body is the report's Markdown view rendered afresh from ``report.json`` (never a Markdown
file taken as is: in the fork-safe flow the report folder comes from an untrusted run, and
rendering escapes every string from a trace). Its second line names the commits compared and
links the run, the report artifact and the release archive; a folded block at the end gives the
commands that reproduce the report locally and lists the step traces (:mod:`.links`). It is
kept under GitHub's 65,536-character limit by the renderer's own budget (least important
sections cut first).

Which PR: the event payload says it for ``pull_request`` and same-repository ``workflow_run``
events. A ``workflow_run`` from a fork lists no PR, so :func:`find_pull_request` asks the API
for the open PR whose head is the run's head commit — the PR number is never taken from the
untrusted artifact, and ``--pr`` is checked against the run's head commit the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import GitHubError, PerfreportError
from ..report.untrusted import read_report
from .api import Client
from .context import Context
from .links import CommentLinks, context_line, reproduce_block

MAX_BODY = 65_536
"""GitHub's limit for an issue or PR comment body (HTTP 422 "Body is too long" beyond)."""
_MARGIN = 512
"""Characters kept free for the marker and footer, and for counting differences (GitHub counts
UTF-16 units; an emoji outside the BMP is two)."""
_ID = re.compile(r"^[A-Za-z0-9._-]{0,64}$")
_URL = re.compile(r"^https?://[^\s()<>\[\]\"'`]+$")
PERMISSION_HINT = (
    "perfreport could not write the PR comment: the token lacks 'permissions: pull-requests: write'. "
    "Fork PRs always get a read-only token: comment from a workflow_run job instead "
    "(examples/workflows/perfreport-comment.yml)."
)


@dataclass(frozen=True)
class Posted:
    action: str        # "created" | "updated"
    comment_id: int
    url: str
    chars: int


def marker(comment_id: str) -> str:
    """The hidden marker that finds this comment again; ``comment_id`` tells matrix jobs apart."""
    if not _ID.match(comment_id or ""):
        raise GitHubError(f"--comment-id {comment_id!r}: use up to 64 letters, digits, '.', '_' or '-'")
    return f"<!-- perfreport:{comment_id or 'default'} -->"


def safe_url(url: str, what: str) -> str:
    """``url`` if it is a plain http(s) URL that cannot break out of a Markdown link, else an error."""
    if url and not _URL.match(url):
        raise GitHubError(f"{what} {url[:80]!r} is not a plain http(s) URL")
    return url


def report_path(report_dir: str | Path) -> Path:
    """The document of a report folder: ``report.json`` (or an analysis's ``summary.json``)."""
    path = Path(report_dir) / "report.json"
    if not path.is_file():
        alt = Path(report_dir) / "summary.json"
        if alt.is_file():
            return alt
        raise PerfreportError(f"{report_dir}: no report.json in the report folder (run perfreport compare "
                              "--out DIR first)")
    return path


def read_document(report_dir: str | Path) -> dict:
    """The document of a report folder (a comparison or an analysis), its shape checked: in the
    fork-safe flow it is an untrusted artifact (:mod:`perfreport.report.untrusted`)."""
    path = report_path(report_dir)
    document = read_report(path, error=PerfreportError)
    if "kind" not in document and "ranks" not in document:
        raise PerfreportError(f"{path}: not a perfreport report document")
    return document


def utf16_len(text: str) -> int:
    """Length as GitHub counts it (UTF-16 code units)."""
    return len(text.encode("utf-16-le")) // 2


def comment_body(document: dict, comment_id: str, *, artifact_url: str = "", run_url: str = "",
                 links: CommentLinks | None = None, report_dir: str | Path | None = None,
                 limit: int = MAX_BODY) -> str:
    """The comment: marker, the verdict line, line 2 (the commits compared, the baseline's
    commit, links to the run, artifact and release trends), the report's Markdown, and the folded
    "Reproduce locally" block; at most ``limit`` units. Without ``links`` only ``artifact_url``
    and ``run_url`` are linked."""
    from ..report import build_report
    from ..report.markdown import render_markdown

    if links is None:
        links = CommentLinks(run_url=run_url, artifact_url=artifact_url)
    safe_url(links.artifact_url, "--artifact-url")
    safe_url(links.run_url, "run URL")
    safe_url(links.archive_url, "--archive-url")
    report = build_report(document)
    head = marker(comment_id) + "\n"
    line2 = context_line(document, links)
    folded = reproduce_block(document, links, report_dir)
    budget = limit - len(head) - len(line2) - len(folded) - _MARGIN
    while True:
        text = render_markdown(report, max_chars=budget, links=())  # no relative links in a PR
        first, _, rest = text.partition("\n")
        body = f"{head}{first}\n{line2}\n\n{rest.strip()}\n\n{folded}\n"
        if utf16_len(body) <= limit or budget < 2_000:
            break
        budget -= utf16_len(body) - limit + _MARGIN  # emoji-heavy text: shrink by the excess
    return body if utf16_len(body) <= limit else body[: limit // 2]


def find_comment(client: Client, repo: str, pr: int, mark: str) -> dict | None:
    """The most recent comment on the PR whose body starts with ``mark``, over every page."""
    found = None
    for item in client.paginate(f"repos/{repo}/issues/{pr}/comments"):
        body = item.get("body") or ""
        if isinstance(body, str) and body.lstrip().startswith(mark):
            found = item
    return found


def find_pull_request(client: Client, ctx: Context, pr: int | None) -> int:
    """The PR to comment on. ``pr`` (``--pr``) or the event's own; under ``workflow_run`` the PR
    must have the run's head commit as its head, and a fork PR is looked up by that commit."""
    return locate_pull_request(client, ctx, pr)[0]


def locate_pull_request(client: Client, ctx: Context, pr: int | None) -> tuple[int, dict | None]:
    """:func:`find_pull_request`, with the PR object when the lookup fetched one (its head and
    base commits name what was compared; no request is made for it alone)."""
    run = ctx.event.get("workflow_run") if isinstance(ctx.event.get("workflow_run"), dict) else None
    number = pr or ctx.pr_number_from_event()
    if run is None:
        if number is None:
            raise GitHubError("no pull request in this event (run on pull_request or workflow_run, or pass --pr)")
        return number, None
    head_sha = str(run.get("head_sha", ""))
    if number is not None:
        got = client.get(f"repos/{ctx.repository}/pulls/{number}")
        if not isinstance(got, dict) or (got.get("head") or {}).get("sha") != head_sha:
            raise GitHubError(f"PR #{number}'s head is not the workflow run's head commit {head_sha[:12]}: "
                              "not commenting")
        return number, got
    owner = ((run.get("head_repository") or {}).get("owner") or {}).get("login", "")
    branch = str(run.get("head_branch", ""))
    params = {"state": "open", **({"head": f"{owner}:{branch}"} if owner and branch else {})}
    for item in client.paginate(f"repos/{ctx.repository}/pulls", params):
        if (item.get("head") or {}).get("sha") == head_sha and isinstance(item.get("number"), int):
            return item["number"], item
    raise GitHubError(f"no open pull request has head commit {head_sha[:12] or '(unknown)'}")


def post_comment(client: Client, ctx: Context, body: str, mark: str, pr: int) -> Posted:
    """Update this PR's comment carrying ``mark``, or create one."""
    repo = ctx.repository
    existing = find_comment(client, repo, pr, mark)
    if existing is not None:
        try:
            got = client.patch(f"repos/{repo}/issues/comments/{existing['id']}", {"body": body})
            return Posted("updated", int(existing["id"]), str((got or {}).get("html_url", "")), utf16_len(body))
        except GitHubError as exc:
            if exc.status not in (403, 404):  # 403/404: not ours to edit (or gone): post our own; a
                raise                             # token that cannot write fails again there, as 403
    got = client.post(f"repos/{repo}/issues/{pr}/comments", {"body": body})
    if not isinstance(got, dict) or "id" not in got:
        raise GitHubError(f"POST repos/{repo}/issues/{pr}/comments: unexpected answer")
    return Posted("created", int(got["id"]), str(got.get("html_url", "")), utf16_len(body))

