"""perfreport.github: the REST client's retries and pagination, the sticky comment, the job
summary, annotations and outputs — against a GitHub API stand-in on 127.0.0.1."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from pathlib import Path

import pytest

from perfreport.errors import GitHubError
from perfreport.github import comment, workflow
from perfreport.github.api import Client
from perfreport.github.context import Context, Secret, from_environment
from tests.github_stub import GitHubStub

from .conftest import cli_in_process, demo_comparison_json

REPO = Path(__file__).resolve().parent.parent
TOKEN = "ghp_UNITTESTTOKEN_do_not_print_42"


@pytest.fixture(scope="module")
def demo_document(tmp_path_factory) -> dict:
    """The demo comparison's report.json (FAIL)."""
    return json.loads(demo_comparison_json())


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory, demo_document) -> Path:
    folder = tmp_path_factory.mktemp("report")
    (folder / "report.json").write_text(json.dumps(demo_document))
    return folder


def _client(gh: GitHubStub, **kw) -> tuple[Client, list[float]]:
    sleeps: list[float] = []
    return Client(gh.url, Secret(TOKEN), sleep=sleeps.append, **kw), sleeps


# --- the client --------------------------------------------------------------------------------
def test_paginates_every_page_with_per_page_100():
    with GitHubStub() as gh:
        gh.add_comments(5, 250)
        client, _ = _client(gh)
        items = list(client.paginate(f"repos/{gh.state.repo}/issues/5/comments"))
    assert len(items) == 250 and items[-1]["body"] == "older comment 249"
    assert [r.query["page"] for r in gh.state.requests] == ["1", "2", "3"]
    assert {r.query["per_page"] for r in gh.state.requests} == {"100"}


def test_retries_5xx_and_rate_limits_then_succeeds():
    with GitHubStub() as gh:
        gh.state.fail_first = [(502, {}), (429, {"retry-after": "3"}),
                               (403, {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1000010"})]
        sleeps: list[float] = []
        client = Client(gh.url, Secret(TOKEN), sleep=sleeps.append, clock=lambda: 1_000_000.0)
        assert client.get(f"repos/{gh.state.repo}/issues/1/comments") == []
    assert sleeps == [1.0, 3.0, 11.0] and client.requests == 4


def test_retries_are_bounded_in_attempts_and_waiting():
    with GitHubStub() as gh:
        gh.state.fail_first = [(500, {})] * 10
        client, sleeps = _client(gh, max_attempts=3)
        with pytest.raises(GitHubError) as err:
            client.get("repos/octo/widgets/issues/1/comments")
        assert err.value.status == 500 and "after 3 attempt(s)" in str(err.value)
        assert len(gh.state.requests) == 3 and sleeps == [1.0, 2.0]
        gh.state.fail_first = [(429, {"retry-after": "600"})]
        client, sleeps = _client(gh, max_wait_s=60)
        with pytest.raises(GitHubError):
            client.get("repos/octo/widgets/issues/1/comments")
        assert sleeps == []  # waiting 600 s would break the bound: give up at once


def test_plain_403_is_not_retried_and_the_token_is_never_in_messages():
    with GitHubStub() as gh:
        gh.state.write_status = 403
        client, sleeps = _client(gh)
        with pytest.raises(GitHubError) as err:
            client.post("repos/octo/widgets/issues/1/comments", {"body": "x"})
    assert err.value.status == 403 and sleeps == [] and TOKEN not in str(err.value)
    assert "Secret('***')" == repr(Secret(TOKEN)) and f"{Secret(TOKEN)}" == "***"


def test_a_next_link_to_another_host_is_not_followed():
    with GitHubStub() as gh:
        gh.add_comments(3, 150)
        client = Client(gh.url.replace("127.0.0.1", "localhost"), Secret(TOKEN), sleep=lambda s: None)
        with pytest.raises(GitHubError, match="not followed"):
            list(client.paginate("repos/octo/widgets/issues/3/comments"))


def test_no_server_is_an_error_after_bounded_retries():
    client = Client("http://127.0.0.1:9", Secret(TOKEN), max_attempts=2, sleep=lambda s: None)
    with pytest.raises(GitHubError, match="no response"):
        client.get("repos/o/r/issues/1/comments")


# --- context ---------------------------------------------------------------------------------------
def test_context_reads_the_event_and_hides_the_token(tmp_path):
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 12}}))
    ctx = from_environment({"GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "5",
                            "GITHUB_API_URL": "https://ghe.example/api/v3/", "MY_TOKEN": TOKEN}, token_env="MY_TOKEN")
    assert ctx.pr_number_from_event() == 12 and ctx.api_url == "https://ghe.example/api/v3"
    assert ctx.run_url == "https://github.com/o/r/actions/runs/5" and ctx.token.reveal() == TOKEN
    assert TOKEN not in repr(ctx) and TOKEN not in str(ctx)
    event.write_text("{not json")
    with pytest.raises(GitHubError, match="event payload"):
        from_environment({"GITHUB_EVENT_PATH": str(event)})


# --- the comment ---------------------------------------------------------------------------------
def test_comment_body_has_marker_links_and_verdict(demo_document):
    body = comment.comment_body(demo_document, "gpu-a100", artifact_url="https://github.com/o/r/actions/runs/1/artifacts/2",
                                run_url="https://github.com/o/r/actions/runs/1")
    first_lines = body.split("\n")[:3]
    assert first_lines[0] == "<!-- perfreport:gpu-a100 -->"
    assert any("FAIL" in line and "step time" in line for line in first_lines[1:])
    assert "(https://github.com/o/r/actions/runs/1/artifacts/2)" in body and len(body) <= 65_536


def test_comment_body_stays_under_65536_for_thousands_of_findings(demo_document):
    doc = copy.deepcopy(demo_document)
    template = next(c for c in doc["checks"] if c["family"] == "structural")
    for i in range(3000):
        c = copy.deepcopy(template)
        c.update(status="fail", rank=i, id=f"structural.kernels[added: k{i}]@rank{i}", subject=f"added: 🚀{'x' * 300}{i}",
                 message=f"kernel {i} | added @team <script>alert(1)</script> 🚀")
        doc["checks"].append(c)
    body = comment.comment_body(doc, "")
    assert comment.utf16_len(body) <= 65_536
    assert "<script>" not in body and "@team" not in body.replace("@\u200bteam", "")


def test_urls_that_could_break_markdown_are_refused(demo_document):
    with pytest.raises(GitHubError):
        comment.comment_body(demo_document, "", artifact_url="javascript:alert(1)")
    with pytest.raises(GitHubError):
        comment.comment_body(demo_document, "", artifact_url="https://x/a) [evil](https://y")
    with pytest.raises(GitHubError):
        comment.marker("a b")


def _pr_context(gh: GitHubStub, **event) -> Context:
    return Context(repository=gh.state.repo, api_url=gh.url, event_name="pull_request",
                   event=event or {"pull_request": {"number": 7}}, token=Secret(TOKEN))


def test_post_comment_updates_ours_and_not_a_quote_of_it():
    with GitHubStub() as gh:
        gh.add_comments(7, 130)
        gh.add_comments(7, 1, body="> <!-- perfreport:default --> quoted by a human")
        client, _ = _client(gh)
        ctx = _pr_context(gh)
        mark = comment.marker("")
        first = comment.post_comment(client, ctx, mark + "\none", mark, 7)
        second = comment.post_comment(client, ctx, mark + "\ntwo", mark, 7)
        other = comment.post_comment(client, ctx, comment.marker("b") + "\nthree", comment.marker("b"), 7)
    assert (first.action, second.action, other.action) == ("created", "updated", "created")
    assert first.comment_id == second.comment_id != other.comment_id
    assert [c["body"] for c in gh.state.comments[7][-2:]] == [mark + "\ntwo", "<!-- perfreport:b -->\nthree"]


def test_workflow_run_from_a_fork_finds_the_pr_by_head_commit():
    with GitHubStub() as gh:
        gh.state.pulls = [{"number": 3, "head": {"sha": "aaa"}, "head_label": "forker:feature"},
                          {"number": 4, "head": {"sha": "bbb"}, "head_label": "forker:feature"}]
        client, _ = _client(gh)
        run = {"workflow_run": {"head_sha": "bbb", "head_branch": "feature", "pull_requests": [],
                                "head_repository": {"owner": {"login": "forker"}}}}
        ctx = Context(repository=gh.state.repo, api_url=gh.url, event_name="workflow_run", event=run,
                      token=Secret(TOKEN))
        assert comment.find_pull_request(client, ctx, None) == 4
        assert comment.find_pull_request(client, ctx, 4) == 4
        with pytest.raises(GitHubError, match="not the workflow run's head"):
            comment.find_pull_request(client, ctx, 3)  # a number from an artifact cannot redirect the comment


# --- the CLI, as a step runs it --------------------------------------------------------------------
def _perfreport(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return cli_in_process(args, env, cwd=REPO)


def test_cli_comment_fork_403_warns_and_exits_0(report_dir, tmp_path):
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 9}}))
    with GitHubStub() as gh:
        gh.state.write_status = 403
        proc = _perfreport(["github", "comment", "--report", str(report_dir)], {
            "GITHUB_EVENT_PATH": str(event), "GITHUB_EVENT_NAME": "pull_request", "GITHUB_REPOSITORY": gh.state.repo,
            "GITHUB_API_URL": gh.url, "GITHUB_TOKEN": TOKEN})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("::warning title=perfreport comment::") and "pull-requests: write" in proc.stdout
    assert TOKEN not in proc.stdout + proc.stderr


def test_cli_comment_outside_a_pr_does_nothing(report_dir, tmp_path):
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"ref": "refs/heads/main"}))
    proc = _perfreport(["github", "comment", "--report", str(report_dir)],
                       {"GITHUB_EVENT_PATH": str(event), "GITHUB_EVENT_NAME": "push", "GITHUB_TOKEN": TOKEN})
    assert proc.returncode == 0 and "not a pull request event (push)" in proc.stdout


def test_cli_missing_report_is_one_line_exit_2(tmp_path):
    proc = _perfreport(["github", "annotate", "--report", str(tmp_path)], {})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and str(tmp_path) in proc.stderr


def test_cli_summary_and_outputs(report_dir, tmp_path):
    summary, output = tmp_path / "summary.md", tmp_path / "output"
    summary.write_text("earlier step\n")
    env = {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_OUTPUT": str(output)}
    assert _perfreport(["github", "summary", "--report", str(report_dir)], env).returncode == 0
    proc = _perfreport(["github", "outputs", "--report", str(report_dir), "--set", "note=a\nb"], env)
    assert proc.returncode == 0, proc.stderr
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "FAIL" in text
    from tests.action_runner import parse_outputs

    values = parse_outputs(output.read_text())
    assert values["status"] == "fail" and values["note"] == "a\nb" and values["report-dir"] == str(report_dir)
    assert values["markdown-file"] == ""  # no report.md in this folder


# --- summary, annotations, outputs (pure) --------------------------------------------------------
def test_summary_fits_what_is_left_of_1_mib(demo_document):
    text = workflow.summary_markdown(demo_document, used_bytes=1024 * 1024 - 20_000)
    assert len(text.encode("utf-8")) <= 20_000 - 16 and "FAIL" in text
    with pytest.raises(GitHubError, match="no room"):
        workflow.summary_markdown(demo_document, used_bytes=1024 * 1024 - 10)


def test_annotations_cannot_inject_workflow_commands():
    check = {"id": "relative.kernel_time[x]", "family": "relative", "name": "kernel_time", "status": "fail",
             "level": "fail", "counted": True, "unit": "us", "worse": "higher", "rank": None,
             "subject": "evil\n::set-output name=x::1\r%0A,:", "label": "kernel time", "title": "kernel time [evil]",
             "baseline_value": 1.0, "candidate_value": 2.0, "delta": 1.0, "delta_pct": 100.0,
             "message": "boom\n::error::injected", "evidence": {}, "waiver": None}
    lines = workflow.annotation_lines({"checks": [check]})
    assert len(lines) == 1 and "\n" not in lines[0] and "\r" not in lines[0]
    assert lines[0].startswith("::error title=perfreport FAIL%3A ")
    title = lines[0].split("::")[1]
    assert "," not in title.split("title=", 1)[1] and ":" not in title.split("title=", 1)[1]


def test_annotations_at_most_10_per_kind_most_important_first():
    checks = []
    for i in range(25):
        checks.append({"id": f"relative.kernel_time[k{i}]", "family": "relative", "name": "kernel_time",
                       "status": "fail", "level": "fail", "counted": True, "unit": "us", "worse": "higher",
                       "rank": None, "subject": f"k{i}", "label": "kernel time", "title": f"kernel time [k{i}]",
                       "baseline_value": 100.0, "candidate_value": 100.0 + i, "delta": float(i),
                       "delta_pct": float(i), "message": "", "evidence": {}, "waiver": None})
    lines = workflow.annotation_lines({"checks": checks})
    assert len(lines) == 10 and all(line.startswith("::error ") for line in lines)
    assert "k24" in lines[0] and "16 more" in lines[-1]


def test_output_text_uses_heredocs_for_multiline_values():
    text = workflow.output_text({"status": "fail", "headline": "a\nb"})
    assert text.startswith("status=fail\nheadline<<ghadelimiter_")
    from tests.action_runner import parse_outputs

    assert parse_outputs(text) == {"status": "fail", "headline": "a\nb"}
    with pytest.raises(GitHubError):
        workflow.output_text({"bad name": "x"})


# --- where the comment leads: commits, links, reproduce ------------------------------------------
HEAD, BASE, MERGE, STORED = "a" * 40, "b" * 40, "c" * 40, "d" * 40


def test_line_2_names_commits_baseline_and_links(demo_document):
    from perfreport.github.links import CommentLinks, Refs

    doc = copy.deepcopy(demo_document)
    doc["candidate"]["commit"] = MERGE
    doc["baseline"]["stored_baseline"]["commit"] = STORED
    links = CommentLinks("https://github.com", "o/r", Refs(HEAD, "feat", BASE, "main"),
                         run_url="https://github.com/o/r/actions/runs/5", run_id="5",
                         artifact_url="https://github.com/o/r/actions/runs/5/artifacts/6", artifact_name="perf",
                         archive_url="https://o.github.io/r/", install_from=f"perfreport/perfreport@{STORED}")
    body = comment.comment_body(doc, "", links=links)
    lines = body.split("\n")
    assert "FAIL" in lines[1]
    c = "https://github.com/o/r/commit/"
    created = doc["baseline"]["stored_baseline"]["created_utc"][:10]
    assert lines[2] == (f"Comparing **feat** [`aaaaaaa`]({c}{HEAD}) with **main** [`bbbbbbb`]({c}{BASE}) "
                        f"(job commit [`ccccccc`]({c}{MERGE})) · baseline **demo** from [`ddddddd`]({c}{STORED}), "
                        f"saved {created} · [CI run](https://github.com/o/r/actions/runs/5) · "
                        "[report artifact](https://github.com/o/r/actions/runs/5/artifacts/6) · "
                        "[release trends](https://o.github.io/r/)")
    assert lines[3] == ""  # line 2 is its own paragraph
    # "Reproduce locally" installs the code the job ran, from its repository at its commit (never PyPI)
    i = lines.index(f'pip install "perfreport @ git+https://github.com/perfreport/perfreport@{STORED}"')
    assert lines[i - 1] == (f"# perfreport {doc['perfreport_version']} that wrote this report: the job installed "
                            f"it from perfreport/perfreport at {STORED}")
    assert lines[i + 2] == f"git fetch origin {MERGE} && git checkout {MERGE}" and "perfreport==" not in body
    with pytest.raises(GitHubError, match="--archive-url"):
        comment.comment_body(doc, "", links=CommentLinks(archive_url="https://x/a) [evil](https://y"))


def test_hostile_values_never_reach_the_comment_as_markup(demo_document, tmp_path):
    from perfreport.github.links import CommentLinks, Refs, reproduce_block

    doc = copy.deepcopy(demo_document)
    doc["candidate"]["commit"] = "`; rm -rf / #"
    doc["perfreport_version"] = "0.1.0; curl evil"
    doc["baseline"]["stored_baseline"]["name"] = "[x](https://evil) @team"
    doc["command"] = "perfreport compare demo 'tr\n```\n<img src=x>' --out /ci/out --format md"
    (tmp_path / "step-traces").mkdir()
    (tmp_path / "step-traces" / "index.json").write_text(json.dumps({"steps": [
        {"side": "candidate", "file": "x](https://evil).json", "rank": 0, "step": 1, "step_time_ms": 1.0,
         "events": 1, "bytes": 1, "cut_after_us": None},
        {"side": "baseline", "file": "baseline-rank0-step7.pt.trace.json", "rank": 0, "step": 7,
         "step_time_ms": 126.8, "events": 13349, "bytes": 3206520, "cut_after_us": None}]}))
    links = CommentLinks("https://github.com", "o/r", Refs(HEAD, "x](https://evil) `b`", "", ""), run_id="5",
                         artifact_name="perf; rm", install_from="o/r@main\"; curl evil")
    body = comment.comment_body(doc, "", links=links, report_dir=tmp_path)
    line2 = body.split("\n")[2]
    assert not re.search(r"(?<!\\)\]\(https://evil", body)  # every "](" from the data is escaped: no link
    assert "@team" not in body and "<img" not in body
    assert line2.startswith(f"Comparing **x\\](https://evil) \\`b\\`** [`aaaaaaa`]") and "job commit" not in line2
    block = reproduce_block(doc, links, tmp_path)
    assert "gh run download" not in block  # an artifact name that is not a plain name
    assert "pip install" not in block and "rm -rf" not in block
    assert "perfreport compare demo <ARG> --out perfreport-local" in block and block.count("```") == 2
    assert "`baseline-rank0-step7.pt.trace.json` — rank 0, step 7, 126.80 ms, 13,349 events, 3.2 MB" in block
    assert "evil" not in block


@pytest.mark.parametrize("value, expected", [
    (f"perfreport/perfreport@{HEAD}", f"perfreport/perfreport@{HEAD}"),
    ("my-org/perf.report_x@v1.2.0", "my-org/perf.report_x@v1.2.0"),
    (" o/r@release/2026.11 ", "o/r@release/2026.11"),
    ("", ""), ("@", ""), ("o/r", ""), ("o/r@", ""), ("/r@v1", ""), ("-o/r@v1", ""), ("o/r/x@v1", ""),
    ("o/..@v1", ""), ("o/r@--upgrade", ""), ("o/r@../../x", ""), ("o/r@v1@v2", ""), ("o/r@v1 --pre", ""),
    ("o/r@v1#egg=x", ""), ("o/r@v1\n```", ""), ("o/r@v1\"", ""), ("o/r@https://evil/x", ""),
    ("o/r@" + "A" * 40 + "!", ""), ("o/r@" + "v" * 201, ""),
])
def test_install_source_takes_only_a_plain_repository_and_ref(value, expected, demo_document):
    from perfreport.github.links import CommentLinks, install_lines, install_source

    assert install_source(value) == expected
    lines = install_lines(demo_document, CommentLinks(install_from=value))
    pip = [line for line in lines if not line.startswith("#")]
    assert pip == ([f'pip install "perfreport @ git+https://github.com/{expected}"'] if expected else [])
    if not expected:
        assert lines == [f"# the report was written by perfreport {demo_document['perfreport_version']} (install "
                         "from its repository; the PyPI name 'perfreport' is another project)"]


def test_workflow_run_from_a_fork_names_the_prs_base_from_the_lookup(report_dir, tmp_path):
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"workflow_run": {
        "id": 77, "head_sha": HEAD, "head_branch": "feature", "pull_requests": [],
        "html_url": "https://github.com/octo/widgets/actions/runs/77",
        "head_repository": {"owner": {"login": "forker"}}}}))
    with GitHubStub() as gh:
        gh.state.pulls = [{"number": 4, "head": {"sha": HEAD, "ref": "feature"}, "base": {"sha": BASE, "ref": "main"},
                           "head_label": "forker:feature"}]
        proc = _perfreport(["github", "comment", "--report", str(report_dir), "--artifact-name", "perfreport-report",
                            "--archive-url", "https://octo.github.io/widgets/"], {
            "GITHUB_EVENT_PATH": str(event), "GITHUB_EVENT_NAME": "workflow_run", "GITHUB_REPOSITORY": gh.state.repo,
            "GITHUB_API_URL": gh.url, "GITHUB_TOKEN": TOKEN, "GITHUB_RUN_ID": "78"})
    assert proc.returncode == 0, proc.stderr
    body = gh.writes()[0].body["body"]
    line2 = body.split("\n")[2]
    assert line2.startswith(f"Comparing **feature** [`aaaaaaa`](https://github.com/{gh.state.repo}/commit/{HEAD}) "
                            f"with **main** [`bbbbbbb`](https://github.com/{gh.state.repo}/commit/{BASE})")
    assert "[CI run](https://github.com/octo/widgets/actions/runs/77)" in line2  # the PR's run, not this one
    assert "[release trends](https://octo.github.io/widgets/)" in line2
    assert f"gh run download 77 --repo {gh.state.repo} --name perfreport-report" in body
    assert len([r for r in gh.state.requests if "/pulls" in r.path]) == 1  # the lookup, no extra request


# --- a hostile API server: the token stays home, every call ends, answers are capped ------------
from tests.github_stub import flood, redirect, trickle  # noqa: E402


def test_a_redirect_to_another_origin_is_refused_before_the_token_leaves():
    """127.0.0.1:PORT redirecting to localhost:PORT2 (and to another scheme, and to another
    port of the same host): nothing is sent there, so the token cannot be."""
    with GitHubStub() as gh, GitHubStub() as elsewhere:
        other_port = elsewhere.url.rsplit(":", 1)[1]
        for location in (elsewhere.url.replace("127.0.0.1", "localhost"), elsewhere.url,
                         f"https://127.0.0.1:{gh.url.rsplit(':', 1)[1]}", f"http://localhost:{other_port}"):
            gh.state.hostile = redirect(lambda path, loc=location: loc + path)
            client, _ = _client(gh)
            for call in (lambda: client.get("repos/octo/widgets/pulls/1"),
                         lambda: client.post("repos/octo/widgets/issues/1/comments", {"body": "x"})):
                with pytest.raises(GitHubError, match="redirect to another origin") as err:
                    call()
                assert TOKEN not in str(err.value) and "not followed" in str(err.value)
        assert elsewhere.state.requests == []  # never contacted, with or without the token
    assert all(r.headers.get("Authorization") == f"Bearer {TOKEN}" for r in gh.state.requests)


def test_same_origin_redirects_are_followed_and_bounded():
    with GitHubStub() as gh:
        gh.add_comments(4, 2)
        moved = {"n": 0}

        def once(handler, method, path):  # the first request moves, the next is served
            if moved["n"]:
                return False
            moved["n"] += 1
            return redirect(lambda p: gh.url + p.replace("/old-name/", "/widgets/"))(handler, method, path)

        gh.state.hostile = once
        client, _ = _client(gh)
        assert len(client.get("repos/octo/old-name/issues/4/comments")) == 2
        assert [r.path for r in gh.state.requests] == ["/repos/octo/old-name/issues/4/comments",
                                                       "/repos/octo/widgets/issues/4/comments"]
        gh.state.requests.clear()
        gh.state.hostile = redirect(lambda path: "/loop" + path)  # relative, same origin, for ever
        with pytest.raises(GitHubError, match="more than 5 redirects"):
            client.get("repos/octo/widgets/pulls/1")
        assert len(gh.state.requests) == 6


@pytest.mark.parametrize("headers_too", [False, True], ids=["body", "headers"])
def test_a_trickled_answer_is_cut_at_the_request_deadline(headers_too):
    import time

    with GitHubStub() as gh:
        gh.state.hostile = trickle(every_s=0.02, headers_too=headers_too)
        client, sleeps = _client(gh, request_deadline_s=0.5, read_timeout_s=5.0, max_attempts=2)
        start = time.monotonic()
        with pytest.raises(GitHubError, match=r"no complete answer within 0.5 s"):
            client.get("repos/octo/widgets/pulls/1")
        took = time.monotonic() - start
    assert len(gh.state.requests) == 2 and sleeps == [1.0]  # retried once (sleep injected), then given up
    assert 0.95 < took < 3.0, took


def test_the_command_deadline_bounds_every_request_and_wait():
    import time

    with GitHubStub() as gh:
        gh.state.hostile = trickle(every_s=0.05)
        client = Client(gh.url, Secret(TOKEN), deadline_s=1.5, request_deadline_s=1.0, max_attempts=5)
        start = time.monotonic()
        with pytest.raises(GitHubError, match="no complete answer"):
            client.get("repos/octo/widgets/pulls/1")  # 1 s, then a 1 s wait would pass the 1.5 s: stop
    assert time.monotonic() - start < 2.5 and len(gh.state.requests) == 1


@pytest.mark.parametrize("declare", [False, True], ids=["streamed", "content-length"])
def test_a_flood_is_refused_at_the_cap_not_held(declare):
    import tracemalloc

    with GitHubStub() as gh:
        gh.state.hostile = flood(total=64 << 20, declare=declare)
        client, sleeps = _client(gh, max_body_bytes=2 << 20)
        tracemalloc.start()
        with pytest.raises(GitHubError, match=r"over the 2,097,152-byte limit; not read$"):
            client.get("repos/octo/widgets/issues/1/comments")
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < 8 << 20, peak  # a 64 MB answer, at most the cap (and a chunk) held
    assert len(gh.state.requests) == 1 and sleeps == []  # a flood is not asked for again


def test_answers_echoing_the_token_are_redacted_and_deep_json_is_not_parsed():
    def echo(handler, method, path):
        data = json.dumps({"message": f"bad credentials {handler.headers['Authorization']}"}).encode()
        handler.send_response(401)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)
        return True

    with GitHubStub() as gh:
        gh.state.hostile = echo
        client, _ = _client(gh)
        with pytest.raises(GitHubError) as err:
            client.get("repos/octo/widgets/pulls/1")
        assert TOKEN not in str(err.value) and "Bearer ***" in str(err.value)
        deep = b"[" * 100_000 + b"]" * 100_000

        def nested(handler, method, path):
            handler.send_response(200)
            handler.send_header("Content-Length", str(len(deep)))
            handler.end_headers()
            handler.wfile.write(deep)
            return True

        gh.state.hostile = nested
        assert isinstance(client.get("repos/octo/widgets/pulls/1"), str)  # not JSON to us, no RecursionError


ODD_TOKENS = {
    "trailing newline": TOKEN + "\n",
    "CRLF header injection": TOKEN + "\r\nX-Evil: 1",
    "non-Latin-1": "ghp_tök€n_ünïcode",
    "Latin-1 but not ASCII": "ghp_caf\xe9",
    "space": "ghp_a b",
    "not UTF-8": "ghp_\udcff\udcfe",  # bytes 0xff 0xfe in the environment
    "escape": "ghp_\x1b[31mred",
    "5000 characters": "g" * 5000,
}


@pytest.mark.parametrize("name", sorted(ODD_TOKENS))
def test_cli_odd_tokens_are_one_line_and_never_shown(name, report_dir, tmp_path, monkeypatch, capsys):
    from perfreport.cli import main

    token = ODD_TOKENS[name]
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 9}}))
    with GitHubStub() as gh:
        for key, value in {"GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": gh.state.repo,
                           "GITHUB_API_URL": gh.url, "GITHUB_TOKEN": token}.items():
            monkeypatch.setenv(key, value)
        code = main(["github", "comment", "--report", str(report_dir)])
        assert gh.state.requests == []  # refused before any request
    out, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and out == "", err
    assert "GITHUB_TOKEN: not a usable API token" in err and "token is not shown" in err
    for piece in (token, token.strip(), "ghp_", "tök"):
        assert piece not in out + err


def test_cli_trickle_and_foreign_redirect_end_in_one_line(report_dir, tmp_path):
    import time

    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 9}}))
    with GitHubStub() as gh, GitHubStub() as elsewhere:
        env = {"GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": gh.state.repo, "GITHUB_API_URL": gh.url,
               "GITHUB_TOKEN": TOKEN, "PERFREPORT_GITHUB_DEADLINE_S": "1"}
        gh.state.hostile = trickle(every_s=0.05, headers_too=True)
        start = time.monotonic()
        proc = _perfreport(["github", "comment", "--report", str(report_dir)], env)
        took = time.monotonic() - start
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no complete answer" in proc.stderr, \
            proc.stderr
        assert took < 14, took  # 1 s of API time plus start-up and rendering
        gh.state.hostile = redirect(lambda path: elsewhere.url.replace("127.0.0.1", "localhost") + path, 301)
        proc = _perfreport(["github", "comment", "--report", str(report_dir)], env)
        assert proc.returncode == 2 and "redirect to another origin" in proc.stderr and TOKEN not in proc.stderr
        assert elsewhere.state.requests == []
        proc = _perfreport(["github", "comment", "--report", str(report_dir)],
                           {**env, "PERFREPORT_GITHUB_DEADLINE_S": "forever"})
        assert proc.returncode == 2 and "PERFREPORT_GITHUB_DEADLINE_S" in proc.stderr


@pytest.mark.parametrize("variable,command", [("GITHUB_STEP_SUMMARY", "summary"), ("GITHUB_OUTPUT", "outputs")])
def test_cli_runner_file_that_is_a_directory_is_one_line(variable, command, report_dir, tmp_path):
    proc = _perfreport(["github", command, "--report", str(report_dir)], {variable: str(tmp_path)})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "is a directory" in proc.stderr, proc.stderr
    assert variable in proc.stderr and "Error:" not in proc.stderr


def test_check_token_refuses_what_cannot_be_a_header_without_showing_it():
    from perfreport.github.api import check_token

    for token in ("ghp_a\x00b", "ghp_a\tb", "ghp_\x7f", *ODD_TOKENS.values()):
        with pytest.raises(GitHubError) as err:
            Client("http://127.0.0.1:9", Secret(token))
        assert token not in str(err.value) and "ghp_" not in str(err.value)
    check_token(Secret("ghp_" + "A" * 36))
    check_token(Secret("github_pat_11AB_x-y.z"))
    for url in ("ftp://127.0.0.1/", "http://user:pw@127.0.0.1:1", "file:///etc/passwd", "http://127.0.0.1:99999"):
        with pytest.raises(GitHubError, match="GITHUB_API_URL"):
            Client(url, Secret(TOKEN))


def test_https_answers_are_read_and_a_trickle_over_tls_is_cut(tmp_path, monkeypatch):
    """The API is https: the same deadlines hold through TLS (the watchdog shuts the socket
    under the TLS layer). A self-signed certificate for 127.0.0.1, trusted through SSL_CERT_FILE."""
    import shutil as _shutil
    import ssl
    import time

    if not _shutil.which("openssl"):
        pytest.skip("no openssl to make a test certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    with GitHubStub() as gh:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        gh.server.socket = context.wrap_socket(gh.server.socket, server_side=True)
        gh.add_comments(1, 3)
        client = Client(gh.url.replace("http://", "https://"), Secret(TOKEN), request_deadline_s=0.5, max_attempts=1)
        assert len(client.get("repos/octo/widgets/issues/1/comments")) == 3
        assert gh.state.requests[-1].headers["Authorization"] == f"Bearer {TOKEN}"
        gh.state.hostile = trickle(every_s=0.02, headers_too=True)
        start = time.monotonic()
        with pytest.raises(GitHubError, match="no complete answer within 0.5 s"):
            client.get("repos/octo/widgets/pulls/1")
        assert time.monotonic() - start < 2.0


def test_a_silent_server_is_left_at_the_read_timeout():
    import time

    def silent(handler, method, path):
        time.sleep(3)  # says nothing (bounded: the stub's thread ends by itself)
        return True

    with GitHubStub() as gh:
        gh.state.hostile = silent
        client = Client(gh.url, Secret(TOKEN), read_timeout_s=0.5, max_attempts=1)
        start = time.monotonic()
        with pytest.raises(GitHubError, match=r"no answer \(silent for 0.5 s\)"):
            client.get("repos/octo/widgets/pulls/1")
        assert time.monotonic() - start < 1.5


@pytest.mark.parametrize("answer", [b'{"id": "nope"}', b'{"id": 1e400, "html_url": 5}', b'{"id": [1]}', b'"text"',
                                    b"[" * 50_000 + b"]" * 50_000, b'[{"id": {"a": 1}, "body": "<!-- perfreport:default -->"}]',
                                    b"\xff\xfe"])
def test_cli_api_answers_of_the_wrong_shape_are_one_line(answer, report_dir, tmp_path, monkeypatch, capsys):
    from perfreport.cli import main

    def same_for_all(handler, method, path):
        handler.send_response(200 if method == "GET" else 201)
        handler.send_header("Content-Length", str(len(answer)))
        handler.end_headers()
        handler.wfile.write(answer)
        return True

    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 9}}))
    with GitHubStub() as gh:
        gh.state.hostile = same_for_all
        for key, value in {"GITHUB_EVENT_PATH": str(event), "GITHUB_REPOSITORY": gh.state.repo,
                           "GITHUB_API_URL": gh.url, "GITHUB_TOKEN": TOKEN}.items():
            monkeypatch.setenv(key, value)
        code = main(["github", "comment", "--report", str(report_dir)])
    out, err = capsys.readouterr()
    assert code in (0, 2) and "internal error" not in err and TOKEN not in out + err, err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("perfreport: error: "), err
