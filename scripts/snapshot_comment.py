"""Render the PR comment perfreport would post for a report folder, as GitHub shows it, to a PNG.

    python scripts/snapshot_comment.py REPORT_DIR OUT.png [--width 900]

The body is made exactly as ``perfreport github comment`` makes it (from report.json, with
example artifact and run links), converted with markdown-it-py's GitHub-like preset (tables,
strikethrough, raw ``<details>``), styled like a GitHub comment and shot in headless Chromium.
Needs ``pip install markdown-it-py`` and Chromium; neither is a perfreport dependency.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CSS = """
body { margin: 0; background: #fff; font: 14px/1.5 -apple-system, "Segoe UI", "Noto Sans", "DejaVu Sans", Arial, sans-serif;
       color: #1f2328; }
.comment { border: 1px solid #d0d7de; border-radius: 6px; margin: 16px; }
.head { background: #f6f8fa; border-bottom: 1px solid #d0d7de; padding: 8px 16px; color: #59636e;
        border-radius: 6px 6px 0 0; }
.head b { color: #1f2328; }
.body { padding: 16px; }
h3 { font-size: 1.25em; margin: 0 0 8px; } h4 { font-size: 1em; margin: 16px 0 8px; }
table { border-collapse: collapse; display: block; overflow: auto; margin: 8px 0; }
th, td { border: 1px solid #d0d7de; padding: 6px 13px; } tr:nth-child(2n) { background: #f6f8fa; }
th { font-weight: 600; }
code { background: rgba(175,184,193,.2); border-radius: 6px; padding: .2em .4em; font-size: 85%; }
blockquote { color: #59636e; border-left: .25em solid #d0d7de; margin: 0; padding: 0 1em; }
details { margin: 8px 0; } summary { cursor: pointer; }
a { color: #0969da; text-decoration: none; }
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("report_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--width", type=int, default=900)
    ap.add_argument("--height", type=int, default=1100)
    args = ap.parse_args()
    from markdown_it import MarkdownIt

    from perfreport.github.comment import comment_body, read_document

    run = "https://github.com/octo/widgets/actions/runs/1234"
    body = comment_body(read_document(args.report_dir), "", artifact_url=f"{run}/artifacts/5678", run_url=run)
    html = MarkdownIt("gfm-like", {"html": True, "linkify": False}).disable("linkify").render(body)
    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{CSS}</style></head><body>"
            f"<div class='comment'><div class='head'><b>github-actions</b> bot commented</div>"
            f"<div class='body'>{html}</div></div></body></html>")
    chrome = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not chrome:
        print("snapshot_comment: needs Chromium", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "comment.html"
        src.write_text(page, encoding="utf-8")
        subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={tmp}/profile", "--hide-scrollbars", "--force-device-scale-factor=1",
                        f"--window-size={args.width},{args.height}", f"--screenshot={args.out.resolve()}",
                        src.as_uri()], check=True, capture_output=True, timeout=120)
    print(f"wrote {args.out} ({len(body)} characters of comment)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
