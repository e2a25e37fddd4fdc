#!/usr/bin/env bash
# Make sure Debian's Chromium is there for the dashboard's browser tests (Playwright drives
# /usr/bin/chromium; no browser is downloaded). Installs the `chromium` package with apt when
# it is missing. Without root (or passwordless sudo) it says so: CI then fails in the browser
# tests, a local run skips them with the reason.
set -euo pipefail
CHROMIUM="${RELAYMQ_CHROMIUM:-/usr/bin/chromium}"
[ -x "$CHROMIUM" ] && exit 0
if [ "$(id -u)" = 0 ]; then SUDO=""
elif sudo -n true 2>/dev/null; then SUDO="sudo -n"
else
  echo "chromium: $CHROMIUM is missing and apt needs root: sudo apt-get install chromium" >&2
  exit 0
fi
echo "chromium: installing Debian's chromium with apt"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get install -y -q chromium >/dev/null 2>&1 \
  || { $SUDO apt-get update -q >/dev/null && $SUDO apt-get install -y -q chromium >/dev/null; }
"$CHROMIUM" --version
