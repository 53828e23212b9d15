"""Pin perfreport's own references in the copy-paste workflows to a release's commit.

Usage (after tagging and pushing a release):  python scripts/pin_examples.py v0.2.0

Every ``uses: perfreport/perfreport@…``, ``pip install "perfreport @ git+…@…"`` and
``--install-from perfreport/perfreport@…`` (the comment's "Reproduce locally" line) in
``examples/workflows/``, ``README.md`` and ``docs/github-action.md`` gets the tag's full commit
SHA (``git rev-parse TAG^{commit}``) with the tag in a comment. A tag can be moved; a commit
cannot, so a workflow that copied the example runs exactly the code that was released — which
matters most in ``perfreport-comment.yml``, which holds a token that can write PR comments.

Until the first release the examples carry the all-zero SHA: a workflow copied from them fails
to resolve the action instead of running a moving target.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FILES = [*sorted((REPO / "examples" / "workflows").glob("*.yml")), REPO / "README.md", REPO / "docs" / "github-action.md"]
USES = re.compile(r"(perfreport/perfreport@)[0-9a-f]{40}( # )v\d+\.\d+\.\d+")
PIP = re.compile(r"(perfreport/perfreport@)[0-9a-f]{40}(\")")
INSTALL_FROM = re.compile(r"(--install-from perfreport/perfreport@)[0-9a-f]{40}\b")
VERSION_NOTE = re.compile(r"(# )v\d+\.\d+\.\d+\S*(; scripts/pin_examples\.py)")


def pin(text: str, sha: str, tag: str) -> str:
    text = USES.sub(lambda m: f"{m.group(1)}{sha}{m.group(2)}{tag}", text)
    text = PIP.sub(lambda m: f"{m.group(1)}{sha}{m.group(2)}", text)
    text = INSTALL_FROM.sub(lambda m: f"{m.group(1)}{sha}", text)
    return VERSION_NOTE.sub(lambda m: f"{m.group(1)}{tag}{m.group(2)}", text)


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not re.fullmatch(r"v\d+\.\d+\.\d+", argv[0]):
        print("usage: python scripts/pin_examples.py vX.Y.Z  (a pushed release tag)", file=sys.stderr)
        return 2
    tag = argv[0]
    got = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "--quiet", f"{tag}^{{commit}}"],
                         capture_output=True, text=True)
    if got.returncode != 0:
        print(f"{tag}: no such tag in {REPO}", file=sys.stderr)
        return 2
    sha = got.stdout.strip()
    for path in FILES:
        old = path.read_text(encoding="utf-8")
        new = pin(old, sha, tag)
        if new != old:
            path.write_text(new, encoding="utf-8")
            print(f"{path.relative_to(REPO)}: perfreport pinned to {sha} ({tag})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
