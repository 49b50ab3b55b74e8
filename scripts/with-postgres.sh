#!/usr/bin/env bash
# Runs a command beside a private PostgreSQL cluster (scripts/postgres.sh), then stops it.
#
#   scripts/with-postgres.sh CMD [ARG ...]
#   PG_DIR=/tmp/tenantd-pg scripts/with-postgres.sh cargo test --release --locked
#
# Starts a fresh cluster in PG_DIR (default target/postgres/primary, relative to the
# repository's top directory), runs CMD with
#   TENANTD_TEST_POSTGRES_URL        PG_DIR/url: role tenantd, database tenantd
#   TENANTD_TEST_POSTGRES_ADMIN_URL  PG_DIR/admin-url: the superuser, database postgres
#   TENANTD_TEST_POSTGRES_CA         PG_DIR/tls/ca.pem: the authority of the server's TLS
#                                    certificate (for sslmode=verify-full)
# exported, and stops the cluster when CMD ends, fails or is interrupted; exits with CMD's
# status. A stopped cluster left in PG_DIR by an earlier run is removed first, so every run
# starts empty. A cluster already running in PG_DIR (`make postgres-up`) is used as it is
# and left running.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
postgres="$root/scripts/postgres.sh"
[ $# -ge 1 ] || { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2; exit 2; }

pg_dir=${PG_DIR:-target/postgres/primary}
case "$pg_dir" in
    /*) ;;
    *) pg_dir="$root/$pg_dir" ;;
esac

if "$postgres" status "$pg_dir" >/dev/null 2>&1; then
    echo "with-postgres: using the cluster already running in $pg_dir (left running)" >&2
else
    if [ -e "$pg_dir" ]; then
        # Only what postgres.sh made is removed: a directory holding a cluster's files.
        [ -e "$pg_dir/data/PG_VERSION" ] || [ -z "$(ls -A "$pg_dir")" ] \
            || { echo "with-postgres: $pg_dir exists and holds no cluster; not removing it" >&2; exit 1; }
        rm -rf "$pg_dir"
    fi
    trap '"$postgres" stop "$pg_dir"' EXIT
    # An interruption ends the script, so the EXIT trap stops the cluster.
    trap 'exit 130' INT
    trap 'exit 143' TERM
    trap 'exit 129' HUP
    "$postgres" start "$pg_dir" >/dev/null
fi

TENANTD_TEST_POSTGRES_URL=$(cat "$pg_dir/url")
TENANTD_TEST_POSTGRES_ADMIN_URL=$(cat "$pg_dir/admin-url")
TENANTD_TEST_POSTGRES_CA="$pg_dir/tls/ca.pem"
export TENANTD_TEST_POSTGRES_URL TENANTD_TEST_POSTGRES_ADMIN_URL TENANTD_TEST_POSTGRES_CA
echo "with-postgres: PostgreSQL on 127.0.0.1:$(cat "$pg_dir/port") (log: $pg_dir/log): $*" >&2
"$@"
