#!/usr/bin/env bash
# A private PostgreSQL cluster for the tests: its own data directory, port and socket, so it
# never touches a system cluster (no pg_ctlcluster, no /etc/postgresql; initdb and pg_ctl
# are run directly).
#
#   scripts/postgres.sh start DIR                      # a primary in DIR; prints its URL
#   scripts/postgres.sh start DIR --standby-of PRIMARY  # a synchronous standby of PRIMARY
#   scripts/postgres.sh stop DIR      # fast shutdown; nothing to do is not an error
#   scripts/postgres.sh promote DIR   # the standby in DIR becomes a primary and takes writes
#   scripts/postgres.sh kill DIR      # kill -9 of the postmaster and its children
#   scripts/postgres.sh status DIR    # exit 0 and print the URL if DIR's server is running
#
# DIR (e.g. target/postgres/primary) is taken relative to the repository's top directory
# unless it is absolute; it may hold only [A-Za-z0-9._/-] and be at most 90 characters (the
# server's unix socket lives in it). It holds:
#   data/       the data directory (initdb: UTF8, C locale, local trust, host scram-sha-256)
#   log         the server's log
#   url         postgres://tenantd:PASS@127.0.0.1:PORT/tenantd (role tenantd: LOGIN, not a
#               superuser, owner of database tenantd)
#   admin-url   postgres://postgres:PASS@127.0.0.1:PORT/postgres (the superuser, for tests
#               that run CREATE DATABASE x OWNER tenantd)
#   port        the TCP port (on 127.0.0.1 only, chosen free; another on a clash)
#   replication-password  the password of role replicator (REPLICATION), used by standbys
#   tls/ca.pem  the authority that signed the server's certificate (for 127.0.0.1 and
#               localhost): sslmode=verify-full&sslrootcert=DIR/tls/ca.pem checks it
#
# `start` installs Debian's postgresql package when no /usr/lib/postgresql/*/bin/initdb is
# there (as root; otherwise it fails and says so) and uses the highest major version found.
# Run as root, the cluster's files belong to the postgres OS user and the server runs as
# that user, so every directory above DIR must be searchable by postgres. On a DIR that
# already holds a stopped cluster, `start` starts it again with its data and passwords (on
# its old port if that is free); on a running one it only prints the URL.
#
# `start DIR --standby-of PRIMARY` copies the running primary in PRIMARY with pg_basebackup
# -R (streaming, as role replicator, application_name the base name of DIR), starts the copy
# on its own port, then sets on the primary synchronous_commit = on and
# synchronous_standby_names = 'FIRST 1 ("<name>", ...)' (every standby made this way, first
# made first), and waits until pg_stat_replication shows the standby as sync. From then on a
# commit on the primary returns only once the standby has it: while no standby is up, the
# primary's commits wait. The standby's url, admin-url and port files are written the same
# way (the same roles and passwords: it is a copy). DIR must not hold a cluster yet.
#
# Every step is bounded in time; a failure prints the tail of DIR/log.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
prog="scripts/postgres.sh"

START_TIMEOUT=30     # seconds for the server to accept connections
STOP_TIMEOUT=60      # seconds for a fast shutdown
PROMOTE_TIMEOUT=30   # seconds for a promoted standby to accept writes
SYNC_TIMEOUT=30      # seconds for a new standby to show as sync
PORT_ATTEMPTS=10

say() { echo "$prog: $*" >&2; }
die() { echo "$prog: error: $*" >&2; exit 1; }

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# The tail of DIR/log, for a failure.
log_tail() {
    local log="$1/log"
    if [ -s "$log" ]; then
        echo "--- last lines of $log:" >&2
        tail -n 30 "$log" >&2
        echo "---" >&2
    fi
}

fail() {
    local dir="$1"
    shift
    echo "$prog: error: $*" >&2
    log_tail "$dir"
    exit 1
}

# DIR made absolute (relative to the repository's top directory) and checked.
absolute_dir() {
    local dir="$1"
    case "$dir" in
        /*) ;;
        *) dir="$root/$dir" ;;
    esac
    dir=$(realpath -m "$dir")
    [[ "$dir" =~ ^/[A-Za-z0-9._/-]+$ ]] \
        || die "$dir: a cluster directory may hold only the characters A-Z a-z 0-9 . _ / -"
    [ "${#dir}" -le 90 ] \
        || die "$dir: longer than 90 characters, too long for the server's unix socket path"
    [ "$dir" != / ] || die "the cluster directory cannot be /"
    echo "$dir"
}

as_root() { [ "$(id -u)" = 0 ]; }

# Runs a command as the cluster's owner (postgres when root), from /, so that a working
# directory postgres cannot enter draws no warnings.
as_owner() {
    if as_root; then
        (cd / && runuser -u postgres -- "$@")
    else
        (cd / && "$@")
    fi
}

# The bin directory of the highest installed major version, or nothing.
find_bin() {
    local initdb
    for initdb in /usr/lib/postgresql/*/bin/initdb; do
        if [ -x "$initdb" ]; then dirname "$initdb"; fi
    done | sort -V | tail -n 1
}

ensure_server() {
    bin=$(find_bin)
    if [ -z "$bin" ]; then
        "$root/scripts/debian-install.sh" "$prog" \
            "a PostgreSQL server (/usr/lib/postgresql/*/bin/initdb)" postgresql
        bin=$(find_bin)
        [ -n "$bin" ] || die "package postgresql installed, yet no /usr/lib/postgresql/*/bin/initdb"
    fi
    if as_root; then
        id postgres >/dev/null 2>&1 \
            || die "no OS user postgres (Debian's postgresql package creates it)"
    fi
}

# Creates DIR for the cluster's owner and checks that the owner can reach it.
prepare_dir() {
    local dir="$1"
    mkdir -p "$dir"
    chmod 700 "$dir"
    if as_root; then
        chown postgres: "$dir"
        if ! runuser -u postgres -- test -w "$dir" -a -x "$dir"; then
            # From the top down, so that the first directory postgres cannot enter is named.
            local p="" part
            IFS=/ read -ra parts <<< "${dir#/}"
            for part in "${parts[@]}"; do
                p="$p/$part"
                [ "$p" != "$dir" ] || break
                runuser -u postgres -- test -x "$p" \
                    || die "$p is not searchable by the OS user postgres, which runs the \
server: make it so (chmod o+x $p) or put the cluster elsewhere (e.g. PG_DIR=/tmp/tenantd-pg)"
            done
            die "$dir is not writable by the OS user postgres"
        fi
    fi
}

# A hex password of 32 characters (URL-safe, no quoting needed anywhere).
new_password() {
    head -c 16 /dev/urandom | od -An -vtx1 | tr -d ' \n'
}

# The password in a postgres://user:PASS@... URL file.
password_in() {
    sed -n 's|^postgres://[^:]*:\([^@]*\)@.*$|\1|p' "$1"
}

# True when process PID exists and is not a zombie (one whose parent is gone may stay
# unreaped in a container whose first process does not reap).
alive() {
    local state
    state=$(sed -n 's/^[0-9]* (.*) \([A-Z]\) .*/\1/p' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

pid_of() {
    local pidfile="$1/data/postmaster.pid"
    [ -r "$pidfile" ] && head -n 1 "$pidfile" || true
}

# True when DIR's postmaster is alive.
running() {
    local pid
    pid=$(pid_of "$1")
    [ -n "$pid" ] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    alive "$pid" || return 1
    case "$(cat "/proc/$pid/comm" 2>/dev/null)" in
        postgres | postmaster) return 0 ;;
        *) return 1 ;;
    esac
}

# psql as the superuser over DIR's unix socket, bounded; extra arguments go to psql.
psql_admin() {
    local dir="$1"
    shift
    as_owner env PGCONNECT_TIMEOUT=5 timeout 60 "$bin/psql" -X -q -A -t -v ON_ERROR_STOP=1 \
        -h "$dir" -p "$(cat "$dir/port")" -U postgres -d postgres "$@"
}

# A port that nothing listens on, below the ephemeral range; the first argument is tried
# first when it is free.
pick_port() {
    local preferred="${1:-}" low high port
    read -r low _ < /proc/sys/net/ipv4/ip_local_port_range || low=32768
    high=$((low - 1))
    [ "$high" -gt 20000 ] || high=65000
    for port in $preferred $(for _ in $(seq 50); do echo $((15000 + RANDOM % (high - 15000))); done); do
        if [ -z "$(ss -Htln "sport = :$port" 2>/dev/null)" ]; then
            echo "$port"
            return
        fi
    done
    die "found no free TCP port"
}

# The settings of the cluster in DIR listening on PORT: included last by postgresql.conf.
write_conf() {
    local dir="$1" port="$2"
    as_owner tee "$dir/data/tenantd.conf" >/dev/null <<EOF
# Written by scripts/postgres.sh start; rewritten on every start.
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
unix_socket_permissions = 0700
cluster_name = 'tenantd-$(basename "$dir")'

# A small test machine (2 cores): room for many test connections, little memory each.
max_connections = 200
shared_buffers = 128MB
work_mem = 4MB
maintenance_work_mem = 64MB
effective_cache_size = 512MB
max_worker_processes = 4
max_parallel_workers = 2
max_parallel_workers_per_gather = 1
timezone = 'UTC'

# Durable commits, as in production.
fsync = on
synchronous_commit = on
full_page_writes = on

# Streaming replication: a standby is a pg_basebackup copy of this cluster.
wal_level = replica
max_wal_senders = 10
wal_keep_size = 256MB
max_wal_size = 512MB
hot_standby = on

# TLS with a certificate of the cluster's own authority (DIR/tls/ca.pem); plain connections
# stay allowed, so a test can use either.
ssl = on
ssl_cert_file = '$dir/tls/server.crt'
ssl_key_file = '$dir/tls/server.key'

logging_collector = off
log_destination = 'stderr'
log_line_prefix = '%m [%p] %q%u@%d '
log_timezone = 'UTC'
password_encryption = scram-sha-256
EOF
}

write_hba() {
    as_owner tee "$1/data/pg_hba.conf" >/dev/null <<'EOF'
# Written by scripts/postgres.sh. The unix socket (mode 0700, in the cluster's directory)
# trusts its owner; TCP is on 127.0.0.1 only, with passwords.
local   all             all                             trust
local   replication     all                             trust
host    all             all             127.0.0.1/32    scram-sha-256
host    replication     replicator      127.0.0.1/32    scram-sha-256
EOF
}

# TLS for the cluster in DIR: a certificate authority of its own (DIR/tls/ca.pem, which a
# client names as sslrootcert) and a server certificate it signed for 127.0.0.1 and
# localhost. Made once; a standby is given its primary's (both serve 127.0.0.1).
make_certs() {
    local dir="$1" tls="$1/tls"
    [ -s "$tls/server.crt" ] && return
    mkdir -p "$tls"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 3650 \
        -subj "/CN=tenantd test CA" -keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null \
        || die "openssl could not make a certificate authority in $tls"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -subj "/CN=127.0.0.1" -keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null \
        || die "openssl could not make a server key in $tls"
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$tls/server.ext"
    openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" \
        -CAcreateserial -days 3650 -extfile "$tls/server.ext" -out "$tls/server.crt" 2>/dev/null \
        || die "openssl could not sign the server certificate in $tls"
    rm -f "$tls/server.csr" "$tls/server.ext" "$tls/ca.key" "$tls/ca.srl"
    chmod 600 "$tls/server.key"
    as_root && chown -R postgres: "$tls"
    chmod 644 "$tls/ca.pem"
}

# Starts the server in DIR, on its old port if free, else on another; retries on a clash.
start_server() {
    local dir="$1" attempt port offset preferred=""
    make_certs "$dir"
    [ -s "$dir/port" ] && preferred=$(cat "$dir/port")
    for attempt in $(seq "$PORT_ATTEMPTS"); do
        port=$(pick_port "$preferred")
        preferred=""
        write_conf "$dir" "$port"
        echo "$port" > "$dir/port"
        offset=$(stat -c %s "$dir/log" 2>/dev/null || echo 0)
        if as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t "$START_TIMEOUT" -s start \
            >/dev/null 2>&1; then
            wait_ready "$dir"
            return
        fi
        if tail -c +"$((offset + 1))" "$dir/log" 2>/dev/null | grep -q "Address already in use"; then
            say "port $port was taken meanwhile; trying another (attempt $attempt)"
            continue
        fi
        running "$dir" && as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -s stop >/dev/null 2>&1 || true
        fail "$dir" "the server in $dir did not start within ${START_TIMEOUT}s"
    done
    fail "$dir" "no free port after $PORT_ATTEMPTS attempts"
}

# Waits (bounded) until the server in DIR accepts connections over TCP.
wait_ready() {
    local dir="$1" deadline=$((SECONDS + START_TIMEOUT))
    until "$bin/pg_isready" -q -h 127.0.0.1 -p "$(cat "$dir/port")" -t 2 >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] \
            || fail "$dir" "the server in $dir does not accept connections after ${START_TIMEOUT}s"
        sleep 0.2
    done
}

# The url, admin-url and port files of DIR, from the passwords and the current port.
write_urls() {
    local dir="$1" app_password="$2" admin_password="$3" port
    port=$(cat "$dir/port")
    (
        umask 077
        echo "postgres://tenantd:$app_password@127.0.0.1:$port/tenantd" > "$dir/url.new"
        echo "postgres://postgres:$admin_password@127.0.0.1:$port/postgres" > "$dir/admin-url.new"
    )
    mv "$dir/url.new" "$dir/url"
    mv "$dir/admin-url.new" "$dir/admin-url"
}

start_primary() {
    local dir="$1" app_password admin_password replication_password
    if [ -s "$dir/data/PG_VERSION" ]; then
        [ -s "$dir/url" ] && [ -s "$dir/admin-url" ] \
            || die "$dir/data holds a cluster but $dir/url or $dir/admin-url is missing; \
remove $dir to start afresh"
        app_password=$(password_in "$dir/url")
        admin_password=$(password_in "$dir/admin-url")
        say "starting the existing cluster in $dir"
        start_server "$dir"
        write_urls "$dir" "$app_password" "$admin_password"
        return
    fi

    prepare_dir "$dir"
    app_password=$(new_password)
    admin_password=$(new_password)
    replication_password=$(new_password)
    rm -f "$dir/url" "$dir/admin-url" "$dir/port" "$dir/log"

    local pwfile="$dir/.initdb-password"
    (umask 077 && echo "$admin_password" > "$pwfile")
    as_root && chown postgres: "$pwfile"
    say "initdb ($("$bin/postgres" --version)) in $dir/data"
    if ! as_owner timeout 120 "$bin/initdb" -D "$dir/data" -U postgres --pwfile="$pwfile" \
        --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C \
        --no-instructions > "$dir/initdb.log" 2>&1; then
        rm -f "$pwfile"
        cat "$dir/initdb.log" >&2
        die "initdb failed in $dir/data"
    fi
    rm -f "$pwfile"
    echo "include 'tenantd.conf'" | as_owner tee -a "$dir/data/postgresql.conf" >/dev/null
    write_hba "$dir"
    start_server "$dir"

    psql_admin "$dir" -v app_password="$app_password" \
        -v replication_password="$replication_password" <<'SQL' \
        || fail "$dir" "could not create the roles and the database"
CREATE ROLE tenantd LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD :'app_password';
CREATE DATABASE tenantd OWNER tenantd;
CREATE ROLE replicator LOGIN REPLICATION PASSWORD :'replication_password';
SQL
    (umask 077 && echo "$replication_password" > "$dir/replication-password")
    write_urls "$dir" "$app_password" "$admin_password"
}

# The standby's name on the primary: DIR's base name in lower case, [a-z0-9_] only.
application_name() {
    basename "$1" | tr 'A-Z' 'a-z' | tr -c 'a-z0-9_\n' '_'
}

start_standby() {
    local dir="$1" primary="$2" name primary_port replication_password
    [ "$dir" != "$primary" ] || die "a cluster cannot be a standby of itself"
    running "$primary" || die "no running cluster in $primary (start it first)"
    for f in url admin-url port replication-password; do
        [ -s "$primary/$f" ] || die "$primary/$f is missing: was $primary made by $prog start?"
    done
    [ "$(psql_admin "$primary" -c 'SELECT pg_is_in_recovery()')" = f ] \
        || die "$primary is itself a standby; make a standby of a primary"
    if [ -e "$dir/data" ]; then
        running "$dir" && die "$dir already holds a running cluster"
        die "$dir already holds a cluster; remove $dir first for a new standby"
    fi
    name=$(application_name "$dir")
    primary_port=$(cat "$primary/port")
    replication_password=$(cat "$primary/replication-password")

    prepare_dir "$dir"
    rm -f "$dir/url" "$dir/admin-url" "$dir/port" "$dir/log"
    say "pg_basebackup of $primary (port $primary_port) into $dir/data, as standby '$name'"
    if ! as_owner timeout 300 "$bin/pg_basebackup" -D "$dir/data" -R -X stream -c fast \
        -d "host=127.0.0.1 port=$primary_port user=replicator password=$replication_password application_name=$name" \
        > "$dir/basebackup.log" 2>&1; then
        cat "$dir/basebackup.log" >&2
        log_tail "$primary"
        die "pg_basebackup from $primary failed"
    fi
    # A copy of a primary that already has synchronous standbys would, once promoted, wait
    # for standbys of its own: it starts without that setting.
    as_owner sed -i '/^[[:space:]]*synchronous_standby_names[[:space:]]*=/d' \
        "$dir/data/postgresql.auto.conf"
    cp "$primary/replication-password" "$dir/replication-password"
    cp -a "$primary/tls" "$dir/tls"
    start_server "$dir"
    write_urls "$dir" "$(password_in "$primary/url")" "$(password_in "$primary/admin-url")"

    # Now that it streams, the primary waits for it on every commit.
    local names list deadline state
    touch "$primary/standbys"
    grep -qx "$name" "$primary/standbys" || echo "$name" >> "$primary/standbys"
    names=$(sed 's/.*/"&"/' "$primary/standbys" | paste -sd, -)
    list="FIRST 1 ($names)"
    psql_admin "$primary" -v list="$list" <<'SQL' >/dev/null \
        || fail "$primary" "could not make $primary wait for its standby"
ALTER SYSTEM SET synchronous_commit = 'on';
ALTER SYSTEM SET synchronous_standby_names = :'list';
SELECT pg_reload_conf();
SQL
    deadline=$((SECONDS + SYNC_TIMEOUT))
    while :; do
        state=$(psql_admin "$primary" -v name="$name" <<'SQL' || true
SELECT sync_state FROM pg_stat_replication WHERE application_name = :'name' AND state = 'streaming';
SQL
)
        case "$state" in
            sync) break ;;
            potential)
                say "standby '$name' streams as a potential sync standby (another one is first in $list)"
                break ;;
        esac
        [ "$SECONDS" -lt "$deadline" ] \
            || fail "$dir" "standby '$name' not shown as sync on $primary after ${SYNC_TIMEOUT}s (state: ${state:-absent})"
        sleep 0.2
    done
    say "standby '$name' of $primary is $state (synchronous_standby_names = '$list')"
}

cmd_start() {
    local dir="" primary=""
    while [ $# -gt 0 ]; do
        case "$1" in
            --standby-of)
                [ $# -ge 2 ] || usage
                primary="$2"
                shift 2 ;;
            --standby-of=*)
                primary="${1#--standby-of=}"
                shift ;;
            -*) usage ;;
            *)
                [ -z "$dir" ] || usage
                dir="$1"
                shift ;;
        esac
    done
    [ -n "$dir" ] || usage
    dir=$(absolute_dir "$dir")
    ensure_server
    if running "$dir"; then
        [ -z "$primary" ] || die "$dir already holds a running cluster"
        say "already running in $dir"
        cat "$dir/url"
        return
    fi
    local started=$SECONDS
    if [ -n "$primary" ]; then
        start_standby "$dir" "$(absolute_dir "$primary")"
    else
        start_primary "$dir"
    fi
    say "running in $dir on 127.0.0.1:$(cat "$dir/port") (log: $dir/log), ready in $((SECONDS - started))s"
    cat "$dir/url"
}

cmd_stop() {
    local dir
    dir=$(absolute_dir "$1")
    if ! running "$dir"; then
        say "nothing running in $dir"
        return
    fi
    bin=$(find_bin)
    if ! as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w -t "$STOP_TIMEOUT" -s stop >/dev/null 2>&1; then
        running "$dir" || { say "stopped $dir"; return; }
        say "fast shutdown of $dir took over ${STOP_TIMEOUT}s; immediate shutdown"
        log_tail "$dir"
        as_owner "$bin/pg_ctl" -D "$dir/data" -m immediate -w -t "$STOP_TIMEOUT" -s stop >/dev/null 2>&1 \
            || fail "$dir" "could not stop the server in $dir"
    fi
    say "stopped $dir"
}

cmd_promote() {
    local dir deadline
    dir=$(absolute_dir "$1")
    running "$dir" || die "no running cluster in $dir"
    bin=$(find_bin)
    if [ "$(psql_admin "$dir" -c 'SELECT pg_is_in_recovery()')" = f ]; then
        say "$dir is already a primary"
        return
    fi
    as_owner "$bin/pg_ctl" -D "$dir/data" -w -t "$PROMOTE_TIMEOUT" -s promote >/dev/null 2>&1 \
        || fail "$dir" "pg_ctl promote of $dir failed or took over ${PROMOTE_TIMEOUT}s"
    deadline=$((SECONDS + PROMOTE_TIMEOUT))
    # A transaction id is assigned only where writes are accepted.
    until psql_admin "$dir" -c 'SELECT pg_current_xact_id()' >/dev/null 2>&1; do
        [ "$SECONDS" -lt "$deadline" ] \
            || fail "$dir" "$dir does not accept writes ${PROMOTE_TIMEOUT}s after promotion"
        sleep 0.2
    done
    say "promoted $dir; it accepts writes on 127.0.0.1:$(cat "$dir/port")"
}

# kill -9 of the postmaster, then of what it had started (as a host's crash would), and a
# bounded wait until all of them are gone.
cmd_kill() {
    local dir pid children deadline
    dir=$(absolute_dir "$1")
    if ! running "$dir"; then
        say "nothing running in $dir"
        return
    fi
    pid=$(pid_of "$dir")
    children=$(ps -o pid= --ppid "$pid" || true)
    kill -9 "$pid" 2>/dev/null || true
    # shellcheck disable=SC2086
    [ -z "$children" ] || kill -9 $children 2>/dev/null || true
    deadline=$((SECONDS + 10))
    for p in $pid $children; do
        while alive "$p"; do
            [ "$SECONDS" -lt "$deadline" ] || die "process $p of $dir still alive 10s after kill -9"
            sleep 0.1
        done
    done
    say "killed the postmaster of $dir (pid $pid) and its children"
}

cmd_status() {
    local dir
    dir=$(absolute_dir "$1")
    if running "$dir"; then
        cat "$dir/url"
    else
        say "nothing running in $dir"
        return 1
    fi
}

[ $# -ge 2 ] || usage
command="$1"
shift
case "$command" in
    start) cmd_start "$@" ;;
    stop | promote | kill | status)
        [ $# -eq 1 ] || usage
        "cmd_$command" "$1" ;;
    *) usage ;;
esac
