#!/usr/bin/env bash
# Render a perfreport HTML report in headless Chromium to a PNG (1280 px wide, full page) and
# its PDF to one PNG per page with pdftoppm, so a person can look at them.
#
#   scripts/snapshot_report.sh REPORT_DIR [OUT_DIR]
#
# REPORT_DIR holds report.html and/or report.pdf (as written by `perfreport analyze/compare
# --format html,pdf`). PNGs go to OUT_DIR (default REPORT_DIR/snapshots): report-1280.png and
# report-page-N.png. Installs chromium and poppler-utils with apt-get when they are missing.
# The blank bottom of the page shot is trimmed when $PYTHON (default python3) has Pillow; old
# snapshots in OUT_DIR are removed first. Chromium's log goes to OUT_DIR/chromium.log.
set -euo pipefail

report_dir=${1:?usage: scripts/snapshot_report.sh REPORT_DIR [OUT_DIR]}
out_dir=${2:-$report_dir/snapshots}
mkdir -p "$out_dir"
rm -f "$out_dir"/report-1280.png "$out_dir"/report-page-*.png

need() { command -v "$1" >/dev/null 2>&1; }
if ! need pdftoppm || ! { need chromium || need chromium-browser || need google-chrome; }; then
    echo "snapshot_report: installing chromium and poppler-utils" >&2
    apt-get update >/dev/null && apt-get install -y chromium poppler-utils >/dev/null
fi
chrome=$(command -v chromium || command -v chromium-browser || command -v google-chrome)

if [[ -f "$report_dir/report.html" ]]; then
    profile=$(mktemp -d)
    trap 'rm -rf "$profile"' EXIT
    html=$(cd "$report_dir" && pwd)/report.html
    # Chromium's --screenshot captures the window, and the page has no script to report its
    # height: shoot a tall window (SNAPSHOT_HEIGHT, default 32000 px) and trim the blank bottom.
    height=${SNAPSHOT_HEIGHT:-32000}
    "$chrome" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$profile" --hide-scrollbars --force-device-scale-factor=1 \
        --window-size=1280,"$height" --screenshot="$out_dir/report-1280.png" "file://$html" \
        >/dev/null 2>"$out_dir/chromium.log" || { cat "$out_dir/chromium.log" >&2; exit 1; }
    "${PYTHON:-python3}" - "$out_dir/report-1280.png" <<'PY' || true
import sys
try:
    from PIL import Image
except ImportError:
    sys.exit(0)
path = sys.argv[1]
img = Image.open(path).convert("RGB")
# trim the blank bottom: last row that is not plain white
w, h = img.size
px = img.load()
bottom = h
for y in range(h - 1, 0, -8):
    if any(px[x, y] != (255, 255, 255) for x in range(0, w, 4)):
        bottom = min(h, y + 40)
        break
img.crop((0, 0, w, bottom)).save(path)
if bottom >= h:
    print(f"snapshot_report: the page may be taller than {h} px; raise SNAPSHOT_HEIGHT", file=sys.stderr)
PY
    echo "$out_dir/report-1280.png"
fi

if [[ -f "$report_dir/report.pdf" ]]; then
    pdftoppm -png -r 80 "$report_dir/report.pdf" "$out_dir/report-page"
    ls "$out_dir"/report-page*.png
fi
