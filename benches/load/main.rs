//! `make bench`: a closed-loop load generator for tenantd.
//!
//! It starts the release binary on 127.0.0.1 with a fresh temporary database, drives it over
//! keep-alive connections (each sends a request, waits for the whole answer, sends the next),
//! records every latency in an HDR histogram, and prints one markdown table: requests/s,
//! p50/p99/p99.9, errors (any non-2xx), server CPU µs per request (from `/proc/PID/stat`) and
//! the server's peak RSS (`VmHWM`). The client is one thread speaking raw HTTP/1.1, so it
//! leaves the server as much of the machine as it can.
//!
//! `--smoke` is a run of a few seconds that fails on any error; CI runs it so the generator
//! cannot rot.
//!
//! With `--postgres ADMIN_URL --postgres-url URL` every server serves from a fresh database of
//! its own on that PostgreSQL cluster (made with `CREATE DATABASE … OWNER tenantd` through
//! `psql ADMIN_URL`, dropped `WITH (FORCE)` when the server stops), and `--instances N` starts
//! N tenantd processes on it, the load's connections dealt out to them round-robin (each with
//! `--pg-writers 1` unless `--pg-writers` says otherwise, as `docs/postgres.md` advises). The server
//! CPU and peak RSS are then sums over the instances; the table adds the cluster's own CPU
//! (the postmaster and its children, from `/proc`, when the cluster runs on this machine) and
//! the commands per batch the writers committed (from `/metrics`), in place of WAL frames.
//!
//! Requests are written and responses parsed by the black-box tests' wire-level client
//! (`tests/wire/`), into buffers each connection reuses, so the client allocates nothing per
//! request. The PostgreSQL databases are the tests' scratch databases (`tests/scratch/`).
//!
//! # Layout
//!
//! - `main.rs`: which groups of rows run, in what order, each on a server of its own;
//! - `args.rs`: the command line (`--help` lists every flag), presets resolved;
//! - `server.rs`: tenantd started on a fresh database and stopped, and what it costs;
//! - `client.rs`: one connection's requests, their latencies and statuses;
//! - `workloads.rs`: the requests of each row, the phases that send them, the seeding;
//! - `spend.rs`: the reserve+commit rows, charges and credits;
//! - `accounts.rs`: what the spending rows acknowledged, against every budget read at the end;
//! - `tree.rs`: charges on a leaf with 3 ancestors against charges on a flat budget, and
//!   every budget checked at the end; `forest.rs`, the trees whose upper levels many keys
//!   share;
//! - `batch.rs`: charges one a request against batches of 100 and of 1,000, over the same
//!   1,000 budgets, and every budget checked at the end; `batch_summary.rs`, their ratios;
//! - `webhooks.rs`: deliveries to a receiver of its own, and the spend path beside endpoints;
//! - `admin.rs`: the admin's connection, and what the checks read of a budget;
//! - `report.rs`: the markdown table and the comparisons under it.

mod accounts;
mod admin;
mod args;
mod batch;
mod batch_summary;
mod boundary;
mod client;
mod delay;
mod forest;
mod report;
mod server;
mod spend;
mod tree;
mod webhooks;
mod workloads;

// The load generator uses the scratch database's making and dropping and its psql, not the
// test environment's variables; the file is shared with the tests (see its own doc).
#[allow(dead_code)]
#[path = "../../tests/scratch/mod.rs"]
mod scratch;

// The load generator uses the request writer, the response parser and a one-shot request
// (to wait for the server); the rest of the module (the blocking connection's finer tools)
// serves the tests only.
#[allow(dead_code)]
#[path = "../../tests/wire/mod.rs"]
mod wire;

use std::fmt::Write as _;
use std::sync::Arc;

use crate::accounts::{check_budget, check_spread};
use crate::args::{Args, Group};
use crate::client::tenant_path;
use crate::report::render;
use crate::server::Server;
use crate::spend::{
    SPREAD_BUDGETS, measure_alone, measure_charges, measure_credits, measure_cycles,
};
use crate::workloads::{Kind, SEED_DEPOSIT, measure, seed};

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let report = runtime.block_on(run(&args));
    match report {
        Ok(report) => {
            print!("{}", report.text);
            if args.smoke && report.errors > 0 {
                eprintln!("smoke run: {} requests failed", report.errors);
                std::process::exit(1);
            }
        }
        Err(e) => {
            eprintln!("bench failed: {e}");
            std::process::exit(1);
        }
    }
}

/// What a run prints, and how many of its requests failed.
struct Report {
    text: String,
    errors: u64,
}

/// Runs the groups of rows `args` asks for, each on a server of its own, and renders the
/// table.
async fn run(args: &Args) -> Result<Report, String> {
    let wanted = |group: Group| args.only.is_none_or(|only| only == group);
    let mut rows = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let no_paths = Arc::new(Vec::new());
    let mut db_bytes = 0;
    if let Some(postgres) = args.postgres.as_ref().filter(|p| !p.delay.is_zero()) {
        let line = server::round_trip_line(&postgres.url, postgres.delay)?;
        eprintln!("{line}");
        notes.push(line);
    }

    if wanted(Group::Base) {
        eprintln!("server: health, reads and the mix at {} tenants", args.base);
        let server = Server::start(args, &[])?;
        rows.push(measure(args, &server, "GET /healthz", Kind::Healthz, &no_paths).await?);
        let paths = Arc::new(seed(&server, args, 0, args.base).await?);
        let name = format!("GET tenant ({} tenants)", args.base);
        rows.push(measure(args, &server, &name, Kind::Read, &paths).await?);
        let name = format!("GET tenant, own token ({} tenants)", args.base);
        rows.push(measure(args, &server, &name, Kind::ReadOwn, &paths).await?);
        let name = format!("GET budget ({} tenants)", args.base);
        rows.push(measure(args, &server, &name, Kind::ReadBudget, &paths).await?);
        let mix = Kind::Mix { read_percent: 90 };
        rows.push(measure(args, &server, "90 % read / 10 % create", mix, &paths).await?);
        server.stop();
    }
    if wanted(Group::Create) {
        eprintln!("server: creates with group commit");
        let server = Server::start(args, &[])?;
        let name = "POST create (group commit)";
        rows.push(measure(args, &server, name, Kind::Create, &no_paths).await?);
        notes.extend(server.notes("creates"));
        server.stop();
    }
    if wanted(Group::Create1) {
        eprintln!("server: creates with --commit-batch-max 1");
        let server = Server::start(args, &["--commit-batch-max", "1"])?;
        let name = "POST create (--commit-batch-max 1)";
        rows.push(measure(args, &server, name, Kind::Create, &no_paths).await?);
        server.stop();
    }
    if wanted(Group::Spend) {
        eprintln!("server: reserve+commit cycles over {SPREAD_BUDGETS} budgets, then on one");
        let server = Server::start(args, &[])?;
        let spread = Arc::new(seed(&server, args, 0, SPREAD_BUDGETS).await?);
        let name = format!("{SPREAD_BUDGETS} budgets");
        let (cycle_rows, mut on_spread) = measure_cycles(args, &server, &name, &spread).await?;
        rows.extend(cycle_rows);
        let name = format!("{SPREAD_BUDGETS} budgets, each kind alone");
        let (alone_rows, alone) = measure_alone(args, &server, &name, &spread).await?;
        rows.extend(alone_rows);
        let name = format!("{SPREAD_BUDGETS} budgets");
        let (charge_rows, charged) = measure_charges(args, &server, &name, &spread).await?;
        rows.extend(charge_rows);
        let (credit_rows, credited) = measure_credits(args, &server, &name, &spread).await?;
        rows.extend(credit_rows);
        for phase in [alone, charged, credited] {
            on_spread.add(phase);
        }
        notes.push(check_spread(&server, &spread, SEED_DEPOSIT, on_spread)?);
        let auth = format!("Bearer {}", server.token);
        let deposit = u128::from(u64::MAX);
        let body = format!(r#"{{"name":"hot-budget","opening_deposit_atomic":"{deposit}"}}"#);
        let headers = [
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ];
        let created = wire::request(
            &server.addr(0).to_string(),
            "POST",
            "/v1/tenants",
            &headers,
            Some(body.as_bytes()),
        );
        let hot = Arc::new(vec![
            tenant_path(&created.body).ok_or("the hot tenant was not created")?,
        ]);
        let (hot_rows, on_hot) = measure_cycles(args, &server, "one hot budget", &hot).await?;
        rows.extend(hot_rows);
        notes.push(check_budget(&server, &hot[0], deposit, on_hot)?);
        notes.extend(server.notes("spends, charges and credits"));
        server.stop();
    }
    if wanted(Group::Tree) {
        let (tree_rows, tree_notes) = tree::measure(args).await?;
        rows.extend(tree_rows);
        notes.extend(tree_notes);
    }
    if wanted(Group::Batch) {
        let (batch_rows, batch_notes) = batch::measure(args).await?;
        rows.extend(batch_rows);
        notes.extend(batch_notes);
    }
    if wanted(Group::Scale) {
        eprintln!("server: reads at {} tenants", args.scale);
        let server = Server::start(args, &[])?;
        let paths = Arc::new(seed(&server, args, 0, args.scale).await?);
        db_bytes = server.db_bytes();
        if server.database.is_some() {
            eprintln!("  database {:.1} MiB", db_bytes as f64 / 1048576.0);
        } else {
            eprintln!(
                "  database {:.1} MiB, of which WAL {:.1} MiB",
                db_bytes as f64 / 1048576.0,
                server.file_bytes("tenantd.db-wal") as f64 / 1048576.0
            );
        }
        let name = format!("GET tenant ({} tenants)", args.scale);
        rows.push(measure(args, &server, &name, Kind::Read, &paths).await?);
        let name = format!(
            "GET tenants, 25 after one at random ({} tenants)",
            args.scale
        );
        rows.push(measure(args, &server, &name, Kind::ListPage, &paths).await?);
        let name = format!(
            "GET tenants, name_contains matching none ({} tenants)",
            args.scale
        );
        rows.push(measure(args, &server, &name, Kind::SearchNone, &paths).await?);
        server.stop();
    }

    if wanted(Group::Webhooks) {
        let (webhook_rows, webhook_notes) = webhooks::measure(args).await?;
        rows.extend(webhook_rows);
        notes.extend(webhook_notes);
    }

    // The boundary row reads the SQLite file itself; on PostgreSQL it is asked for alone.
    if wanted(Group::Boundary) && (args.postgres.is_none() || args.only.is_some()) {
        let (boundary_rows, note) = boundary::measure(args).await?;
        rows.extend(boundary_rows);
        notes.push(note);
    } else if wanted(Group::Boundary) {
        notes.push("the mass-boundary row runs on SQLite only: not run here".into());
    }

    let mut text = render(args, &rows, db_bytes);
    for note in notes {
        let _ = writeln!(text, "- {note}");
    }
    let errors = rows.iter().map(|r| r.tally.errors).sum();
    Ok(Report { text, errors })
}
