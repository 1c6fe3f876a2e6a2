#!/usr/bin/env bash
# Headless Chromium for the browser test (tests/test_book_site.py, helpers.book.browser): Debian's
# package, installed with apt-get where it is missing. Where it cannot be installed (no apt-get, not
# root) this says so and exits 0: the browser test then skips with the same hint.
set -euo pipefail
for c in /usr/lib/chromium/chromium chromium chromium-browser google-chrome; do
  if command -v "$c" >/dev/null 2>&1 || [ -x "$c" ]; then
    echo "browser: $c is installed"; exit 0
  fi
done
if ! command -v apt-get >/dev/null 2>&1; then
  echo "browser: no apt-get here; install Chromium yourself (or set CHROMIUM=/path/to/chromium); the browser test will skip"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "browser: not root and no sudo; run 'apt-get install -y chromium' as root; the browser test will skip"
    exit 0
  fi
fi
echo "browser: installing Debian's chromium (apt-get install -y chromium)"
if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium >/dev/null; }; then
  echo "browser: apt-get could not install chromium (no package list or registry?); the browser test will skip"
  exit 0
fi
command -v chromium
