//! The sender: delivers each pending delivery to its endpoint, at least once, as the contract
//! says. One task a process; a task for each endpoint it holds.
//!
//! - **Leases.** An instance sends to an endpoint only while it holds the endpoint's lease
//!   (written through the store, so several instances on one PostgreSQL deliver as if one
//!   did): it takes free leases and renews its own every [`RENEW_EVERY`], for [`LEASE`] or
//!   an attempt's timeout and a second, whichever is longer.
//!   An instance that stops sending loses its endpoints when their leases run out; on SQLite
//!   the one process that writes the file takes every lease at start.
//! - **At most [`IN_FLIGHT_MAX`] attempts in flight an endpoint**, by a semaphore of the
//!   endpoint's task. A slot frees when its attempt ends; the attempt's outcome is written
//!   after, while the next attempt already runs, and the delivery is not read again until
//!   that write is done.
//! - **One slow endpoint never delays another**: each endpoint has its own task and slots,
//!   and an attempt's whole time is bounded by `--webhook-timeout`. API requests share only
//!   the store's queues with the sender, which writes one small row an attempt.
//! - A delivery whose outcome was not written (a crash, a lost lease) is attempted again:
//!   deliveries are at least once, and the receiver tells duplicates by `webhook-id`.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Semaphore, watch};

use super::flags::WebhookConfig;
use super::{Client, ClientConfig, Headers, Outcome, Secret, url};
use crate::domain::{DeliveryId, EndpointId, Timestamp};
use crate::metrics::Metrics;
use crate::store::Store;
use crate::store::ops::{Attempted, ClaimEndpoints, RecordAttempt};
use crate::store::{Due, Sending};
use crate::views;

/// Attempts in flight to one endpoint, at most (the contract's bound).
pub(crate) const IN_FLIGHT_MAX: usize = 4;

/// How long an endpoint's lease lasts unless renewed.
pub(crate) const LEASE: Duration = Duration::from_secs(5);

/// How often an instance renews its leases and takes free ones.
pub(crate) const RENEW_EVERY: Duration = Duration::from_secs(1);

/// How often the endpoints are read again (a changed URL or secret, one enabled or
/// disabled), and how long an endpoint's task waits before it looks again for due deliveries
/// when it found none.
pub(crate) const POLL: Duration = Duration::from_millis(100);

/// The longest an endpoint's task waits before it looks again for due deliveries: it waits
/// [`POLL`] after finding none, twice as long after finding none again, up to this.
pub(crate) const IDLE_POLL_MAX: Duration = Duration::from_millis(400);

/// How long a delivery whose outcome could not be written waits before it is attempted again.
pub(crate) const RECORD_BACKOFF: Duration = Duration::from_secs(5);

/// Deliveries read at once for one endpoint, beyond those it is sending.
pub(crate) const READ_BATCH: usize = 64;

/// What every endpoint's task shares.
struct Shared {
    store: Store,
    client: Client,
    config: WebhookConfig,
    metrics: Arc<Metrics>,
}

/// Starts the sender: `owner` names this instance in leases; `takes_all` is set when the
/// database has no other writer (a SQLite file), so leases from before a restart are its own.
pub(crate) fn start(
    store: Store,
    config: WebhookConfig,
    metrics: Arc<Metrics>,
    owner: String,
    takes_all: bool,
) -> Result<tokio::task::JoinHandle<()>, String> {
    let client = Client::new(ClientConfig {
        timeout: config.timeout,
        allow_private: config.allow_private,
        ca_file: config.ca_file.clone(),
    })?;
    let shared = Arc::new(Shared {
        store,
        client,
        config,
        metrics,
    });
    Ok(tokio::spawn(run(shared, owner.into(), takes_all)))
}

/// The sender's loop: leases, then each held endpoint's task, kept in step with what the
/// database says.
async fn run(shared: Arc<Shared>, owner: Arc<str>, mut takes_all: bool) {
    let mut tasks: HashMap<EndpointId, (watch::Sender<Sending>, tokio::task::JoinHandle<()>)> =
        HashMap::new();
    let mut lanes: HashMap<EndpointId, Arc<Lane>> = HashMap::new();
    let mut renew_at = tokio::time::Instant::now();
    let mut poll = tokio::time::interval(POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        poll.tick().await;
        let now = Timestamp::from_unix_ms(crate::ids::now_unix_ms());
        let read = shared.store.sending(Arc::clone(&owner), now).await;
        let (mine, free) = match read {
            Ok(read) => read,
            Err(e) => {
                log::warn!("the webhook sender cannot read its endpoints: {e:?}");
                continue;
            }
        };
        if free || takes_all || tokio::time::Instant::now() >= renew_at {
            let claim = ClaimEndpoints {
                owner: owner.to_string(),
                lease: LEASE.max(shared.config.timeout + Duration::from_secs(1)),
                take_all: takes_all,
            };
            match shared.store.write(claim).await {
                Ok(_) => {
                    takes_all = false;
                    renew_at = tokio::time::Instant::now() + RENEW_EVERY;
                }
                Err(e) => log::warn!("the webhook sender cannot renew its leases: {e:?}"),
            }
            if let Ok(Some(age)) = shared.store.oldest_pending(now).await {
                shared.metrics.oldest_pending(age);
            } else {
                shared.metrics.oldest_pending(Duration::ZERO);
            }
        }
        let held: HashSet<EndpointId> = mine.iter().map(|s| s.id.clone()).collect();
        tasks.retain(|id, (_, task)| {
            let keep = held.contains(id) && !task.is_finished();
            if !keep {
                task.abort();
            }
            keep
        });
        // A lane outlives its task while attempts it started still run, so an endpoint sent
        // to again (enabled again, its lease taken back) waits for them.
        lanes.retain(|id, lane| held.contains(id) || !lane.idle());
        for sending in mine {
            match tasks.get(&sending.id) {
                Some((tx, _)) => {
                    tx.send_if_modified(|current| {
                        let changed = *current != sending;
                        if changed {
                            *current = sending.clone();
                        }
                        changed
                    });
                }
                None => {
                    let id = sending.id.clone();
                    let lane = Arc::clone(lanes.entry(id.clone()).or_default());
                    let (tx, rx) = watch::channel(sending);
                    let task =
                        tokio::spawn(endpoint_task(Arc::clone(&shared), lane, id.clone(), rx));
                    tasks.insert(id, (tx, task));
                }
            }
        }
    }
}

/// One endpoint's slots and the deliveries it is sending: kept by the sender for as long as
/// the endpoint is held or an attempt to it still runs, whichever task started it.
struct Lane {
    slots: Arc<Semaphore>,
    busy: Arc<Mutex<Busy>>,
}

impl Default for Lane {
    fn default() -> Self {
        Self {
            slots: Arc::new(Semaphore::new(IN_FLIGHT_MAX)),
            busy: Arc::default(),
        }
    }
}

impl Lane {
    /// Whether no attempt runs and none waits for its outcome to be written.
    fn idle(&self) -> bool {
        self.slots.available_permits() == IN_FLIGHT_MAX
            && self
                .busy
                .lock()
                .expect("the busy set is never poisoned")
                .ids
                .values()
                .all(Option::is_some)
    }
}

/// Sends one endpoint's due deliveries, [`IN_FLIGHT_MAX`] at a time.
async fn endpoint_task(
    shared: Arc<Shared>,
    lane: Arc<Lane>,
    endpoint: EndpointId,
    sending: watch::Receiver<Sending>,
) {
    let (slots, busy) = (Arc::clone(&lane.slots), Arc::clone(&lane.busy));
    let mut idle = POLL;
    loop {
        // Wait for a free slot before reading, so what is read is sent at once.
        match Arc::clone(&slots).acquire_owned().await {
            Ok(slot) => drop(slot),
            Err(_) => return,
        }
        let now = Timestamp::from_unix_ms(crate::ids::now_unix_ms());
        let skip = busy
            .lock()
            .expect("the busy set is never poisoned")
            .read_begins();
        let due = match shared
            .store
            .due_deliveries(endpoint.clone(), now, READ_BATCH + skip)
            .await
        {
            Ok(due) => due,
            Err(e) => {
                log::warn!(
                    "the webhook sender cannot read endpoint {endpoint}'s deliveries: {e:?}"
                );
                tokio::time::sleep(POLL).await;
                continue;
            }
        };
        let fresh: Vec<Due> = {
            let busy = busy.lock().expect("the busy set is never poisoned");
            due.into_iter()
                .filter(|d| !busy.ids.contains_key(&d.delivery))
                .collect()
        };
        if fresh.is_empty() {
            tokio::time::sleep(idle).await;
            idle = (idle * 2).min(IDLE_POLL_MAX);
            continue;
        }
        idle = POLL;
        for due in fresh {
            let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
                return;
            };
            busy.lock()
                .expect("the busy set is never poisoned")
                .ids
                .insert(due.delivery.clone(), None);
            let target = sending.borrow().clone();
            let (shared, busy) = (Arc::clone(&shared), Arc::clone(&busy));
            tokio::spawn(async move {
                let id = due.delivery.clone();
                let attempted = attempt(&shared, &target, due, slot).await;
                record(&shared, attempted).await;
                busy.lock()
                    .expect("the busy set is never poisoned")
                    .recorded(id);
            });
        }
    }
}

/// The deliveries of one endpoint that a read must not take for due: those being attempted,
/// and those whose outcome was written while a read may have been under way (that read's
/// snapshot can still show them pending).
#[derive(Default)]
struct Busy {
    /// Reads begun so far.
    reads: u64,
    /// A delivery being attempted (`None`), or recorded while read `n` was the last begun.
    ids: HashMap<DeliveryId, Option<u64>>,
}

impl Busy {
    /// A read begins: deliveries recorded before it are seen as they are and leave the set.
    /// How many stay (the read asks for that many more).
    fn read_begins(&mut self) -> usize {
        self.reads += 1;
        let reads = self.reads;
        self.ids
            .retain(|_, recorded| recorded.is_none_or(|at| at >= reads));
        self.ids.len()
    }

    /// The outcome of `id` is written: no read begun from now on shows it pending.
    fn recorded(&mut self, id: DeliveryId) {
        self.ids.insert(id, Some(self.reads));
    }
}

/// One attempt of `due` to `target`; its slot is given back as soon as the attempt ends.
async fn attempt(
    shared: &Shared,
    target: &Sending,
    due: Due,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> Attempted {
    let body = views::event_json(&due.event).unwrap_or_default();
    let outcome = match (
        url::parse(&target.url, shared.config.allow_http),
        Secret::from_bytes(&due.keys.secret),
    ) {
        (Ok(url), Some(current)) => {
            let timestamp = i64::try_from(crate::ids::now_unix_ms() / 1000).unwrap_or(i64::MAX);
            let previous = due
                .keys
                .previous
                .as_ref()
                .and_then(|p| Secret::from_bytes(p));
            let headers = Headers::sign(
                &due.event.id,
                timestamp,
                body.as_bytes(),
                &current,
                previous.as_ref(),
            );
            shared.client.send(&url, &headers, Bytes::from(body)).await
        }
        // An http:// URL kept from a run with --webhook-allow-http, refused by this one.
        (Err(_), _) => Outcome::RefusedAddress,
        (_, None) => Outcome::ConnectError("the endpoint has no secret"),
    };
    drop(slot);
    shared.metrics.attempt(outcome.label());
    log::debug!(
        "webhook delivery {} to endpoint {}: {}",
        due.delivery,
        target.id,
        outcome.last_error().as_deref().unwrap_or("delivered")
    );
    Attempted {
        delivery: due.delivery,
        endpoint: target.id.clone(),
        succeeded: outcome.succeeded(),
        status: outcome.status(),
        error: outcome.last_error(),
        ended_at: Timestamp::from_unix_ms(crate::ids::now_unix_ms()),
    }
}

/// Writes an attempt's outcome; tried a few times, then given up (the delivery is attempted
/// again, which at least once allows).
async fn record(shared: &Shared, attempted: Attempted) {
    const TRIES: u32 = 3;
    for try_n in 1..=TRIES {
        let op = RecordAttempt {
            attempt: attempted.clone(),
            schedule: shared.config.retry_schedule.clone(),
            disable_after: shared.config.disable_after,
        };
        match shared.store.write(op).await {
            Ok(()) => return,
            Err(e) if try_n < TRIES => {
                log::warn!(
                    "cannot record an attempt of delivery {}: {e:?}; trying again",
                    attempted.delivery
                );
                tokio::time::sleep(POLL).await;
            }
            Err(e) => {
                log::error!(
                    "cannot record an attempt of delivery {}: {e:?}; it will be attempted \
                     again in {} s",
                    attempted.delivery,
                    RECORD_BACKOFF.as_secs()
                );
                // Held back meanwhile, so a store that refuses writes is not sent a flood.
                tokio::time::sleep(RECORD_BACKOFF).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_is_held_back_from_every_read_that_may_show_it_pending() {
        let id = DeliveryId::parse("whd_01ARZ3NDEKTSV4RRFFQ69G5FAV").expect("an id");
        let mut busy = Busy::default();
        busy.ids.insert(id.clone(), None);
        // Read 1 begins while the attempt runs, and its outcome is written meanwhile.
        assert_eq!(busy.read_begins(), 1);
        busy.recorded(id.clone());
        assert!(
            busy.ids.contains_key(&id),
            "read 1's answer may show it pending"
        );
        // Read 2 begins after the write: it sees the delivery as it is.
        assert_eq!(busy.read_begins(), 0);
        assert!(!busy.ids.contains_key(&id));
    }
}
