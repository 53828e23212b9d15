"""Run ``action.yml``'s steps here, one by one, the way a GitHub runner runs a composite action.

What the runner does and this reproduces: ``${{ … }}`` expressions in ``env``, ``with`` and
``if`` (``inputs.*``, ``steps.ID.outputs.*``, ``github.*``, ``always()``, ``&&``, ``||``, ``==``,
``!=``, ``<`` with GitHub's string-to-number coercion), each ``run`` step as ``bash -e -o
pipefail`` in the workspace with ``GITHUB_OUTPUT`` read back into ``steps.ID.outputs`` after it,
a failed step failing the job but later ``if: always()`` steps still running. ``uses:`` steps
are recorded, not run: ``actions/setup-python`` does nothing (this interpreter is used) and
``actions/upload-artifact`` checks its path and answers ``artifact-id``/``artifact-url``.
Steps named in ``skip`` are recorded as skipped (the install step: perfreport is installed).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@dataclass
class StepResult:
    name: str
    id: str
    ran: bool
    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""
    outputs: dict = field(default_factory=dict)
    uses: str = ""
    with_: dict = field(default_factory=dict)


@dataclass
class JobResult:
    steps: list[StepResult]
    failed: bool
    outputs: dict

    def step(self, name_part: str) -> StepResult:
        return next(s for s in self.steps if name_part.lower() in s.name.lower())

    @property
    def text(self) -> str:
        return "\n".join(s.stdout + s.stderr for s in self.steps)


JOB_CHECK_RUN_ID = "4343"
"""``job.check_run_id`` as github.com sets it: the id of the job's page, runs/RUN/job/ID."""


def run_action(action_path: Path, inputs: dict, env: dict, workspace: Path, *, skip: tuple[str, ...] = (),
               only: tuple[str, ...] | None = None, timeout: float = 300, github: dict | None = None) -> JobResult:
    """``github``: more of the ``github`` context (e.g. ``action_repository``, ``action_ref``; both
    "" as for a local ``uses: ./`` when not given)."""
    spec = yaml.safe_load((action_path / "action.yml").read_text())
    values = {k: str(v.get("default", "")) for k, v in spec["inputs"].items()}
    missing = [k for k, v in spec["inputs"].items() if v.get("required") and k not in inputs]
    assert not missing, f"required inputs missing: {missing}"
    ctx = {"inputs": values, "steps": {}, "github": {
        "action_path": str(action_path), "token": env.get("GITHUB_TOKEN", ""),
        "event_name": env.get("GITHUB_EVENT_NAME", ""), "repository": env.get("GITHUB_REPOSITORY", ""),
        "run_id": env.get("GITHUB_RUN_ID", ""), "server_url": env.get("GITHUB_SERVER_URL", ""), "job": "perf",
        "action_repository": "", "action_ref": "", **(github or {})},
        "job": {"status": "success", "check_run_id": JOB_CHECK_RUN_ID}}
    for k, v in spec["inputs"].items():  # defaults may be expressions (github.token)
        values[k] = _substitute(values[k], ctx)
    values.update({k: str(v) for k, v in inputs.items()})
    results, failed = [], False
    for step in spec["runs"]["steps"]:
        name = step.get("name") or step.get("uses", "")
        sid = step.get("id", "")
        condition = step.get("if")
        ok = evaluate(condition, ctx, failed) if condition else not failed
        if not ok or any(s.lower() in name.lower() for s in skip) or (only is not None and not any(
                o.lower() in name.lower() for o in only)):
            results.append(StepResult(name, sid, False))
            continue
        if "uses" in step:
            r = _uses(step, ctx, workspace, env)
        else:
            r = _run(step, ctx, workspace, env, timeout)
        r.name, r.id = name, sid
        results.append(r)
        if sid:
            ctx["steps"][sid] = {"outputs": r.outputs}
        failed = failed or r.exit_code != 0
    outputs = {k: _substitute(v["value"], ctx) for k, v in spec.get("outputs", {}).items()}
    return JobResult(results, failed, outputs)


def _run(step: dict, ctx: dict, workspace: Path, env: dict, timeout: float) -> StepResult:
    assert step.get("shell") == "bash", f"step {step.get('name')!r} must declare shell: bash"
    output_file = workspace / f".gh-output-{os.getpid()}-{len(ctx['steps'])}"
    output_file.write_text("")
    step_env = {**env, **{k: _substitute(str(v), ctx) for k, v in (step.get("env") or {}).items()},
                "GITHUB_OUTPUT": str(output_file), "GITHUB_ACTION_PATH": ctx["github"]["action_path"],
                "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', os.environ['PATH'])}"}
    script = step["run"]
    assert "${{" not in script, f"step {step.get('name')!r} pastes an expression into its script"
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", script], cwd=workspace,
                          env=step_env, capture_output=True, text=True, timeout=timeout)
    outputs = parse_outputs(output_file.read_text())
    output_file.unlink()
    return StepResult("", "", True, proc.returncode, proc.stdout, proc.stderr, outputs)


def _uses(step: dict, ctx: dict, workspace: Path, env: dict) -> StepResult:
    with_ = {k: _substitute(str(v), ctx) for k, v in (step.get("with") or {}).items()}
    uses = step["uses"]
    outputs = {}
    code = 0
    if uses.startswith("actions/upload-artifact@"):
        path = workspace / with_["path"]
        code = 0 if path.exists() else 1
        outputs = {"artifact-id": "4242", "artifact-url": f"{env.get('GITHUB_SERVER_URL', 'https://github.com')}/"
                   f"{env.get('GITHUB_REPOSITORY', '')}/actions/runs/{env.get('GITHUB_RUN_ID', '1')}/artifacts/4242"}
    return StepResult("", "", True, code, outputs=outputs, uses=uses, with_=with_)


def parse_outputs(text: str) -> dict:
    """``$GITHUB_OUTPUT`` content -> dict (``name=value`` and ``name<<DELIM`` heredocs)."""
    out, lines, i = {}, text.split("\n"), 0
    while i < len(lines):
        line = lines[i]
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delim = line.split("<<", 1)
            j = lines.index(delim, i + 1)
            out[name] = "\n".join(lines[i + 1:j])
            i = j + 1
            continue
        if "=" in line:
            name, value = line.split("=", 1)
            out[name] = value
        i += 1
    return out


# --- expressions -------------------------------------------------------------------------------
def _lookup(path: str, ctx: dict) -> str:
    value = ctx
    for part in path.split("."):
        value = value.get(part, "") if isinstance(value, dict) else ""
    return "" if value is None else value


def _substitute(text: str, ctx: dict) -> str:
    return EXPR.sub(lambda m: str(_value(m.group(1), ctx)), text)


_TOKEN = re.compile(r"\s*(always\(\)|success\(\)|failure\(\)|&&|\|\||==|!=|<=|>=|<|>|\(|\)|'[^']*'|[0-9]+|"
                    r"[A-Za-z_][A-Za-z0-9_.-]*)")


def _value(expr: str, ctx: dict, failed: bool = False):
    tokens = _TOKEN.findall(expr)
    assert "".join(tokens).replace(" ", "") == expr.replace(" ", ""), f"unsupported expression: {expr}"
    pos = 0

    def atom():
        nonlocal pos
        t = tokens[pos]
        pos += 1
        if t == "(":
            v = disj()
            pos += 1
            return v
        if t == "always()":
            return True
        if t == "success()":
            return not failed
        if t == "failure()":
            return failed
        if t.startswith("'"):
            return t[1:-1]
        if t.isdigit():
            return int(t)
        if t in ("true", "false"):
            return t == "true"
        return _lookup(t, ctx)

    def comparison():
        nonlocal pos
        left = atom()
        if pos < len(tokens) and tokens[pos] in ("==", "!=", "<", ">", "<=", ">="):
            op = tokens[pos]
            pos += 1
            right = atom()
            if op in ("==", "!="):
                equal = str(left).lower() == str(right).lower() if isinstance(left, str) or isinstance(right, str) \
                    else left == right
                return equal if op == "==" else not equal
            a, b = _number(left), _number(right)
            return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]
        return left

    def conj():
        nonlocal pos
        v = comparison()
        while pos < len(tokens) and tokens[pos] == "&&":
            pos += 1
            w = comparison()
            v = v and w
        return v

    def disj():
        nonlocal pos
        v = conj()
        while pos < len(tokens) and tokens[pos] == "||":
            pos += 1
            w = conj()
            v = v or w
        return v

    return disj()


def _number(v) -> float:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(v) if str(v).strip() else 0.0
    except ValueError:
        return float("nan")


def evaluate(condition: str, ctx: dict, failed: bool) -> bool:
    """A step's ``if``: without a status function, GitHub adds ``success() &&``."""
    expr = EXPR.sub(lambda m: m.group(1), condition).strip()
    if not re.search(r"\b(always|success|failure|cancelled)\(\)", expr):
        expr = f"success() && ({expr})"
    return bool(_value(expr, ctx, failed))
