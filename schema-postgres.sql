-- tenantd schema for PostgreSQL: the counterpart of schema.sql at its migration 11 (SQLite's
-- `PRAGMA user_version = 11`). Versions 7, 9 and 10 are PostgreSQL's alone (7: the audit rows
-- that wait for their place in the chain, and each tenant's last id, see audit_pending and
-- tenants.last_id below; 9: the domains and triggers of the last section; 10: the chain
-- checked once a statement, see audit_events); SQLite's migrations 7, 9 and 10 do nothing.
-- SQLite's migration 11 keeps its budgets in the order of their tenants, which a PostgreSQL
-- table has no counterpart of, and its migration 12 indexes the entries a spend leaves on the
-- levels above it in bulk (ledger_levels), which PostgreSQL's indexes need no counterpart of:
-- there are no versions 11 and 12 here, and the next takes number 13, so that each number
-- names one schema. The
-- schema_version table records the version. (SQLite's migration 4 only rewrote
-- two of its CHECKs in a form SQLite runs faster; they accept what they did, and
-- PostgreSQL's need no change.) The tables, columns, uniqueness, indexes and triggers are
-- those that schema.sql's migrations leave. A database made by the version-3 file (before
-- periods and charges) is brought to version 10 by the sections at the end, which add what
-- migrations 5 to 10 add; on a new database those sections find everything in place.
--
-- Run as one script, in one transaction, by the role that owns the database (no superuser:
-- no extension, nothing outside the current schema). It is safe to run again: every object
-- is created only if missing (functions and triggers are replaced by the same definition),
-- and the rows it inserts are inserted only if missing. It refuses a database whose
-- schema_version is newer than 10. Needs PostgreSQL 14 or later (CREATE OR REPLACE TRIGGER).
--
-- Differences from SQLite, all in the representation and none in what is accepted:
-- * Amounts are numeric(39,0) with a CHECK on 0 ..= 2^128 - 1 (the domain tenantd_atomic
--   since version 9), where SQLite holds decimal text. (A fraction given for numeric(39,0) is rounded before any CHECK sees it: the
--   writer binds integers only.)
-- * BLOBs are bytea. Timestamps, the audit chain's payload and hashes stay text, holding
--   exactly what SQLite holds, so that the chain verifies byte for byte.
-- * Every text column is COLLATE "C": comparisons and the order of keys and pages are
--   bytewise, as SQLite's BINARY collation, whatever the database's default collation.
-- * A change's audit row is written to audit_pending, in the change's transaction; a chainer
--   (one at a time, holding the lock of chain_head's one row) moves the pending rows into
--   the chain after they commit, in the order of their ids. The insert trigger on
--   audit_events checks, once a statement, that the rows it appended continue the chain
--   (see below; SQLite's checks each row, with the same message).
-- * A refused write raises SQLSTATE 23000 (integrity_constraint_violation) with the same
--   message as SQLite's RAISE(ABORT, ...). TRUNCATE, which SQLite lacks and which bypasses
--   DELETE triggers, is refused wherever DELETE is.
-- * A budget's key is its id. SQLite keys its budgets by (tenant_id, id), to keep a tenant's
--   budgets on the same pages, with an index and a trigger that keep an id to one budget.
-- * SQLite's secure_delete has no counterpart: an erased idempotency record's bytes stay
--   in the table's file until VACUUM reuses the space.

-- A newer schema is not for this build.
DO $$
BEGIN
    IF to_regclass('schema_version') IS NOT NULL THEN
        IF (SELECT max(version) FROM schema_version) > 10 THEN
            RAISE EXCEPTION 'the database schema is newer (version %) than this build knows (10)',
                (SELECT max(version) FROM schema_version)
                USING ERRCODE = 'feature_not_supported';
        END IF;
    END IF;
END
$$;

-- The schema version: 10 (SQLite's user_version 9; 7, 9 and 10 are what only PostgreSQL
-- has).
CREATE TABLE IF NOT EXISTS schema_version (
    id      integer PRIMARY KEY CHECK (id = 1),
    version integer NOT NULL
);
INSERT INTO schema_version (id, version) VALUES (1, 10)
    ON CONFLICT (id) DO UPDATE SET version = 10;

-- Raises the trigger's first argument as a refused write. Every refusing trigger below uses
-- it, row-level (with the condition in its WHEN clause) or statement-level (TRUNCATE).
CREATE OR REPLACE FUNCTION tenantd_refuse() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', TG_ARGV[0] USING ERRCODE = 'integrity_constraint_violation';
END
$$;

-- Tenants are tombstoned, never erased.
CREATE TABLE IF NOT EXISTS tenants (
    id                     text COLLATE "C" PRIMARY KEY,
    name                   text COLLATE "C" NOT NULL,
    state                  text COLLATE "C" NOT NULL CHECK (state IN ('active', 'tombstoned')),
    opening_deposit_atomic numeric(39,0) NOT NULL CHECK (
        opening_deposit_atomic >= 0
        AND opening_deposit_atomic <= 340282366920938463463374607431768211455),
    -- SHA-256 of the tenant token; the token itself is never stored here.
    token_hash             bytea NOT NULL CHECK (octet_length(token_hash) = 32),
    created_at             text COLLATE "C" NOT NULL,
    tombstoned_at          text COLLATE "C",
    CHECK ((state = 'active') = (tombstoned_at IS NULL))
);

-- A name is unique among active tenants only: a tombstoned tenant's name may be taken again.
CREATE UNIQUE INDEX IF NOT EXISTS tenants_active_name ON tenants (name) WHERE state = 'active';
-- Tombstoned tenants in id order, for `GET /v1/tenants?state=tombstoned`.
CREATE INDEX IF NOT EXISTS tenants_tombstoned ON tenants (id) WHERE state = 'tombstoned';

CREATE OR REPLACE TRIGGER tenants_never_deleted
BEFORE DELETE ON tenants
FOR EACH ROW EXECUTE FUNCTION tenantd_refuse('tenants are tombstoned, never deleted');

CREATE OR REPLACE TRIGGER tenants_never_truncated
BEFORE TRUNCATE ON tenants
FOR EACH STATEMENT EXECUTE FUNCTION tenantd_refuse('tenants are tombstoned, never deleted');

-- What a tenant is does not change; only its state moves, and only forward: its trigger,
-- tenants_identity_immutable, is defined with version 9 below.

-- The audit chain: append-only, each row linked to the one before by SHA-256. Every column
-- is the text SQLite stores.
CREATE TABLE IF NOT EXISTS audit_events (
    seq         bigint PRIMARY KEY,
    occurred_at text COLLATE "C" NOT NULL,
    actor       text COLLATE "C" NOT NULL,
    action      text COLLATE "C" NOT NULL,
    tenant_id   text COLLATE "C" NOT NULL,
    payload     text COLLATE "C" NOT NULL,
    prev_hash   text COLLATE "C" NOT NULL,
    hash        text COLLATE "C" NOT NULL
);

-- The chain's lock: one row that the chainer locks before it appends (`tenantd copy` too,
-- into an empty database). It appends with, in one transaction:
--   SELECT id FROM chain_head WHERE id = 1 FOR UPDATE SKIP LOCKED;  -- or another chains
--   DELETE FROM audit_pending ... RETURNING ...;                   -- the oldest pending
--   SELECT seq, hash FROM audit_events ORDER BY seq DESC LIMIT 1;  -- the head
--   INSERT INTO audit_events ... (seq = head seq + 1, prev_hash = head hash);
-- The row lock orders the chainers, so seq has no gaps and no two events share a parent (a
-- sequence would leave gaps behind rolled-back transactions). The row is never updated: a
-- head kept in it would be rewritten by every event, and a transaction that appends many
-- (a batch, `tenantd copy`) would leave a chain of dead row versions that each later lookup
-- walks, growing with the square of the events.
CREATE TABLE IF NOT EXISTS chain_head (
    id integer PRIMARY KEY CHECK (id = 1)
);
INSERT INTO chain_head (id) VALUES (1) ON CONFLICT (id) DO NOTHING;

-- Audit rows written with their change and not yet in the chain (version 7). Writers of
-- different tenants never wait for one another, so none of them may hold the chain's lock
-- from its first statement to its COMMIT: each writes its row here, and the chainer links
-- the committed ones into audit_events in id order and deletes them, in one transaction.
-- A tenant's writes take the tenant's row lock first (tenants, below), so a tenant's rows
-- get their ids, and commit, in the order of its changes; the chain keeps that order. The
-- columns are audit_events' own but the link (seq, prev_hash, hash), which the chainer
-- computes.
CREATE TABLE IF NOT EXISTS audit_pending (
    id          bigserial PRIMARY KEY,
    occurred_at text COLLATE "C" NOT NULL,
    actor       text COLLATE "C" NOT NULL,
    action      text COLLATE "C" NOT NULL,
    tenant_id   text COLLATE "C" NOT NULL,
    payload     text COLLATE "C" NOT NULL
);

-- A pending row is what a change recorded: it is chained as written, or not at all.
CREATE OR REPLACE TRIGGER audit_pending_no_update
BEFORE UPDATE ON audit_pending
FOR EACH ROW EXECUTE FUNCTION tenantd_refuse('pending audit events are immutable');

CREATE OR REPLACE TRIGGER audit_pending_no_truncate
BEFORE TRUNCATE ON audit_pending
FOR EACH STATEMENT EXECUTE FUNCTION tenantd_refuse('pending audit events are immutable');

-- A new event must take the next seq and link to the event before it (seq 0 and 64 zeros
-- for the first): checked once a statement, over the rows it appended, after the chain's lock
-- is taken (at once when the chainer holds it already), so a writer that did not lock it
-- first still waits its turn and is checked against the chain as it is once the lock is
-- granted. A row whose seq is taken is refused by the primary key first (SQLSTATE 23505);
-- every other row needs the row before it in the chain, so the rows appended continue it
-- without a gap or a fork. Until version 10 a row trigger checked each row against the last
-- one stored, two queries a row: half of what an append cost, on a path every write takes.
CREATE OR REPLACE FUNCTION audit_events_continue_chain() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM 1 FROM chain_head WHERE id = 1 FOR UPDATE;
    IF NOT FOUND OR EXISTS (
        SELECT 1 FROM appended a LEFT JOIN audit_events b ON b.seq = a.seq - 1
        WHERE CASE WHEN a.seq = 1 THEN a.prev_hash IS DISTINCT FROM repeat('0', 64)
                   ELSE b.hash IS DISTINCT FROM a.prev_hash END
    ) THEN
        RAISE EXCEPTION 'an audit event must continue the chain'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER audit_events_append_only
AFTER INSERT ON audit_events REFERENCING NEW TABLE AS appended
FOR EACH STATEMENT EXECUTE FUNCTION audit_events_continue_chain();

CREATE OR REPLACE TRIGGER audit_events_no_update
BEFORE UPDATE ON audit_events
FOR EACH ROW EXECUTE FUNCTION tenantd_refuse('audit events are immutable');

CREATE OR REPLACE TRIGGER audit_events_no_delete
BEFORE DELETE ON audit_events
FOR EACH ROW EXECUTE FUNCTION tenantd_refuse('audit events are immutable');

CREATE OR REPLACE TRIGGER audit_events_no_truncate
BEFORE TRUNCATE ON audit_events
FOR EACH STATEMENT EXECUTE FUNCTION tenantd_refuse('audit events are immutable');

-- The chain's lock is never updated, deleted or truncated.
CREATE OR REPLACE TRIGGER chain_head_no_update
BEFORE UPDATE ON chain_head
FOR EACH ROW EXECUTE FUNCTION tenantd_refuse('the chain''s lock row never changes');

CREATE OR REPLACE TRIGGER chain_head_no_delete
BEFORE DELETE ON chain_head
FOR EACH ROW EXECUTE FUNCTION tenantd_refuse('the chain''s lock row never changes');

CREATE OR REPLACE TRIGGER chain_head_no_truncate
BEFORE TRUNCATE ON chain_head
FOR EACH STATEMENT EXECUTE FUNCTION tenantd_refuse('the chain''s lock row never changes');

-- What an idempotent request returned, kept for the replay window and then erased. It
-- belongs to the principal that sent its key, and binds the key to the method and path as
-- well as the body. `response_body` may hold a tenant token in plain text: it is the one
-- copy the contract allows, and it is deleted when the window closes.
CREATE TABLE IF NOT EXISTS idempotency_keys (
    principal     text COLLATE "C" NOT NULL,
    key           text COLLATE "C" NOT NULL,
    method        text COLLATE "C" NOT NULL,
    path          text COLLATE "C" NOT NULL,
    -- SHA-256 of the parsed body in its request type's canonical form.
    fingerprint   bytea NOT NULL CHECK (octet_length(fingerprint) = 32),
    status        integer NOT NULL CHECK (status BETWEEN 200 AND 299),
    location      text COLLATE "C",
    response_body text COLLATE "C" NOT NULL,
    created_ms    bigint NOT NULL,
    PRIMARY KEY (principal, key)
);

CREATE INDEX IF NOT EXISTS idempotency_keys_created ON idempotency_keys (created_ms);

-- Budgets that can be spent. A tenant has one or more budgets; each holds its running
-- totals, and every movement appends a ledger entry. The invariant
-- credited >= debited + spent + reserved is kept by the writer, in the transaction of every
-- movement, with checked 128-bit arithmetic.
CREATE TABLE IF NOT EXISTS budgets (
    id                     text COLLATE "C" PRIMARY KEY,
    tenant_id              text COLLATE "C" NOT NULL,
    name                   text COLLATE "C" NOT NULL,
    unit                   text COLLATE "C" NOT NULL,
    state                  text COLLATE "C" NOT NULL CHECK (state IN ('open', 'closed')),
    created_at             text COLLATE "C" NOT NULL,
    closed_at              text COLLATE "C",
    opening_deposit_atomic numeric(39,0) NOT NULL CHECK (
        opening_deposit_atomic >= 0
        AND opening_deposit_atomic <= 340282366920938463463374607431768211455),
    credited_atomic        numeric(39,0) NOT NULL CHECK (
        credited_atomic >= 0 AND credited_atomic <= 340282366920938463463374607431768211455),
    debited_atomic         numeric(39,0) NOT NULL CHECK (
        debited_atomic >= 0 AND debited_atomic <= 340282366920938463463374607431768211455),
    spent_atomic           numeric(39,0) NOT NULL CHECK (
        spent_atomic >= 0 AND spent_atomic <= 340282366920938463463374607431768211455),
    reserved_atomic        numeric(39,0) NOT NULL CHECK (
        reserved_atomic >= 0 AND reserved_atomic <= 340282366920938463463374607431768211455),
    CHECK ((state = 'open') = (closed_at IS NULL))
);

-- A name is unique among a tenant's open budgets; a closed budget's name may be taken again.
CREATE UNIQUE INDEX IF NOT EXISTS budgets_open_name ON budgets (tenant_id, name)
    WHERE state = 'open';
CREATE INDEX IF NOT EXISTS budgets_tenant ON budgets (tenant_id, id);

CREATE OR REPLACE TRIGGER budgets_never_deleted
BEFORE DELETE ON budgets
FOR EACH ROW EXECUTE FUNCTION tenantd_refuse('budgets are closed, never deleted');

CREATE OR REPLACE TRIGGER budgets_never_truncated
BEFORE TRUNCATE ON budgets
FOR EACH STATEMENT EXECUTE FUNCTION tenantd_refuse('budgets are closed, never deleted');

-- What a budget is does not change: its trigger, budgets_identity_immutable, is defined with
-- version 9 below, once the parent's column exists.

-- Reservations hold part of a budget until they are committed, released or expire.
CREATE TABLE IF NOT EXISTS reservations (
    id               text COLLATE "C" PRIMARY KEY,
    tenant_id        text COLLATE "C" NOT NULL,
    budget_id        text COLLATE "C" NOT NULL,
    state            text COLLATE "C" NOT NULL
                     CHECK (state IN ('active', 'committed', 'released', 'expired')),
    amount_atomic    numeric(39,0) NOT NULL CHECK (
        amount_atomic >= 0 AND amount_atomic <= 340282366920938463463374607431768211455),
    committed_atomic numeric(39,0) CHECK (
        committed_atomic >= 0 AND committed_atomic <= 340282366920938463463374607431768211455),
    memo             text COLLATE "C",
    created_at       text COLLATE "C" NOT NULL,
    -- RFC 3339 text of one fixed width, so text order is time order.
    expires_at       text COLLATE "C" NOT NULL,
    settled_at       text COLLATE "C",
    CHECK ((state = 'active') = (settled_at IS NULL)),
    CHECK ((state = 'committed') = (committed_atomic IS NOT NULL))
);

CREATE INDEX IF NOT EXISTS reservations_tenant ON reservations (tenant_id, id);
-- The active reservations of a tenant in id order: a page of `?state=active` seeks here
-- rather than walking every settled reservation of the tenant.
CREATE INDEX IF NOT EXISTS reservations_tenant_active ON reservations (tenant_id, id)
    WHERE state = 'active';
-- The active reservations of a budget, soonest to expire first: what a write on the budget
-- must expire first, and what a close or a tombstone releases.
CREATE INDEX IF NOT EXISTS reservations_active_budget ON reservations (budget_id, expires_at)
    WHERE state = 'active';
-- Every active reservation by expiry: the sweep that records expiries within a second.
CREATE INDEX IF NOT EXISTS reservations_active_expiry ON reservations (expires_at)
    WHERE state = 'active';

CREATE OR REPLACE TRIGGER reservations_never_deleted
BEFORE DELETE ON reservations
FOR EACH ROW EXECUTE FUNCTION tenantd_refuse('reservations are settled, never deleted');

CREATE OR REPLACE TRIGGER reservations_never_truncated
BEFORE TRUNCATE ON reservations
FOR EACH STATEMENT EXECUTE FUNCTION tenantd_refuse('reservations are settled, never deleted');

-- Only an active reservation changes, its expiry (an extend) or its state (a settlement):
-- its triggers are defined with version 9 below.

-- Every movement of a budget, append-only.
CREATE TABLE IF NOT EXISTS ledger_entries (
    id               text COLLATE "C" PRIMARY KEY,
    budget_id        text COLLATE "C" NOT NULL,
    kind             text COLLATE "C" NOT NULL
                     CHECK (kind IN ('opening_deposit', 'credit', 'debit', 'reserve', 'commit',
                                     'release', 'expire')),
    amount_atomic    numeric(39,0) NOT NULL CHECK (
        amount_atomic >= 0 AND amount_atomic <= 340282366920938463463374607431768211455),
    reservation_id   text COLLATE "C",
    memo             text COLLATE "C",
    occurred_at      text COLLATE "C" NOT NULL,
    balance_atomic   numeric(39,0) NOT NULL CHECK (
        balance_atomic >= 0 AND balance_atomic <= 340282366920938463463374607431768211455),
    available_atomic numeric(39,0) NOT NULL CHECK (
        available_atomic >= 0 AND available_atomic <= 340282366920938463463374607431768211455)
);

CREATE INDEX IF NOT EXISTS ledger_entries_budget ON ledger_entries (budget_id, id);

CREATE OR REPLACE TRIGGER ledger_entries_no_update
BEFORE UPDATE ON ledger_entries
FOR EACH ROW EXECUTE FUNCTION tenantd_refuse('ledger entries are immutable');

CREATE OR REPLACE TRIGGER ledger_entries_no_delete
BEFORE DELETE ON ledger_entries
FOR EACH ROW EXECUTE FUNCTION tenantd_refuse('ledger entries are immutable');

CREATE OR REPLACE TRIGGER ledger_entries_no_truncate
BEFORE TRUNCATE ON ledger_entries
FOR EACH STATEMENT EXECUTE FUNCTION tenantd_refuse('ledger entries are immutable');

-- Version 5: budgets that renew, one-call charges and alert thresholds (schema.sql's migration
-- 5). A budget's period policy, its current period and its thresholds live in a table of
-- their own (schema.sql says why), a row for each budget that ever had a policy or
-- thresholds; the partial index on `period_ends_at` is the sweep that records boundaries
-- within a second. `alert_thresholds` holds the thresholds as decimal text, largest first,
-- separated by commas ('' for none).
CREATE TABLE IF NOT EXISTS budget_renewals (
    budget_id                  text COLLATE "C" PRIMARY KEY,
    period_interval            text COLLATE "C"
        CHECK (period_interval IN ('day', 'week', 'month')),
    period_time_zone           text COLLATE "C",
    period_every_seconds       bigint CHECK (period_every_seconds BETWEEN 1 AND 31622400),
    period_allowance_atomic    numeric(39,0) CHECK (
        period_allowance_atomic >= 0
        AND period_allowance_atomic <= 340282366920938463463374607431768211455),
    period_rollover_max_atomic numeric(39,0) CHECK (
        period_rollover_max_atomic >= 0
        AND period_rollover_max_atomic <= 340282366920938463463374607431768211455),
    period_anchor              text COLLATE "C",
    period_id                  text COLLATE "C",
    period_started_at          text COLLATE "C",
    period_ends_at             text COLLATE "C",
    alert_thresholds           text COLLATE "C" NOT NULL DEFAULT ''
        CHECK (alert_thresholds !~ '[^0-9,]'),
    -- A policy is whole or absent, calendar or fixed; a current period needs a policy and is
    -- named whole.
    CONSTRAINT budget_renewals_period_whole CHECK (
        (period_time_zone IS NULL) = (period_interval IS NULL)
        AND (period_interval IS NULL OR period_every_seconds IS NULL)
        AND (period_allowance_atomic IS NULL) = (period_interval IS NULL
                                                AND period_every_seconds IS NULL)
        AND (period_rollover_max_atomic IS NULL) = (period_allowance_atomic IS NULL)
        AND (period_anchor IS NULL) = (period_allowance_atomic IS NULL)
        AND (period_started_at IS NULL) = (period_id IS NULL)
        AND (period_ends_at IS NULL) = (period_id IS NULL)
        AND (period_id IS NULL OR period_allowance_atomic IS NOT NULL))
);

-- Every current period by its end: what the boundary sweep reads.
CREATE INDEX IF NOT EXISTS budget_renewals_due ON budget_renewals (period_ends_at)
    WHERE period_ends_at IS NOT NULL;

CREATE OR REPLACE TRIGGER budget_renewals_never_deleted
BEFORE DELETE ON budget_renewals
FOR EACH ROW EXECUTE FUNCTION tenantd_refuse('a budget''s renewal is changed, never deleted');

CREATE OR REPLACE TRIGGER budget_renewals_never_truncated
BEFORE TRUNCATE ON budget_renewals
FOR EACH STATEMENT EXECUTE FUNCTION tenantd_refuse('a budget''s renewal is changed, never deleted');

-- A closed budget is frozen whole, its renewal included.
CREATE OR REPLACE FUNCTION tenantd_renewal_frozen() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.budget_id IS DISTINCT FROM OLD.budget_id
       OR (SELECT state FROM budgets WHERE id = OLD.budget_id) IS DISTINCT FROM 'open' THEN
        RAISE EXCEPTION 'a budget''s renewal belongs to it and is frozen once it is closed'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE TRIGGER budget_renewals_frozen_when_closed
BEFORE UPDATE ON budget_renewals
FOR EACH ROW EXECUTE FUNCTION tenantd_renewal_frozen();

-- A budget's periods, its statements. The current one (at most one a budget) keeps the
-- budget's totals right after it began; a closed one holds its own totals and how it ended.
CREATE TABLE IF NOT EXISTS periods (
    id                       text COLLATE "C" PRIMARY KEY,
    budget_id                text COLLATE "C" NOT NULL,
    state                    text COLLATE "C" NOT NULL CHECK (state IN ('current', 'closed')),
    started_at               text COLLATE "C" NOT NULL,
    -- The next boundary while current; the instant it ended once closed.
    ends_at                  text COLLATE "C" NOT NULL,
    allowance_atomic         numeric(39,0) NOT NULL CHECK (
        allowance_atomic >= 0 AND allowance_atomic <= 340282366920938463463374607431768211455),
    carried_in_atomic        numeric(39,0) NOT NULL CHECK (
        carried_in_atomic >= 0 AND carried_in_atomic <= 340282366920938463463374607431768211455),
    opening_available_atomic numeric(39,0) NOT NULL CHECK (
        opening_available_atomic >= 0
        AND opening_available_atomic <= 340282366920938463463374607431768211455),
    start_credited_atomic    numeric(39,0) NOT NULL CHECK (
        start_credited_atomic >= 0
        AND start_credited_atomic <= 340282366920938463463374607431768211455),
    start_debited_atomic     numeric(39,0) NOT NULL CHECK (
        start_debited_atomic >= 0
        AND start_debited_atomic <= 340282366920938463463374607431768211455),
    start_spent_atomic       numeric(39,0) NOT NULL CHECK (
        start_spent_atomic >= 0
        AND start_spent_atomic <= 340282366920938463463374607431768211455),
    credited_atomic          numeric(39,0) CHECK (
        credited_atomic >= 0 AND credited_atomic <= 340282366920938463463374607431768211455),
    debited_atomic           numeric(39,0) CHECK (
        debited_atomic >= 0 AND debited_atomic <= 340282366920938463463374607431768211455),
    spent_atomic             numeric(39,0) CHECK (
        spent_atomic >= 0 AND spent_atomic <= 340282366920938463463374607431768211455),
    forfeited_atomic         numeric(39,0) CHECK (
        forfeited_atomic >= 0 AND forfeited_atomic <= 340282366920938463463374607431768211455),
    carried_out_atomic       numeric(39,0) CHECK (
        carried_out_atomic >= 0
        AND carried_out_atomic <= 340282366920938463463374607431768211455),
    closing_available_atomic numeric(39,0) CHECK (
        closing_available_atomic >= 0
        AND closing_available_atomic <= 340282366920938463463374607431768211455),
    CHECK ((state = 'current') = (credited_atomic IS NULL)
       AND (state = 'current') = (debited_atomic IS NULL)
       AND (state = 'current') = (spent_atomic IS NULL)
       AND (state = 'current') = (forfeited_atomic IS NULL)
       AND (state = 'current') = (carried_out_atomic IS NULL)
       AND (state = 'current') = (closing_available_atomic IS NULL))
);

CREATE INDEX IF NOT EXISTS periods_budget ON periods (budget_id, id);
-- At most one current period a budget.
CREATE UNIQUE INDEX IF NOT EXISTS periods_current ON periods (budget_id)
    WHERE state = 'current';

CREATE OR REPLACE TRIGGER periods_never_deleted
BEFORE DELETE ON periods
FOR EACH ROW EXECUTE FUNCTION tenantd_refuse('periods are closed, never deleted');

CREATE OR REPLACE TRIGGER periods_never_truncated
BEFORE TRUNCATE ON periods
FOR EACH STATEMENT EXECUTE FUNCTION tenantd_refuse('periods are closed, never deleted');

-- Only a current period changes, once, when it closes: its triggers are defined with
-- version 9 below.

-- The ledger gains three kinds (a charge, a period's refill and its forfeit) and the period
-- each entry fell in (NULL for a budget without one).
ALTER TABLE ledger_entries ADD COLUMN IF NOT EXISTS period_id text COLLATE "C";
ALTER TABLE ledger_entries DROP CONSTRAINT IF EXISTS ledger_entries_kind_check;
ALTER TABLE ledger_entries ADD CONSTRAINT ledger_entries_kind_check
    CHECK (kind IN ('opening_deposit', 'credit', 'debit', 'reserve', 'commit', 'release',
                    'expire', 'charge', 'refill', 'forfeit'));

-- Events (migration 6): what happened, for other systems to hear or poll; one row an event,
-- written in the transaction of its change, `data` the JSON the API answered then. Never
-- changed; erased past their retention.
CREATE TABLE IF NOT EXISTS events (
    id         text COLLATE "C" PRIMARY KEY,
    type       text COLLATE "C" NOT NULL CHECK (type IN (
        'tenant.created', 'tenant.tombstoned', 'budget.created', 'budget.updated',
        'budget.closed', 'budget.credited', 'budget.debited', 'budget.available_low',
        'budget.period_reset', 'reservation.expired')),
    created_at text COLLATE "C" NOT NULL,
    tenant_id  text COLLATE "C" NOT NULL,
    data       text COLLATE "C" NOT NULL
);

CREATE INDEX IF NOT EXISTS events_tenant ON events (tenant_id, id);

CREATE OR REPLACE TRIGGER events_no_update
BEFORE UPDATE ON events
FOR EACH ROW EXECUTE FUNCTION tenantd_refuse('events are immutable');

-- Webhook endpoints and their deliveries (migration 6); see schema.sql for what each column
-- holds.
CREATE TABLE IF NOT EXISTS webhook_endpoints (
    id              text COLLATE "C" PRIMARY KEY,
    url             text COLLATE "C" NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    description     text COLLATE "C",
    event_types     text COLLATE "C" NOT NULL CHECK (length(event_types) >= 1),
    tenant_id       text COLLATE "C",
    state           text COLLATE "C" NOT NULL CHECK (state IN ('enabled', 'disabled', 'deleted')),
    disabled_reason text COLLATE "C" CHECK (disabled_reason IN ('manual', 'failing')),
    created_at      text COLLATE "C" NOT NULL,
    secret          bytea NOT NULL,
    previous_secret bytea,
    previous_until  text COLLATE "C",
    failures        bigint NOT NULL DEFAULT 0 CHECK (failures >= 0),
    lease_owner     text COLLATE "C",
    lease_until     text COLLATE "C",
    CONSTRAINT webhook_endpoints_consistent CHECK (
        (state = 'disabled') = (disabled_reason IS NOT NULL)
        AND (state = 'deleted') = (length(secret) = 0)
        AND (state = 'deleted' OR length(secret) = 32)
        AND (previous_secret IS NULL) = (previous_until IS NULL)
        AND (lease_owner IS NULL) = (lease_until IS NULL))
);

CREATE OR REPLACE TRIGGER webhook_endpoints_never_erased
BEFORE DELETE ON webhook_endpoints
FOR EACH ROW EXECUTE FUNCTION
    tenantd_refuse('webhook endpoints are deleted by their state, never erased');

CREATE OR REPLACE TRIGGER webhook_endpoints_never_truncated
BEFORE TRUNCATE ON webhook_endpoints
FOR EACH STATEMENT EXECUTE FUNCTION
    tenantd_refuse('webhook endpoints are deleted by their state, never erased');

CREATE OR REPLACE TRIGGER webhook_endpoints_deleted_is_final
BEFORE UPDATE ON webhook_endpoints
FOR EACH ROW
WHEN (OLD.state = 'deleted' OR NEW.id IS DISTINCT FROM OLD.id
   OR NEW.created_at IS DISTINCT FROM OLD.created_at)
EXECUTE FUNCTION tenantd_refuse('a deleted webhook endpoint is final');

CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id              text COLLATE "C" PRIMARY KEY,
    endpoint_id     text COLLATE "C" NOT NULL,
    event_id        text COLLATE "C" NOT NULL,
    event_type      text COLLATE "C" NOT NULL,
    state           text COLLATE "C" NOT NULL CHECK (state IN ('pending', 'succeeded', 'failed')),
    attempts        bigint NOT NULL CHECK (attempts >= 0),
    last_attempt_at text COLLATE "C",
    last_status     bigint CHECK (last_status BETWEEN 100 AND 599),
    last_error      text COLLATE "C",
    next_attempt_at text COLLATE "C",
    succeeded_at    text COLLATE "C",
    retry_once      bigint NOT NULL DEFAULT 0 CHECK (retry_once IN (0, 1)),
    CONSTRAINT webhook_deliveries_consistent CHECK (
        (state = 'pending') = (next_attempt_at IS NOT NULL)
        AND (state = 'succeeded') = (succeeded_at IS NOT NULL))
);

CREATE INDEX IF NOT EXISTS webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, id);
CREATE INDEX IF NOT EXISTS webhook_deliveries_due ON webhook_deliveries
    (endpoint_id, next_attempt_at) WHERE state = 'pending';
CREATE INDEX IF NOT EXISTS webhook_deliveries_event ON webhook_deliveries (event_id);

-- Version 7: what only PostgreSQL has. The last id any write of the tenant made: a write
-- takes the tenant's row lock with `SELECT last_id ... FOR NO KEY UPDATE NOWAIT`, makes its
-- ids after it (so a budget's entries, made through any instance, sort in the order they
-- were made) and stores its own last id. NULL until the first such write.
ALTER TABLE tenants ADD COLUMN IF NOT EXISTS last_id text COLLATE "C";

-- Version 8 (schema.sql's migration 8): budgets in a tree. A budget's parent is an open
-- budget of the same tenant, fixed for its life, at most three levels above it (the writer
-- checks them when it creates the budget); every budget made before is at the top. A spend
-- leaves an entry on each ancestor, whose via_budget_id names the budget spent on (NULL for
-- a budget's own movement, as every entry made before is).
ALTER TABLE budgets ADD COLUMN IF NOT EXISTS parent_id text COLLATE "C";
ALTER TABLE ledger_entries ADD COLUMN IF NOT EXISTS via_budget_id text COLLATE "C";

-- A budget's children in id order: the parent_id filter, and the open children that keep a
-- budget from closing.
CREATE INDEX IF NOT EXISTS budgets_parent ON budgets (parent_id, id)
    WHERE parent_id IS NOT NULL;

-- What a budget is does not change, its parent included, and a closed budget is frozen
-- whole: its triggers are defined with version 9 below.

-- Version 9: PostgreSQL's alone (SQLite's migration 9 does nothing); the same rules, in forms
-- the server keeps ready. PostgreSQL reads a table's CHECK constraints and a row trigger's
-- WHEN clause from their stored text again at every INSERT or UPDATE statement: with five
-- 39-digit range checks and a WHEN of seven columns, that reading cost an update of a
-- budget's figures more than the update. A domain's checks are read once a connection.
-- * Every amount is of the domain tenantd_atomic: numeric(39,0) in 0 ..= 2^128 - 1. A ledger
--   entry's kind and an event's type are of tenantd_entry_kind and tenantd_event_type.
-- * A trigger that keeps what a row is fires only for an UPDATE that sets one of the columns
--   it watches (`UPDATE OF`); the rule on a row's state keeps a WHEN of its own, short.
-- A database made before gets the domains without a rewrite of its tables: each column moves
-- to its domain before the domain has its check, which then reads every row once.
DO $$
BEGIN
    IF to_regtype('tenantd_atomic') IS NULL THEN
        CREATE DOMAIN tenantd_atomic AS numeric(39,0);
    END IF;
    IF to_regtype('tenantd_entry_kind') IS NULL THEN
        CREATE DOMAIN tenantd_entry_kind AS text COLLATE "C";
    END IF;
    IF to_regtype('tenantd_event_type') IS NULL THEN
        CREATE DOMAIN tenantd_event_type AS text COLLATE "C";
    END IF;
END
$$;

-- The triggers that keep what a row is (a database made before version 9 has them in their
-- former shape) go first, since they name columns whose type changes, and come back below.
DROP TRIGGER IF EXISTS tenants_identity_immutable ON tenants;
DROP TRIGGER IF EXISTS budgets_identity_immutable ON budgets;
DROP TRIGGER IF EXISTS reservations_settled_are_final ON reservations;
DROP TRIGGER IF EXISTS reservations_identity_immutable ON reservations;
DROP TRIGGER IF EXISTS periods_closed_are_final ON periods;
DROP TRIGGER IF EXISTS periods_identity_immutable ON periods;

-- The range checks of every amount column (one column each, bounded by 2^128 - 1), and the
-- checks of the entry kinds and event types, whatever their names: their domains hold them.
DO $$
DECLARE
    c record;
BEGIN
    FOR c IN
        SELECT conrelid::regclass AS tab, conname
        FROM pg_constraint
        WHERE contype = 'c'
          AND conrelid IN ('tenants'::regclass, 'budgets'::regclass, 'reservations'::regclass,
                           'ledger_entries'::regclass, 'budget_renewals'::regclass,
                           'periods'::regclass, 'events'::regclass)
          AND cardinality(conkey) = 1
          AND (pg_get_constraintdef(oid) LIKE '%340282366920938463463374607431768211455%'
               OR conname IN ('ledger_entries_kind_check', 'events_type_check'))
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', c.tab, c.conname);
    END LOOP;
END
$$;

ALTER TABLE tenants
    ALTER COLUMN opening_deposit_atomic TYPE tenantd_atomic;
ALTER TABLE budgets
    ALTER COLUMN opening_deposit_atomic TYPE tenantd_atomic,
    ALTER COLUMN credited_atomic TYPE tenantd_atomic,
    ALTER COLUMN debited_atomic TYPE tenantd_atomic,
    ALTER COLUMN spent_atomic TYPE tenantd_atomic,
    ALTER COLUMN reserved_atomic TYPE tenantd_atomic;
ALTER TABLE reservations
    ALTER COLUMN amount_atomic TYPE tenantd_atomic,
    ALTER COLUMN committed_atomic TYPE tenantd_atomic;
ALTER TABLE ledger_entries
    ALTER COLUMN kind TYPE tenantd_entry_kind,
    ALTER COLUMN amount_atomic TYPE tenantd_atomic,
    ALTER COLUMN balance_atomic TYPE tenantd_atomic,
    ALTER COLUMN available_atomic TYPE tenantd_atomic;
ALTER TABLE budget_renewals
    ALTER COLUMN period_allowance_atomic TYPE tenantd_atomic,
    ALTER COLUMN period_rollover_max_atomic TYPE tenantd_atomic;
ALTER TABLE periods
    ALTER COLUMN allowance_atomic TYPE tenantd_atomic,
    ALTER COLUMN carried_in_atomic TYPE tenantd_atomic,
    ALTER COLUMN opening_available_atomic TYPE tenantd_atomic,
    ALTER COLUMN start_credited_atomic TYPE tenantd_atomic,
    ALTER COLUMN start_debited_atomic TYPE tenantd_atomic,
    ALTER COLUMN start_spent_atomic TYPE tenantd_atomic,
    ALTER COLUMN credited_atomic TYPE tenantd_atomic,
    ALTER COLUMN debited_atomic TYPE tenantd_atomic,
    ALTER COLUMN spent_atomic TYPE tenantd_atomic,
    ALTER COLUMN forfeited_atomic TYPE tenantd_atomic,
    ALTER COLUMN carried_out_atomic TYPE tenantd_atomic,
    ALTER COLUMN closing_available_atomic TYPE tenantd_atomic;
ALTER TABLE events
    ALTER COLUMN type TYPE tenantd_event_type;

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_constraint WHERE conname = 'tenantd_atomic_range'
                   AND contypid = 'tenantd_atomic'::regtype) THEN
        ALTER DOMAIN tenantd_atomic ADD CONSTRAINT tenantd_atomic_range
            CHECK (VALUE >= 0 AND VALUE <= 340282366920938463463374607431768211455);
    END IF;
    IF NOT EXISTS (SELECT FROM pg_constraint WHERE conname = 'tenantd_entry_kind_known'
                   AND contypid = 'tenantd_entry_kind'::regtype) THEN
        ALTER DOMAIN tenantd_entry_kind ADD CONSTRAINT tenantd_entry_kind_known
            CHECK (VALUE IN ('opening_deposit', 'credit', 'debit', 'reserve', 'commit',
                             'release', 'expire', 'charge', 'refill', 'forfeit'));
    END IF;
    IF NOT EXISTS (SELECT FROM pg_constraint WHERE conname = 'tenantd_event_type_known'
                   AND contypid = 'tenantd_event_type'::regtype) THEN
        ALTER DOMAIN tenantd_event_type ADD CONSTRAINT tenantd_event_type_known
            CHECK (VALUE IN (
                'tenant.created', 'tenant.tombstoned', 'budget.created', 'budget.updated',
                'budget.closed', 'budget.credited', 'budget.debited', 'budget.available_low',
                'budget.period_reset', 'reservation.expired'));
    END IF;
END
$$;

-- What a tenant is does not change; only its state moves, and only forward. Its last id
-- (version 7), set by every batch of writes, is not watched.
CREATE OR REPLACE TRIGGER tenants_identity_immutable
BEFORE UPDATE OF id, name, state, opening_deposit_atomic, token_hash, created_at, tombstoned_at
ON tenants
FOR EACH ROW
WHEN (NEW.id IS DISTINCT FROM OLD.id
   OR NEW.name IS DISTINCT FROM OLD.name
   OR NEW.opening_deposit_atomic IS DISTINCT FROM OLD.opening_deposit_atomic
   OR NEW.token_hash IS DISTINCT FROM OLD.token_hash
   OR NEW.created_at IS DISTINCT FROM OLD.created_at
   OR (OLD.state = 'tombstoned' AND (
         NEW.state IS DISTINCT FROM OLD.state
      OR NEW.tombstoned_at IS DISTINCT FROM OLD.tombstoned_at)))
EXECUTE FUNCTION tenantd_refuse('a tenant''s identity is immutable and a tombstone is final');

-- What a budget is does not change, its parent included, and a closed budget is frozen whole:
-- two triggers, one refusal.
CREATE OR REPLACE TRIGGER budgets_identity_immutable
BEFORE UPDATE OF id, tenant_id, name, unit, created_at, opening_deposit_atomic, parent_id
ON budgets
FOR EACH ROW
WHEN (NEW.id IS DISTINCT FROM OLD.id
   OR NEW.tenant_id IS DISTINCT FROM OLD.tenant_id
   OR NEW.name IS DISTINCT FROM OLD.name
   OR NEW.unit IS DISTINCT FROM OLD.unit
   OR NEW.created_at IS DISTINCT FROM OLD.created_at
   OR NEW.opening_deposit_atomic IS DISTINCT FROM OLD.opening_deposit_atomic
   OR NEW.parent_id IS DISTINCT FROM OLD.parent_id)
EXECUTE FUNCTION tenantd_refuse('a budget''s identity is immutable and a closed budget is frozen');

CREATE OR REPLACE TRIGGER budgets_closed_are_frozen
BEFORE UPDATE ON budgets
FOR EACH ROW
WHEN (OLD.state = 'closed')
EXECUTE FUNCTION tenantd_refuse('a budget''s identity is immutable and a closed budget is frozen');

-- Only an active reservation changes: its expiry (an extend) or its state (a settlement).
CREATE OR REPLACE TRIGGER reservations_settled_are_final
BEFORE UPDATE ON reservations
FOR EACH ROW
WHEN (OLD.state IS DISTINCT FROM 'active')
EXECUTE FUNCTION tenantd_refuse('a reservation changes only while it is active');

CREATE OR REPLACE TRIGGER reservations_identity_immutable
BEFORE UPDATE OF id, tenant_id, budget_id, amount_atomic, memo, created_at ON reservations
FOR EACH ROW
WHEN (NEW.id IS DISTINCT FROM OLD.id
   OR NEW.tenant_id IS DISTINCT FROM OLD.tenant_id
   OR NEW.budget_id IS DISTINCT FROM OLD.budget_id
   OR NEW.amount_atomic IS DISTINCT FROM OLD.amount_atomic
   OR NEW.memo IS DISTINCT FROM OLD.memo
   OR NEW.created_at IS DISTINCT FROM OLD.created_at)
EXECUTE FUNCTION tenantd_refuse('a reservation changes only while it is active');

-- Only a current period changes, once: when it closes.
CREATE OR REPLACE TRIGGER periods_closed_are_final
BEFORE UPDATE ON periods
FOR EACH ROW
WHEN (OLD.state IS DISTINCT FROM 'current')
EXECUTE FUNCTION tenantd_refuse('a period changes only while it is current');

CREATE OR REPLACE TRIGGER periods_identity_immutable
BEFORE UPDATE OF id, budget_id, started_at, allowance_atomic, carried_in_atomic,
    opening_available_atomic, start_credited_atomic, start_debited_atomic, start_spent_atomic
ON periods
FOR EACH ROW
WHEN (NEW.id IS DISTINCT FROM OLD.id
   OR NEW.budget_id IS DISTINCT FROM OLD.budget_id
   OR NEW.started_at IS DISTINCT FROM OLD.started_at
   OR NEW.allowance_atomic IS DISTINCT FROM OLD.allowance_atomic
   OR NEW.carried_in_atomic IS DISTINCT FROM OLD.carried_in_atomic
   OR NEW.opening_available_atomic IS DISTINCT FROM OLD.opening_available_atomic
   OR NEW.start_credited_atomic IS DISTINCT FROM OLD.start_credited_atomic
   OR NEW.start_debited_atomic IS DISTINCT FROM OLD.start_debited_atomic
   OR NEW.start_spent_atomic IS DISTINCT FROM OLD.start_spent_atomic)
EXECUTE FUNCTION tenantd_refuse('a period changes only while it is current');
