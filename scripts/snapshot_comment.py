"""Picture the PR comment perfreport posts for a report folder, as GitHub shows it, for the README.

    python scripts/snapshot_comment.py REPORT_DIR OUT.png [--width 1000] [--height 1400]

The body is made exactly as ``perfreport github comment`` makes it (from report.json, with
example commits, artifact, run and archive links), rendered with python-markdown (tables, and Markdown inside
``<details>``) into a page with GitHub-like CSS (a comment box: header line, system font,
bordered tables), shot in headless Chromium, trimmed and palettised so the PNG stays small.
Needs the ``docs`` extra (``pip install -e ".[docs]"``: markdown) and Chromium; Pillow comes
with matplotlib.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

CSS = """
body { margin: 0; background: #fff; font: 14px/1.5 -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial,
       sans-serif; color: #1f2328; }
.comment { margin: 16px; border: 1px solid #d1d9e0; border-radius: 6px; }
.comment-head { background: #f6f8fa; border-bottom: 1px solid #d1d9e0; padding: 8px 16px; color: #59636e;
                border-radius: 6px 6px 0 0; }
.comment-head b { color: #1f2328; }
.markdown-body { padding: 16px; }
.markdown-body h3 { font-size: 1.25em; margin: 0 0 8px; }
.markdown-body h4 { font-size: 1em; margin: 16px 0 8px; }
.markdown-body p, .markdown-body ol, .markdown-body ul { margin: 0 0 10px; }
.markdown-body table { border-collapse: collapse; margin: 0 0 12px; display: block; overflow: auto; }
.markdown-body th, .markdown-body td { border: 1px solid #d1d9e0; padding: 4px 10px; }
.markdown-body th { font-weight: 600; background: #f6f8fa; }
.markdown-body tr:nth-child(2n) td { background: #f6f8fa; }
.markdown-body blockquote { margin: 0 0 10px; padding: 0 12px; color: #59636e; border-left: 4px solid #d1d9e0; }
.markdown-body details { margin: 0 0 8px; }
.markdown-body summary { cursor: pointer; }
.markdown-body a { color: #0969da; text-decoration: none; }
.markdown-body sub { color: #59636e; }
"""
RUN = "https://github.com/octo/widgets/actions/runs/1234"
HEAD, BASE, MERGE = "c0ffee1" + "0" * 33, "ba5e002" + "0" * 33, "3e26e03" + "0" * 33
"""Example commits of an example PR (the picture shows where line 2's links go)."""
ACTION_SHA = "ac71010" + "0" * 33  # the commit of perfreport the Action ran (github.action_ref)


def render(md_text: str) -> str:
    import markdown

    body = markdown.markdown(md_text, extensions=["tables", "md_in_html"])
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><style>{CSS}</style></head><body>"
            f"<div class='comment'><div class='comment-head'><b>github-actions</b> bot commented</div>"
            f"<div class='markdown-body'>{body}</div></div></body></html>")


def main() -> None:
    from perfreport.github.comment import comment_body, read_document
    from perfreport.github.links import CommentLinks, Refs

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--width", type=int, default=1000)
    ap.add_argument("--height", type=int, default=1400)
    args = ap.parse_args()
    chrome = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not chrome:
        raise SystemExit("snapshot_comment: Chromium is needed")
    document = read_document(args.report_dir)
    document.setdefault("candidate", {})["commit"] = document["candidate"].get("commit") or MERGE
    refs = Refs(HEAD, "fast-loader", BASE, "main")
    links = CommentLinks("https://github.com", "octo/widgets", refs, run_url=RUN, run_id="1234",
                         artifact_url=f"{RUN}/artifacts/5678", artifact_name="perfreport-report",
                         archive_url="https://octo.github.io/widgets/",
                         install_from=f"perfreport/perfreport@{ACTION_SHA}")
    body = comment_body(document, "", links=links, report_dir=args.report_dir)
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "comment.html"
        page.write_text(render(body), encoding="utf-8")
        shot = Path(tmp) / "shot.png"
        subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                        "--disable-background-networking", "--disable-component-update", "--disable-sync",
                        f"--user-data-dir={tmp}/profile", "--hide-scrollbars", "--force-device-scale-factor=1",
                        f"--window-size={args.width},{args.height}", f"--screenshot={shot}", page.as_uri()],
                       check=True, capture_output=True, timeout=120)
        small(shot, args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB; the comment is {len(body):,} characters)")


def small(src: Path, dst: Path) -> None:
    """Trim the blank bottom and palettise: a screenshot of text needs few colours."""
    from PIL import Image, ImageChops

    img = Image.open(src).convert("RGB")
    bbox = ImageChops.difference(img, Image.new("RGB", img.size, (255, 255, 255))).getbbox()
    if bbox:
        img = img.crop((0, 0, img.width, min(img.height, bbox[3] + 16)))
    img.quantize(colors=64, method=Image.Quantize.MEDIANCUT).save(dst, optimize=True)


if __name__ == "__main__":
    main()
