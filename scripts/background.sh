#!/usr/bin/env bash
# One step of `make test` run beside the others: started in the background, waited for later.
#
#   scripts/background.sh start DIR COMMAND [ARGS...]
#       runs COMMAND in the background; its output goes to DIR/output.log, its exit status
#       to DIR/status. DIR is emptied of both first.
#   scripts/background.sh wait DIR SECONDS
#       waits at most SECONDS for the one started in DIR, prints its output, and exits with
#       its status (1 if it did not end in time; it is then stopped).
#
# make test runs the installs (scripts/test-deps.sh) beside clippy, and Schemathesis beside
# the PostgreSQL pass of the api suite: steps that need little of the CPU the other one uses.
set -euo pipefail

say() { echo "background: $*" >&2; }
die() { say "$*"; exit 2; }

case "${1:-}" in
    start)
        [ $# -ge 3 ] || die "usage: scripts/background.sh start DIR COMMAND [ARGS...]"
        dir=$2
        shift 2
        mkdir -p "$dir"
        rm -f "$dir/status" "$dir/output.log" "$dir/pid"
        (
            status=0
            "$@" >"$dir/output.log" 2>&1 || status=$?
            echo "$status" >"$dir/status"
        ) </dev/null >/dev/null 2>&1 &
        echo "$!" >"$dir/pid"
        say "started $* (output in $dir/output.log)"
        ;;
    wait)
        [ $# -eq 3 ] && [[ $3 =~ ^[1-9][0-9]*$ ]] || die "usage: scripts/background.sh wait DIR SECONDS"
        dir=$2
        [ -f "$dir/pid" ] || die "nothing was started in $dir (scripts/background.sh start $dir …)"
        deadline=$((SECONDS + $3))
        until [ -s "$dir/status" ]; do
            if [ "$SECONDS" -ge "$deadline" ]; then
                cat "$dir/output.log" >&2
                say "$dir: still running after $3 s; stopping it"
                pkill -TERM -P "$(cat "$dir/pid")" 2>/dev/null || true
                exit 1
            fi
            sleep 0.1
        done
        cat "$dir/output.log" >&2
        exit "$(cat "$dir/status")"
        ;;
    *)
        die "usage: scripts/background.sh start DIR COMMAND [ARGS...] | wait DIR SECONDS"
        ;;
esac
