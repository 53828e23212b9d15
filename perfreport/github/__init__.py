"""GitHub integration, a thin shell over report folders: the sticky PR comment, the job summary,
annotations and step outputs (``perfreport github …``, called by ``action.yml``).

    context    the job's environment (repository, PR, run, API URL, token held as a Secret)
    api        a small REST client: pagination, bounded retries on 5xx and rate limits
    comment    find-or-create the PR comment by its hidden marker; the body within 65,536 chars
    workflow   job summary (≤ 1 MiB), ::error/::warning annotations (≤ 10 each), $GITHUB_OUTPUT
    commands   the CLI subcommands
"""
