"""Where the PR comment leads: the commits compared, the run, the artifact, the archive, and the
commands that reproduce the report on a laptop.

Line 2 of the comment names what was compared, as a reviewer asks it: the PR's head commit and
branch against its base commit and branch (and the merge commit the job actually ran, when it
differs), the stored baseline and the commit it was recorded from, then links to the run, the
report artifact and the release archive's trend page. Folded below the report, "Reproduce
locally" gives the exact commands: download this run's artifact with ``gh``, install the
perfreport the job ran, check out the commit, and run the same ``perfreport compare``; and it
says how to open the step traces in the artifact.

Which perfreport: the name ``perfreport`` on PyPI belongs to another project, so the block never
says ``pip install "perfreport==X"``. The job's own code is known to the command that posts the
comment (``--install-from OWNER/REPO@REF``: the Action passes ``github.action_repository`` and
``github.action_ref``; the fork-safe workflow passes the commit it installed), and the block
installs exactly that with ``pip install "perfreport @ git+https://github.com/OWNER/REPO@REF"``.
Without it, only a comment names the version.

Where each commit comes from: the PR's head and base from the event payload
(``pull_request.head.sha`` / ``base.sha``; under ``workflow_run``, the run's ``head_sha`` and the
PR object the API returned when the PR was looked up by that commit); the commit the job ran
from ``report.json`` (``candidate.commit``, which ``perfreport compare`` takes from
``$GITHUB_SHA``); the baseline's from the store's manifest (``baseline save --commit``,
default ``$GITHUB_SHA``). Everything taken from ``report.json`` or the artifact is data from a
possibly untrusted run: SHAs must be hex, versions and names are checked or escaped, and a
command argument that is not plain text is shown as a placeholder, never pasted.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..report.templates import escape_markdown
from ..step_trace import FOLDER as STEP_TRACE_FOLDER
from ..step_trace import INDEX as STEP_TRACE_INDEX
from ..step_trace import MAX_BYTES as STEP_TRACE_MAX_BYTES
from .context import Context

_SHA = re.compile(r"^[0-9a-f]{7,64}$")
_VERSION = re.compile(r"^[0-9]+(\.[0-9]+){1,3}([.-]?[A-Za-z0-9.]+)?$")
_ARG = re.compile(r"^[A-Za-z0-9_.,:=@%+/-]{1,300}$")
_FILE = re.compile(r"^[A-Za-z0-9_.-]{1,120}\.json$")
_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_RUN_ID = re.compile(r"^[0-9]{1,20}$")
_OWNER_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9_.-]{1,100}$")
_GIT_SHA = re.compile(r"^[0-9a-f]{40}$")
_GIT_REF = re.compile(r"^[A-Za-z0-9._/-]{1,200}$")
PYPI_NOTE = "install from its repository; the PyPI name 'perfreport' is another project"
SHORT = 7
LOCAL_OUT = "perfreport-local"
ARTIFACT_DIR = "perfreport-report"


@dataclass(frozen=True)
class Refs:
    """The PR's two ends; "" where unknown."""

    head_sha: str = ""
    head_ref: str = ""
    base_sha: str = ""
    base_ref: str = ""


def refs_from_pull(pull: Mapping | None) -> Refs:
    """Head and base of a PR object (the event's ``pull_request``, an API answer, or an entry of
    ``workflow_run.pull_requests``)."""
    if not isinstance(pull, Mapping):
        return Refs()
    head = pull.get("head") if isinstance(pull.get("head"), Mapping) else {}
    base = pull.get("base") if isinstance(pull.get("base"), Mapping) else {}
    return Refs(_sha(head.get("sha")), _text(head.get("ref")), _sha(base.get("sha")), _text(base.get("ref")))


def refs_from_event(ctx: Context, pull: Mapping | None = None) -> Refs:
    """The PR's refs: from ``pull`` (the PR object the API returned) where given, else from the
    event payload; under ``workflow_run`` the head is always the run's head commit."""
    event = ctx.event
    refs = refs_from_pull(pull) if pull else refs_from_pull(event.get("pull_request"))
    run = event.get("workflow_run") if isinstance(event.get("workflow_run"), Mapping) else None
    if run is not None:
        listed = run.get("pull_requests") if isinstance(run.get("pull_requests"), list) else []
        if not (refs.base_sha or pull) and listed:
            refs = refs_from_pull(listed[0])
        refs = Refs(_sha(run.get("head_sha")) or refs.head_sha, _text(run.get("head_branch")) or refs.head_ref,
                    refs.base_sha, refs.base_ref)
    return refs


@dataclass(frozen=True)
class CommentLinks:
    """Everything the comment links to, gathered from the job's context and the command line."""

    server_url: str = ""
    repository: str = ""
    refs: Refs = Refs()
    run_url: str = ""
    run_id: str = ""
    artifact_url: str = ""
    artifact_name: str = ""
    archive_url: str = ""
    install_from: str = ""  # OWNER/REPO@REF of the perfreport the job ran, validated by install_source

    def commit_url(self, sha: str) -> str:
        if not (self.server_url and _REPO.match(self.repository) and _SHA.match(sha)):
            return ""
        return f"{self.server_url.rstrip('/')}/{self.repository}/commit/{sha}"


def links_for(ctx: Context, refs: Refs, *, artifact_url: str = "", artifact_name: str = "",
              archive_url: str = "", job_id: str = "", install_from: str = "") -> CommentLinks:
    """The links of this job: under ``workflow_run`` the run and artifact are the triggering
    run's (the one that made the report); otherwise, with ``job_id`` (``job.check_run_id``), the
    link goes to this job's own page rather than the whole run."""
    run = ctx.event.get("workflow_run") if isinstance(ctx.event.get("workflow_run"), Mapping) else None
    run_id = str(run.get("id", "")) if run is not None else ctx.run_id
    run_url = ctx.run_url
    if run is None and run_url and _RUN_ID.match(job_id or ""):
        run_url = f"{run_url}/job/{job_id}"
    return CommentLinks(ctx.server_url, ctx.repository, refs, run_url, run_id if _RUN_ID.match(run_id) else "",
                        artifact_url, artifact_name, archive_url, install_source(install_from))


def install_source(text: str) -> str:
    """``OWNER/REPO@REF`` when both halves are plain, else "": the owner and name as GitHub
    allows them, the ref a 40-hex commit or a tag/branch name of ``[A-Za-z0-9._/-]`` that cannot
    be read as an option, a path step or a URL part. What fails is dropped, never pasted."""
    repo, sep, ref = str(text or "").strip().partition("@")
    if not (sep and _OWNER_REPO.match(repo)) or repo.split("/")[1] in (".", ".."):
        return ""
    if not (_GIT_SHA.match(ref) or (_GIT_REF.match(ref) and not ref.startswith(("-", "/", "."))
                                    and ".." not in ref and "//" not in ref and not ref.endswith(("/", ".")))):
        return ""
    return f"{repo}@{ref}"


# --- line 2 --------------------------------------------------------------------------------------
def context_line(document: Mapping, links: CommentLinks) -> str:
    """"Comparing head (sha) with base (sha) · baseline NAME from (sha) · run · artifact · trends"."""
    parts = []
    refs = links.refs
    ran = _sha((document.get("candidate") or {}).get("commit"))
    if refs.head_sha or refs.base_sha:
        text = f"Comparing {_ref(refs.head_ref)}{_commit(links, refs.head_sha)}"
        if refs.base_sha or refs.base_ref:
            text += f" with {_ref(refs.base_ref)}{_commit(links, refs.base_sha)}"
        if ran and ran not in (refs.head_sha, refs.base_sha):
            text += f" (job commit {_commit(links, ran).strip()})"
        parts.append(text)
    elif ran:
        parts.append(f"Candidate commit {_commit(links, ran).strip()}")
    parts.append(baseline_text(document, links))
    run_label = "CI job" if "/job/" in links.run_url else "CI run"
    for label, url in ((run_label, links.run_url), ("report artifact", links.artifact_url),
                       ("release trends", links.archive_url)):
        if url:
            parts.append(f"[{label}]({url})")
    return " · ".join(p for p in parts if p)


def baseline_text(document: Mapping, links: CommentLinks) -> str:
    baseline = document.get("baseline") if isinstance(document.get("baseline"), Mapping) else {}
    stored = baseline.get("stored_baseline") if isinstance(baseline.get("stored_baseline"), Mapping) else None
    if stored is None:
        source = baseline.get("source")
        return f"baseline: traces {escape_markdown(source)}" if source else ""
    name = escape_markdown(stored.get("name") or "?")
    created = str(stored.get("created_utc") or "")[:10]
    created = f", saved {escape_markdown(created)}" if created else ""
    sha = _sha(stored.get("commit"))
    if sha:
        return f"baseline **{name}** from {_commit(links, sha).strip()}{created}"
    return f"baseline **{name}** (commit not recorded{created})"


def _ref(name: str) -> str:
    return f"**{escape_markdown(name)}** " if name else ""


def _commit(links: CommentLinks, sha: str) -> str:
    if not sha:
        return ""
    url = links.commit_url(sha)
    return f"[`{sha[:SHORT]}`]({url})" if url else f"`{sha[:SHORT]}`"


# --- the folded block --------------------------------------------------------------------------
def reproduce_block(document: Mapping, links: CommentLinks, report_dir: str | Path | None = None) -> str:
    """The folded "Reproduce locally" block: exact commands, then the step traces."""
    lines = []
    artifact = links.artifact_name if _FILE.match(links.artifact_name + ".json") else ""
    if links.run_id and artifact and _REPO.match(links.repository):
        lines += [f"# this run's reports and step traces (the artifact {artifact})",
                  f"gh run download {links.run_id} --repo {links.repository} --name {artifact} --dir {ARTIFACT_DIR}"]
    lines += install_lines(document, links)
    ran = _sha((document.get("candidate") or {}).get("commit")) or links.refs.head_sha
    if ran:
        lines += ["# the code and the baseline store the job used", f"git fetch origin {ran} && git checkout {ran}"]
    compare = compare_command(document)
    if compare:
        lines += ["# record the candidate's traces where the job did (see the workflow), then judge them the same way",
                  compare]
    out = ["<details><summary><b>Reproduce locally</b> and look at the step traces</summary>", ""]
    if lines:
        out += ["```sh", *lines, "```", ""]
    out += step_trace_lines(report_dir)
    out += ["</details>"]
    return "\n".join(out)


def install_lines(document: Mapping, links: CommentLinks) -> list[str]:
    """How to install the perfreport that wrote the report: its repository at the ref the job
    installed when known, else a comment naming the version (never a PyPI line: that name is
    another project's)."""
    version = str(document.get("perfreport_version") or "")
    version = version if _VERSION.match(version) else ""
    source = install_source(links.install_from)
    if source:
        repo, _, ref = source.partition("@")
        named = f"perfreport {version}" if version else "the perfreport"
        moving = "" if _GIT_SHA.match(ref) else " (a tag or branch: it may have moved since)"
        return [f"# {named} that wrote this report: the job installed it from {repo} at {ref}{moving}",
                f'pip install "perfreport @ git+https://github.com/{source}"']
    if version:
        return [f"# the report was written by perfreport {version} ({PYPI_NOTE})"]
    return []


def compare_command(document: Mapping) -> str:
    """The report's ``perfreport compare`` command with ``--out`` local and ``--format`` dropped;
    an argument that is not plain text is shown as ``<ARG>``."""
    try:
        argv = shlex.split(str(document.get("command") or ""))
    except ValueError:
        return ""
    if argv[:2] != ["perfreport", "compare"]:
        return ""
    kept, skip = [], False
    for arg in argv[2:]:
        if skip:
            skip = False
            continue
        if arg in ("--out", "--format"):
            skip = True
            continue
        if arg.startswith(("--out=", "--format=")):
            continue
        kept.append(arg if _ARG.match(arg) else "<ARG>")
    return " ".join(["perfreport", "compare", *kept, "--out", LOCAL_OUT])


def step_trace_lines(report_dir: str | Path | None) -> list[str]:
    """What the artifact's ``step-traces/index.json`` says (validated), as Markdown lines."""
    entries = read_step_index(report_dir) if report_dir is not None else []
    if not entries:
        return ["No step traces in this artifact (the action's `step-trace` input, or `perfreport step-trace "
                "--report DIR`, adds them)."]
    out = [f"**Step traces** in the artifact's `{STEP_TRACE_FOLDER}/` (at most "
           f"{STEP_TRACE_MAX_BYTES / 1e6:.0f} MB each): open one at https://ui.perfetto.dev (Open trace file) or "
           "in Chrome at chrome://tracing (Load); `perfreport analyze FILE` reads them too.", ""]
    for e in entries:
        cut = f", cut {e['cut_after_us'] / 1000:.1f} ms into the step" if e["cut_after_us"] is not None else ""
        out.append(f"- {e['side']}: `{e['file']}` — rank {e['rank']}, step {e['step']}, "
                   f"{e['step_time_ms']:.2f} ms, {e['events']:,} events, {e['bytes'] / 1e6:.1f} MB{cut}")
    return out + [""]


def read_step_index(report_dir: str | Path) -> list[dict]:
    """The entries of ``step-traces/index.json`` that are well formed (others are left out)."""
    path = Path(report_dir) / STEP_TRACE_FOLDER / STEP_TRACE_INDEX
    try:
        if not path.is_file() or path.stat().st_size > 1 << 20:
            return []
        steps = json.loads(path.read_text(encoding="utf-8")).get("steps")
    except (OSError, ValueError, AttributeError):
        return []
    out = []
    for e in steps if isinstance(steps, list) else []:
        if not isinstance(e, dict) or e.get("side") not in ("baseline", "candidate"):
            continue
        ints = all(isinstance(e.get(k), int) and not isinstance(e.get(k), bool) and e[k] >= 0
                   for k in ("rank", "step", "events", "bytes"))
        numbers = isinstance(e.get("step_time_ms"), (int, float)) and \
            (e.get("cut_after_us") is None or isinstance(e.get("cut_after_us"), (int, float)))
        if ints and numbers and _FILE.match(str(e.get("file", ""))):
            out.append({k: e[k] for k in ("side", "file", "rank", "step", "step_time_ms", "events", "bytes",
                                          "cut_after_us")})
    return out


def _sha(value) -> str:
    text = str(value or "").strip().lower()
    return text if _SHA.match(text) else ""


def _text(value) -> str:
    return value.strip()[:200] if isinstance(value, str) else ""
