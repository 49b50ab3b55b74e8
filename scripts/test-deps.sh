#!/usr/bin/env bash
# Everything `make test` needs beside Rust, installed in one go: the Debian packages that are
# missing (one `apt-get update` for all), then the pinned npm and Python packages, through the
# scripts that each step also calls (they find it all there and say nothing). `make test`
# starts it in the background while the compiler works, since both take minutes and the
# downloads need little CPU, and waits for it before the first step that needs any of it.
#
#   scripts/test-deps.sh            installs, in the foreground
#   scripts/test-deps.sh start DIR  the same in the background; its output goes to
#                                   DIR/test-deps.log, its exit status to DIR/test-deps.status
#   scripts/test-deps.sh wait DIR   waits (at most WAIT_TIMEOUT) for the one started in DIR,
#                                   prints its output, and exits with its status
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
WAIT_TIMEOUT=1800  # seconds: every install below is bounded by 900 s, and they run in turn

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
case "${1:-}" in
    "")
        install_all
        ;;
    start)
        [ $# -eq 2 ] || die "usage: scripts/test-deps.sh start DIR"
        mkdir -p "$2"
        rm -f "$2/test-deps.status"
        (
            status=0
            install_all >"$2/test-deps.log" 2>&1 || status=$?
            echo "$status" >"$2/test-deps.status"
        ) </dev/null >/dev/null 2>&1 &
        say "installing in the background (output in $2/test-deps.log)"
        ;;
    wait)
        [ $# -eq 2 ] || die "usage: scripts/test-deps.sh wait DIR"
        waited=0
        until [ -s "$2/test-deps.status" ]; do
            [ -f "$2/test-deps.log" ] || die "nothing was started in $2 (scripts/test-deps.sh start $2)"
            [ "$waited" -lt $((WAIT_TIMEOUT * 10)) ] || die "still installing after ${WAIT_TIMEOUT}s"
            sleep 0.1
            waited=$((waited + 1))
        done
        cat "$2/test-deps.log" >&2
        exit "$(cat "$2/test-deps.status")"
        ;;
    *)
        die "usage: scripts/test-deps.sh [start DIR | wait DIR]"
        ;;
esac
