#!/usr/bin/env bash
# What the console's browser test (scripts/console-test.sh) needs beyond Node.js: Debian's
# Chromium (/usr/bin/chromium, installed with apt-get as root when missing) and the pinned npm
# packages of tests/console/ (playwright-core, @axe-core/playwright, axe-core), installed with
# `npm ci` unless its node_modules already matches its lock file. Quiet when all is there.
# scripts/node-deps.sh installs Node.js and npm first.
#
#   scripts/browser-deps.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
INSTALL_TIMEOUT=900  # seconds for npm ci
CHROMIUM=/usr/bin/chromium

say() { echo "browser-deps: $*" >&2; }
die() { say "$*"; exit 1; }

if [ ! -x "$CHROMIUM" ]; then
    "$root/scripts/debian-install.sh" browser-deps "$CHROMIUM" chromium
    [ -x "$CHROMIUM" ] || die "apt-get installed chromium, but $CHROMIUM is not there"
fi

command -v npm >/dev/null 2>&1 || die "npm is missing: run scripts/node-deps.sh first"

# npm ci writes node_modules/.package-lock.json; the same lock means nothing to do.
dir="$root/tests/console"
installed="$dir/node_modules/.package-lock.json"
if [ ! -f "$installed" ] || [ "$dir/package-lock.json" -nt "$installed" ]; then
    say "installing the pinned packages (npm ci in tests/console)"
    timeout "$INSTALL_TIMEOUT" npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >&2 \
        || die "npm ci in tests/console failed (or took over ${INSTALL_TIMEOUT}s)"
fi
