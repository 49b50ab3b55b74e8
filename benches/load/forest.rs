//! Trees as a platform keeps them, beside the chains of [`super::tree`]: [`TREES`] tenants,
//! each with one organisation over [`TEAMS`] teams, each team over [`PROJECTS`] projects and
//! each project over [`KEYS`] keys. That makes 1,000 keys, each with 3 ancestors that it
//! shares with its siblings and cousins, where each chain's key has ancestors of its own. At
//! the end every budget of these tenants is read: each must have spent exactly what was
//! acknowledged on the keys under it (and on itself, if it is a key), and none may be
//! overspent.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::admin::{Admin, admin_auth, figure, grouped, within_invariant};
use crate::client::{Seeded, seed_from_clock};
use crate::server::Server;

/// Tenants with one tree each.
pub(crate) const TREES: usize = 10;

/// Teams under each organisation.
const TEAMS: usize = 4;

/// Projects under each team.
const PROJECTS: usize = 5;

/// Keys under each project.
const KEYS: usize = 5;

/// The keys of all trees, in all: what the measured row's name gives.
pub(crate) const LEAVES: usize = TREES * TEAMS * PROJECTS * KEYS;

/// The trees, made: their tenants, and their keys as targets of charges.
pub(crate) struct Forest {
    tenants: Vec<Seeded>,
    /// Each key's tenant (an index into `tenants`) and its ancestors' ids, nearest first.
    above: Vec<(usize, [String; 3])>,
    /// The keys, as charges name them: each with its tenant's path and token.
    pub(crate) keys: Arc<Vec<Seeded>>,
}

impl Forest {
    /// Makes [`TREES`] tenants and their trees, each tenant's on a connection of its own, a
    /// budget at a time (each made after its parent, the organisation first).
    pub(crate) async fn seed(server: &Server) -> Result<Forest, String> {
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(TREES);
        for i in 0..TREES {
            let admin = Admin::open(server.addr(i), admin_auth(server)).await?;
            tasks.push(tokio::spawn(plant(admin, i)));
        }
        let (mut tenants, mut above, mut keys) = (Vec::new(), Vec::new(), Vec::new());
        for (i, task) in tasks.into_iter().enumerate() {
            let (tenant, tree) = task.await.map_err(|e| e.to_string())??;
            for (key, ancestors) in tree {
                keys.push(Seeded {
                    path: tenant.path.clone(),
                    budget_path: format!("{}/budgets/{key}", tenant.path),
                    budget_id: key,
                    auth: tenant.auth.clone(),
                });
                above.push((i, ancestors));
            }
            tenants.push(tenant);
        }
        eprintln!(
            "  seeded {TREES} trees of {LEAVES} keys in all ({:.1} s)",
            started.elapsed().as_secs_f64()
        );
        Ok(Forest {
            tenants,
            above,
            keys: Arc::new(keys),
        })
    }

    /// Reads every budget of the trees' tenants and checks them: each within its invariant,
    /// and each having spent exactly the charges `acked` on the keys under it (the keys in
    /// the order of [`Forest::keys`]).
    pub(crate) async fn check(&self, server: &Server, acked: &[u64]) -> Result<String, String> {
        let mut expected: Vec<HashMap<&str, u128>> = vec![HashMap::new(); self.tenants.len()];
        for ((key, (tenant, ancestors)), &n) in self.keys.iter().zip(&self.above).zip(acked) {
            let levels = std::iter::once(&key.budget_id).chain(ancestors);
            for id in levels {
                *expected[*tenant].entry(id.as_str()).or_default() += u128::from(n);
            }
        }
        let mut admin = Admin::open(server.addr(0), admin_auth(server)).await?;
        let mut read = 0;
        for (tenant, expected) in self.tenants.iter().zip(&expected) {
            let budgets = admin.budgets(&tenant.path).await?;
            for budget in &budgets {
                within_invariant(budget)?;
                let id = budget["id"].as_str().unwrap_or_default();
                let want = expected.get(id).copied().unwrap_or(0);
                let spent = figure(budget, "spent_atomic")?;
                if spent != want {
                    return Err(format!(
                        "{}: budget {id} spent {spent}, but {want} charges were acknowledged \
                         on it and the keys under it",
                        tenant.path
                    ));
                }
            }
            // Every level, and the default budget.
            if budgets.len() != expected.len() + 1 {
                return Err(format!(
                    "{}: {} budgets listed, {} made",
                    tenant.path,
                    budgets.len(),
                    expected.len() + 1
                ));
            }
            read += budgets.len() as u64;
        }
        Ok(format!(
            "trees at the end: {} budgets of {TREES} tenants read; every level spent exactly \
             the charges acknowledged under it ({} in all); nothing overspent at any level",
            grouped(read),
            grouped(acked.iter().sum())
        ))
    }
}

/// Makes tree `i`: its tenant, then its budgets, each after its parent. The tenant, and each
/// key's id with its ancestors' ids, nearest first.
async fn plant(mut admin: Admin, i: usize) -> Result<(Seeded, Vec<(String, [String; 3])>), String> {
    let tenant = admin
        .create_tenant(&format!("forest-{i}-{:x}", seed_from_clock()))
        .await?;
    let path = tenant.path.as_str();
    let org = admin.create_budget(path, "org", None).await?;
    let mut keys = Vec::with_capacity(TEAMS * PROJECTS * KEYS);
    for t in 0..TEAMS {
        let team = admin
            .create_budget(path, &format!("team-{t}"), Some(&org))
            .await?;
        for p in 0..PROJECTS {
            let name = format!("project-{t}-{p}");
            let project = admin.create_budget(path, &name, Some(&team)).await?;
            for k in 0..KEYS {
                let name = format!("key-{t}-{p}-{k}");
                let key = admin.create_budget(path, &name, Some(&project)).await?;
                keys.push((key, [project.clone(), team.clone(), org.clone()]));
            }
        }
    }
    Ok((tenant, keys))
}
