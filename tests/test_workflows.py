"""The workflows: the project's own and the copy-paste examples. Least privilege, no
pull_request_target, no PR code where a writable token is, no expression pasted into a script."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml")) + sorted((REPO / "examples" / "workflows").glob("*.yml"))
WRITE_SCOPES_ALLOWED = {"pull-requests", "contents", "pages", "id-token"}
UNTRUSTED = re.compile(r"\$\{\{\s*github\.(event\.(pull_request|workflow_run|release|issue|comment|head_commit)|head_ref)")


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as True
    return data


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_least_privilege_and_no_pwn_request(path):
    wf = load(path)
    text = path.read_text()
    assert "pull_request_target" not in text
    perms = wf.get("permissions")
    assert isinstance(perms, dict), f"{path.name}: top-level permissions must be explicit"
    for job in wf["jobs"].values():
        perms = {**perms, **(job.get("permissions") or {})}
    assert "write-all" not in text and all(v in ("read", "write", "none") for v in perms.values())
    assert {k for k, v in perms.items() if v == "write"} <= WRITE_SCOPES_ALLOWED
    events = wf["on"] if isinstance(wf["on"], (dict, list)) else [wf["on"]]
    if "pull_request" in events:
        assert perms.get("contents") == "read"
    for job in wf["jobs"].values():
        for step in job["steps"]:
            if "run" in step:  # untrusted strings reach scripts through env only
                assert not UNTRUSTED.search(step["run"]), (path.name, step.get("name"))
                assert "secrets." not in step["run"] and "github.token" not in step["run"]


def test_workflow_run_comment_job_never_checks_out_pr_code():
    wf = load(REPO / "examples" / "workflows" / "perfreport-comment.yml")
    assert list(wf["on"]) == ["workflow_run"]
    steps = wf["jobs"]["comment"]["steps"]
    assert not any(str(s.get("uses", "")).startswith("actions/checkout") for s in steps)
    assert any(str(s.get("uses", "")).startswith("actions/download-artifact") for s in steps)
    assert any("perfreport github comment" in s.get("run", "") for s in steps)
    pr = load(REPO / "examples" / "workflows" / "perfreport-pr.yml")
    gate = next(s for s in pr["jobs"]["perf"]["steps"] if "perfreport" in str(s.get("uses", "")))
    assert gate["with"]["comment"] == "false" and gate["with"]["artifact-name"] == "perfreport-report"
    assert pr["permissions"] == {"contents": "read"}
    assert wf["on"]["workflow_run"]["workflows"] == [pr["name"]]


def test_tests_workflow_covers_python_310_to_313_and_the_action_tests_itself():
    tests = load(REPO / ".github" / "workflows" / "tests.yml")
    assert tests["jobs"]["test"]["strategy"]["matrix"]["python-version"] == ["3.10", "3.11", "3.12", "3.13"]
    action = load(REPO / ".github" / "workflows" / "action.yml")
    assert any(s.get("uses") == "./" for s in action["jobs"]["demo"]["steps"])


def test_release_workflow_deploys_pages_with_the_archive():
    wf = load(REPO / "examples" / "workflows" / "perfreport-release.yml")
    assert wf["on"] == {"release": {"types": ["published"]}}
    steps = wf["jobs"]["archive"]["steps"]
    assert any("perfreport archive add" in s.get("run", "") for s in steps)
    assert any(str(s.get("uses", "")).startswith("actions/deploy-pages") for s in steps)
    assert wf["permissions"]["pages"] == "write" and wf["permissions"]["id-token"] == "write"
