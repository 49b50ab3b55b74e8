//! The race of `hierarchy::concurrency` on three instances sharing one database: many clients
//! spend at once on every level of a tree whose top level is short of funds, each request to
//! the next instance in turn (so a hold taken through one is committed or released through
//! another), while the upper levels are read through all three. No level is ever overspent:
//! every answer is a success or `409 insufficient_funds` naming the top level; each level
//! reads the same through every instance, its figures what the acknowledged spends on it and
//! under it add up to, its ledger exactly their entries, replaying; the chain has one row per
//! acknowledged spend and `tenantd audit verify` passes.

use super::{INSTANCES, Instances, assert_verifies};
use crate::helpers::*;
use crate::hierarchy::concurrency::{Client, Race};

#[test]
fn three_instances_never_overspend_any_level_of_a_tree() {
    let db = TestDb::new();
    let instances = Instances::start(&db.url, INSTANCES);
    let client = Client::build(&instances.addrs, &instances.admin, "contested-tree");
    let seed = now_ms().unsigned_abs();
    let race = Race::run(&client, seed);
    let summary = race.check(&client, seed, |action| {
        let sql = format!("SELECT count(*) FROM audit_events WHERE action = '{action}'");
        psql(&db.url, &sql).parse().expect("a count")
    });
    assert_verifies(&db.url, &format!("after the race on a tree (seed {seed})"));
    let log = instances.log_text();
    assert!(!log.contains("panicked"), "no instance panicked:\n{log}");
    eprintln!("PostgreSQL: {summary}");
}
