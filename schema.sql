-- tenantd schema: every migration, in order. Each starts with a line `-- migration N: …`
-- and takes the schema to version N; `PRAGMA user_version` records the last one applied.
-- A new version appends a section; a released section is never edited. Run as one script,
-- the file builds the newest schema.

-- migration 1: tenants, the audit chain and idempotency records.

-- Tenants are tombstoned, never erased. Amounts are decimal text: SQLite's INTEGER is
-- 64-bit signed and an amount is an unsigned 128-bit integer.
CREATE TABLE tenants (
    id                     TEXT PRIMARY KEY,
    name                   TEXT NOT NULL,
    state                  TEXT NOT NULL CHECK (state IN ('active', 'tombstoned')),
    opening_deposit_atomic TEXT NOT NULL CHECK (
        length(opening_deposit_atomic) BETWEEN 1 AND 39
        AND opening_deposit_atomic NOT GLOB '*[^0-9]*'),
    balance_atomic         TEXT NOT NULL CHECK (
        length(balance_atomic) BETWEEN 1 AND 39 AND balance_atomic NOT GLOB '*[^0-9]*'),
    -- SHA-256 of the tenant token; the token itself is never stored here. The token names its
    -- tenant, so it is checked by a primary-key lookup and needs no index of its own.
    token_hash             BLOB NOT NULL CHECK (length(token_hash) = 32),
    created_at             TEXT NOT NULL,
    tombstoned_at          TEXT,
    CHECK ((state = 'active') = (tombstoned_at IS NULL))
) WITHOUT ROWID;

-- A name is unique among active tenants only: a tombstoned tenant's name may be taken again.
-- The index decides under concurrency; there is no check-then-insert race.
CREATE UNIQUE INDEX tenants_active_name ON tenants (name) WHERE state = 'active';

CREATE TRIGGER tenants_never_deleted
BEFORE DELETE ON tenants
BEGIN
    SELECT RAISE(ABORT, 'tenants are tombstoned, never deleted');
END;

-- What a tenant is does not change; only its state moves, and only forward. A tombstoned
-- tenant is frozen whole, its budget included.
CREATE TRIGGER tenants_identity_immutable
BEFORE UPDATE ON tenants
WHEN NEW.id IS NOT OLD.id
  OR NEW.name IS NOT OLD.name
  OR NEW.opening_deposit_atomic IS NOT OLD.opening_deposit_atomic
  OR NEW.token_hash IS NOT OLD.token_hash
  OR NEW.created_at IS NOT OLD.created_at
  OR (OLD.state = 'tombstoned' AND (
        NEW.state IS NOT OLD.state
     OR NEW.tombstoned_at IS NOT OLD.tombstoned_at
     OR NEW.balance_atomic IS NOT OLD.balance_atomic))
BEGIN
    SELECT RAISE(ABORT, 'a tenant''s identity is immutable and a tombstone is final');
END;

-- The audit chain: append-only, each row linked to the one before by SHA-256.
CREATE TABLE audit_events (
    seq         INTEGER PRIMARY KEY,
    occurred_at TEXT NOT NULL,
    actor       TEXT NOT NULL,
    action      TEXT NOT NULL,
    tenant_id   TEXT NOT NULL,
    payload     TEXT NOT NULL,
    prev_hash   TEXT NOT NULL,
    hash        TEXT NOT NULL
);

CREATE TRIGGER audit_events_no_update
BEFORE UPDATE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit events are immutable');
END;

CREATE TRIGGER audit_events_no_delete
BEFORE DELETE ON audit_events
BEGIN
    SELECT RAISE(ABORT, 'audit events are immutable');
END;

-- A new event must take the next seq and link to the current head.
CREATE TRIGGER audit_events_append_only
BEFORE INSERT ON audit_events
WHEN NEW.seq IS NOT (SELECT coalesce(max(seq), 0) + 1 FROM audit_events)
  OR NEW.prev_hash IS NOT coalesce(
       (SELECT hash FROM audit_events WHERE seq = NEW.seq - 1),
       '0000000000000000000000000000000000000000000000000000000000000000')
BEGIN
    SELECT RAISE(ABORT, 'an audit event must continue the chain');
END;

-- What an idempotent create returned, kept for the replay window and then erased.
-- `response_body` holds the tenant token in plain text: it is the one copy the contract
-- allows, and it is deleted when the window closes.
CREATE TABLE idempotency_keys (
    key           TEXT PRIMARY KEY,
    fingerprint   BLOB NOT NULL,
    tenant_id     TEXT NOT NULL,
    response_body TEXT NOT NULL,
    created_ms    INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX idempotency_keys_created ON idempotency_keys (created_ms);

-- migration 2: an idempotency record belongs to the principal that sent its key, and binds
-- the key to the method and path as well as the body. Records made before belong to the
-- admin (the only principal that could create) and to `POST /v1/tenants`; they keep
-- replaying. The old table is dropped under `secure_delete`, so the tokens in its records do
-- not linger in free pages.
CREATE TABLE idempotency_keys_v2 (
    principal     TEXT NOT NULL,
    key           TEXT NOT NULL,
    method        TEXT NOT NULL,
    path          TEXT NOT NULL,
    -- SHA-256 of the parsed body in its request type's canonical form.
    fingerprint   BLOB NOT NULL CHECK (length(fingerprint) = 32),
    status        INTEGER NOT NULL CHECK (status BETWEEN 200 AND 299),
    location      TEXT,
    response_body TEXT NOT NULL,
    created_ms    INTEGER NOT NULL,
    PRIMARY KEY (principal, key)
) WITHOUT ROWID;

INSERT INTO idempotency_keys_v2
    (principal, key, method, path, fingerprint, status, location, response_body, created_ms)
SELECT 'admin', key, 'POST', '/v1/tenants', fingerprint, 201, '/v1/tenants/' || tenant_id,
       response_body, created_ms
FROM idempotency_keys;

DROP TABLE idempotency_keys;
ALTER TABLE idempotency_keys_v2 RENAME TO idempotency_keys;
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_ms);
