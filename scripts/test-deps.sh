#!/usr/bin/env bash
# Everything `make test` needs beside Rust, installed in one go: the Debian packages that are
# missing (one `apt-get update` for all), then the pinned npm and Python packages, through the
# scripts that each step also calls (they find it all there and say nothing). `make test`
# runs it in the background while the compiler works (scripts/background.sh), since both take
# minutes and the downloads need little CPU, and waits for it before the first step that
# needs any of it.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)

say() { echo "test-deps: $*" >&2; }
die() { say "$*"; exit 1; }

# The Debian packages whose file or command is missing here, one a line.
missing_debian() {
    command -v node >/dev/null && command -v npm >/dev/null || echo nodejs npm
    [ -x /usr/bin/chromium ] || echo chromium
    command -v jq >/dev/null || echo jq
    command -v sqlite3 >/dev/null || echo sqlite3
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || echo postgresql
    python3 -c 'import ensurepip, venv' 2>/dev/null || echo python3-venv
    [ -f /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 ] || echo faketime
}

install_all() {
    local started=$SECONDS packages
    packages=$(missing_debian | tr '\n' ' ')
    if [ -n "${packages// /}" ]; then
        # shellcheck disable=SC2086  # one word per package
        "$root/scripts/debian-install.sh" test-deps "what make test runs" $packages
    fi
    "$root/scripts/node-deps.sh"
    "$root/scripts/browser-deps.sh"
    "$root/scripts/webhook-deps.sh"
    "$root/scripts/faketime.sh" >/dev/null
    [ tests/docs/node_modules/.package-lock.json -nt tests/docs/package-lock.json ] ||
        npm ci --prefix "$root/tests/docs" --no-audit --no-fund --loglevel=error >&2
    "$root/scripts/openapi-check.sh" --install
    "$root/scripts/api-fuzz.sh" --install
    say "everything make test needs is here ($((SECONDS - started)) s)"
}

cd "$root"
[ $# -eq 0 ] || die "usage: scripts/test-deps.sh (it takes no arguments)"
install_all
