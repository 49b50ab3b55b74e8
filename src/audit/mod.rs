//! The audit chain, as pure code: the typed events, the text of a row, its link hash, and
//! verification as a fold over rows, so that any backend can feed it.
//!
//! Each row's `hash` is the lower-case hex SHA-256 of
//! `prev_hash "\n" seq "\n" occurred_at "\n" actor "\n" action "\n" tenant_id "\n" payload`,
//! so anyone with `sqlite3` and `sha256sum` can recompute the chain without this program.
//! Replaying the events from `seq` 1 reproduces every tenant, budget and reservation;
//! [`Replay`] does that and compares the result with the stored rows, so a row edited behind
//! the service's back is found even where the chain itself is intact.
//!
//! # Layout
//!
//! - `mod.rs` (here): a row's text, its link hash, and the chain's numbering and links.
//! - [`actor`]: who acts, and which actors may record an action.
//! - [`actions`]: every audit action, one family to a file (`tenant`, `budget`, `period`,
//!   `reservation`, `endpoint`), each with its payloads, their parsing, who may record them
//!   and its replay step; `actions/mod.rs` only dispatches to them, and holds the replay's
//!   step over one row ([`Replay::push`]).
//! - [`replay`]: the state the events leave, and the moves more than one family's replay
//!   step makes on it.
//! - [`check`]: the checks of every stored row against that state, and the replay's end.
//!
//! Within this folder the files name one another one way only: `actions` names `actor` and
//! `replay`, `check` names `replay`, and `replay` and `actor` name no sibling.
//!
//! # Adding an audit action
//!
//! An action of an existing family touches:
//!
//! 1. `src/domain/rules.rs`: its variant of [`AuditEvent`] (unless it is a new value of an
//!    existing variant, as `budget.charged` is a [`crate::domain::Direction`]), and the rule
//!    that records it.
//! 2. `src/audit/actions/<family>.rs`: an arm in each of its functions: `action`,
//!    `tenant_id`, `payload`, `parse`, `recorders` and `replay`, and its payload's struct if
//!    it has a new shape.
//! 3. `src/audit/actions/mod.rs`: one line, the variant in its family's arm of `Family::of`.
//! 4. This file's tests: its row in `every_action_renders_as_it_always_has`, the text it
//!    writes, which must never change once a database holds it.
//!
//! A new family is a new file in `src/audit/actions/`, its variant of `Family`, and its arm
//! in each of that file's dispatching matches. The store's operation that records the action
//! is a write operation's own (see `docs/architecture.md`).

mod actions;
mod actor;
mod check;
mod replay;

use std::borrow::Cow;
use std::fmt;

use crate::crypto::{hex, sha256};

pub(crate) use crate::domain::AuditEvent;
pub(crate) use actor::Actor;
pub(crate) use replay::Replay;

/// `prev_hash` of the first event: 64 zeros.
pub(crate) const GENESIS_HASH: &str =
    "0000000000000000000000000000000000000000000000000000000000000000";

/// The text of one row, as stored and hashed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// 1, 2, 3, … without gaps.
    pub(crate) seq: i64,
    /// RFC 3339, UTC, milliseconds.
    pub(crate) occurred_at: String,
    /// [`Actor::text`]; borrowed when written, owned when read back.
    pub(crate) actor: Cow<'static, str>,
    /// [`AuditEvent::action`]; borrowed when written, owned when read back.
    pub(crate) action: Cow<'static, str>,
    /// The tenant concerned; for a webhook endpoint, the tenant it is limited to, or empty.
    pub(crate) tenant_id: String,
    /// [`AuditEvent::payload`].
    pub(crate) payload: String,
}

impl Entry {
    /// The row that records `event` as number `seq`.
    pub(crate) fn new(seq: i64, occurred_at: &str, actor: &Actor, event: &AuditEvent) -> Self {
        Self {
            seq,
            occurred_at: occurred_at.to_owned(),
            actor: actor.text(),
            action: Cow::Borrowed(event.action()),
            tenant_id: event
                .tenant_id()
                .map_or_else(String::new, |t| t.as_str().to_owned()),
            payload: event.payload(),
        }
    }
}

/// The hash of `entry` linked after `prev_hash`.
pub(crate) fn link_hash(prev_hash: &str, entry: &Entry) -> String {
    let preimage = format!(
        "{prev_hash}\n{}\n{}\n{}\n{}\n{}\n{}",
        entry.seq, entry.occurred_at, entry.actor, entry.action, entry.tenant_id, entry.payload
    );
    hex(&sha256(preimage.as_bytes()))
}

/// The chain's last link: where the next event attaches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    /// The last `seq`, which is also the number of events (0 for none).
    pub(crate) seq: i64,
    /// The last `hash` ([`GENESIS_HASH`] for none).
    pub(crate) hash: String,
}

impl Head {
    /// The head of an empty chain.
    pub(crate) fn genesis() -> Self {
        Self {
            seq: 0,
            hash: GENESIS_HASH.to_owned(),
        }
    }

    /// The row that records `event` after this head, and its hash.
    pub(crate) fn link(&self, occurred_at: &str, actor: &Actor, event: &AuditEvent) -> Linked {
        self.link_entry(Entry::new(self.seq + 1, occurred_at, actor, event))
    }

    /// `entry` (its `seq` whatever it was: a pending row's) as the row after this head.
    pub(crate) fn link_entry(&self, mut entry: Entry) -> Linked {
        entry.seq = self.seq + 1;
        let hash = link_hash(&self.hash, &entry);
        Linked {
            entry,
            prev_hash: self.hash.clone(),
            hash,
        }
    }
}

/// A row with its links, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Linked {
    /// What is hashed.
    pub(crate) entry: Entry,
    /// The previous row's hash.
    pub(crate) prev_hash: String,
    /// This row's hash.
    pub(crate) hash: String,
}

impl Linked {
    /// The head once this row is appended.
    pub(crate) fn head(&self) -> Head {
        Head {
            seq: self.entry.seq,
            hash: self.hash.clone(),
        }
    }
}

/// Why a chain does not verify.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum VerifyError {
    /// The row at `seq` breaks the chain, for the reason given.
    Broken {
        /// The first bad row.
        seq: i64,
        /// What is wrong with it.
        reason: String,
    },
    /// The chain is whole but does not account for the stored rows: an event is missing (its
    /// tail cut, say) or a row was changed behind the service's back.
    Unaccounted {
        /// The chain's last `seq`.
        head_seq: i64,
        /// What does not match.
        reason: String,
    },
    /// The stored rows could not be read at all.
    Read(String),
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Broken { seq, reason } => write!(f, "audit chain broken at seq {seq}: {reason}"),
            Self::Unaccounted { head_seq, reason } => write!(
                f,
                "audit chain (ending at seq {head_seq}) does not account for the stored rows: {reason}"
            ),
            Self::Read(cause) => write!(f, "cannot read the audit chain: {cause}"),
        }
    }
}

/// Checks numbering, links and hashes, one row at a time in `seq` order.
#[derive(Debug)]
pub(crate) struct Chain {
    head: Head,
}

impl Default for Chain {
    fn default() -> Self {
        Self {
            head: Head::genesis(),
        }
    }
}

impl Chain {
    /// Takes the next stored row.
    pub(crate) fn push(&mut self, row: &Linked) -> Result<(), VerifyError> {
        let expected = self.head.seq + 1;
        if row.entry.seq != expected {
            return Err(VerifyError::Broken {
                seq: expected,
                reason: format!("missing; the next stored seq is {}", row.entry.seq),
            });
        }
        let broken = |reason: &str| VerifyError::Broken {
            seq: expected,
            reason: reason.to_owned(),
        };
        if row.prev_hash != self.head.hash {
            return Err(broken(
                "prev_hash does not match the hash of the previous event",
            ));
        }
        if link_hash(&row.prev_hash, &row.entry) != row.hash {
            return Err(broken(
                "hash does not match the event's contents (tampered?)",
            ));
        }
        self.head = row.head();
        Ok(())
    }

    /// The last row taken.
    pub(crate) fn head(&self) -> &Head {
        &self.head
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{
        Atomic, Budget, BudgetState, Figures, Name, Tenant, TenantId, TenantState, Timestamp, Unit,
    };

    const ID: &str = "ten_01ARZ3NDEKTSV4RRFFQ69G5FAV";
    const AT: &str = "2026-11-22T10:00:00.123Z";

    fn at(text: &str) -> Timestamp {
        Timestamp::parse(text).expect("a timestamp")
    }

    fn created(id: &str, name: &str, deposit: &str) -> AuditEvent {
        AuditEvent::TenantCreated {
            id: TenantId::parse(id).expect("id"),
            name: Name::parse(name).expect("name"),
            opening_deposit: Atomic::parse(deposit).expect("amount"),
            policy: None,
            thresholds: crate::domain::Thresholds::default(),
        }
    }

    /// A default budget as stored: `deposit` credited, `spent` spent.
    fn default_budget(id: &str, deposit: &str, spent: u128, tombstoned: bool) -> Budget {
        let tenant = TenantId::parse(id).expect("id");
        let deposit = Atomic::parse(deposit).expect("amount");
        Budget {
            id: tenant.default_budget(),
            tenant_id: tenant,
            name: Name::parse("default").expect("name"),
            unit: Unit::atomic(),
            state: if tombstoned {
                BudgetState::Closed { at: at(AT) }
            } else {
                BudgetState::Open
            },
            created_at: at(AT),
            opening_deposit: deposit,
            figures: Figures {
                spent,
                ..Figures::opening(deposit)
            },
            policy: None,
            parent_id: None,
            current: None,
            thresholds: crate::domain::Thresholds::default(),
        }
    }

    fn stored(id: &str, name: &str, deposit: &str, tombstoned: bool) -> Tenant {
        Tenant {
            id: TenantId::parse(id).expect("id"),
            name: Name::parse(name).expect("name"),
            created_at: at(AT),
            state: if tombstoned {
                TenantState::Tombstoned { at: at(AT) }
            } else {
                TenantState::Active
            },
            budget: default_budget(id, deposit, 0, tombstoned),
        }
    }

    #[test]
    fn payloads_are_the_contracts_members_in_order() {
        let event = created(
            ID,
            "Ünï \"quoted\" \\",
            "340282366920938463463374607431768211455",
        );
        assert_eq!(
            event.payload(),
            format!(
                r#"{{"id":"{ID}","name":"Ünï \"quoted\" \\","opening_deposit_atomic":"340282366920938463463374607431768211455"}}"#
            )
        );
        let tombstoned = AuditEvent::TenantTombstoned {
            id: TenantId::parse(ID).expect("id"),
        };
        assert_eq!(tombstoned.payload(), format!(r#"{{"id":"{ID}"}}"#));
        for event in [event, tombstoned] {
            assert_eq!(
                AuditEvent::parse(event.action(), ID, &event.payload()),
                Ok(event.clone()),
                "{event:?} reads back"
            );
        }
    }

    #[test]
    fn payloads_that_are_not_canonical_are_refused() {
        for (action, payload) in [
            ("tenant.tombstoned", format!(r#"{{ "id":"{ID}"}}"#)),
            ("tenant.tombstoned", format!(r#"{{"id":"{ID}","x":1}}"#)),
            (
                "tenant.tombstoned",
                r#"{"id":"ten_01ARZ3NDEKTSV4RRFFQ69G5FAW"}"#.into(),
            ),
            ("tenant.renamed", format!(r#"{{"id":"{ID}"}}"#)),
            ("tenant.created", format!(r#"{{"id":"{ID}","name":"a"}}"#)),
        ] {
            assert!(
                AuditEvent::parse(action, ID, &payload).is_err(),
                "{action} {payload}"
            );
        }
    }

    #[test]
    fn link_hash_is_sha256_of_the_documented_preimage() {
        let event = created(ID, "a", "1");
        let row = Head::genesis().link(AT, &Actor::Admin, &event);
        let preimage = format!(
            "{GENESIS_HASH}\n1\n{AT}\nadmin\ntenant.created\n{ID}\n{}",
            event.payload()
        );
        assert_eq!(row.hash, hex(&sha256(preimage.as_bytes())));
        assert_eq!(row.prev_hash, GENESIS_HASH);
    }

    #[test]
    fn link_hash_depends_on_every_field() {
        let base = Entry::new(1, AT, &Actor::Admin, &created(ID, "a", "1"));
        let h = link_hash(GENESIS_HASH, &base);
        let variants = [
            Entry {
                seq: 2,
                ..base.clone()
            },
            Entry {
                occurred_at: "2026-11-22T10:00:00.124Z".into(),
                ..base.clone()
            },
            Entry {
                actor: "tenant".into(),
                ..base.clone()
            },
            Entry {
                action: "tenant.tombstoned".into(),
                ..base.clone()
            },
            Entry {
                tenant_id: "ten_x".into(),
                ..base.clone()
            },
            Entry {
                payload: "{}".into(),
                ..base.clone()
            },
        ];
        for v in &variants {
            assert_ne!(link_hash(GENESIS_HASH, v), h, "{v:?}");
        }
        assert_ne!(link_hash(&"1".repeat(64), &base), h);
    }

    /// Builds a chain of `events` and replays it.
    fn replay(events: &[AuditEvent]) -> Result<Replay, VerifyError> {
        let mut head = Head::genesis();
        let mut replay = Replay::default();
        for event in events {
            let row = head.link(AT, &Actor::Admin, event);
            replay.push(&row)?;
            head = row.head();
        }
        Ok(replay)
    }

    #[test]
    fn the_replay_must_account_for_every_stored_tenant() {
        const B: &str = "ten_01ARZ3NDEKTSV4RRFFQ69G5FAW";
        let tombstone = |id: &str| AuditEvent::TenantTombstoned {
            id: TenantId::parse(id).expect("id"),
        };
        let events = [created(ID, "a", "5"), created(B, "b", "7"), tombstone(B)];

        let mut ok = replay(&events).expect("the chain replays");
        for (tenant, name, deposit, tombstoned) in [(ID, "a", "5", false), (B, "b", "7", true)] {
            let row = stored(tenant, name, deposit, tombstoned);
            ok.check_tenant(&row).expect("the tenant matches");
            ok.check_budget(&row.budget).expect("its budget matches");
        }
        let mut no_ledgers = replay(&events).expect("the chain replays");
        for (tenant, name, deposit, tombstoned) in [(ID, "a", "5", false), (B, "b", "7", true)] {
            let row = stored(tenant, name, deposit, tombstoned);
            no_ledgers.check_tenant(&row).expect("the tenant matches");
            no_ledgers
                .check_budget(&row.budget)
                .expect("its budget matches");
            ok.check_entry(&crate::domain::LedgerEntry::opening(&row.budget))
                .expect("the opening deposit matches");
        }
        assert_eq!(ok.finish().map(|h| h.seq), Ok(3));
        assert!(
            matches!(no_ledgers.finish(), Err(VerifyError::Unaccounted { .. })),
            "a budget without a ledger is caught"
        );

        let cases: &[(&str, Tenant)] = &[
            ("an edited name", stored(ID, "x", "5", false)),
            ("an undone tombstone", stored(B, "b", "7", false)),
            (
                "an edited creation time",
                Tenant {
                    created_at: at("2026-11-22T10:00:00.124Z"),
                    ..stored(ID, "a", "5", false)
                },
            ),
            (
                "an edited tombstone time",
                Tenant {
                    state: TenantState::Tombstoned {
                        at: at("2026-11-22T10:00:00.124Z"),
                    },
                    ..stored(B, "b", "7", true)
                },
            ),
            (
                "a tenant with no event",
                stored("ten_01ARZ3NDEKTSV4RRFFQ69G5FAX", "c", "1", false),
            ),
        ];
        for (what, row) in cases {
            let mut r = replay(&events).expect("the chain replays");
            assert!(
                matches!(r.check_tenant(row), Err(VerifyError::Unaccounted { .. })),
                "{what} is caught"
            );
        }

        let budgets: &[(&str, Budget)] = &[
            ("an edited deposit", default_budget(ID, "6", 0, false)),
            ("an edited spend", default_budget(ID, "5", 1, false)),
            ("a reopened budget", default_budget(B, "7", 0, false)),
        ];
        for (what, row) in budgets {
            let mut r = replay(&events).expect("the chain replays");
            assert!(
                matches!(r.check_budget(row), Err(VerifyError::Unaccounted { .. })),
                "{what} is caught"
            );
        }

        let mut missing = replay(&events).expect("the chain replays");
        let a = stored(ID, "a", "5", false);
        missing.check_tenant(&a).expect("a matches");
        missing.check_budget(&a.budget).expect("its budget matches");
        assert!(
            matches!(missing.finish(), Err(VerifyError::Broken { seq: 2, .. })),
            "an event for a tenant that is not stored names its seq"
        );

        assert!(
            matches!(
                replay(&[created(ID, "a", "1"), created(ID, "b", "1")]),
                Err(VerifyError::Broken { seq: 2, .. })
            ),
            "a second create of one id"
        );
        assert!(
            matches!(
                replay(&[tombstone(ID)]),
                Err(VerifyError::Broken { seq: 1, .. })
            ),
            "a tombstone before the create"
        );
    }

    /// An edited figure is named, with its stored value and the one the events give, in the
    /// budget's unit (atomic units for a budget made without one).
    #[test]
    fn an_edited_figure_is_named_with_both_values() {
        const B: &str = "bud_01ARZ3NDEKTSV4RRFFQ69G5FAW";
        let tenant = TenantId::parse(ID).expect("id");
        let gpu = AuditEvent::BudgetCreated {
            tenant: tenant.clone(),
            id: crate::domain::BudgetId::parse(B).expect("id"),
            name: Name::parse("gpu").expect("name"),
            unit: Unit::parse("tokens").expect("unit"),
            opening_deposit: Atomic::parse("10").expect("amount"),
            policy: None,
            thresholds: crate::domain::Thresholds::default(),
            parent: None,
        };
        let events = [created(ID, "a", "5"), gpu];
        let edited_gpu = Budget {
            id: crate::domain::BudgetId::parse(B).expect("id"),
            name: Name::parse("gpu").expect("name"),
            unit: Unit::parse("tokens").expect("unit"),
            opening_deposit: Atomic::parse("10").expect("amount"),
            figures: Figures {
                credited: 11,
                ..Figures::default()
            },
            ..default_budget(ID, "5", 0, false)
        };
        let default = tenant.default_budget();
        for (row, says) in [
            (
                default_budget(ID, "5", 2, false),
                format!(
                    "budget {default}'s stored spent figure is 2 atomic units, but its events \
                     give 0 atomic units"
                ),
            ),
            (
                edited_gpu,
                format!(
                    "budget {B}'s stored credited figure is 11 tokens, but its events give 10 \
                     tokens"
                ),
            ),
        ] {
            let mut r = replay(&events).expect("the chain replays");
            assert_eq!(
                r.check_budget(&row).map_err(|e| e.to_string()),
                Err(format!(
                    "audit chain (ending at seq 2) does not account for the stored rows: {says}"
                ))
            );
        }
    }

    #[test]
    fn only_the_contracts_actors_replay() {
        let event = created(ID, "a", "1");
        for (actor, known) in [
            ("admin", true),
            // A tenant token only spends; the system only records expiries.
            ("tenant", false),
            ("system", false),
            ("oidc:user-1", true),
            ("oidc:", false),
            ("root", false),
            ("", false),
        ] {
            let mut row = Head::genesis().link(AT, &Actor::Admin, &event);
            row.entry.actor = actor.into();
            row.hash = link_hash(&row.prev_hash, &row.entry);
            let replayed = Replay::default().push(&row);
            assert_eq!(replayed.is_ok(), known, "actor {actor:?}: {replayed:?}");
        }
    }

    /// One value of every action, with the text the chain holds for it: the payloads are
    /// hashed into the chain, so a change to how any action renders breaks every database
    /// that holds one. Each row also reads back from its text, and says who may record it
    /// (`a` the admin or an identity, `t` a tenant token, `s` the system).
    #[test]
    fn every_action_renders_as_it_always_has() {
        use crate::domain::rules::EndpointChange;
        use crate::domain::{
            BudgetId, Cadence, Direction, EndpointId, EntryKind, EventTypes, Interval, Memo,
            Policy, ReservationId, Thresholds, Zone,
        };

        const B: &str = "bud_01ARZ3NDEKTSV4RRFFQ69G5FAW";
        const R: &str = "res_01ARZ3NDEKTSV4RRFFQ69G5FAX";
        const E: &str = "whe_01ARZ3NDEKTSV4RRFFQ69G5FAY";
        let tenant = || TenantId::parse(ID).expect("id");
        let budget = || BudgetId::parse(B).expect("id");
        let reservation = || ReservationId::parse(R).expect("id");
        let endpoint = || EndpointId::parse(E).expect("id");
        let amount = |raw: &str| Atomic::parse(raw).expect("amount");
        let calendar = || Policy {
            cadence: Cadence::Calendar {
                interval: Interval::Month,
                zone: Zone::parse("Europe/Berlin").expect("zone"),
            },
            allowance: amount("1000"),
            rollover_max: amount("250"),
        };
        let fixed = || Policy {
            cadence: Cadence::fixed(3600).expect("cadence"),
            allowance: amount("5"),
            rollover_max: amount("0"),
        };
        let two = || Thresholds::new(vec![amount("100"), amount("500")]).expect("thresholds");
        let later = at("2026-12-01T00:00:00.000Z");
        let moved = |direction, memo: Option<&str>| AuditEvent::BudgetMoved {
            tenant: tenant(),
            budget: budget(),
            direction,
            amount: amount("100"),
            memo: memo.map(|m| Memo::parse(m).expect("memo")),
        };
        let only = EventTypes::parse(&["budget.credited", "tenant.created"]).expect("types");
        let webhook =
            |change, tenant: Option<TenantId>, event_types, enabled| AuditEvent::WebhookEndpoint {
                change,
                id: endpoint(),
                url: "https://example.com/hook?a=1&b=ü".into(),
                event_types,
                tenant,
                enabled,
            };
        let webhook_id = |change, tenant| AuditEvent::WebhookEndpointId {
            change,
            id: endpoint(),
            tenant,
        };
        let cases: Vec<(AuditEvent, &str, &str, String)> = vec![
            (
                created(
                    ID,
                    "Ünï \"q\" \\",
                    "340282366920938463463374607431768211455",
                ),
                "tenant.created",
                "a",
                r#"{"id":"ten_01ARZ3NDEKTSV4RRFFQ69G5FAV","name":"Ünï \"q\" \\","opening_deposit_atomic":"340282366920938463463374607431768211455"}"#.into(),
            ),
            (
                AuditEvent::TenantCreated {
                    id: tenant(),
                    name: Name::parse("a").expect("name"),
                    opening_deposit: amount("5"),
                    policy: Some(calendar()),
                    thresholds: two(),
                },
                "tenant.created",
                "a",
                r#"{"id":"ten_01ARZ3NDEKTSV4RRFFQ69G5FAV","name":"a","opening_deposit_atomic":"5","period":{"interval":"month","time_zone":"Europe/Berlin","allowance_atomic":"1000","rollover_max_atomic":"250"},"alert_thresholds_atomic":["500","100"]}"#.into(),
            ),
            (
                AuditEvent::TenantCreated {
                    id: tenant(),
                    name: Name::parse("a").expect("name"),
                    opening_deposit: amount("5"),
                    policy: None,
                    thresholds: Thresholds::new(vec![amount("7")]).expect("thresholds"),
                },
                "tenant.created",
                "a",
                r#"{"id":"ten_01ARZ3NDEKTSV4RRFFQ69G5FAV","name":"a","opening_deposit_atomic":"5","period":null,"alert_thresholds_atomic":["7"]}"#.into(),
            ),
            (
                AuditEvent::TenantTombstoned { id: tenant() },
                "tenant.tombstoned",
                "a",
                r#"{"id":"ten_01ARZ3NDEKTSV4RRFFQ69G5FAV"}"#.into(),
            ),
            (
                AuditEvent::BudgetCreated {
                    tenant: tenant(),
                    id: budget(),
                    name: Name::parse("gpu").expect("name"),
                    unit: Unit::parse("tokens").expect("unit"),
                    opening_deposit: amount("0"),
                    policy: None,
                    thresholds: Thresholds::default(),
                    parent: None,
                },
                "budget.created",
                "a",
                r#"{"id":"bud_01ARZ3NDEKTSV4RRFFQ69G5FAW","name":"gpu","unit":"tokens","opening_deposit_atomic":"0"}"#.into(),
            ),
            (
                AuditEvent::BudgetCreated {
                    tenant: tenant(),
                    id: budget(),
                    name: Name::parse("team").expect("name"),
                    unit: Unit::atomic(),
                    opening_deposit: amount("5"),
                    policy: None,
                    thresholds: Thresholds::from_column("3").expect("thresholds"),
                    parent: Some(tenant().default_budget()),
                },
                "budget.created",
                "a",
                r#"{"id":"bud_01ARZ3NDEKTSV4RRFFQ69G5FAW","name":"team","unit":"atomic","opening_deposit_atomic":"5","period":null,"alert_thresholds_atomic":["3"],"parent_id":"bud_01ARZ3NDEKTSV4RRFFQ69G5FAV"}"#.into(),
            ),
            (
                AuditEvent::BudgetCreated {
                    tenant: tenant(),
                    id: budget(),
                    name: Name::parse("gpu").expect("name"),
                    unit: Unit::parse("tokens").expect("unit"),
                    opening_deposit: amount("9"),
                    policy: Some(fixed()),
                    thresholds: Thresholds::default(),
                    parent: None,
                },
                "budget.created",
                "a",
                r#"{"id":"bud_01ARZ3NDEKTSV4RRFFQ69G5FAW","name":"gpu","unit":"tokens","opening_deposit_atomic":"9","period":{"every_seconds":3600,"allowance_atomic":"5","rollover_max_atomic":"0"},"alert_thresholds_atomic":[]}"#.into(),
            ),
            (
                AuditEvent::BudgetClosed {
                    tenant: tenant(),
                    id: budget(),
                },
                "budget.closed",
                "a",
                r#"{"id":"bud_01ARZ3NDEKTSV4RRFFQ69G5FAW"}"#.into(),
            ),
            (
                AuditEvent::BudgetUpdated {
                    tenant: tenant(),
                    id: budget(),
                    policy: Some(calendar()),
                    thresholds: two(),
                },
                "budget.updated",
                "a",
                r#"{"id":"bud_01ARZ3NDEKTSV4RRFFQ69G5FAW","period":{"interval":"month","time_zone":"Europe/Berlin","allowance_atomic":"1000","rollover_max_atomic":"250"},"alert_thresholds_atomic":["500","100"]}"#.into(),
            ),
            (
                AuditEvent::BudgetUpdated {
                    tenant: tenant(),
                    id: budget(),
                    policy: None,
                    thresholds: Thresholds::default(),
                },
                "budget.updated",
                "a",
                r#"{"id":"bud_01ARZ3NDEKTSV4RRFFQ69G5FAW","period":null,"alert_thresholds_atomic":[]}"#.into(),
            ),
            (
                AuditEvent::BudgetPeriodReset {
                    tenant: tenant(),
                    budget: budget(),
                    started_at: later,
                    kind: EntryKind::Refill,
                    amount: amount("750"),
                },
                "budget.period_reset",
                "s",
                r#"{"budget_id":"bud_01ARZ3NDEKTSV4RRFFQ69G5FAW","period_started_at":"2026-12-01T00:00:00.000Z","kind":"refill","amount_atomic":"750"}"#.into(),
            ),
            (
                AuditEvent::BudgetPeriodReset {
                    tenant: tenant(),
                    budget: budget(),
                    started_at: later,
                    kind: EntryKind::Forfeit,
                    amount: amount("3"),
                },
                "budget.period_reset",
                "s",
                r#"{"budget_id":"bud_01ARZ3NDEKTSV4RRFFQ69G5FAW","period_started_at":"2026-12-01T00:00:00.000Z","kind":"forfeit","amount_atomic":"3"}"#.into(),
            ),
            (
                moved(Direction::Credit, Some("top-up ü")),
                "budget.credited",
                "a",
                r#"{"budget_id":"bud_01ARZ3NDEKTSV4RRFFQ69G5FAW","amount_atomic":"100","memo":"top-up ü"}"#.into(),
            ),
            (
                moved(Direction::Debit, None),
                "budget.debited",
                "a",
                r#"{"budget_id":"bud_01ARZ3NDEKTSV4RRFFQ69G5FAW","amount_atomic":"100","memo":null}"#.into(),
            ),
            (
                moved(Direction::Charge, Some("")),
                "budget.charged",
                "at",
                r#"{"budget_id":"bud_01ARZ3NDEKTSV4RRFFQ69G5FAW","amount_atomic":"100","memo":""}"#.into(),
            ),
            (
                AuditEvent::ReservationCreated {
                    tenant: tenant(),
                    id: reservation(),
                    budget: budget(),
                    amount: amount("300"),
                    expires_at: later,
                },
                "reservation.created",
                "at",
                r#"{"id":"res_01ARZ3NDEKTSV4RRFFQ69G5FAX","budget_id":"bud_01ARZ3NDEKTSV4RRFFQ69G5FAW","amount_atomic":"300","expires_at":"2026-12-01T00:00:00.000Z"}"#.into(),
            ),
            (
                AuditEvent::ReservationCommitted {
                    tenant: tenant(),
                    id: reservation(),
                    amount: amount("250"),
                },
                "reservation.committed",
                "at",
                r#"{"id":"res_01ARZ3NDEKTSV4RRFFQ69G5FAX","amount_atomic":"250"}"#.into(),
            ),
            (
                AuditEvent::ReservationReleased {
                    tenant: tenant(),
                    id: reservation(),
                },
                "reservation.released",
                "at",
                r#"{"id":"res_01ARZ3NDEKTSV4RRFFQ69G5FAX"}"#.into(),
            ),
            (
                AuditEvent::ReservationExtended {
                    tenant: tenant(),
                    id: reservation(),
                    expires_at: later,
                },
                "reservation.extended",
                "at",
                r#"{"id":"res_01ARZ3NDEKTSV4RRFFQ69G5FAX","expires_at":"2026-12-01T00:00:00.000Z"}"#.into(),
            ),
            (
                AuditEvent::ReservationExpired {
                    tenant: tenant(),
                    id: reservation(),
                },
                "reservation.expired",
                "s",
                r#"{"id":"res_01ARZ3NDEKTSV4RRFFQ69G5FAX"}"#.into(),
            ),
            (
                webhook(EndpointChange::Created, Some(tenant()), only.clone(), true),
                "webhook_endpoint.created",
                "a",
                r#"{"id":"whe_01ARZ3NDEKTSV4RRFFQ69G5FAY","url":"https://example.com/hook?a=1&b=ü","event_types":["tenant.created","budget.credited"],"tenant_id":"ten_01ARZ3NDEKTSV4RRFFQ69G5FAV","enabled":true}"#.into(),
            ),
            (
                webhook(EndpointChange::Updated, None, EventTypes::All, false),
                "webhook_endpoint.updated",
                "as",
                r#"{"id":"whe_01ARZ3NDEKTSV4RRFFQ69G5FAY","url":"https://example.com/hook?a=1&b=ü","event_types":["*"],"tenant_id":null,"enabled":false}"#.into(),
            ),
            (
                webhook(EndpointChange::Updated, Some(tenant()), only, true),
                "webhook_endpoint.updated",
                "a",
                r#"{"id":"whe_01ARZ3NDEKTSV4RRFFQ69G5FAY","url":"https://example.com/hook?a=1&b=ü","event_types":["tenant.created","budget.credited"],"tenant_id":"ten_01ARZ3NDEKTSV4RRFFQ69G5FAV","enabled":true}"#.into(),
            ),
            (
                webhook_id(EndpointChange::Deleted, None),
                "webhook_endpoint.deleted",
                "a",
                r#"{"id":"whe_01ARZ3NDEKTSV4RRFFQ69G5FAY"}"#.into(),
            ),
            (
                webhook_id(EndpointChange::SecretRotated, Some(tenant())),
                "webhook_endpoint.secret_rotated",
                "a",
                r#"{"id":"whe_01ARZ3NDEKTSV4RRFFQ69G5FAY"}"#.into(),
            ),
        ];
        let mut differ = Vec::new();
        for (event, action, recorders, payload) in &cases {
            let text = event.payload();
            if text != *payload {
                differ.push(format!("{action}: {text}"));
            }
            assert_eq!(event.action(), *action, "{event:?}");
            let column = event.tenant_id().map_or("", TenantId::as_str);
            assert_eq!(
                AuditEvent::parse(action, column, &text).as_ref(),
                Ok(event),
                "{action} reads back from {text}"
            );
            for (actor, letter) in [
                ("admin", 'a'),
                ("oidc:u", 'a'),
                ("tenant", 't'),
                ("system", 's'),
            ] {
                assert_eq!(
                    event.may_be_recorded_by(actor),
                    recorders.contains(letter),
                    "{action} by {actor}"
                );
            }
        }
        assert!(
            differ.is_empty(),
            "rendered differently:\n{}",
            differ.join("\n")
        );
    }

    #[test]
    fn the_chain_catches_gaps_and_bad_links() {
        let event = created(ID, "a", "1");
        let first = Head::genesis().link(AT, &Actor::Admin, &event);
        let mut chain = Chain::default();
        chain.push(&first).expect("the first row");
        let mut skipped = first.head().link(AT, &Actor::Admin, &event);
        skipped.entry.seq += 1;
        assert!(matches!(
            chain.push(&skipped),
            Err(VerifyError::Broken { seq: 2, .. })
        ));
        let mut relinked = first.head().link(AT, &Actor::Admin, &event);
        relinked.prev_hash = GENESIS_HASH.into();
        assert!(matches!(
            chain.push(&relinked),
            Err(VerifyError::Broken { seq: 2, .. })
        ));
        assert_eq!(chain.head(), &first.head());
    }
}
