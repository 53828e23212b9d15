"""The GitHub Action end to end: action.yml's steps run one by one (tests/action_runner.py) in a
GitHub-like pull_request environment against a REST API stand-in on 127.0.0.1
(tests/github_stub.py) holding 120 older comments, on the real demo comparison (exit 1: FAIL).

Checked as a user would see it: the comment is created, then the job fails — after the comment;
the summary, outputs and at most 10 error annotations are written and the artifact upload is
asked for; a second run updates the same comment; a fork's read-only token gets a warning, not
a failed step; the token appears in no output, file or request body.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.action_runner import parse_outputs, run_action
from tests.github_stub import GitHubStub

REPO = Path(__file__).resolve().parent.parent
TOKEN = "ghs_TESTTOKEN0123456789abcdefSECRET"
PR = 7
HEAD_SHA, BASE_SHA, MERGE_SHA = "c0ffee" + "1" * 34, "ba5e00" + "2" * 34, "3e26e0" + "3" * 34
ACTION_SHA = "ac7101" + "4" * 34
ACTION = {"action_repository": "perfreport/perfreport", "action_ref": ACTION_SHA}  # uses: perfreport/perfreport@SHA
INPUTS = {"baseline": "demo", "candidate": str(REPO / "examples" / "resnet50-workers0"),
          "store": str(REPO / "baselines"), "formats": "html,md,json,junit"}
AGAIN = {**INPUTS, "formats": "md,json", "step-trace": "false"}
"""The inputs of the runs after the first: what they check is in report.json and the comment; the
HTML report (3 s of figures) and the step traces are checked once, in the first run."""
TINY = REPO / "tests" / "data" / "traces" / "pair_hta_trace_compare_tiny"
LIGHT = {**AGAIN, "baseline": str(TINY / "base"), "candidate": str(TINY / "test")}
"""The inputs of the runs that check only how the comment is posted (created once then updated,
its "Reproduce locally" block): a comparison of the tiny HTA pair (PASS), cheaper than the demo's."""


def environment(workspace: Path, api_url: str, *, fork: bool = False) -> dict:
    event = {"number": PR, "pull_request": {
        "number": PR, "head": {"sha": HEAD_SHA, "ref": "fast-loader",
                               "repo": {"full_name": "forker/widgets" if fork else "octo/widgets"}},
        "base": {"sha": BASE_SHA, "ref": "main", "repo": {"full_name": "octo/widgets"}}}}
    (workspace / "event.json").write_text(json.dumps(event))
    summary = workspace / "summary.md"
    summary.write_text("")
    return {"PATH": str(Path("/usr/bin")) + ":/bin", "HOME": str(workspace), "GITHUB_ACTIONS": "true",
            "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(workspace / "event.json"),
            "GITHUB_REPOSITORY": "octo/widgets", "GITHUB_API_URL": api_url,
            "GITHUB_SERVER_URL": "https://github.example", "GITHUB_RUN_ID": "99", "GITHUB_SHA": MERGE_SHA,
            "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_TOKEN": TOKEN, "MPLBACKEND": "Agg",
            # the steps' `perfreport` imports the tree under test, as the test process does
            **({"PYTHONPATH": os.environ["PYTHONPATH"]} if os.environ.get("PYTHONPATH") else {})}


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    """The whole action once (the install step skipped: perfreport is installed here)."""
    workspace = tmp_path_factory.mktemp("action")
    with GitHubStub() as gh:
        gh.add_comments(PR, 120)
        env = environment(workspace, gh.url)
        job = run_action(REPO, INPUTS, env, workspace, skip=("install",), github=ACTION)
    return workspace, gh, job, env


def test_first_run_comments_then_fails(first_run):
    workspace, gh, job, _ = first_run
    compare = job.step("compare with the baseline")
    assert compare.exit_code == 0 and compare.outputs["exit-code"] == "1"  # FAIL verdict, step itself passes
    comment_step = job.step("pr comment")
    assert comment_step.ran and comment_step.exit_code == 0, comment_step.stderr
    verdict = job.step("verdict")
    assert verdict.exit_code == 1 and job.failed
    order = [s.name for s in job.steps if s.ran]
    assert order.index(comment_step.name) < order.index(verdict.name)
    # the comment: created once, after listing both pages of the 120 older comments
    lists = [r for r in gh.state.requests if r.method == "GET" and r.path.endswith(f"/issues/{PR}/comments")]
    assert [r.query.get("page") for r in lists] == ["1", "2"] and all(r.query["per_page"] == "100" for r in lists)
    posts = gh.writes()
    assert [r.method for r in posts] == ["POST"]
    body = posts[0].body["body"]
    assert body.startswith("<!-- perfreport:default -->") and len(body) <= 65_536
    assert "FAIL" in body.split("\n", 3)[1] or "FAIL" in body.split("\n", 3)[2]
    assert "https://github.example/octo/widgets/actions/runs/99/artifacts/4242" in body
    assert "https://github.example/octo/widgets/actions/runs/99" in body
    assert posts[0].headers["Authorization"] == f"Bearer {TOKEN}"


def test_the_comment_names_the_commits_and_says_how_to_reproduce(first_run):
    workspace, gh, _, _ = first_run
    body = gh.writes()[0].body["body"]
    line2 = body.split("\n")[2]
    commit = "https://github.example/octo/widgets/commit/"
    assert line2.startswith(f"Comparing **fast-loader** [`{HEAD_SHA[:7]}`]({commit}{HEAD_SHA}) with **main** "
                            f"[`{BASE_SHA[:7]}`]({commit}{BASE_SHA}) (job commit [`{MERGE_SHA[:7]}`]({commit}{MERGE_SHA}))")
    assert "baseline **demo** (commit not recorded, saved 2026-11-21)" in line2  # the demo store has none
    assert "[CI job](https://github.example/octo/widgets/actions/runs/99/job/4343)" in line2
    assert "[report artifact](https://github.example/octo/widgets/actions/runs/99/artifacts/4242)" in line2
    block = body[body.index("<details><summary><b>Reproduce locally</b>"):]
    assert "gh run download 99 --repo octo/widgets --name perfreport-report --dir perfreport-report" in block
    from perfreport import __version__

    # the code the job installed (this action at its commit), never the PyPI name, another project's
    assert (f"# perfreport {__version__} that wrote this report: the job installed it from perfreport/perfreport "
            f"at {ACTION_SHA}\n" f'pip install "perfreport @ git+https://github.com/perfreport/perfreport@{ACTION_SHA}"'
            ) in block
    assert "perfreport==" not in body
    assert f"git fetch origin {MERGE_SHA} && git checkout {MERGE_SHA}" in block
    assert f"perfreport compare demo {INPUTS['candidate']} --store {INPUTS['store']} --out perfreport-local" in block
    # the step traces the compare step added to the artifact, named in the comment
    index = json.loads((workspace / "perfreport-out" / "step-traces" / "index.json").read_text())
    for entry in index["steps"]:
        path = workspace / "perfreport-out" / "step-traces" / entry["file"]
        assert path.stat().st_size == entry["bytes"] <= 20_000_000
        assert f"`{entry['file']}` — rank {entry['rank']}, step {entry['step']}" in block
    assert [e["side"] for e in index["steps"]] == ["baseline", "candidate"] and "ui.perfetto.dev" in block


def test_first_run_summary_outputs_annotations_upload(first_run):
    workspace, _, job, env = first_run
    summary = Path(env["GITHUB_STEP_SUMMARY"]).read_text()
    assert "FAIL" in summary and len(summary.encode()) <= 1024 * 1024
    report = job.step("job summary")
    outputs = report.outputs
    assert outputs["status"] == "fail"
    assert Path(outputs["report-dir"]) == Path("perfreport-out")
    assert (workspace / outputs["markdown-file"]).is_file()
    assert job.outputs["status"] == "fail"
    assert job.outputs["artifact-url"].endswith("/artifacts/4242")
    errors = [line for line in report.stdout.splitlines() if line.startswith("::error ")]
    warnings = [line for line in report.stdout.splitlines() if line.startswith("::warning ")]
    assert 1 <= len(errors) <= 10 and len(warnings) <= 10
    assert "step time" in errors[0]
    upload = job.step("upload the report")
    assert upload.uses.startswith("actions/upload-artifact@") and upload.with_["path"] == "perfreport-out"
    assert upload.with_["name"] == "perfreport-report"


def test_token_appears_nowhere(first_run):
    workspace, gh, job, env = first_run
    assert TOKEN not in job.text
    for path in workspace.rglob("*"):
        if path.is_file() and path.name != "event.json":
            assert TOKEN.encode() not in path.read_bytes(), path
    for r in gh.state.requests:
        assert TOKEN not in json.dumps(r.body or {})


def test_second_run_updates_the_same_comment(first_run, tmp_path):
    workspace, _, _, _ = first_run
    with GitHubStub() as gh:
        gh.add_comments(PR, 120)
        env = environment(workspace, gh.url)
        first = run_action(REPO, LIGHT, env, workspace, only=("compare", "pr comment"))
        created = [c for c in gh.state.comments[PR] if c["body"].startswith("<!-- perfreport:")]
        second = run_action(REPO, LIGHT, env, workspace, only=("compare", "pr comment"))
        ours = [c for c in gh.state.comments[PR] if c["body"].startswith("<!-- perfreport:")]
        assert first.step("pr comment").exit_code == 0 and second.step("pr comment").exit_code == 0
        assert len(created) == 1 and len(ours) == 1 and ours[0]["id"] == created[0]["id"]
        assert [r.method for r in gh.writes()] == ["POST", "PATCH"]
        assert len(gh.state.comments[PR]) == 121


@pytest.mark.parametrize("action, expected", [
    ({"action_repository": "perfreport/perfreport", "action_ref": "v1"},  # a tag: may move, and says so
     'it may have moved since)\npip install "perfreport @ git+https://github.com/perfreport/perfreport@v1"'),
    ({"action_repository": "x/y --index-url https://evil", "action_ref": 'v1" $(touch pwned) "'},
     "(install from its repository; the PyPI name 'perfreport' is another project)"),
])  # a local `uses: ./` (both empty) is the fork run below
def test_reproduce_installs_the_actions_own_ref_or_names_the_version(first_run, action, expected):
    workspace, _, _, _ = first_run
    with GitHubStub() as gh:
        job = run_action(REPO, LIGHT, environment(workspace, gh.url), workspace, only=("compare", "pr comment"),
                         github=action)
    assert job.step("pr comment").exit_code == 0, job.step("pr comment").stderr
    block = gh.writes()[0].body["body"].split("<summary><b>Reproduce locally</b>")[1]
    assert expected in block and "perfreport==" not in block
    assert block.count("pip install") == (1 if "git+" in expected else 0)
    assert "evil" not in block and "pwned" not in block and not (workspace / "pwned").exists()
    if "evil" in action["action_repository"]:
        assert "is not OWNER/REPO@REF" in job.step("pr comment").stderr


def test_fork_run_warns_and_does_not_fail_the_comment_step(first_run):
    workspace, _, _, _ = first_run
    with GitHubStub() as gh:
        gh.state.write_status = 403
        env = environment(workspace, gh.url, fork=True)
        job = run_action(REPO, AGAIN, env, workspace, skip=("install",))
    step = job.step("pr comment")
    assert step.exit_code == 0
    assert "::warning" in step.stdout and "pull-requests: write" in step.stdout
    assert job.step("verdict").exit_code == 1  # the verdict still fails the job
    assert TOKEN not in job.text
    # no action repository/ref here (as for a local `uses: ./`): the version is named, nothing installed
    from perfreport import __version__

    block = gh.writes()[0].body["body"].split("<summary><b>Reproduce locally</b>")[1]
    assert (f"# the report was written by perfreport {__version__} (install from its repository; the PyPI name "
            "'perfreport' is another project)") in block and "pip install" not in block


def test_fail_on_never_passes_the_job_and_bad_input_fails_it(first_run, tmp_path):
    workspace, _, _, _ = first_run
    with GitHubStub() as gh:
        env = environment(workspace, gh.url)
        never = run_action(REPO, {**AGAIN, "fail-on": "never", "comment": "false"}, env, workspace,
                           skip=("install", "upload"))
        broken = run_action(REPO, {**AGAIN, "candidate": str(tmp_path / "missing"), "comment": "false"}, env,
                            workspace, skip=("install",))
        assert gh.state.requests == []
    assert not never.failed and never.step("verdict").exit_code == 0
    assert broken.step("compare").outputs["exit-code"] == "2"
    assert not broken.step("pr comment").ran and not broken.step("upload").ran
    assert broken.step("verdict").exit_code == 2
    assert "::error title=perfreport could not compare::" in broken.step("compare").stdout


def test_action_declares_every_input_with_description_and_defaults():
    import yaml

    spec = yaml.safe_load((REPO / "action.yml").read_text())
    assert spec["runs"]["using"] == "composite"
    expected = {"baseline", "candidate", "config", "store", "formats", "out", "comment", "comment-id", "fail-on",
                "upload-artifact", "artifact-name", "step-trace", "archive-url", "python-version", "github-token"}
    assert set(spec["inputs"]) == expected
    for name, spec_input in spec["inputs"].items():
        assert spec_input.get("description"), name
        assert spec_input.get("required") or "default" in spec_input, name
    assert spec["inputs"]["formats"]["default"] == "html,pdf,md,json,junit"
    assert spec["inputs"]["github-token"]["default"] == "${{ github.token }}"
    assert set(spec["outputs"]) == {"status", "report-dir", "markdown-file", "artifact-url"}
    for step in spec["runs"]["steps"]:
        if "run" in step:
            assert step["shell"] == "bash" and "${{" not in step["run"]
    install = next(s for s in spec["runs"]["steps"] if "install" in s.get("name", "").lower())
    assert install["env"]["ACTION_PATH"] == "${{ github.action_path }}"


def test_outputs_parser_reads_heredocs():
    text = "a=1\nb<<ghadelimiter_x\nline1\nline2\nghadelimiter_x\nc=\n"
    assert parse_outputs(text) == {"a": "1", "b": "line1\nline2", "c": ""}


def test_runner_has_bash():
    assert shutil.which("bash")
