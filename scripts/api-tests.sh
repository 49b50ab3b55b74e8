#!/usr/bin/env bash
# The black-box suite (tests/api) as `make test`, `make check` and `make crash-test` run it.
#
#   scripts/api-tests.sh [ARGS...]
#   scripts/api-tests.sh --no-run        # only compiles it
#
# ARGS go to the test binary, as after `cargo test --test api --`: names to filter by,
# `--skip NAME`, `--nocapture`. TENANTD_TEST_BACKEND=postgres runs it on PostgreSQL (see
# tests/api/helpers/pg.rs).
#
# It is `cargo test --release --locked --test api`, but for one thing: the suite's own code
# (the requests it sends and the checks it makes) is compiled at opt-level 1. The binary under
# test and the library are the release build, exactly as `cargo build --release` makes them;
# only the test crate, some 22,000 lines that mostly build JSON and compare it, is optimised
# less: at opt-level 3 it alone takes four minutes of CPU to compile, at 1 under one.
#
# Most tests spend their time waiting (for the server, the receiver, PostgreSQL or a period to
# pass), so four run at once on two cores unless RUST_TEST_THREADS says otherwise.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

say() { echo "api-tests: $*" >&2; }

# `cargo rustc` builds the target's dependencies (the binary under test included, for
# CARGO_BIN_EXE_tenantd) as `cargo test` would, and passes the flags after `--` to the test
# crate alone. Its JSON messages name the test executable.
built=$(cargo rustc --release --locked --test api --message-format=json-render-diagnostics \
    -- -C opt-level=1)
exe=$(printf '%s\n' "$built" | grep '"name":"api","src_path"' \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -n "$exe" ] && [ -x "$exe" ] || { say "cargo rustc named no test executable"; exit 1; }
if [ "${1:-}" = --no-run ]; then
    say "built $exe"
    exit 0
fi

export RUST_TEST_THREADS="${RUST_TEST_THREADS:-4}"
say "$exe ${TENANTD_TEST_BACKEND:+(TENANTD_TEST_BACKEND=$TENANTD_TEST_BACKEND) }$RUST_TEST_THREADS at a time"
exec "$exe" "$@"
