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
    assert wf["permissions"] == {}
    perms = wf["jobs"]["archive"]["permissions"]
    assert perms == {"contents": "write", "pages": "write", "id-token": "write"}
    add = next(s["run"] for s in steps if "perfreport archive add" in s.get("run", ""))
    assert "add -A" not in add and "add ." not in add
    assert 'git -C site add -- index.json index.html "releases/$TAG"' in add


# --- the supply chain: pinned actions, no persisted credentials, zizmor -----------------------

ACTION = REPO / "action.yml"
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", re.M)
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
VERSION_COMMENT = re.compile(r"^\s+# v\d+\.\d+\.\d+\b")
DOCS = REPO / "docs" / "github-action.md"


def _uses(path: Path) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in USES.finditer(path.read_text())]


@pytest.mark.parametrize("path", [ACTION, *WORKFLOWS], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_action_is_pinned_to_a_commit_with_its_version_named(path):
    refs = [(ref, comment) for ref, comment in _uses(path) if not ref.startswith("./")]
    assert refs or path.name == "action.yml"
    for ref, comment in refs:
        assert PINNED.match(ref), f"{path.name}: {ref} is not pinned to a full commit SHA"
        assert VERSION_COMMENT.match(comment), f"{path.name}: {ref} has no '# vX.Y.Z' comment"


def test_one_commit_per_action_across_all_files():
    seen: dict[str, set[str]] = {}
    for path in [ACTION, *WORKFLOWS]:
        for ref, comment in _uses(path):
            if "@" in ref:
                name, sha = ref.split("@", 1)
                seen.setdefault(name, set()).add(f"{sha}{comment.split(';')[0]}")
    assert {name: pins for name, pins in seen.items() if len(pins) > 1} == {}
    assert {"actions/checkout", "actions/setup-python", "actions/upload-artifact"} <= set(seen)


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_checkout_keeps_no_credentials_unless_the_job_pushes(path):
    wf = load(path)
    for job in wf["jobs"].values():
        pushes = any("git" in s.get("run", "") and " push " in s.get("run", "") for s in job["steps"])
        for step in job["steps"]:
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                assert (step.get("with") or {}).get("persist-credentials") is pushes, (path.name, pushes)


def test_the_comment_workflow_installs_perfreport_from_a_fixed_commit():
    steps = load(REPO / "examples" / "workflows" / "perfreport-comment.yml")["jobs"]["comment"]["steps"]
    install = next(s["run"] for s in steps if "pip install" in s.get("run", ""))
    pinned = re.search(r"git\+https://github\.com/perfreport/perfreport@([0-9a-f]{40})\"", install)
    assert pinned, install
    # the comment's "Reproduce locally" names the same commit, so a reader installs what the job ran
    comment = next(s["run"] for s in steps if "github comment" in s.get("run", ""))
    assert f"--install-from perfreport/perfreport@{pinned.group(1)}" in comment, comment


def test_pin_examples_rewrites_every_perfreport_reference():
    import importlib.util

    spec = importlib.util.spec_from_file_location("pin_examples", REPO / "scripts" / "pin_examples.py")
    pin_examples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pin_examples)
    sha = "0123456789abcdef0123456789abcdef01234567"
    text = (REPO / "examples" / "workflows" / "perfreport-comment.yml").read_text() + \
        (REPO / "examples" / "workflows" / "perfreport-pr.yml").read_text()
    out = pin_examples.pin(text, sha, "v2.3.4")
    assert "0" * 40 not in out and "v0.1.0" not in out
    assert f"perfreport/perfreport@{sha} # v2.3.4; scripts/pin_examples.py" in out
    assert f'perfreport/perfreport@{sha}"' in out and "# v2.3.4; scripts/pin_examples.py sets" in out
    assert f"--install-from perfreport/perfreport@{sha}\n" in out


def _zizmor(*inputs: Path) -> list[dict]:
    import json
    import shutil
    import subprocess

    import sys

    beside = Path(sys.executable).parent / "zizmor"  # the interpreter's scripts, when not on PATH
    exe = shutil.which("zizmor") or (str(beside) if beside.is_file() else None)
    assert exe, "zizmor is not installed: pip install -e '.[test]'"
    got = subprocess.run([exe, "--offline", "--format", "json", *map(str, inputs)], capture_output=True, text=True,
                         timeout=120, cwd=REPO)
    assert got.stdout.strip().startswith("["), got.stderr[-2000:]
    return json.loads(got.stdout)


def test_zizmor_offline_finds_nothing_high_and_the_docs_explain_what_it_finds():
    findings = _zizmor(REPO, *sorted((REPO / "examples" / "workflows").glob("*.yml")))
    high = [(f["ident"], f["locations"][0]["symbolic"]["key"]) for f in findings
            if f["determinations"]["severity"] == "High"]
    assert high == []
    docs = DOCS.read_text()
    unexplained = {f["ident"] for f in findings} - set(re.findall(r"`([a-z-]+)`", docs))
    assert unexplained == set(), f"zizmor findings not explained in {DOCS.name}: {unexplained}"
    ignored = set(re.findall(r"zizmor: ignore\[([a-z-]+)\]", "".join(p.read_text() for p in [ACTION, *WORKFLOWS])))
    assert ignored == {"dangerous-triggers"} and "dangerous-triggers" in docs


def test_zizmor_catches_an_unpinned_action(tmp_path):
    """The audit above can fail: the same run on a workflow with a tag-pinned action reports it."""
    bad = tmp_path / "bad.yml"
    bad.write_text("name: bad\non: push\npermissions: {}\njobs:\n  j:\n    name: j\n    runs-on: ubuntu-latest\n"
                   "    steps:\n      - uses: actions/setup-python@v5\n")
    assert {f["ident"] for f in _zizmor(bad) if f["determinations"]["severity"] == "High"} == {"unpinned-uses"}
