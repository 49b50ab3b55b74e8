//! The crash loop's batcher: batches of 1 to [`OPS_MAX`] charges on a key under its tenant's
//! default budget, half of them atomic, one in four with an operation on a budget that does
//! not exist (refused alone, or failing the whole atomic batch). After each restart every
//! batch is all there or not there at all, an acknowledged one exactly as its answer said,
//! and both levels have spent what their entries add up to.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::helpers::*;

/// Operations in one batch, at most.
const OPS_MAX: u64 = 50;

/// A budget id of the right shape that no budget has.
const NO_SUCH_BUDGET: &str = "bud_00000000000000000000000000";

/// A batch sent: how many of its charges apply, and whether its answer came.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sent {
    applied: usize,
    acknowledged: bool,
}

/// Every batch sent, by the tag its charges' memos begin with.
pub(super) type Batches = HashMap<String, Sent>;

/// The batcher's closed loop until the server goes away.
pub(super) fn batcher(
    (addr, auth): (String, String),
    (tenant, key): (String, String),
    tag: String,
    seed: u64,
    batches: Arc<Mutex<Batches>>,
) {
    let mut rng = Rng::new(seed);
    let path = format!("/v1/tenants/{tenant}/batch");
    for n in 0.. {
        let batch = format!("{tag}-{n}");
        let ops = rng.range(1, OPS_MAX) as usize;
        let atomic = rng.range(0, 1) == 0;
        let refused = (rng.range(0, 3) == 0).then(|| rng.range(0, ops as u64 - 1) as usize);
        let operations: Vec<String> = (0..ops)
            .map(|i| {
                let budget = if refused == Some(i) { NO_SUCH_BUDGET } else { &key };
                format!(
                    r#"{{"op":"charge","budget_id":"{budget}","amount_atomic":"{}","memo":"{batch}/{i}"}}"#,
                    rng.range(1, 9)
                )
            })
            .collect();
        let applied = match (refused, atomic) {
            (None, _) => ops,
            (Some(_), true) => 0,
            (Some(_), false) => ops - 1,
        };
        let body = format!(
            r#"{{"atomic":{atomic},"operations":[{}]}}"#,
            operations.join(",")
        );
        let sent = Sent {
            applied,
            acknowledged: false,
        };
        batches
            .lock()
            .expect("batches lock")
            .insert(batch.clone(), sent);
        let Ok(resp) = try_send(&addr, "POST", &path, &auth, Some(&body), None, &[]) else {
            return;
        };
        let expected = if refused.is_some() && atomic {
            409
        } else {
            200
        };
        assert_eq!(resp.status, expected, "batch {batch}: {}", resp.describe());
        let answer = resp.json();
        let results = if atomic && refused.is_some() {
            assert_eq!(answer["code"], "batch_failed", "batch {batch}");
            &answer["results"]
        } else {
            &answer["results"]
        };
        let statuses: Vec<u64> = results
            .as_array()
            .unwrap_or_else(|| panic!("batch {batch}: results in {answer}"))
            .iter()
            .map(|r| r["status"].as_u64().unwrap_or_default())
            .collect();
        let want: Vec<u64> = (0..ops)
            .map(
                |i| match (refused == Some(i), atomic && refused.is_some()) {
                    (true, _) => 404,
                    (false, true) => 424,
                    (false, false) => 201,
                },
            )
            .collect();
        assert_eq!(statuses, want, "batch {batch}: {answer}");
        if let Some(sent) = batches.lock().expect("batches lock").get_mut(&batch) {
            sent.acknowledged = true;
        }
    }
}

/// Checks every batch after a restart: all of its charges or none on the key, all of them
/// (as answered) for an acknowledged one, and the key and its parent each spent what the
/// key's charges add up to. How many batches were acknowledged, and how many charges stored.
pub(super) fn check_batches(
    app: &TestApp,
    (key, parent): (&str, &str),
    batches: &Batches,
    context: &str,
) -> (usize, usize) {
    let rows = app.text_rows(&format!(
        "SELECT memo, amount_atomic FROM ledger_entries WHERE budget_id = '{key}' \
         AND memo IS NOT NULL"
    ));
    let mut stored: HashMap<&str, usize> = HashMap::new();
    let mut total: u128 = 0;
    for row in &rows {
        let (batch, _) = row[0]
            .split_once('/')
            .unwrap_or_else(|| panic!("{context}: a memo {:?}", row[0]));
        *stored.entry(batch).or_default() += 1;
        total += row[1].parse::<u128>().expect("an amount");
    }
    for (batch, count) in &stored {
        assert!(
            batches.contains_key(*batch),
            "{context}: charges of batch {batch} that was never sent"
        );
        assert!(*count > 0);
    }
    let mut acknowledged = 0;
    for (batch, sent) in batches {
        let count = stored.get(batch.as_str()).copied().unwrap_or(0);
        if sent.acknowledged {
            acknowledged += 1;
            assert_eq!(
                count, sent.applied,
                "{context}: acknowledged batch {batch} has {count} of its {} charges",
                sent.applied
            );
        } else {
            assert!(
                count == 0 || count == sent.applied,
                "{context}: unanswered batch {batch} is in part: {count} of {} charges",
                sent.applied
            );
        }
    }
    for budget in [key, parent] {
        let spent = app.text_rows(&format!(
            "SELECT spent_atomic FROM budgets WHERE id = '{budget}'"
        ));
        assert_eq!(
            spent[0][0],
            total.to_string(),
            "{context}: budget {budget} spent what the key's charges add up to"
        );
    }
    (acknowledged, rows.len())
}
