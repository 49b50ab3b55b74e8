//! A batch read ahead, where writers share the database (PostgreSQL, whose round trips may
//! cross a network): the round trip that begins the batch also locks its tenants and reads
//! the budgets its commands name, and the commands' writes go with the batch's `COMMIT`
//! rather than each command waiting for its own. A batch of charges then takes two round
//! trips however many commands it holds, where it took three a command.
//!
//! - **Locks.** The batch's tenants are locked with `SKIP LOCKED`: a tenant another writer
//!   holds is left out, and its commands are answered busy and sent again, without asking
//!   for the lock (a refused `NOWAIT` would abort the transaction).
//! - **Budgets.** They are read in a statement of their own after the locks, so they show all
//!   that the tenants' earlier writers committed. A command that writes a budget takes it
//!   (`WriterState::open_budget`) and, once it ends well, leaves what it wrote for the next
//!   command of the batch (`WriterState::keep_budget`); one that fails leaves nothing, and
//!   the next reads the budget from the database. Any other command forgets its tenant's
//!   budgets ([`super::BudgetsAhead`]), as does a sweep that catches the tenant up; the
//!   other tenants' stay. What is read ahead lasts one batch. SQLite's one writer reads
//!   nothing ahead, but its commands leave what they wrote for the next the same way, and a
//!   batch that commits leaves them to the next batch ([`Ahead::carry`]).
//! - **Reservations.** Those the batch's settlements name are read with their budgets (at
//!   every level). A settlement takes its reservation; any write of a reservation forgets
//!   it, and so does whatever forgets its tenant's budgets.
//! - **Tokens.** A command that checks its tenant token ([`super::checked::Checked`]) has its
//!   tenant's credential read after the locks; a tombstone forgets it.
//! - **Endpoints.** Read when a command may write an event, a tenant's create included.
//! - **Writes deferred.** A command's statements are sent and not waited for. Where one of
//!   them fails (a name taken, a row locked from outside), the transaction is aborted and the
//!   failing command cannot be told apart: the whole batch is rolled back, every command is
//!   answered [`StoreError::Busy`] (nothing of it was done) and sent again, and for
//!   [`CAREFUL_FOR`] the writer waits for each command's writes, so that the failing command
//!   is answered its own error.
//! - **No savepoint a command** while writes are deferred (`WriterState::command`): a command
//!   refused before it wrote has nothing to undo and fails alone; one that fails after it
//!   wrote fails the batch, as above.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use super::guard::{ENDPOINTS_DIGEST, Guard, Written};
use super::subscribers::{self, Subscriber};
use crate::domain::{Budget, BudgetId, Reservation, ReservationId, TenantId};
use crate::store::queries::budgets::{BUDGETS_TO_WRITE, budget_to_write_row};
use crate::store::queries::listed_ids;
use crate::store::queries::reservations::RESERVATIONS_TO_SETTLE;
use crate::store::queries::tenants::{CREDENTIALS, credential_at};
use crate::store::rows;
use crate::store::sql::{Param, Row, RowError, Sql, text};
use crate::store::{Credential, StoreError};

/// How long a writer waits for each command's writes after a batch whose deferred writes
/// failed.
pub(crate) const CAREFUL_FOR: Duration = Duration::from_secs(1);

/// The tenants of a batch that exist.
pub(crate) const TENANTS: &str = concat!(
    "SELECT t.id FROM ",
    listed_ids!("?1"),
    " CROSS JOIN LATERAL (SELECT id FROM tenants WHERE id = w.id LIMIT 1) t"
);

/// The tenants a batch locks ahead, its own statement: those no other writer holds.
pub(crate) const LOCK_TENANTS: &str = concat!(
    "SELECT t.id, t.last_id FROM ",
    listed_ids!("?1"),
    " CROSS JOIN LATERAL (SELECT id, last_id FROM tenants WHERE id = w.id LIMIT 1 \
     FOR NO KEY UPDATE SKIP LOCKED) t"
);

/// What a command will read first: its tenant (none for a tenant's create), the budget it
/// names, the reservation it settles (and so that one's budget), whether it may write an
/// event (and so read the enabled webhook endpoints), and whether it checks its tenant's
/// token ([`super::checked::Checked`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wanted<'a> {
    pub(crate) tenant: Option<&'a TenantId>,
    pub(crate) budget: Option<&'a str>,
    pub(crate) reservation: Option<&'a ReservationId>,
    pub(crate) publishes: bool,
    pub(crate) checks_token: bool,
}

/// What a batch read ahead, and whether its writes are deferred.
#[derive(Debug, Default)]
pub(crate) struct Ahead {
    /// Budgets as a command writing them would read them now, each with whether its tenant
    /// is active.
    budgets: HashMap<BudgetId, (Budget, bool)>,
    /// Reservations as a settlement would read them now, of the tenants locked.
    reservations: HashMap<ReservationId, Reservation>,
    /// The batch's tenants that another writer held when it began.
    busy: Vec<TenantId>,
    /// What the tokens of the batch's tenants whose commands check one are checked against,
    /// as read after their locks; `None` for a tenant that does not exist.
    credentials: HashMap<TenantId, Option<Credential>>,
    /// What the running command left of the budgets it wrote, kept once it ends well.
    kept: Vec<Budget>,
    /// The budgets the batch's commands wrote and left ([`Ahead::command_ended`]).
    written: Vec<BudgetId>,
    /// The tenants whose budgets or credential the batch forgot; `None` once it forgot every
    /// tenant's.
    forgot: Option<Vec<TenantId>>,
    /// Whether the open batch's writes are deferred.
    deferred: bool,
    /// Whether the open batch began on what the writer knows ([`Ahead::keep_known`]).
    guarded: bool,
    /// After a batch whose deferred writes failed: no batch defers its writes before then.
    careful_until: Option<Instant>,
    /// Whether the next batch begins with the budgets this one left ([`Ahead::carry`]).
    carried: bool,
}

/// Budgets SQLite's writer carries from one batch to the next ([`Ahead::carry`]), at most;
/// past it, the next batch begins with none and reads each again.
pub(crate) const CARRIED_BUDGETS_MAX: usize = 65_536;

impl Ahead {
    /// Whether the open batch's commands leave their writes to be waited for later.
    pub(crate) fn deferred(&self) -> bool {
        self.deferred
    }

    /// What `tenant`'s token is checked against, if it was read ahead (and `None` within if
    /// no such tenant existed).
    pub(crate) fn credential(&self, tenant: &TenantId) -> Option<Option<Credential>> {
        self.credentials.get(tenant).copied()
    }

    /// Forgets what `tenant`'s token is checked against: its tombstone changed it.
    pub(crate) fn forget_credential(&mut self, tenant: &TenantId) {
        self.credentials.remove(tenant);
        self.forgot_tenant(Some(tenant));
    }

    fn forgot_tenant(&mut self, tenant: Option<&TenantId>) {
        match (tenant, &mut self.forgot) {
            (Some(tenant), Some(forgot)) => forgot.push(tenant.clone()),
            (None, forgot) => *forgot = None,
            (Some(_), None) => {}
        }
    }

    /// Forgets the budgets and reservations of `tenant` (of every tenant for `None`).
    pub(crate) fn forget(&mut self, tenant: Option<&TenantId>) {
        self.forgot_tenant(tenant);
        match tenant {
            Some(tenant) => {
                self.budgets.retain(|_, (b, _)| b.tenant_id != *tenant);
                self.reservations.retain(|_, r| r.tenant_id != *tenant);
            }
            None => {
                self.budgets.clear();
                self.reservations.clear();
            }
        }
    }

    /// Forgets reservation `id`: it is being written.
    pub(crate) fn forget_reservation(&mut self, id: &ReservationId) {
        self.reservations.remove(id);
    }

    /// Reservation `id` of `tenant` as read ahead; taken, so that a second settlement of it
    /// in the batch reads what the first wrote.
    pub(crate) fn take_reservation(
        &mut self,
        tenant: &TenantId,
        id: Option<&ReservationId>,
    ) -> Option<Reservation> {
        let found = self.reservations.remove(id?)?;
        (found.tenant_id == *tenant).then_some(found)
    }

    /// The running command ended: what it kept is kept if it ended well, and dropped if not.
    pub(crate) fn command_ended(&mut self, well: bool) {
        for budget in self.kept.drain(..) {
            if well {
                // Only a batch whose writes are deferred tells what it wrote (`written`).
                if self.deferred {
                    self.written.push(budget.id.clone());
                }
                self.budgets.insert(budget.id.clone(), (budget, true));
            }
        }
    }

    /// What the batch leaves to be known once it commits ([`Known::remember`]): the budgets
    /// its commands wrote, as they left them, the credentials it read, and what it forgot.
    /// `None` where the batch did not defer its writes: its commands ran in savepoints, whose
    /// rows take versions of their own.
    ///
    /// [`Known::remember`]: super::known::Known::remember
    pub(crate) fn written(&mut self) -> Option<Written> {
        if !self.deferred {
            return None;
        }
        let mut written = Written {
            forgot: self.forgot.clone(),
            ..Written::default()
        };
        // Each budget once, in the order first written: a batch of 1,000 spends on leaves
        // with 3 ancestors names 4,000, which a search of the list made quadratic.
        let mut seen = HashSet::with_capacity(self.written.len());
        for id in std::mem::take(&mut self.written) {
            if let Some((budget, active)) = self.budgets.get(&id)
                && seen.insert(id)
            {
                written.budgets.push((budget.clone(), *active));
            }
        }
        written.credentials = self
            .credentials
            .iter()
            .map(|(tenant, credential)| (tenant.clone(), *credential))
            .collect();
        Some(written)
    }

    /// Takes what a batch that begins on what the writer knows ([`Guard`]) takes in place
    /// of a read ahead.
    pub(crate) fn keep_known(&mut self, guard: &Guard) {
        self.guarded = true;
        for (budget, active, _) in &guard.budgets {
            self.budgets
                .insert(budget.id.clone(), (budget.clone(), *active));
        }
        for (tenant, credential) in &guard.credentials {
            self.credentials.insert(tenant.clone(), Some(*credential));
        }
    }

    /// A batch's deferred writes failed: the batches of the next [`CAREFUL_FOR`] wait for
    /// each command's.
    fn be_careful(&mut self) {
        self.careful_until = Some(Instant::now() + CAREFUL_FOR);
    }
}

/// What one round trip read ahead ([`read`]).
pub(crate) struct ReadAhead {
    /// The first column of each row of the first query.
    pub(crate) firsts: Vec<String>,
    /// The tenants locked, each with its last id.
    pub(crate) locked: Vec<(TenantId, Option<ulid::Ulid>)>,
    /// The tenants that exist and another writer holds.
    busy: Vec<TenantId>,
    /// The budgets read, each with whether its tenant is active.
    budgets: Vec<(Budget, bool)>,
    /// The reservations read.
    reservations: Vec<Reservation>,
    /// The enabled webhook endpoints, where a command may write an event.
    pub(crate) subscribers: Option<Vec<Subscriber>>,
    /// The digest of the enabled webhook endpoints, read with them ([`ENDPOINTS_DIGEST`]).
    pub(crate) endpoints_digest: Option<String>,
    /// What the tokens of the tenants whose commands check one are checked against, each
    /// such tenant's (`None`: no such tenant).
    pub(crate) credentials: Vec<(TenantId, Option<Credential>)>,
}

/// What the rows of each query [`read`] sends are.
#[derive(Debug, Clone, Copy)]
enum Read {
    /// `first`'s.
    First,
    /// The batch's tenants that exist.
    Busy,
    /// Those it locked.
    Locked,
    /// The budgets it names, and those of the reservations it names.
    Budgets,
    /// The reservations it names.
    Reservations,
    /// The enabled webhook endpoints.
    Subscribers,
    /// Their digest.
    EndpointsDigest,
    /// The credentials of the tenants whose commands check a token.
    Credentials,
}

/// Runs `first` (a query without parameters) and, where writers share the database
/// (`shared`), locks the tenants of `wanted` that no other writer holds, reads the budgets
/// `wanted` names and, if one of its commands may write an event, the enabled webhook
/// endpoints, all in one round trip with the statements sent before it. Elsewhere it runs
/// `first` alone.
pub(crate) fn read(
    db: &mut impl Sql,
    shared: bool,
    first: &str,
    wanted: &[Wanted<'_>],
) -> Result<ReadAhead, StoreError> {
    let mut tenants: Vec<&str> = Vec::new();
    let mut budgets: Vec<&str> = Vec::new();
    let mut reservations: Vec<&str> = Vec::new();
    let mut checked: Vec<&TenantId> = Vec::new();
    let publishes = shared && wanted.iter().any(|w| w.publishes);
    if shared {
        for w in wanted {
            tenants.extend(w.tenant.map(TenantId::as_str));
            checked.extend(w.tenant.filter(|_| w.checks_token));
            // An id with a comma is none, and would read others.
            budgets.extend(w.budget.filter(|id| !id.contains(',')));
            // A reservation id is a ULID after its prefix: never a comma.
            reservations.extend(w.reservation.map(ReservationId::as_str));
        }
        tenants.sort_unstable();
        tenants.dedup();
        budgets.sort_unstable();
        budgets.dedup();
        reservations.sort_unstable();
        reservations.dedup();
        checked.sort_unstable();
        checked.dedup();
    }
    let (tenants, budgets, reservations) =
        (tenants.join(","), budgets.join(","), reservations.join(","));
    let tenant_list = [Param::Text(&tenants)];
    let budget_lists = [Param::Text(&budgets), Param::Text(&reservations)];
    let reservation_list = [Param::Text(&reservations)];
    let checked_text = checked
        .iter()
        .map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let checked_list = [Param::Text(&checked_text)];
    let mut queries: Vec<(&str, &[Param<'_>])> = vec![(first, &[])];
    if !tenants.is_empty() {
        // The tenants that exist, then those locked: one that exists and is not locked is
        // another writer's.
        queries.push((TENANTS, &tenant_list));
        queries.push((LOCK_TENANTS, &tenant_list));
    }
    // Each query's rows by its place in the list: 0 `first`, then these.
    let mut kinds = vec![Read::First];
    if !tenants.is_empty() {
        kinds.extend([Read::Busy, Read::Locked]);
    }
    if !(budgets.is_empty() && reservations.is_empty()) {
        queries.push((BUDGETS_TO_WRITE, &budget_lists));
        kinds.push(Read::Budgets);
    }
    if !reservations.is_empty() {
        queries.push((RESERVATIONS_TO_SETTLE, &reservation_list));
        kinds.push(Read::Reservations);
    }
    if publishes {
        queries.push((subscribers::ENABLED.as_str(), &[]));
        kinds.push(Read::Subscribers);
        queries.push((ENDPOINTS_DIGEST, &[]));
        kinds.push(Read::EndpointsDigest);
    }
    // After the locks: a tombstone another writer committed first shows.
    if !checked.is_empty() {
        queries.push((CREDENTIALS, &checked_list));
        kinds.push(Read::Credentials);
    }
    let mut read = ReadAhead {
        firsts: Vec::new(),
        locked: Vec::new(),
        busy: Vec::new(),
        budgets: Vec::new(),
        reservations: Vec::new(),
        subscribers: publishes.then(Vec::new),
        endpoints_digest: None,
        credentials: Vec::new(),
    };
    let mut found: HashMap<TenantId, Credential> = HashMap::new();
    let tenant = |row: &Row<'_>| {
        TenantId::parse(&text(row, 0)?).ok_or_else(|| row.corrupt(0, "a bad tenant id".into()))
    };
    db.query_each(&queries, |i, row| {
        match kinds.get(i) {
            Some(Read::First) => read.firsts.push(text(row, 0)?.into_owned()),
            Some(Read::Busy) => read.busy.push(tenant(row)?),
            Some(Read::Locked) => read.locked.push((tenant(row)?, last_id(row, 1)?)),
            Some(Read::Budgets) => read.budgets.push(budget_to_write_row(row)?),
            Some(Read::Reservations) => read.reservations.push(rows::reservation(row)?),
            Some(Read::Subscribers) => {
                if let Some(found) = read.subscribers.as_mut() {
                    found.push(subscribers::subscriber(row)?);
                }
            }
            Some(Read::EndpointsDigest) => {
                read.endpoints_digest = Some(text(row, 0)?.into_owned());
            }
            Some(Read::Credentials) => {
                found.insert(tenant(row)?, credential_at(row, 1)?);
            }
            None => return Err(row.corrupt(0, format!("a row of query {i}, of none sent"))),
        }
        Ok(())
    })?;
    read.busy
        .retain(|t| !read.locked.iter().any(|(locked, _)| locked == t));
    // A tenant the query found no row of does not exist: its token is refused without
    // another round trip.
    read.credentials = checked
        .into_iter()
        .map(|t| (t.clone(), found.get(t).copied()))
        .collect();
    Ok(read)
}

impl Ahead {
    /// Begins a batch: nothing read yet (but the budgets carried from the batch before, on
    /// SQLite, [`Ahead::carry`]), and its writes deferred where writers share the database
    /// (`shared`) and no deferred write failed in the last [`CAREFUL_FOR`].
    pub(crate) fn begin(&mut self, shared: bool) {
        // Only SQLite's writer carries budgets ([`Ahead::carry`]).
        if !std::mem::take(&mut self.carried) || self.budgets.len() > CARRIED_BUDGETS_MAX {
            self.budgets.clear();
        }
        self.reservations.clear();
        self.busy.clear();
        self.credentials.clear();
        self.kept.clear();
        self.written.clear();
        self.forgot = Some(Vec::new());
        self.guarded = false;
        self.careful_until = self.careful_until.filter(|&until| Instant::now() < until);
        self.deferred = shared && self.careful_until.is_none();
    }

    /// The batch committed, on SQLite, whose one writer is the only one to change a budget
    /// while it holds the database: the budgets its commands left are those the database
    /// holds, and the next batch begins with them rather than reading each again. Unless
    /// this is called, the next batch begins with none: after a batch that failed, and
    /// wherever writers share the database. Another process that writes the database in
    /// between makes the writer forget them ([`Ahead::forget`], on `PRAGMA data_version`).
    pub(crate) fn carry(&mut self) {
        self.carried = true;
    }

    /// Whether any budget is known ahead.
    pub(crate) fn holds_budgets(&self) -> bool {
        !self.budgets.is_empty()
    }

    /// Keeps the budgets `read` found, of the tenants it locked: a budget of a tenant
    /// another writer holds may change before its command runs.
    pub(crate) fn keep_read(&mut self, read: ReadAhead) {
        self.busy = read.busy;
        self.credentials.extend(read.credentials);
        let locked = |tenant: &TenantId| read.locked.iter().any(|(t, _)| t == tenant);
        for (budget, active) in read.budgets {
            if locked(&budget.tenant_id) {
                self.budgets.insert(budget.id.clone(), (budget, active));
            }
        }
        for reservation in read.reservations {
            if locked(&reservation.tenant_id) {
                self.reservations
                    .insert(reservation.id.clone(), reservation);
            }
        }
    }

    /// Whether `tenant` was another writer's when the batch began: where the batch runs its
    /// commands without savepoints, a command does not ask for the lock (a refusal would
    /// abort the transaction) and is sent again.
    pub(crate) fn busy(&self, tenant: &TenantId) -> bool {
        self.deferred && self.busy.contains(tenant)
    }

    /// The budget `id` of `tenant` as read ahead, with whether the tenant is active; taken,
    /// so that a command that fails leaves it to be read again.
    pub(crate) fn take(
        &mut self,
        tenant: &TenantId,
        id: Option<&BudgetId>,
    ) -> Option<(Budget, bool)> {
        let found = self.budgets.get(id?)?;
        if found.0.tenant_id != *tenant {
            return None;
        }
        self.budgets.remove(id?)
    }

    /// What the running command leaves of `budget` once it has written it, for the batch's
    /// next command, kept if the command ends well.
    pub(crate) fn keep(&mut self, budget: Budget) {
        self.kept.push(budget);
    }

    /// After a command or a `COMMIT` that failed with `error` (or none) where a statement
    /// sent failed (`sent_failed`): the error that fails the whole batch when its writes are
    /// deferred. Every command is then answered [`StoreError::Busy`] and sent again (a lost
    /// connection stays [`StoreError::Unavailable`]), and the next batches wait for each
    /// command's writes, unless the batch began on what the writer knows.
    pub(crate) fn failure(
        &mut self,
        sent_failed: bool,
        error: Option<&StoreError>,
    ) -> Option<StoreError> {
        if !sent_failed || !self.deferred {
            return None;
        }
        // In a batch begun on what the writer knows, a statement that failed busy (or whose
        // failure a command took for another writer's) was most likely its guard: the batch
        // is sent again read ahead. Any other failure is a write's, as elsewhere.
        let guard_failed = self.guarded && matches!(error, None | Some(StoreError::Busy(_)));
        if !guard_failed {
            self.be_careful();
        }
        Some(match error {
            Some(e @ StoreError::Unavailable(_)) => e.clone(),
            Some(e) => StoreError::Busy(format!(
                "a write sent with the batch failed ({e}); the batch is sent again"
            )),
            None => StoreError::Busy("a write sent with the batch failed".into()),
        })
    }
}

/// Column `i` of `row`: a tenant's last id, if it has one.
pub(crate) fn last_id(row: &Row<'_>, i: usize) -> Result<Option<ulid::Ulid>, RowError> {
    row.column(i)?
        .map(|id| {
            ulid::Ulid::from_string(&id)
                .map_err(|_| row.corrupt(i, format!("a bad last id {id:?}")))
        })
        .transpose()
}
