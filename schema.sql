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

-- migration 3: budgets that can be spent. A tenant has one or more budgets; each holds its
-- running totals, and every movement appends a ledger entry. Reservations hold part of a
-- budget until they are committed, released or expire. Amounts are decimal text (as in the
-- first migration); the invariant credited >= debited + spent + reserved is kept by the writer,
-- in the transaction of every movement, with checked 128-bit arithmetic.
--
-- Every tenant made before gets its default budget (id `bud_` + the tenant's ULID, name
-- `default`, unit `atomic`) from its opening deposit, which nothing could move until now, and
-- that budget's `opening_deposit` entry (id `ent_` + the same ULID). A tombstoned tenant's
-- budget is closed when the tenant was tombstoned. The tenants' own `balance_atomic` column
-- goes: the budgets table holds the figures now.
CREATE TABLE budgets (
    id                     TEXT PRIMARY KEY,
    tenant_id              TEXT NOT NULL,
    name                   TEXT NOT NULL,
    unit                   TEXT NOT NULL,
    state                  TEXT NOT NULL CHECK (state IN ('open', 'closed')),
    created_at             TEXT NOT NULL,
    closed_at              TEXT,
    opening_deposit_atomic TEXT NOT NULL CHECK (
        length(opening_deposit_atomic) BETWEEN 1 AND 39
        AND opening_deposit_atomic NOT GLOB '*[^0-9]*'),
    credited_atomic        TEXT NOT NULL CHECK (
        length(credited_atomic) BETWEEN 1 AND 39 AND credited_atomic NOT GLOB '*[^0-9]*'),
    debited_atomic         TEXT NOT NULL CHECK (
        length(debited_atomic) BETWEEN 1 AND 39 AND debited_atomic NOT GLOB '*[^0-9]*'),
    spent_atomic           TEXT NOT NULL CHECK (
        length(spent_atomic) BETWEEN 1 AND 39 AND spent_atomic NOT GLOB '*[^0-9]*'),
    reserved_atomic        TEXT NOT NULL CHECK (
        length(reserved_atomic) BETWEEN 1 AND 39 AND reserved_atomic NOT GLOB '*[^0-9]*'),
    CHECK ((state = 'open') = (closed_at IS NULL))
) WITHOUT ROWID;

-- A name is unique among a tenant's open budgets; a closed budget's name may be taken again.
CREATE UNIQUE INDEX budgets_open_name ON budgets (tenant_id, name) WHERE state = 'open';
CREATE INDEX budgets_tenant ON budgets (tenant_id, id);

CREATE TRIGGER budgets_never_deleted
BEFORE DELETE ON budgets
BEGIN
    SELECT RAISE(ABORT, 'budgets are closed, never deleted');
END;

-- What a budget is does not change, and a closed budget is frozen whole.
CREATE TRIGGER budgets_identity_immutable
BEFORE UPDATE ON budgets
WHEN NEW.id IS NOT OLD.id
  OR NEW.tenant_id IS NOT OLD.tenant_id
  OR NEW.name IS NOT OLD.name
  OR NEW.unit IS NOT OLD.unit
  OR NEW.created_at IS NOT OLD.created_at
  OR NEW.opening_deposit_atomic IS NOT OLD.opening_deposit_atomic
  OR OLD.state = 'closed'
BEGIN
    SELECT RAISE(ABORT, 'a budget''s identity is immutable and a closed budget is frozen');
END;

CREATE TABLE reservations (
    id               TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL,
    budget_id        TEXT NOT NULL,
    state            TEXT NOT NULL
                     CHECK (state IN ('active', 'committed', 'released', 'expired')),
    amount_atomic    TEXT NOT NULL CHECK (
        length(amount_atomic) BETWEEN 1 AND 39 AND amount_atomic NOT GLOB '*[^0-9]*'),
    committed_atomic TEXT CHECK (
        length(committed_atomic) BETWEEN 1 AND 39 AND committed_atomic NOT GLOB '*[^0-9]*'),
    memo             TEXT,
    created_at       TEXT NOT NULL,
    -- RFC 3339 text of one fixed width, so text order is time order.
    expires_at       TEXT NOT NULL,
    settled_at       TEXT,
    CHECK ((state = 'active') = (settled_at IS NULL)),
    CHECK ((state = 'committed') = (committed_atomic IS NOT NULL))
) WITHOUT ROWID;

CREATE INDEX reservations_tenant ON reservations (tenant_id, id);
-- The active reservations of a tenant in id order: a page of `?state=active` seeks here
-- rather than walking every settled reservation of the tenant.
CREATE INDEX reservations_tenant_active ON reservations (tenant_id, id) WHERE state = 'active';
-- The active reservations of a budget, soonest to expire first: what a write on the budget
-- must expire first, and what a close or a tombstone releases.
CREATE INDEX reservations_active_budget ON reservations (budget_id, expires_at)
    WHERE state = 'active';
-- Every active reservation by expiry: the sweep that records expiries within a second.
CREATE INDEX reservations_active_expiry ON reservations (expires_at) WHERE state = 'active';

CREATE TRIGGER reservations_never_deleted
BEFORE DELETE ON reservations
BEGIN
    SELECT RAISE(ABORT, 'reservations are settled, never deleted');
END;

-- Only an active reservation changes: its expiry (an extend) or its state (a settlement).
CREATE TRIGGER reservations_settled_are_final
BEFORE UPDATE ON reservations
WHEN OLD.state IS NOT 'active'
  OR NEW.id IS NOT OLD.id
  OR NEW.tenant_id IS NOT OLD.tenant_id
  OR NEW.budget_id IS NOT OLD.budget_id
  OR NEW.amount_atomic IS NOT OLD.amount_atomic
  OR NEW.memo IS NOT OLD.memo
  OR NEW.created_at IS NOT OLD.created_at
BEGIN
    SELECT RAISE(ABORT, 'a reservation changes only while it is active');
END;

CREATE TABLE ledger_entries (
    id               TEXT PRIMARY KEY,
    budget_id        TEXT NOT NULL,
    kind             TEXT NOT NULL CHECK (kind IN ('opening_deposit', 'credit', 'debit',
                                                   'reserve', 'commit', 'release', 'expire')),
    amount_atomic    TEXT NOT NULL CHECK (
        length(amount_atomic) BETWEEN 1 AND 39 AND amount_atomic NOT GLOB '*[^0-9]*'),
    reservation_id   TEXT,
    memo             TEXT,
    occurred_at      TEXT NOT NULL,
    balance_atomic   TEXT NOT NULL CHECK (
        length(balance_atomic) BETWEEN 1 AND 39 AND balance_atomic NOT GLOB '*[^0-9]*'),
    available_atomic TEXT NOT NULL CHECK (
        length(available_atomic) BETWEEN 1 AND 39 AND available_atomic NOT GLOB '*[^0-9]*')
) WITHOUT ROWID;

CREATE INDEX ledger_entries_budget ON ledger_entries (budget_id, id);

CREATE TRIGGER ledger_entries_no_update
BEFORE UPDATE ON ledger_entries
BEGIN
    SELECT RAISE(ABORT, 'ledger entries are immutable');
END;

CREATE TRIGGER ledger_entries_no_delete
BEFORE DELETE ON ledger_entries
BEGIN
    SELECT RAISE(ABORT, 'ledger entries are immutable');
END;

INSERT INTO budgets (id, tenant_id, name, unit, state, created_at, closed_at,
                     opening_deposit_atomic, credited_atomic, debited_atomic, spent_atomic,
                     reserved_atomic)
SELECT 'bud_' || substr(id, 5), id, 'default', 'atomic',
       CASE state WHEN 'active' THEN 'open' ELSE 'closed' END, created_at, tombstoned_at,
       opening_deposit_atomic, opening_deposit_atomic, '0', '0', '0'
FROM tenants;

INSERT INTO ledger_entries (id, budget_id, kind, amount_atomic, reservation_id, memo,
                            occurred_at, balance_atomic, available_atomic)
SELECT 'ent_' || substr(id, 5), 'bud_' || substr(id, 5), 'opening_deposit',
       opening_deposit_atomic, NULL, NULL, created_at, opening_deposit_atomic,
       opening_deposit_atomic
FROM tenants;

DROP TRIGGER tenants_identity_immutable;
ALTER TABLE tenants DROP COLUMN balance_atomic;

-- Tombstoned tenants in id order, for `GET /v1/tenants?state=tombstoned`.
CREATE INDEX tenants_tombstoned ON tenants (id) WHERE state = 'tombstoned';

-- What a tenant is does not change; only its state moves, and only forward.
CREATE TRIGGER tenants_identity_immutable
BEFORE UPDATE ON tenants
WHEN NEW.id IS NOT OLD.id
  OR NEW.name IS NOT OLD.name
  OR NEW.opening_deposit_atomic IS NOT OLD.opening_deposit_atomic
  OR NEW.token_hash IS NOT OLD.token_hash
  OR NEW.created_at IS NOT OLD.created_at
  OR (OLD.state = 'tombstoned' AND (
        NEW.state IS NOT OLD.state
     OR NEW.tombstoned_at IS NOT OLD.tombstoned_at))
BEGIN
    SELECT RAISE(ABORT, 'a tenant''s identity is immutable and a tombstone is final');
END;

-- migration 4: the CHECKs on a reservation's state and a ledger entry's kind, written as
-- comparisons. SQLite runs `x IN ('a', 'b', 'c', …)` in a CHECK by building a temporary
-- B-tree of the list for every row written, which cost a reserve or a commit about a tenth
-- of its instructions; `x = 'a' OR x = 'b' OR …` admits the same values and builds nothing.
-- Both tables are rebuilt with the same columns, rows, indexes and triggers; only the text of
-- the two CHECKs changes. The old tables are dropped under `secure_delete`.
CREATE TABLE reservations_v4 (
    id               TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL,
    budget_id        TEXT NOT NULL,
    state            TEXT NOT NULL CHECK (
        state = 'active' OR state = 'committed' OR state = 'released' OR state = 'expired'),
    amount_atomic    TEXT NOT NULL CHECK (
        length(amount_atomic) BETWEEN 1 AND 39 AND amount_atomic NOT GLOB '*[^0-9]*'),
    committed_atomic TEXT CHECK (
        length(committed_atomic) BETWEEN 1 AND 39 AND committed_atomic NOT GLOB '*[^0-9]*'),
    memo             TEXT,
    created_at       TEXT NOT NULL,
    -- RFC 3339 text of one fixed width, so text order is time order.
    expires_at       TEXT NOT NULL,
    settled_at       TEXT,
    CHECK ((state = 'active') = (settled_at IS NULL)),
    CHECK ((state = 'committed') = (committed_atomic IS NOT NULL))
) WITHOUT ROWID;

INSERT INTO reservations_v4 (id, tenant_id, budget_id, state, amount_atomic, committed_atomic,
                             memo, created_at, expires_at, settled_at)
SELECT id, tenant_id, budget_id, state, amount_atomic, committed_atomic, memo, created_at,
       expires_at, settled_at
FROM reservations;

DROP TABLE reservations;
ALTER TABLE reservations_v4 RENAME TO reservations;

CREATE INDEX reservations_tenant ON reservations (tenant_id, id);
-- The active reservations of a tenant in id order: a page of `?state=active` seeks here
-- rather than walking every settled reservation of the tenant.
CREATE INDEX reservations_tenant_active ON reservations (tenant_id, id) WHERE state = 'active';
-- The active reservations of a budget, soonest to expire first: what a write on the budget
-- must expire first, and what a close or a tombstone releases.
CREATE INDEX reservations_active_budget ON reservations (budget_id, expires_at)
    WHERE state = 'active';
-- Every active reservation by expiry: the sweep that records expiries within a second.
CREATE INDEX reservations_active_expiry ON reservations (expires_at) WHERE state = 'active';

CREATE TRIGGER reservations_never_deleted
BEFORE DELETE ON reservations
BEGIN
    SELECT RAISE(ABORT, 'reservations are settled, never deleted');
END;

-- Only an active reservation changes: its expiry (an extend) or its state (a settlement).
CREATE TRIGGER reservations_settled_are_final
BEFORE UPDATE ON reservations
WHEN OLD.state IS NOT 'active'
  OR NEW.id IS NOT OLD.id
  OR NEW.tenant_id IS NOT OLD.tenant_id
  OR NEW.budget_id IS NOT OLD.budget_id
  OR NEW.amount_atomic IS NOT OLD.amount_atomic
  OR NEW.memo IS NOT OLD.memo
  OR NEW.created_at IS NOT OLD.created_at
BEGIN
    SELECT RAISE(ABORT, 'a reservation changes only while it is active');
END;

CREATE TABLE ledger_entries_v4 (
    id               TEXT PRIMARY KEY,
    budget_id        TEXT NOT NULL,
    kind             TEXT NOT NULL CHECK (
        kind = 'opening_deposit' OR kind = 'credit' OR kind = 'debit' OR kind = 'reserve'
        OR kind = 'commit' OR kind = 'release' OR kind = 'expire'),
    amount_atomic    TEXT NOT NULL CHECK (
        length(amount_atomic) BETWEEN 1 AND 39 AND amount_atomic NOT GLOB '*[^0-9]*'),
    reservation_id   TEXT,
    memo             TEXT,
    occurred_at      TEXT NOT NULL,
    balance_atomic   TEXT NOT NULL CHECK (
        length(balance_atomic) BETWEEN 1 AND 39 AND balance_atomic NOT GLOB '*[^0-9]*'),
    available_atomic TEXT NOT NULL CHECK (
        length(available_atomic) BETWEEN 1 AND 39 AND available_atomic NOT GLOB '*[^0-9]*')
) WITHOUT ROWID;

INSERT INTO ledger_entries_v4 (id, budget_id, kind, amount_atomic, reservation_id, memo,
                               occurred_at, balance_atomic, available_atomic)
SELECT id, budget_id, kind, amount_atomic, reservation_id, memo, occurred_at, balance_atomic,
       available_atomic
FROM ledger_entries;

DROP TABLE ledger_entries;
ALTER TABLE ledger_entries_v4 RENAME TO ledger_entries;

CREATE INDEX ledger_entries_budget ON ledger_entries (budget_id, id);

CREATE TRIGGER ledger_entries_no_update
BEFORE UPDATE ON ledger_entries
BEGIN
    SELECT RAISE(ABORT, 'ledger entries are immutable');
END;

CREATE TRIGGER ledger_entries_no_delete
BEFORE DELETE ON ledger_entries
BEGIN
    SELECT RAISE(ABORT, 'ledger entries are immutable');
END;

-- migration 5: budgets that renew, one-call charges and alert thresholds.
--
-- A budget may carry a period policy: a calendar interval in an IANA time zone or a fixed
-- length in seconds, an allowance and a rollover cap, and the instant the policy was set (the
-- anchor of a fixed length). While it is open it also names its current period and when that
-- period began and ends; the partial index on `period_ends_at` is the sweep that records
-- boundaries within a second. `alert_thresholds` holds the thresholds as decimal text,
-- largest first, separated by commas ('' for none).
--
-- They live in a table of their own, a row for each budget that ever had a policy or
-- thresholds, rather than as columns of `budgets`: SQLite compares the keys of a WITHOUT
-- ROWID table of more than 13 columns with its general comparator instead of the one for a
-- leading text key, and every lookup of a budget by its id would pay for that. Every budget
-- made before has no row here: no policy, no thresholds.
CREATE TABLE budget_renewals (
    budget_id                  TEXT PRIMARY KEY,
    period_interval            TEXT CHECK (
        period_interval = 'day' OR period_interval = 'week' OR period_interval = 'month'),
    period_time_zone           TEXT,
    period_every_seconds       INTEGER CHECK (period_every_seconds BETWEEN 1 AND 31622400),
    period_allowance_atomic    TEXT CHECK (
        length(period_allowance_atomic) BETWEEN 1 AND 39
        AND period_allowance_atomic NOT GLOB '*[^0-9]*'),
    period_rollover_max_atomic TEXT CHECK (
        length(period_rollover_max_atomic) BETWEEN 1 AND 39
        AND period_rollover_max_atomic NOT GLOB '*[^0-9]*'),
    period_anchor              TEXT,
    period_id                  TEXT,
    period_started_at          TEXT,
    period_ends_at             TEXT,
    alert_thresholds           TEXT NOT NULL DEFAULT '' CHECK (
        alert_thresholds NOT GLOB '*[^0-9,]*'),
    -- A policy is whole or absent, calendar or fixed; a current period needs a policy and is
    -- named whole. (Only an open budget has one: the writer ends it when the budget closes.)
    CHECK ((period_time_zone IS NULL) = (period_interval IS NULL)
       AND (period_interval IS NULL OR period_every_seconds IS NULL)
       AND (period_allowance_atomic IS NULL) = (period_interval IS NULL
                                               AND period_every_seconds IS NULL)
       AND (period_rollover_max_atomic IS NULL) = (period_allowance_atomic IS NULL)
       AND (period_anchor IS NULL) = (period_allowance_atomic IS NULL)
       AND (period_started_at IS NULL) = (period_id IS NULL)
       AND (period_ends_at IS NULL) = (period_id IS NULL)
       AND (period_id IS NULL OR period_allowance_atomic IS NOT NULL))
) WITHOUT ROWID;

-- Every current period by its end: what the boundary sweep reads.
CREATE INDEX budget_renewals_due ON budget_renewals (period_ends_at)
    WHERE period_ends_at IS NOT NULL;

CREATE TRIGGER budget_renewals_never_deleted
BEFORE DELETE ON budget_renewals
BEGIN
    SELECT RAISE(ABORT, 'a budget''s renewal is changed, never deleted');
END;

-- A closed budget is frozen whole, its renewal included.
CREATE TRIGGER budget_renewals_frozen_when_closed
BEFORE UPDATE ON budget_renewals
WHEN NEW.budget_id IS NOT OLD.budget_id
  OR (SELECT state FROM budgets WHERE id = OLD.budget_id) IS NOT 'open'
BEGIN
    SELECT RAISE(ABORT, 'a budget''s renewal belongs to it and is frozen once it is closed');
END;

-- A budget's periods, its statements. The current one (at most one a budget) keeps the
-- budget's totals right after it began, so what it credited, debited and spent is the
-- budget's totals less those; a closed one holds its own figures and how it ended.
CREATE TABLE periods (
    id                       TEXT PRIMARY KEY,
    budget_id                TEXT NOT NULL,
    state                    TEXT NOT NULL CHECK (state = 'current' OR state = 'closed'),
    started_at               TEXT NOT NULL,
    -- The next boundary while current; the instant it ended once closed.
    ends_at                  TEXT NOT NULL,
    allowance_atomic         TEXT NOT NULL CHECK (
        length(allowance_atomic) BETWEEN 1 AND 39 AND allowance_atomic NOT GLOB '*[^0-9]*'),
    carried_in_atomic        TEXT NOT NULL CHECK (
        length(carried_in_atomic) BETWEEN 1 AND 39 AND carried_in_atomic NOT GLOB '*[^0-9]*'),
    opening_available_atomic TEXT NOT NULL CHECK (
        length(opening_available_atomic) BETWEEN 1 AND 39
        AND opening_available_atomic NOT GLOB '*[^0-9]*'),
    start_credited_atomic    TEXT NOT NULL CHECK (
        length(start_credited_atomic) BETWEEN 1 AND 39
        AND start_credited_atomic NOT GLOB '*[^0-9]*'),
    start_debited_atomic     TEXT NOT NULL CHECK (
        length(start_debited_atomic) BETWEEN 1 AND 39
        AND start_debited_atomic NOT GLOB '*[^0-9]*'),
    start_spent_atomic       TEXT NOT NULL CHECK (
        length(start_spent_atomic) BETWEEN 1 AND 39 AND start_spent_atomic NOT GLOB '*[^0-9]*'),
    credited_atomic          TEXT CHECK (
        length(credited_atomic) BETWEEN 1 AND 39 AND credited_atomic NOT GLOB '*[^0-9]*'),
    debited_atomic           TEXT CHECK (
        length(debited_atomic) BETWEEN 1 AND 39 AND debited_atomic NOT GLOB '*[^0-9]*'),
    spent_atomic             TEXT CHECK (
        length(spent_atomic) BETWEEN 1 AND 39 AND spent_atomic NOT GLOB '*[^0-9]*'),
    forfeited_atomic         TEXT CHECK (
        length(forfeited_atomic) BETWEEN 1 AND 39 AND forfeited_atomic NOT GLOB '*[^0-9]*'),
    carried_out_atomic       TEXT CHECK (
        length(carried_out_atomic) BETWEEN 1 AND 39 AND carried_out_atomic NOT GLOB '*[^0-9]*'),
    closing_available_atomic TEXT CHECK (
        length(closing_available_atomic) BETWEEN 1 AND 39
        AND closing_available_atomic NOT GLOB '*[^0-9]*'),
    CHECK ((state = 'current') = (credited_atomic IS NULL)
       AND (state = 'current') = (debited_atomic IS NULL)
       AND (state = 'current') = (spent_atomic IS NULL)
       AND (state = 'current') = (forfeited_atomic IS NULL)
       AND (state = 'current') = (carried_out_atomic IS NULL)
       AND (state = 'current') = (closing_available_atomic IS NULL))
) WITHOUT ROWID;

CREATE INDEX periods_budget ON periods (budget_id, id);
-- At most one current period a budget.
CREATE UNIQUE INDEX periods_current ON periods (budget_id) WHERE state = 'current';

CREATE TRIGGER periods_never_deleted
BEFORE DELETE ON periods
BEGIN
    SELECT RAISE(ABORT, 'periods are closed, never deleted');
END;

-- Only a current period changes, once: when it closes.
CREATE TRIGGER periods_closed_are_final
BEFORE UPDATE ON periods
WHEN OLD.state IS NOT 'current'
  OR NEW.id IS NOT OLD.id
  OR NEW.budget_id IS NOT OLD.budget_id
  OR NEW.started_at IS NOT OLD.started_at
  OR NEW.allowance_atomic IS NOT OLD.allowance_atomic
  OR NEW.carried_in_atomic IS NOT OLD.carried_in_atomic
  OR NEW.opening_available_atomic IS NOT OLD.opening_available_atomic
  OR NEW.start_credited_atomic IS NOT OLD.start_credited_atomic
  OR NEW.start_debited_atomic IS NOT OLD.start_debited_atomic
  OR NEW.start_spent_atomic IS NOT OLD.start_spent_atomic
BEGIN
    SELECT RAISE(ABORT, 'a period changes only while it is current');
END;

-- The ledger gains three kinds (a charge, a period's refill and its forfeit) and the period
-- each entry fell in (NULL for a budget without one). The table is rebuilt with every row as
-- it was, for the CHECK on its kind; the old one is dropped under `secure_delete`.
CREATE TABLE ledger_entries_v5 (
    id               TEXT PRIMARY KEY,
    budget_id        TEXT NOT NULL,
    kind             TEXT NOT NULL CHECK (
        kind = 'opening_deposit' OR kind = 'credit' OR kind = 'debit' OR kind = 'reserve'
        OR kind = 'commit' OR kind = 'release' OR kind = 'expire' OR kind = 'charge'
        OR kind = 'refill' OR kind = 'forfeit'),
    amount_atomic    TEXT NOT NULL CHECK (
        length(amount_atomic) BETWEEN 1 AND 39 AND amount_atomic NOT GLOB '*[^0-9]*'),
    reservation_id   TEXT,
    memo             TEXT,
    occurred_at      TEXT NOT NULL,
    balance_atomic   TEXT NOT NULL CHECK (
        length(balance_atomic) BETWEEN 1 AND 39 AND balance_atomic NOT GLOB '*[^0-9]*'),
    available_atomic TEXT NOT NULL CHECK (
        length(available_atomic) BETWEEN 1 AND 39 AND available_atomic NOT GLOB '*[^0-9]*'),
    period_id        TEXT
) WITHOUT ROWID;

INSERT INTO ledger_entries_v5 (id, budget_id, kind, amount_atomic, reservation_id, memo,
                               occurred_at, balance_atomic, available_atomic, period_id)
SELECT id, budget_id, kind, amount_atomic, reservation_id, memo, occurred_at, balance_atomic,
       available_atomic, NULL
FROM ledger_entries;

DROP TABLE ledger_entries;
ALTER TABLE ledger_entries_v5 RENAME TO ledger_entries;

CREATE INDEX ledger_entries_budget ON ledger_entries (budget_id, id);

CREATE TRIGGER ledger_entries_no_update
BEFORE UPDATE ON ledger_entries
BEGIN
    SELECT RAISE(ABORT, 'ledger entries are immutable');
END;

CREATE TRIGGER ledger_entries_no_delete
BEFORE DELETE ON ledger_entries
BEGIN
    SELECT RAISE(ABORT, 'ledger entries are immutable');
END;

-- migration 6: events, what happened for other systems to hear or poll, and the webhook
-- endpoints they are delivered to.
--
-- One row an event, written in the transaction of the change it reports. `data` is the JSON
-- the API answered for the objects it names right after the change, kept as written. Ids are
-- ULIDs, so id order is the order they were written; `created_at` is the same instant as
-- text. Events are never changed; past their retention they are erased (by id, which sorts
-- by time), so no trigger refuses a DELETE.
CREATE TABLE events (
    id         TEXT PRIMARY KEY,
    type       TEXT NOT NULL CHECK (
        type = 'tenant.created' OR type = 'tenant.tombstoned' OR type = 'budget.created'
        OR type = 'budget.updated' OR type = 'budget.closed' OR type = 'budget.credited'
        OR type = 'budget.debited' OR type = 'budget.available_low'
        OR type = 'budget.period_reset' OR type = 'reservation.expired'),
    created_at TEXT NOT NULL,
    tenant_id  TEXT NOT NULL,
    data       TEXT NOT NULL
) WITHOUT ROWID;

-- A tenant's events in id order (`GET /v1/tenants/<id>/events`, and `?tenant_id=`).
CREATE INDEX events_tenant ON events (tenant_id, id);
-- No index on the type: each event would pay for it, and a list filtered by type walks the
-- ids (of one tenant, through events_tenant) and keeps the matches.

CREATE TRIGGER events_no_update
BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are immutable');
END;

-- Webhook endpoints: where events are POSTed. An endpoint is deleted by its state, never
-- erased (its deliveries and audit events name it); once deleted it is final and its secret
-- is wiped. `secret` holds the 32 bytes of the signing key (the API shows them once, as
-- `whsec_` and their base64); `previous_secret` signs beside it until `previous_until`, the
-- 24 hours after a rotation. `failures` counts failed attempts in a row. `lease_owner` and
-- `lease_until` name the instance that sends its attempts, so several instances on one
-- database deliver as if one did.
CREATE TABLE webhook_endpoints (
    id              TEXT PRIMARY KEY,
    url             TEXT NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
    description     TEXT,
    event_types     TEXT NOT NULL CHECK (length(event_types) >= 1),
    tenant_id       TEXT,
    state           TEXT NOT NULL CHECK (
        state = 'enabled' OR state = 'disabled' OR state = 'deleted'),
    disabled_reason TEXT CHECK (disabled_reason = 'manual' OR disabled_reason = 'failing'),
    created_at      TEXT NOT NULL,
    secret          BLOB NOT NULL,
    previous_secret BLOB,
    previous_until  TEXT,
    failures        INTEGER NOT NULL DEFAULT 0 CHECK (failures >= 0),
    lease_owner     TEXT,
    lease_until     TEXT,
    CHECK ((state = 'disabled') = (disabled_reason IS NOT NULL)
       AND (state = 'deleted') = (length(secret) = 0)
       AND (state = 'deleted' OR length(secret) = 32)
       AND (previous_secret IS NULL) = (previous_until IS NULL)
       AND (lease_owner IS NULL) = (lease_until IS NULL))
) WITHOUT ROWID;

CREATE TRIGGER webhook_endpoints_never_erased
BEFORE DELETE ON webhook_endpoints
BEGIN
    SELECT RAISE(ABORT, 'webhook endpoints are deleted by their state, never erased');
END;

CREATE TRIGGER webhook_endpoints_deleted_is_final
BEFORE UPDATE ON webhook_endpoints
WHEN OLD.state = 'deleted' OR NEW.id IS NOT OLD.id OR NEW.created_at IS NOT OLD.created_at
BEGIN
    SELECT RAISE(ABORT, 'a deleted webhook endpoint is final');
END;

-- One event's delivery to one endpoint, written with the event. A pending delivery has its
-- next attempt's time; `retry_once` marks a retry asked for by hand, whose attempt is its
-- last. Erased with their event, past its retention.
CREATE TABLE webhook_deliveries (
    id              TEXT PRIMARY KEY,
    endpoint_id     TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    event_type      TEXT NOT NULL,
    state           TEXT NOT NULL CHECK (
        state = 'pending' OR state = 'succeeded' OR state = 'failed'),
    attempts        INTEGER NOT NULL CHECK (attempts >= 0),
    last_attempt_at TEXT,
    last_status     INTEGER CHECK (last_status BETWEEN 100 AND 599),
    last_error      TEXT,
    next_attempt_at TEXT,
    succeeded_at    TEXT,
    retry_once      INTEGER NOT NULL DEFAULT 0 CHECK (retry_once = 0 OR retry_once = 1),
    CHECK ((state = 'pending') = (next_attempt_at IS NOT NULL)
       AND (state = 'succeeded') = (succeeded_at IS NOT NULL))
) WITHOUT ROWID;

-- An endpoint's deliveries in id order (its list), and its pending ones by when they are due
-- (what the sender reads).
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, id);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (endpoint_id, next_attempt_at)
    WHERE state = 'pending';
-- The deliveries of an event, erased with it.
CREATE INDEX webhook_deliveries_event ON webhook_deliveries (event_id);

-- migration 7: nothing on SQLite. Version 7 is PostgreSQL's alone (the audit rows that wait
-- for their place in the chain, and each tenant's last id: schema-postgres.sql), so that a
-- version number names one schema on both.

-- migration 8: budgets in a tree, and the ledger entries a spend leaves on each level.
--
-- A budget may have a parent: an open budget of the same tenant, fixed for its life, at most
-- three levels above it (the writer checks all three when it creates the budget). Every
-- budget made before is at the top. A spend on a budget leaves an entry on each ancestor,
-- whose `via_budget_id` names the budget spent on; every entry made before is the budget's own
-- movement (NULL).
ALTER TABLE budgets ADD COLUMN parent_id TEXT;
ALTER TABLE ledger_entries ADD COLUMN via_budget_id TEXT;

-- A budget's children in id order: the `parent_id` filter, and the open children that keep a
-- budget from closing.
CREATE INDEX budgets_parent ON budgets (parent_id, id) WHERE parent_id IS NOT NULL;

-- What a budget is does not change, its parent included, and a closed budget is frozen whole.
DROP TRIGGER budgets_identity_immutable;
CREATE TRIGGER budgets_identity_immutable
BEFORE UPDATE ON budgets
WHEN NEW.id IS NOT OLD.id
  OR NEW.tenant_id IS NOT OLD.tenant_id
  OR NEW.name IS NOT OLD.name
  OR NEW.unit IS NOT OLD.unit
  OR NEW.created_at IS NOT OLD.created_at
  OR NEW.opening_deposit_atomic IS NOT OLD.opening_deposit_atomic
  OR NEW.parent_id IS NOT OLD.parent_id
  OR OLD.state = 'closed'
BEGIN
    SELECT RAISE(ABORT, 'a budget''s identity is immutable and a closed budget is frozen');
END;

-- migration 9: nothing on SQLite. Version 9 is PostgreSQL's alone (its amounts, ledger kinds
-- and event types checked by domains, and its identity triggers fired only for the columns
-- they watch: schema-postgres.sql), so that a version number names one schema on both.

-- migration 10: nothing on SQLite. Version 10 is PostgreSQL's alone (its audit chain checked
-- once a statement: schema-postgres.sql).

-- migration 11: a tenant's budgets side by side in the file. The budgets table was kept in the
-- order of the budgets' ids, which is the order they were made in: the levels of a tree, made
-- one after another among other tenants' budgets, sat on pages of their own, and a spend on a
-- leaf wrote one page for each level. The table is now kept in the order of (tenant, id), so
-- that a tenant's budgets share their pages. Nothing else changes: every row as it was, an
-- id still names one budget, and a tenant's budgets in id order are the table's own order
-- (budgets_tenant goes). Every statement that knows the tenant names it, so that the key
-- finds the row; the others find it by its id (budgets_id). That index is not UNIQUE: SQLite
-- would then take it over the key even where both are given. A trigger refuses an id taken
-- by another tenant's budget instead. PostgreSQL has no counterpart and no version 11: its
-- tables are not kept in any key's order.
CREATE TABLE budgets_v11 (
    id                     TEXT NOT NULL,
    tenant_id              TEXT NOT NULL,
    name                   TEXT NOT NULL,
    unit                   TEXT NOT NULL,
    state                  TEXT NOT NULL CHECK (state IN ('open', 'closed')),
    created_at             TEXT NOT NULL,
    closed_at              TEXT,
    opening_deposit_atomic TEXT NOT NULL CHECK (
        length(opening_deposit_atomic) BETWEEN 1 AND 39
        AND opening_deposit_atomic NOT GLOB '*[^0-9]*'),
    credited_atomic        TEXT NOT NULL CHECK (
        length(credited_atomic) BETWEEN 1 AND 39 AND credited_atomic NOT GLOB '*[^0-9]*'),
    debited_atomic         TEXT NOT NULL CHECK (
        length(debited_atomic) BETWEEN 1 AND 39 AND debited_atomic NOT GLOB '*[^0-9]*'),
    spent_atomic           TEXT NOT NULL CHECK (
        length(spent_atomic) BETWEEN 1 AND 39 AND spent_atomic NOT GLOB '*[^0-9]*'),
    reserved_atomic        TEXT NOT NULL CHECK (
        length(reserved_atomic) BETWEEN 1 AND 39 AND reserved_atomic NOT GLOB '*[^0-9]*'),
    parent_id              TEXT,
    CHECK ((state = 'open') = (closed_at IS NULL)),
    PRIMARY KEY (tenant_id, id)
) WITHOUT ROWID;

INSERT INTO budgets_v11 (id, tenant_id, name, unit, state, created_at, closed_at,
                         opening_deposit_atomic, credited_atomic, debited_atomic, spent_atomic,
                         reserved_atomic, parent_id)
SELECT id, tenant_id, name, unit, state, created_at, closed_at, opening_deposit_atomic,
       credited_atomic, debited_atomic, spent_atomic, reserved_atomic, parent_id
FROM budgets;

-- The renewals' trigger reads the budgets table by name: it goes while the table is replaced.
-- Dropping the table drops its own indexes and triggers.
DROP TRIGGER budget_renewals_frozen_when_closed;
DROP TABLE budgets;
ALTER TABLE budgets_v11 RENAME TO budgets;

CREATE INDEX budgets_id ON budgets (id);
CREATE UNIQUE INDEX budgets_open_name ON budgets (tenant_id, name) WHERE state = 'open';
CREATE INDEX budgets_parent ON budgets (parent_id, id) WHERE parent_id IS NOT NULL;

CREATE TRIGGER budgets_never_deleted
BEFORE DELETE ON budgets
BEGIN
    SELECT RAISE(ABORT, 'budgets are closed, never deleted');
END;

CREATE TRIGGER budgets_identity_immutable
BEFORE UPDATE ON budgets
WHEN NEW.id IS NOT OLD.id
  OR NEW.tenant_id IS NOT OLD.tenant_id
  OR NEW.name IS NOT OLD.name
  OR NEW.unit IS NOT OLD.unit
  OR NEW.created_at IS NOT OLD.created_at
  OR NEW.opening_deposit_atomic IS NOT OLD.opening_deposit_atomic
  OR NEW.parent_id IS NOT OLD.parent_id
  OR OLD.state = 'closed'
BEGIN
    SELECT RAISE(ABORT, 'a budget''s identity is immutable and a closed budget is frozen');
END;

-- An id names one budget, whichever tenant's (the key makes it unique within a tenant).
CREATE TRIGGER budgets_id_unique
BEFORE INSERT ON budgets
WHEN EXISTS (SELECT 1 FROM budgets WHERE id = NEW.id)
BEGIN
    SELECT RAISE(ABORT, 'a budget id names one budget');
END;

CREATE TRIGGER budget_renewals_frozen_when_closed
BEFORE UPDATE ON budget_renewals
WHEN NEW.budget_id IS NOT OLD.budget_id
  OR (SELECT state FROM budgets WHERE id = OLD.budget_id) IS NOT 'open'
BEGIN
    SELECT RAISE(ABORT, 'a budget''s renewal belongs to it and is frozen once it is closed');
END;

-- migration 12: the entries a spend leaves on the levels above it, indexed in bulk. The index
-- by budget held every entry, and each level's went to the end of that level's part of it: a
-- page written for every level of every spend on a leaf, as many as the rest of the spend
-- wrote. It now holds a budget's own entries alone (via_budget_id IS NULL). The levels'
-- entries are found through ledger_levels, which the writer fills in bulk and in its key's
-- order (a sweep) from the entries after ledger_levels_swept.through, each level's part
-- written once a sweep rather than once a spend. The entries after the mark are the tail: a
-- read of a budget's entries merges its own, those ledger_levels names, and those of the tail
-- (read in id order, which is the order the one writer gave the ids in). Every row of
-- ledger_entries stays as it was; ledger_levels is derived from them, and PostgreSQL, whose
-- indexes are not written a page a level in the same way, has no counterpart and no version
-- 12.
DROP INDEX ledger_entries_budget;
CREATE INDEX ledger_entries_budget ON ledger_entries (budget_id, id)
    WHERE via_budget_id IS NULL;

CREATE TABLE ledger_levels (
    budget_id TEXT NOT NULL,
    entry_id  TEXT NOT NULL,
    PRIMARY KEY (budget_id, entry_id)
) WITHOUT ROWID;

CREATE TABLE ledger_levels_swept (
    one     INTEGER PRIMARY KEY CHECK (one = 1),
    through TEXT NOT NULL
);

INSERT INTO ledger_levels (budget_id, entry_id)
SELECT budget_id, id FROM ledger_entries WHERE via_budget_id IS NOT NULL
ORDER BY budget_id, id;

INSERT INTO ledger_levels_swept (one, through)
VALUES (1, coalesce((SELECT max(id) FROM ledger_entries), ''));

-- Without its one row the tail would be read as empty: the row stays.
CREATE TRIGGER ledger_levels_swept_kept
BEFORE DELETE ON ledger_levels_swept
BEGIN
    SELECT RAISE(ABORT, 'the sweep''s mark is kept');
END;
