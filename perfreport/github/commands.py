"""``perfreport github comment|summary|annotate|outputs``: the CI steps of the GitHub Action.

Each reads a report folder written by ``perfreport compare`` (``report.json``) and the job's
environment; none computes anything about traces. They work in any CI that sets GitHub's
variables, not only in the Action (``action.yml`` calls them in order).

Exit codes: 0 done (also when a fork PR's read-only token cannot comment: a ``::warning`` says
why and how to fix it, because a missing comment must not fail a job whose verdict passed),
2 bad input or an API error that retrying did not cure.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..errors import GitHubError, printable

# The steps' own modules (HTTP client, templates) are imported by the step that runs: every
# other command builds this parser too, and should not pay for them.


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("github", help="GitHub Actions steps: PR comment, job summary, annotations, outputs",
                       description="Post a report folder to GitHub. Reads GITHUB_* variables as set by Actions.")
    gsub = p.add_subparsers(dest="github_command", required=True, metavar="ACTION")

    c = gsub.add_parser("comment", help="create or update the sticky PR comment")
    _report_argument(c)
    c.add_argument("--comment-id", default="", metavar="ID",
                   help="tells several perfreport comments on one PR apart (e.g. per matrix job)")
    c.add_argument("--artifact-url", default="", metavar="URL", help="link to the uploaded report artifact")
    c.add_argument("--artifact-name", default="", metavar="NAME", help="the artifact's name (for gh run download)")
    c.add_argument("--archive-url", default="", metavar="URL", help="the release archive's trend page")
    c.add_argument("--job-id", default="", metavar="ID", help="this job's id (job.check_run_id): link the job")
    c.add_argument("--install-from", default="", metavar="OWNER/REPO@REF",
                   help="the repository and ref (40-hex commit, tag or branch) perfreport was installed from: the "
                        "comment's \"Reproduce locally\" installs the same code (the Action passes its own); "
                        "a value that is not plain is left out")
    c.add_argument("--pr", type=int, default=None, metavar="N",
                   help="pull request number (default: from the event; checked against workflow_run's head)")
    c.add_argument("--token-env", default="GITHUB_TOKEN", metavar="NAME",
                   help="environment variable holding the token (default: GITHUB_TOKEN); never a token itself")
    c.add_argument("--only-on-alert", action="store_true",
                   help="create no new comment on a pass (an existing one is still updated)")
    c.set_defaults(run=cmd_comment)

    s = gsub.add_parser("summary", help="append the report to the job summary ($GITHUB_STEP_SUMMARY)")
    _report_argument(s)
    s.add_argument("--artifact-url", default="", metavar="URL", help="link to the uploaded report artifact")
    s.set_defaults(run=cmd_summary)

    a = gsub.add_parser("annotate", help="print ::error/::warning annotations for failed/warned findings")
    _report_argument(a)
    a.set_defaults(run=cmd_annotate)

    o = gsub.add_parser("outputs", help="write status, report-dir, markdown-file to $GITHUB_OUTPUT")
    _report_argument(o)
    o.add_argument("--set", action="append", default=[], metavar="NAME=VALUE", help="an extra output")
    o.set_defaults(run=cmd_outputs)


def _report_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--report", required=True, metavar="DIR", help="a report folder (with report.json)")


def cmd_comment(args: argparse.Namespace) -> int:
    from ..report.untrusted import consuming
    from . import comment as _comment
    from . import workflow
    from .api import Client
    from .context import from_environment
    from .links import install_source, links_for, refs_from_event

    ctx = from_environment(os.environ, token_env=args.token_env)
    document = _comment.read_document(args.report)
    if args.pr is None and ctx.pr_number_from_event() is None and "workflow_run" not in ctx.event:
        print(f"perfreport: not a pull request event ({ctx.event_name or 'no GITHUB_EVENT_PATH'}): no comment")
        return 0
    if not ctx.token:
        raise GitHubError(f"no token: set {args.token_env} (in the Action: the github-token input)")
    client = Client(ctx.api_url, ctx.token, deadline_s=deadline_from(os.environ), token_name=args.token_env)
    mark = _comment.marker(args.comment_id)
    if args.install_from and not install_source(args.install_from):
        print(f"perfreport: --install-from {printable(args.install_from[:120])!r} is not OWNER/REPO@REF (a 40-hex "
              "commit, tag or branch name): the comment names the version only", file=sys.stderr)
    try:
        pr, pull = _comment.locate_pull_request(client, ctx, args.pr)
        links = links_for(ctx, refs_from_event(ctx, pull), artifact_url=args.artifact_url,
                          artifact_name=args.artifact_name, archive_url=args.archive_url, job_id=args.job_id,
                          install_from=args.install_from)
        with consuming(_comment.report_path(args.report)):
            body = _comment.comment_body(document, args.comment_id, links=links, report_dir=args.report)
        if args.only_on_alert and document.get("status") in ("pass", None):
            if _comment.find_comment(client, ctx.repository, pr, mark) is None:
                print(f"perfreport: PR #{pr}: verdict passed and no earlier comment: none created (--only-on-alert)")
                return 0
        posted = _comment.post_comment(client, ctx, body, mark, pr)
    except GitHubError as exc:
        if exc.status == 403 and "rate limit" not in str(exc).lower():
            print(f"::warning title=perfreport comment::{workflow.escape_data(_comment.PERMISSION_HINT)}")
            print(f"perfreport: {printable(exc)}", file=sys.stderr)
            return 0
        raise
    except (TypeError, AttributeError, KeyError, ValueError, OverflowError) as exc:  # fields of an API answer
        raise GitHubError(f"{ctx.api_url}: an answer of an unexpected shape ({type(exc).__name__}); "
                          "nothing posted") from None
    print(f"perfreport: {posted.action} comment {posted.comment_id} on PR #{pr} ({posted.chars} characters, "
          f"{client.requests} API requests) {printable(posted.url)}".rstrip())
    return 0


def deadline_from(env) -> float:
    """Seconds all the API calls of a command may take (``PERFREPORT_GITHUB_DEADLINE_S``)."""
    from .api import DEADLINE_ENV, DEADLINE_S

    text = env.get(DEADLINE_ENV, "")
    if not text:
        return DEADLINE_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise GitHubError(f"{DEADLINE_ENV}={printable(text[:40])!r}: give seconds, more than 0 and at most 3600")
    return value


def cmd_summary(args: argparse.Namespace) -> int:
    from ..report.untrusted import consuming
    from . import comment as _comment
    from . import workflow
    from .context import from_environment

    ctx = from_environment(os.environ)
    document = _comment.read_document(args.report)
    if not ctx.summary_path:
        raise GitHubError("GITHUB_STEP_SUMMARY is not set (run inside a GitHub Actions step)")
    path = Path(ctx.summary_path)
    used = workflow.file_size(path, "GITHUB_STEP_SUMMARY")
    with consuming(_comment.report_path(args.report)):
        text = workflow.summary_markdown(document, used_bytes=used, artifact_url=args.artifact_url)
    written = workflow.append_summary(path, text)
    print(f"perfreport: wrote {written} bytes to the job summary")
    return 0


def cmd_annotate(args: argparse.Namespace) -> int:
    from ..report.untrusted import consuming
    from . import comment as _comment
    from . import workflow

    document = _comment.read_document(args.report)
    with consuming(_comment.report_path(args.report)):
        lines = workflow.annotation_lines(document)
    for line in lines:
        print(line)
    return 0


def cmd_outputs(args: argparse.Namespace) -> int:
    from ..report.untrusted import consuming
    from . import comment as _comment
    from . import workflow
    from .context import from_environment

    ctx = from_environment(os.environ)
    document = _comment.read_document(args.report)
    with consuming(_comment.report_path(args.report)):
        values = workflow.report_outputs(document, args.report)
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            raise GitHubError(f"--set {item!r}: expected NAME=VALUE")
        values[name] = value
    if ctx.output_path:
        workflow.write_outputs(ctx.output_path, values)
    else:
        sys.stdout.write(workflow.output_text(values))
    return 0
