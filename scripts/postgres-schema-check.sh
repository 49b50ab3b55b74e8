#!/usr/bin/env bash
# Checks schema-postgres.sql on a live PostgreSQL: that the role tenantd can create it, that
# it can be applied twice, and that each trigger, CHECK and unique index refuses what it
# must while the writes the service makes go through.
#
#   scripts/with-postgres.sh scripts/postgres-schema-check.sh   # what `make test` runs
#   TENANTD_TEST_POSTGRES_URL=... TENANTD_TEST_POSTGRES_ADMIN_URL=... \
#       scripts/postgres-schema-check.sh
#
# Needs TENANTD_TEST_POSTGRES_URL (role tenantd, not a superuser) and
# TENANTD_TEST_POSTGRES_ADMIN_URL (a superuser), as scripts/with-postgres.sh exports them.
# Creates a fresh database owned by tenantd, applies the schema as tenantd with psql
# (ON_ERROR_STOP, in one transaction that holds pg_advisory_xact_lock, as the service
# will), commits a few rows, then runs each check in a transaction of its own that is rolled
# back. Prints one line per check; exits non-zero if any failed, naming each. The database
# is dropped at the end, also on failure.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
schema="$root/schema-postgres.sql"
url=${TENANTD_TEST_POSTGRES_URL:?"not set: run this through scripts/with-postgres.sh"}
admin_url=${TENANTD_TEST_POSTGRES_ADMIN_URL:?"not set: run this through scripts/with-postgres.sh"}

psql_bin=$(command -v psql || true)
if [ -z "$psql_bin" ]; then
    psql_bin=$(ls -d /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -n 1)
fi
[ -n "$psql_bin" ] || { echo "postgres-schema-check: no psql found (Debian package postgresql-client)" >&2; exit 1; }

db="tenantd_schema_check_$$"
db_url="${url%/*}/$db"

# psql, bounded, stopping at the first error, errors with their SQLSTATE.
q() {
    PGCONNECT_TIMEOUT=5 timeout 60 "$psql_bin" -X -q -A -t -v ON_ERROR_STOP=1 \
        -v VERBOSITY=verbose "$@"
}

q "$admin_url" -c "CREATE DATABASE $db OWNER tenantd" >/dev/null
old_db="${db}_v3"
v7_db="${db}_v7"
v8_db="${db}_v8"
v9_db="${db}_v9"
trap 'q "$admin_url" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null;
      q "$admin_url" -c "DROP DATABASE IF EXISTS $old_db WITH (FORCE)" >/dev/null;
      q "$admin_url" -c "DROP DATABASE IF EXISTS $v7_db WITH (FORCE)" >/dev/null;
      q "$admin_url" -c "DROP DATABASE IF EXISTS $v8_db WITH (FORCE)" >/dev/null;
      q "$admin_url" -c "DROP DATABASE IF EXISTS $v9_db WITH (FORCE)" >/dev/null' EXIT

checks=0
failed=()

pass() {
    checks=$((checks + 1))
    echo "ok   $1"
}

fail() {
    checks=$((checks + 1))
    failed+=("$1")
    echo "FAIL $1"
    [ -z "${2:-}" ] || echo "$2" | sed 's/^/       /'
}

# apply DESC [SQL before the schema]: the schema, as tenantd, in one locked transaction.
apply() {
    local out
    if out=$(q "$db_url" -1 -c "SET client_min_messages = warning" \
        -c "SELECT pg_advisory_xact_lock(7461617473)" -c "${2:-SELECT}" -f "$schema" 2>&1); then
        pass "$1"
    else
        fail "$1" "$out"
    fi
}

# commit DESC SQL: SQL goes through and stays.
commit() {
    local out
    if out=$(q "$db_url" -c "$2" 2>&1); then pass "$1"; else fail "$1" "$out"; fi
}

# accepts DESC SQL: SQL goes through (and is rolled back).
accepts() {
    local out
    if out=$(q "$db_url" -c "BEGIN" -c "$2" -c "ROLLBACK" 2>&1); then
        pass "$1"
    else
        fail "$1" "$out"
    fi
}

# refuses DESC SQL EXPECTED: SQL fails with an error whose text holds EXPECTED (which may
# start with the SQLSTATE, e.g. "23000: audit events are immutable").
refuses() {
    local out
    if out=$(q "$db_url" -c "BEGIN" -c "$2" -c "ROLLBACK" 2>&1); then
        fail "$1" "accepted, where an error with \"$3\" was expected"
    elif grep -qF -- "$3" <<< "$out"; then
        pass "$1"
    else
        fail "$1" "expected an error with \"$3\", got: $out"
    fi
}

# yields DESC SQL EXPECTED: SQL (rolled back) prints exactly EXPECTED.
yields() {
    local out
    if out=$(q "$db_url" -c "BEGIN" -c "$2" -c "ROLLBACK" 2>&1) && [ "$out" = "$3" ]; then
        pass "$1"
    else
        fail "$1" "expected \"$3\", got: $out"
    fi
}

max='340282366920938463463374607431768211455' # 2^128 - 1
over='340282366920938463463374607431768211456' # 2^128
zeros=$(printf '0%.0s' $(seq 64))
h1=$(printf '1%.0s' $(seq 64))
h2=$(printf '2%.0s' $(seq 64))
h3=$(printf '3%.0s' $(seq 64))
t0='2025-01-01T00:00:00.000000Z'
t1='2025-01-01T00:00:01.000000Z'
t2='2025-01-01T00:00:02.000000Z'
hash32="decode(repeat('ab', 32), 'hex')"
tenant_cols="(id, name, state, opening_deposit_atomic, token_hash, created_at, tombstoned_at)"
budget_cols="(id, tenant_id, name, unit, state, created_at, closed_at, opening_deposit_atomic,
    credited_atomic, debited_atomic, spent_atomic, reserved_atomic)"
reservation_cols="(id, tenant_id, budget_id, state, amount_atomic, committed_atomic, memo,
    created_at, expires_at, settled_at)"
entry_cols="(id, budget_id, kind, amount_atomic, reservation_id, memo, occurred_at,
    balance_atomic, available_atomic)"
event_cols="(seq, occurred_at, actor, action, tenant_id, payload, prev_hash, hash)"
evt_cols="(id, type, created_at, tenant_id, data)"
key_cols="(principal, key, method, path, fingerprint, status, location, response_body, created_ms)"

echo "postgres-schema-check: $schema in database $db, as tenantd"

# --- creation, by the database's owner, not a superuser
yields "the schema is applied by a role that is not a superuser" \
    "SELECT current_user || ' ' || rolsuper FROM pg_roles WHERE rolname = current_user" \
    "tenantd false"
apply "the schema applies as tenantd in one transaction holding an advisory lock"
yields "schema_version is 10 (SQLite's user_version 9; 7, 9 and 10 are what only PostgreSQL has)" \
    "SELECT version FROM schema_version" 10
yields "the chain's lock row is there, alone" "SELECT string_agg(id::text, ',') FROM chain_head" 1
yields "every table is there" \
    "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'public'" \
    "audit_events,audit_pending,budget_renewals,budgets,chain_head,events,idempotency_keys,ledger_entries,periods,reservations,schema_version,tenants,webhook_deliveries,webhook_endpoints"
yields "every index is there" \
    "SELECT string_agg(indexname, ',' ORDER BY indexname) FROM pg_indexes WHERE schemaname = 'public'" \
    "audit_events_pkey,audit_pending_pkey,budget_renewals_due,budget_renewals_pkey,budgets_open_name,budgets_parent,budgets_pkey,budgets_tenant,chain_head_pkey,events_pkey,events_tenant,idempotency_keys_created,idempotency_keys_pkey,ledger_entries_budget,ledger_entries_pkey,periods_budget,periods_current,periods_pkey,reservations_active_budget,reservations_active_expiry,reservations_pkey,reservations_tenant,reservations_tenant_active,schema_version_pkey,tenants_active_name,tenants_pkey,tenants_tombstoned,webhook_deliveries_due,webhook_deliveries_endpoint,webhook_deliveries_event,webhook_deliveries_pkey,webhook_endpoints_pkey"
yields "the amounts are numeric(39,0)" \
    "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public'
       AND column_name LIKE '%\_atomic' AND (data_type, numeric_precision, numeric_scale)
       IS DISTINCT FROM ('numeric', 39, 0)" 0
yields "every amount is of the domain tenantd_atomic, whose check bounds it" \
    "SELECT count(*) FILTER (WHERE domain_name IS DISTINCT FROM 'tenantd_atomic') || ' '
       || (SELECT count(*) FROM pg_constraint WHERE contypid = 'tenantd_atomic'::regtype)
     FROM information_schema.columns WHERE table_schema = 'public'
       AND column_name LIKE '%\_atomic'" "0 1"
yields "no table checks an amount's range again, or a ledger kind or an event type" \
    "SELECT count(*) FROM pg_constraint WHERE contype = 'c' AND conrelid <> 0
       AND (pg_get_constraintdef(oid) LIKE '%$max%'
            OR conname IN ('ledger_entries_kind_check', 'events_type_check'))" 0
yields "a figure's update, a last id's and a settlement fire no identity trigger" \
    "SELECT string_agg(tgname, ',' ORDER BY tgname) FROM pg_trigger
     WHERE tgname LIKE '%identity_immutable' AND cardinality(tgattr::int2[]) > 0" \
    "budgets_identity_immutable,periods_identity_immutable,reservations_identity_immutable,tenants_identity_immutable"

# --- rows the service writes
commit "insert an active tenant" "INSERT INTO tenants $tenant_cols
    VALUES ('ten_A', 'alpha', 'active', 1000, $hash32, '$t0', NULL)"
commit "insert a tombstoned tenant" "INSERT INTO tenants $tenant_cols
    VALUES ('ten_T', 'gone', 'tombstoned', 5, $hash32, '$t0', '$t1')"
commit "insert an open budget" "INSERT INTO budgets $budget_cols
    VALUES ('bud_A', 'ten_A', 'default', 'atomic', 'open', '$t0', NULL, 1000, 1000, 0, 0, 100)"
commit "insert a closed budget" "INSERT INTO budgets $budget_cols
    VALUES ('bud_C', 'ten_T', 'default', 'atomic', 'closed', '$t0', '$t1', 5, 5, 0, 0, 0)"
commit "insert a ledger entry" "INSERT INTO ledger_entries $entry_cols
    VALUES ('ent_A', 'bud_A', 'opening_deposit', 1000, NULL, NULL, '$t0', 1000, 1000)"
commit "insert an active reservation" "INSERT INTO reservations $reservation_cols
    VALUES ('res_A', 'ten_A', 'bud_A', 'active', 100, NULL, 'job 1', '$t0', '$t2', NULL)"
commit "insert a committed reservation" "INSERT INTO reservations $reservation_cols
    VALUES ('res_C', 'ten_A', 'bud_A', 'committed', 50, 40, NULL, '$t0', '$t1', '$t1')"
commit "append the first audit event" "BEGIN;
    SELECT id FROM chain_head WHERE id = 1 FOR UPDATE;
    INSERT INTO audit_events $event_cols
    VALUES (1, '$t0', 'admin', 'tenant.created', 'ten_A', '{\"name\":\"alpha\"}', '$zeros', '$h1');
    COMMIT"
commit "append the second audit event" "INSERT INTO audit_events $event_cols
    VALUES (2, '$t1', 'admin', 'tenant.tombstoned', 'ten_T', '{}', '$h1', '$h2')"
commit "insert an idempotency record" "INSERT INTO idempotency_keys $key_cols
    VALUES ('admin', 'key-1', 'POST', '/v1/tenants', $hash32, 201, '/v1/tenants/ten_A',
            '{\"token\":\"t\"}', 1700000000000)"
yields "the chain ends at the appended events" \
    "SELECT seq || ' ' || hash FROM audit_events ORDER BY seq DESC LIMIT 1" "2 $h2"
yields "the audit event's text is kept byte for byte" \
    "SELECT payload || ' ' || occurred_at FROM audit_events WHERE seq = 1" "{\"name\":\"alpha\"} $t0"

# --- the audit chain
refuses "audit_events: UPDATE is refused" \
    "UPDATE audit_events SET payload = '{}' WHERE seq = 1" "23000: audit events are immutable"
refuses "audit_events: DELETE is refused" \
    "DELETE FROM audit_events WHERE seq = 2" "23000: audit events are immutable"
refuses "audit_events: TRUNCATE is refused" \
    "TRUNCATE audit_events" "23000: audit events are immutable"
accepts "audit_events: the next event (seq 3, linked to seq 2) is appended" \
    "INSERT INTO audit_events $event_cols
     VALUES (3, '$t2', 'admin', 'tenant.created', 'ten_B', '{}', '$h2', '$h3')"
yields "audit_events: many appends in one transaction each continue the chain" \
    "INSERT INTO audit_events $event_cols
     VALUES (3, '$t2', 'admin', 'tenant.created', 'ten_B', '{}', '$h2', '$h3');
     INSERT INTO audit_events $event_cols
     VALUES (4, '$t2', 'admin', 'tenant.created', 'ten_C', '{}', '$h3', '$h1');
     SELECT string_agg(seq::text, ',' ORDER BY seq) FROM audit_events" "1,2,3,4"
refuses "audit_events: a gap in seq is refused" \
    "INSERT INTO audit_events $event_cols
     VALUES (4, '$t2', 'admin', 'a', 'ten_B', '{}', '$h2', '$h3')" \
    "23000: an audit event must continue the chain"
refuses "audit_events: a wrong prev_hash is refused" \
    "INSERT INTO audit_events $event_cols
     VALUES (3, '$t2', 'admin', 'a', 'ten_B', '{}', '$h1', '$h3')" \
    "23000: an audit event must continue the chain"
refuses "audit_events: a second event with a taken seq is refused (by the key)" \
    "INSERT INTO audit_events $event_cols
     VALUES (2, '$t2', 'admin', 'a', 'ten_B', '{}', '$h1', '$h3')" \
    "23505:"
yields "audit_events: one statement appends several events, each linked to the one before" \
    "INSERT INTO audit_events $event_cols
     VALUES (3, '$t2', 'admin', 'tenant.created', 'ten_B', '{}', '$h2', '$h3'),
            (4, '$t2', 'admin', 'tenant.created', 'ten_C', '{}', '$h3', '$h1');
     SELECT string_agg(seq::text, ',' ORDER BY seq) FROM audit_events" "1,2,3,4"
refuses "audit_events: a statement whose second event skips a seq is refused" \
    "INSERT INTO audit_events $event_cols
     VALUES (3, '$t2', 'admin', 'a', 'ten_B', '{}', '$h2', '$h3'),
            (5, '$t2', 'admin', 'a', 'ten_C', '{}', '$h3', '$h1')" \
    "23000: an audit event must continue the chain"
refuses "audit_events: a statement whose second event links to another than the first is refused" \
    "INSERT INTO audit_events $event_cols
     VALUES (3, '$t2', 'admin', 'a', 'ten_B', '{}', '$h2', '$h3'),
            (4, '$t2', 'admin', 'a', 'ten_C', '{}', '$h2', '$h1')" \
    "23000: an audit event must continue the chain"
refuses "audit_events: an event before the first is refused" \
    "INSERT INTO audit_events $event_cols
     VALUES (0, '$t2', 'admin', 'a', 'ten_B', '{}', '$zeros', '$h3')" \
    "23000: an audit event must continue the chain"
refuses "chain_head: UPDATE is refused" \
    "UPDATE chain_head SET id = 1" "23000: the chain's lock row never changes"
refuses "chain_head: DELETE is refused" \
    "DELETE FROM chain_head" "23000: the chain's lock row never changes"
refuses "chain_head: TRUNCATE is refused" \
    "TRUNCATE chain_head" "23000: the chain's lock row never changes"
refuses "chain_head: a second row is refused" \
    "INSERT INTO chain_head (id) VALUES (2)" "23514:"

# --- audit_pending: written with a change, deleted by the chainer as it links it
commit "audit_pending: a writer's row goes in" \
    "INSERT INTO audit_pending (occurred_at, actor, action, tenant_id, payload)
     VALUES ('$t2', 'admin', 'a', 'ten_B', '{}')"
refuses "audit_pending: UPDATE is refused" \
    "UPDATE audit_pending SET payload = '{\"x\":1}'" "23000: pending audit events are immutable"
refuses "audit_pending: TRUNCATE is refused" \
    "TRUNCATE audit_pending" "23000: pending audit events are immutable"
commit "audit_pending: the chainer's DELETE takes it out" "DELETE FROM audit_pending"
yields "audit_pending: nothing is left" "SELECT count(*) FROM audit_pending" 0

# --- tenants
refuses "tenants: DELETE is refused" \
    "DELETE FROM tenants WHERE id = 'ten_T'" "23000: tenants are tombstoned, never deleted"
refuses "tenants: TRUNCATE is refused" \
    "TRUNCATE tenants" "23000: tenants are tombstoned, never deleted"
for change in "name = 'beta'" "id = 'ten_Z'" "opening_deposit_atomic = 1" \
    "token_hash = decode(repeat('cd', 32), 'hex')" "created_at = '$t1'"; do
    refuses "tenants: SET $change is refused" "UPDATE tenants SET $change WHERE id = 'ten_A'" \
        "23000: a tenant's identity is immutable and a tombstone is final"
done
accepts "tenants: a tenant's last id moves, a tombstoned one's too" \
    "UPDATE tenants SET last_id = 'x' WHERE id IN ('ten_A', 'ten_T')"
accepts "tenants: an active tenant is tombstoned" \
    "UPDATE tenants SET state = 'tombstoned', tombstoned_at = '$t2' WHERE id = 'ten_A'"
refuses "tenants: a tombstone is final" \
    "UPDATE tenants SET state = 'active', tombstoned_at = NULL WHERE id = 'ten_T'" \
    "23000: a tenant's identity is immutable and a tombstone is final"
refuses "tenants: a tombstone's time is final" \
    "UPDATE tenants SET tombstoned_at = '$t2' WHERE id = 'ten_T'" \
    "23000: a tenant's identity is immutable and a tombstone is final"
refuses "tenants: a second active tenant with a name is refused" \
    "INSERT INTO tenants $tenant_cols VALUES ('ten_B', 'alpha', 'active', 1, $hash32, '$t0', NULL)" \
    "23505: duplicate key value violates unique constraint \"tenants_active_name\""
accepts "tenants: a tombstoned tenant's name is taken again" \
    "INSERT INTO tenants $tenant_cols VALUES ('ten_B', 'gone', 'active', 1, $hash32, '$t0', NULL)"
refuses "tenants: an active tenant with a tombstone time is refused" \
    "INSERT INTO tenants $tenant_cols VALUES ('ten_B', 'b', 'active', 1, $hash32, '$t0', '$t1')" \
    "23514:"
refuses "tenants: a token hash of 31 bytes is refused" \
    "INSERT INTO tenants $tenant_cols
     VALUES ('ten_B', 'b', 'active', 1, decode(repeat('ab', 31), 'hex'), '$t0', NULL)" "23514:"

# --- budgets
refuses "budgets: DELETE is refused" \
    "DELETE FROM budgets WHERE id = 'bud_C'" "23000: budgets are closed, never deleted"
refuses "budgets: TRUNCATE is refused" \
    "TRUNCATE budgets" "23000: budgets are closed, never deleted"
for change in "id = 'bud_Z'" "tenant_id = 'ten_T'" "name = 'other'" "unit = 'usd'" \
    "created_at = '$t1'" "opening_deposit_atomic = 1"; do
    refuses "budgets: SET $change is refused" "UPDATE budgets SET $change WHERE id = 'bud_A'" \
        "23000: a budget's identity is immutable and a closed budget is frozen"
done
accepts "budgets: an open budget's figures move" \
    "UPDATE budgets SET credited_atomic = 2000, debited_atomic = 10, spent_atomic = 20,
     reserved_atomic = 0 WHERE id = 'bud_A'"
accepts "budgets: an open budget is closed" \
    "UPDATE budgets SET state = 'closed', closed_at = '$t2' WHERE id = 'bud_A'"
refuses "budgets: a closed budget's figures are frozen" \
    "UPDATE budgets SET reserved_atomic = 1 WHERE id = 'bud_C'" \
    "23000: a budget's identity is immutable and a closed budget is frozen"
refuses "budgets: a closed budget stays closed" \
    "UPDATE budgets SET state = 'open', closed_at = NULL WHERE id = 'bud_C'" \
    "23000: a budget's identity is immutable and a closed budget is frozen"
refuses "budgets: a second open budget with a name in a tenant is refused" \
    "INSERT INTO budgets $budget_cols
     VALUES ('bud_B', 'ten_A', 'default', 'atomic', 'open', '$t0', NULL, 0, 0, 0, 0, 0)" \
    "23505: duplicate key value violates unique constraint \"budgets_open_name\""
accepts "budgets: a closed budget's name is taken again" \
    "INSERT INTO budgets $budget_cols
     VALUES ('bud_B', 'ten_T', 'default', 'atomic', 'open', '$t0', NULL, 0, 0, 0, 0, 0)"
refuses "budgets: an open budget with a close time is refused" \
    "INSERT INTO budgets $budget_cols
     VALUES ('bud_B', 'ten_A', 'b', 'atomic', 'open', '$t0', '$t1', 0, 0, 0, 0, 0)" "23514:"

# --- reservations
refuses "reservations: DELETE is refused" \
    "DELETE FROM reservations WHERE id = 'res_C'" "23000: reservations are settled, never deleted"
refuses "reservations: TRUNCATE is refused" \
    "TRUNCATE reservations" "23000: reservations are settled, never deleted"
accepts "reservations: an active reservation is extended" \
    "UPDATE reservations SET expires_at = '2025-01-01T00:10:00.000000Z' WHERE id = 'res_A'"
accepts "reservations: an active reservation is committed" \
    "UPDATE reservations SET state = 'committed', committed_atomic = 60, settled_at = '$t2'
     WHERE id = 'res_A'"
accepts "reservations: an active reservation is released" \
    "UPDATE reservations SET state = 'released', settled_at = '$t2' WHERE id = 'res_A'"
for change in "id = 'res_Z'" "tenant_id = 'ten_T'" "budget_id = 'bud_C'" "amount_atomic = 1" \
    "memo = 'other'" "memo = NULL" "created_at = '$t1'"; do
    refuses "reservations: SET $change on an active one is refused" \
        "UPDATE reservations SET $change WHERE id = 'res_A'" \
        "23000: a reservation changes only while it is active"
done
refuses "reservations: a settled reservation is final" \
    "UPDATE reservations SET expires_at = '$t2' WHERE id = 'res_C'" \
    "23000: a reservation changes only while it is active"
refuses "reservations: a committed one without a committed amount is refused" \
    "INSERT INTO reservations $reservation_cols
     VALUES ('res_B', 'ten_A', 'bud_A', 'committed', 1, NULL, NULL, '$t0', '$t1', '$t1')" \
    "23514:"
refuses "reservations: an unknown state is refused" \
    "INSERT INTO reservations $reservation_cols
     VALUES ('res_B', 'ten_A', 'bud_A', 'held', 1, NULL, NULL, '$t0', '$t1', '$t1')" "23514:"

# --- periods: only a current period changes, once, when it closes
commit "insert a current period" "INSERT INTO periods (id, budget_id, state, started_at, ends_at,
        allowance_atomic, carried_in_atomic, opening_available_atomic, start_credited_atomic,
        start_debited_atomic, start_spent_atomic)
    VALUES ('per_A', 'bud_A', 'current', '$t0', '$t2', 100, 0, 1000, 1000, 0, 0)"
for change in "budget_id = 'bud_C'" "started_at = '$t1'" "allowance_atomic = 1" \
    "start_spent_atomic = 1"; do
    refuses "periods: SET $change on a current one is refused" \
        "UPDATE periods SET $change WHERE id = 'per_A'" \
        "23000: a period changes only while it is current"
done
refuses "periods: a closed period is final" \
    "UPDATE periods SET state = 'closed', credited_atomic = 1000, debited_atomic = 0,
        spent_atomic = 0, forfeited_atomic = 0, carried_out_atomic = 0,
        closing_available_atomic = 1000 WHERE id = 'per_A';
     UPDATE periods SET ends_at = '$t2' WHERE id = 'per_A'" \
    "23000: a period changes only while it is current"
accepts "periods: a current period closes" \
    "UPDATE periods SET state = 'closed', ends_at = '$t1', credited_atomic = 1000,
        debited_atomic = 0, spent_atomic = 0, forfeited_atomic = 0, carried_out_atomic = 0,
        closing_available_atomic = 1000 WHERE id = 'per_A'"

# --- ledger entries
refuses "ledger_entries: UPDATE is refused" \
    "UPDATE ledger_entries SET memo = 'x' WHERE id = 'ent_A'" "23000: ledger entries are immutable"
refuses "ledger_entries: DELETE is refused" \
    "DELETE FROM ledger_entries WHERE id = 'ent_A'" "23000: ledger entries are immutable"
refuses "ledger_entries: TRUNCATE is refused" \
    "TRUNCATE ledger_entries" "23000: ledger entries are immutable"
accepts "ledger_entries: an entry is appended" \
    "INSERT INTO ledger_entries $entry_cols
     VALUES ('ent_B', 'bud_A', 'reserve', 100, 'res_A', 'job 1', '$t1', 1000, 900)"
refuses "ledger_entries: an unknown kind is refused" \
    "INSERT INTO ledger_entries $entry_cols
     VALUES ('ent_B', 'bud_A', 'gift', 1, NULL, NULL, '$t1', 1000, 900)" "23514:"

# --- events: written once, never changed, erased past their retention
commit "insert an event" "INSERT INTO events $evt_cols
    VALUES ('evt_A', 'tenant.created', '$t0', 'ten_A', '{\"tenant\":{}}')"
refuses "events: UPDATE is refused" \
    "UPDATE events SET data = '{}' WHERE id = 'evt_A'" "23000: events are immutable"
refuses "events: an unknown type is refused" \
    "INSERT INTO events $evt_cols VALUES ('evt_B', 'budget.charged', '$t1', 'ten_A', '{}')" \
    "23514:"
accepts "events: an event past its retention is erased" "DELETE FROM events WHERE id < 'evt_B'"

# --- webhook endpoints: deleted by their state, never erased; a deleted one is final
whe_cols="(id, url, description, event_types, tenant_id, state, disabled_reason, created_at,
    secret)"
key32="decode(repeat('cd', 32), 'hex')"
commit "insert a webhook endpoint" "INSERT INTO webhook_endpoints $whe_cols
    VALUES ('whe_A', 'https://hooks.example.com/t', NULL, '*', NULL, 'enabled', NULL, '$t0',
            $key32)"
refuses "webhook_endpoints: DELETE is refused" \
    "DELETE FROM webhook_endpoints WHERE id = 'whe_A'" \
    "23000: webhook endpoints are deleted by their state, never erased"
refuses "webhook_endpoints: TRUNCATE is refused" "TRUNCATE webhook_endpoints" \
    "23000: webhook endpoints are deleted by their state, never erased"
refuses "webhook_endpoints: a disabled endpoint needs its reason" \
    "UPDATE webhook_endpoints SET state = 'disabled' WHERE id = 'whe_A'" "23514:"
refuses "webhook_endpoints: a secret of 31 bytes is refused" \
    "UPDATE webhook_endpoints SET secret = decode(repeat('cd', 31), 'hex') WHERE id = 'whe_A'" \
    "23514:"
refuses "webhook_endpoints: a deleted endpoint keeps no secret" \
    "UPDATE webhook_endpoints SET state = 'deleted' WHERE id = 'whe_A'" "23514:"
accepts "webhook_endpoints: an endpoint is deleted with its secret wiped" \
    "UPDATE webhook_endpoints SET state = 'deleted', secret = ''::bytea WHERE id = 'whe_A'"
refuses "webhook_endpoints: a deleted endpoint is final" "
    UPDATE webhook_endpoints SET state = 'deleted', secret = ''::bytea WHERE id = 'whe_A';
    UPDATE webhook_endpoints SET state = 'enabled', secret = $key32 WHERE id = 'whe_A'" \
    "23000: a deleted webhook endpoint is final"
refuses "webhook_deliveries: a pending delivery needs its next attempt's time" \
    "INSERT INTO webhook_deliveries (id, endpoint_id, event_id, event_type, state, attempts)
     VALUES ('whd_A', 'whe_A', 'evt_A', 'tenant.created', 'pending', 0)" "23514:"
accepts "webhook_deliveries: a delivery is written pending" \
    "INSERT INTO webhook_deliveries (id, endpoint_id, event_id, event_type, state, attempts,
        next_attempt_at) VALUES ('whd_A', 'whe_A', 'evt_A', 'tenant.created', 'pending', 0, '$t0')"

# --- amounts: 0 ..= 2^128 - 1
yields "amounts: 2^128 - 1 is accepted and read back exactly" \
    "INSERT INTO ledger_entries $entry_cols
     VALUES ('ent_M', 'bud_A', 'credit', $max, NULL, NULL, '$t1', $max, $max);
     SELECT amount_atomic::text FROM ledger_entries WHERE id = 'ent_M'" "$max"
accepts "amounts: 0 is accepted" \
    "INSERT INTO ledger_entries $entry_cols
     VALUES ('ent_0', 'bud_A', 'credit', 0, NULL, NULL, '$t1', 0, 0)"
for column in amount_atomic balance_atomic available_atomic; do
    for bad in "$over" -1; do
        amount=1 balance=1 available=1
        case $column in
            amount_atomic) amount=$bad ;;
            balance_atomic) balance=$bad ;;
            available_atomic) available=$bad ;;
        esac
        refuses "amounts: ledger_entries.$column = $bad is refused" \
            "INSERT INTO ledger_entries $entry_cols
             VALUES ('ent_X', 'bud_A', 'credit', $amount, NULL, NULL, '$t1', $balance, $available)" \
            "23514:"
    done
done
for bad in "$over" -1; do
    refuses "amounts: tenants.opening_deposit_atomic = $bad is refused" \
        "INSERT INTO tenants $tenant_cols VALUES ('ten_B', 'b', 'active', $bad, $hash32, '$t0', NULL)" \
        "23514:"
    for column in credited_atomic debited_atomic spent_atomic reserved_atomic; do
        refuses "amounts: budgets.$column = $bad is refused" \
            "UPDATE budgets SET $column = $bad WHERE id = 'bud_A'" "23514:"
    done
    refuses "amounts: budgets.opening_deposit_atomic = $bad is refused" \
        "INSERT INTO budgets $budget_cols
         VALUES ('bud_B', 'ten_A', 'b', 'atomic', 'open', '$t0', NULL, $bad, 0, 0, 0, 0)" "23514:"
    refuses "amounts: reservations.amount_atomic = $bad is refused" \
        "INSERT INTO reservations $reservation_cols
         VALUES ('res_B', 'ten_A', 'bud_A', 'active', $bad, NULL, NULL, '$t0', '$t1', NULL)" "23514:"
    refuses "amounts: reservations.committed_atomic = $bad is refused" \
        "UPDATE reservations SET state = 'committed', committed_atomic = $bad, settled_at = '$t2'
         WHERE id = 'res_A'" "23514:"
done
accepts "amounts: 2^128 - 1 everywhere" \
    "INSERT INTO tenants $tenant_cols VALUES ('ten_B', 'b', 'active', $max, $hash32, '$t0', NULL);
     INSERT INTO budgets $budget_cols
     VALUES ('bud_B', 'ten_B', 'b', 'atomic', 'open', '$t0', NULL, $max, $max, $max, $max, $max);
     INSERT INTO reservations $reservation_cols
     VALUES ('res_B', 'ten_B', 'bud_B', 'committed', $max, $max, NULL, '$t0', '$t1', '$t1')"

# --- idempotency records: erased when their window closes
accepts "idempotency_keys: an expired record is deleted" \
    "DELETE FROM idempotency_keys WHERE created_ms < 1800000000000"
refuses "idempotency_keys: a second record for a principal's key is refused" \
    "INSERT INTO idempotency_keys $key_cols
     VALUES ('admin', 'key-1', 'POST', '/v1/tenants', $hash32, 201, NULL, '{}', 1)" "23505:"
refuses "idempotency_keys: a status outside 2xx is refused" \
    "INSERT INTO idempotency_keys $key_cols
     VALUES ('admin', 'key-2', 'POST', '/v1/tenants', $hash32, 409, NULL, '{}', 1)" "23514:"
refuses "idempotency_keys: a fingerprint of 31 bytes is refused" \
    "INSERT INTO idempotency_keys $key_cols
     VALUES ('admin', 'key-2', 'POST', '/v1/tenants', decode(repeat('ab', 31), 'hex'), 201,
             NULL, '{}', 1)" "23514:"

# --- applying the script again changes nothing; a newer schema is refused
apply "the schema applies a second time"
yields "a second application keeps the rows and the chain head" \
    "SELECT (SELECT count(*) FROM tenants) || ' ' || (SELECT count(*) FROM audit_events) || ' '
     || (SELECT max(seq) FROM audit_events) || ' ' || (SELECT version FROM schema_version)" \
    "2 2 2 10"
if out=$(q "$db_url" -1 -c "UPDATE schema_version SET version = 11" -f "$schema" 2>&1); then
    fail "the schema refuses a database of a newer schema version" "applied"
elif grep -qF "0A000: the database schema is newer (version 11)" <<< "$out"; then
    pass "the schema refuses a database of a newer schema version"
else
    fail "the schema refuses a database of a newer schema version" "$out"
fi

# A new database $2 made by the release script of schema version $1
# (tests/fixtures/schema-postgres-$1.sql), holding a tenant, its budget and its opening entry;
# db_url names it afterwards.
released_database() {
    local version=$1 name=$2
    q "$admin_url" -c "CREATE DATABASE $name OWNER tenantd" >/dev/null
    db_url="${url%/*}/$name"
    if out=$(q "$db_url" -1 -c "SET client_min_messages = warning" \
            -f "$root/tests/fixtures/schema-postgres-$version.sql" 2>&1); then
        pass "the version-$version schema applies"
    else
        fail "the version-$version schema applies" "$out"
    fi
    commit "version $version: a tenant, its budget and its opening entry" "
        INSERT INTO tenants $tenant_cols
            VALUES ('ten_A', 'alpha', 'active', 1000, $hash32, '$t0', NULL);
        INSERT INTO budgets $budget_cols
            VALUES ('bud_A', 'ten_A', 'default', 'atomic', 'open', '$t0', NULL, 1000, 1000, 0, 0, 0);
        INSERT INTO ledger_entries $entry_cols
            VALUES ('ent_A', 'bud_A', 'opening_deposit', 1000, NULL, NULL, '$t0', 1000, 1000)"
}

# --- a database made by the version-3 script (tests/fixtures/schema-postgres-3.sql, the
# release before periods and charges) is brought to version 10, its rows kept
new_url=$db_url
released_database 3 "$old_db"
apply "the version-10 schema applies over version 3"
yields "the upgraded schema is at version 10" "SELECT version FROM schema_version" 10
yields "the upgraded tenants have a last id, not yet set" \
    "SELECT coalesce(last_id, 'none') FROM tenants WHERE id = 'ten_A'" none
yields "the budget is kept, with no period and no thresholds" \
    "SELECT b.credited_atomic || ' ' || count(r.budget_id)
     FROM budgets b LEFT JOIN budget_renewals r ON r.budget_id = b.id
     GROUP BY b.credited_atomic" \
    "1000 0"
yields "the entry is kept, in no period" \
    "SELECT kind || ' ' || coalesce(period_id, '-') FROM ledger_entries" "opening_deposit -"
accepts "the upgraded ledger takes a charge" "INSERT INTO ledger_entries $entry_cols
    VALUES ('ent_B', 'bud_A', 'charge', 5, NULL, NULL, '$t1', 995, 995)"
refuses "the upgraded ledger still refuses an unknown kind" "INSERT INTO ledger_entries $entry_cols
    VALUES ('ent_B', 'bud_A', 'refund', 5, NULL, NULL, '$t1', 995, 995)" "23514"
accepts "the upgraded budget takes a period" "
    INSERT INTO periods (id, budget_id, state, started_at, ends_at, allowance_atomic,
        carried_in_atomic, opening_available_atomic, start_credited_atomic,
        start_debited_atomic, start_spent_atomic)
        VALUES ('per_A', 'bud_A', 'current', '$t1', '$t2', 100, 0, 1000, 1000, 0, 0);
    INSERT INTO budget_renewals (budget_id, period_every_seconds, period_allowance_atomic,
        period_rollover_max_atomic, period_anchor, period_id, period_started_at, period_ends_at)
        VALUES ('bud_A', 60, 100, 0, '$t1', 'per_A', '$t1', '$t2')"
refuses "the upgraded budget refuses half a period" \
    "INSERT INTO budget_renewals (budget_id, period_every_seconds) VALUES ('bud_A', 60)" \
    "budget_renewals_period_whole"
accepts "the upgraded database takes an event" "INSERT INTO events $evt_cols
    VALUES ('evt_A', 'budget.credited', '$t1', 'ten_A', '{}')"

# --- a database made by the version-7 script (tests/fixtures/schema-postgres-7.sql, the
# release before budgets in a tree) is brought to version 10, its rows kept
released_database 7 "$v7_db"
apply "the version-10 schema applies over version 7"
yields "the upgraded schema is at version 10" "SELECT version FROM schema_version" 10
yields "the budget is kept, at the top" \
    "SELECT credited_atomic || ' ' || coalesce(parent_id, 'none') FROM budgets" "1000 none"
yields "the entry is kept, the budget's own" \
    "SELECT kind || ' ' || coalesce(via_budget_id, 'none') FROM ledger_entries" \
    "opening_deposit none"
accepts "the upgraded database takes a budget under another, and an entry via it" "
    INSERT INTO budgets ${budget_cols%)}, parent_id) VALUES ('bud_B', 'ten_A', 'team', 'atomic',
        'open', '$t1', NULL, 10, 10, 0, 0, 0, 'bud_A');
    INSERT INTO ledger_entries ${entry_cols%)}, via_budget_id)
        VALUES ('ent_B', 'bud_A', 'charge', 5, NULL, NULL, '$t1', 995, 995, 'bud_B')"
refuses "the upgraded budget's parent is fixed" \
    "UPDATE budgets SET parent_id = 'bud_A' WHERE id = 'bud_A'" "23000"

# --- a database made by the version-8 script (tests/fixtures/schema-postgres-8.sql, the
# release before the domains) is brought to version 10, its rows kept
released_database 8 "$v8_db"
commit "version 8: a closed budget, a settled reservation, a closed period and an event" "
    INSERT INTO budgets $budget_cols
        VALUES ('bud_C', 'ten_A', 'old', 'atomic', 'closed', '$t0', '$t1', 5, 5, 0, 0, 0);
    INSERT INTO reservations $reservation_cols
        VALUES ('res_C', 'ten_A', 'bud_A', 'committed', 50, 40, NULL, '$t0', '$t1', '$t1');
    INSERT INTO periods (id, budget_id, state, started_at, ends_at, allowance_atomic,
        carried_in_atomic, opening_available_atomic, start_credited_atomic,
        start_debited_atomic, start_spent_atomic, credited_atomic, debited_atomic,
        spent_atomic, forfeited_atomic, carried_out_atomic, closing_available_atomic)
        VALUES ('per_C', 'bud_A', 'closed', '$t0', '$t1', 100, 0, 1000, 1000, 0, 0, 1000, 0,
                0, 0, 0, $max);
    INSERT INTO events $evt_cols VALUES ('evt_A', 'budget.closed', '$t1', 'ten_A', '{}')"
apply "the version-10 schema applies over version 8"
yields "the upgraded schema is at version 10" "SELECT version FROM schema_version" 10
yields "every row is kept, each amount exactly" \
    "SELECT (SELECT string_agg(id || ' ' || opening_deposit_atomic || ' ' || credited_atomic
                               || ' ' || state, ',' ORDER BY id) FROM budgets)
         || ' ' || (SELECT amount_atomic || ' ' || committed_atomic FROM reservations)
         || ' ' || (SELECT kind || ' ' || balance_atomic FROM ledger_entries)
         || ' ' || (SELECT closing_available_atomic FROM periods)
         || ' ' || (SELECT type FROM events)" \
    "bud_A 1000 1000 open,bud_C 5 5 closed 50 40 opening_deposit 1000 $max budget.closed"
yields "the upgraded amounts are of the domain, the kinds and types of theirs" \
    "SELECT count(*) FILTER (WHERE domain_name = 'tenantd_atomic') || ' '
       || count(*) FILTER (WHERE domain_name IN ('tenantd_entry_kind', 'tenantd_event_type'))
     FROM information_schema.columns WHERE table_schema = 'public'
       AND (column_name LIKE '%\_atomic' OR (table_name, column_name) IN
            (('ledger_entries', 'kind'), ('events', 'type')))" "25 2"
refuses "the upgraded ledger still refuses an amount past 2^128 - 1" \
    "INSERT INTO ledger_entries $entry_cols
     VALUES ('ent_B', 'bud_A', 'charge', $over, NULL, NULL, '$t1', 995, 995)" "23514"
refuses "the upgraded ledger still refuses an unknown kind" "INSERT INTO ledger_entries $entry_cols
    VALUES ('ent_B', 'bud_A', 'refund', 5, NULL, NULL, '$t1', 995, 995)" "23514"
refuses "the upgraded events still refuse an unknown type" \
    "INSERT INTO events $evt_cols VALUES ('evt_B', 'budget.charged', '$t1', 'ten_A', '{}')" \
    "23514"
accepts "the upgraded budget's figures move" \
    "UPDATE budgets SET credited_atomic = 2000, spent_atomic = 5 WHERE id = 'bud_A'"
refuses "the upgraded closed budget stays frozen" \
    "UPDATE budgets SET spent_atomic = 1 WHERE id = 'bud_C'" \
    "23000: a budget's identity is immutable and a closed budget is frozen"
refuses "the upgraded settled reservation stays final" \
    "UPDATE reservations SET expires_at = '$t2' WHERE id = 'res_C'" \
    "23000: a reservation changes only while it is active"
refuses "the upgraded closed period stays final" \
    "UPDATE periods SET ends_at = '$t2' WHERE id = 'per_C'" \
    "23000: a period changes only while it is current"
apply "the version-10 schema applies a second time over the upgraded one"
yields "the second application keeps one check on each domain" \
    "SELECT count(*) FROM pg_constraint WHERE contypid IN
       ('tenantd_atomic'::regtype, 'tenantd_entry_kind'::regtype, 'tenantd_event_type'::regtype)" 3

# --- a database made by the version-9 script (tests/fixtures/schema-postgres-9.sql, the
# release whose trigger checked the chain a row at a time) is brought to version 10
released_database 9 "$v9_db"
commit "version 9: the chain's first event" "INSERT INTO audit_events $event_cols
    VALUES (1, '$t0', 'admin', 'tenant.created', 'ten_A', '{}', '$zeros', '$h1')"
apply "the version-10 schema applies over version 9"
yields "the upgraded schema is at version 10" "SELECT version FROM schema_version" 10
yields "the upgraded chain is checked once a statement, after its inserts" \
    "SELECT count(*) || ' ' || CAST(tgtype = 4 AS TEXT) FROM pg_trigger
     WHERE tgrelid = 'audit_events'::regclass AND tgname = 'audit_events_append_only' GROUP BY tgtype" "1 true"
yields "the upgraded chain takes the next events, each linked to the one before" \
    "INSERT INTO audit_events $event_cols
     VALUES (2, '$t1', 'admin', 'a', 'ten_A', '{}', '$h1', '$h2'),
            (3, '$t1', 'admin', 'a', 'ten_A', '{}', '$h2', '$h3');
     SELECT string_agg(seq::text, ',' ORDER BY seq) FROM audit_events" "1,2,3"
refuses "the upgraded chain refuses a gap" \
    "INSERT INTO audit_events $event_cols
     VALUES (3, '$t1', 'admin', 'a', 'ten_A', '{}', '$h1', '$h3')" \
    "23000: an audit event must continue the chain"
refuses "the upgraded chain refuses a wrong link" \
    "INSERT INTO audit_events $event_cols
     VALUES (2, '$t1', 'admin', 'a', 'ten_A', '{}', '$h3', '$h2')" \
    "23000: an audit event must continue the chain"
db_url=$new_url

echo "postgres-schema-check: $checks checks, ${#failed[@]} failed"
if [ "${#failed[@]}" -gt 0 ]; then
    printf '  failed: %s\n' "${failed[@]}"
    exit 1
fi
