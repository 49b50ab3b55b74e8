#!/usr/bin/env bash
# The web console in a real browser: tests/console/walk.mjs drives Debian's headless Chromium
# (playwright-core) through the console of a running tenantd, as a person would, and checks it
# with axe-core. This script builds nothing: it starts, on 127.0.0.1 with temporary databases
# and admin token files,
#   - tenantd A (the admin token, webhooks to http:// and private addresses allowed): the walk;
#   - the identity provider of tests/oidc/ (oidc-provider) with a public client for the
#     console, and tenantd B taking its tokens (--oidc-issuer, --console-oidc-client-id):
#     "Sign in with …" by authorization code and PKCE;
# runs the test (at most CONSOLE_TEST_TIMEOUT seconds, default 300), and stops all it started,
# whatever happens. Screenshots land in target/console/. Needs scripts/node-deps.sh and
# scripts/browser-deps.sh first; runs as root or not, without a display.
#
#   scripts/console-test.sh
#
# Environment:
#   TENANTD_BIN          the binary (default target/release/tenantd)
#   TENANTD_CONSOLE_DIR  serve the console's files from this directory, read at every
#                        request, rather than those built into the binary (--console-dir)
#   CONSOLE_TEST_TIMEOUT seconds the browser test may take (default 300)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${TENANTD_BIN:-$root/target/release/tenantd}
console_dir=${TENANTD_CONSOLE_DIR:-}
run_timeout=${CONSOLE_TEST_TIMEOUT:-300}
START_TIMEOUT=30         # seconds a server or the provider may take to listen
OIDC_CLIENT_ID=tenantd-console

say() { echo "console-test: $*" >&2; }
die() { say "$*"; exit 1; }

[ -x "$bin" ] || die "no tenantd binary at $bin (make build, or set TENANTD_BIN)"
[ -x /usr/bin/chromium ] || die "/usr/bin/chromium is missing: run scripts/browser-deps.sh"
[ -d "$root/tests/console/node_modules/playwright-core" ] \
    || die "tests/console has no node_modules: run scripts/browser-deps.sh"
[ -d "$root/tests/oidc/node_modules/oidc-provider" ] \
    || die "tests/oidc has no node_modules: run scripts/node-deps.sh"
if [ -n "$console_dir" ]; then
    [ -f "$console_dir/index.html" ] || die "TENANTD_CONSOLE_DIR=$console_dir holds no index.html"
    console_dir=$(cd "$console_dir" && pwd)
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tenantd-console-test.XXXXXX")
# Every process whose command line names $work (a regular expression of it, taken literally).
work_pattern=$(printf '%s' "$work" | sed 's/[][\\.*^$+?(){}|]/\\&/g')
pids=()
test_pid=
# Stops every process still running with $work in its command line: Chromium (its
# --user-data-dir is under $work/browser) and the servers (their --db). SIGTERM, up to 5 s to
# exit, then SIGKILL, up to 2 s more.
stop_work_processes() {
    local tries
    pkill -f -- "$work_pattern" 2>/dev/null || true
    for ((tries = 0; tries < 50; tries++)); do
        pgrep -f -- "$work_pattern" >/dev/null || return 0
        sleep 0.1
    done
    say "still running 5 s after SIGTERM, killed:"; pgrep -a -f -- "$work_pattern" >&2 || true
    pkill -9 -f -- "$work_pattern" 2>/dev/null || true
    for ((tries = 0; tries < 20; tries++)); do
        pgrep -f -- "$work_pattern" >/dev/null || return 0
        sleep 0.1
    done
    say "still running after SIGKILL:"; pgrep -a -f -- "$work_pattern" >&2 || true
}
cleanup() {
    local status=$?
    # The test and its timeout run in a session of their own (setsid): its group holds them,
    # but not Chromium, which Playwright starts detached, in a session of its own, so that it
    # outlives a test killed by timeout. Every Chromium process names its profile, under
    # $work, on its command line: stop_work_processes finds them by it.
    [ -n "$test_pid" ] && kill -- "-$test_pid" 2>/dev/null || true
    [ -n "$test_pid" ] && wait "$test_pid" 2>/dev/null || true
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    stop_work_processes
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    exec 3>&-
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# A port free now, for a process that must know another's port before it starts.
free_port() {
    node -e 'const s = require("net").createServer();
             s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

# Waits until LOG holds a line matching PATTERN, while PID lives; prints the line.
wait_for_line() {
    local name=$1 log=$2 pattern=$3 pid=$4 deadline=$((SECONDS + START_TIMEOUT)) line
    while :; do
        line=$(grep -m1 -E "$pattern" "$log" 2>/dev/null || true)
        if [ -n "$line" ]; then echo "$line"; return 0; fi
        if ! kill -0 "$pid" 2>/dev/null; then
            say "$name exited before it listened; its log:"; cat "$log" >&2; return 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            say "$name did not listen within ${START_TIMEOUT}s; its log:"; cat "$log" >&2; return 1
        fi
        sleep 0.1
    done
}

(umask 077 && head -c 32 /dev/urandom | od -An -vtx1 | tr -d ' \n' > "$work/admin.token")
serve_flags=(--admin-token-file "$work/admin.token")
[ -n "$console_dir" ] && serve_flags+=(--console-dir "$console_dir")

# tenantd A: the walk.
"$bin" serve --listen 127.0.0.1:0 --db "$work/a.db" "${serve_flags[@]}" \
    --webhook-allow-http --webhook-allow-private >"$work/a.log" 2>&1 &
pids+=($!)
line=$(wait_for_line "tenantd A" "$work/a.log" 'listening on http://127\.0\.0\.1:[0-9]+' "${pids[-1]}")
url_a=$(grep -oE 'http://127\.0\.0\.1:[0-9]+' <<<"$line" | head -n1)

# The identity provider, then tenantd B whose console signs in there. The provider stops
# when its standard input closes: fd 3 of this shell holds the FIFO open until the end.
provider_port=$(free_port)
port_b=$(free_port)
issuer="http://127.0.0.1:$provider_port"
url_b="http://127.0.0.1:$port_b"
mkfifo "$work/provider.stdin"
(cd "$root/tests/oidc" && exec node provider.mjs --port "$provider_port" \
    --public-client "$OIDC_CLIENT_ID" --redirect-uri "$url_b/console/") \
    <"$work/provider.stdin" >"$work/provider.log" 2>&1 &
pids+=($!)
exec 3>"$work/provider.stdin"
wait_for_line "the identity provider" "$work/provider.log" "^listening on $issuer\$" "${pids[-1]}" >/dev/null

"$bin" serve --listen "127.0.0.1:$port_b" --db "$work/b.db" "${serve_flags[@]}" \
    --oidc-issuer "$issuer" --oidc-audience tenantd --console-oidc-client-id "$OIDC_CLIENT_ID" \
    >"$work/b.log" 2>&1 &
pids+=($!)
wait_for_line "tenantd B" "$work/b.log" "listening on $url_b" "${pids[-1]}" >/dev/null

say "tenantd A on $url_a, tenantd B on $url_b, identity provider on $issuer${console_dir:+, console files from $console_dir}"
# TMPDIR: Playwright makes Chromium's --user-data-dir there, under $work (see cleanup).
mkdir "$work/browser"
CONSOLE_URL=$url_a OIDC_CONSOLE_URL=$url_b OIDC_ISSUER=$issuer \
    ADMIN_TOKEN_FILE="$work/admin.token" SCREENSHOT_DIR="$root/target/console" TMPDIR="$work/browser" \
    setsid timeout --kill-after=10 "$run_timeout" node "$root/tests/console/walk.mjs" </dev/null &
test_pid=$!
test_started=$SECONDS
status=0
wait "$test_pid" || status=$?
if [ "$status" -ne 0 ]; then
    # 124: stopped by SIGTERM at the timeout; 137: killed 10 s later, still running.
    if [ "$status" -eq 124 ] || { [ "$status" -eq 137 ] && [ $((SECONDS - test_started)) -ge "$run_timeout" ]; }; then
        say "the browser test took over ${run_timeout}s"
    fi
    for log in a.log b.log provider.log; do
        say "last lines of $log:"
        tail -n 25 "$work/$log" >&2 || true
    done
    exit "$status"
fi
